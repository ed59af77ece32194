//! The API on a Unix domain socket (`listen = "unix:/path"`), through real `redlease serve`
//! processes: it serves HTTP/1.1 there with mode 0660 and no `Host` check, removes the file on
//! SIGTERM, refuses to start over a live socket or a file that is not a socket, and replaces
//! a stale socket.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use redlease_testkit::http::Conn;
use redlease_testkit::TestFleet;
use tokio::net::UnixStream;

/// A `redlease serve` child on a Unix socket, killed if the test fails.
struct UnixServe {
    child: tokio::process::Child,
    path: PathBuf,
}

impl UnixServe {
    fn start(fleet: &TestFleet, path: &Path) -> Self {
        let child = command(fleet, path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Self {
            child,
            path: path.to_path_buf(),
        }
    }

    /// A connection once the sidecar accepts on its socket.
    async fn connect(&self) -> Conn<UnixStream> {
        for _ in 0..400 {
            if let Ok(stream) = UnixStream::connect(&self.path).await {
                return Conn::new(stream);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("nothing accepts on {}", self.path.display());
    }

    /// Sends SIGTERM and returns the exit code.
    async fn terminate(mut self) -> Option<i32> {
        let pid = nix::unistd::Pid::from_raw(self.child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let waited = tokio::time::timeout(Duration::from_secs(10), self.child.wait());
        waited.await.unwrap().unwrap().code()
    }
}

/// `redlease serve` on `fleet`, its API at `unix:<path>` (set through the environment).
fn command(fleet: &TestFleet, path: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlease"));
    command
        .arg("serve")
        .env("REDLEASE__MASTERS", fleet.urls().join(","))
        .env("REDLEASE__LISTEN", format!("unix:{}", path.display()))
        .env_remove("RUST_LOG");
    command
}

/// Runs a second `redlease serve` on `path` to its end: exit code and stderr.
async fn second_serve(fleet: &TestFleet, path: &Path) -> (Option<i32>, String) {
    let output = command(fleet, path).kill_on_drop(true).output();
    let output = tokio::time::timeout(Duration::from_secs(20), output).await;
    let output = output.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), stderr)
}

const ACQUIRE: &[u8] = b"POST /v1/locks/job/acquire HTTP/1.1\r\nhost: evil.example\r\n\
    content-type: application/json\r\ncontent-length: 13\r\n\r\n{\"owner\":\"a\"}";

/// The API answers over the socket (any `Host`: no browser reaches a Unix socket), the
/// socket has mode 0660, and SIGTERM releases the lease and removes the socket file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_serves_over_a_unix_socket_with_mode_0660() {
    let fleet = TestFleet::start(1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.sock");
    let serve = UnixServe::start(&fleet, &path);
    let mut conn = serve.connect().await;
    let answer = conn.exchange(ACQUIRE).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.json()["owner"], "a");
    let meta = std::fs::metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(fleet.lock_keys_on(&[0]).len(), 1);
    drop(conn);
    assert_eq!(serve.terminate().await, Some(0));
    assert!(!path.exists(), "the socket file is left after SIGTERM");
    assert_eq!(fleet.lock_keys_on(&[0]), Vec::<String>::new());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A second sidecar on a socket another one serves exits non-zero with a clear message and
/// leaves the first one serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_on_a_live_socket_is_refused() {
    let fleet = TestFleet::start(1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.sock");
    let serve = UnixServe::start(&fleet, &path);
    drop(serve.connect().await);
    let (code, stderr) = second_serve(&fleet, &path).await;
    assert_eq!(code, Some(69), "{stderr}");
    assert!(
        stderr.contains("another process already serves on this socket"),
        "{stderr}"
    );
    let mut conn = serve.connect().await;
    assert_eq!(conn.exchange(ACQUIRE).await.status, 200);
    drop(conn);
    assert_eq!(serve.terminate().await, Some(0));
}

/// A socket file nothing accepts on (a sidecar that died) is replaced; a file that is not a
/// socket is never replaced: start-up is refused and the file kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_socket_is_replaced_and_other_files_are_not() {
    let fleet = TestFleet::start(1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(std::fs::metadata(&path).unwrap().file_type().is_socket());
    let serve = UnixServe::start(&fleet, &path);
    let mut conn = serve.connect().await;
    assert_eq!(conn.exchange(ACQUIRE).await.status, 200);
    drop(conn);
    assert_eq!(serve.terminate().await, Some(0));

    std::fs::write(&path, "precious").unwrap();
    let (code, stderr) = second_serve(&fleet, &path).await;
    assert_eq!(code, Some(69), "{stderr}");
    assert!(stderr.contains("is not a socket"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
}

/// The Rust client and `lock run` reach a sidecar through `unix:` URLs: a lock with its
/// fencing token, released; a command run under the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_and_lock_run_speak_over_the_socket() {
    let fleet = TestFleet::start(3);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.sock");
    let serve = UnixServe::start(&fleet, &path);
    drop(serve.connect().await);
    let url = format!("unix:{}", path.display());
    let client = redlease::client::Client::new(&url).unwrap();
    assert_eq!(client.base_url(), url);
    let guard = client.lock("over-unix").owner("app").send().await.unwrap();
    let first = guard.fencing_token();
    assert!(first >= 1);
    assert!(!fleet.lock_keys_on(&[0, 1, 2]).is_empty());
    assert!(guard.release().await.unwrap());
    assert_eq!(fleet.lock_keys_on(&[0, 1, 2]), Vec::<String>::new());
    assert!(redlease::client::Client::new("unix:relative.sock").is_err());

    let marker = dir.path().join("ran");
    let script = format!("echo $REDLEASE_FENCING_TOKEN > {}", marker.display());
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlease"))
        .args([
            "lock",
            "run",
            "--sidecar",
            &url,
            "job",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .env_remove("REDLEASE__MASTERS")
        .env_remove("REDLEASE__AUTH__TOKEN_FILE")
        .env_remove("RUST_LOG")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(20), output).await;
    let output = output.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let token: u64 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(token > first, "{token} after {first}");
    assert_eq!(serve.terminate().await, Some(0));
}
