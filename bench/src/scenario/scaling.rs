//! Fleet throughput over many databases against one stock Corium transactor
//! (`corium transactor` from the crates.io package `corium-cli` 0.1.90)
//! hosting the same databases on the same storage kind: aggregate
//! transactions per second with 1, 2 and 3 fleet nodes (through the ingress)
//! and with the stock process, all in one run.

use std::time::{Duration, Instant};

use corium_fleet_tests::corium;
use corium_fleet_tests::stock::StockTransactor;
use corium_protocol::pb::transactor_client::TransactorClient;
use serde::Serialize;

use crate::stats::{self, Spread};

/// One configuration's throughput.
#[derive(Debug, Serialize)]
pub(crate) struct Row {
    pub(crate) target: String,
    pub(crate) transactions_per_second: Spread,
    pub(crate) load: String,
}

/// `concurrency` clients, client `i` writing to database `i % dbs.len()`,
/// `per_client` transactions each; aggregate transactions per second.
async fn drive(
    endpoint: &str,
    dbs: &[String],
    concurrency: usize,
    per_client: usize,
    round: usize,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut clients = Vec::new();
    for client in 0..concurrency {
        let channel = corium::channel(endpoint).await;
        let db = dbs[client % dbs.len()].clone();
        clients.push(tokio::spawn(async move {
            let mut transactor = TransactorClient::new(channel);
            for n in 0..per_client {
                let mut request =
                    corium::transact_call(&db, &format!("s{round}-{client}-{n}"), Duration::from_secs(30));
                request
                    .metadata_mut()
                    .insert(corium_fleet_wire::metadata::DATABASE_ROUTE, db.parse()?);
                transactor.transact(request).await?;
            }
            anyhow::Ok(())
        }));
    }
    for client in clients {
        client.await??;
    }
    #[allow(clippy::cast_precision_loss)]
    Ok((concurrency * per_client) as f64 / started.elapsed().as_secs_f64())
}

/// Runs stock and fleet (1, 2, 3 nodes) over `databases` databases.
///
/// # Errors
/// A failed request, or no stock binary.
pub(crate) async fn run(databases: usize, rounds: usize, per_client: usize) -> anyhow::Result<Vec<Row>> {
    const CONCURRENCY: usize = 16;
    let dbs: Vec<String> = (0..databases).map(|i| format!("scale-{i}")).collect();
    let mut rows = Vec::new();
    {
        let stock = StockTransactor::start().await?;
        for db in &dbs {
            corium::create(&stock.endpoint, db).await?;
        }
        let mut tps = Vec::new();
        drive(&stock.endpoint, &dbs, CONCURRENCY, 20, 99).await?;
        for round in 0..rounds {
            tps.push(drive(&stock.endpoint, &dbs, CONCURRENCY, per_client, round).await?);
        }
        rows.push(Row {
            target: "stock corium (1 process)".into(),
            transactions_per_second: stats::spread(&tps),
            load: stats::load(),
        });
    }
    for nodes in 1..=3 {
        let (fleet, address) = super::filesystem_fleet(nodes).await;
        for db in &dbs {
            corium::create(&address, db).await?;
        }
        drive(&address, &dbs, CONCURRENCY, 20, 99).await?;
        let mut tps = Vec::new();
        for round in 0..rounds {
            tps.push(drive(&address, &dbs, CONCURRENCY, per_client, round).await?);
        }
        rows.push(Row {
            target: format!("fleet, {nodes} node(s) + ingress"),
            transactions_per_second: stats::spread(&tps),
            load: stats::load(),
        });
        if nodes == 1 {
            // The same node without the ingress hop: the cell layer alone
            // against the stock transactor.
            let direct = fleet.nodes[0].endpoint();
            let mut tps = Vec::new();
            for round in 0..rounds {
                tps.push(drive(&direct, &dbs, CONCURRENCY, per_client, round + 100).await?);
            }
            rows.push(Row {
                target: "fleet, 1 node, direct".into(),
                transactions_per_second: stats::spread(&tps),
                load: stats::load(),
            });
        }
    }
    Ok(rows)
}
