//! The request record: what a transaction carrying a request id writes about
//! itself, and how it is found again (its answer is read back in
//! `answer.rs`).
//!
//! Format 2 (every database the fleet creates from 0009 on): one datom on
//! the transaction entity, `:fleet.request/key` (`bytes`,
//! `:db.unique/value`; `key.rs`), which carries the id, a digest of the
//! request and how the caller's tempids bind:
//!
//! - no tempid of the caller's own: nothing more;
//! - one tempid that is the only entity the transaction writes about: its
//!   name (and its identity attribute and value) in the key — the answer's
//!   entity is read back from the log record, so no reference datom is
//!   written (a reference costs a commit ~15–20 µs of CPU in Corium, more
//!   than the rest of the record; `docs/benchmarks.md`);
//! - anything else: binding entities, one reference each (format 1's).
//!
//! Format 1 (databases created before): `:fleet.request/id` (string,
//! unique), `:fleet.request/digest` (hex SHA-256), tempid bindings. Read
//! everywhere, written only where the database lacks the key attribute.
//!
//! Corium installs attributes only through its schema path, so the fleet
//! adds all of them to the schema of every database it creates.

use std::collections::BTreeSet;
use std::sync::Arc;

use corium_core::{EntityId, Keyword, Value};
use corium_db::Db;
use corium_protocol::codec;
use corium_protocol::pb;
use corium_query::edn::Edn;
use corium_tx::TX_TEMPID;
use sha2::{Digest as _, Sha256};

use super::key::{self, Key, Mode};
use super::shape::{self, Shape};

/// Attribute idents, without the leading colon.
pub(super) const KEY: (&str, &str) = ("fleet.request", "key");
const ID: (&str, &str) = ("fleet.request", "id");
const DIGEST: (&str, &str) = ("fleet.request", "digest");
pub(super) const TEMPIDS: (&str, &str) = ("fleet.request", "tempids");
pub(super) const TEMPID_NAME: (&str, &str) = ("fleet.tempid", "name");
/// A single bound tempid, kept on the transaction entity itself (no binding
/// entity: two datoms fewer).
pub(super) const ONE_TEMPID_NAME: (&str, &str) = ("fleet.request", "tempid-name");
pub(super) const ONE_TEMPID: (&str, &str) = ("fleet.request", "tempid");
pub(super) const TEMPID_ENTITY: (&str, &str) = ("fleet.tempid", "entity");

/// The schema the fleet installs, as EDN.
const SCHEMA: &str = "[{:db/ident :fleet.request/key :db/valueType :db.type/bytes \
     :db/cardinality :db.cardinality/one :db/unique :db.unique/value :db/noHistory true} \
     {:db/ident :fleet.request/id :db/valueType :db.type/string \
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
pub(crate) const BINDING_PREFIX: &str = "fleet.tempid/";
/// Tempid prefixes the fleet reserves.
const RESERVED_PREFIXES: [&str; 2] = [BINDING_PREFIX, "fleet.schema/"];
/// Format 1's digest of a fence marker.
const FENCED_V1: &str = "fenced";

fn keyword((namespace, name): (&str, &str)) -> Keyword {
    Keyword::new(Some(namespace), name)
}

pub(super) fn attr(db: &Db, ident: (&str, &str)) -> Option<EntityId> {
    db.idents().entid(&keyword(ident))
}

/// Whether `db` can record request ids (every database the fleet creates
/// can; one created elsewhere may not).
#[must_use]
pub(crate) fn supported(db: &Db) -> bool {
    attr(db, KEY).is_some() || attr(db, ID).is_some()
}

/// Whose request id a record is: the first 8 bytes of a SHA-256 of the
/// principal that sent it (provider and subject), so the database records
/// who may ask about it without naming anyone (readers of the database see
/// every transaction entity).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Owner(pub [u8; key::OWNER_LEN]);

impl Owner {
    /// The owner tag of `principal`.
    #[must_use]
    pub fn of(principal: &corium_protocol::authz::Principal) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"corium-fleet request owner\0");
        hasher.update(principal.provider.as_bytes());
        hasher.update([0]);
        hasher.update(principal.subject.as_bytes());
        let mut tag = [0; key::OWNER_LEN];
        tag.copy_from_slice(&hasher.finalize()[..key::OWNER_LEN]);
        Self(tag)
    }
}

