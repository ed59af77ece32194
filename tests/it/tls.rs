//! Real fleets: `rediss://` masters (mutual TLS included) reached by a least-privilege ACL
//! user whose password comes from a file; start-up refusing an untrusted certificate or a
//! missing permission while tolerating a master that is down; a TLS lock link that never
//! leaves a write half sent; and no password in any log line or the fleet view of a real
//! `redlease serve` process ([`logs`]).

mod cli;
mod logs;

use std::sync::Arc;
use std::time::Duration;

use redlease::config::{Overrides, Settings};
use redlease::{Credentials, EngineOptions, Fleet, FleetOptions, Redlock, TlsOptions};
use redlease_testkit::resp::Resp;
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::tls::{Pki, TlsMaster, ACL_COMMANDS};
use serde_json::{json, Value};
use tokio::time::{timeout, Instant};

const PASSWORD: &str = "tls-test-Pa55word";

/// The settings' env pairs for user `redlease`, its password file, the CA and, with
/// `mutual`, the client certificate.
fn tls_env(pki: &Pki, mutual: bool) -> Vec<(String, String)> {
    let password = pki.write("password", &format!("{PASSWORD}\n"));
    let path = |p: std::path::PathBuf| p.to_str().unwrap().to_string();
    let mut env = vec![
        ("REDLEASE__FLEET__USERNAME", "redlease".to_string()),
        ("REDLEASE__FLEET__PASSWORD_FILE", path(password)),
        ("REDLEASE__FLEET__TLS__CA_FILE", path(pki.ca())),
    ];
    if mutual {
        env.push((
            "REDLEASE__FLEET__TLS__CERT_FILE",
            path(pki.path("client.pem")),
        ));
        env.push((
            "REDLEASE__FLEET__TLS__KEY_FILE",
            path(pki.path("client.key")),
        ));
    }
    env.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Library options for `redlease` with [`PASSWORD`] and `pki`'s CA.
fn options(pki: &Pki) -> FleetOptions {
    FleetOptions {
        credentials: Some(Credentials {
            username: Some("redlease".into()),
            password: PASSWORD.into(),
        }),
        tls: TlsOptions {
            ca_file: Some(pki.ca()),
            ..TlsOptions::default()
        },
        ..redlease_testkit::fleet::test_fleet_options()
    }
}

/// `Fleet::connect`, bounded: a start-up that takes 10 s fails the test.
async fn connect(urls: &[String], options: &FleetOptions) -> Result<Arc<Fleet>, redlease::Error> {
    timeout(Duration::from_secs(10), Fleet::connect(urls, options))
        .await
        .unwrap()
}

/// Subscribers of `channel` on `master`.
fn subscribers(master: &TlsMaster, channel: &str) -> i64 {
    match master.command(&["PUBSUB", "NUMSUB", channel]) {
        Resp::Array(reply) => reply[1].int(),
        other => panic!("NUMSUB: {other:?}"),
    }
}

fn lease_id(lease: &Value) -> String {
    lease["lease_id"].as_str().unwrap().to_string()
}

/// Over three mutual-TLS masters and a user granted only the documented commands, keys
/// `redlease:*` and channels `redlease:*`: acquire, renew, a blocked acquisition woken by the
/// release message, release, the inventory, a force release and its audit all work, and no
/// master logged a single ACL denial. Every connection redlease made is that user's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_least_privilege_user_runs_every_path_over_mutual_tls() {
    let pki = Pki::new();
    let masters: Vec<TlsMaster> = (0..3).map(|_| TlsMaster::start(&pki, true)).collect();
    masters
        .iter()
        .for_each(|m| m.add_user("redlease", PASSWORD, &[]));
    let urls: Vec<String> = masters.iter().map(TlsMaster::url).collect();
    let env = tls_env(&pki, true);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let start = TestSidecar::start_on(urls.clone(), &env);
    let sidecar = timeout(Duration::from_secs(20), start).await.unwrap();
    let other = timeout(
        Duration::from_secs(20),
        TestSidecar::start_on(urls.clone(), &env),
    );
    let waiter = std::sync::Arc::new(other.await.unwrap());

    let (status, lease) = sidecar
        .acquire(
            "tls-job",
            json!({"owner": "a", "ttl_ms": 20000, "auto_renew": false}),
        )
        .await;
    assert_eq!(status, 200, "{lease}");
    for master in &masters {
        let value = master.command(&["GET", "redlease:lock:tls-job"]).bulk();
        assert!(value.unwrap().starts_with(&lease_id(&lease)));
    }
    let renew = format!("/v1/leases/{}/renew", lease_id(&lease));
    let (status, renewed) = sidecar.post_json(&renew, json!({"ttl_ms": 20000})).await;
    assert_eq!(status, 200, "{renewed}");

    let blocked = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            let body = json!({"owner": "b", "wait_ms": 8000, "ttl_ms": 20000});
            waiter.acquire("tls-job", body).await
        })
    };
    let channel = "redlease:released:tls-job";
    redlease_testkit::assert_eventually!(
        masters.iter().all(|m| subscribers(m, channel) == 1),
        5,
        "the waiter never subscribed"
    );
    let released_at = Instant::now();
    let (status, _) = sidecar
        .delete(&format!("/v1/leases/{}", lease_id(&lease)))
        .await;
    assert_eq!(status, 200);
    let (status, granted) = timeout(Duration::from_secs(10), blocked)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (status, granted["owner"].as_str()),
        (200, Some("b")),
        "{granted}"
    );
    assert!(
        released_at.elapsed() < Duration::from_secs(5),
        "not woken by the release"
    );

    let (status, page) = sidecar.get("/v1/locks?prefix=tls-").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["locks"][0]["resource"], "tls-job", "{page}");
    let (status, view) = sidecar.get("/v1/locks/tls-job").await;
    assert_eq!(status, 200, "{view}");
    let force = json!({"actor": "ops", "reason": "tls test"});
    let (status, forced) = sidecar
        .post_json("/v1/locks/tls-job/force-release", force)
        .await;
    assert_eq!(
        (status, forced["audits_recorded"].as_u64()),
        (200, Some(3)),
        "{forced}"
    );

    let settings = Settings::load(
        None,
        tls_env(&pki, true),
        Overrides {
            masters: Some(urls),
            ..Overrides::default()
        },
    )
    .unwrap();
    let fleet = connect(&settings.masters, &settings.fleet_options())
        .await
        .unwrap();
    let engine = Redlock::new(fleet, EngineOptions::default());
    let audit = engine.audit(None, 10).await.unwrap();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!((audit[0].masters, audit[0].actor.as_str()), (3, "ops"));
    for master in &masters {
        assert_eq!(master.acl_log(), Vec::<String>::new(), "ACL denials");
        let users = master.client_users();
        assert!(
            !users.is_empty() && users.iter().all(|u| u == "redlease"),
            "{users:?}"
        );
        let probes = master.command(&["KEYS", "redlease:probe:*"]).strings();
        assert!(probes.is_empty(), "the permission probe left {probes:?}");
    }
    engine.fleet().quit(Duration::from_secs(1)).await;
}

