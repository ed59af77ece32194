//! The lock path's own connection to one master, re-made whenever it fails. Lock commands
//! (acquire, release, extend, shadow, fence raise, PING) go here; the master's fred client keeps
//! the administrative traffic (scripts, identity, markers). Each connection is opened by
//! `handshake` and then carried by a `link`: one writer and one reader task.
//!
//! Why not fred for every command: fred routes each command through its router task and
//! builds a multi-kilobyte future for it, too heavy for a path that runs per lock per master
//! (`bench/README.md` has the figures). Every command of one caller's batch goes out in one
//! write, and every command of this master's lock path is ordered on one connection, so a
//! release always reaches the master after the acquisition it undoes.
//!
//! **Failure.** A link fails on a write or read error, the master closing it, a reply nobody
//! waits for, or no reply at all for `STALL_LIMIT` while calls wait (a black-holed master
//! keeps its socket open for the kernel's ~15 minutes otherwise); idle links are probed by TCP
//! keepalive. A failed link fails every call in flight with [`WireError::Connection`], is
//! closed with a reset (unsent bytes are discarded, never written later) and replaced in the
//! background, with a backoff (10 ms doubling to 1 s) that starts again only after a link has
//! lived [`HEALTHY_LINK`], so a server that accepts and then drops connections is not hammered.
//! At most `MAX_WAITING` calls wait on a link; past that a call fails at once
//! ([`WireError::Overloaded`]). Each new link is reported to `on_connect` before it takes
//! commands, as a new connection may lead to a restarted master.
//!
//! A `rediss://` master's links are TLS (`stream`); a [`Detached`] connection is opened the
//! same way for the start-up's permission check and carries no lock command.

mod handshake;
mod link;
mod stream;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

use self::handshake::{open, Fence};
use self::link::Link;
pub use self::link::{MAX_WAITING, STALL_LIMIT};
use self::stream::Stream;
use crate::backoff::Backoff;
use crate::fleet::credentials::Password;
use crate::resp::Commands;

/// Why a command sent on the wire got no reply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// No link to the master right now (one is being made).
    #[error("not connected")]
    Down,
    /// Too many calls already wait on the link: not sent.
    #[error("too many calls waiting")]
    Overloaded,
    /// The link failed while the command was in flight; it may or may not have run.
    #[error("{0}")]
    Connection(String),
}

pub use crate::resp::{Replies, Reply};

/// Why a connection could not be opened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Connect, read or write failed, the master closed the connection, answered nothing
    /// usable, or not in time: it may be down.
    #[error("{0}")]
    Unreachable(String),
    /// The TLS handshake failed: a certificate not trusted or not for this host, the client
    /// certificate refused, or no TLS on that port.
    #[error("TLS handshake failed: {0}")]
    Tls(String),
    /// The master answered the handshake with an error reply (a wrong password, a missing
    /// permission).
    #[error("handshake refused: {0}")]
    Refused(String),
}

/// Where and how to connect. `Debug` shows no password.
#[derive(Clone)]
pub struct Target {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// ACL user for `HELLO … AUTH`, when not `default`.
    pub username: Option<String>,
    /// Password for `HELLO … AUTH`.
    pub password: Option<Password>,
    /// Database for `SELECT`, when not 0.
    pub database: Option<u8>,
    /// Bound on one connection attempt, handshake included.
    pub connect_timeout: Duration,
    /// `Some` for a `rediss://` master.
    pub tls: Option<TlsTarget>,
}

/// How a `rediss://` master is spoken to: the fleet's shared TLS configuration and the name
/// its certificate must carry (the URL's host).
#[derive(Clone)]
pub struct TlsTarget {
    /// The rustls connector (roots, client certificate).
    pub connector: TlsConnector,
    /// The name the server's certificate must carry.
    pub server_name: ServerName<'static>,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("username", &self.username)
            .field("password", &self.password)
            .field("database", &self.database)
            .field("connect_timeout", &self.connect_timeout)
            .field("tls", &self.tls.as_ref().map(|t| &t.server_name))
            .finish()
    }
}

