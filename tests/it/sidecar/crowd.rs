//! Holders can always act: with `http.max_waiters` blocking acquisitions waiting on one
//! sidecar, more waiters than connections left arriving meanwhile, the holders' renewals,
//! keepalives and releases still find connections and succeed. The waiters over the cap hear
//! 429 `too_many_waiters` with `Retry-After`, and their connections are closed.

use futures_util::future::join_all;
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use redlease_testkit::http::{request, Answer, Closed, Conn};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::*;

const MAX_CONNECTIONS: usize = 4096;
/// Blocking acquisitions that wait at once: every one of them blocks.
const WAITERS: usize = 2000;
/// Waiters that come once the cap is reached: with the blocked ones, more than
/// `MAX_CONNECTIONS`, so that without the cap they would take every connection.
const EXTRA_WAITERS: usize = 2200;
/// Extra waiters in flight at once (their refusals close their connections).
const EXTRA_BATCH: usize = 400;
const HOLDERS: usize = 50;

fn wait_for_blocked(n: usize) -> Vec<u8> {
    let body = json!({"owner": format!("waiter-{n}"), "wait_ms": 55_000}).to_string();
    request("POST", "/v1/locks/blocked/acquire", &body)
}

/// One request on a connection of its own.
async fn fresh(sidecar: &TestSidecar, bytes: &[u8]) -> Answer {
    let stream = TcpStream::connect(sidecar.addr).await.unwrap();
    Conn::new(stream).exchange(bytes).await
}

/// The soft open-file limit raised to the hard one: both ends of every connection live in this
/// process.
fn enough_open_files() {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    }
    let needed = 2 * (WAITERS + EXTRA_BATCH + HOLDERS) as u64 + 2048;
    assert!(
        hard >= needed,
        "open files limited to {hard}; {needed} needed"
    );
}

/// Connections of waiters that were not refused: kept open, as their clients wait.
type Unrefused = std::sync::Mutex<Vec<Conn<TcpStream>>>;

/// A waiter over the cap: 429 `too_many_waiters`, `acquired: false`, `Retry-After`, and its
/// connection closed by the sidecar. One that is not refused keeps waiting in `unrefused`.
async fn refused_waiter(
    sidecar: &TestSidecar,
    n: usize,
    unrefused: &Unrefused,
) -> Result<(), String> {
    let stream = TcpStream::connect(sidecar.addr).await.unwrap();
    let mut conn = Conn::new(stream);
    conn.send(&wait_for_blocked(n)).await;
    let answer = tokio::time::timeout(Duration::from_secs(5), conn.answer()).await;
    let Ok(answer) = answer else {
        unrefused.lock().unwrap().push(conn);
        return Err("not refused: it waits".into());
    };
    let body = answer.json();
    let seen = (
        answer.problem(),
        answer.header("retry-after"),
        answer.header("connection"),
        &body["acquired"],
    );
    let wanted = (
        (429, "too_many_waiters".into()),
        Some("1"),
        Some("close"),
        &json!(false),
    );
    if seen != wanted {
        return Err(format!("{seen:?}: {}", answer.body_text()));
    }
    match conn
        .closed_within(Duration::from_secs(3))
        .await
        .map(Closed::silent)
    {
        Some(_) => Ok(()),
        None => Err("the refused waiter's connection stayed open".into()),
    }
}

/// Holder `n` takes its own resource (no wait); its lease id.
async fn take(sidecar: &TestSidecar, n: usize) -> String {
    let body = json!({"owner": format!("holder-{n}"), "ttl_ms": 5000}).to_string();
    let path = format!("/v1/locks/holder-{n}/acquire");
    let granted = fresh(sidecar, &request("POST", &path, &body)).await;
    assert_eq!(granted.status, 200, "{}", granted.body_text());
    granted.json()["lease_id"].as_str().unwrap().to_string()
}

