//! The lease id (128 random bits, 32 lowercase hex digits) and the value stored in lock keys.
//!
//! The stored value is `<lease id>|<owner>`: every compare in the scripts is on the lease id
//! prefix, so a caller that knows only the lease id can extend or release, and inspection can
//! still tell who holds a lock.

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// Unique id of one acquisition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeaseId(u128);

// === impl LeaseId ===

impl LeaseId {
    /// A fresh random id from the thread-local CSPRNG.
    pub fn random() -> Self {
        Self(rand::random())
    }

    /// The id as a number (a semaphore picks the slot it tries first from it).
    pub fn as_u128(&self) -> u128 {
        self.0
    }

    /// `<32 hex digits>|<owner>`: the value every lock key of the lease holds.
    pub fn value_for(&self, owner: &str) -> String {
        let mut value = String::with_capacity(33 + owner.len());
        value.push_str(self.hex().as_str());
        value.push('|');
        value.push_str(owner);
        value
    }

    /// The 32 lowercase hex digits, without the formatting machinery (every acquisition and
    /// release writes them).
    pub fn hex(&self) -> Hex {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut digits = [0u8; 32];
        // Byte by byte, two digits each (a shift of the whole u128 per digit costs more).
        for (pair, byte) in digits.chunks_exact_mut(2).zip(self.0.to_be_bytes()) {
            pair[0] = DIGITS[usize::from(byte >> 4)];
            pair[1] = DIGITS[usize::from(byte & 0xf)];
        }
        Hex(digits)
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.hex().as_str())
    }
}

/// A lease id's 32 lowercase hex digits, on the stack.
#[derive(Clone, Copy)]
pub struct Hex([u8; 32]);

impl Hex {
    /// The id as 32 lowercase hex digits.
    pub fn as_str(&self) -> &str {
        // Every byte is one of the 16 ASCII hex digits written by `LeaseId::hex`.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl FromStr for LeaseId {
    type Err = Error;

    /// 32 lowercase hex digits, read in one pass (every `DELETE` of a lease reads one).
    fn from_str(s: &str) -> Result<Self, Error> {
        if s.len() != 32 {
            return Err(Error::InvalidLeaseId);
        }
        let digit = |byte: u8| match byte {
            b'0'..=b'9' => Some(byte - b'0'),
            b'a'..=b'f' => Some(byte - b'a' + 10),
            _ => None,
        };
        s.bytes()
            .try_fold(0u128, |id, byte| Some(id << 4 | u128::from(digit(byte)?)))
            .map(Self)
            .ok_or(Error::InvalidLeaseId)
    }
}

/// Splits a stored lock value into lease id and owner; `None` for a value redlease did not write.
pub fn parse_value(value: &str) -> Option<(LeaseId, &str)> {
    let (id, owner) = value.split_once('|')?;
    Some((id.parse().ok()?, owner))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lease id prints as 32 hex digits and parses back to itself.
    #[test]
    fn lease_id_round_trips_through_text() {
        let id = LeaseId::random();
        let text = id.to_string();
        assert_eq!(text.len(), 32);
        assert_eq!(text.parse::<LeaseId>().unwrap(), id);
        assert_eq!(parse_value(&id.value_for("a|b")), Some((id, "a|b")));
        assert_eq!(text, format!("{:032x}", id.0));
        let every_digit = LeaseId(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
        assert_eq!(every_digit.to_string(), "0123456789abcdeffedcba9876543210");
        assert_eq!(
            "0123456789abcdeffedcba9876543210"
                .parse::<LeaseId>()
                .unwrap(),
            every_digit
        );
        assert_eq!(
            "f".repeat(32).parse::<LeaseId>().unwrap(),
            LeaseId(u128::MAX)
        );
        let small = LeaseId(0xabc);
        assert_eq!(small.to_string(), format!("{}abc", "0".repeat(29)));
    }

    /// Malformed ids are refused, never truncated.
    #[test]
    fn malformed_lease_ids_are_refused() {
        let plus = format!("+{}", "0".repeat(31));
        let accent = format!("\u{e9}{}", "0".repeat(30));
        let space = format!(" {}", "0".repeat(31));
        for bad in [
            "",
            "abc",
            &"G".repeat(32),
            &"A".repeat(32),
            &"0".repeat(33),
            &plus,
            &accent,
            &space,
        ] {
            assert!(bad.parse::<LeaseId>().is_err(), "{bad}");
        }
    }
}