/// The lock path's connection to one master, re-made whenever it fails.
pub struct Wire {
    target: Target,
    me: Weak<Wire>,
    link: Mutex<Slot>,
    /// Closed for good (the fleet quit or was dropped): no new links.
    closed: AtomicBool,
    /// Whether a link is up: read on every lock call (`up`), waited on by `wait_for_connect`.
    /// Both change together, in `set_connected`.
    connected: watch::Sender<bool>,
    up: AtomicBool,
    /// Why the last connection attempt failed; `None` once a link is up (or before any
    /// attempt finished). A one-shot command names it when the master takes no writes.
    last_failure: watch::Sender<Option<OpenError>>,
    on_connect: Box<dyn Fn() + Send + Sync>,
}

/// The current link, and what making the next one needs to know.
struct Slot {
    current: Option<Arc<Link>>,
    /// A task is making a new link. Set and cleared under the same lock as `current`, so two
    /// links are never made at once.
    connecting: bool,
    /// The last link as the server knows it (`CLIENT ID`, and its address as the server sees
    /// it): the next link kills it first.
    last_link: Option<Fence>,
    /// The waits before the next attempts when the current link dies young.
    backoff: Backoff,
}

impl Default for Slot {
    fn default() -> Self {
        Self {
            current: None,
            connecting: false,
            last_link: None,
            backoff: fresh_backoff(),
        }
    }
}

/// Backoff between connection attempts.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// A link that lived this long resets the backoff when it fails.
pub const HEALTHY_LINK: Duration = Duration::from_secs(1);

/// The backoff of a wire never connected, or whose link was healthy: the first attempt at
/// once, then 10 ms doubling to 1 s.
fn fresh_backoff() -> Backoff {
    Backoff::at_once_then(FIRST_BACKOFF, MAX_BACKOFF)
}
// === impl Wire ===

impl Wire {
    /// A wire that connects on [`Wire::connect`] or on first use.
    pub fn new(target: Target, on_connect: Box<dyn Fn() + Send + Sync>) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            target,
            me: me.clone(),
            link: Mutex::new(Slot::default()),
            closed: AtomicBool::new(false),
            connected: watch::channel(false).0,
            up: AtomicBool::new(false),
            last_failure: watch::channel(None).0,
            on_connect,
        })
    }

    /// Starts making a link in the background unless one is up or being made.
    pub fn connect(&self) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let mut slot = lock(&self.link);
        if slot.current.is_some() || slot.connecting {
            return;
        }
        slot.connecting = true;
        let backoff = slot.backoff;
        drop(slot);
        tokio::spawn(keep_connecting(
            self.me.clone(),
            self.target.clone(),
            backoff,
        ));
    }

    /// Where and how it connects.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Whether the connection is up now.
    pub fn is_connected(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    fn set_connected(&self, up: bool) {
        // Under the channel's lock: two changes racing leave both in the same state.
        self.connected.send_modify(|connected| {
            *connected = up;
            self.up.store(up, Ordering::Release);
        });
    }

    /// Waits until a link is up.
    pub async fn wait_for_connect(&self) {
        let mut connected = self.connected.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait on it.
        let _ = connected.wait_for(|up| *up).await;
    }

    /// Why the last connection attempt failed, while no link is up.
    pub fn last_failure(&self) -> Option<OpenError> {
        self.last_failure.borrow().clone()
    }

    /// Sends `commands` and waits for their replies, in order. Without a link, starts making
    /// one and answers [`WireError::Down`].
    pub async fn send(&self, commands: &Commands) -> Result<Replies, WireError> {
        let link = lock(&self.link).current.clone();
        let Some(link) = link else {
            self.connect();
            return Err(WireError::Down);
        };
        let answer = link.submit(commands.count(), |out| {
            out.extend_from_slice(commands.encoded());
        })?;
        answer
            .await
            .unwrap_or_else(|_| Err(WireError::Connection("link dropped".into())))
    }

    /// Sends one command of `parts` (a RESP array of bulk strings) and waits for its reply.
    pub async fn command(&self, parts: &[&[u8]]) -> Result<Reply, WireError> {
        let mut one = Commands::with_capacity(64);
        one.push(parts);
        self.send_one(&one).await
    }

    /// Sends `commands`, which must hold exactly one command, and waits for its reply.
    pub async fn send_one(&self, commands: &Commands) -> Result<Reply, WireError> {
        debug_assert_eq!(commands.count(), 1);
        let mut replies = self.send(commands).await?;
        // A call is answered once it has as many replies as it sent commands.
        replies
            .pop()
            .ok_or_else(|| WireError::Connection("no reply".into()))
    }

    /// Closes the link for good; commands in flight fail.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let link = lock(&self.link).current.take();
        if let Some(link) = link {
            link.close("closed by redlease".into());
        }
        self.set_connected(false);
    }

    fn install(&self, stream: Stream, fence: Option<Fence>, backoff: Backoff) {
        if self.closed.load(Ordering::Acquire) {
            lock(&self.link).connecting = false;
            return;
        }
        // Abortive close: a failed link's unsent bytes are discarded, never written late.
        let _ = stream.socket().set_zero_linger();
        let link = Link::new(self.me.clone());
        {
            // Current before its tasks run, so a link that fails at once is replaced; and no
            // longer connecting under the same lock, so no second link is made meanwhile.
            let mut slot = lock(&self.link);
            slot.current = Some(Arc::clone(&link));
            slot.connecting = false;
            slot.last_link = fence;
            slot.backoff = backoff;
        }
        self.last_failure.send_replace(None);
        self.set_connected(true);
        link.run(stream);
    }

    /// `link` failed: forget it and make a new one (at once if it lived long enough).
    fn lost(&self, link: &Arc<Link>) {
        let mut slot = lock(&self.link);
        if slot.current.as_ref().is_some_and(|c| Arc::ptr_eq(c, link)) {
            slot.current = None;
            if link.age() >= HEALTHY_LINK {
                slot.backoff = fresh_backoff();
            }
            drop(slot);
            self.set_connected(false);
            self.connect();
        }
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        self.close();
    }
}

