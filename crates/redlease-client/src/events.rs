//! Following one lease's event stream (`GET /v1/leases/{id}/events`, Server-Sent Events):
//! the watcher task that keeps it open, reopens it when the connection breaks, and settles how
//! the lease ended; and the parser of the stream's text.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{LeaseEnd, LeaseInfo};
use crate::http::{Streaming, Transport};

/// A stream that broke is reopened after this, doubling up to `MAX_REOPEN_BACKOFF`.
const FIRST_REOPEN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_REOPEN_BACKOFF: Duration = Duration::from_secs(1);

/// Keeps a lease's event stream open until the lease ends.
pub(super) struct Watcher {
    http: Transport,
    /// `…/v1/leases/{id}/events`.
    path: String,
    ended: Arc<watch::Sender<Option<LeaseEnd>>>,
    /// When the validity last reported runs out (as of when the report arrived): with no
    /// word from the sidecar by then, the lease is taken as ended.
    deadline: Instant,
    /// The guard's view of `deadline`.
    validity: watch::Sender<Instant>,
}

/// Records how the lease ended, unless that is already settled.
pub(super) fn settle(ended: &watch::Sender<Option<LeaseEnd>>, end: LeaseEnd) {
    ended.send_if_modified(|slot| {
        if slot.is_some() {
            return false;
        }
        *slot = Some(end);
        true
    });
}

// === impl Watcher ===

impl Watcher {
    pub(super) fn new(
        http: Transport,
        path: String,
        ended: Arc<watch::Sender<Option<LeaseEnd>>>,
        validity: watch::Sender<Instant>,
    ) -> Self {
        let deadline = *validity.borrow();
        Self {
            http,
            path,
            ended,
            deadline,
            validity,
        }
    }

    /// Follows the stream until the lease ends, then says how.
    pub(super) async fn run(mut self) {
        let end = self.follow().await;
        settle(&self.ended, end);
    }

    async fn follow(&mut self) -> LeaseEnd {
        let mut backoff = FIRST_REOPEN_BACKOFF;
        loop {
            let opened = tokio::select! {
                opened = self.open() => opened,
                _ = tokio::time::sleep_until(self.deadline) => return LeaseEnd::Expired,
            };
            match opened {
                Ok(response) => {
                    if let Some(end) = self.read(response).await {
                        return end;
                    }
                    backoff = FIRST_REOPEN_BACKOFF;
                }
                Err(Some(end)) => return end,
                Err(None) => {
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = tokio::time::sleep_until(self.deadline) => return LeaseEnd::Expired,
                    }
                    backoff = (backoff * 2).min(MAX_REOPEN_BACKOFF);
                }
            }
        }
    }

    /// Opens the stream: the response, or how the lease ended (the sidecar does not know it),
    /// or `None` to try again (no answer, or a passing error).
    async fn open(&self) -> Result<Streaming, Option<LeaseEnd>> {
        let Ok(response) = self.http.stream(&self.path).await else {
            return Err(None);
        };
        match response.status {
            200 => Ok(response),
            404 => Err(Some(LeaseEnd::Lost {
                reason: "unknown_lease".to_string(),
            })),
            _ => Err(None),
        }
    }

    /// Reads events until the lease ends (`Some`) or the stream breaks (`None`).
    async fn read(&mut self, mut response: Streaming) -> Option<LeaseEnd> {
        let mut parser = SseParser::default();
        loop {
            let chunk = tokio::select! {
                chunk = response.next() => chunk,
                _ = tokio::time::sleep_until(self.deadline) => return Some(LeaseEnd::Expired),
            };
            let bytes = chunk?;
            for event in parser.push(&bytes) {
                if let Some(end) = self.take(&event) {
                    return Some(end);
                }
            }
        }
    }

    /// Takes in one event: a new validity, or the end of the lease.
    fn take(&mut self, event: &SseEvent) -> Option<LeaseEnd> {
        let lease: LeaseInfo = serde_json::from_str(&event.data).ok()?;
        let reason = |default: &str| lease.reason.clone().unwrap_or_else(|| default.into());
        match event.name.as_str() {
            "lost" => Some(LeaseEnd::Lost {
                reason: reason("expired"),
            }),
            "released" => Some(LeaseEnd::Released {
                reason: reason("released"),
            }),
            _ => {
                self.deadline = Instant::now() + Duration::from_millis(lease.validity_ms);
                self.validity.send_replace(self.deadline);
                None
            }
        }
    }
}

