//! The start-up's check that each master lets redlease do its work: a connection of its own
//! ([`Detached`]) that completes the TLS and `AUTH` handshake of a lock link and then sends
//! one harmless command of every kind redlease sends, so an ACL user short of a permission
//! stops the start with the command named, rather than failing lock calls later.
//!
//! Each probe passes Redis' permission check and then fails or does nothing: `CLIENT KILL ID
//! 0` is refused (no such id), `EVALSHA` of an unknown SHA answers
//! NOSCRIPT, `SCRIPT LOAD` of Lua that does not compile stores nothing, `XADD … 0-0` is an
//! invalid id. Only one key is written, `<prefix>probe:<random>` ([`Keyspace::probe`]), for at
//! most 10 s, and deleted at the end; `INCR` runs on it only once it holds text (so it fails).
//! A script's `redis.call`s are checked against the same ACL rules as the commands themselves,
//! which the probes cover (`GET`, `SET`, `DEL`, `PEXPIRE`, `PTTL`, `EXISTS`, `PUBLISH`).
//!
//! Only a refusal is fatal: NOPERM, or a failed TLS handshake. A master that is down, slow or
//! refuses the password is left to the usual background reconnection.

use super::wire::{Detached, OpenError, Target};
use crate::keys::Keyspace;
use crate::resp::{Commands, Reply};
use crate::Error;

/// What a master refused at start-up: the operator's to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The TLS handshake failed (untrusted or misnamed certificate, client certificate refused).
    Tls(String),
    /// Commands the user may not run, each as `command (the master's NOPERM reply)`.
    Permissions(Vec<String>),
}

impl Refusal {
    /// The start-up's error for the master shown as `url` (credentials masked).
    pub(super) fn into_error(self, url: &str) -> Error {
        let reason = match self {
            Refusal::Tls(reason) => format!("TLS handshake failed: {reason}"),
            Refusal::Permissions(missing) => format!(
                "its user lacks permissions redlease needs (grant them, see the ACL line in \
                 docs/security.md): {}",
                missing.join("; ")
            ),
        };
        Error::InvalidMaster {
            url: url.to_string(),
            reason,
        }
    }
}

/// One probe: the ACL name of the command it checks, and its arguments.
type Probe = (&'static str, Vec<Vec<u8>>);

/// Checks the master behind `target`. `Ok` unless it refused something; unbounded (the
/// caller bounds it).
pub(super) async fn check(target: &Target, keyspace: &Keyspace) -> Result<(), Refusal> {
    let mut connection = match Detached::open(target).await {
        Ok(connection) => connection,
        Err(OpenError::Tls(reason)) => return Err(Refusal::Tls(reason)),
        Err(OpenError::Refused(reply)) if is_denied(&reply) => {
            let handshake = "the handshake (AUTH, SELECT, CLIENT ID, INFO server)";
            return Err(Refusal::Permissions(vec![format!("{handshake} ({reply})")]));
        }
        Err(_) => return Ok(()),
    };
    let nonce = format!("{:016x}", rand::random::<u64>());
    let key = keyspace.probe(&nonce);
    let mut missing = Vec::new();
    let first = first_probes(&key);
    let Ok(replies) = connection.send(&encode(&first)).await else {
        return Ok(());
    };
    missing.extend(denied(&first, &replies));
    let written = matches!(replies.get(1), Some(Ok(v)) if v.as_str().as_deref() == Some("OK"));
    let last = last_probes(&key, written);
    let Ok(replies) = connection.send(&encode(&last)).await else {
        return Ok(());
    };
    missing.extend(denied(&last, &replies));
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Refusal::Permissions(missing))
    }
}

