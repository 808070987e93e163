//! The fault suite's checker: one judge of the fleet's promises for both
//! tiers (the in-process simulation and the multi-process fault tests),
//! reading what was acknowledged and what is durable at the end of a run.
//!
//! Per database it checks that:
//! - every `t` of the durable log has exactly one record, with no gaps;
//! - every acknowledged transaction is in the log at the `t` it was
//!   acknowledged with, and a request id sent again answers exactly the
//!   response it was acknowledged with;
//! - no item (acknowledged or only attempted) and no request id was
//!   committed twice — counting a resend whose unique identity made it an
//!   upsert that asserts nothing new;
//! - no node acknowledged while another held the lease: acknowledgements in
//!   `t` order carry lease versions that never go down, and each is backed
//!   by a durable log record written under that version (when the record
//!   keys are known);
//! - every subscription delivered every `t` in order, with no gap or
//!   repeat across its reconnects;
//! - databases named as unaffected saw no error at all.
//!
//! [`Report`] prints operations, faults, failovers, the longest
//! unavailability per database and the verdict.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

/// One acknowledged transaction.
#[derive(Clone, Debug)]
pub struct Ack {
    /// The database it went to.
    pub db: String,
    /// The unique item the transaction asserted.
    pub item: String,
    /// The `corium-request-id` it was sent under.
    pub request_id: String,
    /// The `t` it was acknowledged with (`basis_t` of the answer).
    pub t: u64,
    /// `corium-lease-version` of the answer (the fleet stamps it).
    pub lease_version: Option<u64>,
    /// The answer was a replay (`corium-replayed`): committed earlier,
    /// possibly under an earlier lease, so its version says who answered,
    /// not who wrote.
    pub replayed: bool,
    /// The encoded `TransactResponse` the caller received.
    pub response: Vec<u8>,
    /// Since the run started.
    pub at: Duration,
}

/// One transaction a subscription delivered: `t` and the strings asserted.
pub type Delivered = (u64, Vec<String>);

impl Ack {
    /// The acknowledgement `answer` gives to the transaction asserting
    /// `item` under `request_id`: its `t`, the bytes the caller received, and
    /// the `corium-lease-version` / `corium-replayed` the fleet stamps on it.
    #[must_use]
    pub fn answered(
        db: &str,
        item: &str,
        request_id: &str,
        answer: &tonic::Response<corium_protocol::pb::TransactResponse>,
        at: Duration,
    ) -> Self {
        use corium_fleet_wire::metadata::{LEASE_VERSION, REPLAYED};
        use prost::Message as _;
        let metadata = answer.metadata();
        Self {
            db: db.to_owned(),
            item: item.to_owned(),
            request_id: request_id.to_owned(),
            t: answer.get_ref().basis_t,
            lease_version: metadata
                .get(LEASE_VERSION)
                .and_then(|value| value.to_str().ok()?.parse().ok()),
            replayed: metadata.contains_key(REPLAYED),
            response: answer.get_ref().encode_to_vec(),
            at,
        }
    }
}

/// Everything a run's clients observed.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// Every acknowledged transaction, in acknowledgement order.
    pub acks: Vec<Ack>,
    /// Failed attempts: database, since start, status code.
    pub errors: Vec<(String, Duration, tonic::Code)>,
    /// Attempts made (acknowledged or not).
    pub attempts: usize,
    /// Every item a writer tried to commit (database, item), acknowledged
    /// or not: duplicates are counted for all of them, so a writer without
    /// request ids whose unacknowledged write committed twice is caught too.
    pub attempted: BTreeSet<(String, String)>,
    /// Transactions abandoned after their retry budget: database, item.
    pub abandoned: Vec<(String, String)>,
    /// Statuses no caller should ever see (a bug, whatever failed).
    pub unexpected: Vec<String>,
    /// What each subscription delivered, in delivery order, across its
    /// reconnects: (database, subscriber) → (`t`, strings asserted).
    pub deliveries: BTreeMap<(String, usize), Vec<Delivered>>,
    /// Faults and process events injected, in order, as text.
    pub faults: Vec<String>,
}

impl History {
    /// Notes that a writer is about to try `item` in `db` (before its first
    /// attempt, so a duplicate of an unacknowledged write is caught too).
    pub fn note_attempted(&mut self, db: &str, item: &str) {
        self.attempted.insert((db.to_owned(), item.to_owned()));
    }

