//! Test support: real `redis-server` processes, a fleet of them, a fault-injecting TCP proxy,
//! and a tiny RESP client.

pub mod fleet;
pub mod proxy;
pub mod redis_server;
pub mod resp;
pub mod sidecar;

pub use fleet::TestFleet;
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