/// Every probe but `INCR`, `DEL` and the subscription; `SET` second (its reply tells
/// whether the key holds text).
fn first_probes(key: &str) -> Vec<Probe> {
    let k = || key.as_bytes().to_vec();
    let b = |s: &str| s.as_bytes().to_vec();
    vec![
        ("ping", vec![b("PING")]),
        (
            "set",
            vec![
                b("SET"),
                k(),
                b("redlease permission probe"),
                b("PX"),
                b("10000"),
            ],
        ),
        ("get", vec![b("GET"), k()]),
        ("exists", vec![b("EXISTS"), k()]),
        ("pttl", vec![b("PTTL"), k()]),
        ("pexpire", vec![b("PEXPIRE"), k(), b("10000")]),
        ("evalsha", vec![b("EVALSHA"), b(&"0".repeat(40)), b("0")]),
        (
            "script|load",
            vec![b("SCRIPT"), b("LOAD"), b("redlease permission probe (")],
        ),
        ("publish", vec![b("PUBLISH"), k(), b("")]),
        (
            "scan",
            vec![b("SCAN"), b("0"), b("MATCH"), k(), b("COUNT"), b("1")],
        ),
        ("xadd", vec![b("XADD"), k(), b("0-0"), b("f"), b("v")]),
        (
            "xrevrange",
            vec![b("XREVRANGE"), k(), b("+"), b("-"), b("COUNT"), b("1")],
        ),
        ("client|kill", vec![b("CLIENT"), b("KILL"), b("ID"), b("0")]),
    ]
}

/// `INCR` (only when the key holds text, so it fails), `DEL`, and a subscription left at once
/// (last: a subscribed connection takes nothing else).
fn last_probes(key: &str, written: bool) -> Vec<Probe> {
    let k = || key.as_bytes().to_vec();
    let b = |s: &str| s.as_bytes().to_vec();
    let incr = written.then(|| ("incr", vec![b("INCR"), k()]));
    let rest = [
        ("del", vec![b("DEL"), k()]),
        ("subscribe", vec![b("SUBSCRIBE"), k()]),
        ("unsubscribe", vec![b("UNSUBSCRIBE"), k()]),
    ];
    incr.into_iter().chain(rest).collect()
}

fn encode(probes: &[Probe]) -> Commands {
    let mut commands = Commands::with_capacity(512);
    for (_, parts) in probes {
        let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        commands.push(&parts);
    }
    commands
}

/// `command (reply)` for every probe the master answered with NOPERM.
fn denied(probes: &[Probe], replies: &[Reply]) -> Vec<String> {
    let answered = probes.iter().zip(replies);
    let refused = answered.filter_map(|((name, _), reply)| match reply {
        Err(text) if is_denied(text) => Some(format!("{name} ({text})")),
        _ => None,
    });
    let mut missing: Vec<String> = refused.collect();
    missing.dedup();
    missing
}

fn is_denied(reply: &str) -> bool {
    reply.starts_with("NOPERM")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only NOPERM replies count, each named by its command, once.
    #[test]
    fn only_noperm_replies_are_missing_permissions() {
        let probes = first_probes("redlease:probe:1");
        let at = |name: &str| probes.iter().position(|(n, _)| *n == name).unwrap();
        let mut replies: Vec<Reply> = vec![Ok(fred::types::Value::Null); probes.len()];
        replies[at("evalsha")] = Err("NOSCRIPT No matching script".into());
        let xadd = "NOPERM this user has no permissions to run the 'xadd' command";
        replies[at("xadd")] = Err(xadd.into());
        let key = "NOPERM this user has no permissions to access one of the keys used as arguments";
        replies[at("get")] = Err(key.into());
        let missing = denied(&probes, &replies);
        assert_eq!(missing.len(), 2, "{missing:?}");
        assert!(missing[0].starts_with("get (NOPERM") && missing[0].contains("keys"));
        assert_eq!(missing[1], format!("xadd ({xadd})"));
    }

    /// `INCR` is sent only when the key holds text, and the subscription goes last.
    #[test]
    fn incr_needs_the_key_written_first() {
        let names = |probes: Vec<Probe>| probes.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(
            names(last_probes("k", true)),
            ["incr", "del", "subscribe", "unsubscribe"]
        );
        assert_eq!(
            names(last_probes("k", false)),
            ["del", "subscribe", "unsubscribe"]
        );
    }
}
