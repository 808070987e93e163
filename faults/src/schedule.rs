//! A fault schedule: what [`FaultyStore`](crate::FaultyStore) does to which
//! storage operations, and when — a list of `(when, fault)` entries plus the
//! seed of the coin flips behind probabilistic faults.
//!
//! The text form is what failing tests print first and what
//! `CORIUM_FLEET_FAULT_SCHEDULE` and `CORIUM_FLEET_SIM_SCHEDULE` read back,
//! so a failing run is replayed by pasting one line:
//!
//! ```text
//! seed=7; @1200ms partition for 800ms; @3000ms error for 1000ms p=0.3 op=log; after log#4 freeze for 2000ms
//! ```
//!
//! - `@<ms>ms` starts an entry that many milliseconds after the store was
//!   wrapped; `before <class>#<n>` / `after <class>#<n>` start it at the
//!   boundary of that store's *n*-th operation of a class (1-based): before
//!   it reaches storage, or after it took effect and before its caller sees
//!   the answer.
//! - faults: `delay <ms>ms`, `error`, `lost-ack` (writes happen, the caller
//!   sees an error), `stale` (a root read answers the value this store saw
//!   before the current one), `partition` (every operation fails fast),
//!   `freeze` (every operation waits until the window ends, then proceeds: a
//!   paused process that wakes up), `crash` (every operation fails, forever),
//!   `abort` (the process aborts at once: with `after log#n`, an owner that
//!   dies right after its log append landed and before it answered; process
//!   tier only — the simulation tier never draws it).
//! - `for <ms>ms` bounds the window (default: 1 s; `crash` is forever);
//!   `p=<0..1>` applies it to that share of operations (default 1);
//!   `op=<class>` limits it to one class (default `any`).

use std::fmt;
use std::time::Duration;

/// Storage operations by what they are to the lease/commit protocol.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub enum OpClass {
    /// Every operation.
    Any,
    /// The `db:<db>` root: lease acquire, renew, release, index publication.
    Lease,
    /// `log:<db>:…` roots: the native transaction log (appends, recovery).
    Log,
    /// Writes to `log:` roots alone: the native log's appends (one
    /// create-only record per commit batch). An `op=log` entry covers them
    /// too, and they count toward `log#n` boundaries as well.
    Append,
    /// `meta:`/`keys:` roots: catalog entries.
    Meta,
    /// Blobs: index and segment content.
    Blob,
    /// Fleet-level roots: the node registry, fork reservations.
    Fleet,
}

impl OpClass {
    /// The class of an operation on root `name`.
    #[must_use]
    pub fn of_root(name: &str) -> Self {
        match name.split_once(':').map(|(prefix, _)| prefix) {
            Some("db") => Self::Lease,
            Some("log") => Self::Log,
            Some("meta" | "keys") => Self::Meta,
            _ => Self::Fleet,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Any => "any",
            Self::Lease => "lease",
            Self::Log => "log",
            Self::Append => "append",
            Self::Meta => "meta",
            Self::Blob => "blob",
            Self::Fleet => "fleet",
        }
    }

    fn parse(text: &str) -> Result<Self, String> {
        Ok(match text {
            "any" => Self::Any,
            "lease" => Self::Lease,
            "log" => Self::Log,
            "append" => Self::Append,
            "meta" => Self::Meta,
            "blob" => Self::Blob,
            "fleet" => Self::Fleet,
            other => {
                return Err(format!(
                    "unknown operation class {other:?} (any, lease, log, append, meta, blob, fleet)"
                ));
            }
        })
    }

    /// The class of a write to root `name`: a write to a `log:` root is an
    /// [`Self::Append`].
    #[must_use]
    pub fn of_write(name: &str) -> Self {
        match Self::of_root(name) {
            Self::Log => Self::Append,
            class => class,
        }
    }

    /// Whether an entry limited to `self` applies to an operation of `op`.
    #[must_use]
    pub fn covers(self, op: Self) -> bool {
        self == Self::Any || self == op || (self == Self::Log && op == Self::Append)
    }
}

/// When an entry starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum When {
    /// This long after the store was wrapped.
    At(Duration),
    /// Just before the store's n-th operation of a class reaches storage.
    Before(OpClass, u64),
    /// Just after the store's n-th operation of a class took effect, before
    /// its caller sees the answer.
    After(OpClass, u64),
}

/// What an entry does to the operations it covers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    /// Each covered operation waits this long before it reaches storage.
    Delay(Duration),
    /// Each covered operation fails before it reaches storage.
    Error,
    /// A covered write takes effect, then its caller sees an error (the
    /// acknowledgement is lost).
    LostAck,
    /// A covered root read answers the value this store saw before the
    /// current one, without asking storage (when it has seen two).
    Stale,
    /// The node is cut off from storage: every covered operation fails fast,
    /// and one already in flight loses its answer.
    Partition,
    /// Every covered operation waits until the window ends, then proceeds (a
    /// paused process that wakes up).
    Freeze,
    /// Every operation fails from the moment the entry starts, forever.
    Crash,
    /// The process aborts (`std::process::abort`) when the entry starts.
    Abort,
}

