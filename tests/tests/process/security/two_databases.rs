//! A request that names two databases where protobuf keeps one: the ingress
//! would route (and authorize, count, rate) by one and the node answer for
//! the other. Refused `INVALID_ARGUMENT` at the ingress, before any hop.

use corium_fleet_tests::Fleet;
use corium_fleet_tests::corium::{self, frame, raw_call};
use corium_protocol::codec;
use corium_protocol::pb;
use corium_query::edn::{Edn, read_one};
use prost::Message as _;
use tonic::Code;

/// Field 1, length-delimited, holding `value`.
fn field_one(value: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0x0a, u8::try_from(value.len()).unwrap()];
    bytes.extend_from_slice(value);
    bytes
}

/// A `DbViewSpec` of `db`, encoded.
fn view(db: &str) -> Vec<u8> {
    pb::DbViewSpec {
        db: db.to_owned(),
        view: None,
    }
    .encode_to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_naming_two_databases_is_refused_at_the_ingress() {
    let (_fleet, address) = Fleet::filesystem_with_ingress(2, &[]).await;
    for db in ["routed", "answered"] {
        assert!(corium::create(&address, db).await.unwrap());
        corium::transact(&address, db, "item", &[]).await.unwrap();
    }

    // The negative control: one view, one database, answered.
    let one_view = field_one(&view("routed"));
    let status = raw_call(&address, "/corium.v1.PeerServer/DbStats", &[], frame(&one_view)).await;
    assert_eq!(status.code(), Code::Ok, "{status:?}");

    // A `Pull` whose view occurs twice: protobuf merges the two, so a node
    // would answer for "answered" a call routed by "routed".
    let pull_rest = pb::PullRequest {
        db: None,
        pattern: codec::encode_edn(&read_one("[*]").unwrap()),
        eid: codec::encode_edn(&Edn::Long(0)),
    }
    .encode_to_vec();
    let doubled_pull = [
        field_one(&view("routed")),
        field_one(&view("answered")),
        pull_rest,
    ]
    .concat();
    assert_eq!(
        pb::PullRequest::decode(doubled_pull.as_slice())
            .unwrap()
            .db
            .unwrap()
            .db,
        "answered"
    );
    // A view repeating its own `db`; a second view in `DbStats`; a singular
    // `db` string sent twice.
    let repeated_db = field_one(&[view("routed"), view("answered")].concat());
    let two_views = [field_one(&view("routed")), field_one(&view("answered"))].concat();
    let doubled_sync = [
        pb::SyncRequest {
            db: "routed".to_owned(),
            ..pb::SyncRequest::default()
        }
        .encode_to_vec(),
        field_one(b"answered"),
    ]
    .concat();
    for (path, message) in [
        ("/corium.v1.PeerServer/Pull", &doubled_pull),
        (
            "/corium.v1.PeerServer/Pull",
            &[repeated_db.clone(), pb::PullRequest::default().encode_to_vec()].concat(),
        ),
        ("/corium.v1.PeerServer/DbStats", &two_views),
        ("/corium.v1.PeerServer/DbStats", &repeated_db),
        ("/corium.v1.Transactor/Sync", &doubled_sync),
    ] {
        let status = raw_call(&address, path, &[], frame(message)).await;
        assert_eq!(status.code(), Code::InvalidArgument, "{path}: {status:?}");
        assert!(
            status.message().contains("names two databases"),
            "{path}: {status:?}"
        );
    }
}
