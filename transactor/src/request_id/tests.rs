//! The request record against a real Corium node (in memory): for every
//! shape of transaction, the record is found again, its answer's tempids are
//! the first answer's, and those are the tempids Corium gives the same
//! transaction without a request id.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use corium_protocol::codec;
use corium_protocol::pb;
use corium_query::edn::{Edn, read_one};
use corium_transactor::node::{NodeConfig, TransactorNode};

use corium_protocol::authz::Principal;

use super::answer;
use super::record::{self, Digest, Found, Owner};

/// The datoms transaction `t` wrote, read back from the log.
async fn datoms_of(state: &corium_transactor::node::DbState, t: u64) -> Vec<corium_core::Datom> {
    state.tx_range(t, Some(t + 1)).await.unwrap().remove(0).datoms
}

fn alice() -> Owner {
    Owner::of(&Principal::new("oidc", "alice"))
}

fn bob() -> Owner {
    Owner::of(&Principal::new("oidc", "bob"))
}

/// An upsert by a 60-byte identity, longer than a key keeps.
const LONG_NEW: &str =
    r#"[{:db/id "x" :item/name "long-identity-long-identity-long-identity-long-identity-6789"}]"#;

const SCHEMA: &str = "[{:db/ident :item/name :db/valueType :db.type/string \
    :db/cardinality :db.cardinality/one :db/unique :db.unique/identity} \
    {:db/ident :item/note :db/valueType :db.type/string :db/cardinality :db.cardinality/one} \
    {:db/ident :item/child :db/valueType :db.type/ref :db/cardinality :db.cardinality/one}]";

async fn node() -> (Arc<TransactorNode>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = NodeConfig::new(dir.path().to_path_buf());
    config.store = corium_transactor::StoreSpec::memory();
    config.ha = false;
    config.gc_interval = None;
    (TransactorNode::open(config).await.unwrap(), dir)
}

