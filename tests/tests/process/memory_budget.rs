//! The memory budget over a real node (`--memory-budget-mib`): idle
//! databases are evicted when the node is past its budget, a database too
//! large for the budget is refused `RESOURCE_EXHAUSTED` naming it and the
//! budget while a small one beside it is served, and the budget, the node's
//! use and each database's estimate are in `corium-fleet status --json`.

use std::time::Duration;

use corium_fleet_tests::{Backend, Fleet, corium, eventually, http_get, metric};
use serde_json::Value;
use tonic::Code;

/// Just over the node's fixed base estimate (40 MiB, `host/memory.rs`): a
/// database whose schema is all it holds fits; one of a few hundred
/// transactions does not.
const BUDGET_MIB: u64 = 41;

#[tokio::test]
async fn a_node_keeps_its_memory_budget() {
    let (fleet, address) = Fleet::builder(Backend::Filesystem)
        .nodes(1)
        .node_flags(&["--memory-budget-mib", "41"])
        .start_with_ingress()
        .await;
    corium::create(&address, "small").await.unwrap();
    corium::create(&address, "big").await.unwrap();
    corium::transact(&address, "small", "first", &[]).await.unwrap();
    // ~3 datoms per transaction at the estimate's 6,000 bytes each: far
    // past the 1 MiB above the base.
    for n in 0..400 {
        corium::transact(&address, "big", &format!("item-{n}"), &[])
            .await
            .unwrap();
    }

    // Past the budget, and nothing in use: the budget's loop evicts idle
    // databases (after 5 s idle), least recently used first, until the
    // estimate is under the budget — which takes the big one.
    let admin = fleet.nodes[0].admin;
    eventually(
        Duration::from_secs(30),
        fleet.with_logs("the big database evicted for memory"),
        async || {
            let run = corium_fleet_tests::cli::run(&["status", "--json"], &address).await;
            let status: Value =
                serde_json::from_str(&run.stdout).map_err(|error| format!("{error}: {}", run.stderr))?;
            let owned = status["nodes"][0]["owned_databases"].clone();
            if owned
                .as_array()
                .is_some_and(|owned| owned.iter().any(|db| db == "big"))
            {
                Err(format!("still owned: {owned}"))
            } else {
                Ok(())
            }
        },
    )
    .await;
    let metrics = http_get(admin, "/metrics").await.unwrap().1;
    assert!(
        metric(&metrics, "corium_fleet_memory_evictions_total").is_some_and(|evicted| evicted >= 1.0),
        "{metrics}"
    );

    // Opened again, the big database alone is past the budget: refused, with
    // words that name it and the budget; asked again, refused without an open.
    for attempt in 0..2 {
        let refused = corium::transact(&address, "big", &format!("again-{attempt}"), &[])
            .await
            .expect_err("a database larger than the budget is refused");
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        assert!(
            refused.message().contains("\"big\"") && refused.message().contains("memory budget of 41 MiB"),
            "{}",
            refused.message()
        );
    }
    let metrics = http_get(admin, "/metrics").await.unwrap().1;
    assert_eq!(
        metric(&metrics, "corium_fleet_memory_budget_bytes"),
        Some(f64::from(u32::try_from(BUDGET_MIB << 20).unwrap()))
    );
    assert!(metric(&metrics, "corium_fleet_memory_refusals_total").is_some_and(|refused| refused >= 2.0));

    // The small database beside it is served.
    corium::transact(&address, "small", "second", &[]).await.unwrap();

    let run = corium_fleet_tests::cli::run(&["status", "--json"], &address).await;
    assert!(run.success, "{}", run.stderr);
    let status: Value = serde_json::from_str(&run.stdout).unwrap();
    let node = &status["nodes"][0];
    assert_eq!(node["memory_budget_bytes"], BUDGET_MIB << 20, "{node:#}");
    assert!(
        node["memory_used_bytes"]
            .as_u64()
            .is_some_and(|used| used >= 40 << 20),
        "{node:#}"
    );
    assert!(
        node["memory_resident_bytes"]
            .as_u64()
            .is_some_and(|resident| resident > 0),
        "{node:#}"
    );
    let small = node["databases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|db| db["database"] == "small")
        .unwrap_or_else(|| panic!("small listed: {node:#}"));
    assert!(
        small["memory_bytes"].as_u64().is_some_and(|bytes| bytes > 0),
        "{small:#}"
    );
}
