//! How far the peer of a local connection has read what this process sent it, asked of the
//! Linux kernel through `NETLINK_SOCK_DIAG` (what `ss` shows; no privilege needed): for TCP,
//! the peer socket's receive counters (found by the connection's addresses); for a Unix
//! stream socket, what of this side's writes the peer has not consumed yet (found by inode).
//!
//! Each query opens its own netlink socket and makes one request and one answer (a few
//! microseconds, bounded by a 100 ms receive timeout). A peer that lives elsewhere — another
//! host, another network namespace — has no socket here: the answer is `None`. It does not
//! own what the answers mean (see `lease::reading`).

use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

/// A connection's socket as the kernel knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SocketId {
    /// A TCP connection: this side's address and the peer's.
    Tcp { local: SocketAddr, peer: SocketAddr },
    /// A Unix stream socket: this side's inode.
    Unix { inode: u64 },
}

/// What the kernel says about the data sent on a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reading {
    /// The TCP peer socket: bytes it has received (its kernel's count since the connection
    /// began), and of those the bytes its application has not read yet.
    Tcp { received: u64, unread: u32 },
    /// This side of a Unix stream: memory of the writes the peer has not consumed yet (0 once
    /// it consumed everything; not a byte count).
    Unix { unconsumed: u32 },
}

const AF_UNIX: u8 = 1;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const AF_NETLINK: i32 = 16;
const NETLINK_SOCK_DIAG: i32 = 4;
const IPPROTO_TCP: u8 = 6;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const ENOENT: i32 = 2;
/// Header of every netlink message.
const NLMSG_HDR: usize = 16;
/// `struct inet_diag_msg`, before its attributes.
const INET_DIAG_MSG: usize = 72;
/// `INET_DIAG_INFO`: the attribute carrying `struct tcp_info`.
const INET_DIAG_INFO: u16 = 2;
/// `tcpi_bytes_received` in `struct tcp_info` (Linux 4.1 and later).
const TCPI_BYTES_RECEIVED: usize = 128;
/// `struct unix_diag_msg`, before its attributes.
const UNIX_DIAG_MSG: usize = 16;
/// `UNIX_DIAG_RQLEN`: the attribute carrying `{rqueue, wqueue}`.
const UNIX_DIAG_RQLEN: u16 = 4;
const UDIAG_SHOW_RQLEN: u32 = 0x10;
const ANSWER_TIMEOUT: Duration = Duration::from_millis(100);

/// What the kernel says about `id` now; `None` when the socket it needs is not in this
/// network namespace (a peer elsewhere) or is gone.
pub(crate) fn reading(id: &SocketId) -> io::Result<Option<Reading>> {
    match *id {
        SocketId::Tcp { local, peer } => tcp_peer(local, peer),
        SocketId::Unix { inode } => unix_unconsumed(inode),
    }
}

/// The inode of the socket `fd` (what a Unix socket is looked up by), from `/proc/self/fd`.
pub(crate) fn inode_of(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    Ok(std::fs::metadata(link)?.ino())
}

/// The peer's socket of the TCP connection `local` ⇄ `peer`, looked up from its own side.
fn tcp_peer(local: SocketAddr, peer: SocketAddr) -> io::Result<Option<Reading>> {
    let (family, src, dst) = match (unmap(peer.ip()), unmap(local.ip())) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => (AF_INET, v4_words(src), v4_words(dst)),
        (src, dst) => (AF_INET6, ip_words(src), ip_words(dst)),
    };
    let mut request = Vec::with_capacity(56);
    request.extend_from_slice(&[family, IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0]);
    request.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    request.extend_from_slice(&peer.port().to_be_bytes());
    request.extend_from_slice(&local.port().to_be_bytes());
    request.extend_from_slice(&src);
    request.extend_from_slice(&dst);
    request.extend_from_slice(&0u32.to_ne_bytes()); // any interface
    request.extend_from_slice(&[0xff; 8]); // no cookie
    let Some(answer) = ask(&request)? else {
        return Ok(None);
    };
    let unread = u32_at(&answer, 56).ok_or_else(short)?;
    let info = attribute(&answer, INET_DIAG_MSG, INET_DIAG_INFO).ok_or_else(short)?;
    let received = u64_at(info, TCPI_BYTES_RECEIVED).ok_or_else(short)?;
    Ok(Some(Reading::Tcp { received, unread }))
}