/// A holder acts on its lease: renews, keeps alive, renews, releases; every request on a new
/// connection, every answer 200. How long it took.
async fn act(sidecar: &TestSidecar, id: &str) -> Result<Duration, String> {
    let start = Instant::now();
    let lease = format!("/v1/leases/{id}");
    for (method, path, body) in [
        ("POST", format!("{lease}/renew"), r#"{"ttl_ms":4000}"#),
        ("POST", format!("{lease}/keepalive"), ""),
        ("POST", format!("{lease}/renew"), ""),
        ("DELETE", lease.clone(), ""),
    ] {
        let answer = fresh(sidecar, &request(method, &path, body)).await;
        if answer.status != 200 {
            return Err(format!(
                "{method} {path}: {} {}",
                answer.status,
                answer.body_text()
            ));
        }
    }
    Ok(start.elapsed())
}

/// The holders of `ids` act at once: the longest took (every one must succeed).
async fn holders_act(sidecar: &TestSidecar, ids: &[String]) -> Duration {
    let all = join_all(ids.iter().map(|id| act(sidecar, id))).await;
    let (took, failed): (Vec<_>, Vec<_>) = all.into_iter().partition(Result::is_ok);
    let failed: Vec<String> = failed.into_iter().filter_map(Result::err).collect();
    assert!(
        failed.is_empty(),
        "{} holders failed: {failed:?}",
        failed.len()
    );
    took.into_iter()
        .filter_map(Result::ok)
        .max()
        .unwrap_or_default()
}

/// 2,000 blocked waiters; 100 holders take leases; 2,200 more waiters arrive (4,200 > 4,096
/// connections) while 50 holders renew, keep alive and release, and the other 50 do once the
/// waiters all came: every holder's request succeeds, every waiter over the cap is refused with
/// `too_many_waiters` and closed, and the 2,000 still wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_act_while_thousands_wait() {
    enough_open_files();
    let fleet = TestFleet::start(3);
    let (conns, waiters) = (MAX_CONNECTIONS.to_string(), WAITERS.to_string());
    let env = [
        ("REDLEASE__HTTP__MAX_CONNECTIONS", conns.as_str()),
        ("REDLEASE__HTTP__MAX_WAITERS", waiters.as_str()),
    ];
    let sidecar = TestSidecar::start(&fleet, &env).await;
    let start = Instant::now();
    let blocker = json!({"owner": "blocker", "ttl_ms": 10000, "idle_timeout_ms": 120000});
    held(&sidecar, "blocked", blocker).await;
    let mut blocked = Vec::new();
    for n in 0..WAITERS {
        let mut stream = TcpStream::connect(sidecar.addr).await.unwrap();
        stream.write_all(&wait_for_blocked(n)).await.unwrap();
        blocked.push(stream);
    }
    assert_eventually!(
        waiting(&sidecar).await == WAITERS as u64,
        30,
        "the {WAITERS} waiters never all waited"
    );
    let filled = start.elapsed();
    let ids = join_all((0..2 * HOLDERS).map(|n| take(&sidecar, n))).await;
    let unrefused = Unrefused::default();
    let extras = async {
        let mut refusals = Vec::new();
        for batch in (0..EXTRA_WAITERS).collect::<Vec<_>>().chunks(EXTRA_BATCH) {
            let answers = batch
                .iter()
                .map(|n| refused_waiter(&sidecar, WAITERS + 1 + n, &unrefused));
            refusals.extend(join_all(answers).await);
        }
        refusals
    };
    let (refusals, during) = tokio::join!(extras, holders_act(&sidecar, &ids[..HOLDERS]));
    let after = holders_act(&sidecar, &ids[HOLDERS..]).await;
    let wrong: Vec<_> = refusals.into_iter().filter_map(Result::err).collect();
    assert!(
        wrong.is_empty(),
        "{} extra waiters: {:?}",
        wrong.len(),
        &wrong[..3.min(wrong.len())]
    );
    assert_eq!(
        waiting(&sidecar).await,
        WAITERS as u64,
        "waiters left early"
    );
    let mut byte = [0u8; 1];
    let answered = blocked.iter().filter(|s| s.try_read(&mut byte).is_ok());
    assert_eq!(answered.count(), 0, "blocked waiters were answered");
    eprintln!(
        "{WAITERS} waiters blocked in {filled:?}; {EXTRA_WAITERS} refused by {:?}; the slowest \
         of {HOLDERS} holders took {during:?} among the extra waiters, {after:?} after them",
        start.elapsed()
    );
    drop((blocked, unrefused));
}
