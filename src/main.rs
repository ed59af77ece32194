//! The `redlease` binary: everything lives in the library; this only hands over to it.

/// mimalloc instead of glibc's malloc: the engine's per-master calls allocate on one worker
/// thread and free on another, and glibc's arena locks are then contended under load
/// (`docs/library.md`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    redlease::cli::main()
}
