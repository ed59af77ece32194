//! The deployment files without a Docker engine: docker-compose.yml parses and every file it
//! and the Dockerfile use exists, the compose Prometheus config passes promtool, the Grafana
//! provisioning matches the dashboard, the k8s manifests carry what a sidecar needs, and the
//! Dockerfile's entrypoint and command, run on the built binary, serve a ready sidecar.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value as Json;
use serde_yaml::Value as Yaml;
use tokio::time::Instant;

use redlease::config::{Overrides, Settings};

use crate::support::TestFleet;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A YAML file of the repo, with `<<` merge keys applied.
fn yaml(relative: &str) -> Yaml {
    let text = std::fs::read_to_string(root().join(relative)).unwrap();
    let mut value: Yaml = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{relative}: {e}"));
    value.apply_merge().unwrap();
    value
}

fn compose() -> Yaml {
    yaml("docker-compose.yml")
}

fn which(binary: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(binary))
            .find(|path| path.is_file())
    })
}

/// Runs `command` for at most `limit`, killing it (only it) when it overruns. (status ok, output)
fn run_bounded(command: &mut Command, limit: Duration) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out");
    let out = std::fs::File::create(&out_path).unwrap();
    let mut child = command
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{command:?} took longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.success(), std::fs::read_to_string(out_path).unwrap())
}

/// `a/b/../c` → `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => assert!(out.pop(), "{path:?} climbs above its root"),
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The bind mounts of a compose service: (host path, container path); named volumes skipped.
fn bind_mounts(service: &Yaml) -> Vec<(PathBuf, PathBuf)> {
    let mut mounts = Vec::new();
    for volume in service["volumes"].as_sequence().into_iter().flatten() {
        let spec = volume.as_str().expect("short volume syntax");
        let mut parts = spec.split(':');
        let (source, target) = (parts.next().unwrap(), parts.next().unwrap());
        if source.starts_with('.') || source.starts_with('/') {
            mounts.push((normalize(&root().join(source)), PathBuf::from(target)));
        }
    }
    mounts
}

/// The host path a container path of `service` comes from, through its bind mounts.
fn host_path(service: &Yaml, container: &Path) -> Option<PathBuf> {
    bind_mounts(service).into_iter().find_map(|(host, target)| {
        container
            .strip_prefix(&target)
            .ok()
            .map(|rest| normalize(&host.join(rest)))
    })
}

/// `docker-compose config -q` accepts the file, with and without the load profile.
#[test]
fn compose_file_is_valid() {
    assert!(
        which("docker-compose").is_some(),
        "docker-compose is not installed: scripts/install-deps.sh installs it"
    );
    for profile in [&[][..], &["--profile", "load"][..]] {
        let (ok, output) = run_bounded(
            Command::new("docker-compose")
                .current_dir(root())
                .args(["-f", "docker-compose.yml"])
                .args(profile)
                .args(["config", "-q"]),
            Duration::from_secs(60),
        );
        assert!(ok, "docker-compose config -q {profile:?}: {output}");
    }
}

