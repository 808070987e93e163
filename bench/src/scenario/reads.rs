//! Reads through the fleet's read replicas (`corium.v1.PeerServer`):
//!
//! - throughput of one hot database's queries with 1, 2 and 3 replica
//!   nodes (a fleet of N + 1 nodes, 8·N concurrent readers, so the
//!   ingress's bounded spill — 8 open calls a replica — uses N of them),
//!   beside a stock `corium peer-server` following a stock transactor with
//!   the same data; each also per CPU-second of every process that served
//!   it (the machine has two cores: more replica nodes add no CPU here);
//! - the owner's write latency (p50, one writer) with no reads, with heavy
//!   reads on the replicas (a 3-node fleet), and with the same reads on the
//!   owner's own node (a 1-node fleet), beside a stock transactor with a
//!   stock peer server taking the same reads, in one run.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use corium_fleet_tests::stock::{StockPeerServer, StockTransactor};
use corium_fleet_tests::{Fleet, corium};
use corium_protocol::codec;
use corium_protocol::pb;
use corium_protocol::pb::peer_server_client::PeerServerClient;
use corium_query::edn::{Edn, read_one};
use serde::Serialize;

use crate::stats::{self, Spread};

/// The query every reader runs: a count over every item.
const COUNT: &str = "[:find (count ?e) . :where [?e :item/name]]";

/// Items in the hot database.
const ITEMS: usize = 2_000;

/// One configuration's read throughput.
#[derive(Debug, Serialize)]
pub(crate) struct ThroughputRow {
    pub(crate) target: String,
    pub(crate) readers: usize,
    pub(crate) reads_per_second: Spread,
    pub(crate) reads_per_cpu_second: Spread,
}

/// The owner's write latency under one read load.
#[derive(Debug, Serialize)]
pub(crate) struct WriteRow {
    pub(crate) reads: &'static str,
    pub(crate) write_p50_us: Spread,
    pub(crate) reads_per_second: Spread,
}

/// The scenario's result.
#[derive(Debug, Serialize)]
pub(crate) struct Result {
    pub(crate) throughput: Vec<ThroughputRow>,
    pub(crate) writes: Vec<WriteRow>,
    pub(crate) load: String,
}

/// CPU seconds (user + system) of the processes `pids` so far.
fn cpu_seconds(pids: &[u32]) -> f64 {
    pids.iter()
        .map(|pid| stats::cpu_time(Some(*pid)).as_secs_f64())
        .sum()
}

async fn fill(endpoint: &str, db: &str) -> anyhow::Result<()> {
    corium::create(endpoint, db).await?;
    let mut transactor = pb::transactor_client::TransactorClient::new(corium::channel(endpoint).await);
    for batch in 0..ITEMS / 100 {
        let mut forms = String::from("[");
        for n in 0..100 {
            let _ = write!(forms, "{{:db/id \"x{n}\" :item/name \"item-{batch}-{n}\"}}");
        }
        forms.push(']');
        let request = pb::TransactRequest {
            db: db.to_owned(),
            protocol_version: corium_protocol::PROTOCOL_VERSION,
            tx_data: codec::encode_edn(&read_one(&forms)?),
            expected_basis_t: None,
        };
        transactor.transact(request).await?;
    }
    Ok(())
}

/// `readers` clients running [`COUNT`] on `db` at `endpoint` until
/// `deadline`; returns the reads answered.
async fn read_until(endpoint: &str, db: &str, readers: usize, deadline: Instant) -> anyhow::Result<u64> {
    let mut tasks = Vec::new();
    for _ in 0..readers {
        let channel = corium::channel(endpoint).await;
        let db = db.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut client = PeerServerClient::new(channel);
            let query = codec::encode_edn(&read_one(COUNT)?);
            let args = codec::encode_edn(&Edn::Vector(Vec::new()));
            let mut reads = 0u64;
            while Instant::now() < deadline {
                let mut request = tonic::Request::new(pb::QueryRequest {
                    dbs: vec![pb::DbViewSpec {
                        db: db.clone(),
                        view: None,
                    }],
                    query: query.clone(),
                    args: args.clone(),
                    fuel: 0,
                });
                request.set_timeout(Duration::from_secs(10));
                let mut stream = client.query(request).await?.into_inner();
                while stream.message().await?.is_some() {}
                reads += 1;
            }
            anyhow::Ok(reads)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await??;
    }
    Ok(total)
}

/// One round of `readers` for `seconds`: (reads per second, reads per
/// CPU-second of `pids`).
async fn round(
    endpoint: &str,
    db: &str,
    readers: usize,
    seconds: u64,
    pids: &[u32],
) -> anyhow::Result<(f64, f64)> {
    let cpu_before = cpu_seconds(pids);
    let started = Instant::now();
    let reads = read_until(endpoint, db, readers, started + Duration::from_secs(seconds)).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = (cpu_seconds(pids) - cpu_before).max(0.01);
    #[allow(clippy::cast_precision_loss)]
    let reads = reads as f64;
    Ok((reads / elapsed, reads / cpu))
}

/// A filesystem fleet of `nodes` nodes and an ingress, with the hot
/// database filled; and the ingress's address.
async fn hot_fleet(nodes: usize) -> anyhow::Result<(Fleet, String)> {
    let (fleet, address) = super::filesystem_fleet(nodes).await;
    fill(&address, "hot").await?;
    Ok((fleet, address))
}

fn fleet_pids(fleet: &Fleet) -> Vec<u32> {
    fleet
        .nodes
        .iter()
        .chain(&fleet.ingresses)
        .filter_map(corium_fleet_tests::Node::pid)
        .collect()
}

