//! Deadlines reach the owner (issue 51): the ingress forwards a call's
//! deadline as `grpc-timeout`, less the time the call spent before the hop
//! (and capped at `--max-deadline-ms`), and the owner honours it — a call
//! whose deadline passes while it waits at the owner is refused, never
//! committed.

use std::time::{Duration, Instant};

use corium_fleet_tests::scripted::ScriptedHop;
use corium_fleet_tests::{Backend, Fleet, corium};
use corium_protocol::pb::transactor_client::TransactorClient;

/// What the ingress's margin and `grpc-timeout`'s millisecond rounding may
/// take off besides the time a call spent.
const MARGIN_MS: u64 = 100;

/// A scripted hop between the ingress and the one node records the
/// `grpc-timeout` the node receives: the caller's 5 s less what the call
/// spent, and for a call without a deadline the ingress's cap less it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_receives_the_callers_deadline_less_the_time_spent() {
    let (mut fleet, hop) = ScriptedHop::in_front_of_one_node().await;
    fleet.start_ingresses(1, &["--max-deadline-ms", "20000"]).await;
    let ingress = fleet.ingresses[0].endpoint();
    assert!(corium::create(&ingress, "timed").await.unwrap());
    let _ = hop.take_received();
    let timed = async |request: tonic::Request<corium_protocol::pb::TransactRequest>| {
        let sent = Instant::now();
        TransactorClient::new(corium::channel(&ingress).await)
            .transact(request)
            .await
            .unwrap();
        u64::try_from(sent.elapsed().as_millis()).unwrap_or(u64::MAX)
    };
    let took = timed(corium::transact_call(
        "timed",
        "within-5s",
        Duration::from_secs(5),
    ))
    .await;
    let took_capped = timed(tonic::Request::new(corium::transact_request(
        "timed",
        "no-deadline",
    )))
    .await;
    let received: Vec<Option<u64>> = hop
        .take_received()
        .iter()
        .map(|received| received.grpc_timeout_ms)
        .collect();
    let [Some(within), Some(capped)] = received[..] else {
        panic!("one attempt each, with a grpc-timeout: {received:?}");
    };
    // Less than the caller gave, by no more than the whole call took (a
    // bound that holds however loaded the machine is) and the ingress's
    // margin (a twentieth, at most 50 ms) with rounding.
    assert!(
        within < 5_000 && within + took + MARGIN_MS >= 5_000,
        "the owner got {within} ms of the caller's 5,000 (the call took {took} ms)"
    );
    assert!(
        capped <= 20_000 && capped + took_capped + MARGIN_MS >= 20_000,
        "without a deadline the owner gets the ingress's cap less the time spent: {capped} ms (the call took {took_capped} ms)"
    );
}

/// On `PostgreSQL` with every log append held 4 s (the fault seam) and one
/// call at a time on the node: a write with 30 s holds the node's place
/// (seen in its `corium_fleet_calls_running`, not guessed from a sleep); a
/// second with 300 ms waits for a place at the owner (which would wait up
/// to 10 s for it), its deadline passes there, and it is refused — and never
/// committed, neither then nor after the first write's commit frees the
/// place. (Negative control: were neither the deadline nor the caller's
/// cancellation to reach the owner, the second write would get the place
/// after the first and commit.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_deadline_passes_at_the_owner_is_not_committed() {
    let backend = Backend::all()
        .into_iter()
        .find(|backend| matches!(backend, Backend::Postgres { .. }))
        .expect("PostgreSQL");
    let (fleet, address) = Fleet::builder(backend)
        .nodes(1)
        // A queue wait far past the call's deadline: only the deadline (or
        // the caller's cancellation reaching the owner) can end the wait.
        .node_flags(&["--max-inflight-calls", "1", "--max-queue-wait-ms", "10000"])
        .env(&[(
            "CORIUM_FLEET_FAULT_SCHEDULE",
            "@0ms delay 4000ms for 600000ms op=append",
        )])
        .start_with_ingress()
        .await;
    let db = "patient";
    assert!(corium::create(&address, db).await.unwrap());
    let slow = {
        let address = address.clone();
        tokio::spawn(async move {
            let mut client = TransactorClient::new(corium::channel(&address).await);
            client
                .transact(corium::transact_call(
                    db,
                    "holds-the-place",
                    Duration::from_secs(30),
                ))
                .await
        })
    };
    fleet
        .await_node_metric(
            0,
            "corium_fleet_calls_running 1",
            Duration::from_secs(10),
            "the first write holds the node's one place",
        )
        .await;
    let mut client = TransactorClient::new(corium::channel(&address).await);
    let late = client
        .transact(corium::transact_call(db, "too-late", Duration::from_millis(300)))
        .await;
    assert!(late.is_err(), "a write past its deadline answered: {late:?}");
    eprintln!("the late write: {late:?}");
    slow.await
        .unwrap()
        .unwrap_or_else(|status| panic!("the first write: {status:?}\n{}", fleet.logs()));
    // Long enough for a commit the refusal left running to land (one held
    // append).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let names: Vec<String> = corium::log(&address, db)
        .await
        .unwrap()
        .into_iter()
        .flat_map(|(_, names)| names)
        .collect();
    assert!(names.contains(&"holds-the-place".to_owned()), "{names:?}");
    assert!(
        !names.contains(&"too-late".to_owned()),
        "committed past its deadline: {late:?}; log {names:?}"
    );
}
