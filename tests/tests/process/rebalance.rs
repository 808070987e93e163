//! Client connections spread over ingresses added later: with
//! `--max-connection-age-ms`, an ingress closes old connections (GOAWAY,
//! calls in flight finish), the client reconnects, and an L4 balancer in
//! front (round robin, no affinity: what a Kubernetes Service does) sends the
//! new connection to whichever ingress it picks, the new one included. A
//! raw client's writes all succeed throughout, and so do a stock Corium
//! client's, whose subscription is open whenever its connection ages (the
//! ingress ends it first and the client resumes it on a new connection,
//! note 0026).

use std::time::{Duration, Instant};

use corium_fleet_tests::balancer::Balancer;
use corium_fleet_tests::corium::{self, channel};
use corium_fleet_tests::stock_load::StockWriter;
use corium_fleet_tests::{Backend, Fleet, http_get, metric};
use corium_protocol::pb::transactor_client::TransactorClient;

async fn transacts_ok(admin: u16) -> f64 {
    let (_, text) = http_get(admin, "/metrics").await.expect("metrics");
    metric(
        &text,
        "corium_fleet_ingress_requests_total{method=\"/corium.v1.Transactor/Transact\",kind=\"unary\",code=\"OK\"}",
    )
    .unwrap_or(0.0)
}

/// One node and one ingress started with `ingress_flags` behind a
/// round-robin balancer, and `db` created through it: the fleet, the
/// balancer and its address.
async fn behind_a_balancer(ingress_flags: &[&str], db: &str) -> (Fleet, Balancer, String) {
    let mut fleet = Fleet::builder(Backend::Filesystem)
        .lease_ttl(Duration::from_millis(1500))
        .nodes(1)
        .start()
        .await;
    fleet.start_ingresses(1, ingress_flags).await;
    let balancer = Balancer::start(vec![fleet.ingresses[0].grpc]).await;
    let address = balancer.endpoint();
    assert!(corium::create(&address, db).await.unwrap(), "create {db}");
    (fleet, balancer, address)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_lived_client_reaches_an_ingress_added_later_once_connections_age() {
    let age = ["--max-connection-age-ms", "1500"];
    let (mut fleet, balancer, address) = behind_a_balancer(&age, "spread").await;
    // One client, one channel, for the whole test (as a long-lived service).
    let mut client = TransactorClient::new(channel(&address).await);
    let mut written = 0;
    let mut write = async |client: &mut TransactorClient<tonic::transport::Channel>, until: Instant| {
        while Instant::now() < until {
            client
                .transact(corium::transact_request("spread", &format!("w-{written}")))
                .await
                .unwrap_or_else(|status| {
                    panic!("write {written} failed across a connection rotation: {status:?}")
                });
            written += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    write(&mut client, Instant::now() + Duration::from_secs(1)).await;
    // A second ingress joins (the HPA scaled out); the balancer sends it
    // half of the new connections.
    fleet.start_ingresses(1, &age).await;
    balancer.add(fleet.ingresses[1].grpc);
    let before = transacts_ok(fleet.ingresses[1].admin).await;
    assert!(before.abs() < f64::EPSILON, "nothing reached it yet");
    // Within a few connection ages, the client's connection lands on it.
    corium_fleet_tests::eventually(
        Duration::from_secs(20),
        "the new ingress receives a write",
        async || {
            write(&mut client, Instant::now() + Duration::from_millis(500)).await;
            let received = transacts_ok(fleet.ingresses[1].admin).await;
            if received > 0.0 {
                Ok(())
            } else {
                Err("nothing yet")
            }
        },
    )
    .await;
    let (_, first) = http_get(fleet.ingresses[0].admin, "/metrics").await.unwrap();
    assert!(
        metric(&first, "corium_fleet_ingress_connections_closed_aged_total")
            .is_some_and(|count| count >= 1.0),
        "{first}"
    );
    // Every acknowledged write is in the log, once.
    let log = corium::log(&address, "spread").await.unwrap();
    assert_eq!(
        corium::count_names_with_prefix(&log, "w-"),
        written,
        "every write once"
    );
    eprintln!("{written} writes over one client channel, none failed, the new ingress served some");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stock_client_writes_across_connection_rotations_with_no_error() {
    let (_fleet, balancer, address) =
        behind_a_balancer(&["--max-connection-age-ms", "1000"], "rotated").await;
    let before = balancer.connections();
    let writer = StockWriter::start(&address, "rotated");
    // Each rotation brings the client back through the balancer on a new
    // connection: three of them past its first.
    corium_fleet_tests::eventually(
        Duration::from_secs(30),
        "the stock client's connection rotates three times",
        async || {
            let connections = balancer.connections() - before;
            if connections >= 4 {
                Ok(())
            } else {
                Err(format!("{connections} connections so far"))
            }
        },
    )
    .await;
    let written = writer.acked();
    writer
        .acked_at_least(
            written + 10,
            Duration::from_secs(30),
            "writes after the rotations",
        )
        .await;
    let seen = writer.stop().await;
    assert!(
        seen.errors.is_empty(),
        "a stock client's writes failed across connection rotations: {:?}",
        seen.errors
    );
    let log = corium::log(&address, "rotated").await.unwrap();
    seen.check(&log).unwrap_or_else(|error| panic!("{error}"));
    eprintln!(
        "{} stock writes over {} connections, none failed",
        seen.acked.len(),
        balancer.connections() - before
    );
}
