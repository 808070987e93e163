//! Database names are checked by Corium's rule on every request type, at
//! the ingress and at the node, before anything touches storage; junk names
//! leave nothing behind in a node's memory.

use corium_fleet_proto::fleet::requests_client::RequestsClient;
use corium_fleet_proto::fleet::{DatabasePlacementRequest, HandoffRequest, RequestStatusRequest};
use corium_fleet_tests::corium::{self, channel};
use corium_fleet_tests::{Backend, Fleet, http_get};
use corium_protocol::pb;
use corium_protocol::pb::transactor_client::TransactorClient;
use tonic::Code;

use super::TTL;

/// Every request type that names a database, answered for `db` at
/// `endpoint`: `(request type, code)`.
async fn every_type(endpoint: &str, db: &str) -> Vec<(&'static str, Code)> {
    let code = |result: Result<(), tonic::Status>| result.err().map_or(Code::Ok, |status| status.code());
    let mut transactor = TransactorClient::new(channel(endpoint).await);
    let mut admin = corium::admin(endpoint).await;
    vec![
        (
            "transact",
            code(
                transactor
                    .transact(corium::transact_request(db, "x"))
                    .await
                    .map(drop),
            ),
        ),
        (
            "subscribe",
            code(
                transactor
                    .subscribe(corium_fleet_tests::corium::subscribe_request(db, 0))
                    .await
                    .map(drop),
            ),
        ),
        (
            "sync",
            code(
                transactor
                    .sync(pb::SyncRequest {
                        db: db.to_owned(),
                        t: 0,
                    })
                    .await
                    .map(drop),
            ),
        ),
        (
            "request-status",
            code(
                RequestsClient::new(channel(endpoint).await)
                    .status(RequestStatusRequest {
                        database: db.to_owned(),
                        request_id: uuid::Uuid::new_v4().to_string(),
                    })
                    .await
                    .map(drop),
            ),
        ),
        (
            "placement",
            code(
                admin
                    .database_placement(DatabasePlacementRequest {
                        database: db.to_owned(),
                    })
                    .await
                    .map(drop),
            ),
        ),
        (
            "handoff",
            code(
                admin
                    .handoff(HandoffRequest {
                        database: db.to_owned(),
                        target_node_id: "node-2".to_owned(),
                    })
                    .await
                    .map(drop),
            ),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_database_names_are_refused_before_any_storage_read() {
    let mut fleet = Fleet::builder(Backend::Filesystem).lease_ttl(TTL).start().await;
    fleet.start_ingresses(1, &[]).await;
    let junk = ["bad name", "../etc", "a.b", "x".repeat(129).as_str(), "naïve"].map(str::to_owned);
    for name in &junk {
        // Through the ingress, and directly at a node: INVALID_ARGUMENT,
        // which no client retries.
        for endpoint in [fleet.ingresses[0].endpoint(), fleet.nodes[0].endpoint()] {
            for (kind, code) in every_type(&endpoint, name).await {
                assert_eq!(code, Code::InvalidArgument, "{kind} {name:?} at {endpoint}");
            }
        }
    }
    // Not one storage operation was made for them.
    for node in &fleet.nodes {
        let (_, root_ops) = http_get(node.admin, "/debug/root-ops").await.unwrap();
        for name in &junk {
            assert!(
                !root_ops.contains(name.as_str()),
                "{} read storage for {name:?}:\n{root_ops}",
                node.id
            );
        }
    }
    // The negative control: a valid name of no database is looked up, and
    // is NOT_FOUND at its candidates.
    let absent = "valid-but-absent";
    let codes = every_type(&fleet.ingresses[0].endpoint(), absent).await;
    let transact = codes.iter().find(|(kind, _)| *kind == "transact").unwrap().1;
    assert_eq!(transact, Code::NotFound, "{codes:?}");
    let candidate = &fleet.nodes[fleet.candidates(absent)[0]];
    let (_, root_ops) = http_get(candidate.admin, "/debug/root-ops").await.unwrap();
    assert!(root_ops.contains(absent), "{root_ops}");
}

/// A process's resident set, in KiB (Linux `/proc`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Sends a `Transact` for each of `names` to `endpoint`, 16 at a time,
/// and returns how many came back with `expected`.
async fn flood_names(endpoint: &str, names: impl Iterator<Item = String>, expected: Code) -> usize {
    use futures::StreamExt as _;
    let shared = channel(endpoint).await;
    futures::stream::iter(names)
        .map(|name| {
            let mut client = TransactorClient::new(shared.clone());
            async move {
                client
                    .transact(corium::transact_request(&name, "x"))
                    .await
                    .err()
                    .map(|status| status.code())
            }
        })
        .buffer_unordered(16)
        .filter(|code| std::future::ready(*code == Some(expected)))
        .count()
        .await
}

/// The bound on a node's growth after 100,000 junk names and 12,000 valid
/// names of no database: per-name state is refused (junk) or capped at
/// 10,000 databases (`CountingStore`), so what remains is allocator slack.
const RSS_GROWTH_BOUND_KIB: u64 = 16 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_flooded_with_distinct_names_keeps_its_memory_bounded() {
    let fleet = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .nodes(1)
        .start()
        .await;
    let node = &fleet.nodes[0];
    let endpoint = node.endpoint();
    let pid = node.pid().expect("the node runs");
    // Warm up the paths (and the allocator) before the first sample.
    flood_names(
        &endpoint,
        (0..1_000).map(|i| format!("warm up {i}")),
        Code::InvalidArgument,
    )
    .await;
    flood_names(&endpoint, (0..200).map(|i| format!("warm-{i}")), Code::NotFound).await;
    let before = rss_kib(pid);
    let started = std::time::Instant::now();
    let junk = flood_names(
        &endpoint,
        (0..100_000).map(|i| format!("junk name {i}")),
        Code::InvalidArgument,
    )
    .await;
    assert_eq!(junk, 100_000, "every junk name refused INVALID_ARGUMENT");
    let after_junk = rss_kib(pid);
    // Valid names of no database cost a storage read each, and a counter
    // each up to the cap.
    let absent = flood_names(
        &endpoint,
        (0..12_000).map(|i| format!("absent-{i}")),
        Code::NotFound,
    )
    .await;
    assert_eq!(absent, 12_000);
    let after = rss_kib(pid);
    eprintln!(
        "node RSS: {before} KiB before, {after_junk} KiB after 100,000 junk names, {after} KiB after 12,000 absent \
         names ({:?})",
        started.elapsed()
    );
    assert!(
        after.saturating_sub(before) <= RSS_GROWTH_BOUND_KIB,
        "the node grew by {} KiB",
        after - before
    );
    // The per-name counters stopped at the cap.
    let (_, root_ops) = http_get(node.admin, "/debug/root-ops").await.unwrap();
    let tracked: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&root_ops).unwrap();
    assert!(tracked.len() <= 10_001, "{} names tracked", tracked.len());
    assert!(tracked.contains_key("(others)"), "the rest are counted together");
    // Still serving.
    assert!(corium::create(&endpoint, "after-the-flood").await.unwrap());
}