/// Makes a link, retrying with `backoff` (its first wait comes before the first attempt) until
/// one is up or the wire is gone.
async fn keep_connecting(wire: Weak<Wire>, target: Target, mut backoff: Backoff) {
    loop {
        let wait = backoff.next_wait();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let Some(fence) = wire.upgrade().map(|w| lock(&w.link).last_link.clone()) else {
            return;
        };
        let attempt = open(&target, fence).await;
        let Some(live) = wire.upgrade() else { return };
        if live.closed.load(Ordering::Acquire) {
            lock(&live.link).connecting = false;
            return;
        }
        if let Err(reason) = &attempt {
            live.last_failure.send_replace(Some(reason.clone()));
        }
        match attempt {
            Ok((stream, fence)) => {
                // Told before the link takes commands: the owner stops lock writes until it
                // has checked who answers on this new connection.
                (live.on_connect)();
                live.install(stream, Some(fence), backoff);
                return;
            }
            // A refusal (wrong password, a missing permission such as CLIENT KILL) or a failed
            // TLS handshake is the operator's to fix: said at warn, at most once per backoff step.
            Err(reason @ (OpenError::Refused(_) | OpenError::Tls(_))) => {
                tracing::warn!(host = %target.host, port = target.port, %reason, "lock link refused");
            }
            Err(reason) => {
                tracing::debug!(host = %target.host, port = target.port, %reason, "lock link not made");
            }
        }
    }
}

/// A connection of its own to a master, opened as a lock link is (TLS, `AUTH`, `SELECT`,
/// `CLIENT ID`, `INFO server`), that carries a few commands and is then dropped: the start-up
/// checks the master's permissions on it, out of the lock path's way.
pub struct Detached(Stream);

impl Detached {
    /// Opens it within the target's connect timeout.
    pub async fn open(target: &Target) -> Result<Self, OpenError> {
        let (stream, _) = open(target, None).await?;
        Ok(Self(stream))
    }

    /// Sends `commands` and reads their replies, error replies included. Unbounded: the
    /// caller bounds it.
    pub async fn send(&mut self, commands: &Commands) -> Result<Vec<Reply>, OpenError> {
        handshake::send(&mut self.0, commands).await
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here only moves buffers and queue entries; a panic inside one
    // (there is no code that can panic there) would leave them usable.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
