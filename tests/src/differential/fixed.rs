//! The fixed sequence: every RPC of `Transactor`, `Catalog` and
//! `PeerServer`, answers and errors both, over one database (`diff-a`), its
//! saga branches and a fork of it.

use super::op::{Op, View};

/// The schema of `diff-a`.
const SCHEMA: &str = "[{:db/ident :item/name :db/valueType :db.type/string \
    :db/cardinality :db.cardinality/one :db/unique :db.unique/identity} \
    {:db/ident :item/tags :db/valueType :db.type/string :db/cardinality :db.cardinality/many} \
    {:db/ident :item/friend :db/valueType :db.type/ref :db/cardinality :db.cardinality/one} \
    {:db/ident :item/born :db/valueType :db.type/instant :db/cardinality :db.cardinality/one}]";

fn create(db: &str) -> Op {
    Op::Create {
        db: db.to_owned(),
        schema: SCHEMA.to_owned(),
        storage_key: String::new(),
    }
}

/// The transaction that opens saga `id` as corium-peer's
/// `saga::open_forms` writes it, rooted at basis 2, expiring in 2100.
fn open_saga(id: &str) -> String {
    format!(
        r#"[[:db/add "saga" :db.saga/id #uuid "{id}"] [:db/add "saga" :db.saga/status :db.saga.status/open] [:db/add "saga" :db.saga/basis-t 2] [:db/add "saga" :db.saga/owner "differential"] [:db/add "saga" :db.saga/expires-at #inst 4102444800000]]"#
    )
}

/// One sequence with every `Transactor`, `Catalog` and `PeerServer` RPC,
/// answers and errors both: writes and reads, thin-client reads and
/// writes, the catalog's other calls, then sagas and the catalog's
/// lifecycle.
#[must_use]
pub fn every_rpc() -> Vec<Op> {
    let a = "diff-a";
    [
        writes_and_reads(a),
        peer_reads(a),
        peer_errors_and_writes(a),
        catalog(a),
        sagas_and_lifecycle(a),
    ]
    .concat()
}

/// [`every_rpc`] on databases encrypted at rest (issue 50): every create
/// names `kek`, and the re-wrap moves the database onto `next_kek` (both
/// sides must hold both keys, under the same IDs), so the key calls answer
/// about a real manifest: its status, a rotation to a new epoch, a re-wrap.
#[must_use]
pub fn every_rpc_encrypted(kek: &str, next_kek: &str) -> Vec<Op> {
    every_rpc()
        .into_iter()
        .map(|op| match op {
            Op::Create { db, schema, .. } => Op::Create {
                db,
                schema,
                storage_key: kek.to_owned(),
            },
            Op::Rewrap { db, .. } => Op::Rewrap {
                db,
                kek: next_kek.to_owned(),
            },
            other => other,
        })
        .collect()
}