/// What a request id is bound to: the transaction bytes and the basis
/// condition, so a retry must repeat exactly the same request.
#[derive(Clone, Debug, Eq, PartialEq)]
pub(crate) struct Digest([u8; 32]);

impl Digest {
    /// The digest of `request`.
    #[must_use]
    pub(crate) fn of(request: &pb::TransactRequest) -> Self {
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
        Self(hasher.finalize().into())
    }

    /// Format 2's 8 bytes.
    fn short(&self) -> [u8; 8] {
        let mut short = [0; 8];
        short.copy_from_slice(&self.0[..8]);
        short
    }

    /// Format 1's hex text.
    fn hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        self.0
            .iter()
            .flat_map(|byte| [DIGITS[usize::from(byte >> 4)], DIGITS[usize::from(byte & 15)]])
            .map(char::from)
            .collect()
    }
}

/// Whether a tempid is one the fleet reserves for its own record.
#[must_use]
pub(crate) fn reserved(tempid: &str) -> bool {
    RESERVED_PREFIXES.iter().any(|prefix| tempid.starts_with(prefix))
}

fn map(pairs: Vec<(Edn, Edn)>) -> Edn {
    let mut pairs = pairs;
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    Edn::Map(pairs)
}

pub(super) fn kw(ident: (&str, &str)) -> Edn {
    Edn::Keyword(keyword(ident))
}

pub(super) fn bytes_edn(bytes: &[u8]) -> Edn {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let hex: String = bytes
        .iter()
        .flat_map(|byte| [DIGITS[usize::from(byte >> 4)], DIGITS[usize::from(byte & 15)]])
        .map(char::from)
        .collect();
    Edn::Tagged("bytes".to_owned(), Box::new(Edn::Str(hex)))
}

