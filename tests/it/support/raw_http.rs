//! HTTP/1.1 by hand over any stream (TCP or Unix): send exact bytes, read one answer (a
//! `content-length` or chunked body), tell when the server closed the connection.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

pub use super::raw_exchange::Answer;

/// How long a test waits for an answer.
const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// A connection and what it has read past the last answer.
pub struct Conn<S> {
    pub stream: S,
    buffer: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    pub fn new(stream: S) -> Self {
        Self {
            stream,
            buffer: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Sends `request` and reads its answer.
    pub async fn exchange(&mut self, request: &[u8]) -> Answer {
        self.send(request).await;
        self.answer().await
    }

    /// The next answer (panics if none comes within 10 s or the connection closes first).
    pub async fn answer(&mut self) -> Answer {
        let read = tokio::time::timeout(ANSWER_WAIT, self.read_answer()).await;
        let answer = read.unwrap_or_else(|_| panic!("no answer within {ANSWER_WAIT:?}"));
        answer.unwrap_or_else(|| panic!("closed before a whole answer: {:?}", self.text()))
    }

    /// The head of the next answer, its body left unread (an event stream).
    pub async fn head(&mut self) -> Answer {
        let answer = tokio::time::timeout(ANSWER_WAIT, self.read_head()).await;
        let answer = answer.unwrap_or_else(|_| panic!("no head within {ANSWER_WAIT:?}"));
        answer.unwrap_or_else(|| panic!("closed before a head: {:?}", self.text()))
    }

    /// Whether the server closes the connection (EOF or reset) within `wait`, with nothing
    /// sent; `None` if it did not close in time, else the time it took.
    pub async fn closed_within(&mut self, wait: Duration) -> Option<Duration> {
        let start = Instant::now();
        let mut byte = [0u8; 1024];
        match tokio::time::timeout(wait, self.stream.read(&mut byte)).await {
            Err(_) => None,
            Ok(Ok(0)) | Ok(Err(_)) => Some(start.elapsed()),
            Ok(Ok(n)) => panic!(
                "unexpected bytes: {:?}",
                String::from_utf8_lossy(&byte[..n])
            ),
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.buffer).into_owned()
    }

    async fn fill(&mut self) -> Option<()> {
        let mut chunk = [0u8; 8192];
        match self.stream.read(&mut chunk).await {
            Ok(0) | Err(_) => None,
            Ok(n) => {
                self.buffer.extend_from_slice(&chunk[..n]);
                Some(())
            }
        }
    }

    /// The next head, taken off the buffer.
    async fn read_head(&mut self) -> Option<Answer> {
        let end = loop {
            if let Some(end) = find(&self.buffer, b"\r\n\r\n") {
                break end;
            }
            self.fill().await?;
        };
        let head = String::from_utf8_lossy(&self.buffer[..end]).into_owned();
        self.buffer.drain(..end + 4);
        parse_head(&head)
    }

    async fn read_answer(&mut self) -> Option<Answer> {
        let mut answer = self.read_head().await?;
        answer.body = if answer.header("transfer-encoding") == Some("chunked") {
            self.chunked().await?
        } else {
            let length = answer
                .header("content-length")
                .map_or(0, |v| v.parse().unwrap());
            self.exactly(length).await?
        };
        Some(answer)
    }

    async fn exactly(&mut self, length: usize) -> Option<Vec<u8>> {
        while self.buffer.len() < length {
            self.fill().await?;
        }
        Some(self.buffer.drain(..length).collect())
    }

    async fn chunked(&mut self) -> Option<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(end) = find(&self.buffer, b"\r\n") {
                    break end;
                }
                self.fill().await?;
            };
            let size = String::from_utf8_lossy(&self.buffer[..line_end]).into_owned();
            self.buffer.drain(..line_end + 2);
            let size = usize::from_str_radix(size.trim(), 16).ok()?;
            let chunk = self.exactly(size + 2).await?;
            if size == 0 {
                return Some(body);
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }
}

fn parse_head(head: &str) -> Option<Answer> {
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    Some(Answer {
        status,
        headers,
        body: Vec::new(),
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
