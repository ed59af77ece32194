//! A minimal blocking RESP2 client for inspecting masters from tests, independent of fred.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resp {
    /// `+…`
    Simple(String),
    /// `-…`
    Error(String),
    /// `:…`
    Int(i64),
    /// `$…`; `None` for the null bulk string.
    Bulk(Option<String>),
    /// `*…`
    Array(Vec<Resp>),
}

impl Resp {
    /// The integer (panics on any other reply).
    pub fn int(&self) -> i64 {
        match self {
            Resp::Int(n) => *n,
            other => panic!("expected an integer, got {other:?}"),
        }
    }

    /// The bulk string, `None` when null (panics on any other reply).
    pub fn bulk(&self) -> Option<String> {
        match self {
            Resp::Bulk(value) => value.clone(),
            other => panic!("expected a bulk string, got {other:?}"),
        }
    }

    /// The non-null bulk strings of an array (panics on any other reply).
    pub fn strings(&self) -> Vec<String> {
        match self {
            Resp::Array(items) => items.iter().filter_map(Resp::bulk).collect(),
            other => panic!("expected an array, got {other:?}"),
        }
    }
}

/// One connection to one master.
pub struct RespConn {
    reader: BufReader<TcpStream>,
}

impl RespConn {
    /// Connects to the master on loopback `port`, reads bounded to 5 s.
    pub fn connect(port: u16) -> std::io::Result<Self> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(Self {
            reader: BufReader::new(stream),
        })
    }

    /// Bounds every later read to `timeout`.
    pub fn set_read_timeout(&self, timeout: Duration) {
        // Fails only on a zero timeout, a caller's mistake.
        self.reader
            .get_ref()
            .set_read_timeout(Some(timeout))
            .unwrap();
    }

    /// Writes one command without reading its reply (pipelining, or a blocking command).
    pub fn send(&mut self, args: &[&str]) -> std::io::Result<()> {
        let mut out = format!("*{}\r\n", args.len());
        for arg in args {
            out.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        self.reader.get_mut().write_all(out.as_bytes())
    }

    /// Runs one command and reads its reply (panics on an I/O error).
    pub fn command(&mut self, args: &[&str]) -> Resp {
        // An I/O error or a malformed reply fails the test.
        self.send(args).unwrap();
        self.read().unwrap()
    }

    /// Reads the next reply.
    pub fn read(&mut self) -> std::io::Result<Resp> {
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let line = line.trim_end_matches("\r\n");
        let (kind, rest) = line.split_at(1);
        Ok(match kind {
            "+" => Resp::Simple(rest.to_string()),
            "-" => Resp::Error(rest.to_string()),
            // A malformed length or integer from redis-server fails the test.
            ":" => Resp::Int(rest.parse().unwrap()),
            "$" => self.read_bulk(rest.parse().unwrap())?,
            "*" => {
                let n: i64 = rest.parse().unwrap();
                let items = (0..n.max(0))
                    .map(|_| self.read())
                    .collect::<Result<_, _>>()?;
                Resp::Array(items)
            }
            _ => panic!("unexpected RESP line {line:?}"),
        })
    }

    fn read_bulk(&mut self, len: i64) -> std::io::Result<Resp> {
        if len < 0 {
            return Ok(Resp::Bulk(None));
        }
        let mut buf = vec![0; len as usize + 2];
        self.reader.read_exact(&mut buf)?;
        buf.truncate(len as usize);
        // The tests store and read UTF-8 values only.
        Ok(Resp::Bulk(Some(String::from_utf8(buf).unwrap())))
    }
}

/// Runs one command on the master at `port` over a fresh connection.
pub fn command(port: u16, args: &[&str]) -> Resp {
    // A master that refuses the connection fails the test.
    RespConn::connect(port).unwrap().command(args)
}
