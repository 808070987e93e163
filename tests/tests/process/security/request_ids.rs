//! Request ids as a hostile client sees them (issue 35, findings 2–4): the
//! ids the ingress assigns cannot be predicted, so nobody fences or claims
//! the next stock client's id ahead of it; an id belongs to the principal
//! that sent it, so another principal's `Requests.Status` learns nothing of
//! it and fences nothing, and its `Transact` under it is refused without
//! its state; and `Requests.Status`, a write when it fences, is shed like
//! one.

use std::time::Duration;

use corium_fleet_proto::fleet::RequestStatusRequest;
use corium_fleet_proto::fleet::request_status_response::State;
use corium_fleet_tests::corium::{self, channel};
use corium_fleet_tests::{Backend, Fleet, eventually, http_get, metric};
use corium_fleet_wire::metadata;
use corium_protocol::auth::DEFAULT_DEV_TOKEN;
use corium_protocol::pb;
use corium_protocol::pb::transactor_client::TransactorClient;
use tonic::Code;

use super::{TTL, clients, code};

/// Waits until every node writes owned request records (each node lists
/// the feature; the gate turns on at the next registry read).
async fn owned_records_on(fleet: &Fleet) {
    for node in &fleet.nodes {
        eventually(
            Duration::from_secs(30),
            format_args!("{}: owned request ids on", node.id),
            async || {
                let (_, text) = http_get(node.admin, "/metrics").await.ok_or("no metrics")?;
                match metric(
                    &text,
                    "corium_fleet_feature_enabled{feature=\"owned-request-ids\"}",
                ) {
                    Some(value) if value >= 1.0 => Ok(()),
                    _ => Err("off"),
                }
            },
        )
        .await;
    }
}

/// `Transact` of item `name` into `db` under request id `id`, as `token`'s
/// principal (anonymous without one).
async fn transact_as(
    address: &str,
    token: Option<&str>,
    db: &str,
    name: &str,
    id: &str,
) -> Result<tonic::Response<pb::TransactResponse>, tonic::Status> {
    let mut request = tonic::Request::new(corium::transact_request(db, name));
    request
        .metadata_mut()
        .insert(metadata::REQUEST_ID, id.parse().unwrap());
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    TransactorClient::new(channel(address).await)
        .transact(request)
        .await
}

