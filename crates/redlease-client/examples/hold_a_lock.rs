//! The sidecar's Rust client: take a lock through a sidecar, work while the lease holds, stop
//! when the sidecar reports it lost, release it.
//!
//! ```sh
//! cargo run -p redlease-client --example hold_a_lock -- http://127.0.0.1:7600
//! ```

use std::time::Duration;

use redlease_client::{Client, ClientError};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), ClientError> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:7600".into());
    let sidecar = Client::new(&url)?;
    let guard = sidecar
        .lock("payments-close")
        .wait(Duration::from_secs(5))
        .send()
        .await?;
    let token = guard.fencing_token(); // pass it to what the job writes
    tokio::select! {
        () = tokio::time::sleep(Duration::from_secs(1)) => println!("done with token {token}"),
        end = guard.lost() => eprintln!("stopping: the lease {end}"),
    }
    guard.release().await?;
    Ok(())
}
