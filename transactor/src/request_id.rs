//! Exactly-once `Transact`: durable request ids at the owner.
//!
//! A `Transact` carrying `corium-request-id` (a UUID) commits at most once
//! per database, and every retry gets the first answer back, byte for byte.
//! The record is part of the database itself (design note 0006), so it
//! survives crashes, failover, idle eviction and restarts:
//!
//! - the transaction entity (`"datomic.tx"`) gets `:fleet.request/id` (the
//!   id, `:db.unique/value`), `:fleet.request/digest` (SHA-256 of the request
//!   bytes and its expected basis) and `:fleet.request/tempids`, refs to one
//!   small binding entity per tempid the transaction names
//!   (`:fleet.tempid/name`, `:fleet.tempid/entity`), which is how the tempid
//!   map of the original answer is recovered;
//! - the attributes are part of the schema of every database the fleet
//!   creates (Corium installs attributes only through its schema path);
//! - a retry's commit is refused by the uniqueness of the id; the committed
//!   transaction is then found with one unique-value index read, the digest
//!   checked (a different request under a used id is refused) and the answer
//!   rebuilt from the transaction entity and its log record;
//! - the first answer is normalised the same way (its tempid map lists the
//!   transaction's own tempids only), so first answer and replay are equal;
//! - concurrent submissions of one id on the owner queue behind one another
//!   and the later ones replay; across owners the unique index is the
//!   backstop (a second commit of a used id fails the uniqueness check).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use corium_core::{EntityId, Keyword, Value};
use corium_db::Db;
use corium_protocol::codec;
use corium_protocol::pb;
use corium_query::edn::Edn;
use corium_store::RootStore;
use corium_transactor::node::{NodeError, TransactorNode};
use sha2::{Digest as _, Sha256};
use tonic::Status;

/// Attribute idents, without the leading colon.
const ID: (&str, &str) = ("fleet.request", "id");
const DIGEST: (&str, &str) = ("fleet.request", "digest");
const TEMPIDS: (&str, &str) = ("fleet.request", "tempids");
const TEMPID_NAME: (&str, &str) = ("fleet.tempid", "name");
/// The one tempid of a single-tempid transaction, kept on the transaction
/// entity itself (no binding entity: two datoms fewer).
const ONE_TEMPID_NAME: (&str, &str) = ("fleet.request", "tempid-name");
const ONE_TEMPID: (&str, &str) = ("fleet.request", "tempid");
const TEMPID_ENTITY: (&str, &str) = ("fleet.tempid", "entity");

/// The schema the fleet installs, as EDN.
const SCHEMA: &str = "[{:db/ident :fleet.request/id :db/valueType :db.type/string \
     :db/cardinality :db.cardinality/one :db/unique :db.unique/value} \
     {:db/ident :fleet.request/digest :db/valueType :db.type/string \
     :db/cardinality :db.cardinality/one} \
     {:db/ident :fleet.request/tempids :db/valueType :db.type/ref \
     :db/cardinality :db.cardinality/many} \
     {:db/ident :fleet.tempid/name :db/valueType :db.type/string \
     :db/cardinality :db.cardinality/one} \
     {:db/ident :fleet.tempid/entity :db/valueType :db.type/ref \
     :db/cardinality :db.cardinality/one} \
     {:db/ident :fleet.request/tempid-name :db/valueType :db.type/string \
     :db/cardinality :db.cardinality/one} \
     {:db/ident :fleet.request/tempid :db/valueType :db.type/ref \
     :db/cardinality :db.cardinality/one}]";

/// The tempid prefix of binding entities (never a user tempid's).
const BINDING_PREFIX: &str = "fleet.tempid/";

fn keyword((namespace, name): (&str, &str)) -> Keyword {
    Keyword::new(Some(namespace), name)
}

fn attr(db: &Db, ident: (&str, &str)) -> Option<EntityId> {
    db.idents().entid(&keyword(ident))
}

/// Per-cell state: one lock per id in flight, so duplicates on this owner
/// queue behind the first.
#[derive(Default)]
pub struct Ledger {
    in_flight: Mutex<HashMap<uuid::Uuid, Arc<tokio::sync::Mutex<()>>>>,
}

/// What happened to one id-carrying transaction.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Outcome {
    Committed,
    Replayed,
}

