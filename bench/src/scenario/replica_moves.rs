//! A read replica across ownership moves, at each history length: how long
//! after a handoff a replica on a third node answers a read of a write made
//! at the new owner (the replica follows the new owner through its node's
//! relay, design note 0023; before, it was retired and rebuilt by replaying
//! the whole log from the new owner), beside how long building that replica
//! took in the first place.
//!
//! Three nodes (lease TTL 5 s), filesystem store, one database written by
//! 16 clients through the ingress with ~200-byte items. The reader is the
//! node that is neither of the database's two candidates; the database is
//! handed back and forth between the candidates. Each repetition: 10 s to
//! settle, hand off,
//! then one write through the ingress, then reads at the reader with that
//! write's basis as `corium-min-basis` until one answers — timed from the
//! handoff's return.

use std::time::{Duration, Instant};

use corium_fleet_tests::{Backend, Fleet, corium};
use corium_fleet_wire::metadata;
use corium_protocol::codec;
use corium_protocol::pb;
use corium_protocol::pb::peer_server_client::PeerServerClient;
use corium_query::edn::{Edn, read_one};
use serde::Serialize;

use crate::load::{self, Shape};
use crate::scenario::recovery::hand_off;

/// Concurrent writers of each history.
const WRITERS: usize = 16;

/// The pause before each move.
const SETTLE: Duration = Duration::from_secs(10);

/// The count of items, the read every measurement makes.
const COUNT: &str = "[:find (count ?e) :where [?e :item/name _]]";

/// One history length.
#[derive(Debug, Serialize)]
pub(crate) struct Point {
    pub(crate) transactions: usize,
    /// The first read at the reader, which builds its replica, ms.
    pub(crate) replica_build_ms: f64,
    /// Handoff return → a read of the write made after it answered at the
    /// reader, per repetition, ms.
    pub(crate) follow_after_move_ms: Vec<f64>,
    /// The handoffs' unavailability as the old owner measured it, ms.
    pub(crate) handoff_ms: Vec<f64>,
}

/// One read of `db` at `endpoint` that the replica answers only once it
/// has `min_basis`, retried (after 5 ms) until it answers, for at most two
/// minutes; returns how long it took.
async fn read_at_basis(endpoint: &str, db: &str, min_basis: u64) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let deadline = started + Duration::from_mins(2);
    let mut client = PeerServerClient::new(corium::channel(endpoint).await);
    let query = codec::encode_edn(&read_one(COUNT)?);
    loop {
        let mut request = tonic::Request::new(pb::QueryRequest {
            dbs: vec![pb::DbViewSpec {
                db: db.to_owned(),
                view: None,
            }],
            query: query.clone(),
            args: codec::encode_edn(&Edn::Vector(Vec::new())),
            fuel: 0,
        });
        request.set_timeout(Duration::from_secs(30));
        request
            .metadata_mut()
            .insert(metadata::MIN_BASIS, min_basis.to_string().parse()?);
        let answered = match client.query(request).await {
            Ok(response) => {
                let mut stream = response.into_inner();
                let mut drained = Ok(());
                loop {
                    match stream.message().await {
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        Err(status) => {
                            drained = Err(status);
                            break;
                        }
                    }
                }
                drained
            }
            Err(status) => Err(status),
        };
        match answered {
            Ok(()) => return Ok(started.elapsed()),
            Err(status) if Instant::now() < deadline => {
                tracing::debug!(%status, "read at the replica refused; again");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(status) => anyhow::bail!("no read at basis {min_basis} within two minutes: {status}"),
        }
    }
}

/// Runs every history length in `lengths`, `reps` moves each.
///
/// # Errors
/// A failed request, handoff or read.
pub(crate) async fn run(lengths: &[usize], reps: usize) -> anyhow::Result<Vec<Point>> {
    let mut fleet = Fleet::builder(Backend::Filesystem)
        .nodes(3)
        .lease_ttl(Duration::from_secs(5))
        .start()
        .await;
    fleet.start_ingresses(1, &[]).await;
    let address = fleet.ingresses[0].endpoint();
    let mut points = Vec::new();
    for (index, &transactions) in lengths.iter().enumerate() {
        let db = format!("replica-moves-{index}");
        corium::create(&address, &db).await?;
        let shape = Shape {
            concurrency: WRITERS,
            requests: transactions,
            request_ids: false,
        };
        load::transact(&address, &db, &format!("r-{}", "h".repeat(190)), shape).await?;
        let candidates = fleet.candidates(&db);
        let reader = (0..fleet.nodes.len())
            .find(|node| !candidates.contains(node))
            .ok_or_else(|| anyhow::anyhow!("no node outside the candidates"))?;
        let reader_endpoint = fleet.nodes[reader].endpoint();
        let written = corium::transact(&address, &db, "before-the-moves", &[])
            .await?
            .basis_t;
        let replica_build_ms = read_at_basis(&reader_endpoint, &db, written).await?.as_secs_f64() * 1000.0;

        let (mut follow_after_move_ms, mut handoff_ms) = (Vec::new(), Vec::new());
        for rep in 0..reps {
            // Each move starts from a settled fleet: a database opened a
            // moment ago is still busy (its first index publication), and
            // handing it on at once measures that, not the move.
            tokio::time::sleep(SETTLE).await;
            let unavailable_ms = hand_off(&fleet, &address, &db).await?;
            let after_move = Instant::now();
            let basis = corium::transact(&address, &db, &format!("after-move-{rep}"), &[])
                .await?
                .basis_t;
            read_at_basis(&reader_endpoint, &db, basis).await?;
            follow_after_move_ms.push(after_move.elapsed().as_secs_f64() * 1000.0);
            // Milliseconds of one handoff: far inside f64's exact integers.
            #[allow(clippy::cast_precision_loss)]
            handoff_ms.push(unavailable_ms as f64);
        }
        points.push(Point {
            transactions,
            replica_build_ms,
            follow_after_move_ms,
            handoff_ms,
        });
        delete(&address, &db).await?;
    }
    Ok(points)
}

/// Deletes `db`, so the next length starts from a fleet holding nothing else.
async fn delete(address: &str, db: &str) -> anyhow::Result<()> {
    pb::catalog_client::CatalogClient::new(corium::channel(address).await)
        .delete_database(pb::DeleteDatabaseRequest { db: db.to_owned() })
        .await?;
    Ok(())
}
