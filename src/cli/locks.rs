//! `redlease locks list|show|force-release` and `redlease audit`: the lock inventory and the
//! audited force release, straight against the masters. JSON on stdout, or a table when stdout
//! is a terminal (`--json` forces JSON).

use std::io::IsTerminal;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};

use super::fleet_args::{connect, finish, print_json, FleetArgs};
use super::{EXIT_HELD, EXIT_NO_QUORUM, EXIT_OK, EXIT_USAGE};
use crate::keys::{
    lock_name, parse_lock_name, LockKind, LockName, MAX_READERS, MAX_SEMAPHORE_LIMIT,
};
use crate::redlock::inventory::DEFAULT_LIST_LIMIT;
use crate::{AuditRecord, Error, ForceOptions, ForceRelease, ForceVerdict, LeaseId, LockView};
use redlease_sidecar::{audit_json, force_release_json, lock_json, page_json};

#[derive(Debug, Subcommand)]
pub enum LocksCommand {
    /// The locks held under a prefix on any master, with their quorum holder.
    List {
        /// Only resources whose names start with this.
        #[arg(long)]
        prefix: Option<String>,
        /// Locks per page (1 to 1000).
        #[arg(long, default_value_t = DEFAULT_LIST_LIMIT)]
        limit: usize,
        /// List after this resource: the `next` of the previous page.
        #[arg(long)]
        after: Option<String>,
        #[command(flatten)]
        output: Output,
        #[command(flatten)]
        fleet: FleetArgs,
    },
    /// One lock as every master holds it, and the lease a quorum carries.
    Show {
        resource: String,
        #[command(flatten)]
        which: WhichLock,
        #[command(flatten)]
        output: Output,
        #[command(flatten)]
        fleet: FleetArgs,
    },
    /// Revoke the lease holding a lock (its holder is told at once), recorded in every
    /// master's audit stream.
    ForceRelease {
        resource: String,
        #[command(flatten)]
        which: WhichLock,
        /// Who releases (recorded and logged).
        #[arg(long)]
        actor: Option<String>,
        /// Why (recorded and logged).
        #[arg(long)]
        reason: Option<String>,
        /// Revoke only this lease (32 hex digits, as `locks show` prints it): a lease that
        /// took the lock since is left alone (exit 3).
        #[arg(long)]
        lease_id: Option<String>,
        /// The holder is gone (its host died): delete the lock at once instead of waiting for
        /// its holder to be told or its lease to expire.
        #[arg(long)]
        holder_gone: bool,
        #[command(flatten)]
        fleet: FleetArgs,
    },
}

/// Which of a resource's locks: its lock, a semaphore's slot, or a read-write lock's writer or
/// reader slot.
#[derive(Debug, Args)]
pub struct WhichLock {
    /// Another lock of the resource than its lock: `semaphore` or `read` (with --slot),
    /// `write` (its read-write lock's writer) or `election` (its election's leader).
    #[arg(long, value_parser = ["semaphore", "read", "write", "election"])]
    kind: Option<String>,
    /// The semaphore's slot or the reader slot (0–63); alone, a semaphore's slot.
    #[arg(long)]
    slot: Option<u32>,
}

impl WhichLock {
    /// The lock name on a valid `resource`; `None` (said on stderr) for flags that name no
    /// lock.
    fn checked_name(&self, resource: &str) -> Result<Option<String>, Error> {
        crate::keys::validate_resource(resource)?;
        Ok(self
            .lock_name(resource)
            .map_err(|error| eprintln!("redlease: {error}"))
            .ok())
    }