/// The digest a request id is bound to: the transaction bytes and the basis
/// condition, so a retry must repeat exactly the same request.
#[must_use]
pub fn digest(request: &pb::TransactRequest) -> String {
    let mut hasher = Sha256::new();
    hasher.update(request.tx_data.len().to_be_bytes());
    hasher.update(&request.tx_data);
    match request.expected_basis_t {
        Some(basis) => {
            hasher.update([1]);
            hasher.update(basis.to_be_bytes());
        }
        None => hasher.update([0]),
    }
    hasher
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The tempids a transaction names in entity position: `:db/id` of map
/// forms (nested maps included) and the entity of list forms.
#[must_use]
pub fn tempids(forms: &[Edn]) -> BTreeSet<String> {
    fn walk(form: &Edn, found: &mut BTreeSet<String>) {
        match form {
            Edn::Map(pairs) => {
                let db_id = keyword(("db", "id"));
                for (key, value) in pairs {
                    match (key, value) {
                        (Edn::Keyword(key), Edn::Str(tempid)) if *key == db_id => {
                            found.insert(tempid.clone());
                        }
                        _ => walk(value, found),
                    }
                }
            }
            Edn::Vector(items) | Edn::List(items) => {
                if let (Some(Edn::Keyword(_)), Some(Edn::Str(tempid))) = (items.first(), items.get(1)) {
                    found.insert(tempid.clone());
                }
                for item in items {
                    walk(item, found);
                }
            }
            Edn::Set(items) => items.iter().for_each(|item| walk(item, found)),
            _ => {}
        }
    }
    let mut found = BTreeSet::new();
    for form in forms {
        walk(form, &mut found);
    }
    found
}

fn map(pairs: Vec<(Edn, Edn)>) -> Edn {
    let mut pairs = pairs;
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    Edn::Map(pairs)
}

/// `schema` (a create request's EDN vector of attribute maps) with the
/// request-id attributes added, unless it already has them. Corium installs
/// attributes only through its schema path (create or `AlterSchema`), never
/// in a transaction, so the fleet adds them when it creates a database.
///
/// # Errors
/// `INVALID_ARGUMENT` when `schema` is not an EDN vector.
pub fn with_schema(schema: &[u8]) -> Result<Vec<u8>, Status> {
    let mut attributes = if schema.is_empty() {
        Vec::new()
    } else {
        match codec::decode_edn(schema) {
            Ok(Edn::Vector(attributes)) => attributes,
            Ok(_) => {
                return Err(Status::invalid_argument(
                    "schema must be an EDN vector of attribute maps",
                ));
            }
            Err(error) => {
                return Err(Status::invalid_argument(format!(
                    "schema does not decode: {error}"
                )));
            }
        }
    };
    let Ok(Edn::Vector(ours)) = corium_query::edn::read_one(SCHEMA) else {
        return Err(Status::internal("the fleet request-id schema does not parse"));
    };
    let ident = keyword(("db", "ident"));
    let idents_of = |attribute: &Edn| match attribute {
        Edn::Map(pairs) => pairs.iter().find_map(|(key, value)| match (key, value) {
            (Edn::Keyword(key), Edn::Keyword(value)) if *key == ident => Some(value.clone()),
            _ => None,
        }),
        _ => None,
    };
    let present: BTreeSet<String> = attributes
        .iter()
        .filter_map(idents_of)
        .map(|kw| kw.to_string())
        .collect();
    for attribute in ours {
        if idents_of(&attribute).is_some_and(|kw| !present.contains(&kw.to_string())) {
            attributes.push(attribute);
        }
    }
    Ok(codec::encode_edn(&Edn::Vector(attributes)))
}

/// The user's forms plus the request record on the transaction entity and
/// one binding entity per tempid.
fn augmented(forms: Vec<Edn>, id: &str, digest: &str, tempids: &BTreeSet<String>) -> Result<Edn, Status> {
    let mut out = Vec::with_capacity(forms.len() + tempids.len() + 1);
    out.extend(forms);
    let kw = |ident: (&str, &str)| Edn::Keyword(keyword(ident));
    let mut tx = vec![
        (kw(("db", "id")), Edn::Str(corium_tx_tempid().to_owned())),
        (kw(ID), Edn::Str(id.to_owned())),
        (kw(DIGEST), Edn::Str(digest.to_owned())),
    ];
    if tempids.len() == 1 {
        let tempid = tempids.iter().next().cloned().unwrap_or_default();
        tx.push((kw(ONE_TEMPID_NAME), Edn::Str(tempid.clone())));
        tx.push((kw(ONE_TEMPID), Edn::Str(tempid)));
        out.push(map(tx));
        return Ok(Edn::Vector(out));
    }
    let mut bindings = Vec::with_capacity(tempids.len());
    for (n, tempid) in tempids.iter().enumerate() {
        let binding = format!("{BINDING_PREFIX}{n}");
        out.push(map(vec![
            (kw(("db", "id")), Edn::Str(binding.clone())),
            (kw(TEMPID_NAME), Edn::Str(tempid.clone())),
            (kw(TEMPID_ENTITY), Edn::Str(tempid.clone())),
        ]));
        bindings.push(Edn::Str(binding));
    }
    if !bindings.is_empty() {
        tx.push((kw(TEMPIDS), Edn::Vector(bindings)));
    }
    out.push(map(tx));
    Ok(Edn::Vector(out))
}

/// Corium's reserved tempid of the transaction entity.
const fn corium_tx_tempid() -> &'static str {
    "datomic.tx"
}

