//! RESP2 encoding and parsing of lock commands and replies: commands as arrays of bulk
//! strings, replies decoded by `redis-protocol` into fred's [`Value`].
//!
//! The decoder has no limits and does not check the two bytes after a bulk string, so every
//! frame it returns is checked before it is used: a bulk string of more than [`MAX_BULK`]
//! bytes, an array of more than [`MAX_ARRAY`] elements, nesting deeper than [`MAX_DEPTH`] or
//! a bulk string not ended by CRLF is a protocol error. The decoder only ever sees input that
//! cannot hurt it: single-line replies (`+OK`, `:1`, `-ERR ...`) as they are, arrays and bulk
//! strings within a window of `DECODE_AT_ONCE` bytes (too short for deep recursion), which
//! every lock reply fits in, so those are scanned once. A reply that does not fit, or is not
//! all there yet, is first walked header by header here (no copies, no allocation), so a
//! length beyond the limits fails at once instead of waiting for the bytes it announces.
//!
//! Encoding stays here, by hand: a command is a header and its parts copied after their
//! lengths, with no allocation. The crate's encoder takes a frame, so each command would
//! first build an array of borrowed frames (an allocation), then zero-fill its room in the
//! buffer and write it (`bench/README.md`, The codec, has both measured).

use fred::bytes::Bytes;
use fred::types::Value;
use redis_protocol::resp2::decode::decode_range;
use redis_protocol::resp2::types::RangeFrame;

/// One reply: a value, or the error reply's text (`NOSCRIPT ...`, `WRONGTYPE ...`).
pub type Reply = Result<Value, String>;

/// The replies of one call, in order: inline for the one or two commands of a lock call
/// (no allocation per call).
pub type Replies = smallvec::SmallVec<[Reply; 2]>;

/// Largest bulk string a reply may announce before the connection is called broken.
pub const MAX_BULK: usize = 512 * 1024 * 1024;
/// Largest array a reply may announce.
pub const MAX_ARRAY: usize = 1 << 20;
/// Nesting deeper than this is refused (no lock reply nests at all).
pub const MAX_DEPTH: usize = 8;
/// Replies up to this long go to the decoder as they are: nesting in them cannot go deeper
/// than a quarter of it (a level takes 4 bytes), so the decoder's recursion stays short, and
/// what they announce is checked on the frame it returns. Longer replies, and replies not
/// all there yet, are walked header by header first.
const DECODE_AT_ONCE: usize = 256;
/// How much of the decoder's own error message a protocol error keeps.
const MAX_ERROR_TEXT: usize = 200;

/// Appends one command: a RESP array of bulk strings.
pub fn encode(out: &mut Vec<u8>, parts: &[&[u8]]) {
    array_header(out, parts.len());
    for part in parts {
        bulk(out, part);
    }
}

/// Appends `EVALSHA sha numkeys key... arg...`.
pub fn encode_evalsha(out: &mut Vec<u8>, sha: &str, keys: &[&[u8]], args: &[&[u8]]) {
    array_header(out, 3 + keys.len() + args.len());
    bulk(out, b"EVALSHA");
    bulk(out, sha.as_bytes());
    bulk(out, itoa::Buffer::new().format(keys.len()).as_bytes());
    for part in keys.iter().chain(args) {
        bulk(out, part);
    }
}

/// Commands encoded back to back, counted as they are added: a call waits for exactly as
/// many replies as it sent commands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Commands {
    encoded: Vec<u8>,
    count: usize,
}

impl Commands {
    /// An empty batch with room for `bytes` of RESP.
    pub fn with_capacity(bytes: usize) -> Self {
        Self {
            encoded: Vec::with_capacity(bytes),
            count: 0,
        }
    }

    /// Adds one command: a RESP array of bulk strings.
    pub fn push(&mut self, parts: &[&[u8]]) -> &mut Self {
        encode(&mut self.encoded, parts);
        self.count += 1;
        self
    }

    /// Adds `EVALSHA sha numkeys key... arg...`.
    pub fn push_evalsha(&mut self, sha: &str, keys: &[&[u8]], args: &[&[u8]]) -> &mut Self {
        encode_evalsha(&mut self.encoded, sha, keys, args);
        self.count += 1;
        self
    }

    /// How many commands the batch holds.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The batch as RESP, ready to write.
    pub fn encoded(&self) -> &[u8] {
        &self.encoded
    }
}

