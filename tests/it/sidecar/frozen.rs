//! Frozen apps: an open event stream counts as a sign of life only while its app reads it. The
//! reader is a process of its own (this test binary, run as a child on one ignored test that
//! reads a stream over TCP or the sidecar's Unix socket), frozen with SIGSTOP while its kernel
//! keeps the connection open: its auto-renewed lease is released as idle within the idle
//! timeout and a blocked acquirer gets the resource. A reader that keeps reading keeps its
//! lease past many idle timeouts. A frozen election observer's stream is ended the same way.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use redlease::config::{Overrides, Settings};
use redlease::server::{Listener, Sidecar};
use redlease_testkit::http::{request, Conn};
use tokio::net::{TcpStream, UnixStream};
use tokio::task::JoinHandle;

use super::*;

/// The lease's idle timeout; its heartbeats are a quarter of it apart.
const IDLE: Duration = Duration::from_millis(1000);
/// The lease's TTL; renewed every half of it.
const TTL_MS: u64 = 1000;
const RENEWAL_PERIOD: Duration = Duration::from_millis(TTL_MS / 2);

/// Names what the reader process reads: `tcp <addr> <path>` or `unix <socket> <path>`.
const READER_ENV: &str = "REDLEASE_TEST_STREAM_READER";
/// A file the reader process creates once it has read the first bytes of its stream.
const READER_OPENED_ENV: &str = "REDLEASE_TEST_STREAM_READER_OPENED";
/// The reader process gives up after this, whatever happens to the test that started it.
const READER_LIFETIME: Duration = Duration::from_secs(60);

/// Where the API is, reached with raw HTTP/1.1 (one connection per request) and by a reader
/// process.
enum Api {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl Api {
    async fn call(&self, method: &str, path: &str, body: &str) -> (u16, Value) {
        let request = request(method, path, body);
        let answer = match self {
            Api::Tcp(addr) => {
                let stream = TcpStream::connect(addr).await.unwrap();
                Conn::new(stream).exchange(&request).await
            }
            Api::Unix(path) => {
                let stream = UnixStream::connect(path).await.unwrap();
                Conn::new(stream).exchange(&request).await
            }
        };
        (answer.status, answer.json())
    }

    /// A process of its own reading `path` as it comes ([`event_stream_reader_process`]).
    fn reader(&self, path: &str) -> Reader {
        let target = match self {
            Api::Tcp(addr) => format!("tcp {addr} {path}"),
            Api::Unix(socket) => format!("unix {} {path}", socket.display()),
        };
        let test = "sidecar::frozen::event_stream_reader_process";
        let dir = tempfile::tempdir().unwrap();
        let opened = dir.path().join("opened");
        let mut child = Command::new(std::env::current_exe().unwrap());
        child
            .args(["--ignored", "--exact", test, "--test-threads=1", "--quiet"])
            .env(READER_ENV, target)
            .env(READER_OPENED_ENV, &opened)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        Reader {
            child: child.spawn().unwrap(),
            opened,
            _dir: dir,
        }
    }

    async fn acquire(&self, body: Value) -> (u16, Value) {
        let body = body.to_string();
        self.call("POST", "/v1/locks/job/acquire", &body).await
    }
}

/// A reader process: frozen with SIGSTOP; on drop, thawed and killed (only this pid).
struct Reader {
    child: Child,
    /// Created by the process once its stream's first bytes came.
    opened: PathBuf,
    _dir: tempfile::TempDir,
}

impl Reader {
    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    /// Returns once the process has read the first bytes of its stream.
    async fn wait_open(&self) {
        assert_eventually!(self.opened.exists(), 10, "the reader's stream did not open");
    }

