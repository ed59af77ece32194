//! The fault-injecting TCP proxy of the test support, against a real master: it forwards,
//! delays, holds, drops, resets and refuses as its faults say, and stops when dropped.

use std::io::ErrorKind;
use std::time::Duration;

use redlease_testkit::assert_eventually;
use redlease_testkit::proxy::{Fault, FaultProxy};
use redlease_testkit::resp;
use redlease_testkit::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
const PONG: &[u8] = b"+PONG\r\n";
/// Bound on every wait that should succeed.
const PATIENCE: Duration = Duration::from_secs(5);

async fn connect(proxy: &FaultProxy) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", proxy.port()))
        .await
        .unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

fn echo(text: &str) -> Vec<u8> {
    format!("*2\r\n$4\r\nECHO\r\n${}\r\n{text}\r\n", text.len()).into_bytes()
}

fn echoed(text: &str) -> Vec<u8> {
    format!("${}\r\n{text}\r\n", text.len()).into_bytes()
}

/// Reads exactly as many bytes as `expected` has, within `PATIENCE`, and compares.
async fn expect_reply(stream: &mut TcpStream, expected: &[u8]) {
    let mut reply = vec![0; expected.len()];
    timeout(PATIENCE, stream.read_exact(&mut reply))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&reply),
        String::from_utf8_lossy(expected)
    );
}

/// A read that ends the connection: an error, or end of stream. Panics on data or a hang.
async fn read_end(stream: &mut TcpStream) -> std::io::Result<()> {
    let mut buf = [0; 64];
    match timeout(PATIENCE, stream.read(&mut buf)).await.unwrap() {
        Ok(0) => Ok(()),
        Ok(n) => panic!("got {:?}", String::from_utf8_lossy(&buf[..n])),
        Err(error) => Err(error),
    }
}

/// Clients connected to the master, the inspecting one included.
fn master_clients(server: &RedisServer) -> usize {
    let list = resp::command(server.port(), &["CLIENT", "LIST"]);
    let list = match list {
        resp::Resp::Bulk(Some(text)) => text,
        other => panic!("CLIENT LIST gave {other:?}"),
    };
    list.lines().count()
}

/// With no fault, a command goes through and its reply comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_through_the_proxy_gets_pong() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}", proxy.port()));
    let mut client = connect(&proxy).await;
    client.write_all(PING).await.unwrap();
    expect_reply(&mut client, PONG).await;
    assert_eq!(proxy.accepted(), 1);
    assert_eq!(proxy.open(), 1);
}

/// A downstream delay holds each reply for the delay after it was read, in order, and the
/// delays of replies read close together overlap instead of adding up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_replies_arrive_late_and_in_order() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let delay = Duration::from_millis(200);
    proxy.set_downstream(Fault::Delay(delay));
    let mut client = connect(&proxy).await;
    let sent = Instant::now();
    client.write_all(&echo("first")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    client.write_all(&echo("second")).await.unwrap();
    expect_reply(&mut client, &echoed("first")).await;
    let first = sent.elapsed();
    expect_reply(&mut client, &echoed("second")).await;
    let second = sent.elapsed();
    assert!(first >= delay, "first reply after {first:?}");
    assert!(second >= delay + Duration::from_millis(50), "{second:?}");
    assert!(
        second < Duration::from_millis(350),
        "the second delay overlapped the first: {second:?}"
    );
}

/// An upstream blackhole holds a command, with the connection open, and delivers it once the
/// fault is lifted; the master then answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_command_is_delivered_when_the_partition_heals() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let mut client = connect(&proxy).await;
    client.write_all(PING).await.unwrap();
    expect_reply(&mut client, PONG).await;
    proxy.set_upstream(Fault::Blackhole);
    client.write_all(&echo("held")).await.unwrap();
    let mut buf = [0; 16];
    let silent = timeout(Duration::from_millis(300), client.read(&mut buf)).await;
    assert!(silent.is_err(), "no reply through a blackhole: {silent:?}");
    assert_eq!(proxy.open(), 1);
    proxy.set_upstream(Fault::Pass);
    expect_reply(&mut client, &echoed("held")).await;
}

/// A downstream blackhole lets a command run on the master but holds its reply until the
/// partition heals (here from another task, through a handle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downstream_blackhole_runs_the_command_but_holds_the_reply() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let mut client = connect(&proxy).await;
    proxy.set_downstream(Fault::Blackhole);
    client
        .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n")
        .await
        .unwrap();
    let value = || resp::command(server.port(), &["GET", "k"]).bulk();
    assert_eventually!(value().as_deref() == Some("v"), 5, "the SET never ran");
    let mut buf = [0; 16];
    let silent = timeout(Duration::from_millis(100), client.read(&mut buf)).await;
    assert!(silent.is_err(), "no reply through a blackhole: {silent:?}");
    let handle = proxy.handle();
    tokio::spawn(async move { handle.set_both(Fault::Pass) });
    expect_reply(&mut client, b"+OK\r\n").await;
}

/// A dropping blackhole discards what it reads: after it is lifted, only later commands are
/// answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropping_blackhole_loses_the_commands_it_read() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let mut client = connect(&proxy).await;
    proxy.set_upstream(Fault::BlackholeDrop);
    client.write_all(&echo("lost")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.set_upstream(Fault::Pass);
    client.write_all(&echo("kept")).await.unwrap();
    expect_reply(&mut client, &echoed("kept")).await;
}

/// `reset_all` resets both sides: the client's next read fails with a reset, and the master
/// drops its end of the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_all_resets_the_client_and_the_master_side() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let mut client = connect(&proxy).await;
    client.write_all(PING).await.unwrap();
    expect_reply(&mut client, PONG).await;
    assert_eq!(master_clients(&server), 2);
    proxy.reset_all();
    let error = read_end(&mut client).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ConnectionReset, "{error}");
    assert_eventually!(proxy.open() == 0, 5, "the connection task ended");
    assert_eventually!(master_clients(&server) == 1, 5, "the master kept the link");
}

/// While refusing, a new connection is reset without reaching the master; afterwards new
/// connections work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_proxy_resets_new_connections_until_told_otherwise() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    proxy.refuse(true);
    // The kernel completes the handshake before the accept, so the reset may reach the
    // client while it connects (tokio then reports it) or at its first read.
    if let Ok(mut refused) = TcpStream::connect(("127.0.0.1", proxy.port())).await {
        let _ = refused.write_all(PING).await;
        let _ = read_end(&mut refused).await;
    }
    assert_eq!((proxy.refused(), proxy.accepted()), (1, 0));
    assert_eq!(
        master_clients(&server),
        1,
        "a refused client reached the master"
    );
    proxy.refuse(false);
    let mut client = connect(&proxy).await;
    client.write_all(PING).await.unwrap();
    expect_reply(&mut client, PONG).await;
    assert_eq!((proxy.refused(), proxy.accepted()), (1, 1));
}

/// Dropping the proxy closes its connections and its port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_proxy_closes_its_connections_and_port() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let port = proxy.port();
    let mut client = connect(&proxy).await;
    client.write_all(PING).await.unwrap();
    expect_reply(&mut client, PONG).await;
    drop(proxy);
    let _ = read_end(&mut client).await;
    assert_eventually!(
        TcpStream::connect(("127.0.0.1", port)).await.is_err(),
        5,
        "the proxy's port still accepts"
    );
    assert_eventually!(master_clients(&server) == 1, 5, "the master kept the link");
}