/// The stack's shape: 5 independent fsync-always masters, the sidecar on them, only Grafana's
/// and the sidecar's ports published, on loopback; every file compose and the Dockerfile use
/// exists (and is not left out of the build context).
#[test]
fn compose_and_dockerfile_references_exist() {
    let compose = compose();
    let services = compose["services"].as_mapping().unwrap();
    let mut masters = Vec::new();
    for (name, service) in services {
        let name = name.as_str().unwrap();
        if let Some(context) = service["build"]["context"].as_str() {
            let context = root().join(context);
            assert!(context.is_dir(), "{name}: build context {context:?}");
            let dockerfile = service["build"]["dockerfile"]
                .as_str()
                .unwrap_or("Dockerfile");
            assert!(context.join(dockerfile).is_file(), "{name}: {dockerfile}");
        }
        for (host, _) in bind_mounts(service) {
            assert!(
                host.exists(),
                "{name} mounts {host:?}, which does not exist"
            );
        }
        for volume in service["volumes"].as_sequence().into_iter().flatten() {
            let source = volume.as_str().unwrap().split(':').next().unwrap();
            if !(source.starts_with('.') || source.starts_with('/')) {
                assert!(
                    compose["volumes"].get(source).is_some(),
                    "{name}: named volume {source} is not declared"
                );
            }
        }
        let ports: Vec<&str> = service["ports"]
            .as_sequence()
            .into_iter()
            .flatten()
            .map(|p| p.as_str().unwrap())
            .collect();
        for port in &ports {
            assert!(
                port.starts_with("127.0.0.1:"),
                "{name} publishes {port} beyond loopback"
            );
        }
        match name {
            "redlease" => assert_eq!(ports, ["127.0.0.1:7600:7600"]),
            "grafana" => assert_eq!(ports, ["127.0.0.1:3000:3000"]),
            _ => assert!(ports.is_empty(), "{name} publishes {ports:?}"),
        }
        if name.starts_with("redis-") {
            let command: Vec<&str> = service["command"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap())
                .collect();
            assert!(service["image"].as_str().unwrap().starts_with("redis:7"));
            let joined = command.join(" ");
            assert!(
                joined.contains("--appendonly yes --appendfsync always"),
                "{joined}"
            );
            assert!(!joined.contains("replicaof"), "{name} replicates: {joined}");
            masters.push(format!("redis://{name}:6379"));
        }
    }
    assert_eq!(masters.len(), 5);
    let sidecar = &compose["services"]["redlease"]["environment"];
    assert_eq!(
        sidecar["REDLEASE__MASTERS"].as_str().unwrap(),
        masters.join(",")
    );
    assert_eq!(
        sidecar["REDLEASE__LISTEN"].as_str().unwrap(),
        "0.0.0.0:7600"
    );
    let load = &compose["services"]["load"];
    assert_eq!(load["profiles"][0].as_str(), Some("load"));
    let script = load["command"][0].as_str().unwrap();
    assert!(
        script.contains("redlease load --sidecar http://redlease:7600"),
        "{script}"
    );

    let dockerfile = Dockerfile::read();
    let ignored = std::fs::read_to_string(root().join(".dockerignore")).unwrap();
    let ignored: Vec<&str> = ignored
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.trim().trim_end_matches('/'))
        .collect();
    assert!(
        ignored.contains(&"target") && ignored.contains(&".git"),
        "{ignored:?}"
    );
    for source in dockerfile.copied_sources() {
        assert!(
            root().join(&source).exists(),
            "the Dockerfile copies {source}, missing"
        );
        let top = source.split('/').next().unwrap();
        assert!(
            !ignored.contains(&top),
            "the Dockerfile copies {source}, left out of the context"
        );
    }
}

/// The Prometheus config compose runs passes `promtool check config` on the repo layout, and the
/// container sees the same layout: each rule file, resolved against the config inside the
/// container, is mounted from the file promtool checked. It scrapes the sidecar's service.
#[test]
fn compose_prometheus_config_passes_promtool() {
    let compose = compose();
    let prometheus = &compose["services"]["prometheus"];
    let config_in_container = prometheus["command"]
        .as_sequence()
        .unwrap()
        .iter()
        .find_map(|a| a.as_str().unwrap().strip_prefix("--config.file="))
        .map(PathBuf::from)
        .expect("--config.file");
    let config = host_path(prometheus, &config_in_container).expect("config mounted");
    assert!(config.is_file(), "{config:?}");
    let parsed: Yaml = serde_yaml::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    let rules = parsed["rule_files"].as_sequence().unwrap();
    assert!(!rules.is_empty());
    for rule in rules {
        let rule = rule.as_str().unwrap();
        let on_host = normalize(&config.parent().unwrap().join(rule));
        let in_container = normalize(&config_in_container.parent().unwrap().join(rule));
        assert_eq!(
            host_path(prometheus, &in_container).as_ref(),
            Some(&on_host),
            "{rule}"
        );
        assert!(on_host.is_file(), "{on_host:?}");
    }
    assert_eq!(
        normalize(&config.parent().unwrap().join(rules[0].as_str().unwrap())),
        root().join("dashboards/alerts.yml")
    );
    let target = parsed["scrape_configs"][0]["static_configs"][0]["targets"][0]
        .as_str()
        .unwrap();
    let listen = compose["services"]["redlease"]["environment"]["REDLEASE__LISTEN"]
        .as_str()
        .unwrap();
    assert_eq!(
        target,
        format!("redlease:{}", listen.rsplit(':').next().unwrap())
    );
    let allowed = compose["services"]["redlease"]["environment"]["REDLEASE__HTTP__ALLOWED_HOSTS"]
        .as_str()
        .unwrap();
    assert!(
        allowed.split(',').any(|name| name.trim() == "redlease"),
        "Prometheus's Host `redlease` is not allowed: {allowed}"
    );

    assert!(
        which("promtool").is_some(),
        "promtool is not installed: scripts/install-deps.sh installs it"
    );
    let (ok, output) = run_bounded(
        Command::new("promtool")
            .arg("check")
            .arg("config")
            .arg(&config),
        Duration::from_secs(60),
    );
    assert!(ok, "promtool check config: {output}");
}

