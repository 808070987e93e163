//! A node's typed `NotOwner` names internal endpoints and zones, for the
//! ingress to follow. When the ingress stops retrying and passes one on, the
//! client must get the database, the holder's node id and lease version and
//! the candidates' node ids and ranks — never where nodes listen or which
//! zone they are in — and still a status stock clients fail over on.

use corium_fleet_tests::corium;
use corium_fleet_tests::scripted::{ScriptedHop, Step};
use corium_fleet_wire::not_owner::{self, Candidate, NotOwner};
use corium_protocol::pb::transactor_client::TransactorClient;

const DB: &str = "disclosed";
/// An internal address a node would name (a cluster DNS name).
const INTERNAL: &str = "https://node-8.corium-fleet.internal.svc:7443";

/// What a node answers while its database's lease moves: the holder (as
/// storage names it: `owner`) and the candidates, with where each listens
/// and its zone.
fn moving(owner: &corium_fleet_proto::fleet::DatabaseView) -> tonic::Status {
    not_owner::to_status(&NotOwner {
        database: DB.into(),
        owner_id: owner.owner_id.clone(),
        lease_version: owner.lease_version,
        retryable: true,
        route_endpoint: owner.owner_endpoint.clone(),
        candidates: vec![
            Candidate {
                node_id: owner.owner_id.clone(),
                zone: "zone-secret-a".into(),
                endpoint: owner.owner_endpoint.clone(),
                rank: 0,
                lacks_storage_key: false,
            },
            Candidate {
                node_id: "node-8".into(),
                zone: "zone-secret-b".into(),
                endpoint: INTERNAL.into(),
                rank: 1,
                lacks_storage_key: false,
            },
        ],
        last_basis_t: 5,
    })
}

/// A `Transact` without a request id that meets a second `NotOwner` with no
/// place in the failover buffer (`--failover-buffer-per-database 0`) ends
/// in that `NotOwner`, as stock clients expect (they fail over themselves):
/// the one the node sent, less its endpoints and zones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_not_owner_passed_on_to_a_client_names_no_endpoint_and_no_zone() {
    let (mut fleet, hop) = ScriptedHop::in_front_of_one_node().await;
    fleet
        .start_ingresses(
            1,
            &[
                "--assign-request-ids",
                "false",
                "--failover-buffer-per-database",
                "0",
            ],
        )
        .await;
    let address = fleet.ingresses[0].endpoint();
    assert!(corium::create(&address, DB).await.unwrap());
    corium::transact(&address, DB, "first", &[]).await.unwrap();
    let owner = corium::placement(&address, DB).await;
    assert!(
        owner.lease_version > 0 && !owner.owner_endpoint.is_empty(),
        "{owner:?}"
    );
    let port = format!(":{}", owner.owner_endpoint.rsplit(':').next().unwrap());
    let mut client = TransactorClient::new(corium::channel(&address).await);

    let _ = hop.take_received();
    hop.script([Step::Refuse(moving(&owner)), Step::Refuse(moving(&owner))]);
    let status = client
        .transact(corium::transact_request(DB, "moving"))
        .await
        .expect_err("the NotOwner is passed on");
    assert_eq!(hop.take_received().len(), 2, "sent twice, then given up");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
    assert!(status.message().contains("standby"), "{status:?}");
    let detail = not_owner::from_status(&status).expect("still a typed NotOwner");
    assert_eq!(detail.database, DB);
    assert_eq!(detail.owner_id, owner.owner_id);
    assert_eq!(detail.lease_version, owner.lease_version);
    assert!(detail.retryable);
    assert_eq!(detail.last_basis_t, 5);
    let ranked: Vec<(&str, u32)> = detail
        .candidates
        .iter()
        .map(|candidate| (candidate.node_id.as_str(), candidate.rank))
        .collect();
    assert_eq!(ranked, [(owner.owner_id.as_str(), 0), ("node-8", 1)]);
    assert!(detail.route_endpoint.is_empty(), "{detail:?}");
    assert!(
        detail
            .candidates
            .iter()
            .all(|candidate| candidate.endpoint.is_empty() && candidate.zone.is_empty()),
        "{detail:?}"
    );
    // Nowhere in what the client received: message, detail, metadata.
    let seen = format!(
        "{} {:?} {:?} {}",
        status.message(),
        status.metadata(),
        detail,
        String::from_utf8_lossy(status.details())
    );
    for secret in [
        "corium-fleet.internal",
        "7443",
        "zone-secret",
        "127.0.0.1",
        port.as_str(),
    ] {
        assert!(!seen.contains(secret), "{secret} reached the client: {seen}");
    }

    // The negative control: with a place in the buffer the call is held and
    // answered, so the pass-through above is the path that gives up.
    hop.script([Step::Refuse(moving(&owner))]);
    client
        .transact(corium::transact_request(DB, "answered"))
        .await
        .expect("one NotOwner, then the node");
}
