//! The Kubernetes sidecar example: the manifests carry what the sidecar needs, its probes and
//! its scrape target point at the listeners the configuration opens, its masters follow
//! docs/security.md, and the example Prometheus job scrapes the metrics port.

use super::*;
use redlease::config::Listen;

/// Where the API and the metrics listener are, as the container and its settings declare them.
struct Sidecar {
    container: Yaml,
    settings: Settings,
    /// The container's `ports`: name → number.
    ports: BTreeMap<String, u64>,
}

/// The manifests: the sidecar container with readiness and liveness probes and a preStop hook;
/// the termination grace covers the preStop sleep, `shutdown.grace_ms` and the settling after
/// it; the ConfigMap's TOML
/// loads as the sidecar's settings with the Secret's password file mounted where it names it.
#[test]
fn k8s_manifests_carry_what_the_sidecar_needs() {
    let deployment = yaml("deploy/k8s/deployment.yaml");
    assert_eq!(deployment["kind"].as_str(), Some("Deployment"));
    let pod = &deployment["spec"]["template"];
    let containers = pod["spec"]["containers"].as_sequence().unwrap();
    assert!(
        containers.len() >= 2,
        "the sidecar sits next to an app container"
    );
    let sidecar = load_sidecar();
    let container = &sidecar.container;
    for probe in ["readinessProbe", "livenessProbe"] {
        assert!(!container[probe].is_null(), "no {probe}");
    }
    let pre_stop = words(&container["lifecycle"]["preStop"]["exec"]["command"]);
    let pre_stop_secs: u64 = match pre_stop.as_slice() {
        [sleep, secs] if sleep == "sleep" => secs.parse().unwrap(),
        other => panic!("preStop {other:?}"),
    };
    assert_eq!(sidecar.settings.masters.len(), 5);
    assert_eq!(sidecar.settings.listen.to_string(), "127.0.0.1:7600");

    let grace = pod["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .unwrap();
    let shutdown = sidecar.settings.shutdown_grace.as_millis() as u64;
    // After the grace period the sidecar settles writes in flight (1 s) and closes its
    // connections to the masters (1 s): about 3 s with the process's exit (docs/api.md).
    let settle_ms = 3000;
    assert!(
        grace * 1000 >= pre_stop_secs * 1000 + shutdown + settle_ms,
        "{grace} s does not cover the preStop sleep ({pre_stop_secs} s), {shutdown} ms and \
         {settle_ms} ms of settling"
    );
}

/// The probes ask routes the API serves (`/readyz`, `/livez`) on the API's address and a port
/// the container declares; the scrape annotations name the container's `metrics` port, which
/// is the port of `metrics.listen`, on an address the pod's IP reaches, and `/metrics`.
#[test]
fn k8s_probes_hit_the_api_and_prometheus_the_metrics_listener() {
    let sidecar = load_sidecar();
    let Listen::Tcp(api) = sidecar.settings.listen.clone() else {
        panic!("the example's API listens on TCP")
    };
    assert_eq!(sidecar.ports.get("api"), Some(&u64::from(api.port())));
    for (probe, route) in [("readinessProbe", "/readyz"), ("livenessProbe", "/livez")] {
        let probe = &sidecar.container[probe];
        let target = match probe["httpGet"]["path"].as_str() {
            Some(path) => {
                let port = &probe["httpGet"]["port"];
                let port = port
                    .as_u64()
                    .or_else(|| sidecar.ports.get(port.as_str()?).copied());
                format!(
                    "http://{}:{}{path}",
                    api.ip(),
                    port.expect("a declared port")
                )
            }
            None => {
                let command = words(&probe["exec"]["command"]);
                command.last().unwrap().clone()
            }
        };
        assert_eq!(target, format!("http://{api}{route}"), "{probe:?}");
    }

    let deployment = yaml("deploy/k8s/deployment.yaml");
    let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"].as_str(), Some("true"));
    assert_eq!(annotations["prometheus.io/path"].as_str(), Some("/metrics"));
    let scraped: u64 = annotations["prometheus.io/port"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let metrics = sidecar.settings.metrics.listen.expect("metrics.listen set");
    assert_eq!(sidecar.ports.get("metrics"), Some(&scraped));
    assert_eq!(u64::from(metrics.port()), scraped);
    assert!(
        metrics.ip().is_unspecified(),
        "Prometheus reaches the pod's IP, not {metrics}"
    );
    assert!(
        api.ip().is_loopback(),
        "the lock API stays on the pod's loopback"
    );
}

/// docs/security.md: `rediss://` masters with no credentials in any URL, the ACL user, and its
/// password from a file of the mounted Secret; no manifest holds a password in a URL.
#[test]
fn k8s_masters_follow_the_security_doc() {
    let sidecar = load_sidecar();
    for master in &sidecar.settings.masters {
        assert!(master.starts_with("rediss://"), "{master} is not TLS");
        let authority = master["rediss://".len()..].split('/').next().unwrap();
        assert!(!authority.contains('@'), "credentials in {master}");
    }
    let credentials = sidecar.settings.fleet.credentials.as_ref().unwrap();
    assert_eq!(credentials.username.as_deref(), Some("redlease"));
    assert_eq!(credentials.password.expose(), "CHANGE-ME");
    for manifest in ["configmap.yaml", "deployment.yaml", "secret.yaml"] {
        let text = std::fs::read_to_string(root().join("deploy/k8s").join(manifest)).unwrap();
        assert!(!text.contains("redis://"), "{manifest}: plain redis://");
        for (at, _) in text.match_indices("://") {
            let authority = text[at + 3..].split(['/', '"', ' ', '\n']).next().unwrap();
            assert!(!authority.contains('@'), "{manifest}: credentials in a URL");
        }
    }
    let env = sidecar.container["env"].as_sequence().unwrap();
    assert!(
        env.iter().all(|e| e["valueFrom"]["secretKeyRef"].is_null())
            && sidecar.container["envFrom"].is_null(),
        "a secret in the environment"
    );
}

/// The example Prometheus job (deploy/prometheus/kubernetes.yml) is the alerts' `redlease`,
/// keeps the redlease container's `metrics` port of pods that ask by annotation, names each
/// target by its pod, and passes `promtool check config` (with a static target standing in
/// for Kubernetes discovery, which Debian's promtool lacks).
#[test]
fn k8s_prometheus_job_scrapes_the_metrics_port() {
    let config = yaml("deploy/prometheus/kubernetes.yml");
    let job = &config["scrape_configs"][0];
    assert_eq!(job["job_name"].as_str(), Some("redlease"));
    assert_eq!(
        job["kubernetes_sd_configs"][0]["role"].as_str(),
        Some("pod")
    );
    let relabels = job["relabel_configs"].as_sequence().unwrap();
    let keeps: Vec<(String, String)> = relabels
        .iter()
        .filter(|r| r["action"].as_str() == Some("keep"))
        .map(|r| {
            (
                words(&r["source_labels"]).join(";"),
                r["regex"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let sidecar = load_sidecar();
    let container = sidecar.container["name"].as_str().unwrap();
    assert!(sidecar.ports.contains_key("metrics"));
    let expected = [
        (
            "__meta_kubernetes_pod_annotation_prometheus_io_scrape".to_string(),
            "true".to_string(),
        ),
        (
            "__meta_kubernetes_pod_container_name;__meta_kubernetes_pod_container_port_name"
                .to_string(),
            format!("{container};metrics"),
        ),
    ];
    assert_eq!(keeps, expected);
    let instance = relabels
        .iter()
        .find(|r| r["target_label"].as_str() == Some("instance"))
        .expect("instance relabelled");
    assert_eq!(
        words(&instance["source_labels"]),
        ["__meta_kubernetes_pod_name"]
    );

    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("deploy/prometheus/kubernetes.yml")).unwrap();
    let rules = root().join("dashboards/alerts.yml");
    let text = text
        .replace("../../dashboards/alerts.yml", rules.to_str().unwrap())
        .replace(
            "kubernetes_sd_configs:\n      - role: pod",
            "static_configs:\n      - targets: [\"10.0.0.1:9600\"]",
        );
    assert!(!text.contains("kubernetes_sd_configs"), "{text}");
    let checked = dir.path().join("prometheus.yml");
    std::fs::write(&checked, text).unwrap();
    let (ok, output) = run_bounded(
        Command::new("promtool")
            .arg("check")
            .arg("config")
            .arg(&checked),
        Duration::from_secs(60),
    );
    assert!(ok, "promtool check config: {output}");
}

/// The sidecar container of the Deployment and its settings: the ConfigMap's TOML passed with
/// `--config` and the Deployment's environment, with each mounted volume's files written
/// where the TOML names them (the Secret's password file).
fn load_sidecar() -> Sidecar {
    let configmap = yaml("deploy/k8s/configmap.yaml");
    let secret = yaml("deploy/k8s/secret.yaml");
    let deployment = yaml("deploy/k8s/deployment.yaml");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = pod["containers"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| c["name"].as_str() == Some("redlease"))
        .expect("a redlease container")
        .clone();
    let ports = container["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| {
            let name = p["name"].as_str().expect("named ports").to_string();
            (name, p["containerPort"].as_u64().unwrap())
        })
        .collect();
    let args = words(&container["args"]);
    assert_eq!(args[0], "serve");
    let config_path = Path::new(&args[args.iter().position(|a| a == "--config").unwrap() + 1]);
    let dir = tempfile::tempdir().unwrap();
    let mut toml = None;
    let mut mounts = Vec::new();
    for mount in container["volumeMounts"].as_sequence().unwrap() {
        let mount_path = mount["mountPath"].as_str().unwrap();
        let volume = pod["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .expect("a declared volume");
        let (files, field) = if !volume["configMap"].is_null() {
            assert_eq!(volume["configMap"]["name"], configmap["metadata"]["name"]);
            (&configmap["data"], "configMap")
        } else {
            assert_eq!(volume["secret"]["secretName"], secret["metadata"]["name"]);
            (&secret["stringData"], "secret")
        };
        let local = dir.path().join(field);
        std::fs::create_dir_all(&local).unwrap();
        for (key, value) in files.as_mapping().unwrap() {
            let (key, value) = (key.as_str().unwrap(), value.as_str().unwrap());
            std::fs::write(local.join(key), value).unwrap();
            if Path::new(mount_path).join(key) == config_path {
                toml = Some(value.to_string());
            }
        }
        mounts.push((mount_path.to_string(), local));
    }
    let mut toml = toml.expect("--config is a file of a mounted ConfigMap");
    for (mount_path, local) in &mounts {
        let quoted = format!("\"{mount_path}/");
        toml = toml.replace(&quoted, &format!("\"{}/", local.display()));
    }
    let file = dir.path().join("redlease.toml");
    std::fs::write(&file, toml).unwrap();
    let env: Vec<(String, String)> = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_string();
            (
                name,
                e["value"].as_str().expect("a plain value").to_string(),
            )
        })
        .collect();
    let settings = Settings::load(Some(&file), env, Overrides::default())
        .unwrap_or_else(|e| panic!("the example's settings: {e}"));
    Sidecar {
        container,
        settings,
        ports,
    }
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
