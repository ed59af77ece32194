//! Opening a lock connection: the stream ([`super::stream`]: TCP, TLS) and the handshake that
//! makes it the only connection of the lock path on its master.
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

use fred::types::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::stream::Stream;
use super::{OpenError, Target};
use crate::fleet::quarantine::parse_info;
use crate::resp::{parse, Commands, Reply};

/// A connection as the server knows it: its `CLIENT ID`, unique within the server process
/// `run_id`.
#[derive(Clone, Debug)]
pub(super) struct Fence {
    client_id: i64,
    run_id: String,
}

/// Connects (TLS included) and runs the handshake, within the target's connect timeout: the
/// stream and this connection as the server knows it.
pub(super) async fn open(
    target: &Target,
    fence: Option<Fence>,
) -> Result<(Stream, Fence), OpenError> {
    let attempt = async {
        let mut stream = Stream::connect(target).await?;
        let fence = handshake(&mut stream, target, fence).await?;
        Ok((stream, fence))
    };
    tokio::time::timeout(target.connect_timeout, attempt)
        .await
        .unwrap_or_else(|_| Err(OpenError::Unreachable("connect timed out".into())))
}

/// `AUTH` and `SELECT` as the target says, `CLIENT ID` and `INFO server`, pipelined; then,
/// when the server process is the one of the earlier link `fence`, `CLIENT KILL ID <its id>`.
/// Any error reply fails the link. Returns this connection as the server knows it.
async fn handshake(
    stream: &mut Stream,
    target: &Target,
    fence: Option<Fence>,
) -> Result<Fence, OpenError> {
    let mut commands = Commands::with_capacity(256);
    if let Some(password) = &target.password {
        let password = password.expose().as_bytes();
        match &target.username {
            Some(user) => commands.push(&[b"AUTH", user.as_bytes(), password]),
            None => commands.push(&[b"AUTH", password]),
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
        let nothing = "CLIENT ID or INFO server answered nothing usable";
        return Err(OpenError::Unreachable(nothing.into()));
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
async fn exchange(stream: &mut Stream, commands: &Commands) -> Result<Vec<Value>, OpenError> {
    let replies = send(stream, commands).await?;
    let values = replies
        .into_iter()
        .map(|reply| reply.map_err(OpenError::Refused));
    values.collect()
}

/// Writes `commands` on a stream that carries nothing else and reads exactly their replies,
/// error replies included.
pub(super) async fn send(
    stream: &mut Stream,
    commands: &Commands,
) -> Result<Vec<Reply>, OpenError> {
    let failed = |e: std::io::Error| OpenError::from_io(&e);
    stream.write_all(commands.encoded()).await.map_err(failed)?;
    stream.flush().await.map_err(failed)?;
    let count = commands.count();
    let mut buffer = Vec::with_capacity(256);
    let mut replies = Vec::with_capacity(count);
    while replies.len() < count {
        if stream.read_buf(&mut buffer).await.map_err(failed)? == 0 {
            return Err(OpenError::Unreachable(
                "the master closed the connection before replying".into(),
            ));
        }
        let mut used = 0;
        let parsed = |input: &[u8]| parse(input).map_err(OpenError::Unreachable);
        while let Some((reply, length)) = parsed(&buffer[used..])? {
            replies.push(reply);
            used += length;
        }
        buffer.drain(..used);
    }
    Ok(replies)
}
