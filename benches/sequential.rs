//! Sequential acquire+release latency against 5 local masters: the engine (library path), the
//! sidecar over HTTP (keep-alive, `auto_renew:false`), and in the same run a raw-quorum
//! baseline (SET NX PX to all 5 in parallel, wait for the 3rd reply, then a compare-and-delete
//! script to all 5). Prints p50/p90/p99/p99.9 per path and the p50 ratios to the baseline.
//!
//! The baseline is measured twice: through fred (the budget's reference: the raw quorum as a
//! Rust program would write it with a standard client) and through the engine's own lock
//! connections (`fleet::wire`), which shows what the engine adds to the protocol alone on the
//! same transport.
//!
//! The sequential paths take turns in blocks of 250 cycles and the throughput paths in
//! half-second windows, so the machine's slow spells weigh on each alike.
//!
//! `cargo bench --bench sequential` (CYCLES=N to change the number of measured cycles;
//! ONLY=engine|sidecar|sidecar-lean|baseline|baseline-wire|parallel-engine|parallel-baseline|parallel-baseline-wire
//! to measure one path alone, e.g. under `perf record`).

#[path = "support/common.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    throughput, throughput_in_turns, ParallelCycle, COMPARE_AND_DELETE, PARALLEL_CLIENTS,
};
use fred::prelude::{Expiration, KeysInterface, SetOptions};
use fred::types::scripts::Script;
use futures_util::stream::{FuturesUnordered, StreamExt};
use redlease::{Fleet, FleetOptions, LeaseId, Redlock};
use redlease_sidecar::process;
use redlease_testkit::http::{request, Conn};
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::RedisServer;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The allocator the `redlease` binary uses (src/main.rs), for both the engine and the
/// baseline: with glibc's malloc both lose to arena-lock wake-ups between the two workers.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TTL: Duration = Duration::from_secs(10);
const WARMUP: usize = 500;

