//! The ingress holds calls while their database's ownership moves (issue
//! 17, part 6): a call without a request id — here a stock `Sync`, which
//! the ingress cannot resend on an ambiguous failure — made right after its
//! owner was killed (SIGKILL) meets a refused connection twice (the dead owner's
//! lease is still live). With the failover buffer it is held and answered
//! by the successor once the lease lapses; with the buffer off, the client
//! gets `UNAVAILABLE` at once, as before. Either way nothing is sent to a
//! node twice that a node could have acted on. A read already at the owner
//! when it dies (its hop breaks) is sent again: it changed nothing.

use std::time::{Duration, Instant};

use corium_fleet_tests::corium::{self, channel};
use corium_fleet_tests::{Backend, Fleet, http_get, metric};
use corium_protocol::pb;
use corium_protocol::pb::transactor_client::TransactorClient;

const TTL: Duration = Duration::from_millis(1500);

/// `Sync` of a database right after its owner was killed, through an
/// ingress started with `flags`; the answer, how long it took, and the
/// ingress's count of held calls.
async fn sync_across_a_crash(flags: &[&str]) -> (Result<u64, tonic::Status>, Duration, f64) {
    let mut fleet = Fleet::builder(Backend::Filesystem).lease_ttl(TTL).start().await;
    fleet.start_ingresses(1, flags).await;
    let address = fleet.ingresses[0].endpoint();
    assert!(corium::create(&address, "held").await.unwrap());
    corium::transact(&address, "held", "before", &[])
        .await
        .expect("a write before the crash");
    let owner = fleet.index(&corium::placement(&address, "held").await.owner_id);
    let mut client = TransactorClient::new(channel(&address).await);
    fleet.nodes[owner].kill();
    // Let the ingress see its connection to the dead node close, so the
    // call meets refused connections (provably unsent), not a broken one.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let mut request = tonic::Request::new(pb::SyncRequest {
        db: "held".into(),
        t: 0,
    });
    request.set_timeout(Duration::from_secs(20));
    let answer = client
        .sync(request)
        .await
        .map(|response| response.into_inner().basis_t);
    // A read never ends in a typed unknown outcome: should it still go out
    // on the connection to the dead node, its broken hop is sent again (see
    // the last test).
    if let Err(status) = &answer {
        assert!(
            corium_fleet_wire::outcome::from_status(status).is_none(),
            "a read ended in an unknown outcome: {status:?}"
        );
    }
    let took = started.elapsed();
    let (_, text) = http_get(fleet.ingresses[0].admin, "/metrics")
        .await
        .expect("metrics");
    let held = metric(&text, "corium_fleet_ingress_failover_held_total").expect("the held-calls counter");
    (answer, took, held)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_made_during_a_takeover_is_held_and_answered_by_the_successor() {
    let (answer, took, held) = sync_across_a_crash(&[]).await;
    let basis = answer.unwrap_or_else(|status| panic!("held, not refused: {status:?}"));
    assert!(
        basis >= 1,
        "the successor's basis holds the write before the crash: {basis}"
    );
    assert!(held >= 1.0, "the ingress held it ({held})");
    eprintln!("answered after {took:?}, held {held}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_buffer_off_the_same_call_is_refused_at_once() {
    let (answer, took, held) = sync_across_a_crash(&["--failover-buffer-per-database", "0"]).await;
    let status = answer.expect_err("refused: nothing holds it");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(held.abs() < f64::EPSILON, "nothing held");
    eprintln!("refused after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_at_the_owner_when_it_dies_is_sent_again_and_answered_by_the_successor() {
    let (mut fleet, address) = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .start_with_database("inflight")
        .await;
    let before = corium::transact(&address, "inflight", "before", &[])
        .await
        .expect("a write before the crash")
        .basis_t;
    let owner = fleet.index(&corium::placement(&address, "inflight").await.owner_id);
    // A stock Sync waiting at the owner for the next transaction.
    let mut client = TransactorClient::new(channel(&address).await);
    let waiting = tokio::spawn(async move {
        let mut request = tonic::Request::new(pb::SyncRequest {
            db: "inflight".into(),
            t: before + 1,
        });
        request.set_timeout(Duration::from_secs(30));
        client
            .sync(request)
            .await
            .map(|response| response.into_inner().basis_t)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "the Sync waits for a transaction");
    fleet.nodes[owner].kill();
    // The next transaction, committed by the successor once the dead
    // owner's lease lapsed (the write carries an ingress-assigned id, so it
    // is sent until then).
    let after = corium::transact(&address, "inflight", "after", &[])
        .await
        .expect("a write after the crash")
        .basis_t;
    assert!(after > before);
    let basis = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the Sync is answered in time")
        .expect("the task ran")
        .unwrap_or_else(|status| panic!("sent again and answered, not ended: {status:?}"));
    assert!(
        basis > before,
        "answered by the successor at the write it waited for: {basis} (before {before})"
    );
}
