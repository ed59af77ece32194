//! One connection's link: callers encode their commands into its outgoing buffer; one writer
//! task writes whatever callers have put there by the time it runs, in one write, and one
//! reader task hands the replies back in order; a watchdog fails the link when calls wait and
//! no reply comes.
//!
//! Writing from a task rather than from each caller lets concurrent callers' commands share a
//! write, so the master reads and answers many in one turn of its event loop. While other
//! calls are in flight, the writer yields to the runtime before it takes the buffer, so every
//! caller the runtime has ready, and every one its next look at the sockets readies, adds
//! theirs first.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{oneshot, Notify};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::stream::{ReadHalf, Stream, WriteHalf};
use super::{lock, Wire, WireError};
use crate::resp::{parse, Replies, Reply};

/// A link on which calls wait and no reply has come for this long is failed.
pub const STALL_LIMIT: Duration = Duration::from_secs(5);
/// How often a link's watchdog looks for a stall.
const STALL_CHECK: Duration = Duration::from_millis(500);
/// Calls waiting on one link at most; past it, calls fail at once.
pub const MAX_WAITING: usize = 65_536;
/// Read buffer of a link; grows for larger replies.
const READ_BUFFER: usize = 16 * 1024;

/// One connection and the calls waiting on it.
pub(super) struct Link {
    queue: Mutex<Queue>,
    /// Wakes the writer task when `out` gets its first bytes.
    flush: Notify,
    tasks: Mutex<Vec<AbortHandle>>,
    wire: Weak<Wire>,
    opened_at: Instant,
}

#[derive(Default)]
struct Queue {
    /// Encoded commands not yet written.
    out: Vec<u8>,
    /// The writer task has been woken for what is in `out` and not yet found it empty.
    scheduled: bool,
    /// Calls whose replies have not all come, in the order their commands were written.
    waiting: VecDeque<Waiter>,
    /// Replies handed out so far (the watchdog's measure of progress).
    delivered: u64,
    /// Why the link failed, once it has.
    failed: Option<String>,
}

struct Waiter {
    expected: usize,
    replies: Replies,
    answer: oneshot::Sender<Result<Replies, WireError>>,
}

// === impl Link ===

impl Link {
    /// A link of `wire`, taking no commands until [`Link::run`].
    pub(super) fn new(wire: Weak<Wire>) -> Arc<Self> {
        Arc::new(Link {
            queue: Mutex::new(Queue::default()),
            flush: Notify::new(),
            tasks: Mutex::new(Vec::new()),
            wire,
            opened_at: Instant::now(),
        })
    }

    /// Starts the reader, writer and watchdog tasks on `stream`.
    pub(super) fn run(self: &Arc<Self>, stream: Stream) {
        let (reader, writer) = stream.into_split();
        let read = tokio::spawn(read_replies(Arc::clone(self), reader));
        let flush = tokio::spawn(write_requests(Arc::clone(self), writer));
        let watch = tokio::spawn(watch_for_stalls(Arc::downgrade(self)));
        let handles = [read, flush, watch].map(|task| task.abort_handle());
        lock(&self.tasks).extend(handles);
        // A link that failed before its tasks were registered did not stop them: stop them.
        if lock(&self.queue).failed.is_some() {
            self.stop_tasks();
        }
    }

    /// How long since the link was made.
    pub(super) fn age(&self) -> Duration {
        self.opened_at.elapsed()
    }

