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
//!   left out of schemas, and datoms about them out of reports;
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
    let mut interner = KeywordInterner::default();
    let mut datoms: Vec<Datom> = match codec::decode_datoms(bytes, &mut interner) {
        Ok(datoms) => datoms,
        Err(error) => return format!("<undecodable datoms: {error}>"),
    };
    datoms.retain(|datom| {
        !names.own_attributes.contains(&datom.a.raw()) && !names.own_attributes.contains(&datom.e.raw())
    });
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
