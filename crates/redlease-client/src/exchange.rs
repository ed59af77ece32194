//! One request and its whole answer on a kept-alive HTTP/1.1 connection, written and read by
//! the caller's own task: the request's head and body in one buffer and one write, the answer
//! read into the connection's buffer and its head parsed in place (`httparse`, the parser
//! hyper uses). No request or response object, no header map, no body channel: hyper's client
//! connection spent as much CPU per request as the sidecar's routing and handlers together.
//! Event streams, which read their body as it comes, keep hyper (`http`).

use std::io::Write;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Headers read in an answer's head at most (the sidecar sends about five).
const MAX_HEADERS: usize = 64;
/// An answer's head longer than this is refused.
const MAX_HEAD: usize = 64 * 1024;
/// An answer's body longer than this is refused (an inventory's page is far smaller).
const MAX_BODY: usize = 64 * 1024 * 1024;
/// Read buffer of a connection; grows for larger answers.
const READ_CHUNK: usize = 8 * 1024;

/// What a request is made of, its head's fields as they go on the wire.
pub(crate) struct Outgoing<'a> {
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    pub(crate) host: &'a [u8],
    pub(crate) authorization: Option<&'a [u8]>,
    /// `Some` for a JSON body (sent with its content type).
    pub(crate) json: Option<&'a [u8]>,
}

/// How an exchange failed.
#[derive(Debug)]
pub(crate) enum ExchangeError {
    /// Not one byte of the request was written: it may be sent again on another connection.
    NotSent(std::io::Error),
    /// The connection failed, or the answer broke HTTP/1.1, after the request may have gone
    /// out.
    Failed(String),
}

/// An answer read whole, and whether its connection may carry another request.
pub(crate) struct Whole {
    pub(crate) status: u16,
    pub(crate) body: Bytes,
    pub(crate) reusable: bool,
}

/// A connection's socket, and its buffers kept between requests.
pub(crate) struct Plain<S> {
    stream: S,
    write: Vec<u8>,
    read: Vec<u8>,
}

impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> Plain<S> {
    pub(crate) fn new(stream: S) -> Self {
        Self {
            stream,
            write: Vec::with_capacity(512),
            read: Vec::with_capacity(READ_CHUNK),
        }
    }

    /// The socket, to check whether the sidecar closed it while idle.
    pub(crate) fn stream(&self) -> &S {
        &self.stream
    }

    /// Sends `request` and reads its whole answer.
    pub(crate) async fn exchange(
        &mut self,
        request: &Outgoing<'_>,
    ) -> Result<Whole, ExchangeError> {
        encode(request, &mut self.write);
        let head_only = request.method == "HEAD";
        let first = self.stream.write(&self.write).await;
        match first {
            Ok(0) => {
                let closed = std::io::Error::from(std::io::ErrorKind::WriteZero);
                return Err(ExchangeError::NotSent(closed));
            }
            Ok(written) => {
                let rest = &self.write[written..];
                if let Err(error) = self.stream.write_all(rest).await {
                    return Err(ExchangeError::Failed(format!("send the request: {error}")));
                }
            }
            Err(error) => return Err(ExchangeError::NotSent(error)),
        }
        self.read.clear();
        let answer = self.read_answer(head_only).await;
        // A pooled connection keeps no large answer's buffer.
        if self.read.capacity() > MAX_HEAD {
            self.read = Vec::with_capacity(READ_CHUNK);
        }
        answer.map_err(ExchangeError::Failed)
    }

    async fn read_answer(&mut self, head_only: bool) -> Result<Whole, String> {
        let mut start = 0;
        loop {
            let head = parse_head(&self.read[start..])?;
            let Some(head) = head else {
                if self.read.len() - start > MAX_HEAD {
                    return Err(format!("an answer's head over {MAX_HEAD} bytes"));
                }
                self.fill().await?;
                continue;
            };
            // An interim answer (`100 Continue`): the final one follows it.
            if (100..200).contains(&head.status) && head.status != 101 {
                start += head.length;
                continue;
            }
            let body_start = start + head.length;
            let no_body = head_only || matches!(head.status, 101..=199 | 204 | 304);
            let (body, end) = match head.framing {
                _ if no_body => (Bytes::new(), body_start),
                Framing::Length(length) => {
                    let length = usize::try_from(length)
                        .ok()
                        .filter(|&length| length <= MAX_BODY)
                        .ok_or_else(|| format!("an answer's body over {MAX_BODY} bytes"))?;
                    while self.read.len() < body_start + length {
                        self.fill().await?;
                    }
                    let body = &self.read[body_start..body_start + length];
                    (Bytes::copy_from_slice(body), body_start + length)
                }
                Framing::Chunked => self.read_chunked(body_start).await?,
                Framing::UntilClose => {
                    while self.fill_or_end().await? {
                        if self.read.len() - body_start > MAX_BODY {
                            return Err(format!("an answer's body over {MAX_BODY} bytes"));
                        }
                    }
                    (
                        Bytes::copy_from_slice(&self.read[body_start..]),
                        self.read.len(),
                    )
                }
            };
            // Bytes after the answer (nothing was asked for them), or a body that ended with
            // the connection, end the connection's use.
            let until_close = !no_body && head.framing == Framing::UntilClose;
            let switched = head.status == 101;
            let reusable = head.keep_alive && end == self.read.len() && !until_close && !switched;
            return Ok(Whole {
                status: head.status,
                body,
                reusable,
            });
        }
    }

    /// Decodes a chunked body starting at `at`; the body and where the answer ends.
    async fn read_chunked(&mut self, mut at: usize) -> Result<(Bytes, usize), String> {
        let mut body = Vec::new();
        loop {
            let size = match httparse::parse_chunk_size(&self.read[at..]) {
                Ok(httparse::Status::Complete((length, size))) => {
                    at += length;
                    size
                }
                Ok(httparse::Status::Partial) => {
                    self.fill().await?;
                    continue;
                }
                Err(_) => return Err("a chunk's size is not one".into()),
            };
            let size = usize::try_from(size)
                .ok()
                .filter(|&size| body.len().saturating_add(size) <= MAX_BODY)
                .ok_or_else(|| format!("an answer's body over {MAX_BODY} bytes"))?;
            if size == 0 {
                // Trailers, if any, then the empty line that ends the answer.
                loop {
                    let line_end = loop {
                        if let Some(offset) = find_crlf(&self.read[at..]) {
                            break at + offset;
                        }
                        if self.read.len() - at > MAX_HEAD {
                            return Err(format!("an answer's trailers over {MAX_HEAD} bytes"));
                        }
                        self.fill().await?;
                    };
                    let empty = line_end == at;
                    at = line_end + 2;
                    if empty {
                        return Ok((Bytes::from(body), at));
                    }
                }
            }
            while self.read.len() < at + size + 2 {
                self.fill().await?;
            }
            body.extend_from_slice(&self.read[at..at + size]);
            if &self.read[at + size..at + size + 2] != b"\r\n" {
                return Err("a chunk not followed by CRLF".into());
            }
            at += size + 2;
        }
    }

    /// Reads more of the answer; the connection ending first is an error.
    async fn fill(&mut self) -> Result<(), String> {
        if self.fill_or_end().await? {
            Ok(())
        } else {
            Err("the sidecar closed the connection".into())
        }
    }

    /// Reads more of the answer; `false` at the end of the connection.
    async fn fill_or_end(&mut self) -> Result<bool, String> {
        if self.read.capacity() - self.read.len() < READ_CHUNK / 4 {
            self.read.reserve(READ_CHUNK);
        }
        match self.stream.read_buf(&mut self.read).await {
            Ok(0) => Ok(false),
            Ok(_) => Ok(true),
            Err(error) => Err(format!("read the answer: {error}")),
        }
    }
}

/// Writes `request`'s head and body into `out`.
fn encode(request: &Outgoing<'_>, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(request.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(request.path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(request.host);
    if let Some(authorization) = request.authorization {
        out.extend_from_slice(b"\r\nauthorization: ");
        out.extend_from_slice(authorization);
    }
    let body = request.json.unwrap_or_default();
    if request.json.is_some() {
        out.extend_from_slice(b"\r\ncontent-type: application/json");
    }
    if request.json.is_some() || !matches!(request.method, "GET" | "HEAD") {
        // Writing to a `Vec` cannot fail.
        let _ = write!(out, "\r\ncontent-length: {}", body.len());
    }
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
}

fn find_crlf(bytes: &[u8]) -> Option<usize> {
    bytes.windows(2).position(|w| w == b"\r\n")
}

