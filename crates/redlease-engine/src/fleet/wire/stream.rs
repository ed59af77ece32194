//! The byte stream under a lock connection: plain TCP, or TLS over TCP for a `rediss://`
//! master. An enum rather than a boxed trait object, so a plain link reads and writes its
//! socket's own halves (`TcpStream::into_split`, no lock, no extra copy); only a TLS link goes
//! through `tokio::io::split`. Either way the TCP socket has `TCP_NODELAY` and keepalive set.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_util::either::Either;

use super::{OpenError, Target};
use crate::fleet::tls::tls_failure;

/// Idle links are probed by TCP keepalive after this long, then every `KEEPALIVE_INTERVAL`.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);

/// A connected stream to a master.
pub(super) enum Stream {
    Plain(TcpStream),
    /// Boxed: a TLS stream is far larger than a socket.
    Tls(Box<TlsStream<TcpStream>>),
}

/// The reading half of a [`Stream`].
pub(super) type ReadHalf = Either<OwnedReadHalf, tokio::io::ReadHalf<TlsStream<TcpStream>>>;

/// The writing half of a [`Stream`]. A TLS write may leave bytes inside rustls when the socket
/// is full: a writer flushes after each write (a no-op on plain TCP).
pub(super) type WriteHalf = Either<OwnedWriteHalf, tokio::io::WriteHalf<TlsStream<TcpStream>>>;

// === impl Stream ===

impl Stream {
    /// Connects to `target`, sets the TCP options, and runs the TLS handshake when the target
    /// has TLS. Not bounded here: the caller bounds the whole attempt.
    pub(super) async fn connect(target: &Target) -> Result<Self, OpenError> {
        let unreachable = |e: io::Error| OpenError::Unreachable(e.to_string());
        let socket = TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(unreachable)?;
        socket.set_nodelay(true).map_err(unreachable)?;
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(KEEPALIVE_IDLE)
            .with_interval(KEEPALIVE_INTERVAL);
        let _ = socket2::SockRef::from(&socket).set_tcp_keepalive(&keepalive);
        let Some(tls) = &target.tls else {
            return Ok(Self::Plain(socket));
        };
        let name = tls.server_name.clone();
        match tls.connector.connect(name, socket).await {
            Ok(stream) => Ok(Self::Tls(Box::new(stream))),
            Err(error) => Err(OpenError::from_io(&error)),
        }
    }

    /// The TCP socket under the stream.
    pub(super) fn socket(&self) -> &TcpStream {
        match self {
            Self::Plain(socket) => socket,
            Self::Tls(stream) => stream.get_ref().0,
        }
    }

    pub(super) fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Self::Plain(socket) => {
                let (read, write) = socket.into_split();
                (Either::Left(read), Either::Left(write))
            }
            Self::Tls(stream) => {
                let (read, write) = tokio::io::split(*stream);
                (Either::Right(read), Either::Right(write))
            }
        }
    }
}

impl OpenError {
    /// An I/O error of a connection being opened: a TLS failure, or an unreachable master.
    pub(super) fn from_io(error: &io::Error) -> Self {
        match tls_failure(error) {
            Some(failure) => OpenError::Tls(failure),
            None => OpenError::Unreachable(error.to_string()),
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(socket) => Pin::new(socket).poll_read(cx, buf),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(socket) => Pin::new(socket).poll_write(cx, buf),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(socket) => Pin::new(socket).poll_flush(cx),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(socket) => Pin::new(socket).poll_shutdown(cx),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}