    /// Notes a fault or process event `since` the run started (and prints
    /// it, so a failing run's output shows when it happened).
    pub fn note_fault(&mut self, since: Duration, text: &str) {
        eprintln!("@{}ms {text}", since.as_millis());
        self.faults.push(format!("@{}ms {text}", since.as_millis()));
    }

    /// Notes a failed attempt on `db`, `since` the run started.
    pub fn note_error(&mut self, db: &str, since: Duration, code: tonic::Code) {
        self.errors.push((db.to_owned(), since, code));
    }
}

/// What is durable at the end of a run, per database.
#[derive(Clone, Debug, Default)]
pub struct Durable {
    /// The log read back from a node: `(t, strings asserted)`, log order.
    pub logs: BTreeMap<String, Vec<(u64, Vec<String>)>>,
    /// Native log record keys `(lease version, last t of the batch)`, when
    /// the run can list storage.
    pub record_keys: BTreeMap<String, Vec<(u64, u64)>>,
    /// Request ids sent again at the end: the ack's index in
    /// `History::acks` → the encoded response the replay returned.
    pub replays: Vec<(usize, Result<Vec<u8>, String>)>,
}

/// A run's outcome.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The run's name (backend, seed, scenario).
    pub label: String,
    /// Attempts made (acknowledged or not).
    pub attempts: usize,
    /// Transactions acknowledged.
    pub acked: usize,
    /// Failed attempts.
    pub errors: usize,
    /// Faults and process events injected, in order, as text.
    pub faults: Vec<String>,
    /// Lease versions seen per database beyond the first (ownership moves).
    pub failovers: BTreeMap<String, usize>,
    /// Per database: the longest time from the last acknowledgement before a
    /// failed attempt to the first acknowledgement after it, and when (since
    /// the run started) that stretch began.
    pub longest_unavailable: BTreeMap<String, (Duration, Duration)>,
    /// Transactions subscriptions delivered (sum over subscribers, across
    /// their reconnects).
    pub delivered: usize,
    /// Request ids sent again at the end and checked.
    pub replays: usize,
    /// Log records written by deposed writers and never acknowledged
    /// (fenced), when record keys are known.
    pub superseded_records: usize,
    /// Every broken promise found, as text; empty when the run passed.
    pub violations: Vec<String>,
}