/// How an answer's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Framing {
    Length(u64),
    Chunked,
    /// Neither: the body is what comes until the sidecar closes the connection.
    UntilClose,
}

/// What an answer's head says.
#[derive(Debug, PartialEq)]
struct Head {
    status: u16,
    /// The head's length, its final empty line included.
    length: usize,
    framing: Framing,
    keep_alive: bool,
}

/// The answer's head at the start of `bytes`, `None` while it is not whole.
fn parse_head(bytes: &[u8]) -> Result<Option<Head>, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let length = match response.parse(bytes) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(error) => return Err(format!("an answer that is not HTTP/1.1: {error}")),
    };
    let status = response.code.unwrap_or_default();
    // HTTP/1.0 closes after each answer unless it says otherwise; 1.1 keeps the connection.
    let mut keep_alive = response.version == Some(1);
    let mut length_header: Option<u64> = None;
    // The last transfer coding named, if any: `chunked` there frames the body.
    let mut last_coding: Option<&[u8]> = None;
    for header in response.headers.iter() {
        let value = header.value;
        if header.name.eq_ignore_ascii_case("content-length") {
            let parsed = std::str::from_utf8(value)
                .ok()
                .and_then(|value| value.trim().parse::<u64>().ok())
                .ok_or("an answer whose content-length is not a number")?;
            if length_header.is_some_and(|seen| seen != parsed) {
                return Err("an answer with two content-lengths".into());
            }
            length_header = Some(parsed);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            let mut codings = value.rsplit(|&byte| byte == b',').map(<[u8]>::trim_ascii);
            let last = codings.find(|coding| !coding.is_empty());
            last_coding = last.or(last_coding);
        } else if header.name.eq_ignore_ascii_case("connection") {
            if has_token(value, "close") {
                keep_alive = false;
            } else if has_token(value, "keep-alive") {
                keep_alive = true;
            }
        }
    }
    // RFC 9112, 6.3: a transfer coding overrides a content-length, and the connection is
    // not used again after such an answer; a body whose last coding is not `chunked` ends
    // with the connection.
    let framing = match (last_coding, length_header) {
        (Some(coding), _) if coding.eq_ignore_ascii_case(b"chunked") => Framing::Chunked,
        (Some(_), _) => Framing::UntilClose,
        (None, Some(length)) => Framing::Length(length),
        (None, None) => Framing::UntilClose,
    };
    if last_coding.is_some() && length_header.is_some() {
        keep_alive = false;
    }
    Ok(Some(Head {
        status,
        length,
        framing,
        keep_alive,
    }))
}

