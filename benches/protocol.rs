//! What each master costs per acquire+release cycle under candidate lock protocols, without
//! the engine around them: the raw-quorum baseline against redlease's protocol and the
//! alternatives it was chosen from, on 5 local masters over redlease's own lock connections
//! (`fleet::wire`, the transport the engine uses).
//!
//! Each protocol is `ACQUIRE/RELEASE`; every cycle sends the acquire to all 5 masters, waits
//! for 3 grants, then sends the release to all 5 and waits for every answer.
//!
//! | acquire | per master |
//! |---|---|
//! | `set` | `SET lock v NX PX ttl` (the baseline: no fencing) |
//! | `lua3` | the script redlease used before its shadow moved into the lock key: EXISTS lock shadow, SET, INCR fence |
//! | `lua2` | a script with SET NX PX, then INCR fence or PTTL |
//! | `two` | `SET lock v NX PX ttl` and `INCR fence` written together as two plain commands (redlease) |
//!
//! | release | per master |
//! |---|---|
//! | `cad` | compare-and-delete script (the baseline) |
//! | `rel4` | lock and shadow compared and deleted, PUBLISH (redlease's release before the move) |
//! | `rel3` | `lua/release.lua`: lock compared and deleted, PUBLISH (redlease) |
//! | `rel2` | `lua/release.lua` without its PUBLISH (what the announcement costs) |
//!
//! `cargo bench --bench protocol` prints the sequential p50 (protocols taking turns in blocks
//! of 250 cycles) and then 16-client throughput (`PARALLEL_SECS`, default 3 s per protocol, the
//! protocols taking turns in half-second windows); `PROTOCOLS=set/cad,two/rel3` picks protocols.

#[path = "support/common.rs"]
#[allow(dead_code)]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{throughput_in_turns, ParallelCycle, COMPARE_AND_DELETE, PARALLEL_CLIENTS};
use fred::types::scripts::Script;
use futures_util::stream::{FuturesUnordered, StreamExt};
use redlease::fleet::wire::{self, Wire};
use redlease::scripts::SCRIPTS;
use redlease::{Fleet, FleetOptions, LeaseId};
use redlease_testkit::RedisServer;
use tokio::time::Instant;

/// The allocator the `redlease` binary uses (src/main.rs), for every protocol alike.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TTL_MS: &[u8] = b"10000";
const DEFAULT_PROTOCOLS: &str = "set/cad,two/cad,two/rel2,two/rel3,lua2/rel3,lua3/rel4";

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
/// `lua/release.lua` without the PUBLISH of the release.
const RELEASE_UNANNOUNCED: &str = r#"
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 32) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0"#;

/// The fleet (its nodes' lock connections carry every command) and the scripts of every
/// candidate.
struct Bench {
    fleet: Arc<Fleet>,
    cad: Script,
    acquire_with_shadow_key: Script,
    release_with_shadow_key: Script,
    acquire_two_calls: Script,
    release_unannounced: Script,
}

#[tokio::main]
async fn main() {
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let fleet = Fleet::connect(&urls, &FleetOptions::default())
        .await
        .unwrap();
    let bench = Arc::new(Bench {
        fleet,
        cad: Script::from_lua(COMPARE_AND_DELETE),
        acquire_with_shadow_key: Script::from_lua(ACQUIRE_WITH_SHADOW_KEY),
        release_with_shadow_key: Script::from_lua(RELEASE_WITH_SHADOW_KEY),
        acquire_two_calls: Script::from_lua(ACQUIRE_TWO_CALLS),
        release_unannounced: Script::from_lua(RELEASE_UNANNOUNCED),
    });
    for node in bench.fleet.nodes() {
        for script in [
            &bench.cad,
            &bench.acquire_with_shadow_key,
            &bench.release_with_shadow_key,
            &bench.acquire_two_calls,
            &bench.release_unannounced,
            &SCRIPTS.release,
        ] {
            script.load(node.client()).await.unwrap();
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
    let value = format!("{id}|bench");
    let mut grants: FuturesUnordered<_> = bench
        .fleet
        .nodes()
        .iter()
        .map(|node| acquire_on(bench, node.wire(), acquire, key, &id, &value))
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
        .fleet
        .nodes()
        .iter()
        .map(|node| release_on(bench, node.wire(), release, key, &id, &value));
    futures_util::future::join_all(releases).await;
}

/// Whether `acquire` granted `key` on the master behind `wire`.
async fn acquire_on(
    bench: &Bench,
    wire: &Wire,
    acquire: &str,
    key: &str,
    id: &str,
    value: &str,
) -> bool {
    let (key, id, value) = (key.as_bytes(), id.as_bytes(), value.as_bytes());
    let set = [b"SET", key, value, b"NX", b"PX", TTL_MS];
    let reply = match acquire {
        "set" => wire.command(&set).await,
        "two" => {
            let mut two = redlease::resp::Commands::with_capacity(128);
            two.push(&set).push(&[b"INCR", b"fence"]);
            let replies = wire.send(&two).await;
            replies.map(|mut replies| replies.swap_remove(0))
        }
        "lua3" => {
            let shadow = [key, b":shadow"].concat();
            let args = [key, &shadow, b"fence", id, b"bench", TTL_MS];
            evalsha(wire, &bench.acquire_with_shadow_key, 3, &args).await
        }
        "lua2" => {
            let args = [key, b"fence", id, b"bench", TTL_MS];
            evalsha(wire, &bench.acquire_two_calls, 2, &args).await
        }
        other => panic!("unknown acquire {other}"),
    };
    match reply.expect("the master answers").expect("no error reply") {
        fred::types::Value::Null => false,
        fred::types::Value::Integer(n) => n > 0,
        _ok => true,
    }
}

async fn release_on(bench: &Bench, wire: &Wire, release: &str, key: &str, id: &str, value: &str) {
    let channel = format!("{key}:released");
    let (key, id, channel) = (key.as_bytes(), id.as_bytes(), channel.as_bytes());
    let reply = match release {
        "cad" => evalsha(wire, &bench.cad, 1, &[key, value.as_bytes()]).await,
        "rel4" => {
            let shadow = [key, b":shadow"].concat();
            let args = [key, &shadow, id, channel];
            evalsha(wire, &bench.release_with_shadow_key, 2, &args).await
        }
        "rel3" => evalsha(wire, &SCRIPTS.release, 1, &[key, id, channel]).await,
        "rel2" => evalsha(wire, &bench.release_unannounced, 1, &[key, id]).await,
        other => panic!("unknown release {other}"),
    };
    reply.expect("the master answers").expect("no error reply");
}

/// `EVALSHA sha numkeys parts…` (the first `keys` parts are its keys).
async fn evalsha(
    wire: &Wire,
    script: &Script,
    keys: usize,
    parts: &[&[u8]],
) -> Result<wire::Reply, wire::WireError> {
    let numkeys = keys.to_string();
    let mut command: Vec<&[u8]> = vec![b"EVALSHA", script.sha1().as_bytes(), numkeys.as_bytes()];
    command.extend_from_slice(parts);
    wire.command(&command).await
}