/// Grafana's provisioning: the provider loads the mounted directory holding redlease.json, and
/// every data source the dashboard references resolves to the provisioned one.
#[test]
fn grafana_provisioning_matches_the_dashboard() {
    let compose = compose();
    let grafana = &compose["services"]["grafana"];
    for kind in ["datasources", "dashboards"] {
        let host = host_path(grafana, &Path::new("/etc/grafana/provisioning").join(kind));
        assert_eq!(
            host,
            Some(root().join("dashboards/provisioning").join(kind))
        );
    }
    let datasources = yaml("dashboards/provisioning/datasources/prometheus.yml");
    let datasources = datasources["datasources"].as_sequence().unwrap();
    assert_eq!(datasources.len(), 1);
    let source = &datasources[0];
    assert_eq!(source["type"].as_str(), Some("prometheus"));
    assert_eq!(source["url"].as_str(), Some("http://prometheus:9090"));
    assert!(compose["services"].get("prometheus").is_some());
    let uid = source["uid"].as_str().expect("a fixed uid");

    let providers = yaml("dashboards/provisioning/dashboards/redlease.yml");
    let provider = &providers["providers"][0];
    assert_eq!(provider["type"].as_str(), Some("file"));
    let path = Path::new(provider["options"]["path"].as_str().unwrap());
    let dir = host_path(grafana, path).expect("the provider's path is mounted");
    assert!(
        dir.join("redlease.json").is_file(),
        "{dir:?} holds no redlease.json"
    );

    let dashboard: Json = serde_json::from_str(
        &std::fs::read_to_string(root().join("dashboards/redlease.json")).unwrap(),
    )
    .unwrap();
    let variables: BTreeMap<&str, &Json> = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| (v["name"].as_str().unwrap(), v))
        .collect();
    let mut references = Vec::new();
    collect_datasource_uids(&dashboard, &mut references);
    assert!(references.len() >= 15, "{references:?}");
    for reference in references {
        match reference
            .strip_prefix("${")
            .and_then(|r| r.strip_suffix('}'))
        {
            // A datasource variable starts on the default data source of its type.
            Some(name) => {
                let variable = variables
                    .get(name)
                    .unwrap_or_else(|| panic!("no variable {name}"));
                assert_eq!(variable["type"], "datasource");
                assert_eq!(variable["query"].as_str(), source["type"].as_str());
                assert_eq!(source["isDefault"].as_bool(), Some(true));
            }
            None => assert_eq!(reference, uid),
        }
    }
}

fn collect_datasource_uids(value: &Json, out: &mut Vec<String>) {
    match value {
        Json::Object(map) => {
            for (key, child) in map {
                if key == "datasource" {
                    out.push(child["uid"].as_str().expect("a datasource uid").to_string());
                } else {
                    collect_datasource_uids(child, out);
                }
            }
        }
        Json::Array(items) => items.iter().for_each(|i| collect_datasource_uids(i, out)),
        _ => {}
    }
}

