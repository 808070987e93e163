//! Generated sequences: seeded, bounded sequences of calls over a few
//! databases — transactions with tempids, upserts, references and
//! retractions, refused ones, reads from random bases, index requests,
//! schema changes, forks, deletes and sagas — for the differential runs,
//! with `PeerServer` calls (reads in every view, thin-client writes and
//! subscriptions) between them. The same seed gives the same sequence;
//! [`shrink`] makes a failing one shorter.

use corium_fleet_faults::Rng;

use super::op::{Op, View};

/// How often a `PeerServer` call comes before a generated call.
const PEER_SERVER_CALLS: f64 = 0.2;

/// The schema every generated database is created with.
pub const SCHEMA: &str = "[{:db/ident :item/name :db/valueType :db.type/string \
    :db/cardinality :db.cardinality/one :db/unique :db.unique/identity} \
    {:db/ident :item/tags :db/valueType :db.type/string :db/cardinality :db.cardinality/many} \
    {:db/ident :item/friend :db/valueType :db.type/ref :db/cardinality :db.cardinality/one} \
    {:db/ident :item/size :db/valueType :db.type/long :db/cardinality :db.cardinality/one}]";

/// What the generator knows of one database name.
#[derive(Default, Clone)]
struct Known {
    created: bool,
    /// Item names asserted (some may have been refused: the generator does
    /// not predict answers, it only makes references likely to resolve).
    items: Vec<String>,
    /// Transactions sent since creation (an upper bound of the basis).
    sent: u64,
    /// Sagas opened and not yet committed or aborted.
    sagas: Vec<String>,
    /// Item names asserted through `PeerServer/Transact`, and how many
    /// such transactions were sent (apart from the others, so the other
    /// calls are drawn as before `PeerServer` calls were added).
    peer_items: Vec<String>,
    peer_sent: u64,
}

/// A sequence of `length` calls from `seed`, over databases named
/// `<prefix>-0` … `<prefix>-2` (a deleted one is followed by a new name).
///
/// `PeerServer` calls are drawn from a second generator of the seed, so
/// the other calls are the sequence the seed gave before they were added
/// (interleaved with them, and cut at `length`).
#[must_use]
pub fn sequence(seed: u64, prefix: &str, length: usize) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut reads = Rng::new(seed ^ 0x7ee7_5e7e_7ee7_5e7e);
    let mut names: Vec<String> = (0..3).map(|i| format!("{prefix}-{i}")).collect();
    let mut known = vec![Known::default(); names.len()];
    let mut ops = Vec::with_capacity(length);
    let mut counter = 0u64;
    while ops.len() < length {
        let index = usize::try_from(rng.below(names.len() as u64)).unwrap_or(0);
        let db = names[index].clone();
        counter += 1;
        let state = &mut known[index];
        if !state.created {
            ops.push(Op::Create {
                db: db.clone(),
                schema: SCHEMA.to_owned(),
                storage_key: String::new(),
            });
            state.created = true;
            continue;
        }
        if reads.chance(PEER_SERVER_CALLS) {
            ops.push(peer_server(&mut reads, &db, state, counter));
            if ops.len() == length {
                break;
            }
        }
        let roll = rng.below(20);
        let op = if roll <= 10 {
            write(&mut rng, &db, state, counter, roll)
        } else {
            other(&mut rng, db, state, counter, prefix, roll)
        };
        if matches!(op, Op::Delete { .. }) {
            // A deleted name is not created again: stock Corium 0.1.90 breaks
            // on that (design note 0016), so later calls go to a new name.
            names[index] = format!("{prefix}-{index}-{counter}");
        }
        ops.push(op);
    }
    ops
}

/// One of `items`, if any.
fn pick(rng: &mut Rng, items: &[String]) -> Option<String> {
    (!items.is_empty()).then(|| items[usize::try_from(rng.below(items.len() as u64)).unwrap_or(0)].clone())
}

