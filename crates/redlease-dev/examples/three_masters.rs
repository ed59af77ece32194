//! A throwaway fleet of three local masters (`redis-server` on kernel-chosen loopback ports,
//! each in a temp dir): their URLs printed, one of them restarted empty, all stopped.
//!
//! ```sh
//! cargo run -p redlease-dev --example three_masters
//! ```

use redlease_dev::{redis_server_binary, DevError, LocalFleet};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), DevError> {
    let mut fleet = LocalFleet::start(3, &redis_server_binary()).await?;
    println!("masters: {}", fleet.urls().join(","));
    // Empty memory, a new run_id, the same port: what a restart without persistence does.
    fleet.restart(0).await?;
    println!("master 0 restarted");
    fleet.stop().await;
    Ok(())
}
