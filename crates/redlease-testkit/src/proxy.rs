//! A loopback TCP proxy in front of one upstream (a test's `redis-server`) that injects
//! faults: per-direction delay and blackhole, reset of every connection, refusal of new ones.
//!
//! Each client connection gets its own upstream connection and one task that owns both
//! sockets. Bytes read from either side are queued with the instant they were read; the fault
//! in force for that direction decides when the head of the queue is written:
//!
//! - `Pass`: at once;
//! - `Delay(d)`: at read instant + `d` (order kept; delays overlap, they do not add up);
//! - `Blackhole`: never while it lasts, and the bytes stay queued; switching back to `Pass` or
//!   `Delay` delivers them in order, like TCP retransmission after a partition heals;
//! - `BlackholeDrop`: queued bytes, and every byte read while it lasts, are discarded.
//!
//! A fault applies to bytes already queued when it is set, not only to bytes read afterwards.
//! Faults are switched through `&self` methods (also on a cloneable [`ProxyHandle`]); connection
//! tasks see the change at once. Dropping the [`FaultProxy`] aborts the accept loop, which
//! aborts every connection task with it.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

/// Bytes queued in one direction beyond which the proxy stops reading that side (the sender's
/// kernel buffers then fill, as they would behind a partition).
const MAX_QUEUED: usize = 4 << 20;
const READ_SIZE: usize = 16 << 10;

/// What happens to the bytes of one direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Bytes go through at once.
    Pass,
    /// Each chunk goes through this long after it was read.
    Delay(Duration),
    /// Nothing goes through while it lasts; bytes stay queued, delivered once it ends.
    Blackhole,
    /// Queued bytes and every byte read while it lasts are discarded.
    BlackholeDrop,
}

/// A running proxy; dropping it stops it. Derefs to the [`ProxyHandle`] that controls it.
pub struct FaultProxy {
    handle: ProxyHandle,
    port: u16,
    accept_loop: AbortHandle,
}

/// Controls a proxy from anywhere (cheap to clone); does nothing once the proxy is dropped.
#[derive(Clone)]
pub struct ProxyHandle {
    shared: Arc<Shared>,
}

struct Shared {
    /// Fault on client → server bytes.
    upstream: watch::Sender<Fault>,
    /// Fault on server → client bytes.
    downstream: watch::Sender<Fault>,
    /// Bumped by `reset_all`; every connection alive at that moment resets itself.
    resets: watch::Sender<u64>,
    /// Which connections are cut (see `cut_clients`).
    cut: watch::Sender<Cut>,
    refusing: AtomicBool,
    accepted: AtomicUsize,
    refused: AtomicUsize,
    open: AtomicUsize,
    /// Every client → server chunk read, with the wall-clock instant it was read (the most
    /// recent `MAX_SENT_LOG`), to tell when a command was sent.
    sent: SentLog,
}

/// Client → server chunks: when each was read (Unix ms) and its bytes.
type SentLog = Arc<Mutex<VecDeque<(u64, Vec<u8>)>>>;
const MAX_SENT_LOG: usize = 100_000;

// === impl FaultProxy ===

impl FaultProxy {
    /// A proxy on a kernel-chosen loopback port in front of `127.0.0.1:upstream_port`.
    pub async fn start(upstream_port: u16) -> Self {
        let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, upstream_port));
        // Binding loopback port 0 fails only when the machine is out of ports: the test fails.
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let handle = ProxyHandle::new();
        let shared = Arc::clone(&handle.shared);
        let accept_loop = tokio::spawn(accept_loop(listener, upstream, shared)).abort_handle();
        Self {
            handle,
            port,
            accept_loop,
        }
    }

    /// The proxy's own loopback port, where clients connect.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<proxy port>`: the URL a client gives instead of the master's.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A handle that controls this proxy from elsewhere (another task, a schedule).
    pub fn handle(&self) -> ProxyHandle {
        self.handle.clone()
    }
}

impl Deref for FaultProxy {
    type Target = ProxyHandle;

