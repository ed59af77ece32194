//! Integration tests against real redis-server processes (no mocks), on loopback only.

mod support;

mod auth;
mod birth;
mod cli;
mod client;
mod deploy;
mod election;
mod engine;
mod faults;
mod fencing;
mod history;
mod hostile;
mod http_limits;
mod inventory;
mod kinds;
mod load;
mod lock_run;
mod lock_run_containment;
mod membership;
mod metrics;
mod monitoring;
mod prometheus;
mod proxy;
mod python;
mod reenter;
mod release_retry;
mod revocation;
mod safety;
mod scripts;
mod semaphore;
mod semaphore_run;
mod sidecar;
mod tls;
mod unix_socket;
mod wire;
