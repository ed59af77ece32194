//! Key and channel names on each master, and validation of resource names and owners.

use crate::Error;

/// Default prefix of every key redlease writes.
pub const DEFAULT_PREFIX: &str = "redlease:";
/// Longest resource name accepted, in bytes.
pub const MAX_RESOURCE_BYTES: usize = 512;
/// Longest owner accepted, in bytes.
pub const MAX_OWNER_BYTES: usize = 256;
/// Longest actor or reason of a force release accepted, in bytes.
pub const MAX_AUDIT_TEXT_BYTES: usize = 512;
/// The largest limit a counting semaphore may have: its acquisition reads every slot of the
/// semaphore on each master, to refuse a limit other than the one its holders use.
pub const MAX_SEMAPHORE_LIMIT: u32 = 64;
/// The most readers a read-write lock has at once: a reader holds one of these slots, and a
/// writer's acquisition reads every one of them on each master.
pub const MAX_READERS: u32 = 64;
/// Longest value an election's leader may proclaim, in bytes.
pub const MAX_ELECTION_VALUE_BYTES: usize = 4096;
/// Separates a resource from the kind in a lock name. A control character, which no resource
/// may contain ([`validate_resource`]), so no caller can name another kind's keys.
const KIND_SEPARATOR: char = '\u{1f}';

/// What a lock name locks: a resource's exclusive lock, one slot of its counting semaphore, or
/// its election.
/// Every kind is a lock key holding `<lease id>|<owner>…` with a TTL, so extending, shadowing,
/// releasing, force-releasing and inspecting a lease work alike for every kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockKind {
    /// The resource's exclusive lock, `<prefix>lock:<resource>`: the lock name is the resource.
    Exclusive,
    /// Slot `n` of the resource's counting semaphore, `<prefix>sem:<resource>:<n>`.
    Slot(u32),
    /// Two or more slots of the resource's counting semaphore held by one lease (a lease of
    /// `permits: k`): each slot's own key, every one holding the lease. A set of one slot is
    /// [`LockKind::Slot`].
    Slots(SlotSet),
    /// The writer of the resource's read-write lock, `<prefix>rw:<resource>:w`.
    Writer,
    /// Reader slot `n` of the resource's read-write lock, `<prefix>rw:<resource>:r<n>`.
    Reader(u32),
    /// The resource's election, `<prefix>elect:<resource>`: an exclusive lock whose value also
    /// carries the leader's term and proclaimed value.
    Election,
}

/// A set of semaphore slots (each below [`MAX_SEMAPHORE_LIMIT`]), as a bit mask.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotSet(u64);

// === impl SlotSet ===

impl SlotSet {
    /// The set of `slot` alone; empty for a slot at or above [`MAX_SEMAPHORE_LIMIT`].
    pub fn single(slot: u32) -> Self {
        Self::default().with(slot)
    }

    /// This set and `slot` (unchanged for a slot at or above [`MAX_SEMAPHORE_LIMIT`]).
    pub fn with(self, slot: u32) -> Self {
        match slot < MAX_SEMAPHORE_LIMIT {
            true => Self(self.0 | 1 << slot),
            false => self,
        }
    }

    /// How many slots it holds.
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether it holds no slot.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether it holds `slot`.
    pub fn contains(self, slot: u32) -> bool {
        slot < MAX_SEMAPHORE_LIMIT && self.0 & 1 << slot != 0
    }

    /// Its lowest slot, `None` when empty.
    pub fn lowest(self) -> Option<u32> {
        (!self.is_empty()).then(|| self.0.trailing_zeros())
    }

    /// Its slots, ascending.
    pub fn iter(self) -> impl Iterator<Item = u32> {
        (0..MAX_SEMAPHORE_LIMIT).filter(move |&slot| self.contains(slot))
    }

    /// The lock kind of a lease holding these slots: [`LockKind::Slot`] for one slot,
    /// [`LockKind::Slots`] for more; `None` when empty.
    pub fn kind(self) -> Option<LockKind> {
        match self.len() {
            0 => None,
            1 => self.lowest().map(LockKind::Slot),
            _ => Some(LockKind::Slots(self)),
        }
    }
}

