//! Request paths: the base URL's path with segments appended, each percent-encoded so that
//! the sidecar decodes exactly the segment given, whatever its characters (a resource named
//! `.` or `..` included, which a URL would take for a directory).

use std::fmt::Write;
use std::sync::Arc;

/// The base URL's path without its trailing slash (empty for `/`), to which segments are
/// appended. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct BasePath(Arc<str>);

impl BasePath {
    pub(crate) fn of(url: &url::Url) -> Self {
        let path = url.path();
        Self(Arc::from(path.strip_suffix('/').unwrap_or(path)))
    }

    /// The base path with `segments` appended, each percent-encoded.
    pub(crate) fn join(&self, segments: &[&str]) -> String {
        let room = segments.iter().map(|s| s.len() + 1).sum::<usize>();
        let mut path = String::with_capacity(self.0.len() + room);
        path.push_str(&self.0);
        for segment in segments {
            path.push('/');
            push_segment(&mut path, segment);
        }
        path
    }
}

/// Appends `segment` percent-encoded: the bytes of RFC 3986's `pchar` as they are but `%`,
/// every other byte as `%XX`; a segment of one or two dots alone is encoded whole.
fn push_segment(path: &mut String, segment: &str) {
    if matches!(segment, "." | "..") {
        for byte in segment.bytes() {
            push_encoded(path, byte);
        }
        return;
    }
    // Runs of plain bytes are copied whole. Plain bytes are ASCII, so a run starts and ends
    // on character boundaries (the bytes of a multi-byte character are all encoded).
    let bytes = segment.as_bytes();
    let mut run_start = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        if !is_plain(byte) {
            // Within a multi-byte character the run is empty, and not sliced.
            if run_start < at {
                path.push_str(&segment[run_start..at]);
            }
            push_encoded(path, byte);
            run_start = at + 1;
        }
    }
    if run_start < bytes.len() {
        path.push_str(&segment[run_start..]);
    }
}

/// Appends `byte` as `%XX`.
fn push_encoded(path: &mut String, byte: u8) {
    // Writing to a `String` cannot fail.
    let _ = write!(path, "%{byte:02X}");
}

/// Unreserved characters, sub-delimiters, `:` and `@`: what a path segment carries as is.
fn is_plain(byte: u8) -> bool {
    byte.is_ascii_alphanumeric()
        || matches!(
            byte,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(url: &str) -> BasePath {
        BasePath::of(&url::Url::parse(url).unwrap())
    }

    /// `%XX` sequences back to their bytes, as the sidecar's router decodes a segment.
    fn decode(segment: &str) -> String {
        let bytes = segment.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap()
    }

    /// Every segment decodes back to itself, alone in its place; the result is a valid URI
    /// path.
    #[test]
    fn segments_decode_back_to_themselves() {
        let names = [
            ".",
            "..",
            "...",
            "a.",
            "..a",
            "a/b",
            "100%",
            "?#",
            "[v]^|{}",
            "é ü",
            "a\tb\n",
            "a;b=c:d@e",
            "\u{202e}",
            "éa",
            "aé",
            "a€b%c",
        ];
        for name in names {
            let path = base("http://localhost:7600").join(&["v1", "locks", name, "acquire"]);
            let segments: Vec<&str> = path.split('/').collect();
            assert_eq!(segments.len(), 5, "{path}");
            assert_eq!((segments[0], segments[1], segments[2]), ("", "v1", "locks"));
            assert_eq!(decode(segments[3]), name, "{path}");
            assert_eq!(segments[4], "acquire");
            assert!(!matches!(segments[3], "." | ".."), "{path}");
            assert!(path.parse::<hyper::Uri>().is_ok(), "{path}");
        }
    }

    /// Names of plain characters are sent as they are, after the base URL's own path.
    #[test]
    fn plain_names_are_sent_as_they_are_after_the_base_path() {
        let join = |url: &str| base(url).join(&["v1", "locks", "payments:close-1.x", "acquire"]);
        assert_eq!(join("http://h/"), "/v1/locks/payments:close-1.x/acquire");
        assert_eq!(join("http://h"), "/v1/locks/payments:close-1.x/acquire");
        assert_eq!(
            join("http://h/redlease/"),
            "/redlease/v1/locks/payments:close-1.x/acquire"
        );
        assert_eq!(
            join("http://h/redlease"),
            "/redlease/v1/locks/payments:close-1.x/acquire"
        );
        assert_eq!(base("http://h/").join(&["a b"]), "/a%20b");
    }
}
