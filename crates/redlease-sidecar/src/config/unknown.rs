//! Unknown settings, found before the layers are merged: every key of the TOML file and every
//! `REDLEASE__*` variable that names no setting, each reported with its full dotted path, where
//! it came from (the file, or the variable's name) and the known key it most likely meant.

use std::collections::BTreeSet;
use std::path::Path;

use ::config::builder::DefaultState;
use ::config::{Config, ConfigBuilder, File, FileFormat, Map, Value, ValueKind};

/// The settings that have no default (left out, they are derived from others).
const KEYS_WITHOUT_DEFAULT: [&str; 3] = [
    "http.max_waiters",
    "runtime.busy_poll_us",
    "runtime.busy_poll_after_answer_us",
];

/// One line per unknown key of the file `file` and of the `REDLEASE__*` variables `env`
/// (`LOG_FORMAT_ENV` aside, which the command line reads), given the defaults that name every
/// setting. A file that cannot be read is left to the layers, which report it.
pub(super) fn unknown_keys(
    defaults: ConfigBuilder<DefaultState>,
    file: Option<&Path>,
    env: &[(String, String)],
) -> Vec<String> {
    let mut known = keys_of(defaults.build().ok());
    known.extend(KEYS_WITHOUT_DEFAULT.map(String::from));
    // A section given a value (`lease = 5`) is a wrong type, which the layers report.
    let unknown = |key: &String| {
        let section = format!("{key}.");
        !known.contains(key) && !known.iter().any(|k| k.starts_with(&section))
    };
    let mut lines = Vec::new();
    if let Some(path) = file {
        let source = File::from(path).format(FileFormat::Toml).required(true);
        let read = Config::builder().add_source(source).build().ok();
        for key in keys_of(read).iter().filter(|key| unknown(key)) {
            let from = format!("in {}", path.display());
            lines.push(line(key, &from, &known));
        }
    }
    for (name, _) in env {
        let key = env_key(name);
        if unknown(&key) {
            lines.push(line(&key, &format!("from {name}"), &known));
        }
    }
    lines
}

/// `REDLEASE__RENEWAL__JITER` → `renewal.jiter`.
fn env_key(name: &str) -> String {
    let path = name.strip_prefix("REDLEASE__").unwrap_or(name);
    path.split("__")
        .collect::<Vec<_>>()
        .join(".")
        .to_lowercase()
}

fn line(key: &str, from: &str, known: &BTreeSet<String>) -> String {
    let hint = suggestion(key, known).map_or_else(String::new, |k| format!("; did you mean {k}?"));
    format!("{key}: unknown key ({from}){hint}")
}

/// Every leaf key of `config` as a dotted path (a list is a leaf).
fn keys_of(config: Option<Config>) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let table = config.and_then(|c| c.try_deserialize::<Map<String, Value>>().ok());
    if let Some(table) = table {
        collect("", table, &mut keys);
    }
    keys
}

fn collect(prefix: &str, table: Map<String, Value>, keys: &mut BTreeSet<String>) {
    for (name, value) in table {
        let path = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}.{name}")
        };
        match value.kind {
            ValueKind::Table(inner) => collect(&path, inner, keys),
            _ => {
                keys.insert(path);
            }
        }
    }
}

/// The known key `key` most likely meant: the closest by edit distance in its own section (or
/// anywhere when its section is unknown), else one sharing a word with it, one typo apart
/// (`renewal.jiter` → `lease.renew_jitter_ms`); `None` when nothing is close.
fn suggestion<'k>(key: &str, known: &'k BTreeSet<String>) -> Option<&'k str> {
    let section = |k: &str| k.rsplit_once('.').map_or("", |(s, _)| s).to_string();
    let same_section: Vec<&String> = known
        .iter()
        .filter(|k| section(k) == section(key))
        .collect();
    let candidates = if same_section.is_empty() {
        known.iter().collect()
    } else {
        same_section
    };
    let close = candidates
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(distance, _)| *distance <= (key.len() / 3).max(2))
        .min();
    if let Some((_, k)) = close {
        return Some(k);
    }
    let shared = |k: &str| {
        let ours = words(key);
        let theirs = words(k);
        let near = |w: &str| theirs.iter().any(|t| edit_distance(w, t) <= 1);
        ours.iter().filter(|w| near(w)).count()
    };
    let best = known
        .iter()
        .map(|k| (shared(k), k))
        .max_by_key(|(n, _)| *n)?;
    (best.0 > 0).then_some(best.1.as_str())
}

/// The words of a key worth matching (four letters or more).
fn words(key: &str) -> Vec<&str> {
    let split = key.split(['.', '_']);
    split.filter(|w| w.len() >= 4).collect()
}

/// Levenshtein distance, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> BTreeSet<String> {
        [
            "lease.min_ttl_ms",
            "lease.renew_jitter_ms",
            "fleet.tls.ca_file",
            "listen",
        ]
        .into_iter()
        .map(String::from)
        .collect()
    }

    /// A typo finds its key in its section; a wrong section finds the key sharing a word; a
    /// key like nothing known gets no suggestion.
    #[test]
    fn suggestions_are_the_closest_known_keys() {
        let known = known();
        assert_eq!(
            suggestion("lease.min_tll_ms", &known),
            Some("lease.min_ttl_ms")
        );
        assert_eq!(
            suggestion("renewal.jiter", &known),
            Some("lease.renew_jitter_ms")
        );
        assert_eq!(
            suggestion("fleet.tls.ca_fil", &known),
            Some("fleet.tls.ca_file")
        );
        assert_eq!(suggestion("lisen", &known), Some("listen"));
        assert_eq!(suggestion("colour", &known), None);
    }

    /// Variables name keys by their path, lowercased.
    #[test]
    fn variables_name_dotted_keys() {
        assert_eq!(env_key("REDLEASE__RENEWAL__JITER"), "renewal.jiter");
        assert_eq!(
            env_key("REDLEASE__FLEET__TLS__CA_FILE"),
            "fleet.tls.ca_file"
        );
    }

    #[test]
    fn edit_distance_counts_single_character_edits() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
