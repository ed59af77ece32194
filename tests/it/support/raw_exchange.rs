//! A raw HTTP/1.x client for hostile-input tests, and the one answer type of the raw clients:
//! sends bytes exactly as given over a plain `TcpStream` and parses the answers itself (status
//! line, headers, a `Content-Length` or chunked body), every read bounded by a deadline.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest answer head read before giving up on it.
const MAX_HEAD: usize = 64 * 1024;
/// Longest answer body read.
const MAX_BODY: usize = 1024 * 1024;

/// One parsed answer.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    /// Names lowercased, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    /// The first header called `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        let found = self.headers.iter().find(|(n, _)| n == name);
        found.map(|(_, value)| value.as_str())
    }

    /// The body as JSON, `Null` when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// Status and `reason` of a problem+json answer (asserting its content type and fields).
    pub fn problem(&self) -> (u16, String) {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{self:?}"
        );
        let body = self.json();
        let reason = body["reason"].as_str().unwrap_or_default().to_string();
        assert_eq!(body["type"], format!("/problems/{reason}"), "{body}");
        assert_eq!(body["status"], self.status, "{body}");
        assert!(
            body["title"].is_string() && body["detail"].is_string(),
            "{body}"
        );
        (self.status, reason)
    }

    /// The body as text, shortened, for failure messages.
    pub fn body_text(&self) -> String {
        let text = String::from_utf8_lossy(&self.body).replace('\n', "\\n");
        text.chars().take(300).collect()
    }
}

/// Buffered reads off one connection.
pub struct Reader<R> {
    inner: R,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            buf: Vec::new(),
        }
    }

    /// Reads more bytes; `Ok(false)` at end of stream.
    async fn fill(&mut self) -> Result<bool, String> {
        let mut chunk = [0u8; 16 * 1024];
        match self.inner.read(&mut chunk).await {
            Ok(0) => Ok(false),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
            Err(error) => Err(format!("read failed: {error}")),
        }
    }

    /// Bytes up to and including the next `\r\n`, without it.
    async fn line(&mut self) -> Result<Vec<u8>, String> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = self.buf.drain(..end + 2).take(end).collect();
                return Ok(line);
            }
            if self.buf.len() > MAX_HEAD || !self.fill().await? {
                return Err("the connection ended inside a line".into());
            }
        }
    }

    async fn exact(&mut self, n: usize) -> Result<Vec<u8>, String> {
        while self.buf.len() < n {
            if !self.fill().await? {
                return Err(format!(
                    "the connection ended {} bytes short",
                    n - self.buf.len()
                ));
            }
        }
        Ok(self.buf.drain(..n).collect())
    }

    /// The status line and headers of the next answer, skipping `1xx` interim answers.
    pub async fn head(&mut self) -> Result<Answer, String> {
        loop {
            while self.buf.is_empty() {
                if !self.fill().await? {
                    return Err("closed without an answer".into());
                }
            }
            let line = String::from_utf8_lossy(&self.line().await?).into_owned();
            let mut parts = line.splitn(3, ' ');
            let (version, code) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let status = match (version.starts_with("HTTP/1."), code.parse::<u16>()) {
                (true, Ok(status)) => status,
                _ => return Err(format!("not an HTTP/1 status line: {line:?}")),
            };
            let mut headers = Vec::new();
            loop {
                let line = self.line().await?;
                if line.is_empty() {
                    break;
                }
                let line = String::from_utf8_lossy(&line).into_owned();
                let (name, value) = line.split_once(':').ok_or(format!("bad header {line:?}"))?;
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
            }
            if !(100..200).contains(&status) {
                return Ok(Answer {
                    status,
                    headers,
                    body: Vec::new(),
                });
            }
        }
    }

    /// The next whole answer: head and body.
    pub async fn answer(&mut self) -> Result<Answer, String> {
        let mut answer = self.head().await?;
        self.body(&mut answer).await?;
        Ok(answer)
    }

    /// The body of the answer whose head was just read.
    pub async fn body(&mut self, answer: &mut Answer) -> Result<(), String> {
        let chunked = answer
            .header("transfer-encoding")
            .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
        let length = answer.header("content-length").map(str::parse::<usize>);
        answer.body = if chunked {
            self.chunked().await?
        } else if let Some(length) = length {
            let length = length.map_err(|_| "bad content-length in the answer".to_string())?;
            if length > MAX_BODY {
                return Err(format!("answer body of {length} bytes"));
            }
            self.exact(length).await?
        } else if answer.status == 204 || answer.status == 304 {
            Vec::new()
        } else {
            while self.buf.len() <= MAX_BODY && self.fill().await? {}
            std::mem::take(&mut self.buf)
        };
        Ok(())
    }

    async fn chunked(&mut self) -> Result<Vec<u8>, String> {
        let mut body = Vec::new();
        loop {
            let line = String::from_utf8_lossy(&self.line().await?).into_owned();
            let size = line.split(';').next().unwrap_or("").trim();
            let size =
                usize::from_str_radix(size, 16).map_err(|_| format!("chunk size {line:?}"))?;
            if size == 0 {
                while !self.line().await?.is_empty() {}
                return Ok(body);
            }
            if body.len() + size > MAX_BODY {
                return Err("chunked answer body over 1 MiB".into());
            }
            body.extend(self.exact(size).await?);
            self.exact(2).await?;
        }
    }

    /// Waits for the peer to close: `Ok(bytes received meanwhile)` once it has.
    pub async fn until_closed(&mut self) -> Result<Vec<u8>, String> {
        loop {
            match self.fill().await {
                Ok(true) => continue,
                Ok(false) => return Ok(std::mem::take(&mut self.buf)),
                // A reset closes the connection too.
                Err(_) => return Ok(std::mem::take(&mut self.buf)),
            }
        }
    }
}

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
    let mut reader = Reader::new(read);
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
            answers.push(reader.answer().await?);
        }
        Ok(())
    };
    tokio::select! {
        done = receive => done,
        () = send => unreachable!("the sender never ends"),
    }
}

/// A connection kept open (idle floods, event streams, slow heads).
pub struct Held {
    pub reader: Reader<TcpStream>,
}

impl Held {
    pub async fn connect(addr: SocketAddr, limit: Duration) -> Result<Self, String> {
        let stream = tokio::time::timeout(limit, TcpStream::connect(addr))
            .await
            .map_err(|_| format!("connect took over {limit:?}"))?
            .map_err(|e| format!("connect failed: {e}"))?;
        Ok(Self {
            reader: Reader::new(stream),
        })
    }

    pub async fn send(&mut self, raw: &[u8]) -> Result<(), String> {
        let write = self.reader.inner.write_all(raw);
        write.await.map_err(|e| format!("write failed: {e}"))
    }

    /// The head of the next answer within `limit` (for a stream that stays open).
    pub async fn head(&mut self, limit: Duration) -> Result<Answer, String> {
        let read = tokio::time::timeout(limit, self.reader.head()).await;
        read.unwrap_or_else(|_| Err(format!("no answer within {limit:?}")))
    }

    /// The next whole answer within `limit`.
    pub async fn answer(&mut self, limit: Duration) -> Result<Answer, String> {
        let read = tokio::time::timeout(limit, self.reader.answer()).await;
        read.unwrap_or_else(|_| Err(format!("no answer within {limit:?}")))
    }

    /// `Some(bytes received)` once the server closed within `limit`, `None` if still open.
    pub async fn closed_within(&mut self, limit: Duration) -> Option<Vec<u8>> {
        let wait = tokio::time::timeout(limit, self.reader.until_closed()).await;
        wait.ok().and_then(Result::ok)
    }
}
