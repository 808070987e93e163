//! Reads through the fleet: Corium's thin-client surface,
//! `corium.v1.PeerServer`, at the fleet address, answered by read replicas
//! that follow the owner (`transactor/src/replica/`, design note 0017).
//!
//! The reference is stock Corium itself: a stock `corium peer-server`
//! (crates.io `corium-cli` 0.1.90) following the same database through the
//! ingress, and stock `corium_client::RemotePeer` as the client.

use std::time::{Duration, Instant};

use corium_client::{Peer as _, RemotePeer};
use corium_fleet_tests::stock::StockPeerServer;
use corium_fleet_tests::{Backend, Fleet, corium, eventually, http_get, metric};
use corium_protocol::codec;
use corium_protocol::pb;
use corium_protocol::pb::peer_server_client::PeerServerClient;
use corium_query::edn::{Edn, read_one};
use tonic::transport::Channel;

/// Every item's name: `[:find ?name :where [_ :item/name ?name]]`.
const NAMES: &str = "[:find ?e ?name :where [?e :item/name ?name]]";

fn view(db: &str, as_of: Option<u64>) -> pb::DbViewSpec {
    pb::DbViewSpec {
        db: db.to_owned(),
        view: as_of.map(pb::db_view_spec::View::AsOf),
    }
}

fn with_min_basis<T>(message: T, min_basis: Option<u64>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(Duration::from_secs(10));
    if let Some(basis) = min_basis {
        request
            .metadata_mut()
            .insert(corium_fleet_wire::metadata::MIN_BASIS, basis.into());
    }
    request
}

/// A datom as text, comparable across processes (keyword ids are interned
/// per process; names are not).
fn datom_rows(bytes: &[u8]) -> Vec<String> {
    let mut interner = corium_core::KeywordInterner::default();
    codec::decode_datoms(bytes, &mut interner)
        .expect("datoms decode")
        .iter()
        .map(|datom| {
            format!(
                "{} {} {:?} {} {}",
                datom.e.raw(),
                datom.a.raw(),
                datom.v,
                datom.tx.raw(),
                datom.added
            )
        })
        .collect()
}

/// What a `PeerServer` answers for the test's reads of `db` at `as_of`.
#[derive(Debug, PartialEq)]
struct Answers {
    names: Vec<String>,
    pulled: String,
    datoms: Vec<String>,
    log: Vec<(u64, i64, Vec<String>)>,
    stats: pb::DbStatsResponse,
    bad_query: (tonic::Code, String),
}

pub(crate) async fn query_rows(
    client: &mut PeerServerClient<Channel>,
    db: &str,
    as_of: Option<u64>,
    min_basis: Option<u64>,
) -> Result<Vec<String>, tonic::Status> {
    let request = pb::QueryRequest {
        dbs: vec![view(db, as_of)],
        query: codec::encode_edn(&read_one(NAMES).unwrap()),
        args: codec::encode_edn(&Edn::Vector(Vec::new())),
        fuel: 0,
    };
    let mut stream = client
        .query(with_min_basis(request, min_basis))
        .await?
        .into_inner();
    let mut chunks = Vec::new();
    while let Some(chunk) = stream.message().await? {
        chunks.push(chunk);
    }
    let Edn::Vector(rows) = corium_peer::server::assemble_query_result(&chunks).expect("result decodes")
    else {
        panic!("a relation is a vector")
    };
    let mut rows: Vec<String> = rows.iter().map(ToString::to_string).collect();
    rows.sort();
    Ok(rows)
}

