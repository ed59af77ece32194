//! The `redlease` binary: everything lives in the library; this only hands over to it.

fn main() -> std::process::ExitCode {
    redlease::cli::main()
}
