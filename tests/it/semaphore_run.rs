//! `redlease semaphore run RESOURCE --limit N -- CMD`, the built binary against real masters
//! and through a sidecar: at most N commands at once, each with its slot in its environment.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use tokio::time::Instant;

/// `redlease semaphore run` with `args`, on `masters` (through `REDLEASE__MASTERS`); the
/// command writes its slot, limit and token to stdout.
fn semaphore_run(masters: &str, args: &[&str], hold: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redlease"));
    let script = format!(
        "echo \"$REDLEASE_SLOT $REDLEASE_LIMIT $REDLEASE_FENCING_TOKEN $REDLEASE_RESOURCE\"; \
         sleep {hold}"
    );
    command
        .args(["semaphore", "run"])
        .args(args)
        .args(["--", "sh", "-c", &script])
        .env("REDLEASE__MASTERS", masters)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Its exit code, stdout and stderr once it exits (bounded).
fn finish(mut child: Child, limit: Duration) -> (i32, String, String) {
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("semaphore run still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut out = String::new();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    (status.code().unwrap(), out, err)
}

/// Two commands of a semaphore of limit 2 run at once on two slots; a third is not run
/// (exit 3) and says every slot is held; another limit is refused (exit 64).
#[tokio::test]
async fn at_most_limit_commands_run_at_once_each_with_its_slot() {
    let fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let first = semaphore_run(&masters, &["pool", "--limit", "2"], "2")
        .spawn()
        .unwrap();
    let second = semaphore_run(&masters, &["pool", "--limit", "2"], "2")
        .spawn()
        .unwrap();
    // Both hold their permit once both printed (their command runs only with it).
    std::thread::sleep(Duration::from_millis(1200));
    let mut third = semaphore_run(&masters, &["pool", "--limit", "2"], "0");
    let (code, out, err) = finish(third.spawn().unwrap(), Duration::from_secs(20));
    assert_eq!(code, 3, "{err}");
    assert!(out.is_empty(), "ran without a permit: {out}");
    assert!(err.contains("no free permit"), "{err}");
    let mut other = semaphore_run(&masters, &["pool", "--limit", "3"], "0");
    let (code, _, err) = finish(other.spawn().unwrap(), Duration::from_secs(20));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("limit"), "{err}");

    let mut slots = Vec::new();
    for child in [first, second] {
        let (code, out, err) = finish(child, Duration::from_secs(20));
        assert_eq!(code, 0, "{err}");
        let fields: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(fields.len(), 4, "{out}");
        assert_eq!((fields[1], fields[3]), ("2", "pool"), "{out}");
        assert!(fields[2].parse::<u64>().unwrap() > 0);
        slots.push(fields[0].parse::<u32>().unwrap());
    }
    slots.sort_unstable();
    assert_eq!(slots, [0, 1]);
    // Both released: the slots are free again.
    let mut again = semaphore_run(&masters, &["pool", "--limit", "2"], "0");
    let (code, _, err) = finish(again.spawn().unwrap(), Duration::from_secs(20));
    assert_eq!(code, 0, "{err}");
}

/// Through a sidecar the command gets its slot the same way, and a full semaphore exits 3.
#[tokio::test]
async fn through_a_sidecar_the_command_gets_its_slot() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let args = ["pool", "--limit", "1", "--sidecar", sidecar.base.as_str()];
    let holder = semaphore_run("", &args, "2").spawn().unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let refused = semaphore_run("", &args, "0").spawn().unwrap();
    let (code, out, err) =
        tokio::task::spawn_blocking(move || finish(refused, Duration::from_secs(20)))
            .await
            .unwrap();
    assert_eq!(code, 3, "{err}");
    assert!(out.is_empty(), "{out}");
    let (code, out, err) =
        tokio::task::spawn_blocking(move || finish(holder, Duration::from_secs(20)))
            .await
            .unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("0 1 "), "{out}");
}

/// With `--fair`, commands on the masters and through a sidecar run in the order they queued
/// in the semaphore's queue: the first queued holds the permit first (a lower token).
#[tokio::test]
async fn fair_commands_run_in_the_order_they_queued() {
    let fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let engine = fleet.engine().await;
    let ttl = Duration::from_secs(5);
    let holder = engine.acquire_permit("pool", "h", ttl, 1).await.unwrap();
    let holder = holder.lease().unwrap().clone();
    let fair = ["pool", "--limit", "1", "--wait-ms", "20000", "--fair"];
    let first = semaphore_run(&masters, &fair, "0.3").spawn().unwrap();
    queued(&fleet, 1).await;
    let through_sidecar = [&fair[..], &["--sidecar", sidecar.base.as_str()]].concat();
    let second = semaphore_run("", &through_sidecar, "0").spawn().unwrap();
    queued(&fleet, 2).await;
    engine.release(&holder.resource, holder.id).await.unwrap();
    let limit = Duration::from_secs(30);
    let outputs =
        tokio::task::spawn_blocking(move || [finish(first, limit), finish(second, limit)])
            .await
            .unwrap();
    let mut tokens = Vec::new();
    for (code, out, err) in outputs {
        assert_eq!(code, 0, "{err}");
        tokens.push(
            out.split_whitespace()
                .nth(2)
                .unwrap()
                .parse::<u64>()
                .unwrap(),
        );
    }
    assert!(
        tokens[0] < tokens[1],
        "run out of the queue's order: {tokens:?}"
    );
}

/// Waits (at most 10 s, yielding to the in-process sidecar) until `n` fair waiters are queued
/// on the semaphore `pool` on master 0.
async fn queued(fleet: &TestFleet, n: i64) {
    let start = Instant::now();
    while fleet
        .command(0, &["ZCARD", "redlease:queue:pool\u{1f}s"])
        .int()
        < n
    {
        assert!(start.elapsed() < Duration::from_secs(10), "never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
