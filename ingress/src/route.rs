//! Which node a call must reach, decided from its path and its first
//! message without decoding it.
//!
//! Every database-specific `corium.v1` request carries the database name as
//! field 1 (`string db = 1`), as do the fleet's `DatabasePlacement` and
//! `Handoff` (`string database = 1`); [`scan_db`] reads that one field from the
//! protobuf bytes with a minimal wire-format walk, so unknown fields and
//! future message versions pass through untouched.

/// The path of `corium.v1.Transactor/Subscribe`, the one server-streaming
/// call (its stream is watched for a stalled client, `stall.rs`).
pub(crate) const SUBSCRIBE: &str = "/corium.v1.Transactor/Subscribe";

/// The path of `corium.v1.PeerServer/Subscribe`, a thin client's
/// subscription (served by the owner, like [`SUBSCRIBE`]).
pub(crate) const PEER_SUBSCRIBE: &str = "/corium.v1.PeerServer/Subscribe";

/// Whether `path` is a subscription (a stream watched for a stalled client).
#[must_use]
pub(crate) fn is_subscribe(path: &str) -> bool {
    path == SUBSCRIBE || path == PEER_SUBSCRIBE
}

/// The path of `corium.v1.PeerServer/Query`, whose field 1 is a list of
/// views (`repeated DbViewSpec dbs = 1`); the other view reads hold one.
pub(crate) const QUERY: &str = "/corium.v1.PeerServer/Query";

/// The path of `corium.v1.Catalog/DeleteDatabase`, whose answer for a
/// database that does not exist is `deleted: false`, not an error.
pub(crate) const DELETE_DATABASE: &str = "/corium.v1.Catalog/DeleteDatabase";

/// Where a call goes.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) enum Target {
    /// The database's lease holder (activating it on a candidate if none).
    Owner,
    /// The database's top reachable candidate (catalog create).
    Candidate,
    /// Any node able to read storage.
    AnyNode,
    /// A read replica of the database: its candidates, the owner last
    /// (`corium.v1.PeerServer` reads).
    Replica,
}

/// Where a request names its database.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) enum DbField {
    /// Nowhere (the call is not about one database).
    None,
    /// String field 1.
    First,
    /// Field 1 is a `DbViewSpec` (or the first of several), whose field 1
    /// names it (`PeerServer`'s `Query`, `Pull`, `Datoms`, `DbStats`).
    View,
}

/// The routing class of a gRPC path, or `None` for a method the fleet does
/// not serve.
#[must_use]
pub(crate) fn classify(path: &str) -> Option<(Target, DbField)> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    let (target, names_db) = match service {
        "corium.v1.PeerServer" => {
            return match method {
                "Query" | "Pull" | "Datoms" | "DbStats" => Some((Target::Replica, DbField::View)),
                "TxRange" => Some((Target::Replica, DbField::First)),
                "Transact" | "Subscribe" => Some((Target::Owner, DbField::First)),
                _ => None,
            };
        }
        "corium.v1.Transactor" => match method {
            "Transact" | "SagaCommit" | "SagaFinish" | "Subscribe" | "Sync" | "Status" => {
                Some((Target::Owner, true))
            }
            _ => None,
        },
        "corium.v1.Catalog" => match method {
            "CreateDatabase" => Some((Target::Candidate, true)),
            "ListDatabases" | "GcDeletedDatabases" => Some((Target::AnyNode, false)),
            "DeleteDatabase" | "ForkDatabase" | "RequestIndex" | "SetIndexPolicy" | "GetStorageInfo"
            | "KeyStatus" | "RotateStorageKey" | "RewrapKeys" | "AlterSchema" => Some((Target::Owner, true)),
            _ => None,
        },
        "corium.fleet.v1.Requests" => match method {
            "Status" => Some((Target::Owner, true)),
            _ => None,
        },
        "corium.fleet.v1.FleetAdmin" => match method {
            "DatabasePlacement" => Some((Target::AnyNode, true)),
            // `FleetStatus`: the node that answers asks the others itself.
            "NodeStatus" | "FleetStatus" => Some((Target::AnyNode, false)),
            // Run by the database's owner, which checks the caller is an
            // operator. `Activate` and `Prepare` are node-to-node only: not served here.
            "Handoff" => Some((Target::Owner, true)),
            _ => None,
        },
        _ => None,
    }?;
    Some((target, if names_db { DbField::First } else { DbField::None }))
}