impl Fault {
    /// Whether the fault ends the store's life (no window).
    #[must_use]
    pub fn is_permanent(self) -> bool {
        matches!(self, Self::Crash | Self::Abort)
    }
}

/// One `(when, fault)` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// When the entry starts.
    pub when: When,
    /// What it does once started.
    pub fault: Fault,
    /// How long the fault lasts once started (ignored for `crash` and
    /// `abort`, which are permanent).
    pub window: Duration,
    /// Share of covered operations it applies to, in `[0, 1]`; the coin is
    /// flipped with the schedule's seeded [`Rng`].
    pub probability: f64,
    /// The class of operations it covers ([`OpClass::Any`] for all).
    pub ops: OpClass,
}

/// Default window of an entry without `for`.
const DEFAULT_WINDOW: Duration = Duration::from_secs(1);

impl Entry {
    /// An entry with the defaults of the text form: a 1 s window, applied
    /// to every covered operation, covering every class.
    #[must_use]
    pub fn new(when: When, fault: Fault) -> Self {
        Self {
            when,
            fault,
            window: DEFAULT_WINDOW,
            probability: 1.0,
            ops: OpClass::Any,
        }
    }

    /// The same entry with its window set to `window` (`for <ms>ms`).
    #[must_use]
    pub fn lasting(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// The same entry applied to a share `probability` of covered
    /// operations (`p=<0..1>`).
    #[must_use]
    pub fn with_probability(mut self, probability: f64) -> Self {
        self.probability = probability;
        self
    }

    /// The same entry limited to operations of class `ops` (`op=<class>`).
    #[must_use]
    pub fn on(mut self, ops: OpClass) -> Self {
        self.ops = ops;
        self
    }
}

/// A seeded list of entries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Schedule {
    /// Seed of the coin flips behind probabilistic entries, so a run
    /// replays exactly from its text form.
    pub seed: u64,
    /// The entries, in the order they were written.
    pub entries: Vec<Entry>,
}

fn millis(text: &str) -> Result<Duration, String> {
    text.strip_suffix("ms")
        .and_then(|number| number.parse::<u64>().ok())
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is not a duration like 250ms"))
}

fn boundary(text: &str) -> Result<(OpClass, u64), String> {
    let (class, n) = text
        .split_once('#')
        .ok_or_else(|| format!("{text:?} is not an operation like log#3"))?;
    let n: u64 = n.parse().map_err(|_| format!("{text:?}: {n:?} is not a count"))?;
    if n == 0 {
        return Err(format!("{text:?}: operations count from 1"));
    }
    Ok((OpClass::parse(class)?, n))
}

