//! What each master costs per acquire+release cycle under candidate lock protocols, without
//! the engine around them: the raw-quorum baseline against redlease's protocol and the
//! alternatives it was chosen from, on 5 local masters through the same fred clients.
//!
//! Each protocol is `ACQUIRE/RELEASE`; every cycle sends the acquire to all 5 masters, waits
//! for 3 grants, then sends the release to all 5 and waits for every answer.
//!
//! | acquire | per master |
//! |---|---|
//! | `set` | `SET lock v NX PX ttl` (the baseline: no fencing) |
//! | `lua3` | the script redlease used before its shadow moved into the lock key: EXISTS lock shadow, SET, INCR fence |
//! | `lua2` | a script with SET NX PX, then INCR fence or PTTL |
//! | `two` | `SET lock v NX PX ttl` and `INCR fence` sent together as two plain commands (redlease) |
//! | `pipe2` | the same two commands through fred's `Pipeline` |
//!
//! | release | per master |
//! |---|---|
//! | `cad` | compare-and-delete script (the baseline) |
//! | `rel4` | lock and shadow compared and deleted, PUBLISH (redlease's release before the move) |
//! | `rel3` | `lua/release.lua`: lock compared and deleted, PUBLISH (redlease) |
//!
//! `cargo bench --bench protocol` prints the sequential p50 (protocols taking turns in blocks
//! of 250 cycles) and then 16-client throughput (`PARALLEL_SECS`, default 3 s per protocol, the
//! protocols taking turns in half-second windows); `PROTOCOLS=set/cad,two/rel3` picks protocols.

#[path = "support/common.rs"]
#[allow(dead_code)]
mod common;
#[path = "../tests/it/support/redis_server.rs"]
#[allow(dead_code)]
mod redis_server;

use std::sync::Arc;
use std::time::Duration;

use common::{throughput_in_turns, ParallelCycle, COMPARE_AND_DELETE, PARALLEL_CLIENTS};
use fred::clients::Client;
use fred::prelude::{Expiration, KeysInterface, SetOptions, Value};
use fred::types::scripts::Script;
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use redis_server::RedisServer;
use redlease::scripts::SCRIPTS;
use redlease::{Fleet, FleetOptions, LeaseId};
use tokio::time::Instant;

/// The allocator the `redlease` binary uses (src/main.rs), for every protocol alike.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TTL_MS: i64 = 10_000;
const DEFAULT_PROTOCOLS: &str = "set/cad,lua3/rel4,lua2/rel3,two/rel3,pipe2/rel3";

/// What `lua/acquire.lua` was while the shadow had its own key.
const ACQUIRE_WITH_SHADOW_KEY: &str = r#"
if redis.call('EXISTS', KEYS[1], KEYS[2]) == 0 then
  redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[2], 'PX', ARGV[3])
  return redis.call('INCR', KEYS[3])
end
local remaining = redis.call('PTTL', KEYS[1])
if remaining == -2 then remaining = redis.call('PTTL', KEYS[2]) end
if remaining < 0 then remaining = 0 end
return -remaining"#;
/// What `lua/release.lua` was while the shadow had its own key.
const RELEASE_WITH_SHADOW_KEY: &str = r#"
local deleted = 0
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 32) == ARGV[1] then
  deleted = redis.call('DEL', KEYS[1])
end
current = redis.call('GET', KEYS[2])
if current and string.sub(current, 1, 32) == ARGV[1] then
  deleted = deleted + redis.call('DEL', KEYS[2])
end
if deleted > 0 then
  redis.call('PUBLISH', ARGV[2], ARGV[1])
end
return deleted"#;
const ACQUIRE_TWO_CALLS: &str = r#"
local ok = redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[2], 'NX', 'PX', ARGV[3])
if ok then return redis.call('INCR', KEYS[2]) end
return -redis.call('PTTL', KEYS[1])"#;

/// The masters' clients and the scripts of every candidate.
struct Bench {
    clients: Vec<Client>,
    cad: Script,
    acquire_with_shadow_key: Script,
    release_with_shadow_key: Script,
    acquire_two_calls: Script,
}

#[tokio::main]
async fn main() {
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let fleet = Fleet::connect(&urls, &FleetOptions::default())
        .await
        .unwrap();
    let bench = Arc::new(Bench {
        clients: fleet.nodes().iter().map(|n| n.client().clone()).collect(),
        cad: Script::from_lua(COMPARE_AND_DELETE),
        acquire_with_shadow_key: Script::from_lua(ACQUIRE_WITH_SHADOW_KEY),
        release_with_shadow_key: Script::from_lua(RELEASE_WITH_SHADOW_KEY),
        acquire_two_calls: Script::from_lua(ACQUIRE_TWO_CALLS),
    });
    for client in &bench.clients {
        for script in [
            &bench.cad,
            &bench.acquire_with_shadow_key,
            &bench.release_with_shadow_key,
            &bench.acquire_two_calls,
            &SCRIPTS.release,
        ] {
            script.load(client).await.unwrap();
        }
    }
    let protocols = std::env::var("PROTOCOLS").unwrap_or_else(|_| DEFAULT_PROTOCOLS.into());
    let protocols: Vec<String> = protocols.split(',').map(str::to_string).collect();
    sequential(&bench, &protocols).await;
    let paths: Vec<Arc<ParallelCycle>> = protocols
        .iter()
        .map(|protocol| {
            let (shared, name) = (Arc::clone(&bench), protocol.clone());
            let path: Arc<ParallelCycle> = Arc::new(move |i| {
                let (bench, protocol) = (Arc::clone(&shared), name.clone());
                Box::pin(async move { cycle(&bench, &protocol, &format!("par-{i}")).await })
            });
            path
        })
        .collect();
    let rates = throughput_in_turns(&paths).await;
    for (protocol, rate) in protocols.iter().zip(rates) {
        println!("{protocol:<12} {PARALLEL_CLIENTS} clients: {rate:.0} cycles/s");
    }
}

