//! What a transaction's forms say about its tempids, read with Corium's own
//! form converter (`corium_forms::txforms::tx_items_from_edn`, over a
//! throwaway interner): the tempids Corium resolves (entity positions and
//! reference values alike) and whether the record can bind the one tempid
//! without a reference datom (see `key::Mode::Entity`).

use std::collections::BTreeSet;

use corium_core::{EntityId, KeywordInterner, Unique, Value};
use corium_db::Db;
use corium_query::edn::Edn;
use corium_tx::{EntityRef, TX_TEMPID, TxItem, TxOp};

/// An identity value a key cannot carry (a keyword, which travels by an
/// interner; a double; a sealed value).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) struct Unkeepable;

/// A tempid's first identity attribute and value, if it has one.
pub(crate) type Identity = Result<Option<(EntityId, Value)>, Unkeepable>;

/// The shape of a caller's transaction.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Shape {
    /// Every tempid Corium resolves (`None`: the converter refused the forms
    /// before expansion — a transaction-function call — so they are unknown).
    pub tempids: Option<BTreeSet<String>>,
    /// The one tempid of the caller's own (not `"datomic.tx"`), when every
    /// entity position is it or the transaction and it has an assertion of
    /// its own: its entity is then the one the log record's datoms name
    /// besides the transaction. With its first identity attribute and value
    /// (an upsert that asserts nothing new leaves no datom to name it).
    pub entity: Option<(String, Identity)>,
}

impl Shape {
    /// Whether the caller named `"datomic.tx"` (unknown counts as named:
    /// Corium's own answer then keeps it).
    #[must_use]
    pub(crate) fn tx_named(&self) -> bool {
        self.tempids
            .as_ref()
            .is_none_or(|tempids| tempids.contains(TX_TEMPID))
    }

    /// The caller's tempids besides `"datomic.tx"`.
    #[must_use]
    pub(crate) fn own(&self) -> BTreeSet<String> {
        self.tempids
            .iter()
            .flatten()
            .filter(|tempid| *tempid != TX_TEMPID)
            .cloned()
            .collect()
    }
}

fn temp(entity: &EntityRef) -> Option<&str> {
    match entity {
        EntityRef::Temp(tempid) => Some(tempid),
        _ => None,
    }
}

/// Reads the shape of `forms` against `db`.
#[must_use]
pub(crate) fn of(db: &Db, forms: &[Edn]) -> Shape {
    let mut interner = KeywordInterner::default();
    let Ok(items) = corium_forms::txforms::tx_items_from_edn(db, &mut interner, forms) else {
        return Shape::default();
    };
    let mut tempids = BTreeSet::new();
    for item in &items {
        let entities: [Option<&EntityRef>; 2] = match item {
            TxItem::Map(map) => [Some(&map.entity), None],
            TxItem::Op(
                TxOp::Add(entity, ..)
                | TxOp::Retract(entity, ..)
                | TxOp::Cas(entity, ..)
                | TxOp::RetractEntity(entity),
            ) => [Some(entity), None],
            TxItem::Op(TxOp::AddRef(entity, _, target)) => [Some(entity), Some(target)],
        };
        tempids.extend(entities.into_iter().flatten().filter_map(temp).map(str::to_owned));
    }
    let own: Vec<&String> = tempids.iter().filter(|tempid| *tempid != TX_TEMPID).collect();
    let entity = match own.as_slice() {
        [one] => single_entity(db, &items, one).map(|identity| ((*one).clone(), identity)),
        _ => None,
    };
    Shape {
        tempids: Some(tempids),
        entity,
    }
}

/// Whether `x` is the only entity `items` write about (besides the
/// transaction) and has an assertion of its own; with its first identity
/// attribute and value.
fn single_entity(db: &Db, items: &[TxItem], x: &str) -> Option<Identity> {
    let is_x = |entity: &EntityRef| temp(entity) == Some(x);
    let ours =
        |entity: &EntityRef| matches!(temp(entity), Some(tempid) if tempid == x || tempid == TX_TEMPID);
    let identity = |attr: EntityId| {
        db.schema()
            .get(attr)
            .is_some_and(|attribute| attribute.unique == Some(Unique::Identity))
    };
    let mut asserts = false;
    let mut found: Option<Result<(EntityId, Value), Unkeepable>> = None;
    let mut note = |attr: EntityId, value: &Value| {
        if found.is_none() && identity(attr) {
            found = Some(match value {
                Value::Keyword(_) | Value::Sealed(_) | Value::Double(_) => Err(Unkeepable),
                value => Ok((attr, value.clone())),
            });
        }
    };
    for item in items {
        match item {
            TxItem::Map(map) if ours(&map.entity) => {
                if is_x(&map.entity) {
                    for (attr, values) in &map.attributes {
                        asserts |= !values.is_empty();
                        for value in values {
                            note(*attr, value);
                        }
                    }
                }
            }
            TxItem::Op(TxOp::Add(entity, attr, value)) if ours(entity) => {
                if is_x(entity) {
                    asserts = true;
                    note(*attr, value);
                }
            }
            TxItem::Op(TxOp::AddRef(entity, _, target)) if ours(entity) => {
                if is_x(entity) {
                    asserts = true;
                }
                // A reference value names another entity only as a value.
                if let EntityRef::Temp(tempid) = target
                    && tempid != x
                    && tempid != TX_TEMPID
                {
                    return None;
                }
            }
            _ => return None,
        }
    }
    asserts.then(|| found.transpose())
}

