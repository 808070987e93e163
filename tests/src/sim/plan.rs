//! A simulation plan: storage fault schedules per node (armed on its first
//! incarnation once the databases exist)
//! and timed process events, generated from a seed or read back from the
//! one-line text a failing run prints:
//!
//! ```text
//! seed=5 | node-0: seed=17; after log#4 freeze for 1800ms | @2000ms crash node-1 | @2500ms handoff db-1 | @3000ms map db-0 = node-2,node-0
//! ```

use std::fmt;
use std::time::Duration;

use corium_fleet_faults::{Entry, Fault, OpClass, Rng, Schedule, When};

/// A timed process-level event.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The node dies: its storage is cut and its tasks stop, nothing is
    /// released (SIGKILL). A supervisor restarts it later.
    Crash(usize),
    /// The node drains (hands every database to a successor) and stops
    /// (SIGTERM); restarted later like a crash.
    Drain(usize),
    /// The owner of a database hands it to its other candidate.
    Handoff(usize),
    /// The placement map pins a database to these nodes, best first.
    Map(usize, Vec<usize>),
}

/// The whole plan of one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The seed it was generated from (reruns it).
    pub seed: u64,
    /// Storage schedules of first incarnations, by node (armed once the
    /// databases exist; a restarted node runs clean).
    pub storage: Vec<(usize, Schedule)>,
    /// Process events and partitions, by time since the run started.
    pub events: Vec<(Duration, Event)>,
}

/// The shape of the simulated fleet a plan is generated for.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Hosts sharing the store.
    pub nodes: usize,
    /// Databases written.
    pub dbs: usize,
    /// The hosts' lease TTL.
    pub lease_ttl: Duration,
}

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Plan {
    /// A plan drawn from `seed`: one to three incidents among crashes and
    /// freezes at protocol boundaries (log append, lease root), partitions,
    /// flaky storage (lost acknowledgements, errors, delays, stale reads),
    /// timed crashes, drains, handoffs and placement changes.
    #[must_use]
    pub fn generate(seed: u64, shape: Shape) -> Self {
        let mut rng = Rng::new(seed);
        let ttl = ms(shape.lease_ttl);
        let mut plan = Self {
            seed,
            ..Self::default()
        };
        let incidents = 1 + rng.below(3);
        for _ in 0..incidents {
            let node = usize::try_from(rng.below(shape.nodes as u64)).unwrap_or(0);
            let at = Duration::from_millis(300 + rng.below(2700));
            let boundary_class = if rng.chance(0.6) {
                OpClass::Log
            } else {
                OpClass::Lease
            };
            let nth = 1 + rng.below(12);
            let entry = match rng.below(10) {
                0 | 1 => {
                    let when = if rng.chance(0.5) {
                        When::After(boundary_class, nth)
                    } else {
                        When::Before(boundary_class, nth)
                    };
                    Some(Entry::new(when, Fault::Crash))
                }
                2 | 3 => {
                    // A zombie: frozen past its lease, then it wakes up and
                    // carries on with what it was doing.
                    // Frozen right before a log append (it wakes up and
                    // appends under its old lease version), right after one
                    // (its answer waits), or before a lease renewal.
                    let when = match (boundary_class, rng.chance(0.5)) {
                        (OpClass::Log, true) => When::Before(OpClass::Log, nth),
                        (OpClass::Log, false) => When::After(OpClass::Log, nth),
                        _ => When::Before(OpClass::Lease, nth),
                    };
                    Some(
                        Entry::new(when, Fault::Freeze)
                            .lasting(Duration::from_millis(ttl * 2 + rng.below(ttl * 2))),
                    )
                }
                4 => Some(
                    Entry::new(When::At(at), Fault::Partition)
                        .lasting(Duration::from_millis(ttl / 2 + rng.below(ttl * 3))),
                ),
                5 => {
                    let ops = [OpClass::Log, OpClass::Lease, OpClass::Any]
                        [usize::try_from(rng.below(3)).unwrap_or(0)];
                    let fault = match rng.below(4) {
                        0 => Fault::LostAck,
                        1 => Fault::Error,
                        2 => Fault::Delay(Duration::from_millis(20 + rng.below(60))),
                        _ => Fault::Stale,
                    };
                    let ops = if fault == Fault::Stale {
                        OpClass::Lease
                    } else {
                        ops
                    };
                    Some(
                        Entry::new(When::At(at), fault)
                            .lasting(Duration::from_millis(800 + rng.below(1200)))
                            .with_probability(f64::from(u8::try_from(2 + rng.below(5)).unwrap_or(2)) / 10.0)
                            .on(ops),
                    )
                }
                6 => {
                    plan.events.push((at, Event::Crash(node)));
                    None
                }
                7 => {
                    plan.events.push((at, Event::Drain(node)));
                    None
                }
                8 => {
                    let db = usize::try_from(rng.below(shape.dbs as u64)).unwrap_or(0);
                    plan.events.push((at, Event::Handoff(db)));
                    None
                }
                _ => {
                    let db = usize::try_from(rng.below(shape.dbs as u64)).unwrap_or(0);
                    let first = usize::try_from(rng.below(shape.nodes as u64)).unwrap_or(0);
                    let second =
                        (first + 1 + usize::try_from(rng.below(shape.nodes as u64 - 1)).unwrap_or(0))
                            % shape.nodes;
                    plan.events.push((at, Event::Map(db, vec![first, second])));
                    None
                }
            };
            if let Some(entry) = entry {
                match plan.storage.iter_mut().find(|(n, _)| *n == node) {
                    Some((_, schedule)) => schedule.entries.push(entry),
                    None => plan.storage.push((
                        node,
                        Schedule {
                            seed: seed.wrapping_mul(31).wrapping_add(node as u64),
                            entries: vec![entry],
                        },
                    )),
                }
            }
        }
        plan.events.sort_by_key(|(at, _)| *at);
        plan
    }
}