/// Its slots, ascending, comma-separated (`2,9,40`): as a lock name lists them.
impl std::fmt::Display for SlotSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (n, slot) in self.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            f.write_str(itoa::Buffer::new().format(slot))?;
        }
        Ok(())
    }
}

impl FromIterator<u32> for SlotSet {
    fn from_iter<I: IntoIterator<Item = u32>>(slots: I) -> Self {
        slots.into_iter().fold(Self::default(), Self::with)
    }
}

impl LockKind {
    /// The semaphore slots a lease of this kind holds (empty for other kinds).
    pub fn slots(self) -> SlotSet {
        match self {
            Self::Slot(slot) => SlotSet::single(slot),
            Self::Slots(set) => set,
            _ => SlotSet::default(),
        }
    }
}

/// A lock name split into its resource and kind (see [`lock_name`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockName<'a> {
    /// The resource, as its callers name it.
    pub resource: &'a str,
    /// Which of the resource's locks.
    pub kind: LockKind,
}

/// The lock name of `kind` on `resource`: the resource itself for its exclusive lock,
/// `<resource>\u{1f}s<n>` for semaphore slot `n` (`s<n>,<m>,…` for several, ascending),
/// `<resource>\u{1f}e` for its election. The engine takes a lock name wherever it takes a
/// lease's resource.
pub fn lock_name(resource: &str, kind: LockKind) -> String {
    match kind {
        LockKind::Exclusive => resource.to_string(),
        LockKind::Slot(slot) => format!("{resource}{KIND_SEPARATOR}s{slot}"),
        LockKind::Slots(set) => format!("{resource}{KIND_SEPARATOR}s{set}"),
        LockKind::Writer => format!("{resource}{KIND_SEPARATOR}w"),
        LockKind::Reader(slot) => format!("{resource}{KIND_SEPARATOR}r{slot}"),
        LockKind::Election => format!("{resource}{KIND_SEPARATOR}{ELECTION_KIND}"),
    }
}

/// The kind part of an election's lock name.
const ELECTION_KIND: &str = "e";

/// The resource and kind of a lock name; `None` for a name no kind makes.
pub fn parse_lock_name(name: &str) -> Option<LockName<'_>> {
    let Some((resource, kind)) = name.split_once(KIND_SEPARATOR) else {
        return Some(LockName {
            resource: name,
            kind: LockKind::Exclusive,
        });
    };
    if kind == ELECTION_KIND {
        return Some(LockName {
            resource,
            kind: LockKind::Election,
        });
    }
    let number = |digits: &str| -> Option<u32> {
        let digits_only = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
        digits.parse().ok().filter(|_| digits_only)
    };
    let kind = match kind.split_at_checked(1)? {
        ("w", "") => LockKind::Writer,
        ("s", slots) if slots.contains(',') => {
            // Only the form `lock_name` writes: two or more slots, strictly ascending.
            let mut set = SlotSet::default();
            let mut last = None;
            for slot in slots.split(',') {
                let slot = number(slot).filter(|&n| n < MAX_SEMAPHORE_LIMIT)?;
                if last.is_some_and(|last| slot <= last) {
                    return None;
                }
                last = Some(slot);
                set = set.with(slot);
            }
            LockKind::Slots(set)
        }
        ("s", slot) => LockKind::Slot(number(slot).filter(|&n| n < MAX_SEMAPHORE_LIMIT)?),
        ("r", slot) => LockKind::Reader(number(slot).filter(|&n| n < MAX_READERS)?),
        _ => return None,
    };
    Some(LockName { resource, kind })
}

/// A lock name is a valid resource, alone or with a kind ([`lock_name`]).
pub fn validate_lock_name(name: &str) -> Result<(), Error> {
    let parsed = parse_lock_name(name).ok_or(Error::InvalidResource("unknown lock kind"))?;
    validate_resource(parsed.resource)
}

