//! Streams: subscription limits, and subscribers that never read — they
//! neither stall other calls on the shared hop nor hold their places for
//! ever.

use std::time::Duration;

use corium_fleet_tests::corium::{self, channel};
use corium_fleet_tests::{Backend, Fleet, http_get};
use corium_protocol::pb::transactor_client::TransactorClient;
use tonic::Code;

use super::TTL;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_beyond_the_limits_are_refused_and_places_come_back() {
    let (fleet, address) = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .node_flags(&["--max-subscriptions-per-database", "2"])
        .start_with_ingress()
        .await;
    let (db, other) = ("watched", "other");
    assert!(corium::create(&address, db).await.unwrap());
    assert!(corium::create(&address, other).await.unwrap());
    let subscribe = async |db: &str| {
        TransactorClient::new(channel(&address).await)
            .subscribe(corium_fleet_tests::corium::subscribe_request(db, 0))
            .await
    };
    let first = subscribe(db).await.unwrap();
    let second = subscribe(db).await.unwrap();
    let refused = subscribe(db).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    // Another database is not affected by this one's subscribers.
    let _elsewhere = subscribe(other).await.unwrap();
    let owner = &fleet.nodes[fleet.candidates(db)[0]];
    let (_, metrics) = http_get(owner.admin, "/metrics").await.unwrap();
    assert_eq!(
        corium_fleet_tests::metric(&metrics, "corium_fleet_subscriptions_refused_total"),
        Some(1.0),
        "{metrics}"
    );
    // A place comes back when a subscriber leaves.
    drop(first);
    corium_fleet_tests::eventually(Duration::from_secs(10), "a place comes back", async || {
        subscribe(db).await.map(drop)
    })
    .await;
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_that_never_read_do_not_stall_other_calls_to_their_node() {
    let mut fleet = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .nodes(1)
        .start()
        .await;
    // Streams whose client takes nothing for 6 s are ended.
    fleet
        .start_ingresses(1, &["--stream-stall-timeout-ms", "6000"])
        .await;
    let address = fleet.ingresses[0].endpoint();
    let (bulk, calm) = ("bulk", "calm");
    assert!(corium::create(&address, bulk).await.unwrap());
    assert!(corium::create(&address, calm).await.unwrap());
    // A backlog of ~6 MiB, more than a client's and the hop's windows hold
    // for one stream together.
    let filler = "x".repeat(32 * 1024);
    for i in 0..200 {
        corium::transact(&address, bulk, &format!("{i}-{filler}"), &[])
            .await
            .unwrap();
    }
    // Six subscribers from the start that never read, each on its own
    // client connection (so only the ingress's hop to the node is shared).
    let mut stalled = Vec::new();
    for _ in 0..6 {
        let stream = TransactorClient::new(channel(&address).await)
            .subscribe(corium_fleet_tests::corium::subscribe_request(bulk, 0))
            .await
            .unwrap();
        stalled.push(stream);
    }
    // Let the backlogs flow until every window on the way is full.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Writes to another database on the same node still go through.
    for i in 0..10 {
        let started = std::time::Instant::now();
        tokio::time::timeout(
            Duration::from_secs(5),
            corium::transact(&address, calm, &format!("calm-{i}"), &[]),
        )
        .await
        .unwrap_or_else(|_| panic!("write {i} to {calm:?} stalled behind subscribers that never read"))
        .unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    // The stalled streams do not hold their places for ever: the ingress
    // ends them, and the node's subscriptions go with them.
    let node = &fleet.nodes[0];
    let ingress = &fleet.ingresses[0];
    corium_fleet_tests::eventually(Duration::from_secs(30), "stalled streams ended", async || {
        let (_, node_metrics) = http_get(node.admin, "/metrics")
            .await
            .ok_or_else(|| "no node metrics".to_owned())?;
        let (_, ingress_metrics) = http_get(ingress.admin, "/metrics")
            .await
            .ok_or_else(|| "no ingress metrics".to_owned())?;
        let open = corium_fleet_tests::metric(&node_metrics, "corium_fleet_subscriptions");
        let ended =
            corium_fleet_tests::metric(&ingress_metrics, "corium_fleet_ingress_streams_stalled_total");
        if open == Some(0.0) && ended == Some(6.0) {
            Ok(())
        } else {
            Err(format!("node subscriptions {open:?}, streams ended {ended:?}"))
        }
    })
    .await;
    // A stalled client that reads again gets what was queued, then the
    // status that says why its stream ended (a subscription resumes).
    let mut stream = stalled.pop().unwrap().into_inner();
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match stream.message().await {
                Ok(Some(_)) => {}
                Ok(None) => return None,
                Err(status) => return Some(status),
            }
        }
    })
    .await
    .expect("the ended stream finishes");
    let status = ended.expect("a status, not a silent end");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("took no message"), "{status:?}");
    drop(stalled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_are_capped_per_principal_with_a_hint() {
    let (_fleet, address) = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .nodes(1)
        .node_flags(&["--max-subscriptions-per-principal", "2"])
        .start_with_database("watched")
        .await;
    let request = || corium_fleet_tests::corium::subscribe_request("watched", 0);
    // Two anonymous subscriptions take the anonymous principal's places.
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(
            TransactorClient::new(channel(&address).await)
                .subscribe(request())
                .await
                .unwrap(),
        );
    }
    let refused = TransactorClient::new(channel(&address).await)
        .subscribe(request())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        corium_fleet_wire::overload::retry_after(&refused).is_some(),
        "{refused:?}"
    );
    assert_eq!(
        corium_fleet_wire::overload::scope(refused.metadata()),
        Some(corium_fleet_wire::overload::Scope::Streams),
        "not a node-wide overload: the ingress must not back off from the node"
    );
    // Another principal (the development token) has places of its own.
    let mut other = TransactorClient::with_interceptor(channel(&address).await, corium::with_dev_token);
    let _theirs = other.subscribe(request()).await.unwrap();
    // A place comes back when a subscriber leaves.
    drop(held.pop());
    corium_fleet_tests::eventually(Duration::from_secs(10), "a place came back", async || {
        TransactorClient::new(channel(&address).await)
            .subscribe(request())
            .await
            .map(drop)
    })
    .await;
}
