//! A committed request's answer read back: the tempid map its first answer
//! had, rebuilt from the record (the key's binding mode, binding entities)
//! and the transaction's log record, and Corium's answer to the augmented
//! transaction made the caller's own (`normalise`).

use std::collections::BTreeMap;

use corium_core::{Datom, EntityId, Value};
use corium_db::Db;
use corium_protocol::codec;
use corium_protocol::pb;
use corium_query::edn::Edn;
use corium_tx::TX_TEMPID;

use super::key::{Key, Mode};
use super::record::{
    BINDING_PREFIX, KEY, ONE_TEMPID, ONE_TEMPID_NAME, TEMPID_ENTITY, TEMPID_NAME, TEMPIDS, Written, attr,
};

/// Encodes a tempid map the way Corium answers it.
#[must_use]
pub(crate) fn encode_tempids(tempids: &BTreeMap<String, i64>) -> Vec<u8> {
    codec::encode_edn(&Edn::Map(
        tempids
            .iter()
            .map(|(name, eid)| (Edn::Str(name.clone()), Edn::Long(*eid)))
            .collect(),
    ))
}

pub(super) fn raw(entity: EntityId) -> i64 {
    i64::try_from(entity.raw()).unwrap_or(i64::MAX)
}

/// Corium's answer to the augmented transaction as the caller's own: the
/// record's binding tempids dropped, and `"datomic.tx"` kept only when the
/// caller named it (or its tempids are unknown) — the answer Corium gives
/// the same transaction without a request id, and the one a replay builds.
///
/// # Errors
/// Corium's tempid map does not decode.
pub(crate) fn normalise(
    mut response: pb::TransactResponse,
    written: &Written,
) -> Result<pb::TransactResponse, codec::CodecError> {
    let decoded = codec::decode_edn(&response.tempids)?;
    let keep_tx = written
        .tempids
        .as_ref()
        .is_none_or(|tempids| tempids.contains(TX_TEMPID));
    let mut kept = BTreeMap::new();
    if let Edn::Map(pairs) = decoded {
        for (key, value) in pairs {
            if let (Edn::Str(name), Edn::Long(eid)) = (key, value) {
                let ours = name.starts_with(BINDING_PREFIX) || (name == TX_TEMPID && !keep_tx);
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
        (Some(Value::Str(tempid)), Some(Value::Ref(entity))) => Some((tempid.to_string(), raw(entity))),
        _ => None,
    }
}

/// The tempids bound by binding entities (or the single binding on the
/// transaction entity).
fn bound_tempids(db: &Db, tx: EntityId) -> BTreeMap<String, i64> {
    let mut tempids = BTreeMap::new();
    if let (Some(name_attr), Some(entity_attr)) = (attr(db, ONE_TEMPID_NAME), attr(db, ONE_TEMPID)) {
        tempids.extend(tempid_of(db, tx, name_attr, entity_attr));
    }
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

/// The entity a key's one tempid resolved to: the one the transaction's
/// datoms name besides the transaction itself; for an upsert that asserted
/// nothing new, the entity its identity value named at `t`.
fn entity_of(
    db: &Db,
    tx: EntityId,
    datoms: &[Datom],
    identity: Option<&(EntityId, Value)>,
) -> Option<EntityId> {
    let mut named = datoms.iter().map(|datom| datom.e).filter(|e| *e != tx);
    if let Some(first) = named.next() {
        return named.all(|e| e == first).then_some(first);
    }
    let (attr, value) = identity?;
    db.as_of(tx.sequence()).lookup(*attr, value)
}

/// The tempid map of the committed transaction `tx` (its log record's
/// `datoms`), as its first answer gave it. `requested`: the identity of the
/// one tempid in the request being answered again, if there is one (a
/// status query has none), used when the key does not keep it.
#[must_use]
pub(crate) fn answer_tempids(
    db: &Db,
    tx: EntityId,
    datoms: &[Datom],
    requested: Option<&(EntityId, Value)>,
) -> BTreeMap<String, i64> {
    let key = attr(db, KEY)
        .and_then(|key_attr| db.values(tx, key_attr).into_iter().next())
        .and_then(|value| match value {
            Value::Bytes(bytes) => Key::decode(&bytes),
            _ => None,
        });
    let Some(key) = key else {
        // Format 1.
        return bound_tempids(db, tx);
    };
    let mut tempids = match &key.mode {
        Mode::None | Mode::Fenced => BTreeMap::new(),
        Mode::Bindings => bound_tempids(db, tx),
        Mode::Entity { name, identity } => {
            let mut one = BTreeMap::new();
            if let Some(entity) = entity_of(db, tx, datoms, identity.as_ref().or(requested)) {
                one.insert(name.clone(), raw(entity));
            } else {
                tracing::warn!(tx = tx.raw(), tempid = %name, "cannot resolve a recorded tempid");
            }
            one
        }
    };
    if key.tx_named {
        tempids.insert(TX_TEMPID.to_owned(), raw(tx));
    }
    tempids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalised_answers_drop_the_records_own_tempids() {
        let answer = |pairs: &[(&str, i64)]| pb::TransactResponse {
            tempids: encode_tempids(&pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()),
            ..pb::TransactResponse::default()
        };
        let corium = answer(&[("a", 10), ("datomic.tx", 7), ("fleet.tempid/0", 11)]);
        let written = |names: &[&str]| Written {
            tempids: Some(names.iter().map(|name| (*name).to_owned()).collect()),
            identity: None,
        };
        assert_eq!(
            normalise(corium.clone(), &written(&["a"])).unwrap(),
            answer(&[("a", 10)])
        );
        assert_eq!(
            normalise(corium.clone(), &written(&["a", "datomic.tx"])).unwrap(),
            answer(&[("a", 10), ("datomic.tx", 7)])
        );
        // Unknown tempids (a function call): only the bindings go.
        assert_eq!(
            normalise(
                corium,
                &Written {
                    tempids: None,
                    identity: None
                }
            )
            .unwrap(),
            answer(&[("a", 10), ("datomic.tx", 7)])
        );
    }
}