    fn freeze(&self) {
        kill(self.pid(), Signal::SIGSTOP).unwrap();
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = kill(self.pid(), Signal::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An in-process sidecar on a Unix socket in a temporary directory.
struct UnixSidecar {
    served: JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl UnixSidecar {
    async fn start(fleet: &TestFleet) -> (Self, Api) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("api.sock");
        let overrides = Overrides {
            masters: Some(fleet.urls()),
            listen: Some(format!("unix:{}", path.display())),
        };
        let settings = Settings::load(None, Vec::new(), overrides).unwrap();
        let listener = Listener::bind(&settings.listen).await.unwrap();
        let sidecar = Sidecar::start(&settings).await.unwrap();
        let served = tokio::spawn(sidecar.run(listener, std::future::pending()));
        (Self { served, _dir: dir }, Api::Unix(path))
    }
}

impl Drop for UnixSidecar {
    fn drop(&mut self) {
        self.served.abort();
    }
}

/// Acquires `job` for an app whose lease needs signs of life every `IDLE`.
async fn lease_for_reader(api: &Api) -> String {
    let body =
        json!({"owner": "app", "ttl_ms": TTL_MS, "idle_timeout_ms": IDLE.as_millis() as u64});
    let (status, lease) = api.acquire(body).await;
    assert_eq!(status, 200, "{lease}");
    lease_id(&lease)
}

/// The scenario on `api`: a reader keeps its lease past several idle timeouts, then is frozen;
/// a blocking acquisition from another owner gets the resource within the idle timeout and a
/// renewal period of the freeze, and the frozen app's lease says it was released as idle.
async fn a_frozen_reader_hands_the_resource_on(api: &Api, kind: &str) {
    let id = lease_for_reader(api).await;
    let lease = format!("/v1/leases/{id}");
    let reader = api.reader(&format!("{lease}/events"));
    tokio::time::sleep(3 * IDLE).await;
    let (_, watched) = api.call("GET", &lease, "").await;
    assert_eq!(
        watched["state"], "held",
        "the reading stream did not keep it"
    );
    reader.freeze();
    let frozen = Instant::now();
    let (status, next) = api.acquire(json!({"owner": "next", "wait_ms": 8000})).await;
    let took = frozen.elapsed();
    assert_eq!(
        (status, next["owner"].as_str()),
        (200, Some("next")),
        "{next}"
    );
    // Its release may still be counting the masters' answers when the next acquirer, woken
    // by the first master to delete the key, is granted: `releasing` (validity 0) until then.
    let (_, old) = api.call("GET", &lease, "").await;
    assert_eq!(old["reason"], "idle", "{old}");
    assert_eventually!(
        api.call("GET", &lease, "").await.1["state"] == "released",
        2,
        "the frozen app's lease did not end released: {}",
        api.call("GET", &lease, "").await.1
    );
    eprintln!("{kind}: the next acquirer got the resource {took:?} after the reader froze");
    assert!(
        took < IDLE + RENEWAL_PERIOD,
        "granted {took:?} after the freeze"
    );
    drop(reader);
    api.call("DELETE", &format!("/v1/leases/{}", lease_id(&next)), "")
        .await;
}

/// Over loopback TCP: the peer socket's unread bytes (what `ss` shows as Recv-Q) tell the
/// frozen reader; its lease goes to the next acquirer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_tcp_reader_loses_its_lease_to_the_next_acquirer() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    a_frozen_reader_hands_the_resource_on(&Api::Tcp(sidecar.addr), "tcp").await;
}

/// Over the sidecar's Unix socket: what the reader has not consumed of the sidecar's writes
/// tells it; its lease goes to the next acquirer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_unix_socket_reader_loses_its_lease_to_the_next_acquirer() {
    let fleet = TestFleet::start(3);
    let (_sidecar, api) = UnixSidecar::start(&fleet).await;
    a_frozen_reader_hands_the_resource_on(&api, "unix").await;
}

/// The control: a reader that keeps reading keeps its lease, renewed, past five idle
/// timeouts with no other sign of life, and a blocking acquisition meanwhile waits in vain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reading_stream_keeps_its_lease_past_many_idle_timeouts() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let api = Api::Tcp(sidecar.addr);
    let id = lease_for_reader(&api).await;
    let lease = format!("/v1/leases/{id}");
    let _reader = api.reader(&format!("{lease}/events"));
    let (status, refused) = api
        .acquire(json!({"owner": "next", "wait_ms": 5 * IDLE.as_millis() as u64}))
        .await;
    assert_eq!((status, refused["reason"].as_str()), (409, Some("held")));
    let (_, still) = api.call("GET", &lease, "").await;
    assert_eq!(still["state"], "held", "{still}");
    assert!(still["validity_ms"].as_u64().unwrap() > 0, "{still}");
}

/// An election's observer is held to a lease stream's rule, over loopback TCP: while it reads,
/// its stream stays open past several idle timeouts, holding the only place among
/// `http.max_event_streams`; frozen, it has its stream ended within the idle timeout and a
/// few heartbeats, and the next observer gets the place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_observer_gives_its_stream_back() {
    let fleet = TestFleet::start(3);
    let idle = IDLE.as_millis().to_string();
    let env = [
        ("REDLEASE__HTTP__MAX_EVENT_STREAMS", "1"),
        ("REDLEASE__LEASE__IDLE_TIMEOUT_MS", idle.as_str()),
    ];
    let sidecar = TestSidecar::start(&fleet, &env).await;
    let api = Api::Tcp(sidecar.addr);
    let url = format!("{}/v1/elections/other/observe", sidecar.base);
    let observe = || async {
        let answer = sidecar
            .http
            .get(&url)
            .timeout(Duration::from_secs(2))
            .send();
        answer.await.unwrap().status().as_u16()
    };
    let reader = api.reader("/v1/elections/db/observe");
    reader.wait_open().await;
    assert_eq!(observe().await, 429, "the reader's stream holds no place");
    tokio::time::sleep(3 * IDLE).await;
    assert_eq!(observe().await, 429, "a reading observer lost its stream");
    reader.freeze();
    let frozen = Instant::now();
    assert_eventually!(
        observe().await == 200,
        3,
        "the frozen observer's stream still holds its place"
    );
    let took = frozen.elapsed();
    eprintln!("the frozen observer's place was free {took:?} after it froze");
    assert!(took < IDLE + 4 * IDLE / 4, "free {took:?} after the freeze");
}

/// Not a test of its own: the reader process of the tests above, which run this binary on it
/// with `REDLEASE_TEST_STREAM_READER` set; without it, it does nothing. It asks for the stream
/// and reads it as it comes until the sidecar closes it (or a minute passed), and says when its
/// first bytes came (in the file `REDLEASE_TEST_STREAM_READER_OPENED` names, when set).
#[test]
#[ignore = "the frozen-reader tests run it as a child process"]
fn event_stream_reader_process() {
    let Ok(target) = std::env::var(READER_ENV) else {
        return;
    };
    let parts: Vec<&str> = target.split(' ').collect();
    let request = format!("GET {} HTTP/1.1\r\nhost: localhost\r\n\r\n", parts[2]);
    let mut stream: Box<dyn ReadWrite> = match parts[0] {
        "tcp" => Box::new(std::net::TcpStream::connect(parts[1]).unwrap()),
        _ => Box::new(std::os::unix::net::UnixStream::connect(parts[1]).unwrap()),
    };
    stream.write_all(request.as_bytes()).unwrap();
    let opened = std::env::var_os(READER_OPENED_ENV);
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    let mut first = true;
    while started.elapsed() < READER_LIFETIME {
        if matches!(stream.read(&mut buf), Ok(0) | Err(_)) {
            return;
        }
        if std::mem::take(&mut first) {
            if let Some(opened) = &opened {
                std::fs::write(opened, b"").unwrap();
            }
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}