/// `schema` (a create request's EDN vector of attribute maps) with the
/// request-id attributes added, unless it already has them.
///
/// # Errors
/// A message when `schema` is not an EDN vector.
pub(crate) fn with_schema(schema: &[u8]) -> Result<Vec<u8>, String> {
    let mut attributes = if schema.is_empty() {
        Vec::new()
    } else {
        match codec::decode_edn(schema) {
            Ok(Edn::Vector(attributes)) => attributes,
            Ok(_) => return Err("schema must be an EDN vector of attribute maps".to_owned()),
            // Corium's own words for it (its catalog decodes the same way).
            Err(error) => return Err(error.to_string()),
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

/// What [`augmented`] wrote about the caller's tempids, for the first answer.
#[derive(Clone, Debug)]
pub(crate) struct Written {
    /// The caller's tempids (`None`: unknown before expansion).
    pub tempids: Option<BTreeSet<String>>,
    /// The one tempid's identity in the request, for a replay whose key
    /// does not keep it ([`request_identity`]).
    pub identity: Option<(EntityId, Value)>,
}

/// The identity attribute and value of the request's one tempid, if it has
/// one: what a replay of the same request resolves the tempid by when the
/// key does not keep a long identity and the transaction asserted nothing
/// new (another transaction created the entity between the key's writing
/// and the commit).
#[must_use]
pub(crate) fn request_identity(shape: &Shape) -> Option<(EntityId, Value)> {
    match &shape.entity {
        Some((_, Ok(identity))) => identity.clone(),
        _ => None,
    }
}

/// A transaction names a tempid the fleet reserves.
#[derive(Clone, Debug, Eq, PartialEq)]
pub(crate) struct Reserved(pub String);

/// Binding entities for `tempids`, added to `out`, and the attributes they
/// put on the transaction entity.
fn bindings(out: &mut Vec<Edn>, tempids: &BTreeSet<String>) -> Vec<(Edn, Edn)> {
    if let [tempid] = tempids.iter().collect::<Vec<_>>().as_slice() {
        return vec![
            (kw(ONE_TEMPID_NAME), Edn::Str((*tempid).clone())),
            (kw(ONE_TEMPID), Edn::Str((*tempid).clone())),
        ];
    }
    let mut listed = Vec::with_capacity(tempids.len());
    for (n, tempid) in tempids.iter().enumerate() {
        let binding = format!("{BINDING_PREFIX}{n}");
        out.push(map(vec![
            (kw(("db", "id")), Edn::Str(binding.clone())),
            (kw(TEMPID_NAME), Edn::Str(tempid.clone())),
            (kw(TEMPID_ENTITY), Edn::Str(tempid.clone())),
        ]));
        listed.push(Edn::Str(binding));
    }
    if listed.is_empty() {
        Vec::new()
    } else {
        vec![(kw(TEMPIDS), Edn::Vector(listed))]
    }
}

/// The caller's forms plus the request record of `id` (format 2 where the
/// database has the key attribute, else format 1).
///
/// # Errors
/// [`Reserved`] when the forms name a tempid the fleet reserves.
///
/// # Panics
/// Never: a key without an identity always encodes.
pub(crate) fn augmented(
    db: &Db,
    id: uuid::Uuid,
    digest: &Digest,
    owner: Option<Owner>,
    forms: Vec<Edn>,
) -> Result<(Edn, Written), Reserved> {
    let shape: Shape = shape::of(db, &forms);
    if let Some(tempid) = shape.tempids.iter().flatten().find(|tempid| reserved(tempid)) {
        return Err(Reserved(tempid.clone()));
    }
    let own = shape.own();
    let mut out = Vec::with_capacity(forms.len() + own.len() + 1);
    out.extend(forms);
    let mut tx = vec![(kw(("db", "id")), Edn::Str(TX_TEMPID.to_owned()))];
    if attr(db, KEY).is_some() {
        let key = |mode: Mode| Key {
            id: id.as_u128(),
            digest: digest.short(),
            tx_named: shape.tx_named(),
            mode,
            owner: owner.map(|owner| owner.0),
        };
        let entity_key = match &shape.entity {
            Some((name, Ok(identity))) => {
                let entity = |identity| Mode::Entity {
                    name: name.clone(),
                    identity,
                };
                key(entity(identity.clone())).encode().or_else(|| {
                    // An identity too long to keep: when no entity has it
                    // yet, this transaction creates one, whose datoms name
                    // it (a replay needs no identity); an upsert onto an
                    // existing entity is recorded with a binding instead.
                    let (attr, value) = identity.as_ref()?;
                    db.lookup(*attr, value)
                        .is_none()
                        .then(|| key(entity(None)).encode())
                        .flatten()
                })
            }
            _ => None,
        };
        if let Some(bytes) = entity_key {
            tx.push((kw(KEY), bytes_edn(&bytes)));
        } else {
            let mode = if own.is_empty() {
                Mode::None
            } else {
                Mode::Bindings
            };
            #[allow(
                clippy::expect_used,
                reason = "`Key::encode` fails only on an entity mode's identity, and this mode has none"
            )]
            let bytes = key(mode)
                .encode()
                .expect("modes without an identity always encode");
            tx.push((kw(KEY), bytes_edn(&bytes)));
            if !own.is_empty() {
                tx.extend(bindings(&mut out, &own));
            }
        }
    } else {
        // Format 1 has no flag for "datomic.tx": it is bound like any other.
        tx.push((kw(ID), Edn::Str(id.hyphenated().to_string())));
        tx.push((kw(DIGEST), Edn::Str(digest.hex())));
        let all = shape.tempids.clone().unwrap_or_default();
        tx.extend(bindings(&mut out, &all));
    }
    out.push(map(tx));
    let identity = request_identity(&shape);
    Ok((
        Edn::Vector(out),
        Written {
            tempids: shape.tempids,
            identity,
        },
    ))
}

/// A fence marker for `id`, sent by `owner`: nothing committed under it,
/// and nothing will.
///
/// # Panics
/// Never: a fence key always encodes.
#[must_use]
pub(crate) fn fence_marker(db: &Db, id: uuid::Uuid, owner: Option<Owner>) -> Edn {
    let mut tx = vec![(kw(("db", "id")), Edn::Str(TX_TEMPID.to_owned()))];
    if attr(db, KEY).is_some() {
        let key = Key {
            id: id.as_u128(),
            digest: [0; 8],
            tx_named: false,
            mode: Mode::Fenced,
            owner: owner.map(|owner| owner.0),
        };
        #[allow(
            clippy::expect_used,
            reason = "`Key::encode` fails only on an entity mode's identity, and a fence has none"
        )]
        let bytes = key.encode().expect("a fence encodes");
        tx.push((kw(KEY), bytes_edn(&bytes)));
    } else {
        tx.push((kw(ID), Edn::Str(id.hyphenated().to_string())));
        tx.push((kw(DIGEST), Edn::Str(FENCED_V1.to_owned())));
    }
    Edn::Vector(vec![map(tx)])
}