#[cfg(test)]
mod tests {
    use super::*;
    use corium_core::{Attribute, Cardinality, Keyword, Partition, Schema, ValueType};
    use corium_query::edn::read_one;

    /// `:item/name` (string, identity), `:item/note` (string),
    /// `:item/child` (ref), `:item/kind` (keyword, identity).
    fn db() -> Db {
        let attrs = [
            ("name", ValueType::Str, Some(Unique::Identity)),
            ("note", ValueType::Str, None),
            ("child", ValueType::Ref, None),
            ("kind", ValueType::Keyword, Some(Unique::Identity)),
        ];
        let mut schema = Schema::default();
        let mut idents = corium_db::Idents::default();
        for (n, (name, value_type, unique)) in attrs.into_iter().enumerate() {
            let id = EntityId::new(Partition::Db as u32, 100 + u64::try_from(n).unwrap());
            schema.insert(Attribute {
                id,
                value_type,
                cardinality: Cardinality::One,
                unique,
                is_component: false,
                indexed: false,
                no_history: false,
            });
            idents.insert(Keyword::new(Some("item"), name), id);
        }
        Db::new(schema).with_naming(idents, KeywordInterner::default())
    }

    fn shape(text: &str) -> Shape {
        let Edn::Vector(forms) = read_one(text).unwrap() else {
            unreachable!()
        };
        of(&db(), &forms)
    }

    fn names(shape: &Shape) -> Vec<String> {
        shape.tempids.iter().flatten().cloned().collect()
    }

    #[test]
    fn tempids_are_the_ones_corium_resolves_reference_values_included() {
        let found = shape(
            r#"[{:db/id "a" :item/note "x"}
                [:db/add "b" :item/child "c"]
                [:db/add "datomic.tx" :item/note "tx"]
                {:db/id "d" :item/note "not-a-tempid"}]"#,
        );
        assert_eq!(names(&found), ["a", "b", "c", "d", "datomic.tx"]);
        assert!(found.tx_named());
        assert_eq!(found.entity, None, "several entities");
        // A transaction-function call does not convert before expansion.
        let unknown = shape(r#"[[:my/fn "a"]]"#);
        assert_eq!(unknown.tempids, None);
        assert!(unknown.tx_named());
    }

    #[test]
    fn one_entity_with_its_identity_binds_without_a_reference() {
        let upsert = shape(r#"[{:db/id "x" :item/name "n1" :item/note "hello"}]"#);
        assert!(!upsert.tx_named());
        let (name, identity) = upsert.entity.expect("one entity");
        assert_eq!(name, "x");
        let (attr, value) = identity.unwrap().expect("an identity");
        assert_eq!(db().idents().ident(attr).unwrap().name, "name");
        assert_eq!(value, Value::Str("n1".into()));
        // No identity: a new entity (always datoms of its own).
        let fresh = shape(r#"[[:db/add "x" :item/note "n"] [:db/add "datomic.tx" :item/note "t"]]"#);
        assert_eq!(fresh.entity, Some(("x".to_owned(), Ok(None))));
        assert!(fresh.tx_named());
        // A keyword identity cannot be kept in the key.
        let keyworded = shape(r#"[{:db/id "x" :item/kind :k/one}]"#);
        assert_eq!(keyworded.entity, Some(("x".to_owned(), Err(Unkeepable))));
    }

    #[test]
    fn other_entities_or_retractions_need_bindings() {
        for text in [
            // Another entity, by id.
            r#"[{:db/id "x" :item/note "a"} [:db/add 17 :item/note "b"]]"#,
            // A reference to another tempid.
            r#"[[:db/add "x" :item/child "y"] {:db/id "y" :item/note "c"}]"#,
            // A retraction.
            r#"[[:db/add "x" :item/note "a"] [:db/retract "x" :item/note "a"]]"#,
            // Nothing asserted about x itself.
            r#"[[:db/add "datomic.tx" :item/child "x"]]"#,
        ] {
            assert_eq!(shape(text).entity, None, "{text}");
        }
    }
}