/// A lock name of one lock (one key on each master): any lock name but a lease's set of
/// several semaphore slots, whose slots are each inspected and forced on their own.
pub fn validate_one_lock_name(name: &str) -> Result<(), Error> {
    validate_lock_name(name)?;
    match parse_lock_name(name).map(|parsed| parsed.kind) {
        Some(LockKind::Slots(_)) => Err(Error::InvalidResource("names several slots, not one")),
        _ => Ok(()),
    }
}

/// The names of everything one resource touches on a master.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceKeys {
    /// `<prefix>lock:<resource>`: holds the lease value (and, for a degraded lease, is its
    /// shadow: the same key kept for the shadow TTL).
    pub lock: String,
    /// `<prefix>fence`: the master's fencing counter (one per master, no TTL).
    pub fence: String,
    /// `<prefix>released:<resource>`: pub/sub channel announcing releases.
    pub released_channel: String,
}

/// Builds key names under one prefix.
#[derive(Clone, Debug)]
pub struct Keyspace {
    prefix: String,
}

// === impl Keyspace ===

impl Keyspace {
    /// Key names under `prefix` (`redlease:` by default).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// The prefix every key and channel starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The keys of `resource`, which must already be validated.
    pub fn resource(&self, resource: &str) -> ResourceKeys {
        ResourceKeys {
            lock: self.lock(resource),
            fence: self.fence(),
            released_channel: self.released_channel(resource),
        }
    }

    /// The lock keys of a lock name ([`lock_name`]): its one key ([`Keyspace::lock`]), or each
    /// slot's key for a lease holding several slots of a semaphore ([`LockKind::Slots`]).
    pub fn locks(&self, name: &str) -> Vec<String> {
        match parse_lock_name(name) {
            Some(LockName {
                resource,
                kind: LockKind::Slots(set),
            }) => {
                let base = self.semaphore_slots(resource);
                let key = |slot| format!("{base}{slot}");
                set.iter().map(key).collect()
            }
            _ => vec![self.lock(name)],
        }
    }

    /// The lock key of a lock name ([`lock_name`]): `<prefix>lock:<resource>` for an exclusive
    /// lock (renewals need no other key), `<prefix>sem:<resource>:<n>` for a semaphore slot,
    /// `<prefix>elect:<resource>` for an election. A name of several slots has one key per
    /// slot ([`Keyspace::locks`]); this is its lowest slot's.
    pub fn lock(&self, name: &str) -> String {
        let Some(LockName { resource, kind }) = parse_lock_name(name) else {
            return self.join("lock:", name);
        };
        let (mut key, slot) = match kind {
            LockKind::Exclusive => return self.join("lock:", name),
            LockKind::Slot(slot) => (self.semaphore_slots(resource), slot),
            LockKind::Slots(set) => (self.semaphore_slots(resource), set.lowest().unwrap_or(0)),
            LockKind::Writer => {
                let mut key = self.read_write(resource);
                key.push('w');
                return key;
            }
            LockKind::Election => return self.join("elect:", resource),
            LockKind::Reader(slot) => {
                let mut key = self.read_write(resource);
                key.push('r');
                (key, slot)
            }
        };
        key.push_str(itoa::Buffer::new().format(slot));
        key
    }

    /// `<prefix>rw:<resource>:`, which `w` (the writer), `r<n>` (reader slot `n`) and `wi`
    /// (a waiting writer's intent) follow in the read-write lock's keys.
    pub fn read_write(&self, resource: &str) -> String {
        let mut base = self.join("rw:", resource);
        base.push(':');
        base
    }

    /// `<prefix>sem:<resource>:`, which a slot's number follows in its key.
    pub fn semaphore_slots(&self, resource: &str) -> String {
        let mut base = self.join("sem:", resource);
        base.push(':');
        base
    }

