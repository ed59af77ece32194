//! Test support: real `redis-server` processes, a fleet of them, a fault-injecting TCP proxy,
//! and a tiny RESP client.

pub mod fleet;
pub mod proxy;
pub mod raw_exchange;
pub mod raw_http;
pub mod redis_server;
pub mod resp;
pub mod sidecar;
pub mod tls;

pub use fleet::TestFleet;

/// Runs the built `redlease ARGS` against `masters` (through `REDLEASE__MASTERS`), without the
/// test's `RUST_LOG`, and waits for it.
pub fn run_redlease(args: &[&str], masters: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_redlease"))
        .args(args)
        .env("REDLEASE__MASTERS", masters)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}
pub use redis_server::RedisServer;

/// Retries `$cond` every 10 ms until it holds or `$secs` seconds pass, then panics.
#[macro_export]
macro_rules! assert_eventually {
    ($cond:expr, $secs:expr, $($msg:tt)+) => {{
        let deadline = std::time::Duration::from_secs_f64($secs as f64);
        let start = tokio::time::Instant::now();
        loop {
            if $cond {
                break;
            }
            if start.elapsed() > deadline {
                panic!($($msg)+);
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }};
}