/// A transaction on `db` (`roll` 0–10): new items, a reference between two
/// new ones, an upsert, a retraction, a refused one, a compare on basis.
fn write(rng: &mut Rng, db: &str, state: &mut Known, counter: u64, roll: u64) -> Op {
    match roll {
        0..=5 => {
            let name = format!("item-{counter}");
            state.items.push(name.clone());
            state.sent += 1;
            Op::transact(
                db,
                &format!(r#"[{{:db/id "n" :item/name "{name}" :item/size {counter}}}]"#),
            )
        }
        6 => {
            let (a, b) = (format!("item-{counter}a"), format!("item-{counter}b"));
            state.items.extend([a.clone(), b.clone()]);
            state.sent += 1;
            Op::transact(
                db,
                &format!(
                    r#"[{{:db/id "a" :item/name "{a}" :item/friend "b"}} {{:db/id "b" :item/name "{b}" :item/tags "t{counter}"}}]"#
                ),
            )
        }
        // An upsert: a new tempid that resolves to an existing item.
        7 => match pick(rng, &state.items) {
            Some(name) => {
                state.sent += 1;
                Op::transact(
                    db,
                    &format!(r#"[{{:db/id "u" :item/name "{name}" :item/tags "up{counter}"}}]"#),
                )
            }
            None => Op::Status { db: db.to_owned() },
        },
        8 => match pick(rng, &state.items) {
            Some(name) => {
                state.sent += 1;
                Op::transact(
                    db,
                    &format!(
                        r#"[[:db/retract [:item/name "{name}"] :item/size {counter}] [:db/add [:item/name "{name}"] :item/tags "r{counter}"]]"#
                    ),
                )
            }
            None => Op::Status { db: db.to_owned() },
        },
        9 => Op::transact(
            db,
            &format!(r#"[{{:db/id "x" :item/size "not a number {counter}"}}]"#),
        ),
        _ => Op::Transact {
            db: db.to_owned(),
            edn: format!(r#"[{{:db/id "c" :item/name "cas-{counter}"}}]"#),
            expected_basis_t: Some(rng.below(state.sent + 3)),
        },
    }
}

/// Anything but a plain transaction on `db` (`roll` 11–19): reads, an index
/// request, a schema change, sagas, a fork or a delete.
fn other(rng: &mut Rng, db: String, state: &mut Known, counter: u64, prefix: &str, roll: u64) -> Op {
    match roll {
        11 => Op::Sync {
            db,
            t: u64::from(state.sent > 0 && rng.chance(0.5)),
        },
        12 => Op::Status { db },
        13 | 14 => Op::Subscribe {
            db,
            from_basis_t: rng.below(state.sent + 2),
        },
        15 if rng.chance(0.5) => Op::RequestIndex { db },
        // A schema change: the schema with one attribute more.
        15 => Op::AlterSchema {
            db,
            desired: SCHEMA.replace(
                ']',
                &format!(" {{:db/ident :item/note-{counter} :db/valueType :db.type/string :db/cardinality :db.cardinality/one}}]"),
            ),
        },
        16 => {
            let saga = format!("{:032x}", rng.next_u64() | 1);
            state.sagas.push(saga.clone());
            state.sent += 1;
            Op::transact(&db, &open_saga(&saga))
        }
        17 => match pick(rng, &state.sagas) {
            Some(saga) => Op::transact(
                &format!("{db}.saga.{saga}"),
                &format!(r#"[{{:db/id "s" :item/name "saga-{counter}"}}]"#),
            ),
            None => Op::Sync { db, t: 0 },
        },
        18 => match pick(rng, &state.sagas) {
            Some(saga) => {
                state.sagas.retain(|open| *open != saga);
                state.sent += 1;
                if rng.chance(0.5) {
                    Op::SagaCommit { db, saga }
                } else {
                    Op::SagaFinish {
                        db,
                        saga,
                        status: "aborted".to_owned(),
                    }
                }
            }
            None => Op::List,
        },
        _ => {
            if rng.chance(0.5) {
                Op::Fork {
                    db,
                    target: format!("{prefix}-fork-{counter}"),
                    as_of_t: rng.below(state.sent + 1),
                }
            } else {
                *state = Known::default();
                Op::Delete { db }
            }
        }
    }
}

/// A view of a database that has had at most `sent` transactions: as of
/// or since a basis up to one past it (a view past the basis reads the
/// present on both sides), its history, or as it is.
fn view(rng: &mut Rng, sent: u64) -> View {
    match rng.below(5) {
        0 => View::AsOf(rng.below(sent + 2)),
        1 => View::Since(rng.below(sent + 2)),
        2 => View::History,
        _ => View::Current,
    }
}

/// A `PeerServer` call on `db`: a query, a pull, a datom range, the log,
/// the counts, a write or a subscription.
fn peer_server(rng: &mut Rng, db: &str, state: &mut Known, counter: u64) -> Op {
    let db = db.to_owned();
    let items = [state.items.as_slice(), state.peer_items.as_slice()].concat();
    // An item asserted, or (1 in 5, or none yet) one that never was.
    let item = match pick(rng, &items) {
        Some(name) if !rng.chance(0.2) => name,
        _ => format!("nobody-{counter}"),
    };
    let sent = state.sent + state.peer_sent;
    let view = view(rng, sent);
    match rng.below(10) {
        0 | 1 => {
            let (query, args) = match rng.below(4) {
                0 => ("[:find ?e ?name :where [?e :item/name ?name]]", "[]".to_owned()),
                1 => (
                    "[:find ?e ?tag ?friend :where [?e :item/tags ?tag] [(get-else $ ?e :item/friend 0) ?friend]]",
                    "[]".to_owned(),
                ),
                2 => (
                    "[:find (count ?e) . :in $ ?name :where [?e :item/name ?name]]",
                    format!("[{item:?}]"),
                ),
                _ => ("[:find (pull ?e [*]) :where [?e :item/size _]]", "[]".to_owned()),
            };
            Op::Query {
                db,
                view,
                query: query.to_owned(),
                args,
            }
        }
        2 => Op::Pull {
            db,
            view,
            pattern: "[* {:item/friend [:item/name]}]".to_owned(),
            eid: format!("[:item/name {item:?}]"),
        },
        3 | 4 => {
            let (index, components, limit) = match rng.below(4) {
                0 => ("aevt", "[:item/name]".to_owned(), rng.below(3)),
                1 => ("eavt", format!("[[:item/name {item:?}]]"), 0),
                2 => ("avet", format!("[:item/name {item:?}]"), 0),
                _ => ("vaet", "[]".to_owned(), 0),
            };
            Op::Datoms {
                db,
                view,
                index: index.to_owned(),
                components,
                limit,
            }
        }
        5 => Op::TxRange {
            db,
            start: rng.below(sent + 2),
            end: rng.below(sent + 3),
        },
        6 => Op::DbStats { db, view },
        7 | 8 => {
            let name = format!("peer-{counter}");
            state.peer_items.push(name.clone());
            state.peer_sent += 1;
            // A reference to an item through a lookup ref (refused when
            // the item never was).
            let friend = if items.is_empty() {
                String::new()
            } else {
                format!(" :item/friend [:item/name {item:?}]")
            };
            Op::PeerTransact {
                db,
                edn: format!(r#"[{{:db/id "p" :item/name "{name}"{friend}}}]"#),
            }
        }
        _ => Op::PeerSubscribe {
            db,
            from_basis_t: rng.below(sent + 2),
        },
    }
}

/// The transaction that opens saga `id` as corium-peer's
/// `saga::open_forms` writes it, rooted at basis 0, expiring in 2100.
#[must_use]
pub fn open_saga(id: &str) -> String {
    format!(
        r#"[[:db/add "saga" :db.saga/id #uuid "{id}"] [:db/add "saga" :db.saga/status :db.saga.status/open] [:db/add "saga" :db.saga/basis-t 0] [:db/add "saga" :db.saga/owner "differential"] [:db/add "saga" :db.saga/expires-at #inst 4102444800000]]"#
    )
}

/// Shortens `ops` while `fails` still holds for it: drops one call at a
/// time, from the end, at most `attempts` tries. Returns the shortest
/// failing sequence found.
pub async fn shrink(ops: Vec<Op>, attempts: usize, mut fails: impl AsyncFnMut(&[Op]) -> bool) -> Vec<Op> {
    let mut current = ops;
    let mut tried = 0;
    let mut index = current.len();
    while index > 0 && tried < attempts {
        index -= 1;
        let mut candidate = current.clone();
        candidate.remove(index);
        tried += 1;
        if fails(&candidate).await {
            current = candidate;
        }
    }
    current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_sequence_and_every_database_is_created_first() {
        let first = sequence(7, "p", 60);
        let again = sequence(7, "p", 60);
        assert_eq!(format!("{first:?}"), format!("{again:?}"));
        assert_ne!(format!("{first:?}"), format!("{:?}", sequence(8, "p", 60)));
        assert_eq!(first.len(), 60);
        let mut created = std::collections::BTreeSet::new();
        for op in &first {
            match op {
                Op::Create { db, .. } => {
                    created.insert(db.clone());
                }
                Op::Delete { db } => {
                    created.remove(db);
                }
                Op::Transact { db, .. } => {
                    let home = corium_fleet_common::names::home(db);
                    assert!(
                        created.contains(home),
                        "{db} used before it was created: {first:?}"
                    );
                }
                op if op.is_peer_server() => {
                    let db = op.db().unwrap_or_default();
                    assert!(created.contains(db), "{db} used before it was created: {first:?}");
                }
                _ => {}
            }
        }
        let peer_server = first.iter().filter(|op| op.is_peer_server()).count();
        assert!(
            (4..=24).contains(&peer_server),
            "{peer_server} PeerServer calls in 60"
        );
    }

    #[tokio::test]
    async fn shrinking_keeps_only_what_the_failure_needs() {
        let ops: Vec<Op> = (0..10)
            .map(|i| Op::Status {
                db: format!("db-{i}"),
            })
            .collect();
        let needs_three_and_seven = async |ops: &[Op]| {
            let text = format!("{ops:?}");
            text.contains("db-3") && text.contains("db-7")
        };
        let shrunk = shrink(ops, 100, needs_three_and_seven).await;
        assert_eq!(
            format!("{shrunk:?}"),
            r#"[Status { db: "db-3" }, Status { db: "db-7" }]"#
        );
    }
}