    /// The channel a release of lock `name` is announced on (a release needs no fence key):
    /// `<prefix>released:<resource>` for an exclusive lock; one channel for every slot of a
    /// semaphore, `<prefix>released:<resource>\u{1f}s`, so its waiters hear any slot freed;
    /// one for a read-write lock's writer and readers, `<prefix>released:<resource>\u{1f}rw`.
    /// `<prefix>released:<resource>\u{1f}e` for an election, where proclamations are announced
    /// too (its observers hear both).
    pub fn released_channel(&self, name: &str) -> String {
        self.join("released:", &waiting_name(name))
    }

    /// `<prefix>queue:<name>` and `<prefix>beats:<name>`: the fair waiters of a lock (its
    /// [`waiting_name`]) by ticket, and their heartbeat deadlines.
    pub fn fair_queue(&self, name: &str) -> (String, String) {
        (self.join("queue:", name), self.join("beats:", name))
    }

    /// `<prefix>revocations`: the lease ids force releases revoke, for their holders.
    pub fn revocations_channel(&self) -> String {
        self.join("revocations", "")
    }

    /// `<prefix>fence`: each master's fence counter.
    pub fn fence(&self) -> String {
        self.join("fence", "")
    }

    /// `<prefix>revoked:`: followed by a lease id, marks a force-released lease for as long
    /// as its holder could still send shadow reservations.
    pub fn revoked_prefix(&self) -> String {
        self.join("revoked:", "")
    }

    /// `<prefix>audit`: the capped stream of force releases on each master.
    pub fn audit(&self) -> String {
        self.join("audit", "")
    }

    /// The resource a lock key names, `None` for a key outside `<prefix>lock:`.
    pub fn resource_of<'a>(&self, lock_key: &'a str) -> Option<&'a str> {
        lock_key
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix("lock:")
    }

    /// The lock name of a lock key of any kind (see [`Keyspace::lock`]), `None` for a key
    /// that is not one.
    pub fn lock_name_of(&self, key: &str) -> Option<String> {
        if let Some(resource) = self.resource_of(key) {
            return Some(resource.to_string());
        }
        let rest = key.strip_prefix(self.prefix.as_str())?;
        if let Some(resource) = rest.strip_prefix("elect:") {
            return Some(lock_name(resource, LockKind::Election));
        }
        let (resource, kind) = match (rest.strip_prefix("sem:"), rest.strip_prefix("rw:")) {
            (Some(slot_key), _) => {
                let (resource, slot) = slot_key.rsplit_once(':')?;
                (resource, format!("s{slot}"))
            }
            (None, Some(rw_key)) => {
                let (resource, kind) = rw_key.rsplit_once(':')?;
                (resource, kind.to_string())
            }
            (None, None) => return None,
        };
        let name = format!("{resource}{KIND_SEPARATOR}{kind}");
        parse_lock_name(&name).is_some().then_some(name)
    }

    /// `<prefix>fleet`: set (no TTL) on every master adopted into the fleet; a master that
    /// lacks it while others have it has lost its memory (restart quarantine).
    pub fn marker(&self) -> String {
        self.join("fleet", "")
    }

    /// `<prefix>quarantined`: the `run_id` of a server in its restart quarantine, expiring when
    /// the quarantine ends, so every process serves out the same one.
    pub fn quarantined(&self) -> String {
        self.join("quarantined", "")
    }

    /// `<prefix>probe:<nonce>`: the one key the start-up's permission check writes (for at
    /// most 10 s, deleted at the end of the check).
    pub fn probe(&self, nonce: &str) -> String {
        self.join("probe:", nonce)
    }

    /// `<prefix><kind><name>` in one allocation (built on every acquisition and release).
    fn join(&self, kind: &str, name: &str) -> String {
        let mut key = String::with_capacity(self.prefix.len() + kind.len() + name.len());
        key.push_str(&self.prefix);
        key.push_str(kind);
        key.push_str(name);
        key
    }
}

impl Default for Keyspace {
    fn default() -> Self {
        Self::new(DEFAULT_PREFIX)
    }
}