    /// Queues a call of `replies` commands, written by `encode`; the receiver gets its replies.
    pub(super) fn submit(
        self: &Arc<Self>,
        replies: usize,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> Result<oneshot::Receiver<Result<Replies, WireError>>, WireError> {
        let (answer, receiver) = oneshot::channel();
        let wake = {
            let mut queue = lock(&self.queue);
            if let Some(reason) = &queue.failed {
                return Err(WireError::Connection(reason.clone()));
            }
            if queue.waiting.len() >= MAX_WAITING {
                return Err(WireError::Overloaded);
            }
            encode(&mut queue.out);
            queue.waiting.push_back(Waiter {
                expected: replies,
                replies: Replies::with_capacity(replies),
                answer,
            });
            !std::mem::replace(&mut queue.scheduled, true)
        };
        if wake {
            self.flush.notify_one();
        }
        Ok(receiver)
    }

    /// Hands `replies` to their calls, in order.
    /// `complete` is the reader's own buffer, empty between calls (no allocation per read).
    fn deliver(self: &Arc<Self>, replies: &mut Vec<Reply>, complete: &mut Vec<Waiter>) {
        let mut stray = false;
        {
            let mut queue = lock(&self.queue);
            queue.delivered += replies.len() as u64;
            for reply in replies.drain(..) {
                let Some(front) = queue.waiting.front_mut() else {
                    stray = true;
                    break;
                };
                front.replies.push(reply);
                if front.replies.len() >= front.expected {
                    // `front_mut` just returned this element.
                    complete.extend(queue.waiting.pop_front());
                }
            }
        }
        for waiter in complete.drain(..) {
            let _ = waiter.answer.send(Ok(waiter.replies));
        }
        if stray {
            self.close("a reply nobody asked for".into());
        }
    }

    /// Fails every call in flight, stops the link's tasks and tells the wire.
    pub(super) fn close(self: &Arc<Self>, reason: String) {
        let waiting = {
            let mut queue = lock(&self.queue);
            if queue.failed.is_some() {
                return;
            }
            queue.failed = Some(reason.clone());
            queue.out.clear();
            std::mem::take(&mut queue.waiting)
        };
        for waiter in waiting {
            let _ = waiter
                .answer
                .send(Err(WireError::Connection(reason.clone())));
        }
        self.stop_tasks();
        // Wakes the writer if its abort handle was not registered yet: it sees the failure.
        self.flush.notify_one();
        if let Some(wire) = self.wire.upgrade() {
            wire.lost(self);
        }
    }

    /// Aborts the link's reader, writer and watchdog (those registered so far).
    fn stop_tasks(&self) {
        lock(&self.tasks).drain(..).for_each(|task| task.abort());
    }
}

/// Fails the link once calls have waited at least `STALL_LIMIT` (and at most one
/// `STALL_CHECK` more) with no reply coming.
async fn watch_for_stalls(link: Weak<Link>) {
    let mut ticks = tokio::time::interval(STALL_CHECK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_delivered = 0;
    // The first look that saw calls waiting and no reply since the look before.
    let mut stalled_since: Option<Instant> = None;
    loop {
        let now = ticks.tick().await;
        let Some(link) = link.upgrade() else { return };
        let (waiting, delivered) = {
            let queue = lock(&link.queue);
            (!queue.waiting.is_empty(), queue.delivered)
        };
        let progress = delivered != last_delivered;
        last_delivered = delivered;
        if !waiting || progress {
            stalled_since = None;
            continue;
        }
        let since = *stalled_since.get_or_insert(now);
        if now.saturating_duration_since(since) >= STALL_LIMIT {
            let reason = format!("no reply for {} ms", (now - since).as_millis());
            tracing::warn!(%reason, "lock link stalled: closing it");
            link.close(reason);
            return;
        }
    }
}

/// Reads replies until the link fails.
async fn read_replies(link: Arc<Link>, mut reader: ReadHalf) {
    let mut buffer = Vec::with_capacity(READ_BUFFER);
    let mut replies = Vec::new();
    let mut complete = Vec::new();
    loop {
        let reason = match reader.read_buf(&mut buffer).await {
            Ok(0) => Some("the master closed the connection".to_string()),
            Ok(_) => None,
            Err(e) => Some(e.to_string()),
        };
        if let Some(reason) = reason {
            link.close(reason);
            return;
        }
        let mut used = 0;
        loop {
            match parse(&buffer[used..]) {
                Ok(Some((reply, length))) => {
                    replies.push(reply);
                    used += length;
                }
                Ok(None) => break,
                Err(reason) => {
                    link.close(reason);
                    return;
                }
            }
        }
        buffer.drain(..used);
        if buffer.capacity() - buffer.len() < READ_BUFFER / 4 {
            buffer.reserve(READ_BUFFER);
        }
        if !replies.is_empty() {
            link.deliver(&mut replies, &mut complete);
        }
    }
}

/// Writes what callers put in `out`, all of it at once, until the link fails. Each write is
/// flushed: TLS may keep bytes inside rustls when the socket is full (free on plain TCP).
async fn write_requests(link: Arc<Link>, mut writer: WriteHalf) {
    let mut chunk = Vec::new();
    loop {
        link.flush.notified().await;
        // With other calls in flight, other callers are running and may be about to write
        // too. `yield_now` defers the writer until its worker has run every task it has ready
        // and looked at its sockets again (without sleeping), so the callers those wake append
        // their commands as well: one write, and one read and one turn on the master, carries
        // them all. The worker looks at its sockets at least every 61 task polls (tokio's
        // event interval), which bounds the wait on a runtime shared with busy tasks. Going to
        // the back of the run queue only once instead let a sidecar's requests, which arrive
        // spread out, each make writes of their own (1.34 reads on the masters per cycle
        // against 1.02, and 7% fewer cycles: bench/README.md). A lone caller's write goes at
        // once: a yield would cost it a scheduler pass.
        let others_in_flight = lock(&link.queue).waiting.len() > 1;
        if others_in_flight {
            tokio::task::yield_now().await;
        }
        loop {
            {
                let mut queue = lock(&link.queue);
                if queue.failed.is_some() {
                    return;
                }
                if queue.out.is_empty() {
                    queue.scheduled = false;
                    break;
                }
                std::mem::swap(&mut queue.out, &mut chunk);
            }
            let mut written = writer.write_all(&chunk).await;
            if written.is_ok() {
                written = writer.flush().await;
            }
            if let Err(e) = written {
                link.close(e.to_string());
                return;
            }
            chunk.clear();
        }
    }
}
