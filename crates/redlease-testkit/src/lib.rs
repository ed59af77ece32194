//! redlease-testkit: what the integration tests (`tests/it`) and the benches (`benches/`)
//! share — real `redis-server` processes on kernel-chosen loopback ports, faults between them
//! and their clients, the sidecar in-process, and raw clients for RESP and HTTP. Not
//! published; only tests and benches depend on it. Every helper panics on failure, with what
//! it knows (a server's log, the bytes received): a panic here is the test's failure.
//!
//! # Layout
//!
//! 1. [`fleet`]: a fleet of masters for one test ([`TestFleet`]) and an engine on it; prints
//!    every master's log when the test panics.
//! 2. [`sidecar`]: the sidecar in-process on `127.0.0.1:0` ([`sidecar::TestSidecar`]) and a
//!    reader of its Server-Sent Events.
//! 3. [`tls`]: TLS masters, their certificates (made with the openssl CLI) and ACL users.
//! 4. [`proxy`]: a fault-injecting TCP proxy in front of one master (delay, blackhole, reset,
//!    refusal, a client cut while its bytes are in flight).
//! 5. [`history`]: the reusable part of a history checker (windows, a fenced register, the
//!    pure checks).
//! 6. Leaves: [`redis_server`] (one `redis-server`, through `redlease-dev`'s launcher, killed
//!    with the thread that started it), [`resp`] (a blocking RESP2 client to inspect masters),
//!    [`http`] (the one raw HTTP/1.x client, for hostile input and the lean bench client),
//!    [`closed_port`] (a port that refuses connections while held), and
//!    [`assert_eventually!`].
#![deny(unsafe_code)]
#![deny(rust_2018_idioms)]
#![warn(missing_docs, unreachable_pub)]

pub mod closed_port;
pub mod fleet;
pub mod history;
pub mod http;
pub mod proxy;
pub mod redis_server;
pub mod resp;
pub mod sidecar;
pub mod tls;

pub use fleet::TestFleet;
pub use redis_server::RedisServer;

#[doc(hidden)]
pub mod __private {
    pub use tokio;
}

/// Retries `$cond` every 10 ms until it holds or `$secs` seconds pass, then panics with the
/// message that follows (a `format!` string and its arguments).
#[macro_export]
macro_rules! assert_eventually {
    ($cond:expr, $secs:expr, $($msg:tt)+) => {{
        let deadline = std::time::Duration::from_secs_f64($secs as f64);
        let start = $crate::__private::tokio::time::Instant::now();
        loop {
            if $cond {
                break;
            }
            if start.elapsed() > deadline {
                panic!($($msg)+);
            }
            $crate::__private::tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }};
}