/// `Requests.Status` of `id` on `db` as `token`'s principal.
async fn status_as(
    address: &str,
    token: Option<&str>,
    db: &str,
    id: &str,
) -> Result<corium_fleet_proto::fleet::RequestStatusResponse, tonic::Status> {
    clients(address, token)
        .await
        .requests
        .status(RequestStatusRequest {
            database: db.to_owned(),
            request_id: id.to_owned(),
        })
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)] // One scenario: the owner's write, the stranger's scan, the owner again.
async fn another_principals_request_id_reveals_nothing_and_fences_nothing() {
    let db = "ledger";
    let (fleet, address) = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .start_with_database(db)
        .await;
    owned_records_on(&fleet).await;
    // The token holder writes a secret under its own id.
    let holder = Some(DEFAULT_DEV_TOKEN);
    let id = uuid::Uuid::new_v4().to_string();
    let written = transact_as(&address, holder, db, "secret-marker", &id)
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", fleet.logs()))
        .into_inner();

    // An anonymous caller scans it and eleven other ids: every answer is
    // "not committed" and none carries a transaction.
    let mut scanned = vec![id.clone()];
    scanned.extend((0..11).map(|_| uuid::Uuid::new_v4().to_string()));
    for scan in &scanned {
        let answer = status_as(&address, None, db, scan)
            .await
            .unwrap_or_else(|status| panic!("{status:?}\n{}", fleet.logs()));
        assert_eq!(answer.state(), State::NotCommitted, "{scan}: {answer:?}");
        assert!(answer.transact_response.is_empty(), "{scan}: {answer:?}");
    }
    // Its transaction under the holder's id is refused, without the id's
    // state (no t, not whether it committed or was fenced).
    let refused = transact_as(&address, None, db, "stolen", &id).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("another caller"), "{refused:?}");
    for leak in ["t=", "fenced", "committed at"] {
        assert!(!refused.message().contains(leak), "{leak}: {refused:?}");
    }

    // Nothing the stranger did touched the holder's id: its resend is
    // answered with the first answer, and its status query finds it.
    let resent = transact_as(&address, holder, db, "secret-marker", &id)
        .await
        .unwrap();
    assert_eq!(
        resent
            .metadata()
            .get(metadata::REPLAYED)
            .map(tonic::metadata::MetadataValue::as_bytes),
        Some(&b"1"[..])
    );
    assert_eq!(resent.into_inner().basis_t, written.basis_t);
    let answer = status_as(&address, holder, db, &id).await.unwrap();
    assert_eq!(answer.state(), State::Committed, "{answer:?}");
    assert_eq!(answer.basis_t, written.basis_t);

    // An operator (the development token is one in this development
    // fleet) may ask about anyone's id.
    let anonymous_id = uuid::Uuid::new_v4().to_string();
    let anonymous_write = transact_as(&address, None, db, "anonymous", &anonymous_id)
        .await
        .unwrap()
        .into_inner();
    let answer = status_as(&address, holder, db, &anonymous_id).await.unwrap();
    assert_eq!(answer.state(), State::Committed, "{answer:?}");
    assert_eq!(answer.basis_t, anonymous_write.basis_t);
    // The log holds each write once, and no write of the stranger's.
    let log = corium::log(&address, db).await.unwrap();
    let names: Vec<String> = log.into_iter().flat_map(|(_, names)| names).collect();
    assert_eq!(
        names.iter().filter(|name| *name == "secret-marker").count(),
        1,
        "{names:?}"
    );
    assert!(!names.iter().any(|name| name == "stolen"), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_assigned_request_ids_cannot_be_fenced_or_claimed_ahead() {
    let db = "orders";
    let (fleet, address) = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .start_with_database(db)
        .await;
    // The attacker's own write tells it the id the ingress assigned.
    let mut client = TransactorClient::new(channel(&address).await);
    let seen = client
        .transact(corium::transact_request(db, "attacker"))
        .await
        .unwrap();
    let seen = seen
        .metadata()
        .get(metadata::REQUEST_ID)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| uuid::Uuid::parse_str(text).ok())
        .expect("the assigned id comes back");
    // The ids after it, as a counter would give them: half fenced with
    // status queries, half claimed with writes of the attacker's own.
    for (n, next) in (1..=40u128)
        .map(|step| uuid::Uuid::from_u128(seen.as_u128().wrapping_add(step)))
        .enumerate()
    {
        let next = next.hyphenated().to_string();
        if n % 2 == 0 {
            let _ = status_as(&address, None, db, &next).await;
        } else {
            let _ = transact_as(&address, None, db, &format!("claim-{n}"), &next).await;
        }
    }
    // A stock client's writes after it all commit.
    for n in 0..40 {
        corium::transact(&address, db, &format!("victim-{n}"), &[])
            .await
            .unwrap_or_else(|status| panic!("victim write {n}: {status:?}\n{}", fleet.logs()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_status_queries_is_shed_like_writes() {
    let db = "flooded";
    let (_fleet, address) = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .nodes(1)
        .node_flags(&[
            "--max-inflight-calls",
            "4",
            "--max-queued-calls",
            "4",
            "--max-queue-wait-ms",
            "50",
        ])
        .start_with_database(db)
        .await;
    let requests = clients(&address, None).await.requests;
    let flood: Vec<_> = (0..300)
        .map(|_| {
            let mut requests = requests.clone();
            let db = db.to_owned();
            tokio::spawn(async move {
                code(
                    requests
                        .status(RequestStatusRequest {
                            database: db,
                            request_id: uuid::Uuid::new_v4().to_string(),
                        })
                        .await,
                )
            })
        })
        .collect();
    let mut codes = Vec::new();
    for query in flood {
        codes.push(query.await.unwrap());
    }
    let shed = codes
        .iter()
        .filter(|code| **code == Code::ResourceExhausted)
        .count();
    let answered = codes.iter().filter(|code| **code == Code::Ok).count();
    assert!(shed > 0, "300 status queries at once, none shed: {codes:?}");
    assert!(answered > 0, "some are answered: {codes:?}");
    assert_eq!(shed + answered, codes.len(), "{codes:?}");
}