/// Read throughput with 1–3 replica nodes and a stock peer server.
async fn throughput(rounds: usize, seconds: u64) -> anyhow::Result<Vec<ThroughputRow>> {
    let mut rows = Vec::new();
    {
        let stock = StockTransactor::start().await?;
        fill(&stock.endpoint, "hot").await?;
        let peer = StockPeerServer::start(&stock.endpoint, "hot").await?;
        let pids = [stock.process().pid(), peer.process().pid()];
        round(&peer.endpoint, "hot", 8, 1, &pids).await?;
        let (mut per_second, mut per_cpu) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (rate, efficiency) = round(&peer.endpoint, "hot", 8, seconds, &pids).await?;
            per_second.push(rate);
            per_cpu.push(efficiency);
        }
        rows.push(ThroughputRow {
            target: "stock corium peer-server".into(),
            readers: 8,
            reads_per_second: stats::spread(&per_second),
            reads_per_cpu_second: stats::spread(&per_cpu),
        });
    }
    for replicas in 1..=3 {
        let (fleet, address) = hot_fleet(replicas + 1).await?;
        let pids = fleet_pids(&fleet);
        let readers = 8 * replicas;
        round(&address, "hot", readers, 1, &pids).await?;
        let (mut per_second, mut per_cpu) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (rate, efficiency) = round(&address, "hot", readers, seconds, &pids).await?;
            per_second.push(rate);
            per_cpu.push(efficiency);
        }
        rows.push(ThroughputRow {
            target: format!("fleet, {replicas} replica node(s) + owner + ingress"),
            readers,
            reads_per_second: stats::spread(&per_second),
            reads_per_cpu_second: stats::spread(&per_cpu),
        });
    }
    Ok(rows)
}

/// One writer's latencies for `seconds` on `db` at `endpoint`.
async fn write_p50(endpoint: &str, db: &str, seconds: u64, round: usize) -> anyhow::Result<f64> {
    let mut transactor = pb::transactor_client::TransactorClient::new(corium::channel(endpoint).await);
    let mut samples = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut n = 0;
    while Instant::now() < deadline {
        let started = Instant::now();
        transactor
            .transact(corium::transact_request(db, &format!("w{round}-{n}")))
            .await?;
        samples.push(started.elapsed());
        n += 1;
    }
    samples.sort();
    Ok(stats::quantile(&samples, 0.5).as_secs_f64() * 1e6)
}

/// `rounds` pairs of rounds: one writer alone at `writes`, then the writer
/// with 16 readers at `reads`; (write p50s alone, write p50s with the
/// readers, reads per second).
async fn write_rounds(
    writes: &str,
    reads: &str,
    rounds: usize,
    seconds: u64,
) -> anyhow::Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let (mut idle, mut busy, mut rates) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        idle.push(write_p50(writes, "hot", seconds, r).await?);
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let readers = read_until(reads, "hot", 16, deadline);
        let started = Instant::now();
        let (written, read) = tokio::join!(write_p50(writes, "hot", seconds, r + 100), readers);
        busy.push(written?);
        #[allow(clippy::cast_precision_loss)]
        rates.push(read? as f64 / started.elapsed().as_secs_f64());
    }
    Ok((idle, busy, rates))
}

/// The owner's write p50 without reads, with 16 readers on the replicas
/// (3 nodes), and with them on the owner's node (1 node).
async fn writes(rounds: usize, seconds: u64) -> anyhow::Result<Vec<WriteRow>> {
    let mut rows = Vec::new();
    {
        // Stock: the transactor takes the writes, a peer server beside it
        // (another process on the same cores) the reads.
        let stock = StockTransactor::start().await?;
        fill(&stock.endpoint, "hot").await?;
        let peer = StockPeerServer::start(&stock.endpoint, "hot").await?;
        let (idle, busy, reads) = write_rounds(&stock.endpoint, &peer.endpoint, rounds, seconds).await?;
        rows.push(WriteRow {
            reads: "none (stock transactor)",
            write_p50_us: stats::spread(&idle),
            reads_per_second: Spread::default(),
        });
        rows.push(WriteRow {
            reads: "16 readers on a stock peer server",
            write_p50_us: stats::spread(&busy),
            reads_per_second: stats::spread(&reads),
        });
    }
    for (nodes, label_idle, label_busy) in [
        (3, "none (3 nodes)", "16 readers on the replicas (3 nodes)"),
        (1, "none (1 node)", "16 readers on the owner's node (1 node)"),
    ] {
        let (_fleet, address) = hot_fleet(nodes).await?;
        read_until(&address, "hot", 2, Instant::now() + Duration::from_secs(1)).await?;
        let (idle, busy, reads) = write_rounds(&address, &address, rounds, seconds).await?;
        rows.push(WriteRow {
            reads: label_idle,
            write_p50_us: stats::spread(&idle),
            reads_per_second: Spread::default(),
        });
        rows.push(WriteRow {
            reads: label_busy,
            write_p50_us: stats::spread(&busy),
            reads_per_second: stats::spread(&reads),
        });
    }
    Ok(rows)
}

/// Runs both parts: `rounds` rounds of `seconds` each.
///
/// # Errors
/// A failed request, or no stock binary.
pub(crate) async fn run(rounds: usize, seconds: u64) -> anyhow::Result<Result> {
    let throughput = throughput(rounds, seconds).await?;
    let writes = writes(rounds, seconds).await?;
    Ok(Result {
        throughput,
        writes,
        load: stats::load(),
    })
}
