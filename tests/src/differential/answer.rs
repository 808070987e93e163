//! Rendering an answer to one comparable line, and the normalisations that
//! make two servers' answers comparable (see the module docs of
//! [`super`]):
//!
//! - attributes read as their idents (from the schemas seen), and other
//!   entity ids are renamed `#0`, `#1`, … in order of first appearance in
//!   the transcript, datoms sorted by raw id first: two servers may number
//!   entities differently (the fleet installs its request-id attributes in
//!   every database) but must relate them alike; for the same reason the
//!   values of entity-id counters (`ID_COUNTERS`) read `<id counter>`, and
//!   recorded schema-plan digests (`PLAN_DIGESTS`) `<plan digest>`;
//! - instants within a day of now (transaction instants, server clocks)
//!   read `<now>`;
//! - the fleet's own attributes (`:fleet.request/*`, `:fleet.tempid/*`) are
//!   left out of schemas, and datoms about them out of reports, datom
//!   lists and `DbStats` counts;
//! - query rows are sorted (a relation is a set), and longs in EDN answers
//!   that are entity ids (user and transaction partitions) renamed as in
//!   datoms;
//! - status messages are compared whole.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use corium_core::{Datom, KeywordInterner, Value};
use corium_protocol::codec;
use corium_protocol::pb;
use corium_query::edn::Edn;

/// Ids renamed in order of first appearance, attributes by ident, and the
/// ids of the fleet's own attributes, as the schemas seen so far say.
#[derive(Default)]
pub struct Names {
    renamed: HashMap<u64, usize>,
    idents: HashMap<u64, String>,
    own_attributes: BTreeSet<u64>,
}

impl Names {
    /// The name of raw id `raw`: its ident when it is an attribute of a
    /// schema seen, else `#n` by first appearance.
    pub fn name(&mut self, raw: u64) -> String {
        if let Some(ident) = self.idents.get(&raw) {
            return ident.clone();
        }
        let next = self.renamed.len();
        format!("#{}", self.renamed.entry(raw).or_insert(next))
    }
}

/// Attributes whose values are entity-id counters (a saga's leased id
/// block starts at the database's next free id): a database of the fleet
/// holds more entities (its request-id schema), so only their presence is
/// compared.
const ID_COUNTERS: [&str; 1] = [":db.saga.grant/start"];

/// Attributes whose values digest a schema plan, which covers the installed
/// schema: on the fleet it includes the request-id attributes.
const PLAN_DIGESTS: [&str; 1] = [":db.schemaUpdate/planDigest"];

/// Whether `ident` is one of the attributes the fleet adds to every
/// database for request ids.
#[must_use]
pub fn fleet_own(ident: &str) -> bool {
    ident.starts_with(":fleet.request/") || ident.starts_with(":fleet.tempid/")
}

/// A failed call: its code and message.
#[must_use]
pub fn status(status: &tonic::Status) -> String {
    format!("error {:?}: {}", status.code(), status.message())
}

fn now_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
    )
    .unwrap_or(i64::MAX)
}

/// An instant: `<now>` when within a day of now (a clock reading).
fn instant(ms: i64) -> String {
    if (ms - now_ms()).abs() < 86_400_000 {
        "<now>".to_owned()
    } else {
        format!("#inst {ms}")
    }
}

fn value(value: &Value, interner: &KeywordInterner, names: &mut Names) -> String {
    match value {
        Value::Bool(flag) => flag.to_string(),
        Value::Long(n) => n.to_string(),
        Value::Double(x) => format!("{x:?}"),
        Value::Instant(ms) => instant(*ms),
        Value::Uuid(uuid) => format!("#uuid {uuid:032x}"),
        Value::Keyword(id) => interner
            .resolve(*id)
            .map_or_else(|| "<unknown keyword>".to_owned(), |keyword| keyword.to_string()),
        Value::Str(text) => format!("{text:?}"),
        Value::Bytes(bytes) => format!("<{} bytes>", bytes.len()),
        Value::Ref(id) => names.name(id.raw()),
        Value::Sealed(_) => "<sealed>".to_owned(),
    }
}

