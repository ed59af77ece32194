//! The one raw HTTP/1.x client of the tests and the benches: bytes sent exactly as given over
//! any stream (TCP, a Unix socket, or bytes already received), answers parsed by hand (status
//! line, headers, a `Content-Length` or chunked body; `1xx` interim answers skipped), with
//! bounds on every head and body read.
//!
//! [`Conn`] is one connection: the hostile-input tests read it fallibly under their own
//! limits (`*_within`, `read_*`), the others through the panicking shorthands (`exchange`,
//! `answer`, `head`, 10 s each), and the sidecar bench through [`Conn::read_answer`] with no
//! timer around it (a lean client: the request written and the answer read in the caller's
//! own task). [`exchange`] (in `http/exchange.rs`) pipelines raw bytes on a fresh connection
//! while reading the answers.

mod exchange;

pub use exchange::exchange;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Longest answer head read before giving up on it.
const MAX_HEAD: usize = 64 * 1024;
/// Longest answer body read.
const MAX_BODY: usize = 1024 * 1024;
/// How long the panicking shorthands wait for an answer.
const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// A request with `Host: 127.0.0.1` and, with a body, its length and JSON type.
pub fn request(method: &str, path: &str, body: &str) -> Vec<u8> {
    let typed = if body.is_empty() {
        String::new()
    } else {
        let length = body.len();
        format!("content-type: application/json\r\ncontent-length: {length}\r\n")
    };
    format!("{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{typed}\r\n{body}").into_bytes()
}

/// One parsed answer.
#[derive(Clone, Debug)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// Names lowercased, in the order received.
    pub headers: Vec<(String, String)>,
    /// Empty until the body is read (`Conn::read_body`), and for a head read alone.
    pub body: Vec<u8>,
}

impl Answer {
    /// The first header called `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        let found = self.headers.iter().find(|(n, _)| n == name);
        found.map(|(_, value)| value.as_str())
    }

    /// The body as JSON, `Null` when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// Status and `reason` of a problem+json answer (asserting its content type and fields).
    pub fn problem(&self) -> (u16, String) {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{self:?}"
        );
        let body = self.json();
        let reason = body["reason"].as_str().unwrap_or_default().to_string();
        assert_eq!(body["type"], format!("/problems/{reason}"), "{body}");
        assert_eq!(body["status"], self.status, "{body}");
        assert!(
            body["title"].is_string() && body["detail"].is_string(),
            "{body}"
        );
        (self.status, reason)
    }

    /// The body as text, shortened, for failure messages.
    pub fn body_text(&self) -> String {
        let text = String::from_utf8_lossy(&self.body).replace('\n', "\\n");
        text.chars().take(300).collect()
    }
}

/// How a connection ended: when, and what came before the end.
#[derive(Debug)]
pub struct Closed {
    /// From the call that waited for the close.
    pub after: Duration,
    /// Bytes received before the end and not read as an answer.
    pub bytes: Vec<u8>,
}

impl Closed {
    /// When it closed, panicking if anything came before the end (a close with no answer).
    pub fn silent(self) -> Duration {
        let text = String::from_utf8_lossy(&self.bytes);
        assert!(self.bytes.is_empty(), "unexpected bytes: {text:?}");
        self.after
    }
}

/// One connection and what it has read past the last answer.
pub struct Conn<S> {
    stream: S,
    buf: Vec<u8>,
}

// === impl Conn: reading ===

impl<S: AsyncRead + Unpin> Conn<S> {
    /// Reads and writes `stream`; `&[u8]` reads answers already received.
    pub fn new(stream: S) -> Self {
        Self {
            stream,
            buf: Vec::with_capacity(4096),
        }
    }

    /// The status line and headers of the next answer, skipping `1xx` interim answers.
    pub async fn read_head(&mut self) -> Result<Answer, String> {
        loop {
            while self.buf.is_empty() {
                if !self.fill().await? {
                    return Err("closed without an answer".into());
                }
            }
            let line = String::from_utf8_lossy(&self.line().await?).into_owned();
            let mut parts = line.splitn(3, ' ');
            let (version, code) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let status = match (version.starts_with("HTTP/1."), code.parse::<u16>()) {
                (true, Ok(status)) => status,
                _ => return Err(format!("not an HTTP/1 status line: {line:?}")),
            };
            let headers = self.headers().await?;
            if !(100..200).contains(&status) {
                return Ok(Answer {
                    status,
                    headers,
                    body: Vec::new(),
                });
            }
        }
    }

    /// The next whole answer: head and body.
    pub async fn read_answer(&mut self) -> Result<Answer, String> {
        let mut answer = self.read_head().await?;
        self.read_body(&mut answer).await?;
        Ok(answer)
    }

    /// The body of the answer whose head was just read.
    pub async fn read_body(&mut self, answer: &mut Answer) -> Result<(), String> {
        let chunked = answer
            .header("transfer-encoding")
            .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
        let length = answer.header("content-length").map(str::parse::<usize>);
        answer.body = if chunked {
            self.chunked().await?
        } else if let Some(length) = length {
            let length = length.map_err(|_| "bad content-length in the answer".to_string())?;
            if length > MAX_BODY {
                return Err(format!("answer body of {length} bytes"));
            }
            self.exact(length).await?
        } else if answer.status == 204 || answer.status == 304 {
            Vec::new()
        } else {
            while self.buf.len() <= MAX_BODY && self.fill().await? {}
            std::mem::take(&mut self.buf)
        };
        Ok(())
    }

