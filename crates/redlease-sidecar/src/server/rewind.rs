//! A connection's socket with bytes already read from it put back in front: what the fast lane
//! read of a request it does not take is read again by hyper, then the socket itself.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `inner`, whose reads first return `prefix`.
pub(super) struct Rewind<T> {
    prefix: Vec<u8>,
    /// How much of `prefix` was read again.
    read: usize,
    inner: T,
}

impl<T> Rewind<T> {
    pub(super) fn new(prefix: Vec<u8>, inner: T) -> Self {
        Self {
            prefix,
            read: 0,
            inner,
        }
    }

    pub(super) fn inner_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let left = &this.prefix[this.read..];
        if left.is_empty() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let n = left.len().min(buf.remaining());
        buf.put_slice(&left[..n]);
        this.read += n;
        if this.read == this.prefix.len() {
            // Read again whole: its memory is not kept for the connection's life.
            this.prefix = Vec::new();
            this.read = 0;
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
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
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The prefix comes first, across reads smaller than it, then the socket's bytes; writes
    /// go to the socket.
    #[tokio::test]
    async fn reads_the_prefix_then_the_socket() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut rewound = Rewind::new(b"GET / HTTP/1.1\r\n".to_vec(), near);
        far.write_all(b"host: x\r\n\r\n").await.unwrap();
        let mut first = [0u8; 5];
        rewound.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"GET /");
        let mut rest = vec![0u8; 11 + 11];
        rewound.read_exact(&mut rest).await.unwrap();
        assert_eq!(rest, b" HTTP/1.1\r\nhost: x\r\n\r\n");
        rewound.write_all(b"answer").await.unwrap();
        let mut answer = [0u8; 6];
        far.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"answer");
    }
}