/// Sequential p50 of every protocol, taking turns in blocks (the first two rounds warm up).
async fn sequential(bench: &Bench, protocols: &[String]) {
    let mut samples: Vec<Vec<Duration>> = protocols.iter().map(|_| Vec::new()).collect();
    for round in 0..12 {
        for (i, protocol) in protocols.iter().enumerate() {
            for _ in 0..250 {
                let start = Instant::now();
                cycle(bench, protocol, &format!("seq-{i}")).await;
                if round >= 2 {
                    samples[i].push(start.elapsed());
                }
            }
        }
    }
    for (protocol, mut samples) in protocols.iter().zip(samples) {
        samples.sort_unstable();
        let p50 = samples[samples.len() / 2].as_secs_f64() * 1e6;
        println!("{protocol:<12} sequential p50 {p50:.0} us");
    }
}

/// One acquire (to all, until 3 grants) and one release (to all, every answer) of `key`.
async fn cycle(bench: &Bench, protocol: &str, key: &str) {
    let (acquire, release) = protocol.split_once('/').expect("ACQUIRE/RELEASE");
    let id = LeaseId::random().to_string();
    let mut grants: FuturesUnordered<_> = bench
        .clients
        .iter()
        .map(|client| acquire_on(bench, client, acquire, key, &id))
        .collect();
    let mut granted = 0;
    while let Some(grant) = grants.next().await {
        granted += usize::from(grant);
        if granted == 3 {
            break;
        }
    }
    assert_eq!(
        granted, 3,
        "{protocol}: an uncontended acquire lost its quorum"
    );
    let releases = bench
        .clients
        .iter()
        .map(|client| release_on(bench, client, release, key, &id));
    futures_util::future::join_all(releases).await;
}

fn acquire_on<'a>(
    bench: &'a Bench,
    client: &'a Client,
    acquire: &str,
    key: &'a str,
    id: &str,
) -> BoxFuture<'a, bool> {
    let value = format!("{id}|bench");
    let set = move |value: String| {
        let expiry = Some(Expiration::PX(TTL_MS));
        client.set::<Option<String>, _, _>(key, value, expiry, Some(SetOptions::NX), false)
    };
    match acquire {
        "set" => Box::pin(async move { matches!(set(value).await, Ok(Some(_))) }),
        "lua3" => {
            let keys = vec![key.to_string(), format!("{key}:shadow"), "fence".into()];
            let args = vec![id.to_string(), "bench".into(), TTL_MS.to_string()];
            let call = bench
                .acquire_with_shadow_key
                .evalsha::<i64, _, _, _>(client, keys, args);
            Box::pin(async move { matches!(call.await, Ok(n) if n > 0) })
        }
        "lua2" => {
            let keys = vec![key.to_string(), "fence".into()];
            let args = vec![id.to_string(), "bench".into(), TTL_MS.to_string()];
            let call = bench
                .acquire_two_calls
                .evalsha::<i64, _, _, _>(client, keys, args);
            Box::pin(async move { matches!(call.await, Ok(n) if n > 0) })
        }
        "two" => Box::pin(async move {
            let (set, _) = futures_util::join!(set(value), client.incr::<i64, _>("fence"));
            matches!(set, Ok(Some(_)))
        }),
        "pipe2" => Box::pin(async move {
            let pipeline = client.pipeline();
            let expiry = Some(Expiration::PX(TTL_MS));
            let nx = Some(SetOptions::NX);
            let _: () = pipeline.set(key, value, expiry, nx, false).await.unwrap();
            let _: () = pipeline.incr("fence").await.unwrap();
            matches!(pipeline.all::<Vec<Value>>().await, Ok(v) if !v[0].is_null())
        }),
        other => panic!("unknown acquire {other}"),
    }
}

fn release_on<'a>(
    bench: &'a Bench,
    client: &'a Client,
    release: &str,
    key: &'a str,
    id: &str,
) -> BoxFuture<'a, ()> {
    let channel = format!("{key}:released");
    let id = id.to_string();
    let (script, keys) = match release {
        "cad" => {
            let call = bench
                .cad
                .evalsha::<i64, _, _, _>(client, key, format!("{id}|bench"));
            return Box::pin(async move { call.await.map(drop).unwrap() });
        }
        "rel4" => (
            &bench.release_with_shadow_key,
            vec![key.to_string(), format!("{key}:shadow")],
        ),
        "rel3" => (&SCRIPTS.release, vec![key.to_string()]),
        other => panic!("unknown release {other}"),
    };
    let call = script.evalsha::<i64, _, _, _>(client, keys, vec![id, channel]);
    Box::pin(async move { call.await.map(drop).unwrap() })
}