/// The name a lock's waiters queue under in this process, and whose channel announces its
/// releases: the lock name of an exclusive lock, `<resource>\u{1f}s` for every slot of a
/// semaphore, `<resource>\u{1f}rw` for a read-write lock's writer and readers.
pub fn waiting_name(name: &str) -> std::borrow::Cow<'_, str> {
    match parse_lock_name(name) {
        Some(LockName {
            resource,
            kind: LockKind::Slot(_) | LockKind::Slots(_),
        }) => name[..resource.len() + KIND_SEPARATOR.len_utf8() + 1].into(),
        Some(LockName {
            resource,
            kind: LockKind::Writer | LockKind::Reader(_),
        }) => format!("{resource}{KIND_SEPARATOR}rw").into(),
        _ => name.into(),
    }
}

/// A resource name is 1–512 bytes of UTF-8 without control characters.
pub fn validate_resource(resource: &str) -> Result<(), Error> {
    validate_text(resource, MAX_RESOURCE_BYTES).map_err(Error::InvalidResource)
}

/// An owner is 1–256 bytes of UTF-8 without control characters.
pub fn validate_owner(owner: &str) -> Result<(), Error> {
    validate_text(owner, MAX_OWNER_BYTES).map_err(Error::InvalidOwner)
}

/// An election's proclaimed value is 0–4096 bytes of UTF-8 without control characters (the
/// stored value separates it from the term with one).
pub fn validate_value(value: &str) -> Result<(), Error> {
    if value.len() > MAX_ELECTION_VALUE_BYTES {
        return Err(Error::InvalidValue("too long"));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::InvalidValue("must not contain control characters"));
    }
    Ok(())
}

/// A force release's actor (who) is 1–512 bytes of UTF-8 without control characters.
pub fn validate_actor(actor: &str) -> Result<(), Error> {
    validate_text(actor, MAX_AUDIT_TEXT_BYTES).map_err(Error::InvalidActor)
}

/// A force release's reason (why) is 1–512 bytes of UTF-8 without control characters.
pub fn validate_reason(reason: &str) -> Result<(), Error> {
    validate_text(reason, MAX_AUDIT_TEXT_BYTES).map_err(Error::InvalidReason)
}

/// A prefix of resource names (inventory) follows the rules of a resource name.
pub fn validate_prefix(prefix: &str) -> Result<(), Error> {
    validate_text(prefix, MAX_RESOURCE_BYTES).map_err(Error::InvalidPrefix)
}

fn validate_text(text: &str, max_bytes: usize) -> Result<(), &'static str> {
    if text.is_empty() {
        return Err("must not be empty");
    }
    if text.len() > max_bytes {
        return Err("too long");
    }
    // Most names are ASCII: its control characters are C0 and DEL, and it has no format
    // characters (the first is U+00AD), so a check of the bytes decides, at a word a time.
    if text.is_ascii() {
        return match text.bytes().any(|b| b.is_ascii_control()) {
            true => Err("must not contain control characters"),
            false => Ok(()),
        };
    }
    if text.chars().any(char::is_control) {
        return Err("must not contain control characters");
    }
    if text.chars().any(is_invisible_format) {
        return Err("must not contain format characters or line separators");
    }
    Ok(())
}

