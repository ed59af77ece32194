//! A connection's socket as the fast lane and hyper see it. It closes a connection whose
//! client is too slow or silent — a request head not complete [`Deadlines::head`] after its
//! first byte, no request for [`Deadlines::idle`] with none in flight, a client that reads
//! nothing of its answer for `idle` — and otherwise passes reads and writes (vectored ones
//! included) through untouched, its reads first replaying what the fast lane read of a request
//! it leaves to hyper: it never looks at the bytes. When an event stream asks for it, it tells
//! the stream which socket it is on (at its next write: ordinary requests cost no system call
//! for it).

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::listener::Identify;
use crate::api::events::StreamSocket;
use crate::sockdiag::SocketId;

/// Requests of one connection as its service sees them, shared with the socket wrapper.
pub(super) struct Activity {
    /// Requests handed to the service.
    dispatched: AtomicU64,
    /// Of those, requests whose answer was sent whole (or dropped).
    finished: AtomicU64,
    /// When the last one finished, in milliseconds since `epoch`.
    finished_at_ms: AtomicU64,
    epoch: Instant,
    /// An event stream asked which socket the connection is on.
    socket_wanted: AtomicBool,
    /// The socket, told at the first write after it was asked for.
    socket: OnceLock<Option<SocketId>>,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            dispatched: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            finished_at_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            socket_wanted: AtomicBool::new(false),
            socket: OnceLock::new(),
        }
    }
}

impl StreamSocket for Activity {
    fn socket(&self) -> Option<SocketId> {
        self.socket.get().copied().flatten()
    }
}

impl Activity {
    /// Asks the socket to tell which it is, at its next write (an event stream's answer).
    pub(super) fn want_socket(&self) {
        self.socket_wanted.store(true, Ordering::Release);
    }

    pub(super) fn dispatch(&self) {
        self.dispatched.fetch_add(1, Ordering::Release);
    }

    pub(super) fn finish(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.finished_at_ms.store(ms, Ordering::Relaxed);
        self.finished.fetch_add(1, Ordering::Release);
    }

    fn finished_at(&self) -> Instant {
        self.epoch + Duration::from_millis(self.finished_at_ms.load(Ordering::Relaxed))
    }
}

/// How long a connection may wait on its client.
#[derive(Clone, Copy, Debug)]
pub(super) struct Deadlines {
    /// From the first byte of a request head to its end.
    pub(super) head: Duration,
    /// With no request in flight and nothing arriving; also a client that reads nothing.
    pub(super) idle: Duration,
}

/// The socket of one connection, with its deadlines.
pub(super) struct GuardedIo<T> {
    inner: T,
    activity: Arc<Activity>,
    deadlines: Deadlines,
    seen_dispatched: u64,
    seen_finished: u64,
    /// When the connection last had no request in flight.
    idle_since: Instant,
    /// First byte of a request head not yet handed to the service.
    head_started: Option<Instant>,
    /// A write that could not proceed, since then.
    write_blocked_since: Option<Instant>,
    timer: Pin<Box<Sleep>>,
    armed: Instant,
    /// Whether the socket was told to the service (once asked for).
    identified: bool,
    /// Bytes read already, read again before the socket's (see [`GuardedIo::replay`]).
    replay: Vec<u8>,
    /// How much of `replay` was read again.
    replayed: usize,
}

impl<T> GuardedIo<T> {
    pub(super) fn new(inner: T, activity: Arc<Activity>, deadlines: Deadlines) -> Self {
        let now = Instant::now();
        let armed = now + deadlines.idle;
        Self {
            inner,
            activity,
            deadlines,
            seen_dispatched: 0,
            seen_finished: 0,
            idle_since: now,
            head_started: None,
            write_blocked_since: None,
            timer: Box::pin(tokio::time::sleep_until(armed)),
            armed,
            identified: false,
            replay: Vec::new(),
            replayed: 0,
        }
    }

    /// Whether a request is with the service (or its answer still on its way out).
    fn request_in_flight(&mut self) -> bool {
        self.sync();
        self.seen_dispatched != self.seen_finished
    }

    /// Has the next reads return `bytes`, read from this socket already, before the socket's
    /// own: what the fast lane read of a request it leaves to hyper. They were counted as read
    /// when they came (a head begun), and are not counted again.
    pub(super) fn replay(&mut self, bytes: Vec<u8>) {
        self.replay = bytes;
        self.replayed = 0;
    }

    /// When the request head being read must be whole (then the connection is closed), if a
    /// head is being read.
    pub(super) fn head_deadline(&mut self) -> Option<Instant> {
        self.sync();
        self.head_started
            .map(|started| started + self.deadlines.head)
    }