fn encode_tempids(tempids: &BTreeMap<String, i64>) -> Vec<u8> {
    codec::encode_edn(&Edn::Map(
        tempids
            .iter()
            .map(|(name, eid)| (Edn::Str(name.clone()), Edn::Long(*eid)))
            .collect(),
    ))
}

/// The first answer, normalised: its tempid map keeps only `named` (the
/// tempids the caller's transaction used), exactly as a replay rebuilds it.
fn normalise(
    mut response: pb::TransactResponse,
    named: &BTreeSet<String>,
) -> Result<pb::TransactResponse, Status> {
    let decoded =
        codec::decode_edn(&response.tempids).map_err(|error| Status::internal(error.to_string()))?;
    let mut kept = BTreeMap::new();
    if let Edn::Map(pairs) = decoded {
        for (key, value) in pairs {
            if let (Edn::Str(name), Edn::Long(eid)) = (key, value)
                && named.contains(&name)
            {
                kept.insert(name, eid);
            }
        }
    }
    response.tempids = encode_tempids(&kept);
    Ok(response)
}

/// The tempid recorded on entity `e` (its name and the entity it resolved
/// to), if both attributes are there.
fn tempid_of(db: &Db, e: EntityId, name_attr: EntityId, entity_attr: EntityId) -> Option<(String, i64)> {
    let tempid = db.values(e, name_attr).into_iter().next();
    let entity = db.values(e, entity_attr).into_iter().next();
    match (tempid, entity) {
        (Some(Value::Str(tempid)), Some(Value::Ref(entity))) => Some((
            tempid.to_string(),
            i64::try_from(entity.raw()).unwrap_or(i64::MAX),
        )),
        _ => None,
    }
}

/// Whether this cell still holds `held` in storage: the replay's fence.
async fn fence(
    store: &dyn RootStore,
    name: &str,
    held: &corium_transactor::lease::Lease,
) -> Result<(), Status> {
    match corium_transactor::lease::verify(store, name, held).await {
        Ok(()) => Ok(()),
        Err(corium_transactor::lease::LeaseError::Lost) => Err(Status::unavailable(format!(
            "this node lost the write lease of {name:?}; retry with the same corium-request-id"
        ))),
        Err(error) => Err(Status::unavailable(format!(
            "cannot verify the write lease of {name:?} ({error}); retry with the same corium-request-id"
        ))),
    }
}

/// Rebuilds the answer of the committed transaction `tx` from the database
/// value and the transaction's log record.
async fn replay(
    node: &TransactorNode,
    name: &str,
    db: &Db,
    tx: EntityId,
) -> Result<pb::TransactResponse, Status> {
    let state = node
        .db_state(name)
        .await
        .map_err(|error| crate::error::node_status(&error))?;
    let t = tx.sequence();
    let records = state
        .tx_range(t, Some(t + 1))
        .await
        .map_err(|error| crate::error::node_status(&error))?;
    let record = records
        .into_iter()
        .find(|record| record.t == t)
        .ok_or_else(|| Status::internal(format!("transaction t={t} of {name:?} is not in the log")))?;
    let tx_data = codec::encode_datoms(&record.datoms, db.interner())
        .map_err(|error| Status::internal(error.to_string()))?;
    let mut tempids = BTreeMap::new();
    // One tempid: on the transaction entity itself.
    if let (Some(name_attr), Some(entity_attr)) = (attr(db, ONE_TEMPID_NAME), attr(db, ONE_TEMPID)) {
        tempids.extend(tempid_of(db, tx, name_attr, entity_attr));
    }
    // Several: one binding entity each.
    if let (Some(bindings), Some(name_attr), Some(entity_attr)) =
        (attr(db, TEMPIDS), attr(db, TEMPID_NAME), attr(db, TEMPID_ENTITY))
    {
        for binding in db.values(tx, bindings) {
            if let Value::Ref(binding) = binding {
                tempids.extend(tempid_of(db, binding, name_attr, entity_attr));
            }
        }
    }
    Ok(pb::TransactResponse {
        basis_before: t - 1,
        basis_t: t,
        tx_instant: record.tx_instant,
        tempids: encode_tempids(&tempids),
        tx_data,
    })
}

