//! `redlease openapi`: the sidecar API's OpenAPI 3.1 document (what `GET /v1/openapi.json`
//! serves), printed on stdout or written to a file (`--out docs/openapi.json`).

use std::path::PathBuf;

use clap::Args;

use super::{EXIT_IO, EXIT_OK};

#[derive(Debug, Args)]
pub struct OpenapiArgs {
    /// Write the document to this file instead of printing it.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// Prints or writes the document (pretty JSON, a trailing newline).
pub fn run(args: &OpenapiArgs) -> u8 {
    let document = redlease_sidecar::openapi_json();
    let Some(out) = &args.out else {
        print!("{document}");
        return EXIT_OK;
    };
    match std::fs::write(out, document) {
        Ok(()) => EXIT_OK,
        Err(error) => {
            eprintln!("redlease: cannot write {}: {error}", out.display());
            EXIT_IO
        }
    }
}
