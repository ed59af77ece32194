//! Raw bytes pipelined on a fresh connection while the answers are read: what the
//! hostile-input tests send, heard even when the server answers before taking it all.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::{Answer, Conn};

/// Sends `raw` on a fresh connection to `addr` and reads `count` answers, all within `limit`:
/// one result per answer expected, the ones never read carrying why. The bytes are written
/// while the answers are read, so a server that answers before taking a whole body (413, 414,
/// 431) is heard; write errors after that are ignored.
pub async fn exchange(
    addr: SocketAddr,
    raw: &[u8],
    count: usize,
    limit: Duration,
) -> Vec<Result<Answer, String>> {
    let mut answers = Vec::with_capacity(count);
    let attempt = exchange_into(addr, raw, count, &mut answers);
    let failure = match tokio::time::timeout(limit, attempt).await {
        Ok(result) => result.err(),
        Err(_) => Some(format!("no answer within {limit:?}")),
    };
    let mut results: Vec<_> = answers.into_iter().map(Ok).collect();
    let failure = failure.unwrap_or_default();
    let n = results.len();
    results.extend((n..count).map(|i| Err(format!("answer {} of {count}: {failure}", i + 1))));
    results
}

async fn exchange_into(
    addr: SocketAddr,
    raw: &[u8],
    count: usize,
    answers: &mut Vec<Answer>,
) -> Result<(), String> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect failed: {e}"))?;
    let (read, mut write) = stream.split();
    let mut reader = Conn::new(read);
    let send = async {
        for piece in raw.chunks(16 * 1024) {
            if write.write_all(piece).await.is_err() {
                break;
            }
        }
        // Never half-close: a server may take the end of its input as the end of the
        // connection and drop the answer.
        std::future::pending::<()>().await
    };
    let receive = async {
        while answers.len() < count {
            answers.push(reader.read_answer().await?);
        }
        Ok(())
    };
    tokio::select! {
        done = receive => done,
        () = send => unreachable!("the sender never ends"),
    }
}