fn node(text: &str) -> Result<usize, String> {
    text.strip_prefix("node-")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("{text:?} is not a node like node-1"))
}

fn db(text: &str) -> Result<usize, String> {
    text.strip_prefix("db-")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("{text:?} is not a database like db-0"))
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Crash(n) => write!(f, "crash node-{n}"),
            Self::Drain(n) => write!(f, "drain node-{n}"),
            Self::Handoff(d) => write!(f, "handoff db-{d}"),
            Self::Map(d, nodes) => {
                let nodes: Vec<String> = nodes.iter().map(|n| format!("node-{n}")).collect();
                write!(f, "map db-{d} = {}", nodes.join(","))
            }
        }
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seed={}", self.seed)?;
        for (n, schedule) in &self.storage {
            write!(f, " | node-{n}: {schedule}")?;
        }
        for (at, event) in &self.events {
            write!(f, " | @{}ms {event}", at.as_millis())?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Plan {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let mut plan = Self::default();
        for part in text.split('|').map(str::trim).filter(|part| !part.is_empty()) {
            if let Some(seed) = part.strip_prefix("seed=") {
                plan.seed = seed.parse().map_err(|_| format!("{seed:?} is not a seed"))?;
            } else if let Some(rest) = part.strip_prefix('@') {
                let (at, event) = rest
                    .split_once(' ')
                    .ok_or_else(|| format!("{part:?}: @<ms>ms <event>"))?;
                let at = at
                    .strip_suffix("ms")
                    .and_then(|at| at.parse().ok())
                    .map(Duration::from_millis)
                    .ok_or_else(|| format!("{at:?} is not a time like 1200ms"))?;
                let words: Vec<&str> = event.split_whitespace().collect();
                let event = match words.as_slice() {
                    ["crash", n] => Event::Crash(node(n)?),
                    ["drain", n] => Event::Drain(node(n)?),
                    ["handoff", d] => Event::Handoff(db(d)?),
                    ["map", d, "=", nodes] => {
                        Event::Map(db(d)?, nodes.split(',').map(node).collect::<Result<_, _>>()?)
                    }
                    _ => {
                        return Err(format!(
                            "{event:?}: crash|drain node-N, handoff db-N, map db-N = node-A,node-B"
                        ));
                    }
                };
                plan.events.push((at, event));
            } else if let Some((n, schedule)) = part.split_once(':').filter(|(n, _)| n.starts_with("node-")) {
                plan.storage.push((node(n)?, schedule.parse()?));
            } else {
                return Err(format!(
                    "{part:?}: expected seed=, node-N: <schedule> or @<ms>ms <event>"
                ));
            }
        }
        plan.events.sort_by_key(|(at, _)| *at);
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: Shape = Shape {
        nodes: 3,
        dbs: 3,
        lease_ttl: Duration::from_millis(600),
    };

    #[test]
    fn plans_are_reproducible_and_round_trip() {
        for seed in 0..200 {
            let plan = Plan::generate(seed, SHAPE);
            assert_eq!(plan, Plan::generate(seed, SHAPE));
            let text = plan.to_string();
            assert_eq!(text.parse::<Plan>().unwrap(), plan, "{text}");
        }
        let kinds: std::collections::BTreeSet<String> = (0..200)
            .flat_map(|seed| {
                let plan = Plan::generate(seed, SHAPE);
                let mut kinds: Vec<String> = plan
                    .events
                    .iter()
                    .map(|(_, event)| event.to_string().split(' ').next().unwrap().to_owned())
                    .collect();
                for (_, schedule) in &plan.storage {
                    kinds.extend(
                        schedule
                            .entries
                            .iter()
                            .map(|entry| format!("{:?}", entry.fault).chars().take(4).collect()),
                    );
                }
                kinds
            })
            .collect();
        // Every kind of incident shows up within 200 seeds.
        for kind in [
            "crash", "drain", "handoff", "map", "Cras", "Free", "Part", "Lost", "Erro", "Dela", "Stal",
        ] {
            assert!(kinds.contains(kind), "{kind} missing from {kinds:?}");
        }
    }

    #[test]
    fn bad_plans_say_why() {
        assert!("seed=x".parse::<Plan>().is_err());
        assert!(
            "@10ms explode node-1"
                .parse::<Plan>()
                .unwrap_err()
                .contains("crash|drain")
        );
        assert!("node-1: @5ms melt".parse::<Plan>().unwrap_err().contains("melt"));
    }
}
