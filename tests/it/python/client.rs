//! A Python client generated at test time from `docs/openapi.json` by openapi-python-client
//! (into a temp dir: never committed), driven by `tests/python/test_client.py` against a live
//! sidecar with a bearer token on real masters.

use std::path::Path;
use std::time::Duration;

use redlease_testkit::TestFleet;
use tokio::process::Command;

use super::serve::{Serve, TOKEN};
use super::venv;

/// A client generated from `docs/openapi.json` takes a lock, renews it, reads its first event,
/// sees another owner's acquisition refused (409 `held`), releases it and reads it released;
/// and campaigns, proclaims, reads the leader and resigns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_python_client_takes_renews_and_releases_a_lock() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = venv::tool("python");
    let work = tempfile::tempdir().unwrap();
    let package = work.path().join("redlease_api");
    let generated = generate(&root.join("docs/openapi.json"), &package).await;

    let fleet = TestFleet::start(3);
    let serve = Serve::start(&fleet, &[]).await;
    let mut command = Command::new(python);
    command
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(root.join("tests/python/test_client.py"))
        .env("REDLEASE_URL", &serve.base)
        .env("REDLEASE_TOKEN", TOKEN)
        .env("REDLEASE_CLIENT_PATH", work.path())
        .current_dir(root);
    let ran = venv::run(command, Duration::from_secs(60)).await;
    eprintln!(
        "client generated in {:.1} s, its test ran in {:.1} s",
        generated.as_secs_f64(),
        ran.took.as_secs_f64()
    );
    assert!(
        ran.success,
        "the Python client's test failed:\n{}\n----- sidecar log -----\n{}",
        ran.output(),
        serve.log_text()
    );
}

/// `openapi-python-client generate` of `document` into the package directory `package`
/// (`--meta none`: the package alone); how long it took.
async fn generate(document: &Path, package: &Path) -> Duration {
    let generator = venv::tool("openapi-python-client");
    // Its post-generation hooks run `ruff` from the PATH: the venv's.
    let path = std::env::join_paths(std::iter::once(venv::dir().join("bin")).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let mut command = Command::new(generator);
    command
        .args(["generate", "--meta", "none", "--path"])
        .arg(document)
        .arg("--output-path")
        .arg(package)
        .env("PATH", path);
    let ran = venv::run(command, Duration::from_secs(120)).await;
    assert!(
        ran.success,
        "openapi-python-client could not generate a client from {}:\n{}",
        document.display(),
        ran.output()
    );
    eprintln!("openapi-python-client:\n{}", ran.stdout.trim());
    ran.took
}
