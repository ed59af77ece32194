//! The Kubernetes sidecar example: the manifests carry what the sidecar needs.

use super::*;

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
