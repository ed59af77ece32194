//! A minimal HTTP/1.1 keep-alive client for the sidecar bench: one connection, one request at
//! a time, the request written and the response read in the caller's own task. It measures
//! what the sidecar costs without a pooled client's task hops on top (reqwest runs each
//! connection in a task of its own and hands requests and responses to it over channels).

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub struct RawHttp {
    stream: TcpStream,
    host: String,
    buffer: Vec<u8>,
}

/// One response: the status code and the body.
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

impl RawHttp {
    /// Connects to `base` (`http://host:port`).
    pub async fn connect(base: &str) -> std::io::Result<Self> {
        let host = base.trim_start_matches("http://").to_string();
        let stream = TcpStream::connect(&host).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            host,
            buffer: Vec::with_capacity(4096),
        })
    }

    /// Sends `method path` with an optional JSON body and reads the whole response.
    pub async fn send(&mut self, method: &str, path: &str, json: Option<&str>) -> Answer {
        let body = json.unwrap_or("");
        let request = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{body}",
            self.host,
            body.len()
        );
        self.stream.write_all(request.as_bytes()).await.unwrap();
        self.buffer.clear();
        let head_end = loop {
            if let Some(end) = find(&self.buffer, b"\r\n\r\n") {
                break end + 4;
            }
            self.read_more().await;
        };
        let head = std::str::from_utf8(&self.buffer[..head_end]).expect("ASCII head");
        let status = head[9..12].parse().expect("status code");
        let length: usize = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .expect("the sidecar sends content-length");
        while self.buffer.len() < head_end + length {
            self.read_more().await;
        }
        Answer {
            status,
            body: self.buffer[head_end..head_end + length].to_vec(),
        }
    }

    async fn read_more(&mut self) {
        let mut chunk = [0u8; 4096];
        let n = self.stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the sidecar closed the connection");
        self.buffer.extend_from_slice(&chunk[..n]);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