fn array_header(out: &mut Vec<u8>, length: usize) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn bulk(out: &mut Vec<u8>, data: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(data.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Parses one reply at the start of `input`: the reply and its length, `None` when it is
/// not all there yet, or why the bytes are not RESP2 (or break a limit).
pub fn parse(input: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    let Some(&kind) = input.first() else {
        return Ok(None);
    };
    let decoded = match kind {
        b'+' | b'-' | b':' => decode(input)?,
        b'$' | b'*' => decode_checked(input)?,
        other => return Err(format!("unexpected reply type byte {other:#04x}")),
    };
    let Some((frame, used)) = decoded else {
        return Ok(None);
    };
    Ok(Some((reply(input, frame), used)))
}

/// Decodes the array or bulk string at the start of `input`, showing the decoder no more
/// than it can safely take, and checks it against the limits.
fn decode_checked(input: &[u8]) -> Result<Option<(RangeFrame, usize)>, String> {
    let (frame, used) = match decode(&input[..input.len().min(DECODE_AT_ONCE)])? {
        Some(decoded) => decoded,
        None => {
            let Some(end) = frame_end(input, 0, 0)? else {
                return Ok(None);
            };
            // The walk found all of it: the decoder cannot want more.
            decode(&input[..end])?.ok_or("the decoder wanted more than a whole reply")?
        }
    };
    check(input, &frame, 0)?;
    Ok(Some((frame, used)))
}

fn decode(input: &[u8]) -> Result<Option<(RangeFrame, usize)>, String> {
    decode_range(input).map_err(decode_error)
}

/// Where the frame at `start` ends, once all of it is there, checking what the decoder does
/// not: the length limits, the nesting depth and the CRLF after each bulk string. Integers
/// are left to the decoder.
fn frame_end(input: &[u8], start: usize, depth: usize) -> Result<Option<usize>, String> {
    let Some(&kind) = input.get(start) else {
        return Ok(None);
    };
    if !matches!(kind, b'+' | b'-' | b':' | b'$' | b'*') {
        return Err(format!("unexpected reply type byte {kind:#04x}"));
    }
    let Some(line_end) = find_crlf(input, start + 1) else {
        return Ok(None);
    };
    let next = line_end + 2;
    let line = &input[start + 1..line_end];
    match kind {
        b'$' => match length(line, MAX_BULK, "bulk string")? {
            None => Ok(Some(next)),
            Some(length) => bulk_end(input, next + length),
        },
        b'*' => match length(line, MAX_ARRAY, "array")? {
            None => Ok(Some(next)),
            Some(_) if depth >= MAX_DEPTH => Err(format!("arrays nested deeper than {MAX_DEPTH}")),
            Some(length) => {
                let mut at = next;
                for _ in 0..length {
                    let Some(end) = frame_end(input, at, depth + 1)? else {
                        return Ok(None);
                    };
                    at = end;
                }
                Ok(Some(at))
            }
        },
        _ => Ok(Some(next)),
    }
}

/// The end of a bulk string whose data ends at `data_end`: past its CRLF.
fn bulk_end(input: &[u8], data_end: usize) -> Result<Option<usize>, String> {
    match input.get(data_end..data_end + 2) {
        None => Ok(None),
        Some(b"\r\n") => Ok(Some(data_end + 2)),
        Some(_) => Err("bulk string not ended by CRLF".into()),
    }
}

/// A bulk string's or array's announced length: `None` for null (`-1`). Digits only (no
/// sign): stricter than the decoder, never looser.
fn length(line: &[u8], max: usize, what: &str) -> Result<Option<usize>, String> {
    if line == b"-1" {
        return Ok(None);
    }
    if line.is_empty() {
        return Err(format!("{what} without a length"));
    }
    let mut length: u64 = 0;
    for &digit in line {
        if !digit.is_ascii_digit() {
            return Err(format!(
                "{what} of length {:?}",
                String::from_utf8_lossy(line)
            ));
        }
        length = length * 10 + u64::from(digit - b'0');
        if length > max as u64 {
            return Err(format!("{what} of more than {max}"));
        }
    }
    // At most `max`, a usize.
    Ok(Some(length as usize))
}

/// Where the first CRLF at or after `from` starts.
fn find_crlf(input: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    loop {
        at += input.get(at..)?.iter().position(|&b| b == b'\r')?;
        if *input.get(at + 1)? == b'\n' {
            return Some(at);
        }
        at += 1;
    }
}

fn decode_error(error: redis_protocol::error::RedisProtocolError) -> String {
    let mut text = error.to_string();
    if text.len() > MAX_ERROR_TEXT {
        let cut = (0..=MAX_ERROR_TEXT)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text.truncate(cut);
    }
    text
}

/// Checks a decoded frame against the limits, and that each bulk string in it is followed
/// by CRLF (the decoder consumed those two bytes without looking at them).
fn check(input: &[u8], frame: &RangeFrame, depth: usize) -> Result<(), String> {
    match frame {
        RangeFrame::BulkString((start, end)) => {
            if end - start > MAX_BULK {
                return Err(format!("bulk string of more than {MAX_BULK}"));
            }
            if input.get(*end..end + 2) != Some(b"\r\n") {
                return Err("bulk string not ended by CRLF".into());
            }
            Ok(())
        }
        RangeFrame::Array(frames) => {
            if depth >= MAX_DEPTH {
                return Err(format!("arrays nested deeper than {MAX_DEPTH}"));
            }
            if frames.len() > MAX_ARRAY {
                return Err(format!("array of more than {MAX_ARRAY}"));
            }
            frames
                .iter()
                .try_for_each(|frame| check(input, frame, depth + 1))
        }
        _ => Ok(()),
    }
}

/// The reply a checked frame stands for, its strings read from `input`; an error anywhere
/// in an array is the reply's error.
fn reply(input: &[u8], frame: RangeFrame) -> Reply {
    match frame {
        RangeFrame::SimpleString((start, end)) | RangeFrame::BulkString((start, end)) => {
            Ok(text_value(&input[start..end]))
        }
        RangeFrame::Error((start, end)) => {
            Err(String::from_utf8_lossy(&input[start..end]).into_owned())
        }
        RangeFrame::Integer(integer) => Ok(Value::Integer(integer)),
        RangeFrame::Null => Ok(Value::Null),
        RangeFrame::Array(frames) => {
            let mut items = Vec::with_capacity(frames.len());
            for frame in frames {
                items.push(reply(input, frame)?);
            }
            Ok(Value::Array(items))
        }
    }
}

/// A string reply as fred gives it: UTF-8 text as a string, other bytes as bytes. `OK`, the
/// reply of every granted `SET`, is fred's static value: no allocation.
fn text_value(data: &[u8]) -> Value {
    if data == b"OK" {
        return Value::new_ok();
    }
    match std::str::from_utf8(data) {
        Ok(text) => Value::from(text.to_string()),
        Err(_) => Value::Bytes(Bytes::copy_from_slice(data)),
    }
}

#[cfg(test)]
mod tests;
