//! The API's listening socket: TCP, or a Unix domain socket file. A Unix socket is created
//! with mode 0660 before any client can reach it (bound in a private directory, given its
//! mode, then moved into place), refuses to start over a live socket, replaces a stale one,
//! never replaces a file that is not a socket, and is removed when the listener goes.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use crate::config::Listen;
use crate::sockdiag::{self, SocketId};

/// Mode of the API's Unix socket: owner and group may connect.
pub const UNIX_SOCKET_MODE: u32 = 0o660;
/// How long the check for a live socket at the path waits for it to accept.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Why the API cannot listen where it is told to.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// The address or path cannot be bound.
    #[error("cannot listen on {listen}: {source}")]
    Bind {
        /// Where it was told to listen.
        listen: Listen,
        /// What the system said.
        #[source]
        source: io::Error,
    },
    /// A live process already serves on the socket file.
    #[error("{}: another process already serves on this socket", .0.display())]
    InUse(PathBuf),
    /// The path exists and is not a socket.
    #[error("{}: exists and is not a socket; not replacing it", .0.display())]
    NotASocket(PathBuf),
}

/// A bound listener, TCP or Unix.
pub enum Listener {
    /// A TCP listener.
    Tcp(TcpListener),
    /// A Unix socket listener, and its file (removed when dropped).
    Unix(UnixListener, SocketFile),
}

/// An accepted connection.
pub(super) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// Which socket a connection is on, for the checks of an event stream (`sockdiag`); asked
/// once per event stream, never for ordinary requests.
pub(super) trait Identify {
    fn identify(&self) -> Option<SocketId>;
}

impl Identify for TcpStream {
    fn identify(&self) -> Option<SocketId> {
        let (local, peer) = (self.local_addr().ok()?, self.peer_addr().ok()?);
        Some(SocketId::Tcp { local, peer })
    }
}

impl Identify for UnixStream {
    fn identify(&self) -> Option<SocketId> {
        let inode = sockdiag::inode_of(self.as_fd()).ok()?;
        Some(SocketId::Unix { inode })
    }
}

/// In-memory pipes (the unit tests' sockets) have no socket to check.
#[cfg(test)]
impl Identify for tokio::io::DuplexStream {
    fn identify(&self) -> Option<SocketId> {
        None
    }
}

impl From<TcpListener> for Listener {
    fn from(listener: TcpListener) -> Self {
        Listener::Tcp(listener)
    }
}

impl Listener {
    /// Binds `listen`: a TCP address, or a Unix socket file (see the module's rules).
    pub async fn bind(listen: &Listen) -> Result<Self, ListenError> {
        let failed = |source| ListenError::Bind {
            listen: listen.clone(),
            source,
        };
        match listen {
            Listen::Tcp(addr) => TcpListener::bind(addr)
                .await
                .map(Listener::Tcp)
                .map_err(failed),
            Listen::Unix(path) => {
                clear_the_way(path).await?;
                let (listener, file) = bind_unix(path).map_err(failed)?;
                Ok(Listener::Unix(listener, file))
            }
        }
    }

    /// Where it listens, as `listen` names it (the port the kernel chose included).
    pub fn local(&self) -> io::Result<Listen> {
        match self {
            Listener::Tcp(listener) => listener.local_addr().map(Listen::Tcp),
            Listener::Unix(_, file) => Ok(Listen::Unix(file.path.clone())),
        }
    }

    /// Whether clients come through a Unix socket (no `Host` check: no browser reaches it).
    pub fn is_unix(&self) -> bool {
        matches!(self, Listener::Unix(..))
    }

    pub(super) async fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(listener) => {
                let (stream, _) = listener.accept().await?;
                // Answers are small and sent whole: no delay for coalescing.
                let _ = stream.set_nodelay(true);
                Ok(Stream::Tcp(stream))
            }
            Listener::Unix(listener, _) => Ok(Stream::Unix(listener.accept().await?.0)),
        }
    }
}

/// Refuses a live socket or a file that is not a socket at `path`; removes a stale socket
/// (nothing accepts on it).
async fn clear_the_way(path: &Path) -> Result<(), ListenError> {
    let bind_error = |source| ListenError::Bind {
        listen: Listen::Unix(path.to_path_buf()),
        source,
    };
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(bind_error(error)),
    };
    if !meta.file_type().is_socket() {
        return Err(ListenError::NotASocket(path.to_path_buf()));
    }
    let probe = tokio::time::timeout(PROBE_TIMEOUT, UnixStream::connect(path)).await;
    let probe = probe.unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()));
    match probe {
        Ok(_) => Err(ListenError::InUse(path.to_path_buf())),
        Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::info!(path = %path.display(), "replacing a stale socket");
            std::fs::remove_file(path).map_err(bind_error)
        }
        Err(error) => Err(bind_error(error)),
    }
}

/// Binds a socket in a private directory next to `path`, gives it its mode, then moves it to
/// `path`: nobody can connect before the mode is set.
fn bind_unix(path: &Path) -> io::Result<(UnixListener, SocketFile)> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    let parent = parent.unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "the socket path names no file")
    })?;
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let private = parent.join(format!(".redlease-{}-{nanos}.tmp", std::process::id()));
    std::fs::DirBuilder::new().mode(0o700).create(&private)?;
    let bound = (|| -> io::Result<UnixListener> {
        let staged = private.join(name);
        let listener = UnixListener::bind(&staged)?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(UNIX_SOCKET_MODE))?;
        std::fs::rename(&staged, path)?;
        Ok(listener)
    })();
    let _ = std::fs::remove_dir_all(&private);
    let listener = bound?;
    let inode = std::fs::symlink_metadata(path)?.ino();
    let file = SocketFile {
        path: path.to_path_buf(),
        inode,
    };
    Ok((listener, file))
}

/// The socket file of a Unix listener, removed on drop if it is still the one bound here.
pub struct SocketFile {
    path: PathBuf,
    inode: u64,
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|meta| meta.file_type().is_socket() && meta.ino() == self.inode);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
