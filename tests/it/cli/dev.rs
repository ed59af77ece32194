//! `redlease dev` for a person at the command line: it prints the line that points the other
//! commands at its throwaway masters.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

/// `redlease dev` prints `export REDLEASE__MASTERS=…` naming its masters, and `redlease lock
/// acquire` run with that variable takes a lock on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_prints_the_masters_line_the_cli_uses() {
    let mut dev = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlease"))
        .args(["dev", "--count", "3", "--listen", "127.0.0.1:0"])
        .env_remove("REDLEASE__MASTERS")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(dev.stdout.take().unwrap()).lines();
    let export = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(masters) = line.strip_prefix("export REDLEASE__MASTERS=") {
                return masters.to_string();
            }
        }
        panic!("redlease dev ended without an export line");
    };
    let masters = tokio::time::timeout(Duration::from_secs(20), export)
        .await
        .unwrap();
    assert_eq!(masters.split(',').count(), 3, "{masters}");
    let acquire = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlease"))
        .args(["lock", "acquire", "dev-job"])
        .env("REDLEASE__MASTERS", &masters)
        .env_remove("RUST_LOG")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(20), acquire)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let pid = nix::unistd::Pid::from_raw(dev.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let exited = tokio::time::timeout(Duration::from_secs(20), dev.wait()).await;
    assert_eq!(exited.unwrap().unwrap().code(), Some(0));
}
