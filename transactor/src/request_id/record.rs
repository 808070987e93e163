//! The request record: what a transaction carrying a request id writes about
//! itself, and how a committed answer is read back from it.
//!
//! - the transaction entity (`"datomic.tx"`) gets `:fleet.request/id` (the
//!   id, `:db.unique/value`) and `:fleet.request/digest` (SHA-256 of the
//!   request bytes and its expected basis);
//! - the caller's tempids are bound to the entities they resolve to: one
//!   tempid on the transaction entity itself (`:fleet.request/tempid-name`,
//!   `:fleet.request/tempid`), several as one small binding entity each
//!   (`:fleet.tempid/name`, `:fleet.tempid/entity`) listed by
//!   `:fleet.request/tempids`;
//! - the caller's tempids are found with Corium's own form converter
//!   (`corium_forms::txforms::tx_items_from_edn`), so the set is exactly the
//!   one Corium resolves: entity positions and reference values alike;
//! - a fence marker (a status query's "never will commit") is the id with
//!   the digest [`FENCED`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use corium_core::{EntityId, Keyword, KeywordInterner, Value};
use corium_db::Db;
use corium_protocol::codec;
use corium_protocol::pb;
use corium_query::edn::Edn;
use corium_tx::{EntityRef, TX_TEMPID, TxItem, TxOp};
use sha2::{Digest as _, Sha256};

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

/// The tempid prefix of binding entities (never a caller's tempid).
pub const BINDING_PREFIX: &str = "fleet.tempid/";
/// Tempid prefixes the fleet reserves.
const RESERVED_PREFIXES: [&str; 2] = [BINDING_PREFIX, "fleet.schema/"];
/// The digest of a fence marker: the id was asked about before anything
/// committed under it, so nothing ever will.
pub const FENCED: &str = "fenced";

fn keyword((namespace, name): (&str, &str)) -> Keyword {
    Keyword::new(Some(namespace), name)
}

fn attr(db: &Db, ident: (&str, &str)) -> Option<EntityId> {
    db.idents().entid(&keyword(ident))
}

