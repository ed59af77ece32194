//! What only this test binary can do: run the built `redlease`. Everything else the tests
//! share with the benches is in `redlease-testkit` (crates/redlease-testkit).

/// Runs the built `redlease ARGS` against `masters` (through `REDLEASE__MASTERS`), without the
/// test's `RUST_LOG`, and waits for it.
pub fn run_redlease(args: &[&str], masters: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_redlease"))
        .args(args)
        .env("REDLEASE__MASTERS", masters)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}