/// Unicode format characters (general category Cf: bidirectional overrides such as U+202E,
/// zero-width characters, the byte-order mark, tag characters) and the line and paragraph
/// separators (U+2028, U+2029): they change how a log line or a terminal shows the text
/// around them, so a name could pass for another or forge a log line.
pub fn is_invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{600}'..='\u{605}'
            | '\u{61c}'
            | '\u{6dd}'
            | '\u{70f}'
            | '\u{890}'..='\u{891}'
            | '\u{8e2}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{110bd}'
            | '\u{110cd}'
            | '\u{13430}'..='\u{1343f}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0001}'
            | '\u{e0020}'..='\u{e007f}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bidirectional overrides, zero-width characters, the BOM and line separators are refused
    /// in resources and owners; ordinary non-ASCII text is not.
    #[test]
    fn invisible_format_characters_are_refused() {
        for bad in [
            "job\u{202e}txt",
            "a\u{200b}b",
            "\u{feff}x",
            "x\u{2028}y",
            "t\u{e0041}",
        ] {
            assert!(validate_resource(bad).is_err(), "{bad:?}");
            assert!(validate_owner(bad).is_err(), "{bad:?}");
        }
        for good in ["Zürich-Überweisung", "日本語", "naïve café", "a b"] {
            assert!(validate_resource(good).is_ok(), "{good:?}");
        }
    }

    /// Resource names follow the documented bounds exactly.
    #[test]
    fn resource_names_are_bounded_and_printable() {
        assert!(validate_resource("payments:close").is_ok());
        assert!(validate_resource(&"é".repeat(256)).is_ok());
        assert!(validate_resource(&"x".repeat(513)).is_err());
        assert!(validate_resource("").is_err());
        assert!(validate_resource("a\nb").is_err());
        assert!(validate_resource("a\u{7f}b").is_err());
    }

    /// An ASCII name (checked byte by byte) gets the verdict of the rule on characters, for
    /// every ASCII character, alone and beside a non-ASCII one (checked by characters).
    #[test]
    fn ascii_names_follow_the_rule_on_characters() {
        for byte in 0u8..128 {
            let c = char::from(byte);
            let refused = c.is_control() || is_invisible_format(c);
            for name in [format!("job{c}"), format!("é{c}")] {
                assert_eq!(validate_resource(&name).is_err(), refused, "{name:?}");
                assert_eq!(validate_owner(&name).is_err(), refused, "{name:?}");
            }
        }
    }

    /// Lock names of every kind map to their own keys and back; a semaphore's slots share
    /// one release channel; names no kind makes are refused.
    #[test]
    fn lock_names_map_to_their_keys_and_back() {
        let keyspace = Keyspace::new("p:");
        let slot = lock_name("jobs:a", LockKind::Slot(7));
        assert_eq!(keyspace.lock(&slot), "p:sem:jobs:a:7");
        assert_eq!(keyspace.lock_name_of("p:sem:jobs:a:7"), Some(slot.clone()));
        assert_eq!(
            keyspace.lock_name_of("p:lock:jobs:a").as_deref(),
            Some("jobs:a")
        );
        assert_eq!(keyspace.lock_name_of("p:sem:jobs:a:x"), None);
        assert_eq!(keyspace.lock_name_of("p:sem:jobs:a:64"), None);
        assert_eq!(
            keyspace.released_channel(&slot),
            keyspace.released_channel(&lock_name("jobs:a", LockKind::Slot(0)))
        );
        assert_ne!(
            keyspace.released_channel(&slot),
            keyspace.released_channel("jobs:a")
        );
        assert_eq!(
            parse_lock_name(&slot),
            Some(LockName {
                resource: "jobs:a",
                kind: LockKind::Slot(7)
            })
        );
        assert!(validate_lock_name(&slot).is_ok());
        assert!(validate_lock_name("jobs\u{1f}x1").is_err());
        assert!(validate_lock_name("jobs\u{1f}s").is_err());
        assert!(validate_lock_name("jobs\u{1f}s+1").is_err());
        assert!(
            validate_resource(&slot).is_err(),
            "callers cannot name a slot"
        );
        let writer = lock_name("doc", LockKind::Writer);
        let reader = lock_name("doc", LockKind::Reader(63));
        assert_eq!(keyspace.lock(&writer), "p:rw:doc:w");
        assert_eq!(keyspace.lock(&reader), "p:rw:doc:r63");
        assert_eq!(keyspace.lock_name_of("p:rw:doc:w"), Some(writer.clone()));
        assert_eq!(keyspace.lock_name_of("p:rw:doc:r63"), Some(reader.clone()));
        assert_eq!(
            keyspace.lock_name_of("p:rw:doc:wi"),
            None,
            "an intent is no lock"
        );
        assert_eq!(keyspace.lock_name_of("p:rw:doc:r64"), None);
        assert_eq!(
            keyspace.released_channel(&writer),
            keyspace.released_channel(&reader)
        );
        assert!(validate_lock_name("doc\u{1f}w1").is_err());
    }

    /// A lease's set of slots has one name, `s<n>,<m>,…` ascending, and one key per slot; a
    /// set of one is a slot; names in any other form are refused.
    #[test]
    fn slot_sets_name_each_slot_key() {
        let keyspace = Keyspace::new("p:");
        let set: SlotSet = [9, 2, 40].into_iter().collect();
        assert_eq!(set.iter().collect::<Vec<_>>(), [2, 9, 40]);
        let name = lock_name("pool", LockKind::Slots(set));
        assert_eq!(name, "pool\u{1f}s2,9,40");
        assert_eq!(
            parse_lock_name(&name),
            Some(LockName {
                resource: "pool",
                kind: LockKind::Slots(set)
            })
        );
        assert_eq!(
            keyspace.locks(&name),
            ["p:sem:pool:2", "p:sem:pool:9", "p:sem:pool:40"]
        );
        assert_eq!(keyspace.lock(&name), "p:sem:pool:2");
        assert_eq!(keyspace.locks("pool"), ["p:lock:pool"]);
        assert_eq!(
            keyspace.released_channel(&name),
            keyspace.released_channel(&lock_name("pool", LockKind::Slot(0)))
        );
        assert_eq!(SlotSet::single(5).kind(), Some(LockKind::Slot(5)));
        assert_eq!(SlotSet::default().kind(), None);
        assert_eq!(SlotSet::single(64), SlotSet::default());
        assert_eq!(LockKind::Slots(set).slots(), set);
        assert_eq!(LockKind::Slot(3).slots(), SlotSet::single(3));
        for bad in ["s9,2", "s2,2", "s2,", "s,2", "s2,64", "s2,x"] {
            assert!(
                validate_lock_name(&format!("pool\u{1f}{bad}")).is_err(),
                "{bad}"
            );
        }
    }

    /// An election's lock name maps to its own key and back; its release channel is its own,
    /// apart from the resource's lock's; names no kind makes are refused.
    #[test]
    fn election_names_map_to_their_key_and_back() {
        let keyspace = Keyspace::new("p:");
        let name = lock_name("jobs:a", LockKind::Election);
        assert_eq!(keyspace.lock(&name), "p:elect:jobs:a");
        assert_eq!(keyspace.lock_name_of("p:elect:jobs:a"), Some(name.clone()));
        assert_eq!(
            parse_lock_name(&name),
            Some(LockName {
                resource: "jobs:a",
                kind: LockKind::Election
            })
        );
        assert_eq!(keyspace.released_channel(&name), "p:released:jobs:a\u{1f}e");
        assert_ne!(
            keyspace.released_channel(&name),
            keyspace.released_channel("jobs:a")
        );
        assert_eq!(waiting_name(&name), name);
        assert!(validate_lock_name(&name).is_ok());
        assert!(validate_lock_name("jobs\u{1f}ee").is_err());
        assert!(validate_resource(&name).is_err(), "callers cannot name one");
    }

    /// A proclaimed value is 0–4096 bytes without control characters.
    #[test]
    fn election_values_are_bounded_and_printable() {
        for good in ["", "10.0.0.7:8080", "{\"shard\":3}", &"é".repeat(2048)] {
            assert!(validate_value(good).is_ok(), "{good:?}");
        }
        for bad in [&"x".repeat(4097), "a\u{1f}b", "line\n", "\u{7f}"] {
            assert!(validate_value(bad).is_err(), "{bad:?}");
        }
    }

    /// Every key of a resource lives under the prefix.
    #[test]
    fn keys_live_under_the_prefix() {
        let keys = Keyspace::new("p:").resource("r");
        assert_eq!(keys.lock, "p:lock:r");
        assert_eq!(Keyspace::new("p:").lock("r"), keys.lock);
        assert_eq!(
            Keyspace::new("p:").released_channel("r"),
            keys.released_channel
        );
        assert_eq!(keys.fence, "p:fence");
        assert_eq!(keys.released_channel, "p:released:r");
    }
}
