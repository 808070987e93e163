//! Handoff unavailability against the length of a database's history: the
//! new owner recovers the database, so this is activation cost as a function
//! of how many transactions the database has.

use std::time::Duration;

use corium_fleet_proto::fleet::HandoffRequest;
use corium_fleet_tests::{Backend, Fleet, corium};
use serde::Serialize;

use crate::load::{self, Shape};

/// One history length.
#[derive(Debug, Serialize)]
pub(crate) struct Point {
    pub(crate) transactions: usize,
    /// Handoff unavailability, as the old owner measured it, per repetition.
    pub(crate) handoff_ms: Vec<u64>,
}

/// Runs handoffs of databases with each history length in `lengths`.
///
/// # Errors
/// A failed request or handoff.
pub(crate) async fn run(
    backend: Backend,
    lengths: &[usize],
    reps: usize,
    node_flags: &[&str],
) -> anyhow::Result<Vec<Point>> {
    let mut fleet = Fleet::builder(backend)
        .lease_ttl(Duration::from_secs(5))
        .node_flags(node_flags)
        .start()
        .await;
    fleet.start_ingresses(1, &[]).await;
    let address = fleet.ingresses[0].endpoint();
    let mut points = Vec::new();
    for (index, &transactions) in lengths.iter().enumerate() {
        let db = format!("history-{index}");
        corium::create(&address, &db).await?;
        if transactions > 0 {
            let shape = Shape {
                concurrency: 16,
                requests: transactions,
                request_ids: false,
            };
            load::transact(&address, &db, "h", shape).await?;
        }
        let mut handoff_ms = Vec::new();
        for _ in 0..reps {
            let view = corium::placement(&address, &db).await;
            let owner = fleet.index(&view.owner_id);
            let target = fleet
                .candidates(&db)
                .into_iter()
                .find(|candidate| *candidate != owner)
                .ok_or_else(|| anyhow::anyhow!("no other candidate"))?;
            let response = corium::admin(&fleet.nodes[owner].endpoint())
                .await
                .handoff(HandoffRequest {
                    database: db.clone(),
                    target_node_id: fleet.nodes[target].id.clone(),
                })
                .await?
                .into_inner();
            handoff_ms.push(response.unavailable_ms);
        }
        points.push(Point {
            transactions,
            handoff_ms,
        });
    }
    Ok(points)
}