    /// The head of the next answer within `limit` (for a stream that stays open).
    pub async fn head_within(&mut self, limit: Duration) -> Result<Answer, String> {
        let read = tokio::time::timeout(limit, self.read_head()).await;
        read.unwrap_or_else(|_| Err(format!("no answer within {limit:?}")))
    }

    /// The next whole answer within `limit`.
    pub async fn answer_within(&mut self, limit: Duration) -> Result<Answer, String> {
        let read = tokio::time::timeout(limit, self.read_answer()).await;
        read.unwrap_or_else(|_| Err(format!("no answer within {limit:?}")))
    }

    /// The next answer (panics if none comes within 10 s or the connection closes first).
    pub async fn answer(&mut self) -> Answer {
        let answer = self.answer_within(ANSWER_WAIT).await;
        answer.unwrap_or_else(|error| panic!("no whole answer: {error}"))
    }

    /// The head of the next answer, its body left unread (an event stream); panics if none
    /// comes within 10 s.
    pub async fn head(&mut self) -> Answer {
        let head = self.head_within(ANSWER_WAIT).await;
        head.unwrap_or_else(|error| panic!("no head: {error}"))
    }

    /// Waits for the peer to close (EOF or reset): the bytes received meanwhile.
    pub async fn until_closed(&mut self) -> Vec<u8> {
        // A reset closes the connection too.
        while let Ok(true) = self.fill().await {}
        std::mem::take(&mut self.buf)
    }

    /// `Some` once the peer closed within `wait`, `None` if it is still open.
    pub async fn closed_within(&mut self, wait: Duration) -> Option<Closed> {
        let start = Instant::now();
        let bytes = tokio::time::timeout(wait, self.until_closed()).await.ok()?;
        let after = start.elapsed();
        Some(Closed { after, bytes })
    }

    /// Reads more bytes; `Ok(false)` at end of stream.
    async fn fill(&mut self) -> Result<bool, String> {
        let mut chunk = [0u8; 16 * 1024];
        match self.stream.read(&mut chunk).await {
            Ok(0) => Ok(false),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
            Err(error) => Err(format!("read failed: {error}")),
        }
    }

    /// Bytes up to and including the next `\r\n`, without it.
    async fn line(&mut self) -> Result<Vec<u8>, String> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = self.buf.drain(..end + 2).take(end).collect();
                return Ok(line);
            }
            if self.buf.len() > MAX_HEAD || !self.fill().await? {
                return Err("the connection ended inside a line".into());
            }
        }
    }

    /// Header lines up to the empty one, names lowercased.
    async fn headers(&mut self) -> Result<Vec<(String, String)>, String> {
        let mut headers = Vec::new();
        loop {
            let line = self.line().await?;
            if line.is_empty() {
                return Ok(headers);
            }
            let line = String::from_utf8_lossy(&line).into_owned();
            let (name, value) = line.split_once(':').ok_or(format!("bad header {line:?}"))?;
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }

    async fn exact(&mut self, n: usize) -> Result<Vec<u8>, String> {
        while self.buf.len() < n {
            if !self.fill().await? {
                let short = n - self.buf.len();
                return Err(format!("the connection ended {short} bytes short"));
            }
        }
        Ok(self.buf.drain(..n).collect())
    }

    async fn chunked(&mut self) -> Result<Vec<u8>, String> {
        let mut body = Vec::new();
        loop {
            let line = String::from_utf8_lossy(&self.line().await?).into_owned();
            let size = line.split(';').next().unwrap_or("").trim();
            let size =
                usize::from_str_radix(size, 16).map_err(|_| format!("chunk size {line:?}"))?;
            if size == 0 {
                while !self.line().await?.is_empty() {}
                return Ok(body);
            }
            if body.len() + size > MAX_BODY {
                return Err("chunked answer body over 1 MiB".into());
            }
            body.extend(self.exact(size).await?);
            self.exact(2).await?;
        }
    }
}

// === impl Conn: writing ===

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    /// Writes `bytes` exactly as given.
    pub async fn try_send(&mut self, bytes: &[u8]) -> Result<(), String> {
        let write = self.stream.write_all(bytes);
        write.await.map_err(|e| format!("write failed: {e}"))
    }

    /// Writes `bytes` exactly as given (panics if the write fails).
    pub async fn send(&mut self, bytes: &[u8]) {
        self.try_send(bytes).await.unwrap_or_else(|e| panic!("{e}"));
    }

    /// Ends the sending side (a TCP half-close): the peer reads the end of the stream, and
    /// can still answer.
    pub async fn finish_sending(&mut self) {
        let shutdown = self.stream.shutdown();
        shutdown
            .await
            .unwrap_or_else(|e| panic!("shutdown failed: {e}"));
    }

    /// Sends `request` and reads its answer (panics as [`Conn::answer`] does).
    pub async fn exchange(&mut self, request: &[u8]) -> Answer {
        self.send(request).await;
        self.answer().await
    }
}

impl Conn<TcpStream> {
    /// A connection to `addr` within `limit`.
    pub async fn connect(addr: SocketAddr, limit: Duration) -> Result<Self, String> {
        let stream = tokio::time::timeout(limit, TcpStream::connect(addr))
            .await
            .map_err(|_| format!("connect took over {limit:?}"))?
            .map_err(|e| format!("connect failed: {e}"))?;
        Ok(Self::new(stream))
    }
}
