//! Opening a lock connection: connect, TCP options, and the handshake that makes it the only
//! connection of the lock path on its master.
//!
//! **Ordering across connections.** Every link starts with a handshake (`AUTH`, `SELECT`,
//! `CLIENT ID`, `INFO server`): a server that accepts and says nothing, or closes at once,
//! never carries a command. A new link to a master that had one before, on the same server
//! process (`run_id` from `INFO server`: client ids are never reused within a process, and a
//! restarted server lost the old connection with everything in it), first sends `CLIENT KILL
//! ID <the old link's id>`: once that is answered, no command of the old connection can still
//! run on the master (Redis drops a killed client's unread input). So on each master, every
//! lock command sent on a later connection runs after every command of the earlier ones that
//! ever runs: a release sent after a reconnect cannot be overtaken by a `SET` that was stuck in
//! the old connection.

use std::time::Duration;

use fred::types::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Target;
use crate::fleet::quarantine::parse_info;
use crate::resp::{parse, Commands, Reply};

/// How a link attempt the master answered with an error reply is described.
pub(super) const HANDSHAKE_REFUSED: &str = "handshake refused";
/// Idle links are probed by TCP keepalive after this long, then every `KEEPALIVE_INTERVAL`.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
/// A connection as the server knows it: its `CLIENT ID`, unique within the server process
/// `run_id`.
#[derive(Clone, Debug)]
pub(super) struct Fence {
    client_id: i64,
    run_id: String,
}

/// Connects and runs the handshake, within the target's connect timeout: the stream and this
/// connection as the server knows it.
pub(super) async fn open(
    target: &Target,
    fence: Option<Fence>,
) -> Result<(TcpStream, Fence), String> {
    let attempt = async {
        let mut stream = TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(KEEPALIVE_IDLE)
            .with_interval(KEEPALIVE_INTERVAL);
        let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive);
        let client_id = handshake(&mut stream, target, fence).await?;
        Ok((stream, client_id))
    };
    tokio::time::timeout(target.connect_timeout, attempt)
        .await
        .unwrap_or_else(|_| Err("connect timed out".into()))
}

/// `AUTH` and `SELECT` as the target says, `CLIENT ID` and `INFO server`, pipelined; then,
/// when the server process is the one of the earlier link `fence`, `CLIENT KILL ID <its id>`.
/// Any error reply fails the link. Returns this connection as the server knows it.
async fn handshake(
    stream: &mut TcpStream,
    target: &Target,
    fence: Option<Fence>,
) -> Result<Fence, String> {
    let mut commands = Commands::with_capacity(256);
    if let Some(password) = &target.password {
        match &target.username {
            Some(user) => commands.push(&[b"AUTH", user.as_bytes(), password.as_bytes()]),
            None => commands.push(&[b"AUTH", password.as_bytes()]),
        };
    }
    if let Some(database) = target.database {
        commands.push(&[b"SELECT", database.to_string().as_bytes()]);
    }
    commands
        .push(&[b"CLIENT", b"ID"])
        .push(&[b"INFO", b"server"]);
    let mut replies = exchange(stream, &commands).await?;
    let info = replies
        .pop()
        .and_then(|v| v.as_string())
        .unwrap_or_default();
    let client_id = replies.pop().and_then(|v| v.as_i64());
    let run_id = parse_info(&info).map(|identity| identity.run_id);
    let (Some(client_id), Some(run_id)) = (client_id, run_id) else {
        return Err("CLIENT ID or INFO server answered nothing usable".into());
    };
    if let Some(old) = fence.filter(|old| old.run_id == run_id) {
        let id = old.client_id.to_string();
        let mut kill = Commands::with_capacity(64);
        kill.push(&[b"CLIENT", b"KILL", b"ID", id.as_bytes()]);
        exchange(stream, &kill).await?;
    }
    Ok(Fence { client_id, run_id })
}

/// Writes `commands` on a fresh stream and reads their replies; any error reply fails.
async fn exchange(stream: &mut TcpStream, commands: &Commands) -> Result<Vec<Value>, String> {
    stream
        .write_all(commands.encoded())
        .await
        .map_err(|e| e.to_string())?;
    let replies = read_handshake(stream, commands.count()).await?;
    let values = replies
        .into_iter()
        .map(|reply| reply.map_err(|error| format!("{HANDSHAKE_REFUSED}: {error}")));
    values.collect()
}

/// Reads exactly `count` replies off a fresh stream.
async fn read_handshake(stream: &mut TcpStream, count: usize) -> Result<Vec<Reply>, String> {
    let mut buffer = Vec::with_capacity(256);
    let mut replies = Vec::with_capacity(count);
    while replies.len() < count {
        let read = stream.read_buf(&mut buffer).await;
        if read.map_err(|e| e.to_string())? == 0 {
            return Err("closed during the handshake".into());
        }
        let mut used = 0;
        while let Some((reply, length)) = parse(&buffer[used..])? {
            replies.push(reply);
            used += length;
        }
        buffer.drain(..used);
    }
    Ok(replies)
}