/// Whether an owner-routed call only reads (Corium's `Sync`, `Status`,
/// `GetStorageInfo`, `KeyStatus`; the fleet's request status): sending it
/// twice changes nothing, so a hop that broke mid-call leaves no outcome to
/// be unsure of and the ingress sends it again.
#[must_use]
pub(crate) fn read_only(path: &str) -> bool {
    matches!(
        path,
        "/corium.v1.Transactor/Sync"
            | "/corium.v1.Transactor/Status"
            | "/corium.v1.PeerServer/Query"
            | "/corium.v1.PeerServer/Pull"
            | "/corium.v1.PeerServer/Datoms"
            | "/corium.v1.PeerServer/TxRange"
            | "/corium.v1.PeerServer/DbStats"
            | "/corium.v1.Catalog/GetStorageInfo"
            | "/corium.v1.Catalog/KeyStatus"
            | "/corium.fleet.v1.Requests/Status"
    )
}

/// Why a request body could not be routed.
#[derive(Debug, thiserror::Error, Eq, PartialEq)]
pub(crate) enum ScanError {
    /// The body does not start with a whole length-prefixed gRPC message.
    #[error("the request body is not one complete gRPC message")]
    Framing,
    /// The first message is compressed: its fields cannot be read without
    /// decompressing it, which the ingress does not do.
    #[error("compressed request messages are not supported by the fleet ingress")]
    Compressed,
    /// The message is not well-formed protobuf wire format.
    #[error("the request message is not valid protobuf")]
    Protobuf,
    /// Field 1 is missing or empty.
    #[error("the request names no database (field 1 is empty or missing)")]
    NoDatabase,
    /// Field 1 is not UTF-8 text.
    #[error("the database name is not UTF-8")]
    NotText,
    /// A field that holds one database is sent twice with different names
    /// (protobuf keeps the last, so the node would answer for another
    /// database than the one the call was routed, authorized and counted
    /// by here).
    #[error(
        "the request names two databases: a field that holds one database is repeated with different values"
    )]
    TwoDatabases,
}

/// A scan that reads a request's database from its first message.
pub(crate) type Scan = fn(&[u8]) -> Result<String, ScanError>;

/// How the database of a call on `path` is read, given where `classify`
/// said it is named: string field 1, the views of a `Query`, or the one
/// view of the other `PeerServer` reads.
#[must_use]
pub(crate) fn scanner(path: &str, field: DbField) -> Scan {
    match field {
        DbField::View if path == QUERY => scan_view_db,
        DbField::View => scan_one_view_db,
        DbField::First | DbField::None => scan_db,
    }
}

/// The first gRPC message of a request body, without its 5-byte prefix.
///
/// # Errors
/// [`ScanError::Framing`] when the body does not start with a whole message,
/// [`ScanError::Compressed`] when that message is compressed.
pub(crate) fn first_message(body: &[u8]) -> Result<&[u8], ScanError> {
    let header = body.get(..5).ok_or(ScanError::Framing)?;
    if header[0] != 0 {
        return Err(ScanError::Compressed);
    }
    let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    body.get(5..5 + length).ok_or(ScanError::Framing)
}

fn varint(bytes: &[u8], at: &mut usize) -> Result<u64, ScanError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at).ok_or(ScanError::Protobuf)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(ScanError::Protobuf)
}

/// Reads the database a `Query` binds its replica to: field 1 of the first
/// `DbViewSpec` in the list of field 1 (as Corium's peer server binds the
/// first database of a query). Each view names one database at most: a
/// view whose `db` is repeated with different values is refused.
///
/// # Errors
/// A malformed message, a view naming two databases, or no non-empty
/// database in the first view.
pub(crate) fn scan_view_db(message: &[u8]) -> Result<String, ScanError> {
    let mut first: Option<Option<&[u8]>> = None;
    each_field_one(message, |view| {
        let db = one_value(view)?;
        first.get_or_insert(db);
        Ok(())
    })?;
    text(first.flatten())
}

/// Reads the database of a `Pull`, `Datoms` or `DbStats`: field 1 of the
/// one `DbViewSpec` in field 1. Protobuf merges a singular message sent
/// twice (and keeps the last `db`), so every `db` in every occurrence of
/// the view must be the same name: the node then answers for the database
/// the call is routed by.
///
/// # Errors
/// A malformed message, two different databases, or none.
pub(crate) fn scan_one_view_db(message: &[u8]) -> Result<String, ScanError> {
    let mut found: Option<&[u8]> = None;
    each_field_one(message, |view| each_field_one(view, |db| same(&mut found, db)))?;
    text(found)
}

