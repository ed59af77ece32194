//! The kernel's answers on real loopback sockets: TCP and Unix, read and unread, a peer that
//! is not here, and what a query costs.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use tokio::time::Instant;

use super::*;

fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (server, client)
}

fn tcp_id(server: &TcpStream) -> SocketId {
    SocketId::Tcp {
        local: server.local_addr().unwrap(),
        peer: server.peer_addr().unwrap(),
    }
}

/// The TCP peer's counters: what it received from us, and what its application has not read.
#[test]
fn a_tcp_peer_reports_what_it_received_and_left_unread() {
    let (mut server, mut client) = tcp_pair();
    let id = tcp_id(&server);
    assert_eq!(
        reading(&id).unwrap(),
        Some(Reading::Tcp {
            received: 0,
            unread: 0
        })
    );
    server.write_all(b"hello world").unwrap();
    let sent = |received, unread| Some(Reading::Tcp { received, unread });
    eventually(|| reading(&id).unwrap() == sent(11, 11));
    let mut five = [0u8; 5];
    client.read_exact(&mut five).unwrap();
    assert_eq!(reading(&id).unwrap(), sent(11, 6));
}

/// A Unix stream's unconsumed writes drop to 0 once the peer read everything.
#[test]
fn a_unix_peer_consumes_what_was_sent() {
    let (mut ours, mut theirs) = UnixStream::pair().unwrap();
    let id = SocketId::Unix {
        inode: inode_of(ours.as_fd()).unwrap(),
    };
    assert_eq!(reading(&id).unwrap(), Some(Reading::Unix { unconsumed: 0 }));
    ours.write_all(b"hello world").unwrap();
    let Some(Reading::Unix { unconsumed }) = reading(&id).unwrap() else {
        panic!("no reading")
    };
    assert!(unconsumed > 0);
    let mut all = [0u8; 11];
    theirs.read_exact(&mut all).unwrap();
    assert_eq!(reading(&id).unwrap(), Some(Reading::Unix { unconsumed: 0 }));
}

/// A connection whose peer socket is not here (closed, or on another host) has no reading.
#[test]
fn a_peer_that_is_not_here_has_no_reading() {
    let (server, client) = tcp_pair();
    let id = tcp_id(&server);
    drop((server, client));
    let gone = SocketId::Tcp {
        local: "127.0.0.1:1".parse().unwrap(),
        peer: "127.0.0.1:2".parse().unwrap(),
    };
    assert_eq!(reading(&gone).unwrap(), None);
    let remote = SocketId::Tcp {
        local: "127.0.0.1:7600".parse().unwrap(),
        peer: "192.0.2.1:40000".parse().unwrap(),
    };
    assert_eq!(reading(&remote).unwrap(), None);
    let _ = reading(&id).unwrap(); // TIME_WAIT or gone: either answer, no error
}

/// What one query costs (printed; run with `--nocapture` to see it): well under a
/// millisecond, against heartbeats seconds apart.
#[test]
fn a_query_costs_microseconds() {
    let (server, _client) = tcp_pair();
    let id = tcp_id(&server);
    let (ours, _theirs) = UnixStream::pair().unwrap();
    let unix = SocketId::Unix {
        inode: inode_of(ours.as_fd()).unwrap(),
    };
    for (name, id) in [("tcp", id), ("unix", unix)] {
        let start = Instant::now();
        for _ in 0..1000 {
            reading(&id).unwrap().unwrap();
        }
        let each = start.elapsed() / 1000;
        eprintln!("sock_diag {name} query: {each:?} each");
        assert!(each.as_micros() < 1000, "{name}: {each:?} per query");
    }
}

/// Retries `check` for up to a second (loopback delivery is asynchronous, if quick).
fn eventually(check: impl Fn() -> bool) {
    for _ in 0..100 {
        if check() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(check(), "never held");
}
