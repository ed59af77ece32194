//! The sidecar embedded in another program: settings from `REDLEASE__…` variables, the API
//! served on loopback until Ctrl-C, every lease released on the way out.
//!
//! ```sh
//! REDLEASE__MASTERS=redis://127.0.0.1:6379,redis://127.0.0.1:6380,redis://127.0.0.1:6381 \
//!     cargo run -p redlease-sidecar --example embedded_sidecar
//! ```

use redlease_sidecar::config::{Overrides, Settings};
use redlease_sidecar::server::{Listener, Sidecar};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let overrides = Overrides {
        masters: None,
        listen: Some("127.0.0.1:0".into()),
    };
    let settings = Settings::load(None, std::env::vars(), overrides)?;
    let listener = Listener::bind(&settings.listen).await?;
    println!("serving on {:?}", listener.local()?);
    let sidecar = Sidecar::start(&settings).await?;
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    sidecar.run(listener, stop).await;
    Ok(())
}