    pub(super) fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// Catches up with the service: a new request ends the head being read, a finished one
    /// starts an idle spell.
    fn sync(&mut self) {
        let dispatched = self.activity.dispatched.load(Ordering::Acquire);
        if dispatched != self.seen_dispatched {
            self.seen_dispatched = dispatched;
            self.head_started = None;
        }
        let finished = self.activity.finished.load(Ordering::Acquire);
        if finished != self.seen_finished {
            self.seen_finished = finished;
            self.idle_since = self.activity.finished_at();
        }
    }

    /// Bytes arrived: with no request in flight, they start a request head.
    fn on_bytes_read(&mut self) {
        if self.head_started.is_none() && !self.request_in_flight() {
            self.head_started = Some(Instant::now());
        }
    }

    /// When a read that waits must give up: none while a request is in flight (the body has
    /// its own timeout, an event stream none).
    fn read_deadline(&mut self) -> Option<Instant> {
        if self.request_in_flight() {
            return None;
        }
        Some(match self.head_started {
            Some(started) => started + self.deadlines.head,
            None => self.idle_since + self.deadlines.idle,
        })
    }

    /// Whether `deadline` passed; if not, the task is woken when it does. One timer serves
    /// every deadline: it is moved earlier at once, later only once it fired.
    fn expired(&mut self, cx: &mut Context<'_>, deadline: Instant) -> bool {
        if deadline < self.armed || (deadline > self.armed && self.timer.is_elapsed()) {
            self.arm(deadline);
        }
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            if self.armed >= deadline {
                return true;
            }
            self.arm(deadline);
        }
    }

    /// With no deadline to enforce (a request in flight), keeps the timer armed within `idle`
    /// and this task's waker on it: once the request finishes hyper may not read again until
    /// woken, and the idle deadline that starts then must still be enforced.
    fn keep_watch(&mut self, cx: &mut Context<'_>) {
        if self.timer.is_elapsed() {
            self.arm(Instant::now() + self.deadlines.idle);
        }
        while self.timer.as_mut().poll(cx).is_ready() {
            self.arm(Instant::now() + self.deadlines.idle);
        }
    }

    fn arm(&mut self, deadline: Instant) {
        self.timer.as_mut().reset(deadline);
        self.armed = deadline;
    }

    /// What the socket said to a write; a write that cannot proceed for `idle` gives up.
    fn written(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        if polled.is_ready() {
            self.write_blocked_since = None;
            return polled;
        }
        let since = *self.write_blocked_since.get_or_insert_with(Instant::now);
        if self.expired(cx, since + self.deadlines.idle) {
            return Poll::Ready(Err(timed_out()));
        }
        Poll::Pending
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "client too slow or idle")
}

impl<T: AsyncRead + Unpin> AsyncRead for GuardedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let left = &this.replay[this.replayed..];
        if !left.is_empty() {
            let n = left.len().min(buf.remaining());
            buf.put_slice(&left[..n]);
            this.replayed += n;
            if this.replayed == this.replay.len() {
                // Read again whole: its memory is not kept for the connection's life.
                this.replay(Vec::new());
            }
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.on_bytes_read();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match this.read_deadline() {
                Some(deadline) if this.expired(cx, deadline) => Poll::Ready(Err(timed_out())),
                Some(_) => Poll::Pending,
                None => {
                    this.keep_watch(cx);
                    Poll::Pending
                }
            },
            failed => failed,
        }
    }
}

impl<T: Identify> GuardedIo<T> {
    /// Tells the service the socket once an event stream asked for it.
    fn identify_if_asked(&mut self) {
        if !self.identified && self.activity.socket_wanted.load(Ordering::Acquire) {
            self.identified = true;
            let _ = self.activity.socket.set(self.inner.identify());
        }
    }
}

