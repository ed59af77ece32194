//! The deployment files without a Docker engine: docker-compose.yml parses and every file it
//! and the Dockerfile use exists, the compose Prometheus config passes promtool, the Grafana
//! provisioning matches the dashboard, the k8s manifests carry what a sidecar needs, and the
//! Dockerfile's entrypoint and command, run on the built binary, serve a ready sidecar.

mod image;
mod k8s;

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use redlease_testkit::TestFleet;
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;
use tokio::time::Instant;

use redlease::config::{Overrides, Settings};

use self::image::Dockerfile;

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
/// container, is mounted from the file promtool checked. Its job `redlease` (the alerts') scrapes
/// the sidecar's metrics listener, not the API's.
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
    let job = &parsed["scrape_configs"][0];
    assert_eq!(
        job["job_name"].as_str(),
        Some("redlease"),
        "the alerts' job"
    );
    assert_eq!(job["metrics_path"].as_str(), Some("/metrics"));
    let target = job["static_configs"][0]["targets"][0].as_str().unwrap();
    let environment = &compose["services"]["redlease"]["environment"];
    let metrics_listen = environment["REDLEASE__METRICS__LISTEN"]
        .as_str()
        .expect("the sidecar's metrics listener");
    let api_listen = environment["REDLEASE__LISTEN"].as_str().unwrap();
    let port = |listen: &str| listen.rsplit(':').next().unwrap().to_string();
    assert_ne!(port(metrics_listen), port(api_listen));
    assert_eq!(target, format!("redlease:{}", port(metrics_listen)));
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