/// Reads string field 1 of a protobuf message: the value protobuf keeps
/// (the last occurrence), which every other occurrence must equal.
///
/// # Errors
/// A malformed message, two different values, or no non-empty field 1.
pub(crate) fn scan_db(message: &[u8]) -> Result<String, ScanError> {
    text(one_value(message)?)
}

/// Field 1 as a non-empty database name.
fn text(found: Option<&[u8]>) -> Result<String, ScanError> {
    let db = std::str::from_utf8(found.ok_or(ScanError::NoDatabase)?).map_err(|_| ScanError::NotText)?;
    if db.is_empty() {
        return Err(ScanError::NoDatabase);
    }
    Ok(db.to_owned())
}

/// The one value of length-delimited field 1 of `message`, if any: every
/// occurrence must be the same bytes.
fn one_value(message: &[u8]) -> Result<Option<&[u8]>, ScanError> {
    let mut found = None;
    each_field_one(message, |value| same(&mut found, value))?;
    Ok(found)
}

/// Records `value` in `found`, refusing a second, different one.
fn same<'a>(found: &mut Option<&'a [u8]>, value: &'a [u8]) -> Result<(), ScanError> {
    match found {
        Some(seen) if *seen != value => Err(ScanError::TwoDatabases),
        _ => {
            *found = Some(value);
            Ok(())
        }
    }
}