/// A CA that did not sign the masters' certificates fails start-up at once, naming the master
/// and the TLS failure; so does a mutual-TLS master reached without a client certificate.
#[tokio::test]
async fn an_untrusted_certificate_fails_start_up() {
    let (pki, stranger) = (Pki::new(), Pki::new());
    let master = TlsMaster::start(&pki, false);
    master.add_user("redlease", PASSWORD, &[]);
    let wrong_ca = FleetOptions {
        tls: TlsOptions {
            ca_file: Some(stranger.ca()),
            ..TlsOptions::default()
        },
        ..options(&pki)
    };
    let started = Instant::now();
    let error = connect(&[master.url()], &wrong_ca).await.err().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let message = error.to_string();
    assert!(message.contains(&master.url()), "{message}");
    assert!(message.contains("TLS handshake failed"), "{message}");
    // rustls names the failure after the unknown signer of the chain.
    assert!(
        message.contains("invalid peer certificate: UnknownIss"),
        "{message}"
    );

    let mutual = TlsMaster::start(&pki, true);
    mutual.add_user("redlease", PASSWORD, &[]);
    let error = connect(&[mutual.url()], &options(&pki))
        .await
        .err()
        .unwrap();
    let message = error.to_string();
    assert!(message.contains("TLS handshake failed"), "{message}");
    assert!(message.contains("CertificateRequired"), "{message}");
}