    /// The lock name of the lock these flags name on `resource`.
    fn lock_name(&self, resource: &str) -> Result<String, String> {
        let slot = match self.slot {
            Some(slot) if slot >= MAX_READERS.min(MAX_SEMAPHORE_LIMIT) => {
                return Err(format!("--slot {slot}: slots are 0 to 63"));
            }
            slot => slot,
        };
        let kind = match (self.kind.as_deref(), slot) {
            (None, None) => LockKind::Exclusive,
            (None | Some("semaphore"), Some(slot)) => LockKind::Slot(slot),
            (Some("read"), Some(slot)) => LockKind::Reader(slot),
            (Some("write"), None) => LockKind::Writer,
            (Some("election"), None) => LockKind::Election,
            (Some(kind), _) => {
                return Err(format!(
                    "--kind {kind}: semaphore and read need --slot, write and election take none"
                ));
            }
        };
        Ok(lock_name(resource, kind))
    }
}

/// A lock name as people read it: the resource, then the kind and slot of another lock than
/// the resource's (`pool [semaphore 2]`, `doc [write]`, `doc [read 5]`).
fn display_name(name: &str) -> String {
    match parse_lock_name(name) {
        Some(LockName { resource, kind }) => match kind {
            LockKind::Exclusive => resource.to_string(),
            LockKind::Slot(slot) => format!("{resource} [semaphore {slot}]"),
            LockKind::Slots(slots) => format!("{resource} [semaphore {slots}]"),
            LockKind::Writer => format!("{resource} [write]"),
            LockKind::Reader(slot) => format!("{resource} [read {slot}]"),
            LockKind::Election => format!("{resource} [election]"),
        },
        None => name.to_string(),
    }
}

/// `redlease audit`: the force releases recorded on the masters, newest first.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only records since: Unix milliseconds, or an age such as `90s`, `15m`, `2h`, `7d`.
    #[arg(long)]
    since: Option<String>,
    /// Records at most (1 to 10000).
    #[arg(long, default_value_t = 100)]
    limit: usize,
    #[command(flatten)]
    output: Output,
    #[command(flatten)]
    fleet: FleetArgs,
}

/// How answers are printed.
#[derive(Debug, Args)]
pub struct Output {
    /// JSON even on a terminal.
    #[arg(long)]
    json: bool,
}

impl Output {
    fn table(&self) -> bool {
        !self.json && std::io::stdout().is_terminal()
    }
}

/// Runs one inventory command and returns the exit code.
pub async fn run(command: LocksCommand) -> u8 {
    report(execute(command).await)
}

/// Runs `redlease audit` and returns the exit code.
pub async fn run_audit(args: AuditArgs) -> u8 {
    report(audit(args).await)
}

fn report(result: Result<u8, Error>) -> u8 {
    result.unwrap_or_else(|error| {
        eprintln!("redlease: {error}");
        EXIT_USAGE
    })
}

async fn execute(command: LocksCommand) -> Result<u8, Error> {
    match command {
        LocksCommand::List {
            prefix,
            limit,
            after,
            output,
            fleet,
        } => {
            let engine = connect(&fleet).await?;
            let page = engine
                .list_locks(prefix.as_deref(), after.as_deref(), limit)
                .await;
            let code = page.map(|page| {
                if output.table() {
                    print_lock_table(&page.locks);
                    if let Some(next) = &page.next {
                        println!("more: --after {next:?}");
                    }
                    if !page.complete {
                        println!("incomplete: a master did not answer the listing");
                    }
                } else {
                    print_json(&page_json(&page, &[]));
                }
                EXIT_OK
            });
            finish(&engine, code).await
        }
        LocksCommand::Show {
            resource,
            which,
            output,
            fleet,
        } => {
            let Some(name) = which.checked_name(&resource)? else {
                return Ok(EXIT_USAGE);
            };
            let engine = connect(&fleet).await?;
            let view = engine.inspect(&name).await;
            let code = view.map(|view| {
                if output.table() {
                    print_lock_table(std::slice::from_ref(&view));
                    print_master_table(&view);
                } else {
                    print_json(&lock_json(&view, None));
                }
                EXIT_OK
            });
            finish(&engine, code).await
        }
        LocksCommand::ForceRelease {
            resource,
            which,
            actor,
            reason,
            lease_id,
            holder_gone,
            fleet,
        } => {
            let (actor, reason) = (actor.unwrap_or_default(), reason.unwrap_or_default());
            crate::keys::validate_actor(&actor)?;
            crate::keys::validate_reason(&reason)?;
            let lease_id = lease_id.as_deref().map(str::parse::<LeaseId>).transpose()?;
            let Some(name) = which.checked_name(&resource)? else {
                return Ok(EXIT_USAGE);
            };
            let options = ForceOptions {
                lease_id,
                holder_gone,
            };
            let engine = connect(&fleet).await?;
            let forced = engine.force_release(&name, &actor, &reason, &options).await;
            let code = forced.map(|forced| {
                print_json(&force_release_json(&forced));
                force_release_code(&forced)
            });
            finish(&engine, code).await
        }
    }
}