/// Calls `each` with the bytes of every length-delimited field 1 of
/// `message`, in order; the whole message is checked.
fn each_field_one<'a>(
    message: &'a [u8],
    mut each: impl FnMut(&'a [u8]) -> Result<(), ScanError>,
) -> Result<(), ScanError> {
    let mut at = 0;
    while at < message.len() {
        let key = varint(message, &mut at)?;
        let (field, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                varint(message, &mut at)?;
            }
            1 => {
                at = at
                    .checked_add(8)
                    .filter(|end| *end <= message.len())
                    .ok_or(ScanError::Protobuf)?;
            }
            2 => {
                let length = usize::try_from(varint(message, &mut at)?).map_err(|_| ScanError::Protobuf)?;
                let end = at
                    .checked_add(length)
                    .filter(|end| *end <= message.len())
                    .ok_or(ScanError::Protobuf)?;
                if field == 1 {
                    each(&message[at..end])?;
                }
                at = end;
            }
            5 => {
                at = at
                    .checked_add(4)
                    .filter(|end| *end <= message.len())
                    .ok_or(ScanError::Protobuf)?;
            }
            _ => return Err(ScanError::Protobuf),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use prost::Message;

    fn frame(message: &[u8]) -> Vec<u8> {
        let mut body = vec![0];
        let length = u32::try_from(message.len()).expect("test messages are far under 4 GiB");
        body.extend_from_slice(&length.to_be_bytes());
        body.extend_from_slice(message);
        body
    }

    #[derive(Clone, PartialEq, prost::Message)]
    struct Transact {
        #[prost(string, tag = "1")]
        db: String,
        #[prost(uint32, tag = "2")]
        protocol_version: u32,
        #[prost(bytes = "vec", tag = "3")]
        tx_data: Vec<u8>,
        #[prost(uint64, optional, tag = "4")]
        expected_basis_t: Option<u64>,
        #[prost(fixed64, tag = "9")]
        unknown_fixed: u64,
        #[prost(fixed32, tag = "10")]
        unknown_fixed32: u32,
    }

    #[test]
    fn only_reads_are_read_only() {
        for read in [
            "/corium.v1.Transactor/Sync",
            "/corium.v1.Transactor/Status",
            "/corium.v1.Catalog/KeyStatus",
            "/corium.fleet.v1.Requests/Status",
        ] {
            assert!(read_only(read), "{read}");
        }
        for write in [
            "/corium.v1.Transactor/Transact",
            "/corium.v1.Transactor/SagaCommit",
            "/corium.v1.Catalog/AlterSchema",
            "/corium.v1.Catalog/RotateStorageKey",
            "/corium.fleet.v1.FleetAdmin/Handoff",
        ] {
            assert!(!read_only(write), "{write}");
        }
    }

    #[test]
    fn classifies_every_served_method() {
        let cases = [
            ("/corium.v1.Transactor/Transact", Target::Owner, DbField::First),
            ("/corium.v1.Transactor/Subscribe", Target::Owner, DbField::First),
            (
                "/corium.v1.Catalog/CreateDatabase",
                Target::Candidate,
                DbField::First,
            ),
            ("/corium.v1.Catalog/ListDatabases", Target::AnyNode, DbField::None),
            (
                "/corium.fleet.v1.FleetAdmin/NodeStatus",
                Target::AnyNode,
                DbField::None,
            ),
            (
                "/corium.fleet.v1.FleetAdmin/FleetStatus",
                Target::AnyNode,
                DbField::None,
            ),
            (
                "/corium.fleet.v1.FleetAdmin/Handoff",
                Target::Owner,
                DbField::First,
            ),
            ("/corium.v1.PeerServer/Query", Target::Replica, DbField::View),
            ("/corium.v1.PeerServer/Pull", Target::Replica, DbField::View),
            ("/corium.v1.PeerServer/Datoms", Target::Replica, DbField::View),
            ("/corium.v1.PeerServer/DbStats", Target::Replica, DbField::View),
            ("/corium.v1.PeerServer/TxRange", Target::Replica, DbField::First),
            ("/corium.v1.PeerServer/Transact", Target::Owner, DbField::First),
            ("/corium.v1.PeerServer/Subscribe", Target::Owner, DbField::First),
        ];
        for (path, target, field) in cases {
            assert_eq!(classify(path), Some((target, field)), "{path}");
        }
        assert_eq!(classify("/corium.fleet.v1.FleetAdmin/Activate"), None);
        assert_eq!(classify("/corium.fleet.v1.FleetAdmin/Prepare"), None);
        assert_eq!(classify("/corium.v1.PeerServer/Nope"), None);
        assert_eq!(classify("/corium.v1.Transactor/Nope"), None);
        assert_eq!(classify("garbage"), None);
    }

    #[test]
    fn scans_the_first_view_of_a_query() {
        use corium_protocol::pb;
        let query = pb::QueryRequest {
            dbs: vec![
                pb::DbViewSpec {
                    db: "orders".into(),
                    view: Some(pb::db_view_spec::View::AsOf(9)),
                },
                pb::DbViewSpec {
                    db: "other".into(),
                    view: None,
                },
            ],
            query: b"[:find ?e]".to_vec(),
            args: vec![],
            fuel: 0,
        };
        assert_eq!(scan_view_db(&query.encode_to_vec()), Ok("orders".to_owned()));
        let pull = pb::PullRequest {
            db: Some(pb::DbViewSpec {
                db: "people".into(),
                view: None,
            }),
            pattern: vec![1],
            eid: vec![2],
        };
        assert_eq!(scan_view_db(&pull.encode_to_vec()), Ok("people".to_owned()));
        let unnamed = pb::DbStatsRequest { db: None };
        assert_eq!(scan_view_db(&unnamed.encode_to_vec()), Err(ScanError::NoDatabase));
    }

    #[test]
    fn scans_db_from_a_real_message() {
        let message = Transact {
            db: "orders".into(),
            protocol_version: 3,
            tx_data: vec![1; 300],
            expected_basis_t: Some(9),
            unknown_fixed: 7,
            unknown_fixed32: 1,
        };
        let body = frame(&message.encode_to_vec());
        assert_eq!(scan_db(first_message(&body).unwrap()), Ok("orders".to_owned()));
    }

    #[test]
    fn refuses_what_it_cannot_route() {
        assert_eq!(first_message(&[0, 0, 0]), Err(ScanError::Framing));
        assert_eq!(first_message(&[1, 0, 0, 0, 0]), Err(ScanError::Compressed));
        assert_eq!(first_message(&frame(b"abc")[..6]), Err(ScanError::Framing));
        assert_eq!(
            scan_db(
                &Transact {
                    protocol_version: 3,
                    ..Transact::default()
                }
                .encode_to_vec()
            ),
            Err(ScanError::NoDatabase)
        );
        assert_eq!(scan_db(&[0x0a, 0x05, b'a']), Err(ScanError::Protobuf));
        assert_eq!(scan_db(&[0x0a, 0x02, 0xff, 0xfe]), Err(ScanError::NotText));
        assert_eq!(scan_db(&[0x0b]), Err(ScanError::Protobuf));
    }

    /// Length-delimited field 1 holding `value`, as any encoder (or a
    /// hostile client) may write it, empty values included.
    fn field_one(value: &[u8]) -> Vec<u8> {
        let mut bytes = vec![0x0a];
        let mut length = value.len();
        while length >= 0x80 {
            bytes.push(u8::try_from(length & 0x7f).unwrap() | 0x80);
            length >>= 7;
        }
        bytes.push(u8::try_from(length).unwrap());
        bytes.extend_from_slice(value);
        bytes
    }

    /// A `DbViewSpec` naming each of `dbs` in turn (field 1 repeated), with
    /// a view when `as_of` is given.
    fn view_spec(dbs: &[&str], as_of: Option<u64>) -> Vec<u8> {
        use corium_protocol::pb;
        let mut bytes: Vec<u8> = dbs.iter().flat_map(|db| field_one(db.as_bytes())).collect();
        if let Some(t) = as_of {
            bytes.extend(
                pb::DbViewSpec {
                    db: String::new(),
                    view: Some(pb::db_view_spec::View::AsOf(t)),
                }
                .encode_to_vec(),
            );
        }
        bytes
    }

    /// Issue 35: a `Pull` whose view occurs twice (or whose view repeats its
    /// `db`) was routed by the first database and answered by the node for
    /// the last, as protobuf merges them. Refused; the same database twice
    /// (what merging makes harmless) is not.
    #[test]
    fn a_view_read_naming_two_databases_is_refused() {
        use corium_protocol::pb;
        let pull = [
            field_one(&view_spec(&["a"], None)),
            field_one(&view_spec(&["b"], None)),
        ]
        .concat();
        assert_eq!(
            pb::PullRequest::decode(pull.as_slice()).unwrap().db.unwrap().db,
            "b",
            "what the node answers for"
        );
        let path = "/corium.v1.PeerServer/Pull";
        let scan = scanner(path, DbField::View);
        assert_eq!(scan(&pull), Err(ScanError::TwoDatabases));
        assert!(
            ScanError::TwoDatabases
                .to_string()
                .contains("names two databases")
        );
        let repeated_db = field_one(&view_spec(&["a", "b"], Some(3)));
        assert_eq!(scan(&repeated_db), Err(ScanError::TwoDatabases));
        for method in ["Datoms", "DbStats"] {
            let scan = scanner(&format!("/corium.v1.PeerServer/{method}"), DbField::View);
            assert_eq!(scan(&pull), Err(ScanError::TwoDatabases), "{method}");
            assert_eq!(scan(&repeated_db), Err(ScanError::TwoDatabases), "{method}");
        }
        // The same name twice, or a second occurrence with only a view:
        // one database either way.
        let same = [
            field_one(&view_spec(&["a"], None)),
            field_one(&view_spec(&["a"], Some(3))),
        ]
        .concat();
        assert_eq!(scan(&same), Ok("a".to_owned()));
        let view_only = [
            field_one(&view_spec(&["a"], None)),
            field_one(&view_spec(&[], Some(3))),
        ]
        .concat();
        assert_eq!(scan(&view_only), Ok("a".to_owned()));
        // An empty name after a real one is a second (empty) database.
        let emptied = [
            field_one(&view_spec(&["a"], None)),
            field_one(&view_spec(&[""], None)),
        ]
        .concat();
        assert_eq!(scan(&emptied), Err(ScanError::TwoDatabases));
    }

    /// A `Query`'s views are a list: each binds its own database, and only
    /// a view repeating its own `db` with another name is refused.
    #[test]
    fn a_query_s_views_each_name_one_database() {
        let scan = scanner(QUERY, DbField::View);
        let two_views = [
            field_one(&view_spec(&["a"], Some(1))),
            field_one(&view_spec(&["b"], None)),
        ]
        .concat();
        assert_eq!(scan(&two_views), Ok("a".to_owned()));
        let second_doubled = [
            field_one(&view_spec(&["a"], None)),
            field_one(&view_spec(&["b", "c"], None)),
        ]
        .concat();
        assert_eq!(scan(&second_doubled), Err(ScanError::TwoDatabases));
        let first_doubled = field_one(&view_spec(&["a", "b"], None));
        assert_eq!(scan(&first_doubled), Err(ScanError::TwoDatabases));
        assert_eq!(scan_view_db(&first_doubled), Err(ScanError::TwoDatabases));
    }

    /// A singular `db` string sent twice with different values: protobuf
    /// keeps the last, so it is refused rather than routed by either.
    #[test]
    fn a_repeated_db_field_with_two_names_is_refused() {
        let transact = Transact {
            db: "a".into(),
            protocol_version: 3,
            ..Transact::default()
        };
        let doubled = [transact.encode_to_vec(), field_one(b"b")].concat();
        assert_eq!(Transact::decode(doubled.as_slice()).unwrap().db, "b");
        for path in [
            "/corium.v1.Transactor/Transact",
            "/corium.v1.Transactor/Sync",
            "/corium.v1.PeerServer/TxRange",
            "/corium.fleet.v1.FleetAdmin/Handoff",
        ] {
            let (_, field) = classify(path).unwrap();
            assert_eq!(
                scanner(path, field)(&doubled),
                Err(ScanError::TwoDatabases),
                "{path}"
            );
        }
        let same = [transact.encode_to_vec(), field_one(b"a")].concat();
        assert_eq!(scan_db(&same), Ok("a".to_owned()));
    }

    proptest! {
        /// Whatever the occurrences of a `Pull`'s view and of its `db`, the
        /// scan either refuses or names exactly the database protobuf
        /// decodes (the one the node answers for); it refuses exactly when
        /// two different names occur.
        #[test]
        fn a_view_scan_agrees_with_protobuf_or_refuses(
            views in proptest::collection::vec(
                (
                    proptest::collection::vec(prop_oneof!["a", "b", Just(String::new())], 0..3),
                    proptest::option::of(0u64..9),
                ),
                1..4,
            ),
        ) {
            use corium_protocol::pb;
            let body: Vec<u8> = views
                .iter()
                .flat_map(|(dbs, as_of)| {
                    let dbs: Vec<&str> = dbs.iter().map(String::as_str).collect();
                    field_one(&view_spec(&dbs, *as_of))
                })
                .collect();
            let decoded = pb::PullRequest::decode(body.as_slice()).unwrap().db.unwrap_or_default().db;
            let names: std::collections::BTreeSet<&String> = views.iter().flat_map(|(dbs, _)| dbs).collect();
            match scan_one_view_db(&body) {
                Ok(db) => {
                    prop_assert_eq!(&db, &decoded);
                    prop_assert_eq!(names.len(), 1);
                }
                Err(ScanError::TwoDatabases) => prop_assert!(names.len() > 1),
                Err(ScanError::NoDatabase) => prop_assert!(decoded.is_empty() && names.len() <= 1),
                Err(other) => prop_assert!(false, "{other:?}"),
            }
        }

        /// The same for a singular string `db`, repeated.
        #[test]
        fn a_db_scan_agrees_with_protobuf_or_refuses(
            dbs in proptest::collection::vec(prop_oneof!["a", "b", "orders"], 1..4),
            v in any::<u32>(),
        ) {
            let mut body = Transact { protocol_version: v, ..Transact::default() }.encode_to_vec();
            for db in &dbs {
                body.extend(field_one(db.as_bytes()));
            }
            let decoded = Transact::decode(body.as_slice()).unwrap().db;
            let names: std::collections::BTreeSet<&String> = dbs.iter().collect();
            match scan_db(&body) {
                Ok(db) => {
                    prop_assert_eq!(&db, &decoded);
                    prop_assert_eq!(names.len(), 1);
                }
                Err(error) => {
                    prop_assert_eq!(error, ScanError::TwoDatabases);
                    prop_assert!(names.len() > 1);
                }
            }
        }

        #[test]
        fn finds_db_in_any_valid_message(db in "[a-zA-Z0-9_-]{1,128}", tx in proptest::collection::vec(any::<u8>(), 0..512), v in any::<u32>(), basis in proptest::option::of(any::<u64>()), f in any::<u64>()) {
            let message = Transact { db: db.clone(), protocol_version: v, tx_data: tx, expected_basis_t: basis, unknown_fixed: f, unknown_fixed32: 3 };
            prop_assert_eq!(scan_db(first_message(&frame(&message.encode_to_vec())).unwrap()), Ok(db));
        }

        #[test]
        fn never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = first_message(&bytes).and_then(scan_db);
        }
    }
}