impl Report {
    /// Whether the run kept every promise.
    #[must_use]
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The native log's record keys of `db` in `store`: `(lease version, last
/// t of the batch)` from `log:<db>:v<version>:r<t>` (Corium's layout).
///
/// # Errors
/// The listing fails.
pub async fn record_keys(
    store: &dyn corium_store::RootStore,
    db: &str,
) -> Result<Vec<(u64, u64)>, corium_store::StoreError> {
    let prefix = format!("log:{db}:v");
    let names = store.list_roots(&prefix).await?;
    Ok(names
        .iter()
        .filter_map(|name| {
            let (version, t) = name.strip_prefix(&prefix)?.split_once(":r")?;
            Some((version.parse().ok()?, t.parse().ok()?))
        })
        .collect())
}

/// Checks a run. `unaffected` names databases that must have seen no error.
#[must_use]
pub fn check(label: &str, history: &History, durable: &Durable, unaffected: &BTreeSet<String>) -> Report {
    let mut report = Report {
        label: label.to_owned(),
        attempts: history.attempts,
        acked: history.acks.len(),
        errors: history.errors.len(),
        faults: history.faults.clone(),
        replays: durable.replays.len(),
        ..Report::default()
    };
    let violations = &mut report.violations;
    for status in &history.unexpected {
        violations.push(format!("unexpected status: {status}"));
    }
    for (db, item) in &history.abandoned {
        violations.push(format!(
            "{db}: {item} was never acknowledged within its retry budget"
        ));
    }
    let mut dbs: BTreeSet<&String> = history.acks.iter().map(|ack| &ack.db).collect();
    dbs.extend(durable.logs.keys());
    for db in dbs {
        let acks: Vec<&Ack> = history.acks.iter().filter(|ack| &ack.db == db).collect();
        let Some(log) = durable.logs.get(db) else {
            violations.push(format!("{db}: acknowledged writes but no log was read back"));
            continue;
        };
        let attempted: BTreeSet<&str> = history
            .attempted
            .iter()
            .filter(|(d, _)| d == db)
            .map(|(_, item)| item.as_str())
            .collect();
        check_log(db, log, &acks, &attempted, violations);
        check_versions(
            db,
            &acks,
            durable.record_keys.get(db),
            violations,
            &mut report.superseded_records,
        );
        let versions: BTreeSet<u64> = acks.iter().filter_map(|ack| ack.lease_version).collect();
        report
            .failovers
            .insert(db.clone(), versions.len().saturating_sub(1));
        report
            .longest_unavailable
            .insert(db.clone(), longest_unavailable(db, history));
        if unaffected.contains(db) {
            let count = history.errors.iter().filter(|(d, ..)| d == db).count();
            if count > 0 {
                violations.push(format!("{db}: {count} errors, though no fault touched it"));
            }
        }
    }
    for (index, replayed) in &durable.replays {
        let ack = &history.acks[*index];
        match replayed {
            Ok(bytes) if *bytes == ack.response => {}
            Ok(_) => violations.push(format!(
                "{}: request id {} (t={}) answered a different response on replay",
                ack.db, ack.request_id, ack.t
            )),
            Err(error) => violations.push(format!(
                "{}: request id {} could not be replayed: {error}",
                ack.db, ack.request_id
            )),
        }
    }
    for ((db, subscriber), delivered) in &history.deliveries {
        report.delivered += delivered.len();
        let ts: Vec<u64> = delivered.iter().map(|(t, _)| *t).collect();
        if let Some(&[before, after]) = ts.windows(2).find(|pair| pair[1] != pair[0] + 1) {
            violations.push(format!(
                "{db}: subscriber {subscriber} delivered t={after} after t={before} (gap, repeat or disorder)"
            ));
        }
        let Some(log) = durable.logs.get(db) else { continue };
        if let (Some(first), Some((log_first, _))) = (ts.first(), log.first())
            && first != log_first
        {
            violations.push(format!(
                "{db}: subscriber {subscriber} started at t={first}, not at the log's start (t={log_first})"
            ));
        }
        // Every delivered transaction is the durable one at its t: a
        // subscriber must never see a transaction the log does not hold.
        let by_t: BTreeMap<u64, &Vec<String>> = log.iter().map(|(t, strings)| (*t, strings)).collect();
        for (t, strings) in delivered {
            if by_t.get(t).is_none_or(|durable| *durable != strings) {
                violations.push(format!(
                    "{db}: subscriber {subscriber} was delivered at t={t} a transaction the log does not hold there ({strings:?})"
                ));
            }
        }
    }
    report
}

fn check_log(
    db: &str,
    log: &[(u64, Vec<String>)],
    acks: &[&Ack],
    attempted: &BTreeSet<&str>,
    violations: &mut Vec<String>,
) {
    let ts: Vec<u64> = log.iter().map(|(t, _)| *t).collect();
    if let Some(&[before, after]) = ts.windows(2).find(|pair| pair[1] != pair[0] + 1) {
        violations.push(format!(
            "{db}: log t={after} follows t={before} (each t must have exactly one record)"
        ));
    }
    let by_t: BTreeMap<u64, &Vec<String>> = log.iter().map(|(t, strings)| (*t, strings)).collect();
    let mut where_item: BTreeMap<&str, u64> = BTreeMap::new();
    let mut items: BTreeSet<&str> = acks.iter().map(|ack| ack.item.as_str()).collect();
    items.extend(attempted);
    let acked_ids: BTreeSet<&str> = acks.iter().map(|ack| ack.request_id.as_str()).collect();
    let mut where_id: BTreeMap<&str, u64> = BTreeMap::new();
    for (t, strings) in log {
        for string in strings {
            if items.contains(string.as_str())
                && let Some(previous) = where_item.insert(string, *t)
            {
                violations.push(format!(
                    "{db}: item {string} committed twice (t={previous} and t={t})"
                ));
            }
            if acked_ids.contains(string.as_str())
                && let Some(previous) = where_id.insert(string, *t)
                && previous != *t
            {
                violations.push(format!(
                    "{db}: request id {string} recorded twice (t={previous} and t={t})"
                ));
            }
        }
    }
    // Where every transaction writes a fresh item, one that writes none is a
    // resend upserting an item committed before (its identity attribute
    // makes the second commit assert nothing new) — a duplicate no item
    // count shows. Only for runs that list what their writers attempted.
    if !attempted.is_empty() {
        let acked_at: BTreeSet<u64> = acks.iter().map(|ack| ack.t).collect();
        for (t, strings) in log {
            if !acked_at.contains(t) && !strings.iter().any(|string| items.contains(string.as_str())) {
                violations.push(format!(
                    "{db}: t={t} commits no writer's item: a resend upserting an item committed before (a duplicate)"
                ));
            }
        }
    }
    for ack in acks {
        match by_t.get(&ack.t) {
            Some(strings) if strings.contains(&ack.item) => {}
            Some(strings) => {
                let found: Vec<u64> = log
                    .iter()
                    .filter(|(_, strings)| strings.contains(&ack.item))
                    .map(|(t, _)| *t)
                    .collect();
                let upsert =
                    !found.is_empty() && !strings.iter().any(|string| items.contains(string.as_str()));
                violations.push(if upsert {
                    format!(
                        "{db}: {} committed twice: at {found:?}, and again at t={} (lease version {:?}), where \
                         its unique identity made the resend an upsert that asserts nothing new",
                        ack.item, ack.t, ack.lease_version
                    )
                } else {
                    format!(
                        "{db}: {} acknowledged at t={} (lease version {:?}, replayed {}) but t={} holds another \
                         transaction {strings:?}; the item is at {found:?} (lost write)",
                        ack.item, ack.t, ack.lease_version, ack.replayed, ack.t
                    )
                });
            }
            None => violations.push(format!(
                "{db}: {} acknowledged at t={} is not in the log",
                ack.item, ack.t
            )),
        }
    }
}

fn check_versions(
    db: &str,
    acks: &[&Ack],
    keys: Option<&Vec<(u64, u64)>>,
    violations: &mut Vec<String>,
    superseded: &mut usize,
) {
    // Replays name the lease that answered, not the one that committed.
    let mut by_t: Vec<&&Ack> = acks.iter().filter(|ack| !ack.replayed).collect();
    by_t.sort_by_key(|ack| ack.t);
    let mut highest: Option<&Ack> = None;
    for ack in by_t {
        let Some(version) = ack.lease_version else {
            continue;
        };
        if let Some(previous) = highest
            && previous.lease_version.is_some_and(|v| v > version)
        {
            violations.push(format!(
                "{db}: t={} was acknowledged under lease version {version} after t={} under version {:?} (two writers)",
                ack.t, previous.t, previous.lease_version
            ));
        }
        if highest.is_none_or(|h| h.lease_version < Some(version)) {
            highest = Some(ack);
        }
        if let Some(keys) = keys
            && !keys.iter().any(|(v, last)| *v == version && *last >= ack.t)
        {
            violations.push(format!(
                "{db}: t={} acknowledged under lease version {version} has no durable record of that version",
                ack.t
            ));
        }
    }
    if let Some(keys) = keys {
        // A record batch of a version whose last t is at or above the first
        // batch of a higher version was written by a deposed writer: fenced
        // (never part of the log), counted for the report.
        let mut first_of: BTreeMap<u64, u64> = BTreeMap::new();
        for (version, last) in keys {
            let first = first_of.entry(*version).or_insert(*last);
            *first = (*first).min(*last);
        }
        *superseded += keys
            .iter()
            .filter(|(version, last)| {
                first_of
                    .range(version + 1..)
                    .any(|(_, first_higher)| last >= first_higher)
            })
            .count();
    }
}

/// The longest stretch from the last acknowledgement before a failed
/// attempt to the next acknowledgement, for one database: (length, start).
fn longest_unavailable(db: &str, history: &History) -> (Duration, Duration) {
    let mut events: Vec<(Duration, bool)> = history
        .acks
        .iter()
        .filter(|ack| ack.db == db)
        .map(|ack| (ack.at, true))
        .chain(
            history
                .errors
                .iter()
                .filter(|(d, ..)| d == db)
                .map(|(_, at, _)| (*at, false)),
        )
        .collect();
    events.sort();
    let mut longest = (Duration::ZERO, Duration::ZERO);
    let mut last_ok = Duration::ZERO;
    let mut failing = false;
    for (at, ok) in events {
        if ok {
            if failing && at.saturating_sub(last_ok) > longest.0 {
                longest = (at.saturating_sub(last_ok), last_ok);
            }
            failing = false;
            last_ok = at;
        } else {
            failing = true;
        }
    }
    longest
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "run {}: {} attempts, {} acknowledged, {} failed attempts, {} replays checked, {} subscription deliveries, {} superseded (fenced) log records",
            self.label,
            self.attempts,
            self.acked,
            self.errors,
            self.replays,
            self.delivered,
            self.superseded_records
        )?;
        for fault in &self.faults {
            writeln!(f, "  fault: {fault}")?;
        }
        for (db, (longest, from)) in &self.longest_unavailable {
            writeln!(
                f,
                "  {db}: {} ownership moves, longest unavailability {} ms (from @{}ms)",
                self.failovers.get(db).copied().unwrap_or(0),
                longest.as_millis(),
                from.as_millis()
            )?;
        }
        if self.violations.is_empty() {
            write!(f, "  verdict: PASS")
        } else {
            writeln!(f, "  verdict: FAIL ({} violations)", self.violations.len())?;
            for violation in &self.violations {
                writeln!(f, "  - {violation}")?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(db: &str, item: &str, t: u64, version: u64) -> Ack {
        Ack {
            db: db.into(),
            item: item.into(),
            request_id: format!("id-{item}"),
            t,
            lease_version: Some(version),
            replayed: false,
            response: vec![u8::try_from(t).unwrap()],
            at: Duration::from_millis(t * 10),
        }
    }

    fn log(entries: &[(u64, &str)]) -> Vec<(u64, Vec<String>)> {
        entries
            .iter()
            .map(|(t, item)| (*t, vec![(*item).to_owned(), format!("id-{item}")]))
            .collect()
    }

    /// Asserts that `report` has a violation whose text holds all of `words`.
    #[track_caller]
    fn assert_violation(report: &Report, words: &[&str]) {
        assert!(
            report
                .violations
                .iter()
                .any(|v| words.iter().all(|word| v.contains(word))),
            "no violation with {words:?}: {report}"
        );
    }

    fn run(acks: Vec<Ack>, log_entries: &[(u64, &str)], keys: Vec<(u64, u64)>) -> Report {
        let history = History {
            acks,
            ..History::default()
        };
        let durable = Durable {
            logs: BTreeMap::from([("a".to_owned(), log(log_entries))]),
            record_keys: BTreeMap::from([("a".to_owned(), keys)]),
            replays: vec![(0, Ok(vec![1]))],
        };
        check("unit", &history, &durable, &BTreeSet::new())
    }

    #[test]
    fn a_clean_run_passes() {
        let report = run(
            vec![ack("a", "x", 1, 1), ack("a", "y", 2, 1), ack("a", "z", 3, 2)],
            &[(1, "x"), (2, "y"), (3, "z")],
            vec![(1, 2), (2, 3)],
        );
        assert!(report.passed(), "{report}");
        assert_eq!(report.failovers["a"], 1);
    }

    #[test]
    #[allow(clippy::too_many_lines)] // One case per promise, in the order the module docs list them.
    fn each_promise_is_checked() {
        // Lost write: t=2 holds another transaction.
        let report = run(
            vec![ack("a", "x", 1, 1), ack("a", "y", 2, 1)],
            &[(1, "x"), (2, "w")],
            vec![(1, 2)],
        );
        assert_violation(&report, &["lost write"]);
        // Gap.
        let report = run(vec![ack("a", "x", 1, 1)], &[(1, "x"), (3, "w")], vec![(1, 3)]);
        assert_violation(&report, &["exactly one record"]);
        // Twice.
        let report = run(vec![ack("a", "x", 1, 1)], &[(1, "x"), (2, "x")], vec![(1, 2)]);
        assert_violation(&report, &["committed twice"]);
        // Twice, though never acknowledged (a writer without request ids
        // that saw an error): attempted items count as well.
        let history = History {
            acks: vec![ack("a", "x", 1, 1)],
            attempted: BTreeSet::from([("a".to_owned(), "x".to_owned()), ("a".to_owned(), "u".to_owned())]),
            ..History::default()
        };
        let durable = Durable {
            logs: BTreeMap::from([("a".to_owned(), log(&[(1, "x"), (2, "u"), (3, "u")]))]),
            ..Durable::default()
        };
        let report = check("unit", &history, &durable, &BTreeSet::new());
        assert_violation(&report, &["item u committed twice"]);
        // Twice as an identity upsert: the resend's transaction asserts no
        // item (acknowledged at its t, or not acknowledged at all).
        let history = History {
            acks: vec![ack("a", "x", 1, 1), ack("a", "y", 3, 1)],
            attempted: BTreeSet::from([("a".to_owned(), "x".to_owned()), ("a".to_owned(), "y".to_owned())]),
            ..History::default()
        };
        let durable = Durable {
            logs: BTreeMap::from([(
                "a".to_owned(),
                vec![
                    (1, vec!["x".to_owned()]),
                    (2, vec!["y".to_owned()]),
                    (3, Vec::new()),
                    (4, vec!["fleet".to_owned()]),
                ],
            )]),
            ..Durable::default()
        };
        let report = check("unit", &history, &durable, &BTreeSet::new());
        assert_violation(&report, &["y committed twice", "upsert"]);
        assert_violation(&report, &["t=4 commits no writer's item"]);
        // Two writers: t=3 under version 1 after t=2 under version 2.
        let report = run(
            vec![ack("a", "x", 1, 1), ack("a", "y", 2, 2), ack("a", "z", 3, 1)],
            &[(1, "x"), (2, "y"), (3, "z")],
            vec![(1, 1), (2, 2), (1, 3)],
        );
        assert_violation(&report, &["two writers"]);
        // … unless the late answer was a replay by a later owner.
        let mut replay = ack("a", "x", 1, 2);
        replay.replayed = true;
        let report = run(
            vec![replay, ack("a", "y", 2, 1), ack("a", "z", 3, 2)],
            &[(1, "x"), (2, "y"), (3, "z")],
            vec![(1, 1), (1, 2), (2, 3)],
        );
        assert!(report.passed(), "{report}");
        // No durable record under the acknowledging version.
        let report = run(vec![ack("a", "x", 1, 3)], &[(1, "x")], vec![(2, 1)]);
        assert_violation(&report, &["no durable record"]);
        // A replay that differs.
        let mut bad = run(vec![ack("a", "x", 1, 1)], &[(1, "x")], vec![(1, 1)]);
        assert!(bad.passed(), "{bad}");
        let history = History {
            acks: vec![ack("a", "x", 1, 1)],
            deliveries: BTreeMap::from([
                (
                    ("a".to_owned(), 0),
                    vec![(1, vec!["x".to_owned(), "id-x".to_owned()]), (1, Vec::new())],
                ),
                (("a".to_owned(), 1), vec![(1, vec!["phantom".to_owned()])]),
            ]),
            errors: vec![("b".to_owned(), Duration::from_millis(5), tonic::Code::Unavailable)],
            ..History::default()
        };
        let durable = Durable {
            logs: BTreeMap::from([("a".to_owned(), log(&[(1, "x")])), ("b".to_owned(), Vec::new())]),
            replays: vec![(0, Ok(vec![9]))],
            ..Durable::default()
        };
        bad = check("unit", &history, &durable, &BTreeSet::from(["b".to_owned()]));
        assert_violation(&bad, &["different response"]);
        assert_violation(&bad, &["subscriber 0"]);
        assert_violation(&bad, &["subscriber 1", "does not hold"]);
        assert_violation(&bad, &["no fault touched it"]);
    }

    #[test]
    fn superseded_batches_are_counted_and_unavailability_measured() {
        let report = run(
            vec![ack("a", "x", 1, 1), ack("a", "y", 2, 2)],
            &[(1, "x"), (2, "y")],
            // Version 1 also wrote a batch ending at 2 after version 2 began at 2.
            vec![(1, 1), (1, 2), (2, 2)],
        );
        assert!(report.passed(), "{report}");
        assert_eq!(report.superseded_records, 1);
        let history = History {
            acks: vec![ack("a", "x", 1, 1), ack("a", "y", 50, 1)],
            errors: vec![(
                "a".to_owned(),
                Duration::from_millis(200),
                tonic::Code::Unavailable,
            )],
            ..History::default()
        };
        assert_eq!(
            longest_unavailable("a", &history),
            (Duration::from_millis(490), Duration::from_millis(10))
        );
    }
}