async fn answers(endpoint: &str, db: &str, as_of: u64) -> Answers {
    let mut client = PeerServerClient::new(corium::channel(endpoint).await);
    let names = query_rows(&mut client, db, Some(as_of), None)
        .await
        .expect("query");
    let first = names.first().expect("items were written");
    let eid: i64 = first
        .trim_start_matches('[')
        .split_whitespace()
        .next()
        .and_then(|id| id.parse().ok())
        .expect("the row starts with the entity id");
    let pulled = client
        .pull(with_min_basis(
            pb::PullRequest {
                db: Some(view(db, Some(as_of))),
                pattern: codec::encode_edn(&read_one("[*]").unwrap()),
                eid: codec::encode_edn(&Edn::Long(eid)),
            },
            None,
        ))
        .await
        .expect("pull")
        .into_inner();
    let mut datoms = Vec::new();
    let mut stream = client
        .datoms(with_min_basis(
            pb::DatomsRequest {
                db: Some(view(db, Some(as_of))),
                index: "aevt".into(),
                components: codec::encode_edn(&read_one("[:item/name]").unwrap()),
                limit: 0,
            },
            None,
        ))
        .await
        .expect("datoms")
        .into_inner();
    while let Some(chunk) = stream.message().await.expect("datoms stream") {
        datoms.extend(datom_rows(&chunk.datoms));
    }
    let mut log = Vec::new();
    let mut stream = client
        .tx_range(with_min_basis(
            pb::TxRangeRequest {
                db: db.to_owned(),
                start: 1,
                end: as_of + 1,
            },
            Some(as_of),
        ))
        .await
        .expect("tx range")
        .into_inner();
    while let Some(chunk) = stream.message().await.expect("tx range stream") {
        for tx in chunk.txes {
            log.push((tx.t, tx.tx_instant, datom_rows(&tx.datoms)));
        }
    }
    let stats = client
        .db_stats(with_min_basis(
            pb::DbStatsRequest {
                db: Some(view(db, Some(as_of))),
            },
            None,
        ))
        .await
        .expect("db stats")
        .into_inner();
    let bad = pb::QueryRequest {
        dbs: vec![view(db, Some(as_of))],
        query: codec::encode_edn(&read_one("[:find ?x :where [?x :no/such ?y]]").unwrap()),
        args: codec::encode_edn(&Edn::Vector(Vec::new())),
        fuel: 0,
    };
    let bad_query = match client.query(with_min_basis(bad, None)).await {
        Ok(response) => {
            let mut stream = response.into_inner();
            match stream.message().await {
                Ok(_) => (tonic::Code::Ok, String::new()),
                Err(refused) => (refused.code(), refused.message().to_owned()),
            }
        }
        Err(refused) => (refused.code(), refused.message().to_owned()),
    };
    Answers {
        names,
        pulled: format!("{:?}", codec::decode_edn(&pulled.result).expect("pull decodes")),
        datoms,
        log,
        stats,
        bad_query,
    }
}

/// `(replicas held, replica reads served or waited)` per node.
async fn replica_counts(fleet: &Fleet) -> Vec<(f64, f64)> {
    let mut counts = Vec::new();
    for text in node_metrics(fleet).await {
        let reads = metric(&text, "corium_fleet_replica_reads_total{result=\"served\"}").unwrap_or(0.0)
            + metric(&text, "corium_fleet_replica_reads_total{result=\"waited\"}").unwrap_or(0.0);
        counts.push((metric(&text, "corium_fleet_replicas").unwrap_or(0.0), reads));
    }
    counts
}

/// Each node's `/metrics` (empty where it does not answer), in node order.
async fn node_metrics(fleet: &Fleet) -> Vec<String> {
    let mut texts = Vec::new();
    for node in &fleet.nodes {
        texts.push(
            http_get(node.admin, "/metrics")
                .await
                .map(|(_, text)| text)
                .unwrap_or_default(),
        );
    }
    texts
}

/// `series` summed over the nodes' `/metrics` `texts` (0 where absent).
fn summed(texts: &[String], series: &str) -> f64 {
    texts.iter().map(|text| metric(text, series).unwrap_or(0.0)).sum()
}

/// Writes items `{prefix}-{n}` for `n` in `0..count`; the last one's basis.
async fn write_items(address: &str, db: &str, prefix: &str, count: usize) -> u64 {
    let acked = corium::transact_items(address, db, prefix, count).await;
    acked.into_keys().next_back().unwrap_or(0)
}

/// Creates `db` through `address`, writes `count` items `{prefix}-{n}` to
/// it, and reads them all back through a replica at the last write's
/// basis: the client that read, and that basis.
async fn create_write_and_read(
    address: &str,
    db: &str,
    prefix: &str,
    count: usize,
) -> (PeerServerClient<Channel>, u64) {
    assert!(corium::create(address, db).await.unwrap(), "create {db}");
    let written = write_items(address, db, prefix, count).await;
    let mut client = PeerServerClient::new(corium::channel(address).await);
    let rows = query_rows(&mut client, db, None, Some(written))
        .await
        .unwrap_or_else(|status| panic!("first read of {db}: {status:?}"));
    assert_eq!(rows.len(), count, "{db}: every write read back: {rows:?}");
    (client, written)
}