#[tokio::main]
async fn main() {
    let cycles: usize = std::env::var("CYCLES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(5_000);
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let fleet = Fleet::connect(&urls, &FleetOptions::default())
        .await
        .unwrap();
    let engine = Redlock::new(fleet.clone(), Default::default());
    let clients: Vec<_> = fleet.nodes().iter().map(|n| n.client().clone()).collect();
    let script = Script::from_lua(COMPARE_AND_DELETE);
    for client in &clients {
        script.load(client).await.unwrap();
    }
    let sha = script.sha1().to_string();

    let sidecar = TestSidecar::start_on(urls.clone(), &[]).await;
    let base = sidecar.base.clone();
    let http = reqwest::Client::new();
    let raw = TcpStream::connect(sidecar.addr).await.unwrap();
    raw.set_nodelay(true).unwrap();
    let raw = tokio::sync::Mutex::new(Conn::new(raw));

    // ONLY=engine|sidecar|sidecar-lean|baseline measures just that path (for profiling it alone).
    let only = std::env::var("ONLY").unwrap_or_default();
    if let Some(path) = path_named(
        &only,
        &engine,
        (&http, &raw, &base),
        (&clients, &script, &sha),
    ) {
        report(&only, measure_alone(cycles, path).await);
        return;
    }
    let engine = Arc::new(engine);
    if only == "parallel-engine" {
        let engine = Arc::clone(&engine);
        let rate = throughput(move |i| {
            let engine = Arc::clone(&engine);
            async move { engine_cycle(&engine, &format!("bench-{i}")).await }
        });
        println!("parallel engine: {:.0} cycles/s", rate.await);
        return;
    }
    if only == "parallel-baseline" {
        let shared = Arc::new((clients.clone(), script.clone()));
        let rate = throughput(move |i| {
            let shared = Arc::clone(&shared);
            async move { baseline_cycle(&shared.0, &shared.1, &format!("baseline-{i}")).await }
        });
        println!("parallel baseline: {:.0} cycles/s", rate.await);
        return;
    }
    if only == "parallel-baseline-wire" {
        let shared = Arc::new((fleet.clone(), sha.clone()));
        let rate = throughput(move |i| {
            let shared = Arc::clone(&shared);
            async move { wire_baseline_cycle(&shared.0, &shared.1, &format!("wire-{i}")).await }
        });
        println!(
            "parallel baseline over the wire: {:.0} cycles/s",
            rate.await
        );
        return;
    }
    // The three paths take turns in blocks, so a slow spell of this shared machine weighs on
    // all of them alike rather than on whichever ran during it.
    let mut paths: Vec<Cycle<'_>> = vec![
        Box::new(|| Box::pin(engine_cycle(&engine, "bench"))),
        Box::new(|| Box::pin(sidecar_cycle(&http, &base))),
        Box::new(|| Box::pin(sidecar_raw_cycle(&raw))),
        Box::new(|| Box::pin(baseline_cycle(&clients, &script, "baseline"))),
        Box::new(|| Box::pin(wire_baseline_cycle(&fleet, &sha, "baseline-wire"))),
    ];
    let mut measured = measure_in_turns(cycles, &mut paths).await.into_iter();
    let mut next = || measured.next().expect("one result per path");
    let engine_p50 = report("engine (acquire+release)", next());
    let sidecar_p50 = report("sidecar over HTTP (reqwest)", next());
    let sidecar_raw_p50 = report("sidecar over HTTP (lean client)", next());
    let baseline_p50 = report("raw quorum baseline", next());
    let wire_baseline_p50 = report("raw quorum over the wire", next());
    drop(paths);
    println!(
        "p50 ratio engine/baseline: {:.2}",
        engine_p50 / baseline_p50
    );
    println!(
        "p50 ratio sidecar (reqwest)/baseline: {:.2}",
        sidecar_p50 / baseline_p50
    );
    println!(
        "p50 ratio sidecar (lean client)/baseline: {:.2}",
        sidecar_raw_p50 / baseline_p50
    );
    println!(
        "p50 ratio engine/raw quorum over the wire: {:.2}",
        engine_p50 / wire_baseline_p50
    );

    // 16 clients at once, each on its own resource: throughput, the two taking turns.
    let shared_engine = Arc::clone(&engine);
    let engine_path: Arc<ParallelCycle> = Arc::new(move |i| {
        let engine = Arc::clone(&shared_engine);
        Box::pin(async move { engine_cycle(&engine, &format!("bench-{i}")).await })
    });
    let shared = Arc::new((clients, script));
    let baseline_path: Arc<ParallelCycle> = Arc::new(move |i| {
        let shared = Arc::clone(&shared);
        Box::pin(
            async move { baseline_cycle(&shared.0, &shared.1, &format!("baseline-{i}")).await },
        )
    });
    let shared = Arc::new((fleet.clone(), sha.clone()));
    let wire_path: Arc<ParallelCycle> = Arc::new(move |i| {
        let shared = Arc::clone(&shared);
        Box::pin(
            async move { wire_baseline_cycle(&shared.0, &shared.1, &format!("wire-{i}")).await },
        )
    });
    let rates = throughput_in_turns(&[engine_path, baseline_path, wire_path]).await;
    let (engine_rate, baseline_rate, wire_rate) = (rates[0], rates[1], rates[2]);
    println!("parallel engine ({PARALLEL_CLIENTS} clients): {engine_rate:.0} cycles/s");
    println!(
        "parallel raw quorum baseline ({PARALLEL_CLIENTS} clients): {baseline_rate:.0} cycles/s"
    );
    println!(
        "parallel raw quorum over the wire ({PARALLEL_CLIENTS} clients): {wire_rate:.0} cycles/s"
    );
    println!(
        "throughput ratio engine/baseline: {:.2}",
        engine_rate / baseline_rate
    );
    println!(
        "throughput ratio engine/raw quorum over the wire: {:.2}",
        engine_rate / wire_rate
    );
}

