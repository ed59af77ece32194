//! The fleet marker (`<prefix>fleet` on every master), pure: which fleet a master belongs to,
//! the quarantine period that fleet agreed on at its birth, and the server process (`run_id`)
//! that was made a member — or is serving a quarantine.
//!
//! The value is one line of text, readable with `redis-cli GET redlease:fleet`:
//! `fleet=<id> quarantine_ms=<n> member=<run_id>`, or `… quarantined=<run_id>` while the
//! server process `run_id` serves a restart quarantine. A fleet's id is derived from the
//! `run_id`s of the masters that answered at its birth ([`fleet_id`]), so two processes that
//! find the same fresh fleet at the same moment write the same marker.

use std::fmt;
use std::time::Duration;

/// What the marker says of the server process it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Membership {
    /// Made a member under this `run_id`: votes (unless other evidence says otherwise).
    Member(String),
    /// Serving a quarantine begun on this `run_id` (the `<prefix>quarantined` record says
    /// until when); its fence counter is raised before it votes again.
    Quarantined(String),
}

impl Membership {
    /// The server process the marker names.
    pub fn run_id(&self) -> &str {
        match self {
            Self::Member(run_id) | Self::Quarantined(run_id) => run_id,
        }
    }
}

/// A parsed fleet marker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetMark {
    /// The fleet this master belongs to.
    pub fleet: String,
    /// The fleet's quarantine period, written at its birth.
    pub quarantine: Duration,
    /// The marked master's standing: a member, or quarantined by a named process.
    pub membership: Membership,
}

/// A fleet as every process must agree on it: its id and its quarantine period.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Birth {
    /// The fleet's id (FNV-1a/128 of the birth masters' `run_id`s, hex).
    pub fleet: String,
    /// The fleet's restart quarantine, written at birth.
    pub quarantine: Duration,
}

// === impl FleetMark ===

impl FleetMark {
    /// The marker of server `run_id` as a member of `birth`'s fleet.
    pub fn member(birth: &Birth, run_id: &str) -> Self {
        Self::of(birth, Membership::Member(run_id.to_string()))
    }

    /// The marker of server `run_id` serving a quarantine in `birth`'s fleet.
    pub fn quarantined(birth: &Birth, run_id: &str) -> Self {
        Self::of(birth, Membership::Quarantined(run_id.to_string()))
    }

    fn of(birth: &Birth, membership: Membership) -> Self {
        Self {
            fleet: birth.fleet.clone(),
            quarantine: birth.quarantine,
            membership,
        }
    }

    /// Reads a marker's text; `None` for anything else (a marker of an older redlease, or a
    /// value nobody should have written there).
    pub fn parse(text: &str) -> Option<Self> {
        let mut fields = text.split(' ');
        let fleet = fields.next()?.strip_prefix("fleet=")?;
        let quarantine_ms = fields.next()?.strip_prefix("quarantine_ms=")?;
        let (kind, run_id) = fields.next()?.split_once('=')?;
        let valid = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric());
        if fields.next().is_some() || !valid(fleet) || !valid(run_id) {
            return None;
        }
        let quarantine = Duration::from_millis(quarantine_ms.parse().ok()?);
        let membership = match kind {
            "member" => Membership::Member(run_id.to_string()),
            "quarantined" => Membership::Quarantined(run_id.to_string()),
            _ => return None,
        };
        Some(Self {
            fleet: fleet.to_string(),
            quarantine,
            membership,
        })
    }

    /// The fleet this marker belongs to.
    pub fn birth(&self) -> Birth {
        Birth {
            fleet: self.fleet.clone(),
            quarantine: self.quarantine,
        }
    }
}

impl fmt::Display for FleetMark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, run_id) = match &self.membership {
            Membership::Member(run_id) => ("member", run_id),
            Membership::Quarantined(run_id) => ("quarantined", run_id),
        };
        let ms = self.quarantine.as_millis();
        write!(f, "fleet={} quarantine_ms={ms} {kind}={run_id}", self.fleet)
    }
}