impl<T: AsyncWrite + Identify + Unpin> AsyncWrite for GuardedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.identify_if_asked();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.written(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.identify_if_asked();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.written(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replayed bytes come first, across reads shorter than them, then the socket's.
    #[tokio::test]
    async fn replayed_bytes_are_read_before_the_socket_s() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let deadlines = Deadlines {
            head: Duration::from_secs(1),
            idle: Duration::from_secs(10),
        };
        let (mut client, server) = tokio::io::duplex(1024);
        let mut io = GuardedIo::new(server, Arc::new(Activity::default()), deadlines);
        io.replay(b"GET / HTTP/1.1\r\n".to_vec());
        client.write_all(b"host: x\r\n\r\n").await.unwrap();
        let mut first = [0u8; 5];
        io.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"GET /");
        let mut rest = [0u8; 22];
        io.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b" HTTP/1.1\r\nhost: x\r\n\r\n");
    }

    /// An idle connection times out after `idle`; a request head begun times out after `head`
    /// from its first byte; a request in flight has no read deadline.
    #[tokio::test(start_paused = true)]
    async fn reads_give_up_at_their_deadlines() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let deadlines = Deadlines {
            head: Duration::from_secs(1),
            idle: Duration::from_secs(10),
        };
        let (client, server) = tokio::io::duplex(1024);
        let activity = Arc::new(Activity::default());
        let mut io = GuardedIo::new(server, Arc::clone(&activity), deadlines);
        let mut buf = [0u8; 64];
        let start = Instant::now();
        let error = io.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), Duration::from_secs(10));

        let mut client = client;
        client.write_all(b"GET / HT").await.unwrap();
        let read_at = Instant::now();
        assert_eq!(io.read(&mut buf).await.unwrap(), 8);
        let error = io.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(read_at.elapsed(), Duration::from_secs(1));

        activity.dispatch();
        let waited = tokio::time::timeout(Duration::from_secs(60), io.read(&mut buf)).await;
        assert!(waited.is_err(), "a read with a request in flight gave up");
        activity.finish();
        let finished_at = Instant::now();
        let error = io.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(finished_at.elapsed(), Duration::from_secs(10));
        drop(client);
    }

    /// Once a request finished, the idle deadline runs from that moment even if nothing reads
    /// the socket meanwhile (hyper may not, until woken): the task is woken and the next read
    /// gives up.
    #[tokio::test(start_paused = true)]
    async fn an_idle_spell_with_no_read_is_still_timed() {
        use std::sync::atomic::AtomicBool;
        use std::task::{Wake, Waker};
        use tokio::io::AsyncWriteExt;
        struct Flag(AtomicBool);
        impl Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let deadlines = Deadlines {
            head: Duration::from_secs(1),
            idle: Duration::from_secs(10),
        };
        let (mut client, server) = tokio::io::duplex(1024);
        let activity = Arc::new(Activity::default());
        let mut io = GuardedIo::new(server, Arc::clone(&activity), deadlines);
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(Arc::clone(&flag));
        let mut cx = Context::from_waker(&waker);
        let mut bytes = [0u8; 64];
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut buf = ReadBuf::new(&mut bytes);
        assert!(Pin::new(&mut io).poll_read(&mut cx, &mut buf).is_ready());
        activity.dispatch();
        tokio::time::advance(Duration::from_secs(3)).await;
        let mut buf = ReadBuf::new(&mut bytes);
        assert!(Pin::new(&mut io).poll_read(&mut cx, &mut buf).is_pending());
        tokio::time::advance(Duration::from_secs(2)).await;
        activity.finish();
        tokio::time::advance(Duration::from_secs(8)).await;
        assert!(flag.0.load(Ordering::SeqCst), "not woken to look again");
        let mut buf = ReadBuf::new(&mut bytes);
        assert!(Pin::new(&mut io).poll_read(&mut cx, &mut buf).is_pending());
        tokio::time::advance(Duration::from_millis(2001)).await;
        let mut buf = ReadBuf::new(&mut bytes);
        let error = match Pin::new(&mut io).poll_read(&mut cx, &mut buf) {
            Poll::Ready(Err(error)) => error,
            other => panic!("{other:?}"),
        };
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
    }

    /// A client that reads nothing of its answer is given up on after `idle`, even with a
    /// request in flight, whether hyper writes one buffer or several at once.
    #[tokio::test(start_paused = true)]
    async fn a_write_the_client_never_reads_gives_up_after_idle() {
        use tokio::io::AsyncWriteExt;
        let deadlines = Deadlines {
            head: Duration::from_secs(1),
            idle: Duration::from_secs(10),
        };
        let (_client, server) = tokio::io::duplex(16);
        let activity = Arc::new(Activity::default());
        activity.dispatch();
        let mut io = GuardedIo::new(server, activity, deadlines);
        let start = Instant::now();
        let error = io.write_all(&[b'x'; 64]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), Duration::from_secs(10));

        let (_client, server) = tokio::io::duplex(16);
        let mut io = GuardedIo::new(server, Arc::new(Activity::default()), deadlines);
        let (head, body) = ([b'h'; 8], [b'b'; 64]);
        let start = Instant::now();
        let error = loop {
            let slices = [IoSlice::new(&head), IoSlice::new(&body)];
            if let Err(error) = io.write_vectored(&slices).await {
                break error;
            }
        };
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), Duration::from_secs(10));
    }

    /// A TCP socket takes vectored writes through the wrapper, so hyper sends an answer's head
    /// and body in one call rather than copying them into one buffer.
    #[tokio::test]
    async fn vectored_writes_pass_through() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
        let deadlines = Deadlines {
            head: Duration::from_secs(1),
            idle: Duration::from_secs(1),
        };
        let io = GuardedIo::new(stream.await.unwrap(), Arc::default(), deadlines);
        assert!(io.is_write_vectored());
    }
}
