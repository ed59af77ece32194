//! Where the Python tools are, and running one of them bounded in time with its output kept.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

/// The venv of `scripts/python-tools.sh`: `$REDLEASE_PYTHON_VENV`, else
/// `$CARGO_TARGET_DIR/python`, else `target/python` (relative paths from the repository root).
pub fn dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    if let Some(venv) = std::env::var_os("REDLEASE_PYTHON_VENV") {
        return root.join(venv);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").unwrap_or_else(|| "target".into());
    root.join(target).join("python")
}

/// The path of `tool` in the venv; panics, saying how to install it, when it is not there.
pub fn tool(tool: &str) -> PathBuf {
    let path = dir().join("bin").join(tool);
    assert!(
        path.is_file(),
        "{} is missing: the Python tools are not installed; run scripts/install-deps.sh \
         (it runs scripts/python-tools.sh, which creates {})",
        path.display(),
        dir().display()
    );
    path
}

/// What a tool did: its exit status, its stdout and stderr, how long it took.
pub struct Ran {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Ran {
    /// Everything it printed, for a failure message.
    pub fn output(&self) -> String {
        format!(
            "----- stdout -----\n{}\n----- stderr -----\n{}",
            self.stdout, self.stderr
        )
    }
}

/// Runs `command` (stdin closed, no bytecode written into the tree) and waits at most
/// `limit`: past it the process is killed (through its handle, by pid) and the test fails.
pub async fn run(mut command: Command, limit: Duration) -> Ran {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("NO_COLOR", "1")
        .kill_on_drop(true);
    let shown = format!("{:?}", command.as_std());
    let start = tokio::time::Instant::now();
    let child = command.spawn().unwrap();
    let Ok(output) = tokio::time::timeout(limit, child.wait_with_output()).await else {
        panic!("{shown} took more than {limit:?} and was killed");
    };
    let output = output.unwrap();
    Ran {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        took: start.elapsed(),
    }
}
