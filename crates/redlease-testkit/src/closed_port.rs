//! A loopback port that refuses every connection for as long as the test holds it: a socket
//! bound to it that never listens, so the kernel answers each SYN with a reset, and no other
//! test (nor any other process) can take the port meanwhile, as it could a port freed by a
//! stopped server.

use std::net::{Ipv4Addr, SocketAddr};

use socket2::{Domain, Socket, Type};

/// A port on 127.0.0.1 that refuses connections while this lives.
pub struct ClosedPort {
    _socket: Socket,
    /// The port.
    pub port: u16,
}

impl ClosedPort {
    /// Binds a kernel-chosen port without listening on it.
    pub fn new() -> Self {
        // A loopback socket that cannot be made or bound fails the test.
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        socket.bind(&any.into()).unwrap();
        let port = socket.local_addr().unwrap().as_socket().unwrap().port();
        Self {
            _socket: socket,
            port,
        }
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Default for ClosedPort {
    fn default() -> Self {
        Self::new()
    }
}
