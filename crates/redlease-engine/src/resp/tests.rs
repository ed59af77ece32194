use super::*;

/// The one reply `input` holds, all of it used.
fn whole(input: &[u8]) -> Reply {
    let (reply, used) = parse(input).unwrap().unwrap();
    assert_eq!(used, input.len(), "consumed all of {input:?}");
    reply
}

/// `count` arrays of one element, each inside the one before, around `:1`.
fn nested(count: usize) -> Vec<u8> {
    let mut input = b"*1\r\n".repeat(count);
    input.extend_from_slice(b":1\r\n");
    input
}

/// Every reply kind becomes the value fred would give.
#[test]
fn parses_each_reply_kind() {
    assert_eq!(whole(b"+OK\r\n").unwrap().as_str().as_deref(), Some("OK"));
    assert_eq!(whole(b":42\r\n").unwrap().as_i64(), Some(42));
    assert_eq!(whole(b":-7\r\n").unwrap().as_i64(), Some(-7));
    assert!(whole(b"$-1\r\n").unwrap().is_null());
    assert!(whole(b"*-1\r\n").unwrap().is_null());
    assert_eq!(whole(b"$0\r\n\r\n").unwrap().as_str().as_deref(), Some(""));
    assert_eq!(
        whole(b"$5\r\nab\r\nc\r\n").unwrap().as_str().as_deref(),
        Some("ab\r\nc")
    );
    assert_eq!(
        whole(b"-NOSCRIPT No matching script\r\n").unwrap_err(),
        "NOSCRIPT No matching script"
    );
    let array = whole(b"*3\r\n:1\r\n:0\r\n$1\r\nx\r\n").unwrap();
    let Value::Array(items) = array else {
        panic!("expected an array")
    };
    assert_eq!(items.len(), 3);
    assert_eq!(items[1].as_i64(), Some(0));
    assert_eq!(items[2].as_str().as_deref(), Some("x"));
    assert!(matches!(
        whole(b"$2\r\n\xff\xfe\r\n").unwrap(),
        Value::Bytes(_)
    ));
    assert_eq!(whole(b"*0\r\n").unwrap(), Value::Array(Vec::new()));
}

/// Replies read back to back: each parse takes one and says where the next starts.
#[test]
fn pipelined_replies_come_one_at_a_time() {
    let input = b":1\r\n+OK\r\n$-1\r\n*3\r\n:1\r\n:0\r\n:-1\r\n-ERR x\r\n";
    let mut at = 0;
    let mut replies = Vec::new();
    while let Some((reply, used)) = parse(&input[at..]).unwrap() {
        replies.push(reply);
        at += used;
    }
    assert_eq!(at, input.len());
    let expected = [
        Ok(Value::Integer(1)),
        Ok(Value::from("OK")),
        Ok(Value::Null),
        Ok(Value::Array(vec![1.into(), 0.into(), (-1).into()])),
        Err("ERR x".to_string()),
    ];
    assert_eq!(replies, expected);
}

/// A bulk string of `length` bytes of `x`.
fn long_bulk(length: usize) -> Vec<u8> {
    let mut input = format!("${length}\r\n").into_bytes();
    input.resize(input.len() + length, b'x');
    input.extend_from_slice(b"\r\n");
    input
}

/// A reply cut anywhere is "not yet", never a wrong reply or an error.
#[test]
fn a_partial_reply_waits_for_more() {
    let replies: [&[u8]; 8] = [
        b"*2\r\n$3\r\nabc\r\n:12\r\n",
        b"+OK\r\n",
        b":-1234\r\n",
        b"$-1\r\n",
        b"-ERR wrong\r\n",
        b"*3\r\n:1\r\n:0\r\n:-1\r\n",
        b"*2\r\n*1\r\n$2\r\n\r\n\r\n*-1\r\n",
        b"$0\r\n\r\n",
    ];
    let long_array = [b"*2\r\n".as_slice(), &long_bulk(300), b":7\r\n"].concat();
    for full in replies.into_iter().chain([long_array.as_slice()]) {
        for cut in 0..full.len() {
            assert_eq!(parse(&full[..cut]), Ok(None), "{full:?} cut at {cut}");
        }
        assert_eq!(whole(full).is_ok(), full[0] != b'-');
    }
}

/// Replies longer than the decoder's window (walked first) parse like short ones.
#[test]
fn long_replies_parse_too() {
    let bulk = long_bulk(DECODE_AT_ONCE * 4);
    assert_eq!(
        whole(&bulk).unwrap().as_str().map(|text| text.len()),
        Some(DECODE_AT_ONCE * 4)
    );
    let mut array = b"*300\r\n".to_vec();
    for i in 0..300 {
        array.extend_from_slice(format!(":{i}\r\n").as_bytes());
    }
    let Value::Array(items) = whole(&array).unwrap() else {
        panic!("expected an array")
    };
    assert_eq!(items.len(), 300);
    assert_eq!(items[299], Value::Integer(299));
    let mut pipelined = nested(MAX_DEPTH);
    pipelined.extend_from_slice(&bulk);
    let (_, used) = parse(&pipelined).unwrap().unwrap();
    assert_eq!(used, nested(MAX_DEPTH).len());
}