/// The id of a fleet born from the server processes `run_ids` (any order): 32 hex digits of
/// FNV-1a/128 over the sorted ids, the same in every process and every build.
pub fn fleet_id(run_ids: &[&str]) -> String {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let mut sorted = run_ids.to_vec();
    sorted.sort_unstable();
    let mut hash = OFFSET;
    for byte in sorted.join(",").bytes() {
        hash = (hash ^ u128::from(byte)).wrapping_mul(PRIME);
    }
    format!("{hash:032x}")
}

/// The fleet every marker in `marks` agrees on: one fleet id, and the longest quarantine any
/// of them carries (processes that raced at the birth with different settings converge on
/// the longer one). `Err` with two different ids (one master of each) when they disagree;
/// `Ok(None)` when `marks` is empty.
pub fn agreed<'a>(
    marks: impl IntoIterator<Item = (usize, &'a FleetMark)>,
) -> Result<Option<Birth>, Conflict> {
    let mut agreed: Option<(usize, Birth)> = None;
    for (index, mark) in marks {
        match &mut agreed {
            None => agreed = Some((index, mark.birth())),
            Some((first, birth)) if birth.fleet != mark.fleet => {
                return Err(Conflict {
                    first: (*first, birth.fleet.clone()),
                    second: (index, mark.fleet.clone()),
                })
            }
            Some((_, birth)) => birth.quarantine = birth.quarantine.max(mark.quarantine),
        }
    }
    Ok(agreed.map(|(_, birth)| birth))
}

/// Two masters of one configured fleet that carry the markers of two different fleets: the
/// master index and fleet id of each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// One master (its index) and the fleet id its marker names.
    pub first: (usize, String),
    /// Another master and the other fleet id.
    pub second: (usize, String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn birth() -> Birth {
        Birth {
            fleet: fleet_id(&["b", "a"]),
            quarantine: Duration::from_secs(300),
        }
    }

    /// A marker reads back as written, in both standings.
    #[test]
    fn a_marker_reads_back_as_written() {
        for mark in [
            FleetMark::member(&birth(), "abc123"),
            FleetMark::quarantined(&birth(), "abc123"),
        ] {
            assert_eq!(FleetMark::parse(&mark.to_string()), Some(mark));
        }
        let text = FleetMark::member(&birth(), "r1").to_string();
        assert_eq!(
            text,
            format!("fleet={} quarantine_ms=300000 member=r1", birth().fleet)
        );
    }

    /// The bare `run_id` an older redlease wrote, and anything malformed, is not a marker.
    #[test]
    fn anything_else_is_not_a_marker() {
        for text in [
            "0123456789abcdef",
            "quarantined:abc",
            "fleet=x quarantine_ms=1 member=",
            "fleet=x quarantine_ms=-1 member=r",
            "fleet=x quarantine_ms=1 owner=r",
            "fleet=x quarantine_ms=1 member=r extra",
            "fleet=x y quarantine_ms=1 member=r",
            "",
        ] {
            assert_eq!(FleetMark::parse(text), None, "{text:?}");
        }
    }

    /// The id depends on the set of run ids, not their order, and differs between sets.
    #[test]
    fn the_fleet_id_is_the_same_in_every_process() {
        assert_eq!(fleet_id(&["a", "b", "c"]), fleet_id(&["c", "a", "b"]));
        assert_ne!(fleet_id(&["a", "b", "c"]), fleet_id(&["a", "b", "d"]));
        assert_eq!(fleet_id(&["a"]).len(), 32);
    }

    /// One id among the markers agrees (on the longest quarantine); two ids conflict.
    #[test]
    fn markers_agree_on_one_fleet_or_conflict() {
        let long = Birth {
            quarantine: Duration::from_secs(600),
            ..birth()
        };
        let marks = [
            FleetMark::member(&birth(), "r1"),
            FleetMark::member(&long, "r2"),
        ];
        let agreed_on = agreed(marks.iter().enumerate()).unwrap();
        assert_eq!(agreed_on, Some(long));
        let other = Birth {
            fleet: fleet_id(&["z"]),
            ..birth()
        };
        let mixed = [marks[0].clone(), FleetMark::member(&other, "r3")];
        let conflict = agreed(mixed.iter().enumerate()).unwrap_err();
        assert_eq!(conflict.first, (0, birth().fleet));
        assert_eq!(conflict.second, (1, other.fleet));
        assert_eq!(agreed(std::iter::empty()), Ok(None));
    }
}