/// A datom list (`codec` encoding): sorted by raw ids, renamed; datoms
/// about the fleet's own attributes left out.
#[must_use]
pub fn datoms(bytes: &[u8], names: &mut Names) -> String {
    datom_chunks(std::slice::from_ref(&bytes.to_vec()), names)
}

/// Datom lists (a stream's chunks) as one, as [`datoms`] renders it.
#[must_use]
pub fn datom_chunks(chunks: &[Vec<u8>], names: &mut Names) -> String {
    let (mut datoms, interner) = match decode_chunks(chunks) {
        Ok(decoded) => decoded,
        Err(error) => return format!("<undecodable datoms: {error}>"),
    };
    datoms.retain(|datom| !names.own(datom));
    datoms.sort_by_key(|datom| (datom.e.raw(), datom.a.raw(), datom.tx.raw(), datom.added));
    let mut out = String::from("[");
    for datom in &datoms {
        let (e, a) = (names.name(datom.e.raw()), names.name(datom.a.raw()));
        let v = if ID_COUNTERS.contains(&a.as_str()) {
            "<id counter>".to_owned()
        } else if PLAN_DIGESTS.contains(&a.as_str()) {
            "<plan digest>".to_owned()
        } else {
            value(&datom.v, &interner, names)
        };
        let tx = names.name(datom.tx.raw());
        let op = if datom.added { '+' } else { '-' };
        let _ = write!(out, "[{e} {a} {v} {tx} {op}]");
    }
    out.push(']');
    out
}

fn decode_chunks(chunks: &[Vec<u8>]) -> Result<(Vec<Datom>, KeywordInterner), String> {
    let mut interner = KeywordInterner::default();
    let mut datoms = Vec::new();
    for chunk in chunks {
        datoms.extend(codec::decode_datoms(chunk, &mut interner).map_err(|error| error.to_string())?);
    }
    Ok((datoms, interner))
}

impl Names {
    /// Whether `datom` is about the fleet's own attributes (one of them, or
    /// a fact of one).
    fn own(&self, datom: &Datom) -> bool {
        self.own_attributes.contains(&datom.a.raw()) || self.own_attributes.contains(&datom.e.raw())
    }
}

/// The first raw id of the transaction partition: in an EDN answer a long
/// at or above it is an entity id (of a transaction or of user data) and
/// is renamed; below it, a number (the answers compared here return no
/// attribute ids).
fn first_entity_id() -> u64 {
    corium_core::EntityId::new(corium_core::Partition::Tx as u32, 0).raw()
}

/// An EDN answer (a query's, a pull's) with entity ids renamed and clock
/// readings normalised, as text.
#[must_use]
pub fn edn(form: &Edn, names: &mut Names) -> String {
    renamed(form, names).to_string()
}