/// The k8s manifests: the sidecar container listens on 7600 with readiness (/readyz) and
/// liveness (/livez) probes and a preStop hook; the termination grace covers the preStop sleep
/// and `shutdown.grace_ms`, read from the ConfigMap's TOML, which loads as the sidecar's
/// settings with the Secret's masters.
#[test]
fn k8s_manifests_carry_what_the_sidecar_needs() {
    let configmap = yaml("deploy/k8s/configmap.yaml");
    let secret = yaml("deploy/k8s/secret.yaml");
    let deployment = yaml("deploy/k8s/deployment.yaml");
    assert_eq!(deployment["kind"].as_str(), Some("Deployment"));
    let pod = &deployment["spec"]["template"];
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"].as_str(), Some("true"));
    assert_eq!(annotations["prometheus.io/port"].as_str(), Some("7600"));
    assert_eq!(annotations["prometheus.io/path"].as_str(), Some("/metrics"));
    let containers = pod["spec"]["containers"].as_sequence().unwrap();
    let sidecar = containers
        .iter()
        .find(|c| c["name"].as_str() == Some("redlease"))
        .expect("a redlease container");
    assert!(
        containers.len() >= 2,
        "the sidecar sits next to an app container"
    );

    let ports: Vec<u64> = sidecar["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| p["containerPort"].as_u64().unwrap())
        .collect();
    assert_eq!(ports, [7600]);
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/livez")] {
        let probe = &sidecar[probe];
        let target = match probe["httpGet"]["path"].as_str() {
            Some(path) => path.to_string(),
            None => words(&probe["exec"]["command"]).join(" "),
        };
        assert!(target.ends_with(path), "{probe:?} does not ask {path}");
    }
    let pre_stop = words(&sidecar["lifecycle"]["preStop"]["exec"]["command"]);
    let pre_stop_secs: u64 = match pre_stop.as_slice() {
        [sleep, secs] if sleep == "sleep" => secs.parse().unwrap(),
        other => panic!("preStop {other:?}"),
    };

    let args = words(&sidecar["args"]);
    assert_eq!(args[0], "serve");
    let config_path = Path::new(&args[args.iter().position(|a| a == "--config").unwrap() + 1]);
    let mount = sidecar["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| config_path.starts_with(m["mountPath"].as_str().unwrap()))
        .expect("--config is under a volume mount");
    let volume = pod["spec"]["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert_eq!(volume["configMap"]["name"], configmap["metadata"]["name"]);
    let key = config_path.file_name().unwrap().to_str().unwrap();
    let toml = configmap["data"][key]
        .as_str()
        .expect("the --config file in the ConfigMap");
    assert_eq!(
        sidecar["envFrom"][0]["secretRef"]["name"],
        secret["metadata"]["name"]
    );
    let listen = &sidecar["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"].as_str() == Some("REDLEASE__LISTEN"))
        .unwrap()["value"];
    assert_eq!(listen.as_str(), Some("127.0.0.1:7600"));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(key);
    std::fs::write(&file, toml).unwrap();
    let masters = secret["stringData"]["REDLEASE__MASTERS"].as_str().unwrap();
    let env = [("REDLEASE__MASTERS".to_string(), masters.to_string())];
    let settings = Settings::load(Some(&file), env, Overrides::default()).unwrap();
    assert_eq!(settings.masters.len(), 5);
    assert_eq!(settings.listen.to_string(), "127.0.0.1:7600");

    let grace = pod["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .unwrap();
    let shutdown = settings.shutdown_grace.as_millis() as u64;
    assert!(
        grace * 1000 >= shutdown,
        "{grace} s < shutdown.grace_ms {shutdown}"
    );
    assert!(
        grace * 1000 >= pre_stop_secs * 1000 + shutdown,
        "{grace} s does not cover the preStop sleep ({pre_stop_secs} s) and {shutdown} ms"
    );
}

/// A YAML sequence of strings.
fn words(value: &Yaml) -> Vec<String> {
    value
        .as_sequence()
        .unwrap_or_else(|| panic!("not a list: {value:?}"))
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

/// What the test reads of the Dockerfile.
struct Dockerfile {
    /// Each instruction on one line (continuations joined), comments dropped.
    instructions: Vec<String>,
}

impl Dockerfile {
    fn read() -> Self {
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
    fn all(&self, keyword: &str) -> Vec<&str> {
        self.instructions
            .iter()
            .filter_map(|i| i.strip_prefix(keyword)?.strip_prefix(' '))
            .map(str::trim)
            .collect()
    }

    /// The exec form `["a", "b"]` of the last `KEYWORD`.
    fn exec_form(&self, keyword: &str) -> Vec<String> {
        let last = self
            .all(keyword)
            .pop()
            .unwrap_or_else(|| panic!("no {keyword}"));
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{keyword} {last}: {e}"))
    }

    /// Sources of the `COPY` instructions that read the build context.
    fn copied_sources(&self) -> Vec<String> {
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
    fn runtime_env(&self) -> Vec<(String, String)> {
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
/// the image's ENV and the compose service's environment (masters: a local fleet; listen: a
/// loopback port the kernel picked) answers /livez (the HEALTHCHECK) and /readyz with 200,
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
    assert_eq!(dockerfile.all("EXPOSE"), ["7600"]);
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
    // Prometheus and the load generator call it `redlease`, as the compose network names it.
    let scrape = http.get(format!("{base}/metrics"));
    let scrape = scrape
        .header("host", format!("redlease:{port}"))
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