/// One event of the stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct SseEvent {
    /// The `event:` field (`message` when absent).
    pub name: String,
    /// The `data:` lines, joined by newlines.
    pub data: String,
}

/// Turns the stream's bytes, in chunks of any size, into events (the text/event-stream format:
/// `field: value` lines, events separated by a blank line, comments starting with `:`).
#[derive(Debug, Default)]
pub(super) struct SseParser {
    /// Bytes of a line not yet complete.
    partial: Vec<u8>,
    /// The event being read.
    name: Option<String>,
    data: Option<String>,
}

// === impl SseParser ===

impl SseParser {
    /// Takes in a chunk; the events it completes.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        self.partial.extend_from_slice(chunk);
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..end]);
            let line = line.strip_suffix('\r').unwrap_or(&line);
            if let Some(event) = self.line(line) {
                events.push(event);
            }
        }
        events
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let data = self.data.take();
            let name = self.name.take();
            return data.map(|data| SseEvent {
                name: name.unwrap_or_else(|| "message".to_string()),
                data,
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => self.name = Some(value.to_string()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, data: &str) -> SseEvent {
        SseEvent {
            name: name.to_string(),
            data: data.to_string(),
        }
    }

    /// Events split anywhere across chunks come out whole; comments and keep-alives do not.
    #[test]
    fn events_are_read_across_chunks() {
        let text = ":\n\nevent: renewed\ndata: {\"a\":1}\n\nevent: lost\ndata: {}\n\n";
        for split in 0..text.len() {
            let mut parser = SseParser::default();
            let mut events = parser.push(&text.as_bytes()[..split]);
            events.extend(parser.push(&text.as_bytes()[split..]));
            assert_eq!(
                events,
                [event("renewed", "{\"a\":1}"), event("lost", "{}")],
                "split at {split}"
            );
        }
    }

    /// CRLF line ends, several data lines and a missing name follow the format.
    #[test]
    fn the_format_details_are_followed() {
        let mut parser = SseParser::default();
        let events = parser.push(b"data: one\r\ndata:two\r\n\r\nevent: x\n\n");
        assert_eq!(events, [event("message", "one\ntwo")]);
    }

    /// An event's name and data give the end of the lease, or its new validity.
    #[test]
    fn lost_and_released_end_the_lease() {
        let lease = |state: &str, reason: &str| {
            format!(
                r#"{{"acquired":true,"lease_id":"ab","resource":"r","owner":"o",
                "fencing_token":3,"ttl_ms":1000,"validity_ms":900,"expires_at":1,
                "state":"{state}","auto_renew":true{reason}}}"#
            )
        };
        let (tx, _rx) = watch::channel(None);
        let endpoint = crate::http::Endpoint::Tcp("127.0.0.1:1".into());
        let host = hyper::header::HeaderValue::from_static("127.0.0.1:1");
        let http = Transport::new(endpoint, host);
        let (validity, valid_until) = watch::channel(Instant::now());
        let path = "/v1/leases/ab/events".to_string();
        let mut watcher = Watcher::new(http, path, Arc::new(tx), validity);
        let renewed = event("renewed", &lease("held", ""));
        assert_eq!(watcher.take(&renewed), None);
        assert!(watcher.deadline > Instant::now() + Duration::from_millis(800));
        assert_eq!(*valid_until.borrow(), watcher.deadline);
        let lost = event("lost", &lease("lost", r#","reason":"not_ours""#));
        let reason = "not_ours".to_string();
        assert_eq!(watcher.take(&lost), Some(LeaseEnd::Lost { reason }));
        let released = event("released", &lease("released", r#","reason":"idle""#));
        let reason = "idle".to_string();
        assert_eq!(watcher.take(&released), Some(LeaseEnd::Released { reason }));
    }
}
