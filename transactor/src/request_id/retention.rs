//! Request-id retention (`--request-id-retention-secs`): records older than
//! the window are retracted, so exactly-once does not make a database's
//! memory grow without end.
//!
//! Corium keeps every datom a database value has recorded. A value opened
//! from published indexes (`Db::from_history_snapshot`) is built from the
//! history index, which leaves out `:db/noHistory` attributes, plus their
//! *current* values; `:fleet.request/key` is `:db/noHistory` in every
//! database the fleet creates. So once a key is retracted and the indexes
//! are published, every later open of the database (a handoff, a takeover,
//! an eviction and reactivation) holds only the keys inside the window. A
//! running owner keeps what it recorded until it next opens.
//!
//! What it changes: a resend of a transaction after its record expired is
//! a new transaction (it commits again), and a status query about an
//! expired id cannot be answered from the record (`ledger.rs` says so for
//! time-ordered ids, whose age it can read). Design note 0021.

use corium_core::{EntityId, Value};
use corium_db::Db;
use corium_query::edn::Edn;

use super::answer::raw;
use super::record::{KEY, attr, bytes_edn, kw};

/// The keys of transactions committed at or before `cutoff_unix_ms`, at most
/// `limit` of them (a retraction per transaction of records is bounded).
#[must_use]
pub(crate) fn expired(db: &Db, cutoff_unix_ms: i64, limit: usize) -> Vec<(EntityId, Value)> {
    let Some(key_attr) = attr(db, KEY) else {
        return Vec::new();
    };
    let cutoff_t = db.t_at_instant(cutoff_unix_ms);
    if cutoff_t == 0 {
        return Vec::new();
    }
    db.index_range(key_attr, None, None)
        .map(|keys| {
            keys.filter(|datom| datom.e.sequence() <= cutoff_t)
                .take(limit)
                .map(|datom| (datom.e, datom.v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The transaction retracting `expired` (`None` when there is nothing).
#[must_use]
pub(crate) fn retraction(expired: &[(EntityId, Value)]) -> Option<Edn> {
    let retractions: Vec<Edn> = expired
        .iter()
        .filter_map(|(tx, value)| match value {
            Value::Bytes(bytes) => Some(Edn::Vector(vec![
                kw(("db", "retract")),
                Edn::Long(raw(*tx)),
                kw(KEY),
                bytes_edn(bytes),
            ])),
            _ => None,
        })
        .collect();
    (!retractions.is_empty()).then_some(Edn::Vector(retractions))
}

/// Whether `db` keeps its request keys out of its history index (every
/// database created from this release on), so that retracting them frees
/// their memory at the next open.
#[must_use]
pub(crate) fn keys_leave_history(db: &Db) -> bool {
    attr(db, KEY)
        .and_then(|key_attr| db.schema().get(key_attr))
        .is_some_and(|attribute| attribute.no_history)
}
