//! Overload: a fleet offered four times what it can commit, for a fixed
//! time, with the node's shedding on (the defaults) and with it off (limits
//! too high to bite) — the baseline that shows what shedding is for.
//!
//! Capacity is measured first: closed-loop writers over eight databases
//! through the ingress. Then an open-loop load at four times that rate
//! (arrivals do not wait for answers, as independent clients do not), each
//! call with a 2 s deadline. Goodput is what was acknowledged per second,
//! as a share of capacity; the latency is that of acknowledged calls.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::stats;
use corium_fleet_tests::{Backend, Fleet, corium};
use corium_protocol::pb::transactor_client::TransactorClient;

/// Databases the load is spread over.
const DATABASES: usize = 8;
/// Each call's deadline (a client that waits longer has given up).
const DEADLINE: Duration = Duration::from_secs(2);
/// Most calls the load generator keeps open; arrivals beyond it are
/// counted as not sent (the generator's own bound).
const MAX_OPEN: usize = 20_000;

/// One overload run.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Run {
    pub(crate) shedding: bool,
    pub(crate) offered_per_second: f64,
    pub(crate) acknowledged_per_second: f64,
    /// Acknowledged per second over the measured capacity.
    pub(crate) goodput_ratio: f64,
    pub(crate) refused_with_hint: u64,
    pub(crate) deadline_exceeded: u64,
    pub(crate) other_errors: u64,
    pub(crate) not_sent: u64,
    pub(crate) acknowledged_p50_ms: f64,
    pub(crate) acknowledged_p99_ms: f64,
}

/// The scenario's result.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Result {
    pub(crate) capacity_per_second: f64,
    pub(crate) capacity_p99_ms: f64,
    pub(crate) seconds: u64,
    pub(crate) runs: Vec<Run>,
    pub(crate) load: String,
}

/// Runs it: capacity, then `seconds` of 4× overload with and without
/// shedding.
///
/// # Errors
/// A fleet that does not start, or a failed capacity call.
pub(crate) async fn run(seconds: u64) -> anyhow::Result<Result> {
    let mut result = Result {
        seconds,
        ..Result::default()
    };
    for shedding in [true, false] {
        let flags: &[&str] = if shedding {
            &[]
        } else {
            &[
                "--max-inflight-calls",
                "1000000",
                "--max-queued-calls",
                "1000000",
                "--max-inflight-per-database",
                "1000000",
            ]
        };
        let mut fleet = Fleet::builder(Backend::Filesystem)
            .lease_ttl(Duration::from_secs(5))
            .nodes(1)
            .node_flags(flags)
            .start()
            .await;
        // The load comes from one address; the per-address cap would
        // stand for the node's limits. Without shedding, the ingress's own
        // concurrency limit is lifted too.
        let ingress_flags: &[&str] = if shedding {
            &["--max-streams-per-client", "1000000"]
        } else {
            &[
                "--max-streams-per-client",
                "1000000",
                "--max-concurrent-requests",
                "1000000",
                "--adaptive-node-limit",
                "false",
            ]
        };
        fleet.start_ingresses(1, ingress_flags).await;
        let address = fleet.ingresses[0].endpoint();
        let dbs: Vec<String> = (0..DATABASES).map(|i| format!("overload-{i}")).collect();
        for db in &dbs {
            corium::create(&address, db).await?;
        }
        if shedding {
            let (rate, p99) = capacity(&address, &dbs, seconds.min(10)).await?;
            result.capacity_per_second = rate;
            result.capacity_p99_ms = p99;
        }
        let mut run = offer(&address, &dbs, result.capacity_per_second * 4.0, seconds).await;
        run.shedding = shedding;
        run.goodput_ratio = run.acknowledged_per_second / result.capacity_per_second.max(1e-9);
        result.runs.push(run);
    }
    result.load = stats::load();
    Ok(result)
}