    fn deref(&self) -> &ProxyHandle {
        &self.handle
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

// === impl ProxyHandle ===

impl ProxyHandle {
    fn new() -> Self {
        let shared = Shared {
            upstream: watch::Sender::new(Fault::Pass),
            downstream: watch::Sender::new(Fault::Pass),
            resets: watch::Sender::new(0),
            cut: watch::Sender::new(Cut::default()),
            refusing: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            sent: SentLog::default(),
        };
        Self {
            shared: Arc::new(shared),
        }
    }

    /// Sets the fault on client → server bytes.
    pub fn set_upstream(&self, fault: Fault) {
        self.shared.upstream.send_replace(fault);
    }

    /// Sets the fault on server → client bytes.
    pub fn set_downstream(&self, fault: Fault) {
        self.shared.downstream.send_replace(fault);
    }

    /// Sets the same fault on both directions.
    pub fn set_both(&self, fault: Fault) {
        self.set_upstream(fault);
        self.set_downstream(fault);
    }

    /// Resets (RST, `SO_LINGER` 0) both sides of every connection open now; queued bytes are
    /// lost. The connection tasks do it as soon as they run, so `open()` drops shortly after.
    pub fn reset_all(&self) {
        self.shared
            .resets
            .send_modify(|generation| *generation += 1);
    }

    /// Cuts every connection open now on the client side only: the client sees the proxy
    /// close (EOF) and is ignored from then on, while the server side stays open and the
    /// bytes the client had sent are held — as when a client's connection dies while its last
    /// commands are still on their way to the server. `release_cut` delivers them.
    pub fn cut_clients(&self) {
        let below = self.shared.accepted.load(Ordering::SeqCst);
        self.shared.cut.send_replace(Cut { below, held: true });
    }

    /// Delivers what the cut connections held, to the server sides still open.
    pub fn release_cut(&self) {
        self.shared.cut.send_modify(|cut| cut.held = false);
    }

    /// While true, each new client connection is accepted and at once reset (RST): the
    /// client's connect reports the reset, or succeeds and its first read fails, and nothing
    /// reaches the upstream. The listener stays bound, so no one else can take the port.
    pub fn refuse(&self, refuse: bool) {
        self.shared.refusing.store(refuse, Ordering::SeqCst);
    }

    /// Client connections proxied so far (refused ones not counted).
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Client connections reset at once because `refuse(true)` was in force.
    pub fn refused(&self) -> usize {
        self.shared.refused.load(Ordering::SeqCst)
    }

    /// Proxied connections whose task is still running.
    pub fn open(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// When (Unix ms) each client → server chunk containing `needle` was read by the proxy.
    pub fn sent_at(&self, needle: &[u8]) -> Vec<u64> {
        // Poisoned only if a connection task panicked: the test fails with it.
        let sent = self.shared.sent.lock().unwrap();
        let has = |bytes: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
        sent.iter()
            .filter(|(_, bytes)| has(bytes))
            .map(|(at, _)| *at)
            .collect()
    }
}

// === accept loop and connections ===

/// Accepts until aborted; the connection tasks live in its `JoinSet`, so they end with it.
async fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            Some(_) = connections.join_next() => {}
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                if shared.refusing.load(Ordering::SeqCst) {
                    shared.refused.fetch_add(1, Ordering::SeqCst);
                    let _ = client.set_zero_linger();
                    continue;
                }
                let connection = Connection::new(&shared);
                connections.spawn(connection.run(client, upstream));
            }
        }
    }
}

/// Connections accepted before `below` are cut on the client side; their bytes to the
/// server are held while `held`.
#[derive(Clone, Copy, Debug, Default)]
struct Cut {
    below: usize,
    held: bool,
}

/// One proxied connection: its two queues and the reset signal, counted open until dropped.
struct Connection {
    /// Accept order, from 0.
    id: usize,
    up: Pipe,
    down: Pipe,
    resets: watch::Receiver<u64>,
    cut: watch::Receiver<Cut>,
    /// The client side was cut: it is no longer read or written.
    client_cut: bool,
    shared: Arc<Shared>,
}

impl Connection {
    /// Subscribes before the task is spawned, so a `reset_all` right after accept applies.
    fn new(shared: &Arc<Shared>) -> Self {
        let id = shared.accepted.fetch_add(1, Ordering::SeqCst);
        shared.open.fetch_add(1, Ordering::SeqCst);
        Self {
            id,
            cut: shared.cut.subscribe(),
            client_cut: false,
            up: Pipe::new(shared.upstream.subscribe(), Some(Arc::clone(&shared.sent))),
            down: Pipe::new(shared.downstream.subscribe(), None),
            resets: shared.resets.subscribe(),
            shared: Arc::clone(shared),
        }
    }

