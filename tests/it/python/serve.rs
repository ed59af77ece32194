//! A real `redlease serve` process for the Python tools: on a loopback port the kernel chose
//! (it binds port 0 and names the port),
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
        // Port 0: the sidecar binds a port the kernel chose and names it on its first line.
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlease"))
            .args(["serve", "--masters", &fleet.urls().join(",")])
            .args(["--listen", "127.0.0.1:0"])
            .env("REDLEASE__AUTH__TOKEN_FILE", &token_file)
            .envs(env.iter().copied())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
        let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await;
        let first = first.ok().and_then(|line| line.ok().flatten());
        let first = first.unwrap_or_else(|| {
            let logged = std::fs::read_to_string(&log).unwrap_or_default();
            panic!("the sidecar named no address:\n{logged}")
        });
        // "redlease sidecar on 127.0.0.1:PORT with N masters"
        let addr = first.split_whitespace().nth(3).unwrap().to_string();
        // Later lines go nowhere; the pipe stays open for the sidecar's life.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
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