/// The committed transaction carrying `id`, and its digest, if any.
fn find(db: &Db, id: &str) -> Option<(EntityId, String)> {
    let id_attr = attr(db, ID)?;
    let tx = db.lookup(id_attr, &Value::Str(Arc::from(id)))?;
    let digest = attr(db, DIGEST)
        .and_then(|digest_attr| db.values(tx, digest_attr).into_iter().next())
        .and_then(|value| match value {
            Value::Str(digest) => Some(digest.to_string()),
            _ => None,
        })
        .unwrap_or_default();
    Some((tx, digest))
}

impl Ledger {
    fn lock_for(&self, id: uuid::Uuid) -> Arc<tokio::sync::Mutex<()>> {
        Arc::clone(
            self.in_flight
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(id)
                .or_default(),
        )
    }

    fn release(&self, id: uuid::Uuid, lock: &Arc<tokio::sync::Mutex<()>>) {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Only the last holder removes the entry (2: the map's and ours).
        if Arc::strong_count(lock) <= 2 {
            in_flight.remove(&id);
        }
    }

    /// Commits `request` under `id` at most once on `cell`'s database, or
    /// replays the answer of the transaction that already
    /// carries `id`.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when `id` was used for a different request;
    /// otherwise Corium's status for the transaction.
    pub async fn transact(
        &self,
        cell: &crate::cell::Cell,
        permit: crate::cell::Admission,
        store: &dyn RootStore,
        id: uuid::Uuid,
        request: &pb::TransactRequest,
    ) -> Result<(pb::TransactResponse, Outcome), Status> {
        let lock = self.lock_for(id);
        let result = {
            let _turn = lock.lock().await;
            self.transact_locked(cell, permit, store, id, request).await
        };
        self.release(id, &lock);
        result
    }

    async fn transact_locked(
        &self,
        cell: &crate::cell::Cell,
        permit: crate::cell::Admission,
        store: &dyn RootStore,
        id: uuid::Uuid,
        request: &pb::TransactRequest,
    ) -> Result<(pb::TransactResponse, Outcome), Status> {
        let (node, name) = (cell.node.as_ref(), cell.db.as_str());
        let to_status = |error: NodeError| crate::error::node_status(&error);
        let id_text = id.hyphenated().to_string();
        let digest = digest(request);
        let state = node.db_state(name).await.map_err(to_status)?;
        // No lookup on the way in: the id is `:db.unique/value`, so a
        // duplicate cannot commit; its commit fails, and only then is the
        // committed transaction looked up and replayed.
        let forms = match codec::decode_edn(&request.tx_data) {
            Ok(Edn::Vector(forms) | Edn::List(forms)) => forms,
            Ok(_) => return Err(Status::invalid_argument("tx-data must be a vector")),
            Err(error) => {
                return Err(Status::invalid_argument(format!(
                    "tx-data does not decode: {error}"
                )));
            }
        };
        let named = tempids(&forms);
        if named
            .iter()
            .any(|tempid| tempid.starts_with(BINDING_PREFIX) || tempid.starts_with("fleet.schema/"))
        {
            return Err(Status::invalid_argument(
                "tempids starting with \"fleet.tempid/\" or \"fleet.schema/\" are reserved by Corium Fleet",
            ));
        }
        if attr(&state.db(), ID).is_none() {
            return Err(Status::failed_precondition(format!(
                "database {name:?} has no request-id attributes (it was created outside Corium Fleet); \
                 add the schema in docs/design/0006-exactly-once.md with AlterSchema, or send no corium-request-id"
            )));
        }
        let tx = augmented(forms, &id_text, &digest, &named)?;
        // The permit rides with the commit and comes back for the replay.
        let (committed, _permit) = cell
            .commit(permit, codec::encode_edn(&tx), request.expected_basis_t)
            .await;
        match committed {
            Ok(response) => Ok((normalise(response, &named)?, Outcome::Committed)),
            Err(error) => {
                // Only the database refusing ours (the id's uniqueness) can
                // mean "already committed". A commit that failed in storage
                // or lost the lease says nothing about the id — and this
                // cell's value may hold that very batch: Corium installs a
                // batch in memory before its post-append fence, so a
                // deposed cell's value contains a transaction nobody may
                // acknowledge. Found by the simulation tier (seed 2008: an
                // owner frozen at its fence was deposed, then answered its
                // own refused batch as a replay — an acknowledged write the
                // successor's log does not have).
                if crate::error::is_storage_failure(&error) || crate::error::is_deposed(&error) {
                    return Err(to_status(error));
                }
                if let Some(found) = self
                    .replay_if_found(node, name, &state.db(), &id_text, &digest)
                    .await?
                {
                    // Fence the replay as Corium fences a commit: the
                    // transaction is in this value, so it was durable before
                    // now; answering is safe only if this cell still holds
                    // the lease now (a successor's recovery then includes it).
                    fence(store, name, &state.lease()).await?;
                    return Ok((found, Outcome::Replayed));
                }
                Err(to_status(error))
            }
        }
    }

    async fn replay_if_found(
        &self,
        node: &TransactorNode,
        name: &str,
        db: &Db,
        id: &str,
        digest: &str,
    ) -> Result<Option<pb::TransactResponse>, Status> {
        let Some((tx, recorded)) = find(db, id) else {
            return Ok(None);
        };
        if recorded != digest {
            return Err(Status::invalid_argument(format!(
                "corium-request-id {id} was already used by a different transaction (t={}) in {name:?}; \
                 nothing was committed. Use a new id for a new transaction",
                tx.sequence()
            )));
        }
        replay(node, name, db, tx).await.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corium_query::edn::read_one;

    fn forms(text: &str) -> Vec<Edn> {
        match read_one(text).unwrap() {
            Edn::Vector(forms) => forms,
            _ => unreachable!(),
        }
    }

    #[test]
    fn finds_tempids_in_entity_position_only() {
        let found = tempids(&forms(
            r#"[{:db/id "a" :item/name "x" :item/child {:db/id "b" :item/name "y"}}
                [:db/add "c" :item/name "z"]
                [:db/add 17 :item/name "not-a-tempid"]
                {:item/name "no id"}]"#,
        ));
        assert_eq!(found, ["a", "b", "c"].map(str::to_owned).into_iter().collect());
    }

    #[test]
    fn digest_binds_bytes_and_basis_condition() {
        let request = |bytes: &[u8], basis: Option<u64>| pb::TransactRequest {
            db: "d".into(),
            protocol_version: 1,
            tx_data: bytes.to_vec(),
            expected_basis_t: basis,
        };
        let base = digest(&request(b"abc", None));
        assert_eq!(base, digest(&request(b"abc", None)));
        assert_eq!(base.len(), 64);
        assert_ne!(base, digest(&request(b"abd", None)));
        assert_ne!(base, digest(&request(b"abc", Some(0))));
        assert_ne!(
            digest(&request(b"abc", Some(1))),
            digest(&request(b"abc", Some(2)))
        );
    }

    #[test]
    fn augmented_transaction_records_the_request_and_binds_tempids() {
        let tx = augmented(
            forms(r#"[{:db/id "a" :item/name "x"}]"#),
            "id-1",
            "d1",
            &["a".to_owned()].into_iter().collect(),
        )
        .unwrap();
        let schema = codec::encode_edn(
            &read_one(
                "[{:db/ident :item/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one}]",
            )
            .unwrap(),
        );
        let extended = with_schema(&schema).unwrap();
        let text = format!("{:?}", codec::decode_edn(&extended).unwrap());
        assert!(
            text.contains("item") && text.contains("fleet.request") && text.contains("unique"),
            "{text}"
        );
        // Idempotent: extending twice adds nothing.
        assert_eq!(with_schema(&extended).unwrap(), extended);
        let text = format!("{tx:?}");
        for needle in ["fleet.request", "id-1", "d1", "tempid-name", "datomic.tx"] {
            assert!(text.contains(needle), "{needle} missing from {text}");
        }
        // Two tempids: one binding entity each.
        let two = augmented(
            forms(r#"[{:db/id "a" :item/name "x"} {:db/id "b" :item/name "y"}]"#),
            "id-2",
            "d2",
            &["a".to_owned(), "b".to_owned()].into_iter().collect(),
        )
        .unwrap();
        let text = format!("{two:?}");
        assert!(
            text.contains("fleet.tempid/0") && text.contains("fleet.tempid/1"),
            "{text}"
        );
        // Round-trips through Corium's codec.
        assert_eq!(codec::decode_edn(&codec::encode_edn(&tx)).unwrap(), tx);
    }
}
