//! The layering rule of `lib.rs`'s layout map, checked on the sources: a module imports only
//! from modules on lower layers (or its own).

use std::path::{Path, PathBuf};

/// The top-level modules, top layer first; modules on one line share a layer.
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["loadtest", "server", "shutdown"],
    &["api"],
    &["config"],
    &["lease"],
    &["redlock"],
    &["wakeup"],
    &["fleet"],
    &["scripts"],
    &[
        "resp", "metrics", "keys", "lease_id", "error", "sockdiag", "dev", "client",
    ],
];

/// Names re-exported at the crate root, and the module each lives in.
const ROOT_NAMES: &[(&str, &str)] = &[
    ("Error", "error"),
    ("LeaseId", "lease_id"),
    ("Keyspace", "keys"),
    ("Fleet", "fleet"),
    ("FleetOptions", "fleet"),
    ("CallError", "fleet"),
    ("ProbeGuard", "fleet"),
    ("Credentials", "fleet"),
    ("Password", "fleet"),
    ("TlsOptions", "fleet"),
    ("DEFAULT_PROBE_PERIOD", "fleet"),
    ("Redlock", "redlock"),
    ("EngineOptions", "redlock"),
    ("AcquireOutcome", "redlock"),
    ("ExtendOutcome", "redlock"),
    ("ReleaseOutcome", "redlock"),
    ("Lease", "redlock"),
    ("Refusal", "redlock"),
    ("NodeVote", "redlock"),
    ("Shortfall", "redlock"),
    ("Renewal", "redlock"),
    ("Extension", "redlock"),
    ("DriftPolicy", "redlock"),
    ("NodeTimeoutPolicy", "redlock"),
    ("Wakeups", "wakeup"),
    ("LockView", "redlock"),
    ("DEFAULT_LIST_LIMIT", "redlock"),
    ("MAX_AUDIT_LIMIT", "redlock"),
    ("LockPage", "redlock"),
    ("ForceRelease", "redlock"),
    ("AuditRecord", "redlock"),
    ("ForceOptions", "redlock"),
    ("ForceVerdict", "redlock"),
    ("ForcedMaster", "redlock"),
    ("MasterAnswer", "redlock"),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The top-level module a file under `src/` belongs to.
fn owner(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_string())
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every top-level module a source line names through `crate::`: `crate::x::...`,
/// `crate::{x, y::z}` and root re-exports such as `crate::Error`.
fn named_modules(line: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (at, _) in line.match_indices("crate::") {
        let rest = &line[at + "crate::".len()..];
        let paths: Vec<&str> = match rest.strip_prefix('{') {
            Some(list) => list.split('}').next().unwrap_or("").split(',').collect(),
            None => vec![rest],
        };
        for path in paths {
            let name: String = path
                .trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let module = ROOT_NAMES
                .iter()
                .find(|(root, _)| *root == name)
                .map_or(name.clone(), |(_, module)| module.to_string());
            names.push(module);
        }
    }
    names
}

#[test]
fn no_module_imports_from_a_layer_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut violations = Vec::new();
    for file in &files {
        let Some(module) = owner(&src, file) else {
            continue;
        };
        let Some(own_layer) = layer_of(&module) else {
            continue; // lib.rs, main.rs and this file
        };
        let text = std::fs::read_to_string(file).unwrap();
        // Test modules may reach anywhere; they sit at the end of their files.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (number, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for named in named_modules(line) {
                if layer_of(&named).is_some_and(|layer| layer < own_layer) {
                    violations.push(format!("{}:{}: {named}", file.display(), number + 1));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "imports from a layer above: {violations:#?}"
    );
}

/// The check sees the three ways a module is named.
#[test]
fn named_modules_reads_paths_lists_and_root_names() {
    assert_eq!(named_modules("use crate::fleet::Node;"), ["fleet"]);
    assert_eq!(
        named_modules("use crate::{keys::Keyspace, Error};"),
        ["keys", "error"]
    );
    assert_eq!(named_modules("x: crate::Redlock,"), ["redlock"]);
    assert!(named_modules("use super::Tally;").is_empty());
}