/// Whether the comma-separated `value` holds `token` (in any case).
fn has_token(value: &[u8], token: &str) -> bool {
    value
        .split(|&byte| byte == b',')
        .any(|item| item.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `GET /` to host `h`, with no token and no body.
    fn get_root() -> Outgoing<'static> {
        Outgoing {
            method: "GET",
            path: "/",
            host: b"h",
            authorization: None,
            json: None,
        }
    }

    /// A request is its method, path, host, token, content type and length, then its body.
    #[test]
    fn a_request_is_written_whole() {
        let mut out = Vec::new();
        let request = Outgoing {
            method: "POST",
            path: "/v1/locks/a%2Fb/acquire",
            host: b"127.0.0.1:7600",
            authorization: Some(b"Bearer t"),
            json: Some(br#"{"owner":"me"}"#),
        };
        encode(&request, &mut out);
        assert_eq!(
            out,
            b"POST /v1/locks/a%2Fb/acquire HTTP/1.1\r\nhost: 127.0.0.1:7600\r\n\
              authorization: Bearer t\r\ncontent-type: application/json\r\n\
              content-length: 14\r\n\r\n{\"owner\":\"me\"}"
        );
        let get = Outgoing {
            method: "GET",
            path: "/v1/leases/00",
            host: b"localhost",
            authorization: None,
            json: None,
        };
        encode(&get, &mut out);
        assert_eq!(
            out,
            b"GET /v1/leases/00 HTTP/1.1\r\nhost: localhost\r\n\r\n"
        );
        let delete = Outgoing {
            method: "DELETE",
            ..get
        };
        encode(&delete, &mut out);
        assert_eq!(
            out,
            b"DELETE /v1/leases/00 HTTP/1.1\r\nhost: localhost\r\ncontent-length: 0\r\n\r\n"
        );
    }

    /// Heads: their status, length, framing and whether the connection stays.
    #[test]
    fn heads_say_how_the_body_ends_and_whether_the_connection_stays() {
        let head = |text: &str| parse_head(text.as_bytes());
        let length = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ndate: x\r\n\r\nhello";
        assert_eq!(
            head(length),
            Ok(Some(Head {
                status: 200,
                length: length.len() - 5,
                framing: Framing::Length(5),
                keep_alive: true,
            }))
        );
        assert_eq!(head("HTTP/1.1 200 OK\r\ncontent-len"), Ok(None));
        let chunked = head("HTTP/1.1 409 Conflict\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n");
        assert_eq!(chunked.unwrap().unwrap().framing, Framing::Chunked);
        let gzipped = head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n");
        assert_eq!(gzipped.unwrap().unwrap().framing, Framing::UntilClose);
        let both = "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n";
        let both = head(both).unwrap().unwrap();
        assert_eq!((both.framing, both.keep_alive), (Framing::Chunked, false));
        let closing = head("HTTP/1.1 200 OK\r\nConnection: Close\r\ncontent-length: 0\r\n\r\n");
        assert!(!closing.unwrap().unwrap().keep_alive);
        let old = head("HTTP/1.0 200 OK\r\n\r\n").unwrap().unwrap();
        assert_eq!((old.keep_alive, old.framing), (false, Framing::UntilClose));
        assert!(head("HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n").is_err());
        assert!(head("HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n").is_err());
        assert!(head("SSH-2.0-OpenSSH\r\n\r\n").is_err());
    }

    /// Answers read whole from a socket, however they arrive: split anywhere, chunked,
    /// after an interim answer, or delimited by the close.
    #[tokio::test]
    async fn answers_are_read_whole_however_they_arrive() {
        /// The answer's pieces as written, then its status, body and reuse.
        type Case = (&'static [&'static [u8]], u16, &'static [u8], bool);
        let cases: [Case; 5] = [
            (
                &[
                    b"HTTP/1.1 201 Created\r\ncontent-le",
                    b"ngth: 3\r\n\r\nab",
                    b"c",
                ],
                201,
                b"abc",
                true,
            ),
            (
                &[
                    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n",
                    b"2\r\nde\r\n0\r\ntrailer: 1\r\n\r\n",
                ],
                200,
                b"abcde",
                true,
            ),
            (
                &[b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"],
                204,
                b"",
                true,
            ),
            (
                &[b"HTTP/1.1 200 OK\r\n\r\nuntil the ", b"end"],
                200,
                b"until the end",
                false,
            ),
            (
                &[b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nxEXTRA"],
                200,
                b"x",
                false,
            ),
        ];
        for (pieces, status, body, reusable) in cases {
            let (client, mut server) = tokio::io::duplex(64);
            let serve = async move {
                let mut request = [0u8; 256];
                let _ = server.read(&mut request).await.unwrap();
                for piece in pieces {
                    server.write_all(piece).await.unwrap();
                    tokio::task::yield_now().await;
                }
            };
            let mut plain = Plain::new(client);
            let get = get_root();
            let (answer, ()) = tokio::join!(plain.exchange(&get), serve);
            let answer = answer.unwrap();
            assert_eq!(answer.status, status);
            assert_eq!(&answer.body[..], body);
            assert_eq!(
                answer.reusable,
                reusable,
                "{:?}",
                String::from_utf8_lossy(pieces[0])
            );
        }
    }

    /// A connection the sidecar closed: before the request, it is not sent; after, the
    /// exchange fails.
    #[tokio::test]
    async fn a_closed_connection_fails_the_exchange() {
        let get = get_root();
        let (client, server) = tokio::io::duplex(64);
        drop(server);
        let mut plain = Plain::new(client);
        assert!(matches!(
            plain.exchange(&get).await,
            Err(ExchangeError::NotSent(_))
        ));
        let (client, mut server) = tokio::io::duplex(64);
        let serve = async move {
            let mut request = [0u8; 256];
            let _ = server.read(&mut request).await.unwrap();
            server
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nshort")
                .await
                .unwrap();
        };
        let mut plain = Plain::new(client);
        let (answer, ()) = tokio::join!(plain.exchange(&get), serve);
        assert!(matches!(answer, Err(ExchangeError::Failed(_))));
    }
}