/// The exit code of a force release, with a word on stderr when it is not plain success; the
/// other slots of its lease ([`ForceRelease::also`]) count as the slot named does.
fn force_release_code(forced: &ForceRelease) -> u8 {
    let code = forced_code(forced);
    let also = forced.also.iter().map(forced_code);
    also.fold(
        code,
        |worst, code| if worst == EXIT_OK { code } else { worst },
    )
}

/// The exit code of one lock's force release, and its word on stderr.
fn forced_code(forced: &ForceRelease) -> u8 {
    let resource = &display_name(&forced.resource);
    match forced.verdict {
        ForceVerdict::Confirmed => {
            if forced.holder_told == Some(false) {
                eprintln!(
                    "redlease: {resource} is revoked, but its holder did not acknowledge: \
                     nobody can take it until its keys expire (free_at_ms {}), unless \
                     --holder-gone",
                    forced.free_at_ms
                );
            }
            EXIT_OK
        }
        ForceVerdict::Mismatch => {
            eprintln!("redlease: another lease holds {resource}; nothing was revoked");
            EXIT_HELD
        }
        ForceVerdict::NoQuorum => {
            eprintln!(
                "redlease: only {} of {} masters confirmed the force release of {resource}; \
                 its holder may keep its quorum",
                forced.masters_answered,
                forced.masters.len()
            );
            EXIT_NO_QUORUM
        }
    }
}

async fn audit(args: AuditArgs) -> Result<u8, Error> {
    let since = match args
        .since
        .as_deref()
        .map(|s| parse_since(s, SystemTime::now()))
    {
        Some(Err(problem)) => {
            eprintln!("redlease: {problem}");
            return Ok(EXIT_USAGE);
        }
        Some(Ok(ms)) => Some(ms),
        None => None,
    };
    let engine = connect(&args.fleet).await?;
    let records = engine.audit(since, args.limit).await;
    let code = records.map(|records| {
        if args.output.table() {
            print!("{}", audit_table(&records));
        } else {
            let records: Vec<_> = records.iter().map(audit_json).collect();
            print_json(&serde_json::json!({ "records": records }));
        }
        EXIT_OK
    });
    finish(&engine, code).await
}

/// The audit records as a table for a person: times in RFC 3339 UTC (the JSON keeps Unix ms).
fn audit_table(records: &[AuditRecord]) -> String {
    let mut table = format!(
        "{:<24}  {:<24}  {:<16}  {:<7}  reason\n",
        "time (UTC)", "resource", "actor", "holders"
    );
    for r in records {
        let time = crate::wall_clock::rfc3339_utc_from_unix_ms(r.time_ms);
        let holders = r.holders.len();
        table.push_str(&format!(
            "{time:<24}  {:<24}  {:<16}  {holders:<7}  {}\n",
            display_name(&r.resource),
            r.actor,
            r.reason
        ));
    }
    table
}