/// Whether `db` has the request-id attributes (every database the fleet
/// creates does; one created elsewhere may not).
#[must_use]
pub fn supported(db: &Db) -> bool {
    attr(db, ID).is_some()
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

/// The tempids of a transaction exactly as Corium resolves them: every
/// `EntityRef::Temp` its own converter produces, in entity position and as a
/// reference value (`"datomic.tx"` included when the caller names it).
/// `None` when Corium's converter refuses the forms before expansion (a
/// transaction-function call, or forms Corium will refuse itself): the
/// record then binds no tempid.
#[must_use]
pub fn tempids(db: &Db, forms: &[Edn]) -> Option<BTreeSet<String>> {
    // A throwaway interner: keyword values are interned by the real commit.
    let mut interner = KeywordInterner::default();
    let items = corium_forms::txforms::tx_items_from_edn(db, &mut interner, forms).ok()?;
    let mut found = BTreeSet::new();
    let mut temp = |entity: &EntityRef| {
        if let EntityRef::Temp(tempid) = entity {
            found.insert(tempid.clone());
        }
    };
    for item in &items {
        match item {
            TxItem::Map(map) => temp(&map.entity),
            TxItem::Op(
                TxOp::Add(entity, ..)
                | TxOp::Retract(entity, ..)
                | TxOp::Cas(entity, ..)
                | TxOp::RetractEntity(entity),
            ) => temp(entity),
            TxItem::Op(TxOp::AddRef(entity, _, target)) => {
                temp(entity);
                temp(target);
            }
        }
    }
    Some(found)
}

/// Whether a tempid is one the fleet reserves for its own record.
#[must_use]
pub fn reserved(tempid: &str) -> bool {
    RESERVED_PREFIXES.iter().any(|prefix| tempid.starts_with(prefix))
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
/// A message when `schema` is not an EDN vector.
pub fn with_schema(schema: &[u8]) -> Result<Vec<u8>, String> {
    let mut attributes = if schema.is_empty() {
        Vec::new()
    } else {
        match codec::decode_edn(schema) {
            Ok(Edn::Vector(attributes)) => attributes,
            Ok(_) => return Err("schema must be an EDN vector of attribute maps".to_owned()),
            Err(error) => return Err(format!("schema does not decode: {error}")),
        }
    };
    let Ok(Edn::Vector(ours)) = corium_query::edn::read_one(SCHEMA) else {
        unreachable!("the fleet request-id schema is a constant EDN vector");
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

/// The caller's forms plus the request record on the transaction entity and
/// one binding entity per tempid (none for a single tempid).
#[must_use]
pub fn augmented(forms: Vec<Edn>, id: &str, digest: &str, tempids: &BTreeSet<String>) -> Edn {
    let mut out = Vec::with_capacity(forms.len() + tempids.len() + 1);
    out.extend(forms);
    let kw = |ident: (&str, &str)| Edn::Keyword(keyword(ident));
    let mut tx = vec![
        (kw(("db", "id")), Edn::Str(TX_TEMPID.to_owned())),
        (kw(ID), Edn::Str(id.to_owned())),
        (kw(DIGEST), Edn::Str(digest.to_owned())),
    ];
    if let [tempid] = tempids.iter().collect::<Vec<_>>().as_slice() {
        tx.push((kw(ONE_TEMPID_NAME), Edn::Str((*tempid).clone())));
        tx.push((kw(ONE_TEMPID), Edn::Str((*tempid).clone())));
        out.push(map(tx));
        return Edn::Vector(out);
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
    Edn::Vector(out)
}

/// A fence marker: the id alone, under the [`FENCED`] digest.
#[must_use]
pub fn fence_marker(id: &str) -> Edn {
    let kw = |ident: (&str, &str)| Edn::Keyword(keyword(ident));
    Edn::Vector(vec![map(vec![
        (kw(("db", "id")), Edn::Str(TX_TEMPID.to_owned())),
        (kw(ID), Edn::Str(id.to_owned())),
        (kw(DIGEST), Edn::Str(FENCED.to_owned())),
    ])])
}

/// Encodes a tempid map the way Corium answers it.
#[must_use]
pub fn encode_tempids(tempids: &BTreeMap<String, i64>) -> Vec<u8> {
    codec::encode_edn(&Edn::Map(
        tempids
            .iter()
            .map(|(name, eid)| (Edn::Str(name.clone()), Edn::Long(*eid)))
            .collect(),
    ))
}

/// Corium's answer to the augmented transaction as the caller's own: the
/// record's binding tempids dropped, and `"datomic.tx"` kept only when the
/// caller named it (`named`, when known) — so the answer is the one Corium
/// gives the same transaction without a request id, and the one a replay
/// rebuilds.
///
/// # Errors
/// Corium's tempid map does not decode.
pub fn normalise(
    mut response: pb::TransactResponse,
    named: Option<&BTreeSet<String>>,
) -> Result<pb::TransactResponse, String> {
    let decoded = codec::decode_edn(&response.tempids).map_err(|error| error.to_string())?;
    let mut kept = BTreeMap::new();
    if let Edn::Map(pairs) = decoded {
        for (key, value) in pairs {
            if let (Edn::Str(name), Edn::Long(eid)) = (key, value) {
                let ours = name.starts_with(BINDING_PREFIX)
                    || (name == TX_TEMPID && named.is_some_and(|named| !named.contains(TX_TEMPID)));
                if !ours {
                    kept.insert(name, eid);
                }
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

/// The tempid map recorded on transaction entity `tx`.
#[must_use]
pub fn recorded_tempids(db: &Db, tx: EntityId) -> BTreeMap<String, i64> {
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
    tempids
}

/// The committed transaction carrying `id`, and its digest, if any.
#[must_use]
pub fn find(db: &Db, id: &str) -> Option<(EntityId, String)> {
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

    /// A database value with `:item/name` (string) and `:item/child` (ref).
    fn db() -> Db {
        use corium_core::{Attribute, Cardinality, Partition, Schema, ValueType};
        let name = EntityId::new(Partition::Db as u32, 100);
        let child = EntityId::new(Partition::Db as u32, 101);
        let mut schema = Schema::default();
        for (id, value_type) in [(name, ValueType::Str), (child, ValueType::Ref)] {
            schema.insert(Attribute {
                id,
                value_type,
                cardinality: Cardinality::One,
                unique: None,
                is_component: false,
                indexed: false,
                no_history: false,
            });
        }
        let mut idents = corium_db::Idents::default();
        idents.insert(Keyword::new(Some("item"), "name"), name);
        idents.insert(Keyword::new(Some("item"), "child"), child);
        Db::new(schema).with_naming(idents, KeywordInterner::default())
    }

    #[test]
    fn tempids_are_the_ones_corium_resolves_reference_values_included() {
        let found = tempids(
            &db(),
            &forms(
                r#"[{:db/id "a" :item/name "x"}
                    [:db/add "b" :item/child "c"]
                    [:db/add "datomic.tx" :item/name "tx"]
                    {:db/id "d" :item/name "not-a-tempid"}]"#,
            ),
        )
        .expect("converts");
        let want: BTreeSet<String> = ["a", "b", "c", "d", "datomic.tx"]
            .map(str::to_owned)
            .into_iter()
            .collect();
        assert_eq!(found, want);
        // A transaction-function call does not convert before expansion.
        assert_eq!(tempids(&db(), &forms(r#"[[:my/fn "a"]]"#)), None);
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
    fn normalised_answers_drop_the_records_own_tempids() {
        let answer = |pairs: &[(&str, i64)]| pb::TransactResponse {
            tempids: encode_tempids(&pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()),
            ..pb::TransactResponse::default()
        };
        let corium = answer(&[("a", 10), ("datomic.tx", 7), ("fleet.tempid/0", 11)]);
        let named: BTreeSet<String> = ["a".to_owned()].into_iter().collect();
        assert_eq!(
            normalise(corium.clone(), Some(&named)).unwrap(),
            answer(&[("a", 10)])
        );
        let named_tx: BTreeSet<String> = ["a".to_owned(), "datomic.tx".to_owned()].into_iter().collect();
        assert_eq!(
            normalise(corium.clone(), Some(&named_tx)).unwrap(),
            answer(&[("a", 10), ("datomic.tx", 7)])
        );
        // Unknown tempids (a function call): only the bindings go.
        assert_eq!(
            normalise(corium, None).unwrap(),
            answer(&[("a", 10), ("datomic.tx", 7)])
        );
    }

    #[test]
    fn augmented_transaction_records_the_request_and_binds_tempids() {
        let one: BTreeSet<String> = ["a".to_owned()].into_iter().collect();
        let tx = augmented(forms(r#"[{:db/id "a" :item/name "x"}]"#), "id-1", "d1", &one);
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
        let two: BTreeSet<String> = ["a".to_owned(), "b".to_owned()].into_iter().collect();
        let text = format!(
            "{:?}",
            augmented(
                forms(r#"[{:db/id "a" :item/name "x"} {:db/id "b" :item/name "y"}]"#),
                "id-2",
                "d2",
                &two,
            )
        );
        assert!(
            text.contains("fleet.tempid/0") && text.contains("fleet.tempid/1"),
            "{text}"
        );
        // Round-trips through Corium's codec.
        assert_eq!(codec::decode_edn(&codec::encode_edn(&tx)).unwrap(), tx);
        assert!(format!("{:?}", fence_marker("id-3")).contains(FENCED));
    }
}
