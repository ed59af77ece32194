//! The container image: the Dockerfile's entrypoint and command, run on the built binary,
//! serve a ready sidecar.

use super::*;

/// What the test reads of the Dockerfile.
pub(super) struct Dockerfile {
    /// Each instruction on one line (continuations joined), comments dropped.
    instructions: Vec<String>,
}

impl Dockerfile {
    pub(super) fn read() -> Self {
        let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
        let mut instructions = Vec::new();
        let mut current = String::new();
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            match line.strip_suffix('\\') {
                Some(head) => current.push_str(head),
                None => {
                    current.push_str(line);
                    instructions.push(std::mem::take(&mut current));
                }
            }
        }
        Self { instructions }
    }

    /// The arguments of every `KEYWORD …` instruction.
    pub(super) fn all(&self, keyword: &str) -> Vec<&str> {
        self.instructions
            .iter()
            .filter_map(|i| i.strip_prefix(keyword)?.strip_prefix(' '))
            .map(str::trim)
            .collect()
    }

    /// The exec form `["a", "b"]` of the last `KEYWORD`.
    pub(super) fn exec_form(&self, keyword: &str) -> Vec<String> {
        let last = self
            .all(keyword)
            .pop()
            .unwrap_or_else(|| panic!("no {keyword}"));
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{keyword} {last}: {e}"))
    }

    /// Sources of the `COPY` instructions that read the build context.
    pub(super) fn copied_sources(&self) -> Vec<String> {
        let mut sources = Vec::new();
        for copy in self.all("COPY") {
            if copy.starts_with("--from") {
                continue;
            }
            let parts: Vec<&str> = copy.split_whitespace().collect();
            sources.extend(parts[..parts.len() - 1].iter().map(|s| s.to_string()));
        }
        sources
    }

    /// `ENV KEY=value` pairs of the runtime (last) stage.
    pub(super) fn runtime_env(&self) -> Vec<(String, String)> {
        let start = self
            .instructions
            .iter()
            .rposition(|i| i.starts_with("FROM "))
            .unwrap();
        self.instructions[start..]
            .iter()
            .filter_map(|i| i.strip_prefix("ENV "))
            .flat_map(|pairs| pairs.split_whitespace())
            .map(|pair| {
                let (key, value) = pair.split_once('=').expect("ENV KEY=value");
                (key.to_string(), value.trim_matches('"').to_string())
            })
            .collect()
    }
}

/// The Dockerfile's stages, checked, then its runtime run outside Docker: the built binary
/// (`CARGO_BIN_EXE_redlease`, which `cargo test` has just built, so the image's
/// `cargo build --release --locked` is not repeated here) with the image's ENTRYPOINT and CMD,
/// the image's ENV and the compose service's environment (masters: a local fleet; listen and
/// metrics.listen: loopback ports the kernel picked) answers /livez (the HEALTHCHECK) and
/// /readyz with 200, its metrics listener a scrape by the compose service's name with 200,
/// then stops on SIGTERM with exit 0, as `docker stop` and kubelet stop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerfile_entrypoint_serves_a_ready_sidecar() {
    let dockerfile = Dockerfile::read();
    let from = dockerfile.all("FROM");
    assert_eq!(from.len(), 2, "{from:?}");
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let rust_version = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .unwrap()
        .trim_matches('"');
    let builder = from[0].strip_prefix("rust:").expect("a rust image builds");
    let builder_version = builder.split('-').next().unwrap();
    assert!(
        version(builder_version) >= version(rust_version),
        "{builder} < {rust_version}"
    );
    assert_eq!(from[1], "debian:bookworm-slim");
    let runs = dockerfile.all("RUN");
    assert!(
        runs.iter()
            .any(|r| r.starts_with("cargo build --release --locked")),
        "{runs:?}"
    );
    let user = dockerfile.all("USER").pop().expect("a USER");
    assert!(
        !user.starts_with("root") && !user.starts_with('0'),
        "USER {user}"
    );
    // The API, and the metrics listener the compose stack and the k8s example turn on.
    assert_eq!(dockerfile.all("EXPOSE"), ["7600 9600"]);
    let healthcheck = dockerfile.all("HEALTHCHECK").join(" ");
    assert!(
        healthcheck.contains("http://127.0.0.1:7600/livez"),
        "{healthcheck}"
    );

    let entrypoint = dockerfile.exec_form("ENTRYPOINT");
    let cmd = dockerfile.exec_form("CMD");
    assert_eq!(
        (entrypoint.as_slice(), cmd.as_slice()),
        (&["redlease".to_string()][..], &["serve".to_string()][..])
    );

    let fleet = TestFleet::start(3);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut env = dockerfile.runtime_env();
    let compose = compose();
    for (key, value) in compose["services"]["redlease"]["environment"]
        .as_mapping()
        .unwrap()
    {
        let key = key.as_str().unwrap().to_string();
        let value = match key.as_str() {
            "REDLEASE__MASTERS" => fleet.urls().join(","),
            "REDLEASE__LISTEN" => format!("127.0.0.1:{port}"),
            "REDLEASE__METRICS__LISTEN" => format!("127.0.0.1:{metrics_port}"),
            _ => value.as_str().unwrap().to_string(),
        };
        env.push((key, value));
    }
    let log_dir = tempfile::tempdir().unwrap();
    let log_path = log_dir.path().join("sidecar.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlease"))
        .args(&entrypoint[1..])
        .args(&cmd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env)
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let start = Instant::now();
    let ready = loop {
        if let Ok(response) = http.get(format!("{base}/readyz")).send().await {
            if response.status() == 200 {
                break true;
            }
        }
        if start.elapsed() > Duration::from_secs(10) {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let log = || std::fs::read_to_string(&log_path).unwrap();
    assert!(
        ready,
        "/readyz never answered 200 within 10 s; sidecar log:\n{}",
        log()
    );
    let live = http.get(format!("{base}/livez")).send().await.unwrap();
    assert_eq!(live.status(), 200);
    // Prometheus calls it `redlease`, as the compose network names it, on its metrics
    // listener.
    let scrape = http.get(format!("http://127.0.0.1:{metrics_port}/metrics"));
    let scrape = scrape
        .header("host", format!("redlease:{metrics_port}"))
        .send()
        .await
        .unwrap();
    assert_eq!(scrape.status(), 200, "{}", log());

    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let exited = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    assert_eq!(exited.unwrap().unwrap().code(), Some(0), "{}", log());
}

/// `1.88` → [1, 88]; `1.90.1` → [1, 90, 1].
fn version(text: &str) -> Vec<u64> {
    text.split('.').map(|n| n.parse().unwrap()).collect()
}