fn tempid_map(encoded: &[u8]) -> BTreeMap<String, i64> {
    match codec::decode_edn(encoded).unwrap() {
        Edn::Map(pairs) => pairs
            .into_iter()
            .map(|(key, value)| match (key, value) {
                (Edn::Str(name), Edn::Long(eid)) => (name, eid),
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// Commits `text` under a fresh id on `db` through the record, and checks
/// that the record finds and answers it as its first answer did.
async fn through_the_record(node: &Arc<TransactorNode>, db: &str, text: &str) -> pb::TransactResponse {
    let tx_data = codec::encode_edn(&read_one(text).unwrap());
    let request = pb::TransactRequest {
        db: db.to_owned(),
        protocol_version: corium_protocol::PROTOCOL_VERSION,
        tx_data,
        expected_basis_t: None,
    };
    let id = uuid::Uuid::new_v4();
    let digest = Digest::of(&request);
    let state = node.db_state(db).await.unwrap();
    let Edn::Vector(forms) = read_one(text).unwrap() else {
        unreachable!()
    };
    assert_eq!(record::find(&state.db(), id, Some(&digest), Some(&alice())), None);
    let (augmented, written) = record::augmented(&state.db(), id, &digest, Some(alice()), forms).unwrap();
    let committed = node.transact(db, &codec::encode_edn(&augmented)).await.unwrap();
    let first = answer::normalise(committed, &written).unwrap();
    let after = state.db();
    let Some(Found::Same(tx)) = record::find(&after, id, Some(&digest), Some(&alice())) else {
        panic!("{db}: {text}: not found again");
    };
    if db == "fleet" {
        // Format 2 records name their owner: another principal finds only
        // that the id is not its own; an operator sees the record.
        assert_eq!(
            record::find(&after, id, Some(&digest), Some(&bob())),
            Some(Found::Foreign(tx)),
            "{text}"
        );
    }
    assert_eq!(
        record::find(&after, id, Some(&digest), None),
        Some(Found::Same(tx))
    );
    assert_eq!(tx.sequence(), first.basis_t, "{text}");
    let other = Digest::of(&pb::TransactRequest {
        tx_data: b"other".to_vec(),
        ..request.clone()
    });
    assert_eq!(
        record::find(&after, id, Some(&other), Some(&alice())),
        Some(Found::Other(tx)),
        "{text}"
    );
    let datoms = datoms_of(&state, first.basis_t).await;
    // Without the request's identity: a status query's answer.
    assert_eq!(
        answer::answer_tempids(&after, tx, &datoms, None),
        tempid_map(&first.tempids),
        "{db}: {text}: a replay's tempids are the first answer's"
    );
    first
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shape_replays_its_first_answer_and_answers_as_corium_does() {
    let (node, _dir) = node().await;
    let schema = codec::encode_edn(&read_one(SCHEMA).unwrap());
    // "fleet": format 2; "plain": no record at all (Corium's own answers);
    // "old": format 1 (a database created before the key attribute).
    let with_v2 = record::with_schema(&schema).unwrap();
    assert!(node.create_db("fleet", &with_v2, None).await.unwrap());
    assert!(node.create_db("plain", &schema, None).await.unwrap());
    let Edn::Vector(mut attributes) = codec::decode_edn(&with_v2).unwrap() else {
        unreachable!()
    };
    attributes.retain(|attribute| !format!("{attribute:?}").contains("\"key\""));
    assert!(
        node.create_db("old", &codec::encode_edn(&Edn::Vector(attributes)), None)
            .await
            .unwrap()
    );
    for db in ["fleet", "plain", "old"] {
        node.transact(
            db,
            &codec::encode_edn(&read_one(r#"[{:db/id "e" :item/name "existing"}]"#).unwrap()),
        )
        .await
        .unwrap();
    }
    let cases = [
        // One entity, upserted by identity (the common case).
        r#"[{:db/id "x" :item/name "n1" :item/note "a"}]"#,
        // The same upsert again: nothing new asserted about it.
        r#"[{:db/id "x" :item/name "n1" :item/note "a"}]"#,
        // One fresh entity, and the transaction named.
        r#"[[:db/add "x" :item/note "fresh"] [:db/add "datomic.tx" :item/note "tx"]]"#,
        // No tempid at all.
        r#"[[:db/add [:item/name "existing"] :item/note "b"]]"#,
        // Two entities, one referring to the other.
        r#"[[:db/add "x" :item/child "y"] {:db/id "y" :item/note "c"}]"#,
        // Two entities side by side.
        r#"[{:db/id "a" :item/note "1"} {:db/id "b" :item/note "2"}]"#,
        // An entity and an existing one.
        r#"[{:db/id "x" :item/note "d"} [:db/add [:item/name "existing"] :item/note "e"]]"#,
        // A new entity by an identity too long for the key.
        LONG_NEW,
        // The same, now an upsert of an existing entity asserting nothing
        // new (recorded with a binding).
        LONG_NEW,
    ];
    for text in cases {
        let plain = node
            .transact("plain", &codec::encode_edn(&read_one(text).unwrap()))
            .await
            .unwrap();
        for db in ["fleet", "old"] {
            let first = through_the_record(&node, db, text).await;
            assert_eq!(
                tempid_map(&first.tempids).keys().collect::<Vec<_>>(),
                tempid_map(&plain.tempids).keys().collect::<Vec<_>>(),
                "{db}: {text}: the tempids Corium answers without an id"
            );
        }
    }
    // A fence marker is found as one, by any digest.
    for db in ["fleet", "old"] {
        let state = node.db_state(db).await.unwrap();
        let id = uuid::Uuid::new_v4();
        let fenced = node
            .transact(
                db,
                &codec::encode_edn(&record::fence_marker(&state.db(), id, Some(bob()))),
            )
            .await
            .unwrap();
        let found = record::find(&state.db(), id, None, Some(&bob())).unwrap();
        assert_eq!(found, Found::Fenced(found.tx()));
        assert_eq!(found.tx().sequence(), fenced.basis_t);
    }
    // A reserved tempid is refused before anything is written.
    let state = node.db_state("fleet").await.unwrap();
    let Edn::Vector(forms) = read_one(r#"[{:db/id "fleet.tempid/0" :item/note "x"}]"#).unwrap() else {
        unreachable!()
    };
    let request = pb::TransactRequest::default();
    assert!(
        record::augmented(
            &state.db(),
            uuid::Uuid::new_v4(),
            &Digest::of(&request),
            None,
            forms
        )
        .is_err()
    );
    // A record written before owners (or while a member could not read
    // them) is anyone's, as it was.
    let id = uuid::Uuid::new_v4();
    let Edn::Vector(forms) = read_one(r#"[{:db/id "x" :item/note "legacy"}]"#).unwrap() else {
        unreachable!()
    };
    let digest = Digest::of(&request);
    let (legacy, _) = record::augmented(&state.db(), id, &digest, None, forms).unwrap();
    node.transact("fleet", &codec::encode_edn(&legacy)).await.unwrap();
    assert!(matches!(
        record::find(&state.db(), id, Some(&digest), Some(&bob())),
        Some(Found::Same(_))
    ));
}

/// The request key of the record of `id` in `db`'s `tx`.
fn key_bytes(db: &corium_db::Db, tx: corium_core::EntityId) -> Vec<u8> {
    let key_attr = db
        .idents()
        .entid(&corium_core::Keyword::new(Some("fleet.request"), "key"))
        .unwrap();
    match db.values(tx, key_attr).into_iter().next() {
        Some(corium_core::Value::Bytes(bytes)) => bytes.to_vec(),
        other => panic!("no key: {other:?}"),
    }
}

/// A long identity is not repeated in the key (design note 0021: it doubled
/// an owner's memory); a replay of the request resolves the tempid by the
/// request's own identity when the transaction asserted nothing new because
/// another transaction created the entity between the key's writing and
/// the commit; a status query (no request) cannot, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_identities_stay_out_of_the_key() {
    let (node, _dir) = node().await;
    let schema = record::with_schema(&codec::encode_edn(&read_one(SCHEMA).unwrap())).unwrap();
    assert!(node.create_db("fleet", &schema, None).await.unwrap());
    let state = node.db_state("fleet").await.unwrap();
    let request = |text: &str| pb::TransactRequest {
        db: "fleet".into(),
        protocol_version: corium_protocol::PROTOCOL_VERSION,
        tx_data: codec::encode_edn(&read_one(text).unwrap()),
        expected_basis_t: None,
    };
    let forms = |text: &str| match read_one(text).unwrap() {
        Edn::Vector(forms) => forms,
        other => panic!("{other:?}"),
    };

    // Written while no entity has the identity...
    let id = uuid::Uuid::new_v4();
    let digest = Digest::of(&request(LONG_NEW));
    let (augmented, written) =
        record::augmented(&state.db(), id, &digest, Some(alice()), forms(LONG_NEW)).unwrap();
    // ...another transaction creates it first...
    node.transact("fleet", &request(LONG_NEW).tx_data).await.unwrap();
    // ...so this one asserts nothing new about it.
    let committed = node
        .transact("fleet", &codec::encode_edn(&augmented))
        .await
        .unwrap();
    let first = answer::normalise(committed, &written).unwrap();
    let after = state.db();
    let Some(Found::Same(tx)) = record::find(&after, id, Some(&digest), Some(&alice())) else {
        panic!("not found again");
    };
    let key = key_bytes(&after, tx);
    assert!(
        key.len() < 48,
        "the key keeps no 60-byte identity: {} bytes",
        key.len()
    );
    let datoms = datoms_of(&state, first.basis_t).await;
    assert_eq!(
        answer::answer_tempids(&after, tx, &datoms, written.identity.as_ref()),
        tempid_map(&first.tempids),
        "a replay of the request answers as the first time"
    );
    assert!(
        tempid_map(&first.tempids).contains_key("x"),
        "{:?}",
        tempid_map(&first.tempids)
    );
    assert_eq!(
        answer::answer_tempids(&after, tx, &datoms, None),
        BTreeMap::new(),
        "a status query has no identity to resolve the tempid by"
    );
}

/// Retention: keys of transactions older than the cutoff are retracted,
/// and a database opened again from its published indexes no longer holds
/// them (`:fleet.request/key` is `:db/noHistory`), while one kept within
/// the window is still found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_records_leave_the_database_at_its_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        let mut config = NodeConfig::new(dir.path().to_path_buf());
        config.store = corium_transactor::StoreSpec::filesystem();
        config.ha = false;
        config.gc_interval = None;
        config
    };
    let node = TransactorNode::open(config()).await.unwrap();
    let schema = record::with_schema(&codec::encode_edn(&read_one(SCHEMA).unwrap())).unwrap();
    assert!(node.create_db("kept", &schema, None).await.unwrap());
    let commit = async |node: &Arc<TransactorNode>, name: &str| {
        let text = format!("[{{:db/id \"x\" :item/name \"{name}\"}}]");
        let request = pb::TransactRequest {
            db: "kept".into(),
            protocol_version: corium_protocol::PROTOCOL_VERSION,
            tx_data: codec::encode_edn(&read_one(&text).unwrap()),
            expected_basis_t: None,
        };
        let id = uuid::Uuid::new_v4();
        let digest = Digest::of(&request);
        let state = node.db_state("kept").await.unwrap();
        let Edn::Vector(forms) = read_one(&text).unwrap() else {
            unreachable!()
        };
        let (augmented, _) = record::augmented(&state.db(), id, &digest, Some(alice()), forms).unwrap();
        node.transact("kept", &codec::encode_edn(&augmented))
            .await
            .unwrap();
        (id, digest)
    };
    let mut old = Vec::new();
    for n in 0..50 {
        old.push(commit(&node, &format!("old-{n}")).await);
    }
    // Corium's instants increase strictly (commits in one millisecond run
    // ahead of the clock): leave room on both sides of the cutoff.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let cutoff = corium_fleet_common::owner::now_unix_ms();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let recent = commit(&node, "recent").await;

    let state = node.db_state("kept").await.unwrap();
    let db = state.db();
    assert!(super::retention::keys_leave_history(&db));
    let expired = super::retention::expired(&db, cutoff, 1_000);
    assert_eq!(expired.len(), 50, "the old keys, not the recent one");
    let retraction = super::retention::retraction(&expired).unwrap();
    node.transact("kept", &codec::encode_edn(&retraction))
        .await
        .unwrap();
    let db = state.db();
    assert!(super::retention::expired(&db, cutoff, 1_000).is_empty());
    assert_eq!(record::find(&db, old[0].0, Some(&old[0].1), Some(&alice())), None);
    assert!(record::find(&db, recent.0, Some(&recent.1), Some(&alice())).is_some());
    let before = db.recorded_len();
    node.request_index("kept").await.unwrap();
    drop((state, db));
    drop(node);

    let reopened = TransactorNode::open(config()).await.unwrap();
    let db = reopened.db_state("kept").await.unwrap().db();
    // Each old transaction recorded its key and its retraction: both gone.
    assert!(
        db.recorded_len() + 2 * 50 <= before,
        "recorded {} after the reopen, {before} before",
        db.recorded_len()
    );
    assert_eq!(record::find(&db, old[1].0, Some(&old[1].1), Some(&alice())), None);
    assert!(
        record::find(&db, recent.0, Some(&recent.1), Some(&alice())).is_some(),
        "a key inside the window survives the reopen"
    );
}