/// `--since`: Unix milliseconds, or an age (`90s`, `15m`, `2h`, `7d`) before `now`.
fn parse_since(since: &str, now: SystemTime) -> Result<u64, String> {
    let invalid = || format!("--since {since:?}: expected Unix ms or an age such as 15m");
    if let Ok(ms) = since.parse::<u64>() {
        return Ok(ms);
    }
    let split = since.len().checked_sub(1).ok_or_else(invalid)?;
    let (number, unit) = since.split_at(split);
    let number: u64 = number.parse().map_err(|_| invalid())?;
    let seconds = match unit {
        "s" => number,
        "m" => number.saturating_mul(60),
        "h" => number.saturating_mul(3600),
        "d" => number.saturating_mul(86_400),
        _ => return Err(invalid()),
    };
    let now_ms = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as u64;
    Ok(now_ms.saturating_sub(seconds.saturating_mul(1000)))
}

fn print_lock_table(locks: &[LockView]) {
    println!(
        "{:<32}  {:<32}  {:<24}  {:>7}  {:>11}",
        "resource", "holder", "owner", "masters", "validity_ms"
    );
    for view in locks {
        let (id, owner, validity) = match &view.holder {
            Some(h) => (
                h.lease_id.to_string(),
                h.owner.clone(),
                h.validity.as_millis().to_string(),
            ),
            None => (
                "(no quorum holder)".to_string(),
                String::new(),
                "-".to_string(),
            ),
        };
        let masters = format!("{}/{}", view.masters_holding(), view.masters.len());
        println!(
            "{:<32}  {id:<32}  {owner:<24}  {masters:>7}  {validity:>11}",
            display_name(&view.resource)
        );
    }
}

fn print_master_table(view: &LockView) {
    println!();
    println!(
        "{:>4}  {:<28}  {:<5}  {:<32}  {:<24}  {:>9}",
        "node", "url", "state", "lease_id", "owner", "pttl_ms"
    );
    for master in &view.masters {
        let state = match (master.up, master.quarantined) {
            (_, true) => "quar",
            (true, false) => "up",
            (false, false) => "down",
        };
        let (id, owner, pttl) = match &master.answer {
            Ok(Some(h)) => (
                h.lease_id
                    .map_or_else(|| h.value.clone(), |id| id.to_string()),
                h.owner.clone().unwrap_or_default(),
                h.pttl
                    .map_or("-".to_string(), |p| p.as_millis().to_string()),
            ),
            Ok(None) => ("-".to_string(), String::new(), "-".to_string()),
            Err(error) => (format!("({error})"), String::new(), "-".to_string()),
        };
        println!(
            "{:>4}  {:<28}  {state:<5}  {id:<32}  {owner:<24}  {pttl:>9}",
            master.node, master.url
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The audit table prints when each force release ran in RFC 3339 UTC, not Unix ms.
    #[test]
    fn the_audit_table_prints_times_an_operator_reads() {
        let record = AuditRecord {
            audit_id: "0".repeat(32),
            resource: "payments-close".into(),
            actor: "alice@oncall".into(),
            reason: "job 7 is stuck".into(),
            time_ms: 1_795_640_584_123,
            holders: vec!["a|b".into()],
            masters: 3,
        };
        let table = audit_table(&[record]);
        let row = table.lines().nth(1).unwrap();
        assert!(
            row.starts_with("2026-11-25T21:03:04.123Z  payments-close"),
            "{table}"
        );
        assert!(!table.contains("1795640584123"), "{table}");
    }

    /// `--since` takes Unix milliseconds or an age before now.
    #[test]
    fn since_takes_ms_or_an_age() {
        let now = UNIX_EPOCH + Duration::from_secs(10_000);
        assert_eq!(parse_since("1234", now).unwrap(), 1234);
        assert_eq!(parse_since("90s", now).unwrap(), 10_000_000 - 90_000);
        assert_eq!(parse_since("2h", now).unwrap(), 10_000_000 - 7_200_000);
        assert!(parse_since("soon", now).is_err());
        assert!(parse_since("", now).is_err());
    }
}
