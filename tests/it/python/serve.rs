//! A real `redlease serve` process for the Python tools: on a loopback port the kernel chose,
//! with a bearer token from a file, its log in a file; SIGTERM on drop (SIGKILL if it lingers),
//! both by its pid.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use redlease_testkit::TestFleet;

/// The token the sidecar is given and the tools send.
pub const TOKEN: &str = "py-tok-4c1d8e2a9f7b";

/// A sidecar process, stopped when dropped.
pub struct Serve {
    child: tokio::process::Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    log: PathBuf,
    /// Holds the token file and the log.
    _dir: tempfile::TempDir,
}

impl Serve {
    /// Starts `redlease serve` on `fleet` with `env` (`REDLEASE__…` pairs) besides the token,
    /// and waits until `/readyz` answers 200 (within 20 s).
    pub async fn start(fleet: &TestFleet, env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
        let log = dir.path().join("serve.log");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlease"))
            .args(["serve", "--masters", &fleet.urls().join(",")])
            .args(["--listen", &addr.to_string()])
            .env("REDLEASE__AUTH__TOKEN_FILE", &token_file)
            .envs(env.iter().copied())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let serve = Self {
            child,
            base: format!("http://{addr}"),
            log,
            _dir: dir,
        };
        serve.wait_ready().await;
        serve
    }

    async fn wait_ready(&self) {
        let http = reqwest::Client::new();
        let url = format!("{}/readyz", self.base);
        for _ in 0..400 {
            let answer = http.get(&url).send().await;
            if answer.is_ok_and(|a| a.status() == 200) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the sidecar never became ready:\n{}", self.log_text());
    }

    /// What the sidecar logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let Some(pid) = self.child.id() else { return };
        let pid = Pid::from_raw(i32::try_from(pid).unwrap());
        let _ = kill(pid, Signal::SIGTERM);
        // Up to 10 s for the shutdown's releases and drain.
        for _ in 0..500 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.start_kill();
    }
}