impl std::str::FromStr for Entry {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let mut words = text.split_whitespace().peekable();
        let first = words.next().ok_or("empty entry")?;
        let when = if let Some(at) = first.strip_prefix('@') {
            When::At(millis(at)?)
        } else if first == "before" || first == "after" {
            let (class, n) = boundary(words.next().ok_or("missing operation after before/after")?)?;
            if first == "before" {
                When::Before(class, n)
            } else {
                When::After(class, n)
            }
        } else {
            return Err(format!(
                "{first:?}: an entry starts with @<ms>ms, before or after"
            ));
        };
        let fault = match words.next().ok_or("missing fault")? {
            "delay" => Fault::Delay(millis(words.next().ok_or("delay needs a duration")?)?),
            "error" => Fault::Error,
            "lost-ack" => Fault::LostAck,
            "stale" => Fault::Stale,
            "partition" => Fault::Partition,
            "freeze" => Fault::Freeze,
            "crash" => Fault::Crash,
            "abort" => Fault::Abort,
            other => {
                return Err(format!(
                    "unknown fault {other:?} (delay, error, lost-ack, stale, partition, freeze, crash, abort)"
                ));
            }
        };
        let mut entry = Self::new(when, fault);
        while let Some(word) = words.next() {
            if word == "for" {
                entry.window = millis(words.next().ok_or("for needs a duration")?)?;
            } else if let Some(p) = word.strip_prefix("p=") {
                entry.probability = p
                    .parse::<f64>()
                    .ok()
                    .filter(|p| (0.0..=1.0).contains(p))
                    .ok_or_else(|| format!("{word:?}: p is a share between 0 and 1"))?;
            } else if let Some(class) = word.strip_prefix("op=") {
                entry.ops = OpClass::parse(class)?;
            } else {
                return Err(format!("unexpected {word:?}"));
            }
        }
        Ok(entry)
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.when {
            When::At(at) => write!(f, "@{}ms", at.as_millis())?,
            When::Before(class, n) => write!(f, "before {}#{n}", class.name())?,
            When::After(class, n) => write!(f, "after {}#{n}", class.name())?,
        }
        match self.fault {
            Fault::Delay(by) => write!(f, " delay {}ms", by.as_millis())?,
            Fault::Error => f.write_str(" error")?,
            Fault::LostAck => f.write_str(" lost-ack")?,
            Fault::Stale => f.write_str(" stale")?,
            Fault::Partition => f.write_str(" partition")?,
            Fault::Freeze => f.write_str(" freeze")?,
            Fault::Crash => f.write_str(" crash")?,
            Fault::Abort => f.write_str(" abort")?,
        }
        if !self.fault.is_permanent() {
            write!(f, " for {}ms", self.window.as_millis())?;
        }
        if self.probability < 1.0 {
            write!(f, " p={}", self.probability)?;
        }
        if self.ops != OpClass::Any {
            write!(f, " op={}", self.ops.name())?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Schedule {
    type Err = String;

    /// `seed=<n>; entry; entry; …` (the seed is optional, default 0).
    fn from_str(text: &str) -> Result<Self, String> {
        let mut schedule = Self::default();
        for (index, part) in text
            .split(';')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .enumerate()
        {
            if let Some(seed) = part.strip_prefix("seed=") {
                schedule.seed = seed
                    .trim()
                    .parse()
                    .map_err(|_| format!("entry {}: {seed:?} is not a seed", index + 1))?;
            } else {
                schedule.entries.push(
                    part.parse()
                        .map_err(|error| format!("entry {} ({part:?}): {error}", index + 1))?,
                );
            }
        }
        Ok(schedule)
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seed={}", self.seed)?;
        for entry in &self.entries {
            write!(f, "; {entry}")?;
        }
        Ok(())
    }
}

/// A small deterministic generator (SplitMix64): the coin flips of
/// probabilistic faults and the simulation's choices, reproducible from a
/// seed with no dependency.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`: the same seed gives the same
    /// sequence.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        // 53 random bits, the precision of an f64 mantissa.
        #[allow(clippy::cast_precision_loss)]
        let value = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        value
    }

    /// Uniform in `[0, n)` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p >= 1.0 || self.unit() < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips() {
        let text = "seed=7; @1200ms partition for 800ms; @3000ms error for 1000ms p=0.3 op=log; \
                    after log#4 freeze for 2000ms; before lease#2 crash; @10ms delay 30ms for 500ms op=blob; \
                    @0ms stale for 100ms op=lease; @5ms lost-ack for 1000ms p=0.5";
        let schedule: Schedule = text.parse().unwrap();
        assert_eq!(schedule.seed, 7);
        assert_eq!(schedule.entries.len(), 7);
        assert_eq!(schedule.entries[1].ops, OpClass::Log);
        assert_eq!(schedule.entries[2].when, When::After(OpClass::Log, 4));
        assert_eq!(schedule.entries[3].fault, Fault::Crash);
        assert_eq!(schedule.to_string().parse::<Schedule>().unwrap(), schedule);
    }

    #[test]
    fn bad_entries_name_themselves() {
        let error = "seed=1; @10ms melt".parse::<Schedule>().unwrap_err();
        assert!(error.contains("entry 2") && error.contains("melt"), "{error}");
        assert!(
            "after log#0 crash"
                .parse::<Entry>()
                .unwrap_err()
                .contains("count from 1")
        );
        assert!("@10 error".parse::<Entry>().unwrap_err().contains("250ms"));
        assert!("@10ms error p=2".parse::<Entry>().is_err());
        assert!(
            "@10ms error op=disk"
                .parse::<Entry>()
                .unwrap_err()
                .contains("disk")
        );
    }

    #[test]
    fn classes_follow_root_names() {
        assert_eq!(OpClass::of_root("db:orders"), OpClass::Lease);
        assert_eq!(OpClass::of_root("log:orders:v1:r2"), OpClass::Log);
        assert_eq!(OpClass::of_root("meta:orders"), OpClass::Meta);
        assert_eq!(OpClass::of_root("fleet-node:n1"), OpClass::Fleet);
        assert!(OpClass::Any.covers(OpClass::Log) && !OpClass::Lease.covers(OpClass::Log));
    }

    #[test]
    fn the_generator_is_reproducible() {
        let a: Vec<u64> = (0..5).scan(Rng::new(3), |rng, _| Some(rng.next_u64())).collect();
        let b: Vec<u64> = (0..5).scan(Rng::new(3), |rng, _| Some(rng.next_u64())).collect();
        let c: Vec<u64> = (0..5).scan(Rng::new(4), |rng, _| Some(rng.next_u64())).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mut rng = Rng::new(9);
        assert!((0..1000).all(|_| (0.0..1.0).contains(&rng.unit())));
    }
}