/// Creates, transactions (committed and refused), `Sync`, `Status` and
/// subscriptions.
fn writes_and_reads(a: &str) -> Vec<Op> {
    vec![
        Op::List,
        create(a),
        create(a),
        create("not a valid name!"),
        Op::CreateRaw {
            db: "diff-junk".to_owned(),
            schema: vec![0xff, 0x00, 0x13],
        },
        Op::transact(a, r#"[{:db/id "x" :item/name "one"}]"#),
        Op::transact(
            a,
            r#"[{:db/id "y" :item/name "two" :item/friend "z" :item/tags "t1"} {:db/id "z" :item/name "three" :item/born #inst 981173106000}]"#,
        ),
        // An upsert of "one", and a second tag on "two".
        Op::transact(
            a,
            r#"[{:db/id "u" :item/name "one" :item/tags "t2"} [:db/add [:item/name "two"] :item/tags "t3"]]"#,
        ),
        Op::transact(a, r"[{:db/id"),
        Op::transact(a, r#"[{:db/id "x" :nope/nope 1}]"#),
        Op::transact(a, r#"[{:db/id "x" :item/name 42}]"#),
        Op::Transact {
            db: a.to_owned(),
            edn: r#"[{:db/id "x" :item/name "stale"}]"#.to_owned(),
            expected_basis_t: Some(99),
        },
        Op::TransactRaw {
            db: a.to_owned(),
            tx_data: vec![0xde, 0xad],
        },
        Op::transact("diff-nope", r#"[{:db/id "x" :item/name "one"}]"#),
        Op::transact(a, r#"[[:db/retract [:item/name "two"] :item/tags "t1"]]"#),
        Op::Sync {
            db: a.to_owned(),
            t: 0,
        },
        Op::Sync {
            db: a.to_owned(),
            t: 2,
        },
        Op::Sync {
            db: "diff-nope".to_owned(),
            t: 0,
        },
        Op::Status { db: a.to_owned() },
        Op::Status {
            db: "diff-nope".to_owned(),
        },
        Op::Subscribe {
            db: a.to_owned(),
            from_basis_t: 0,
        },
        Op::Subscribe {
            db: a.to_owned(),
            from_basis_t: 3,
        },
    ]
}

fn query(db: &str, view: View, query: &str, args: &str) -> Op {
    Op::Query {
        db: db.to_owned(),
        view,
        query: query.to_owned(),
        args: args.to_owned(),
    }
}

fn pull(db: &str, view: View, pattern: &str, eid: &str) -> Op {
    Op::Pull {
        db: db.to_owned(),
        view,
        pattern: pattern.to_owned(),
        eid: eid.to_owned(),
    }
}

fn datoms(db: &str, view: View, index: &str, components: &str, limit: u64) -> Op {
    Op::Datoms {
        db: db.to_owned(),
        view,
        index: index.to_owned(),
        components: components.to_owned(),
        limit,
    }
}

fn stats(db: &str, view: View) -> Op {
    Op::DbStats {
        db: db.to_owned(),
        view,
    }
}

/// `PeerServer` reads of the database the writes left (at basis 4), in
/// every view: every query shape, inputs, pulls, each index, the log, the
/// counts.
fn peer_reads(a: &str) -> Vec<Op> {
    const NAMES: &str = "[:find ?e ?name :where [?e :item/name ?name]]";
    vec![
        query(a, View::Current, NAMES, "[]"),
        query(a, View::AsOf(2), NAMES, "[]"),
        query(
            a,
            View::Since(2),
            "[:find ?e ?tag :where [?e :item/tags ?tag]]",
            "[]",
        ),
        query(
            a,
            View::History,
            "[:find ?e ?tag ?tx ?added :where [?e :item/tags ?tag ?tx ?added]]",
            "[]",
        ),
        query(
            a,
            View::Current,
            "[:find (count ?e) . :in $ ?name :where [?e :item/name ?name]]",
            r#"["two"]"#,
        ),
        query(
            a,
            View::Current,
            "[:find [?name ?born] :where [?e :item/name ?name] [?e :item/born ?born]]",
            "[]",
        ),
        query(
            a,
            View::Current,
            "[:find [?name ...] :where [_ :item/name ?name]]",
            "[]",
        ),
        query(
            a,
            View::Current,
            "[:find (pull ?e [*]) :where [?e :item/friend _]]",
            "[]",
        ),
        pull(a, View::Current, "[*]", r#"[:item/name "two"]"#),
        pull(
            a,
            View::AsOf(2),
            "[:item/name :item/tags {:item/friend [:item/name]}]",
            r#"[:item/name "two"]"#,
        ),
        pull(
            a,
            View::History,
            "[:item/name :item/tags]",
            r#"[:item/name "two"]"#,
        ),
        pull(a, View::Current, "[:db/ident]", ":item/name"),
        datoms(a, View::Current, "aevt", "[:item/name]", 0),
        datoms(a, View::Current, "eavt", r#"[[:item/name "two"]]"#, 0),
        datoms(a, View::Current, "avet", r#"[:item/name "one"]"#, 0),
        datoms(a, View::Current, "vaet", "[]", 0),
        datoms(a, View::Current, "vaet", r#"[[:item/name "three"]]"#, 0),
        datoms(a, View::AsOf(3), "aevt", "[:item/tags]", 0),
        datoms(a, View::Since(3), "aevt", "[:item/tags]", 0),
        datoms(a, View::History, "eavt", "[]", 0),
        datoms(a, View::Current, "aevt", "[:item/name]", 2),
        Op::TxRange {
            db: a.to_owned(),
            start: 1,
            end: 0,
        },
        Op::TxRange {
            db: a.to_owned(),
            start: 0,
            end: 2,
        },
        Op::TxRange {
            db: a.to_owned(),
            start: 2,
            end: 4,
        },
        stats(a, View::Current),
        stats(a, View::AsOf(2)),
        stats(a, View::Since(2)),
        stats(a, View::History),
    ]
}

/// `PeerServer` errors (bad query EDN, an unknown attribute, a missing
/// input, an unresolved lookup ref, an unknown ident, a bad index, an
/// unknown database for every method), its writes and subscriptions, and
/// reads right after its writes.
fn peer_errors_and_writes(a: &str) -> Vec<Op> {
    let nope = "diff-nope";
    vec![
        query(a, View::Current, "[:find ?x :where", "[]"),
        query(a, View::Current, "[:find ?x :where [?x :no/such ?y]]", "[]"),
        query(
            a,
            View::Current,
            "[:find ?e :in $ ?name :where [?e :item/name ?name]]",
            "[]",
        ),
        pull(a, View::Current, "[*]", r#"[:item/name "nobody"]"#),
        pull(a, View::Current, "[*]", ":no/such"),
        datoms(a, View::Current, "xyz", "[]", 0),
        datoms(a, View::Current, "aevt", "[:no/such]", 0),
        Op::PeerTransact {
            db: a.to_owned(),
            edn: r#"[{:db/id "p" :item/name "four" :item/friend [:item/name "one"]}]"#.to_owned(),
        },
        // Read right after the write: the reads must see it.
        query(
            a,
            View::Current,
            "[:find ?name :where [_ :item/name ?name]]",
            "[]",
        ),
        pull(a, View::Current, "[*]", r#"[:item/name "four"]"#),
        stats(a, View::Current),
        Op::PeerTransact {
            db: a.to_owned(),
            edn: r#"[{:db/id "p" :nope/nope 1}]"#.to_owned(),
        },
        Op::PeerTransact {
            db: a.to_owned(),
            edn: "[{:db/id".to_owned(),
        },
        Op::PeerSubscribe {
            db: a.to_owned(),
            from_basis_t: 0,
        },
        Op::PeerSubscribe {
            db: a.to_owned(),
            from_basis_t: 3,
        },
        query(nope, View::Current, "[:find ?e :where [?e :item/name _]]", "[]"),
        pull(nope, View::Current, "[*]", r#"[:item/name "one"]"#),
        datoms(nope, View::Current, "eavt", "[]", 0),
        Op::TxRange {
            db: nope.to_owned(),
            start: 1,
            end: 0,
        },
        stats(nope, View::Current),
        Op::PeerTransact {
            db: nope.to_owned(),
            edn: r#"[{:db/id "x" :item/name "one"}]"#.to_owned(),
        },
        Op::PeerSubscribe {
            db: nope.to_owned(),
            from_basis_t: 0,
        },
    ]
}

/// Indexing, storage and key calls, and a schema plan.
fn catalog(a: &str) -> Vec<Op> {
    vec![
        Op::RequestIndex { db: a.to_owned() },
        Op::SetIndexPolicy {
            db: a.to_owned(),
            interval_ms: None,
        },
        Op::SetIndexPolicy {
            db: a.to_owned(),
            interval_ms: Some(60_000),
        },
        Op::StorageInfo { db: a.to_owned() },
        Op::KeyStatus { db: a.to_owned() },
        Op::RotateKey { db: a.to_owned() },
        Op::Rewrap {
            db: a.to_owned(),
            kek: "none".to_owned(),
        },
        Op::AlterSchema {
            db: a.to_owned(),
            desired: SCHEMA.to_owned(),
        },
    ]
}

/// Sagas opened, stepped (through `Transactor` and `PeerServer`),
/// committed and aborted; a fork, deletes (and `PeerServer` calls on the
/// deleted database), GC.
fn sagas_and_lifecycle(a: &str) -> Vec<Op> {
    let saga = "0123456789abcdef0123456789abcdef".to_owned();
    let other_saga = "fedcba9876543210fedcba9876543210".to_owned();
    let branch = format!("{a}.saga.{saga}");
    vec![
        // A saga: opened on the parent, a step on its branch, committed;
        // a second one opened and aborted; then both again (refused).
        Op::transact(a, &open_saga(&saga)),
        Op::transact(&branch, r#"[{:db/id "s" :item/name "in the saga"}]"#),
        Op::Sync {
            db: branch.clone(),
            t: 0,
        },
        Op::Subscribe {
            db: branch.clone(),
            from_basis_t: 0,
        },
        // The branch through `PeerServer`: read, stepped, read again.
        query(
            &branch,
            View::Current,
            "[:find ?e ?name :where [?e :item/name ?name]]",
            "[]",
        ),
        stats(&branch, View::Current),
        Op::TxRange {
            db: branch.clone(),
            start: 0,
            end: 0,
        },
        Op::PeerTransact {
            db: branch.clone(),
            edn: r#"[{:db/id "s" :item/name "peer step"}]"#.to_owned(),
        },
        query(
            &branch,
            View::Current,
            "[:find ?e ?name :where [?e :item/name ?name]]",
            "[]",
        ),
        Op::SagaCommit {
            db: a.to_owned(),
            saga: saga.clone(),
        },
        Op::transact(a, &open_saga(&other_saga)),
        Op::SagaFinish {
            db: a.to_owned(),
            saga: other_saga.clone(),
            status: "aborted".to_owned(),
        },
        Op::SagaCommit {
            db: a.to_owned(),
            saga: other_saga.clone(),
        },
        Op::SagaFinish {
            db: a.to_owned(),
            saga: "ffffffffffffffffffffffffffffffff".to_owned(),
            status: "aborted".to_owned(),
        },
        Op::Fork {
            db: a.to_owned(),
            target: "diff-copy".to_owned(),
            as_of_t: 0,
        },
        Op::transact("diff-copy", r#"[{:db/id "x" :item/name "in the copy"}]"#),
        stats("diff-copy", View::Current),
        Op::List,
        Op::Delete {
            db: "diff-copy".to_owned(),
        },
        // The deleted database through `PeerServer` (note 0016, deviation
        // 6): reads, a write, a subscription.
        stats("diff-copy", View::Current),
        query(
            "diff-copy",
            View::Current,
            "[:find ?name :where [_ :item/name ?name]]",
            "[]",
        ),
        Op::TxRange {
            db: "diff-copy".to_owned(),
            start: 0,
            end: 0,
        },
        Op::PeerTransact {
            db: "diff-copy".to_owned(),
            edn: r#"[{:db/id "x" :item/name "after"}]"#.to_owned(),
        },
        Op::PeerSubscribe {
            db: "diff-copy".to_owned(),
            from_basis_t: 0,
        },
        Op::Delete {
            db: "diff-nope".to_owned(),
        },
        Op::List,
        Op::GcDeleted,
    ]
}
