//! A bounded `Transact` load: `concurrency` clients, each on its own HTTP/2
//! connection, together sending `requests` transactions, every one timed.

use std::time::{Duration, Instant};

use corium_fleet_tests::corium;
use corium_fleet_wire::metadata;
use corium_protocol::pb::transactor_client::TransactorClient;

/// How the load's requests are sent.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub(crate) concurrency: usize,
    pub(crate) requests: usize,
    /// Send a fresh `corium-request-id` with each transaction.
    pub(crate) request_ids: bool,
}

/// Runs the load against `db` at `endpoint`; returns every latency and the
/// wall time. Items are named `{prefix}-{client}-{n}` (unique per run).
///
/// # Errors
/// The first failed request.
pub(crate) async fn transact(
    endpoint: &str,
    db: &str,
    prefix: &str,
    shape: Shape,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let per_client = shape.requests.div_ceil(shape.concurrency);
    let started = Instant::now();
    let mut clients = Vec::new();
    for client in 0..shape.concurrency {
        let channel = corium::channel(endpoint).await;
        let (db, prefix) = (db.to_owned(), prefix.to_owned());
        clients.push(tokio::spawn(async move {
            let mut transactor = TransactorClient::new(channel);
            let mut latencies = Vec::with_capacity(per_client);
            for n in 0..per_client {
                let mut request =
                    corium::transact_call(&db, &format!("{prefix}-{client}-{n}"), Duration::from_secs(30));
                if shape.request_ids {
                    let id = uuid::Uuid::new_v4().to_string();
                    request.metadata_mut().insert(metadata::REQUEST_ID, id.parse()?);
                }
                let sent = Instant::now();
                transactor.transact(request).await?;
                latencies.push(sent.elapsed());
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut all = Vec::with_capacity(shape.requests);
    for client in clients {
        all.extend(client.await??);
    }
    Ok((all, started.elapsed()))
}