/// A sidecar on the same masters, served in-process on 127.0.0.1:0; returns its base URL.
async fn sidecar_cycle(http: &reqwest::Client, base: &str) {
    let body = serde_json::json!({"owner": "bench", "ttl_ms": 10000, "auto_renew": false});
    let url = format!("{base}/v1/locks/bench-http/acquire");
    let response = http.post(url).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200, "uncontended acquire");
    let lease: serde_json::Value = response.json().await.unwrap();
    let id = lease["lease_id"].as_str().unwrap();
    let released = http
        .delete(format!("{base}/v1/leases/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(released.status(), 200);
}

/// The same cycle through the testkit's raw HTTP client ([`Conn`]): one keep-alive
/// connection read and written in this task, with no timer around the reads, as a lean app
/// client would.
async fn sidecar_raw_cycle(raw: &tokio::sync::Mutex<Conn<TcpStream>>) {
    let mut raw = raw.lock().await;
    let body = r#"{"owner":"bench","ttl_ms":10000,"auto_renew":false}"#;
    raw.send(&request("POST", "/v1/locks/bench-raw/acquire", body))
        .await;
    let acquired = raw.read_answer().await.unwrap();
    assert_eq!(acquired.status, 200, "uncontended acquire");
    let id = acquired.json()["lease_id"].as_str().unwrap().to_string();
    raw.send(&request("DELETE", &format!("/v1/leases/{id}"), ""))
        .await;
    let released = raw.read_answer().await.unwrap();
    assert_eq!(released.status, 200);
}

async fn engine_cycle(engine: &Redlock, resource: &str) {
    let outcome = engine.acquire(resource, "bench", TTL).await.unwrap();
    let lease = outcome.lease().expect("uncontended acquire");
    engine.release(resource, lease.id).await.unwrap();
}

async fn baseline_cycle(clients: &[fred::clients::Client], script: &Script, key: &str) {
    let value = LeaseId::random().to_string();
    let mut sets: FuturesUnordered<_> = clients
        .iter()
        .map(|c| {
            let expiry = Some(Expiration::PX(TTL.as_millis() as i64));
            c.set::<Option<String>, _, _>(key, value.as_str(), expiry, Some(SetOptions::NX), false)
        })
        .collect();
    let mut granted = 0;
    while let Some(reply) = sets.next().await {
        granted += usize::from(matches!(reply, Ok(Some(_))));
        if granted == 3 {
            break;
        }
    }
    assert_eq!(granted, 3, "baseline lost its quorum");
    let releases = clients
        .iter()
        .map(|c| script.evalsha_with_reload::<i64, _, _>(c, key, value.as_str()));
    futures_util::future::join_all(releases).await;
    drop(sets);
}

/// The baseline's protocol sent over the engine's own lock connections (`fleet::wire`): SET NX
/// PX to all 5, the 3rd grant, then the compare-and-delete script to all 5.
async fn wire_baseline_cycle(fleet: &Fleet, sha: &str, key: &str) {
    let value = LeaseId::random().to_string();
    let ttl = TTL.as_millis().to_string();
    let set = [
        b"SET",
        key.as_bytes(),
        value.as_bytes(),
        b"NX",
        b"PX",
        ttl.as_bytes(),
    ];
    let mut sets: FuturesUnordered<_> = fleet
        .nodes()
        .iter()
        .map(|n| n.wire().command(&set))
        .collect();
    let mut granted = 0;
    while let Some(reply) = sets.next().await {
        let written = reply.ok().and_then(Result::ok);
        granted += usize::from(written.is_some_and(|v| !v.is_null()));
        if granted == 3 {
            break;
        }
    }
    assert_eq!(granted, 3, "baseline over the wire lost its quorum");
    let release = [
        b"EVALSHA",
        sha.as_bytes(),
        b"1",
        key.as_bytes(),
        value.as_bytes(),
    ];
    let releases = fleet.nodes().iter().map(|n| n.wire().command(&release));
    futures_util::future::join_all(releases).await;
    drop(sets);
}

/// One acquire+release cycle of a path, boxed so the paths can take turns.
type Cycle<'a> = Box<dyn FnMut() -> futures_util::future::LocalBoxFuture<'a, ()> + 'a>;

/// Blocks of this many cycles per path alternate in `measure_in_turns`.
const TURN: usize = 250;

/// Warms every path up, then measures `cycles` cycles of each, the paths taking turns in
/// blocks of `TURN` cycles; CPU time is charged to the path whose block ran.
async fn measure_in_turns(cycles: usize, paths: &mut [Cycle<'_>]) -> Vec<Measured> {
    for path in paths.iter_mut() {
        for _ in 0..WARMUP {
            path().await;
        }
    }
    let mut samples: Vec<Vec<Duration>> =
        paths.iter().map(|_| Vec::with_capacity(cycles)).collect();
    let mut cpu = vec![Duration::ZERO; paths.len()];
    while samples[0].len() < cycles {
        let block = TURN.min(cycles - samples[0].len());
        for (i, path) in paths.iter_mut().enumerate() {
            let cpu_before = process::cpu_time().unwrap_or_default();
            for _ in 0..block {
                let start = Instant::now();
                path().await;
                samples[i].push(start.elapsed());
            }
            cpu[i] += process::cpu_time()
                .unwrap_or_default()
                .saturating_sub(cpu_before);
        }
    }
    samples
        .into_iter()
        .zip(cpu)
        .map(|(samples, cpu)| Measured {
            cpu_per_cycle: cpu / samples.len().max(1) as u32,
            samples,
        })
        .collect()
}

/// The sequential path ONLY names (engine, sidecar, baseline), to measure it alone.
fn path_named<'a>(
    only: &str,
    engine: &'a Redlock,
    (http, raw, base): (
        &'a reqwest::Client,
        &'a tokio::sync::Mutex<Conn<TcpStream>>,
        &'a str,
    ),
    (clients, script, sha): (&'a [fred::clients::Client], &'a Script, &'a str),
) -> Option<Cycle<'a>> {
    match only {
        "engine" => Some(Box::new(|| Box::pin(engine_cycle(engine, "bench")))),
        "sidecar" => Some(Box::new(|| Box::pin(sidecar_cycle(http, base)))),
        "sidecar-lean" => Some(Box::new(|| Box::pin(sidecar_raw_cycle(raw)))),
        "baseline" => Some(Box::new(|| {
            Box::pin(baseline_cycle(clients, script, "baseline"))
        })),
        "baseline-wire" => Some(Box::new(|| {
            Box::pin(wire_baseline_cycle(engine.fleet(), sha, "baseline-wire"))
        })),
        _ => None,
    }
}

/// `cycles` cycles of one path alone (after its warm-up).
async fn measure_alone(cycles: usize, path: Cycle<'_>) -> Measured {
    let mut measured = measure_in_turns(cycles, &mut [path]).await;
    measured.pop().expect("one result per path")
}

/// One path's latencies and this process's CPU time per cycle (the client's side: engine,
/// fred's connection tasks, and for the sidecar path the in-process sidecar too).
struct Measured {
    samples: Vec<Duration>,
    cpu_per_cycle: Duration,
}

/// Prints the percentiles and the CPU per cycle; returns p50 in microseconds.
fn report(name: &str, measured: Measured) -> f64 {
    let Measured {
        mut samples,
        cpu_per_cycle,
    } = measured;
    samples.sort_unstable();
    let at = |q: f64| {
        let index = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[index].as_secs_f64() * 1e6
    };
    println!(
        "{name:<26} n={:<6} p50={:>7.1}us p90={:>7.1}us p99={:>7.1}us p99.9={:>7.1}us \
         max={:>8.1}us cpu/cycle={:>5.1}us",
        samples.len(),
        at(0.5),
        at(0.9),
        at(0.99),
        at(0.999),
        at(1.0),
        cpu_per_cycle.as_secs_f64() * 1e6
    );
    at(0.5)
}