/// This side of a Unix stream socket, by inode: what the peer has not consumed of its writes.
fn unix_unconsumed(inode: u64) -> io::Result<Option<Reading>> {
    let Ok(inode) = u32::try_from(inode) else {
        return Ok(None); // the kernel's socket inodes are 32 bits
    };
    let mut request = Vec::with_capacity(24);
    request.extend_from_slice(&[AF_UNIX, 0, 0, 0]);
    request.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    request.extend_from_slice(&inode.to_ne_bytes());
    request.extend_from_slice(&UDIAG_SHOW_RQLEN.to_ne_bytes());
    request.extend_from_slice(&[0xff; 8]); // no cookie
    let Some(answer) = ask(&request)? else {
        return Ok(None);
    };
    let queues = attribute(&answer, UNIX_DIAG_MSG, UNIX_DIAG_RQLEN).ok_or_else(short)?;
    let unconsumed = u32_at(queues, 4).ok_or_else(short)?;
    Ok(Some(Reading::Unix { unconsumed }))
}

/// Sends one `SOCK_DIAG_BY_FAMILY` request and returns the payload of its answer; `None` when
/// the kernel has no such socket.
fn ask(request: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let socket = Socket::new(
        Domain::from(AF_NETLINK),
        Type::DGRAM,
        Some(Protocol::from(NETLINK_SOCK_DIAG)),
    )?;
    socket.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    let length = u32::try_from(NLMSG_HDR + request.len()).map_err(|_| short())?;
    let mut message = Vec::with_capacity(NLMSG_HDR + request.len());
    message.extend_from_slice(&length.to_ne_bytes());
    message.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    message.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    message.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    message.extend_from_slice(&0u32.to_ne_bytes()); // the kernel fills the port id
    message.extend_from_slice(request);
    socket.send(&message)?; // no address: to the kernel
    let mut answer = vec![0u8; 8192];
    let n = (&socket).read(&mut answer)?;
    answer.truncate(n);
    let kind = u16_at(&answer, 4).ok_or_else(short)?;
    if kind == NLMSG_ERROR {
        let code = u32_at(&answer, NLMSG_HDR).ok_or_else(short)? as i32;
        return match -code {
            0 | ENOENT => Ok(None),
            errno => Err(io::Error::from_raw_os_error(errno)),
        };
    }
    let end = (u32_at(&answer, 0).ok_or_else(short)? as usize).min(answer.len());
    Ok(answer.get(NLMSG_HDR..end).map(<[u8]>::to_vec))
}

/// The payload of the first attribute of `kind` after the fixed part (`skip` bytes).
fn attribute(payload: &[u8], skip: usize, kind: u16) -> Option<&[u8]> {
    let mut at = skip;
    while at + 4 <= payload.len() {
        let length = usize::from(u16_at(payload, at)?);
        if length < 4 || at + length > payload.len() {
            return None;
        }
        if u16_at(payload, at + 2)? == kind {
            return payload.get(at + 4..at + length);
        }
        at += (length + 3) & !3;
    }
    None
}

/// An IPv4-mapped IPv6 address as IPv4 (a dual-stack listener's view of an IPv4 client).
fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn v4_words(ip: std::net::Ipv4Addr) -> [u8; 16] {
    let mut words = [0u8; 16];
    words[..4].copy_from_slice(&ip.octets());
    words
}

fn ip_words(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

fn short() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "sock_diag answer cut short")
}

#[cfg(test)]
mod tests;