/// A committed record of an id, as found.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) enum Found {
    /// The same request (same digest): its transaction entity.
    Same(EntityId),
    /// Another request under the same id.
    Other(EntityId),
    /// A fence marker.
    Fenced(EntityId),
    /// Another principal's id: nothing about it is the caller's to learn.
    Foreign(EntityId),
}

impl Found {
    /// The transaction entity.
    #[must_use]
    pub(crate) const fn tx(self) -> EntityId {
        match self {
            Self::Same(tx) | Self::Other(tx) | Self::Fenced(tx) | Self::Foreign(tx) => tx,
        }
    }
}

/// The record of `id` in `db` as `caller` may see it (`None`: an operator,
/// who sees every record), compared with `digest` (`None`: compare nothing,
/// any record is `Same`). A record another principal owns is `Foreign`
/// whatever it holds; one written before owners were recorded is anyone's.
/// One index seek (format 2), one lookup (format 1).
#[must_use]
pub(crate) fn find(
    db: &Db,
    id: uuid::Uuid,
    digest: Option<&Digest>,
    caller: Option<&Owner>,
) -> Option<Found> {
    if let Some(key_attr) = attr(db, KEY) {
        let prefix = key::id_prefix(id.as_u128());
        let start = Value::Bytes(prefix.clone().into());
        let found = db
            .index_range(key_attr, Some(&start), None)
            .ok()?
            .map_while(|datom| match &datom.v {
                Value::Bytes(bytes) if bytes.starts_with(&prefix) => Some((datom.e, Key::decode(bytes))),
                _ => None,
            })
            .next();
        if let Some((tx, key)) = found {
            let key = key?;
            if let (Some(recorded), Some(caller)) = (key.owner, caller)
                && recorded != caller.0
            {
                return Some(Found::Foreign(tx));
            }
            return Some(match key.mode {
                Mode::Fenced => Found::Fenced(tx),
                _ if digest.is_none_or(|digest| digest.short() == key.digest) => Found::Same(tx),
                _ => Found::Other(tx),
            });
        }
    }
    let id_attr = attr(db, ID)?;
    let tx = db.lookup(id_attr, &Value::Str(Arc::from(id.hyphenated().to_string())))?;
    let recorded = attr(db, DIGEST)
        .and_then(|digest_attr| db.values(tx, digest_attr).into_iter().next())
        .and_then(|value| match value {
            Value::Str(digest) => Some(digest.to_string()),
            _ => None,
        })
        .unwrap_or_default();
    Some(if recorded == FENCED_V1 {
        Found::Fenced(tx)
    } else if digest.is_none_or(|digest| digest.hex() == recorded) {
        Found::Same(tx)
    } else {
        Found::Other(tx)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use corium_query::edn::read_one;

    #[test]
    fn digests_bind_bytes_and_basis_condition() {
        let request = |bytes: &[u8], basis: Option<u64>| pb::TransactRequest {
            db: "d".into(),
            protocol_version: 1,
            tx_data: bytes.to_vec(),
            expected_basis_t: basis,
        };
        let base = Digest::of(&request(b"abc", None));
        assert_eq!(base, Digest::of(&request(b"abc", None)));
        assert_eq!(base.hex().len(), 64);
        assert_ne!(base, Digest::of(&request(b"abd", None)));
        assert_ne!(base, Digest::of(&request(b"abc", Some(0))));
        assert_ne!(
            Digest::of(&request(b"abc", Some(1))),
            Digest::of(&request(b"abc", Some(2)))
        );
        assert_eq!(&base.hex()[..16], &{
            let short = base.short();
            short.iter().fold(String::new(), |mut hex, byte| {
                use std::fmt::Write as _;
                let _ = write!(hex, "{byte:02x}");
                hex
            })
        });
    }

    #[test]
    fn the_schema_is_added_once() {
        let schema = codec::encode_edn(
            &read_one(
                "[{:db/ident :item/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one}]",
            )
            .unwrap(),
        );
        let extended = with_schema(&schema).unwrap();
        let text = format!("{:?}", codec::decode_edn(&extended).unwrap());
        assert!(
            text.contains("item") && text.contains("fleet.request") && text.contains("bytes"),
            "{text}"
        );
        assert_eq!(with_schema(&extended).unwrap(), extended);
        assert!(with_schema(b"not edn").is_err());
        assert!(reserved("fleet.tempid/0") && reserved("fleet.schema/x") && !reserved("x"));
    }
}