    /// Connects upstream and forwards. A client whose upstream refuses is reset; after a
    /// reset or an I/O error on either side, both sides are reset, as a peer would see it.
    async fn run(mut self, mut client: TcpStream, upstream: SocketAddr) {
        let Ok(mut server) = TcpStream::connect(upstream).await else {
            let _ = client.set_zero_linger();
            return;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let ending = self.forward(&mut client, &mut server).await;
        if !matches!(ending, Ok(Ending::Closed)) {
            let _ = client.set_zero_linger();
            let _ = server.set_zero_linger();
        }
    }

    /// Moves bytes both ways until both sides have closed and been drained, an I/O error, or
    /// a reset. Every branch only waits for readiness, so it is safe to cancel.
    async fn forward(&mut self, client: &mut TcpStream, server: &mut TcpStream) -> Io<Ending> {
        loop {
            let (up_due, down_due) = (self.up.due(), self.down.due());
            // The futures are dropped before a branch's handler runs, so handlers may borrow.
            let client_open = !self.client_cut;
            tokio::select! {
                r = client.readable(), if client_open && self.up.wants_read() => {
                    self.up.read_from(client, r)?
                }
                r = server.readable(), if self.down.wants_read() => self.down.read_from(server, r)?,
                r = writable_at(server, up_due) => self.up.write_to(server, r)?,
                r = writable_at(client, down_due), if client_open => {
                    self.down.write_to(client, r)?
                }
                _ = self.up.fault.changed() => self.up.apply_fault(),
                _ = self.down.fault.changed() => self.down.apply_fault(),
                _ = self.cut.changed() => self.apply_cut(client).await,
                _ = self.resets.changed() => return Ok(Ending::Reset),
            }
            self.up.half_close(server).await?;
            if !self.client_cut {
                self.down.half_close(client).await?;
            }
            if self.up.write_closed && self.down.write_closed {
                return Ok(Ending::Closed);
            }
        }
    }
}

impl Connection {
    /// Cuts the client side if this connection is among those cut, and holds or delivers
    /// its bytes to the server.
    async fn apply_cut(&mut self, client: &mut TcpStream) {
        let cut = *self.cut.borrow_and_update();
        if self.id < cut.below && !self.client_cut {
            self.client_cut = true;
            let _ = client.shutdown().await;
        }
        self.up.held = self.client_cut && cut.held;
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.shared.open.fetch_sub(1, Ordering::SeqCst);
    }
}

type Io<T> = std::io::Result<T>;

enum Ending {
    Closed,
    Reset,
}

/// Waits until `due` (forever when `None`), then until `stream` takes bytes.
async fn writable_at(stream: &TcpStream, due: Option<Instant>) -> Io<()> {
    let Some(due) = due else {
        return std::future::pending().await;
    };
    tokio::time::sleep_until(due).await;
    stream.writable().await
}

// === impl Pipe ===

/// One direction's bytes read and not yet written, and the fault that governs them.
struct Pipe {
    queue: VecDeque<Chunk>,
    queued: usize,
    fault: watch::Receiver<Fault>,
    /// The reading side has closed (EOF); the writing side is shut once the queue drains.
    read_closed: bool,
    write_closed: bool,
    /// Where chunks read are logged (client → server only).
    log: Option<SentLog>,
    /// Held by a cut, whatever the fault (see `ProxyHandle::cut_clients`).
    held: bool,
}

struct Chunk {
    read_at: Instant,
    bytes: Vec<u8>,
    /// How many of `bytes` are written already.
    written: usize,
}

impl Pipe {
    fn new(fault: watch::Receiver<Fault>, log: Option<SentLog>) -> Self {
        Self {
            queue: VecDeque::new(),
            queued: 0,
            fault,
            read_closed: false,
            write_closed: false,
            log,
            held: false,
        }
    }

    fn wants_read(&self) -> bool {
        !self.read_closed && self.queued < MAX_QUEUED
    }

    /// When the head chunk may be written; `None` when the queue is empty or held.
    fn due(&self) -> Option<Instant> {
        let head = self.queue.front()?;
        if self.held {
            return None;
        }
        match *self.fault.borrow() {
            Fault::Pass => Some(head.read_at),
            Fault::Delay(delay) => Some(head.read_at + delay),
            Fault::Blackhole | Fault::BlackholeDrop => None,
        }
    }

    fn apply_fault(&mut self) {
        if *self.fault.borrow_and_update() == Fault::BlackholeDrop {
            self.queue.clear();
            self.queued = 0;
        }
    }

    /// Reads what `stream`, found `readable`, has.
    fn read_from(&mut self, stream: &TcpStream, readable: Io<()>) -> Io<()> {
        readable?;
        let mut buf = [0; READ_SIZE];
        match stream.try_read(&mut buf) {
            Ok(0) => self.read_closed = true,
            Ok(n) if *self.fault.borrow() != Fault::BlackholeDrop => {
                self.record(&buf[..n]);
                self.queued += n;
                self.queue.push_back(Chunk {
                    read_at: Instant::now(),
                    bytes: buf[..n].to_vec(),
                    written: 0,
                });
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }

    fn record(&self, bytes: &[u8]) {
        let Some(log) = &self.log else { return };
        let now = std::time::SystemTime::now();
        // The clock is after 1970; a poisoned log means a connection task panicked.
        let ms = now
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let mut log = log.lock().unwrap();
        if log.len() >= MAX_SENT_LOG {
            log.pop_front();
        }
        log.push_back((ms, bytes.to_vec()));
    }

    /// Writes what the head chunk has left to `stream`, found `writable`.
    fn write_to(&mut self, stream: &TcpStream, writable: Io<()>) -> Io<()> {
        writable?;
        let Some(head) = self.queue.front_mut() else {
            return Ok(());
        };
        match stream.try_write(&head.bytes[head.written..]) {
            Ok(n) => {
                head.written += n;
                self.queued -= n;
                if head.written == head.bytes.len() {
                    self.queue.pop_front();
                }
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Passes the reading side's EOF on to the writing side once everything read is written.
    async fn half_close(&mut self, stream: &mut TcpStream) -> Io<()> {
        if self.read_closed && self.queue.is_empty() && !self.write_closed {
            self.write_closed = true;
            stream.shutdown().await?;
        }
        Ok(())
    }
}