fn renamed(form: &Edn, names: &mut Names) -> Edn {
    let all = |items: &[Edn], names: &mut Names| items.iter().map(|item| renamed(item, names)).collect();
    match form {
        Edn::Long(n) if n.cast_unsigned() >= first_entity_id() => Edn::Symbol(names.name(n.cast_unsigned())),
        Edn::Tagged(tag, inner) if tag == "inst" => match inner.as_ref() {
            Edn::Long(ms) => Edn::Symbol(instant(*ms)),
            other => Edn::Tagged(tag.clone(), Box::new(other.clone())),
        },
        Edn::Tagged(tag, inner) => Edn::Tagged(tag.clone(), Box::new(renamed(inner, names))),
        Edn::List(items) => Edn::List(all(items, names)),
        Edn::Vector(items) => Edn::Vector(all(items, names)),
        Edn::Set(items) => Edn::Set(all(items, names)),
        Edn::Map(pairs) => Edn::Map(
            pairs
                .iter()
                .map(|(key, value)| (renamed(key, names), renamed(value, names)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A query's result: its shape, and a relation's or a collection's rows in
/// order (sorted by their raw values first: rows come back in any order,
/// and a server numbers entities in the same order as another but not with
/// the same numbers); a tuple or a scalar as it is.
#[must_use]
pub fn query_result(shape: pb::ResultShape, result: &Edn, names: &mut Names) -> String {
    let name = shape
        .as_str_name()
        .trim_start_matches("RESULT_SHAPE_")
        .to_lowercase();
    match (shape, result) {
        (pb::ResultShape::Relation | pb::ResultShape::Collection, Edn::Vector(rows)) => {
            let mut rows = rows.clone();
            rows.sort();
            let rows: Vec<String> = rows.iter().map(|row| edn(row, names)).collect();
            format!("{name} of {} [{}]", rows.len(), rows.join(" "))
        }
        (_, other) => format!("{name} {}", edn(other, names)),
    }
}

/// `DbStats`, less what the fleet's own attributes add to its counts: the
/// datoms about them, the entities only they describe, the attributes only
/// they use, in `listing` (every datom of the same view, `eavt`).
#[must_use]
pub fn stats(response: &pb::DbStatsResponse, listing: &[Vec<u8>], names: &Names) -> String {
    let (datoms, _) = match decode_chunks(listing) {
        Ok(decoded) => decoded,
        Err(error) => return format!("<undecodable listing: {error}>"),
    };
    let count = |datoms: &[&Datom]| {
        let entities: BTreeSet<u64> = datoms.iter().map(|datom| datom.e.raw()).collect();
        let attributes: BTreeSet<u64> = datoms.iter().map(|datom| datom.a.raw()).collect();
        (
            datoms.len() as u64,
            entities.len() as u64,
            attributes.len() as u64,
        )
    };
    let all: Vec<&Datom> = datoms.iter().collect();
    let theirs: Vec<&Datom> = datoms.iter().filter(|datom| !names.own(datom)).collect();
    let (all, theirs) = (count(&all), count(&theirs));
    format!(
        "basis {}, datoms {}, entities {}, attributes {}",
        response.basis_t,
        response.datom_count.saturating_sub(all.0 - theirs.0),
        response.entity_count.saturating_sub(all.1 - theirs.1),
        response.attribute_count.saturating_sub(all.2 - theirs.2)
    )
}

/// A tempid map (EDN `{"name" id}`), renamed, in name order.
#[must_use]
pub fn tempids(bytes: &[u8], names: &mut Names) -> String {
    match codec::decode_edn(bytes) {
        Ok(Edn::Map(pairs)) => {
            let mut out = String::from("{");
            for (key, id) in pairs {
                let id = match id {
                    Edn::Long(id) => names.name(id.cast_unsigned()),
                    other => format!("{other:?}"),
                };
                let _ = write!(out, "{key:?} {id}, ");
            }
            out.push('}');
            out
        }
        Ok(other) => format!("<tempids not a map: {other:?}>"),
        Err(error) => format!("<undecodable tempids: {error}>"),
    }
}

/// A handshake schema: each attribute by ident with its properties, in
/// ident order; the fleet's own attributes are noted in `names` and left
/// out.
#[must_use]
pub fn schema(bytes: &[u8], names: &mut Names) -> String {
    let (schema, idents) = match codec::decode_schema(bytes) {
        Ok(decoded) => decoded,
        Err(error) => return format!("<undecodable schema: {error}>"),
    };
    let mut lines = Vec::new();
    for (id, attribute) in schema.iter() {
        let ident = idents
            .ident(*id)
            .map_or_else(|| format!("<no ident {}>", id.raw()), ToString::to_string);
        names.idents.insert(id.raw(), ident.clone());
        if fleet_own(&ident) {
            names.own_attributes.insert(id.raw());
            continue;
        }
        lines.push(format!(
            "{ident} {:?} {:?} unique={:?} component={} indexed={} no_history={}",
            attribute.value_type,
            attribute.cardinality,
            attribute.unique,
            attribute.is_component,
            attribute.indexed,
            attribute.no_history
        ));
    }
    lines.sort();
    format!("[{}]", lines.join("; "))
}

/// A transaction as the log holds it (a `TxRange` report): its instant and
/// its datoms.
#[must_use]
pub fn logged(tx_instant: i64, bytes: &[u8], names: &mut Names) -> String {
    format!("instant {}, datoms {}", instant(tx_instant), datoms(bytes, names))
}

/// A committed transaction.
#[must_use]
pub fn transacted(response: &pb::TransactResponse, names: &mut Names) -> String {
    format!(
        "basis {} → {}, instant {}, tempids {}, tx_data {}",
        response.basis_before,
        response.basis_t,
        instant(response.tx_instant),
        tempids(&response.tempids, names),
        datoms(&response.tx_data, names)
    )
}