/// Closed-loop writers (4 per database) for `seconds`: commits a second
/// and the p99 in milliseconds.
async fn capacity(address: &str, dbs: &[String], seconds: u64) -> anyhow::Result<(f64, f64)> {
    let end = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut writers = Vec::new();
    for (index, db) in dbs.iter().cycle().take(dbs.len() * 4).enumerate() {
        let mut client = TransactorClient::new(corium::channel(address).await);
        let db = db.clone();
        writers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut n = 0;
            while Instant::now() < end {
                let mut request =
                    tonic::Request::new(corium::transact_request(&db, &format!("capacity-{index}-{n}")));
                request.set_timeout(DEADLINE);
                n += 1;
                let sent = Instant::now();
                client.transact(request).await?;
                latencies.push(sent.elapsed());
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut all = Vec::new();
    for writer in writers {
        all.extend(writer.await??);
    }
    let elapsed = started.elapsed();
    let summary = stats::latency(all, elapsed);
    Ok((summary.per_second, summary.p99_us / 1000.0))
}

/// What one offered call came to.
enum Outcome {
    Acknowledged(Duration),
    Refused,
    Late,
    Other,
}

/// Offers `rate` calls a second for `seconds`, open loop, spread over
/// `dbs` and 16 client connections.
async fn offer(address: &str, dbs: &[String], rate: f64, seconds: u64) -> Run {
    let mut clients = Vec::new();
    for _ in 0..16 {
        clients.push(TransactorClient::new(corium::channel(address).await));
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Outcome>();
    let open = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_OPEN));
    let started = Instant::now();
    let end = started + Duration::from_secs(seconds);
    let interval = Duration::from_secs_f64(1.0 / rate.max(1.0));
    let mut next = started;
    let (mut offered, mut not_sent) = (0u64, 0u64);
    // Arrivals in small batches, so the pacer's own wake-ups stay cheap.
    while next < end {
        let now = Instant::now();
        while next <= now && next < end {
            offered += 1;
            let Ok(permit) = std::sync::Arc::clone(&open).try_acquire_owned() else {
                not_sent += 1;
                next += interval;
                continue;
            };
            let index = usize::try_from(offered).unwrap_or(0);
            let mut client = clients[index % clients.len()].clone();
            let db = dbs[index % dbs.len()].clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut request =
                    tonic::Request::new(corium::transact_request(&db, &format!("offered-{index}")));
                request.set_timeout(DEADLINE);
                let sent = Instant::now();
                let outcome = match tokio::time::timeout(DEADLINE, client.transact(request)).await {
                    Ok(Ok(_)) => Outcome::Acknowledged(sent.elapsed()),
                    Ok(Err(status)) if corium_fleet_wire::overload::is_refusal(&status) => Outcome::Refused,
                    Ok(Err(status))
                        if matches!(
                            status.code(),
                            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
                        ) =>
                    {
                        Outcome::Late
                    }
                    Err(_) => Outcome::Late,
                    Ok(Err(_)) => Outcome::Other,
                };
                drop(permit);
                let _ = tx.send(outcome);
            });
            next += interval;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    drop(tx);
    let mut run = Run {
        not_sent,
        ..Run::default()
    };
    let mut acknowledged = Vec::new();
    // Every call ends within its deadline; the wait is bounded by it.
    while let Ok(Some(outcome)) = tokio::time::timeout(DEADLINE * 2, rx.recv()).await {
        match outcome {
            Outcome::Acknowledged(latency) => acknowledged.push(latency),
            Outcome::Refused => run.refused_with_hint += 1,
            Outcome::Late => run.deadline_exceeded += 1,
            Outcome::Other => run.other_errors += 1,
        }
    }
    let seconds = Duration::from_secs(seconds).as_secs_f64();
    #[allow(clippy::cast_precision_loss)]
    {
        run.offered_per_second = offered as f64 / seconds;
        run.acknowledged_per_second = acknowledged.len() as f64 / seconds;
    }
    acknowledged.sort();
    run.acknowledged_p50_ms = stats::quantile(&acknowledged, 0.5).as_secs_f64() * 1000.0;
    run.acknowledged_p99_ms = stats::quantile(&acknowledged, 0.99).as_secs_f64() * 1000.0;
    run
}