/// A user short of any one documented permission (or of the key prefix) fails start-up with
/// the master and the missing permission named; a master that is merely down does not.
#[tokio::test]
async fn a_missing_permission_fails_start_up_naming_it() {
    let pki = Pki::new();
    let mut masters: Vec<TlsMaster> = (0..3).map(|_| TlsMaster::start(&pki, false)).collect();
    let urls: Vec<String> = masters.iter().map(TlsMaster::url).collect();
    for missing in [
        "client|kill",
        "xadd",
        "subscribe",
        "incr",
        "evalsha",
        "client|id",
        "ping",
    ] {
        masters
            .iter()
            .for_each(|m| m.add_user("redlease", PASSWORD, &[]));
        masters[1].add_user("redlease", PASSWORD, &[missing]);
        let error = connect(&urls, &options(&pki)).await.err();
        let message = error.map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains(&urls[1]), "{missing}: {message}");
        assert!(
            message.contains(&format!("'{missing}'")),
            "{missing}: {message}"
        );
        assert!(message.contains("NOPERM"), "{missing}: {message}");
    }
    masters
        .iter()
        .for_each(|m| m.add_user("redlease", PASSWORD, &[]));
    let other_keys = ["ACL", "SETUSER", "redlease", "resetkeys", "~other:*"];
    assert_eq!(masters[2].command(&other_keys), Resp::Simple("OK".into()));
    let error = connect(&urls, &options(&pki)).await.err().unwrap();
    assert!(
        error.to_string().contains("keys used as arguments"),
        "{error}"
    );

    masters[2].add_user("redlease", PASSWORD, &[]);
    // Born with every master up; then one is down at the next start.
    let born = connect(&urls, &options(&pki)).await.unwrap();
    born.quit(Duration::from_secs(1)).await;
    masters[0].server.stop();
    let fleet = connect(&urls, &options(&pki)).await.unwrap();
    assert_eq!(fleet.nodes().iter().filter(|n| n.is_up()).count(), 2);
    fleet.quit(Duration::from_secs(1)).await;
}

/// The ACL line in docs/security.md grants exactly the commands the tests' user gets.
#[test]
fn the_documented_acl_line_grants_exactly_the_tested_commands() {
    let doc = include_str!("../../docs/security.md");
    let line = doc
        .lines()
        .find(|l| l.starts_with("ACL SETUSER redlease on "));
    let line = line.expect("no ACL SETUSER line in docs/security.md");
    let granted: Vec<&str> = line
        .split_whitespace()
        .filter_map(|rule| rule.strip_prefix('+'))
        .collect();
    let mut documented = granted.clone();
    documented.sort_unstable();
    let mut tested = ACL_COMMANDS.to_vec();
    tested.sort_unstable();
    assert_eq!(documented, tested, "{line}");
    for rule in [
        "~redlease:*",
        "&redlease:*",
        "-@all",
        "resetchannels",
        "resetkeys",
    ] {
        assert!(
            line.split_whitespace().any(|r| r == rule),
            "{rule} missing: {line}"
        );
    }
}

/// A TLS lock link never leaves the end of a write inside rustls: a SET a little larger than
/// what the socket takes while the master is frozen (its end then waits in rustls' buffer)
/// is answered soon after the master resumes, not after the stall limit. Several sizes around
/// the socket's capacity (3.9 MB here) are tried, each on a new link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_link_flushes_every_write() {
    use redlease::fleet::wire::{Target, TlsTarget, Wire};
    use tokio_rustls::rustls::pki_types::ServerName;

    let pki = Pki::new();
    let mut master = TlsMaster::start(&pki, false);
    let tls = TlsOptions {
        ca_file: Some(pki.ca()),
        ..TlsOptions::default()
    };
    let target = Target {
        host: "127.0.0.1".into(),
        port: master.tls_port(),
        username: None,
        password: None,
        database: None,
        connect_timeout: Duration::from_secs(2),
        tls: Some(TlsTarget {
            connector: tokio_rustls::TlsConnector::from(tls.client_config().unwrap()),
            server_name: ServerName::try_from("127.0.0.1").unwrap(),
        }),
    };
    for extra_kib in (0..=96).step_by(16) {
        let wire = Wire::new(target.clone(), Box::new(|| {}));
        wire.connect();
        timeout(Duration::from_secs(5), wire.wait_for_connect())
            .await
            .unwrap();
        let value = "v".repeat(3_900_000 + extra_kib * 1024);
        master.server.pause();
        let started = Instant::now();
        let parts: [&[u8]; 3] = [b"SET", b"redlease:big", value.as_bytes()];
        let set = timeout(Duration::from_secs(10), wire.command(&parts));
        let resume = async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            master.server.resume();
        };
        let (reply, ()) = tokio::join!(set, resume);
        let took = started.elapsed();
        assert!(matches!(reply, Ok(Ok(_))), "+{extra_kib} KiB: {reply:?}");
        assert!(took < Duration::from_secs(2), "+{extra_kib} KiB: {took:?}");
        wire.close();
    }
}
