//! The engine as a library: take a lock over independent masters, act under it with its
//! fencing token, release it.
//!
//! ```sh
//! cargo run -p redlease-engine --example close_the_books -- redis://127.0.0.1:6379,redis://127.0.0.1:6380,redis://127.0.0.1:6381
//! ```

use std::time::Duration;

use redlease_engine::{AcquireOutcome, EngineOptions, Fleet, FleetOptions, Redlock};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), redlease_engine::Error> {
    let Some(list) = std::env::args().nth(1) else {
        eprintln!("usage: close_the_books redis://host:port,redis://host:port,...");
        std::process::exit(64);
    };
    let masters: Vec<String> = list.split(',').map(String::from).collect();
    let fleet = Fleet::connect(&masters, &FleetOptions::default()).await?;
    let _probe = fleet.spawn_probe(Duration::from_millis(500)); // RTT, breakers, rejoins
    let engine = Redlock::new(fleet, EngineOptions::default());
    match engine
        .acquire("nightly-billing", "worker-7", Duration::from_secs(10))
        .await?
    {
        AcquireOutcome::Acquired(lease) => {
            // Act only while lease.is_valid(now), and pass the token to what you write.
            println!("holding nightly-billing with token {}", lease.fencing_token);
            engine.release(&lease.resource, lease.id).await?;
        }
        AcquireOutcome::Contended(_) => println!("held by someone else"),
        // refusal.votes says what each master did.
        AcquireOutcome::NoQuorum(refusal) => println!("no quorum: {:?}", refusal.cause),
    }
    // Before exiting: let in-flight releases finish.
    engine.settle(Duration::from_secs(2)).await;
    Ok(())
}
