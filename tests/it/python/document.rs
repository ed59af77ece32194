//! `docs/openapi.json` checked as OpenAPI 3.1 by a validator that did not make it
//! (openapi-spec-validator, pinned in `scripts/python/requirements.in`).

use std::path::Path;
use std::time::Duration;

use tokio::process::Command;

use super::venv;

/// openapi-spec-validator finds `docs/openapi.json` a valid OpenAPI 3.1 document.
#[tokio::test]
async fn the_document_is_valid_openapi_3_1() {
    let document = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.json");
    let mut command = Command::new(venv::tool("openapi-spec-validator"));
    command.args(["--schema", "3.1"]).arg(&document);
    let ran = venv::run(command, Duration::from_secs(60)).await;
    assert!(
        ran.success && ran.stdout.contains("OK"),
        "{} is not valid OpenAPI 3.1:\n{}",
        document.display(),
        ran.output()
    );
}