/// The node owning `db` and the first node serving a replica, which must
/// be another one.
async fn owner_and_replica(fleet: &Fleet, address: &str, db: &str) -> (usize, usize) {
    let owner = fleet.index(&corium::placement(address, db).await.owner_id);
    let counts = replica_counts(fleet).await;
    let replica = counts
        .iter()
        .position(|(replicas, _)| *replicas >= 1.0)
        .unwrap_or_else(|| panic!("a replica of {db} serves: {counts:?}"));
    assert_ne!(replica, owner, "{db}: {counts:?}");
    (owner, replica)
}

async fn reads_answer_as_a_stock_peer_server_does(backend: Backend) {
    let mut fleet = Fleet::builder(backend).mtls().start().await;
    fleet.start_ingresses(2, &[]).await;
    let (writer, reader) = (fleet.ingresses[0].endpoint(), fleet.ingresses[1].endpoint());
    assert!(corium::create(&writer, "reads").await.unwrap());
    let basis = write_items(&writer, "reads", "item", 25).await;
    let stock = StockPeerServer::start(&writer, "reads")
        .await
        .expect("stock peer server");
    let mut stock_client = PeerServerClient::new(corium::channel(&stock.endpoint).await);
    eventually(
        Duration::from_secs(30),
        "the stock peer server caught up",
        async || {
            let stats = stock_client
                .db_stats(with_min_basis(
                    pb::DbStatsRequest {
                        db: Some(view("reads", None)),
                    },
                    None,
                ))
                .await
                .map_err(|status| status.to_string())?
                .into_inner();
            if stats.basis_t >= basis {
                Ok(())
            } else {
                Err(format!("at {}", stats.basis_t))
            }
        },
    )
    .await;
    let through_fleet = answers(&reader, "reads", basis).await;
    let from_stock = answers(&stock.endpoint, "reads", basis).await;
    assert_eq!(through_fleet.names.len(), 25, "{through_fleet:?}");
    assert_eq!(through_fleet.log.len(), 25, "{through_fleet:?}");
    assert_eq!(
        through_fleet.bad_query.0,
        tonic::Code::InvalidArgument,
        "{through_fleet:?}"
    );
    assert_eq!(through_fleet, from_stock, "{}", stock.process().log());

    // The reads ran on a replica that is not the owner's node.
    let owner = fleet.index(&corium::placement(&writer, "reads").await.owner_id);
    let counts = replica_counts(&fleet).await;
    assert_eq!(counts[owner], (0.0, 0.0), "reads stay off the owner: {counts:?}");
    assert!(
        counts
            .iter()
            .any(|(replicas, reads)| *replicas >= 1.0 && *reads >= 6.0),
        "one replica answered them: {counts:?}"
    );
    let (_, ingress) = http_get(fleet.ingresses[1].admin, "/metrics")
        .await
        .expect("ingress metrics");
    assert!(
        metric(&ingress, "corium_fleet_ingress_reads_to_replica_total").unwrap_or(0.0) >= 6.0,
        "the ingress counts them as replica reads"
    );
    assert_eq!(
        metric(&ingress, "corium_fleet_ingress_reads_to_owner_total"),
        Some(0.0)
    );

    // Stock's own thin client at the fleet address: a write through one
    // ingress, then reads at the basis it returned, through the other.
    let peer = RemotePeer::connect(&reader, "reads", None, None)
        .await
        .expect("remote peer");
    let report = peer
        .transact(corium::item_forms("from-the-thin-client").into())
        .await
        .expect("thin client transact");
    let rows = report
        .db_after
        .query_edn(read_one(NAMES).unwrap(), Vec::new())
        .await
        .expect("thin client query");
    assert_eq!(rows.rows().len(), 26, "its own write is visible at its basis");
    let stats = peer.db().await.unwrap().stats().await.expect("stats");
    assert!(stats.basis_t >= report.basis_t, "{stats:?} {}", report.basis_t);

    // Errors are Corium's: an unknown database, a junk name.
    let mut client = PeerServerClient::new(corium::channel(&reader).await);
    for (db, code) in [
        ("no-such-db", tonic::Code::NotFound),
        ("../etc", tonic::Code::InvalidArgument),
    ] {
        let request = pb::DbStatsRequest {
            db: Some(view(db, None)),
        };
        corium::expect_code(
            client.db_stats(with_min_basis(request, None)).await,
            code,
            format!("DbStats of {db:?}"),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thin_client_reads_answer_as_a_stock_peer_server_does_on_the_filesystem() {
    reads_answer_as_a_stock_peer_server_does(Backend::Filesystem).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thin_client_reads_answer_as_a_stock_peer_server_does_on_postgres() {
    let postgres = Backend::all()
        .into_iter()
        .nth(1)
        .expect("PostgreSQL is part of the suite");
    reads_answer_as_a_stock_peer_server_does(postgres).await;
}

/// Write-then-read pairs: a write through one ingress, a read through the
/// other (with `corium-min-basis`, as the SDK sends), or a stock thin
/// client's write and read on its one connection (its write's as-of view, or
/// its current view). None reads behind its write.
async fn reads_never_go_behind_their_writes(backend: Backend, pairs: usize) {
    let mut fleet = Fleet::builder(backend).start().await;
    fleet.start_ingresses(2, &[]).await;
    let (a, b) = (fleet.ingresses[0].endpoint(), fleet.ingresses[1].endpoint());
    assert!(corium::create(&a, "ryw").await.unwrap());
    let mut client = PeerServerClient::new(corium::channel(&b).await);
    let peer = RemotePeer::connect(&a, "ryw", None, None)
        .await
        .expect("remote peer");
    let started = Instant::now();
    for n in 0..pairs {
        let seen = if n % 2 == 0 {
            let written = corium::transact(&a, "ryw", &format!("pair-{n}"), &[])
                .await
                .unwrap_or_else(|status| panic!("write {n}: {status:?}"));
            query_rows(&mut client, "ryw", None, Some(written.basis_t))
                .await
                .unwrap_or_else(|status| panic!("read {n}: {status:?}"))
                .len()
        } else {
            let report = peer
                .transact(corium::item_forms(&format!("pair-{n}")).into())
                .await
                .unwrap_or_else(|error| panic!("thin write {n}: {error}"));
            // Its write's own view (as of its basis), or the current view:
            // the ingress gives this connection's reads its written basis.
            let db = if n % 4 == 1 {
                report.db_after
            } else {
                peer.db().await.unwrap()
            };
            db.query_edn(read_one(NAMES).unwrap(), Vec::new())
                .await
                .unwrap_or_else(|error| panic!("thin read {n}: {error}"))
                .rows()
                .len()
        };
        assert_eq!(seen, n + 1, "pair {n}: the read saw every write before it");
    }
    eprintln!("{pairs} write-then-read pairs in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_writes_then_reads_through_two_ingresses_never_read_behind_on_the_filesystem() {
    reads_never_go_behind_their_writes(Backend::Filesystem, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_writes_then_reads_through_two_ingresses_never_read_behind_on_postgres() {
    let postgres = Backend::all()
        .into_iter()
        .nth(1)
        .expect("PostgreSQL is part of the suite");
    reads_never_go_behind_their_writes(postgres, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_continue_on_another_replica_when_a_replica_node_is_killed_and_none_is_stale() {
    let (mut fleet, address) = Fleet::builder(Backend::Filesystem).start_with_ingress().await;
    let (mut client, _) = create_write_and_read(&address, "hot", "before", 10).await;
    let mut count = 10;
    let (_, replica) = owner_and_replica(&fleet, &address, "hot").await;
    fleet.nodes[replica].kill();
    // Writes and reads alternate past the kill: every read succeeds (the
    // ingress goes to the next replica) and sees every write before it.
    // A fixed number of rounds, not a time window: a loaded machine makes
    // them slower, never fewer.
    for _ in 0..20 {
        let written = corium::transact(&address, "hot", &format!("after-{count}"), &[])
            .await
            .unwrap_or_else(|status| panic!("write {count}: {status:?}"))
            .basis_t;
        count += 1;
        let rows = query_rows(&mut client, "hot", None, Some(written))
            .await
            .unwrap_or_else(|status| panic!("read after the kill: {status:?}\n{}", fleet.logs()));
        assert_eq!(rows.len(), count, "never stale");
    }
    let after = replica_counts(&fleet).await;
    assert!(
        after
            .iter()
            .enumerate()
            .any(|(index, (replicas, _))| index != replica && *replicas >= 1.0),
        "another node holds a replica now: {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_replica_is_evicted_and_its_memory_released() {
    let (fleet, address) = Fleet::builder(Backend::Filesystem)
        .node_flags(&["--replica-idle-ms", "1000"])
        .start_with_ingress()
        .await;
    let (mut client, written) = create_write_and_read(&address, "idle", "item", 3).await;
    let held: f64 = replica_counts(&fleet)
        .await
        .iter()
        .map(|(replicas, _)| replicas)
        .sum();
    assert!(held >= 1.0, "a replica was built");
    // The operator sees it in the fleet's status (`corium-fleet status`).
    let status = corium::admin(&fleet.nodes[0].endpoint())
        .await
        .fleet_status(corium_fleet_proto::fleet::FleetStatusRequest {})
        .await
        .expect("fleet status")
        .into_inner();
    let listed: u32 = status
        .members
        .iter()
        .filter_map(|member| member.status.as_ref()?.load.as_ref())
        .map(|load| load.read_replicas)
        .sum();
    assert!(listed >= 1, "{status:?}");
    // Its history is charged to its node's memory budget.
    let replica_bytes = async || summed(&node_metrics(&fleet).await, "corium_fleet_memory_replica_bytes");
    eventually(
        Duration::from_secs(10),
        "the replica's memory is charged",
        async || {
            // A read keeps it from going idle meanwhile.
            query_rows(&mut client, "idle", None, Some(written))
                .await
                .map_err(|status| format!("{status:?}"))?;
            let bytes = replica_bytes().await;
            if bytes > 0.0 {
                Ok(())
            } else {
                Err(format!("{bytes} bytes"))
            }
        },
    )
    .await;
    eventually(
        Duration::from_secs(15),
        "the idle replica is evicted",
        async || {
            let texts = node_metrics(&fleet).await;
            let evicted = summed(&texts, "corium_fleet_replica_evictions_total");
            let held = summed(&texts, "corium_fleet_replicas");
            let charged = replica_bytes().await;
            if held == 0.0 && evicted >= 1.0 && charged == 0.0 {
                Ok(())
            } else {
                Err(format!("{held} held, {evicted} evicted, {charged} bytes charged"))
            }
        },
    )
    .await;
    // A read after the eviction builds a replica again and answers.
    assert_eq!(
        query_rows(&mut client, "idle", None, Some(written))
            .await
            .unwrap()
            .len(),
        3
    );
}

/// `(replicas built, replicas that followed a new owner, replicas dropped)`
/// at node `index`.
async fn replica_moves(fleet: &Fleet, index: usize) -> (u64, u64, u64) {
    let text = http_get(fleet.nodes[index].admin, "/metrics")
        .await
        .map(|(_, text)| text)
        .unwrap_or_default();
    // Counters: small whole numbers.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let count = |name: &str| metric(&text, name).unwrap_or(0.0) as u64;
    (
        count("corium_fleet_replica_activations_total"),
        count("corium_fleet_replica_owner_changes_total"),
        count("corium_fleet_replica_evictions_total"),
    )
}

/// [`replica_moves`] at node `index` once its replica followed a new owner
/// (its probe notices a move within a few periods).
async fn once_followed(fleet: &Fleet, index: usize) -> (u64, u64, u64) {
    eventually(
        Duration::from_secs(10),
        format!("the replica at node {index} to follow the new owner"),
        async || match replica_moves(fleet, index).await {
            (built, followed, dropped) if followed >= 1 => Ok((built, followed, dropped)),
            other => Err(format!("(built, followed, dropped) = {other:?}")),
        },
    )
    .await
}

/// A read at node `index` directly, once the replica there has `min_basis`
/// (within 20 s: it may be resubscribing to a new owner).
async fn rows_at(fleet: &Fleet, index: usize, db: &str, min_basis: u64) -> Vec<String> {
    let mut client = PeerServerClient::new(corium::channel(&fleet.nodes[index].endpoint()).await);
    eventually(
        Duration::from_secs(20),
        &format!("a read at node {index} at basis {min_basis}"),
        async || {
            query_rows(&mut client, db, None, Some(min_basis))
                .await
                .map_err(|status| format!("{status:?}"))
        },
    )
    .await
}

/// A database is handed off while a node that is neither owner nor target
/// holds a replica of it: the replica goes on following the new owner with
/// what it holds (no rebuild, no replay of the history: only the tail), and
/// reads there see the writes made at the new owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_follows_a_handed_off_database_without_a_rebuild() {
    let (fleet, address) = Fleet::builder(Backend::Filesystem)
        .start_with_database("handed")
        .await;
    let written = write_items(&address, "handed", "before", 20).await;
    let owner = fleet.index(&corium::placement(&address, "handed").await.owner_id);
    let target = fleet
        .other_candidate("handed", owner)
        .expect("a second candidate");
    let reader = (0..fleet.nodes.len())
        .find(|index| *index != owner && *index != target)
        .expect("a third node");
    assert_eq!(rows_at(&fleet, reader, "handed", written).await.len(), 20);
    let (built, _, _) = replica_moves(&fleet, reader).await;
    assert_eq!(built, 1, "the read built one replica at node {reader}");

    corium::admin(&fleet.nodes[owner].endpoint())
        .await
        .handoff(corium_fleet_proto::fleet::HandoffRequest {
            database: "handed".to_owned(),
            target_node_id: fleet.nodes[target].id.clone(),
        })
        .await
        .unwrap_or_else(|status| panic!("handoff: {status:?}\n{}", fleet.logs()));
    let after = write_items(&address, "handed", "after", 5).await;
    assert_eq!(
        corium::placement(&address, "handed").await.owner_id,
        fleet.nodes[target].id,
        "the write after the move landed at the target"
    );
    let rows = rows_at(&fleet, reader, "handed", after).await;
    assert_eq!(rows.len(), 25, "the replica has the writes made at the new owner");
    let (built, followed, dropped) = once_followed(&fleet, reader).await;
    assert_eq!(
        (built, followed, dropped),
        (1, 1, 0),
        "one replica, never rebuilt: it followed the new owner\n{}",
        fleet.logs()
    );
}

/// The owner is frozen (SIGSTOP) past its lease and another node takes the
/// database over: the replica that followed the frozen owner refuses reads
/// it cannot answer (its probe hears nothing; a read of the new owner's
/// writes waits), then follows the new owner with what it holds — never
/// rebuilt, never an answer that misses a write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_takeover_the_replica_follows_the_new_owner_without_a_rebuild() {
    let (fleet, address) = Fleet::builder(Backend::Filesystem).start_with_ingress().await;
    let (mut client, _) = create_write_and_read(&address, "moving", "before", 5).await;
    let (owner, reader) = owner_and_replica(&fleet, &address, "moving").await;
    let (built_before, _, _) = replica_moves(&fleet, reader).await;
    fleet.nodes[owner].freeze().await;
    // The ingress holds the write until a successor took the lease over.
    let after = corium::transact(&address, "moving", "after-the-takeover", &[])
        .await
        .unwrap_or_else(|status| panic!("write after the freeze: {status:?}\n{}", fleet.logs()));
    let rows = eventually(
        Duration::from_secs(20),
        "a read at the new owner's basis",
        async || {
            query_rows(&mut client, "moving", None, Some(after.basis_t))
                .await
                .map_err(|status| format!("{status:?}"))
        },
    )
    .await;
    assert_eq!(rows.len(), 6, "the read sees the write made at the new owner");
    let rows = rows_at(&fleet, reader, "moving", after.basis_t).await;
    assert_eq!(rows.len(), 6, "the first replica sees it too");
    let (built, followed, _) = once_followed(&fleet, reader).await;
    fleet.nodes[owner].signal(nix::sys::signal::Signal::SIGCONT);
    assert_eq!(
        (built, followed),
        (built_before, 1),
        "the replica at node {reader} followed the new owner, not rebuilt\n{}",
        fleet.logs()
    );
}