#[test]
fn garbage_is_a_protocol_error() {
    assert!(parse(b"!oops\r\n").is_err());
    assert!(parse(b"!").is_err());
    assert!(parse(b":12x\r\n").is_err());
    assert!(parse(b"$x\r\n").is_err());
    assert!(parse(b"$-2\r\n").is_err());
    assert!(parse(b"*2\r\n:1\r\n!oops").is_err());
    assert!(parse(b"*2\r\n:1\r\n:12x\r\n").is_err());
}

/// A bulk string announcing more than `MAX_BULK` fails at once instead of waiting for it,
/// wherever it is; one at the limit waits.
#[test]
fn a_huge_bulk_string_is_a_protocol_error() {
    let over = format!("${}\r\n", MAX_BULK + 1);
    assert!(parse(over.as_bytes()).is_err());
    assert!(parse(format!("*2\r\n:1\r\n{over}").as_bytes()).is_err());
    assert!(parse(b"$99999999999\r\n").is_err());
    assert!(parse(&[over.as_bytes(), &[b'x'; DECODE_AT_ONCE]].concat()).is_err());
    assert_eq!(parse(format!("${MAX_BULK}\r\nab").as_bytes()), Ok(None));
}

/// An array announcing more than `MAX_ARRAY` elements fails at once, wherever it is.
#[test]
fn a_huge_array_is_a_protocol_error() {
    let over = format!("*{}\r\n", MAX_ARRAY + 1);
    assert!(parse(over.as_bytes()).is_err());
    assert!(parse(format!("*1\r\n{over}").as_bytes()).is_err());
    assert_eq!(
        parse(format!("*{MAX_ARRAY}\r\n:1\r\n").as_bytes()),
        Ok(None)
    );
}

/// Arrays nest `MAX_DEPTH` deep and no deeper; too deep fails before the rest arrives.
#[test]
fn nesting_deeper_than_the_limit_is_a_protocol_error() {
    let mut value = whole(&nested(MAX_DEPTH)).unwrap();
    for _ in 0..MAX_DEPTH {
        let Value::Array(mut items) = value else {
            panic!("expected an array")
        };
        value = items.pop().unwrap();
    }
    assert_eq!(value, Value::Integer(1));
    assert!(parse(&nested(MAX_DEPTH + 1)).is_err());
    // As deep as the decoder's window holds, then deeper than it: refused either way.
    assert_eq!(nested(DECODE_AT_ONCE / 4 - 1).len(), DECODE_AT_ONCE);
    assert!(parse(&nested(DECODE_AT_ONCE / 4 - 1)).is_err());
    assert!(parse(&b"*1\r\n".repeat(10_000)).is_err());
}

/// The two bytes after a bulk string's data must be CRLF, at the top or inside an array.
#[test]
fn a_bulk_string_without_its_crlf_is_a_protocol_error() {
    assert!(parse(b"$3\r\nabcXY").is_err());
    assert!(parse(b"$3\r\nabc\n\r").is_err());
    assert!(parse(b"*2\r\n$1\r\nxYZ:1\r\n").is_err());
    assert!(parse(b"*1\r\n*1\r\n$0\r\nAB").is_err());
    let mut long = long_bulk(DECODE_AT_ONCE);
    let at = long.len() - 2;
    long[at..].copy_from_slice(b"AB");
    assert!(parse(&long).is_err());
}

#[test]
fn an_error_inside_an_array_fails_the_reply() {
    assert_eq!(whole(b"*2\r\n:1\r\n-ERR no\r\n").unwrap_err(), "ERR no");
    assert_eq!(
        whole(b"*2\r\n-ERR first\r\n*1\r\n-ERR second\r\n").unwrap_err(),
        "ERR first"
    );
    assert_eq!(whole(b"-ERR \xff\r\n").unwrap_err(), "ERR \u{fffd}");
}

#[test]
fn encodes_commands_as_bulk_arrays() {
    let mut out = Vec::new();
    encode(&mut out, &[b"INCR", b"fence"]);
    assert_eq!(out, b"*2\r\n$4\r\nINCR\r\n$5\r\nfence\r\n");
    out.clear();
    encode_evalsha(&mut out, "abc", &[b"k"], &[b"v", b"-3"]);
    assert_eq!(
        out,
        b"*6\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n1\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\n-3\r\n"
    );
}

/// What we encode, we parse back as the same parts.
#[test]
fn encoded_commands_parse_back() {
    let mut out = Vec::new();
    encode(&mut out, &[b"SET", b"k", b"\xff\r\n", b""]);
    let expected = Value::Array(vec![
        "SET".into(),
        "k".into(),
        Value::Bytes(Bytes::from_static(b"\xff\r\n")),
        "".into(),
    ]);
    assert_eq!(whole(&out), Ok(expected));
}
