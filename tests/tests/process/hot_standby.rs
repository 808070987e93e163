//! Hot standbys promoted in place (issue 49): the first standby of an active
//! database follows the owner's acknowledged stream, and a handoff to it or
//! a takeover by it opens the database from the value it holds — Corium's
//! warm start, the fleet's patch (`docs/upstream/0002`) — applying only the
//! log after that value. The database then holds exactly what it held, and
//! the node that let it go follows the new owner at once.

use std::time::Duration;

use corium_fleet_tests::{Backend, Fleet, corium, http_get};

/// Items written before the move.
const WRITES: u32 = 60;

/// A node's hot-standby counters.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Counts {
    pub(crate) followed: u64,
    pub(crate) applied: u64,
    pub(crate) taken: u64,
    pub(crate) refused: u64,
}

pub(crate) async fn counts(fleet: &Fleet, node: usize) -> Counts {
    let (_, text) = http_get(fleet.nodes[node].admin, "/metrics")
        .await
        .expect("metrics");
    let get = |name: &str| -> u64 {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
    };
    Counts {
        followed: get("corium_fleet_hot_standbys"),
        applied: get("corium_fleet_hot_standby_applied_total"),
        taken: get("corium_fleet_hot_standby_promotions_total{outcome=\"taken\"}"),
        refused: get("corium_fleet_hot_standby_promotions_total{outcome=\"refused\"}"),
    }
}

/// A fleet of two nodes on `backend` with `flags`, `db` created and written
/// [`WRITES`] times through the ingress; returns the fleet, the ingress, the
/// owner and the other node.
async fn written(backend: Backend, flags: &[&str], db: &str) -> (Fleet, String, usize, usize) {
    written_with_env(backend, flags, &[], db).await
}

/// [`written`], the nodes started with `env` too.
async fn written_with_env(
    backend: Backend,
    flags: &[&str],
    env: &[(&str, &str)],
    db: &str,
) -> (Fleet, String, usize, usize) {
    let (fleet, address) = Fleet::builder(backend)
        .nodes(2)
        .lease_ttl(Duration::from_millis(1500))
        .node_flags(flags)
        .env(env)
        .start_with_database(db)
        .await;
    for n in 0..WRITES {
        corium::transact(&address, db, &format!("w-{n}"), &[])
            .await
            .unwrap_or_else(|status| panic!("write {n}: {status:?}"));
    }
    let owner = fleet.index(&corium::placement(&address, db).await.owner_id);
    let standby = fleet
        .other_candidate(db, owner)
        .expect("the other node is a candidate");
    (fleet, address, owner, standby)
}

/// Waits until `node` follows one database and has applied a transaction
/// from its owner's stream (its value is then anchored: offerable).
pub(crate) async fn await_following(fleet: &Fleet, node: usize, address: &str, db: &str) {
    corium_fleet_tests::eventually(
        Duration::from_secs(30),
        "the first standby follows the owner",
        async || {
            // A write, so the stream carries a transaction past any start value.
            corium::transact(address, db, "nudge", &[])
                .await
                .map_err(|status| fleet.with_logs(format!("{status:?}")))?;
            let now = counts(fleet, node).await;
            if now.followed >= 1 && now.applied >= 1 {
                Ok(())
            } else {
                Err(fleet.with_logs(format!("{now:?}")))
            }
        },
    )
    .await;
}

/// The log has every write once, then the new one.
async fn assert_every_write(address: &str, db: &str, before: &[(u64, Vec<String>)]) {
    let after = corium::log(address, db).await.unwrap();
    assert_eq!(
        after[..before.len()],
        before[..],
        "the log before the move is intact"
    );
    corium::transact(address, db, "after-the-move", &[])
        .await
        .expect("a write after the move");
    let log = corium::log(address, db).await.unwrap();
    let items: Vec<&String> = log.iter().flat_map(|(_, names)| names).collect();
    let before_items: usize = before.iter().map(|(_, names)| names.len()).sum();
    assert_eq!(
        items.len(),
        before_items + 1,
        "every write once, then the new one"
    );
}

async fn handoff_promotes_in_place(backend: Backend) {
    let (fleet, address, owner, standby) = written(backend, &[], "hot").await;
    await_following(&fleet, standby, &address, "hot").await;
    let before = corium::log(&address, "hot").await.unwrap();
    let moved = fleet.handoff(owner, "hot", standby).await.expect("handoff");
    assert_eq!(moved.to_node_id, fleet.nodes[standby].id);
    let target = counts(&fleet, standby).await;
    assert_eq!(
        (target.taken, target.refused),
        (1, 0),
        "the target opened the database from its hot standby: {}",
        fleet.logs()
    );
    assert_eq!(target.followed, 0, "it follows nothing once it owns the database");
    assert_every_write(&address, "hot", &before).await;
    // The node that let it go is its first standby now, and follows at once.
    await_following(&fleet, owner, &address, "hot").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_promotes_the_hot_standby_in_place() {
    handoff_promotes_in_place(Backend::Filesystem).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_promotes_the_hot_standby_in_place_on_postgres() {
    let base = std::env::var("CORIUM_FLEET_TEST_PG_URL").expect(
        "CORIUM_FLEET_TEST_PG_URL is not set: run the suite with `make test`, which starts PostgreSQL",
    );
    handoff_promotes_in_place(Backend::postgres(&base)).await;
}

/// SIGKILL of the owner: the first standby takes the database over from
/// the value it follows, and every acknowledged write is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_after_a_crash_promotes_the_hot_standby() {
    let (mut fleet, address, owner, standby) = written(Backend::Filesystem, &[], "crash").await;
    await_following(&fleet, standby, &address, "crash").await;
    let before = corium::log(&address, "crash").await.unwrap();
    fleet.nodes[owner].kill();
    corium_fleet_tests::eventually(Duration::from_secs(30), "the standby takes over", async || {
        let now = counts(&fleet, standby).await;
        if now.taken == 1 {
            Ok(())
        } else {
            Err(fleet.with_logs(format!("{now:?}")))
        }
    })
    .await;
    assert_eq!(counts(&fleet, standby).await.refused, 0);
    assert_every_write(&address, "crash", &before).await;
}

/// A hot standby's value that does not fit the log (the fault seam makes
/// every offer diverge at its basis, as one that applied a deposed writer's
/// unacknowledged append would): Corium refuses it after winning the lease,
/// the open recovers from storage, and the database holds exactly what it
/// held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_standby_value_that_does_not_fit_is_refused_and_the_open_recovers_from_storage() {
    let (fleet, address, owner, standby) = written_with_env(
        Backend::Filesystem,
        &[],
        &[(corium_fleet_faults::env::WARM_START, "refuse")],
        "unfit",
    )
    .await;
    await_following(&fleet, standby, &address, "unfit").await;
    let before = corium::log(&address, "unfit").await.unwrap();
    fleet.handoff(owner, "unfit", standby).await.expect("handoff");
    let target = counts(&fleet, standby).await;
    assert_eq!(
        (target.taken, target.refused),
        (0, 1),
        "the target was offered the value and refused it: {}",
        fleet.logs()
    );
    assert_every_write(&address, "unfit", &before).await;
}

/// `--hot-standbys 0`: nothing is followed, and a handoff recovers from
/// storage as before (the counters stay at zero).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_hot_standbys_off_a_handoff_recovers_from_storage() {
    let (fleet, address, owner, standby) =
        written(Backend::Filesystem, &["--hot-standbys", "0"], "cold").await;
    let before = corium::log(&address, "cold").await.unwrap();
    fleet.handoff(owner, "cold", standby).await.expect("handoff");
    assert_eq!(counts(&fleet, standby).await, Counts::default());
    assert_every_write(&address, "cold", &before).await;
}

/// A followed database still goes idle: the hot standby's stream neither
/// keeps it open nor wakes it once evicted (the owner answers `NotOwner`
/// for a database it does not have open), so it ends cold on both nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_database_is_still_evicted_when_idle_and_stays_cold() {
    let (fleet, address, owner, standby) =
        written(Backend::Filesystem, &["--idle-evict-after-ms", "1500"], "idle").await;
    await_following(&fleet, standby, &address, "idle").await;
    corium_fleet_tests::eventually(
        Duration::from_secs(20),
        "the idle database is evicted",
        async || {
            let view = corium::placement(&fleet.nodes[owner].endpoint(), "idle").await;
            if view.lease_expires_unix_ms == 0 {
                Ok(())
            } else {
                Err(fleet.with_logs(format!("{view:?}")))
            }
        },
    )
    .await;
    // Two registry periods and more: the follower has been told the owner
    // let it go, and nothing woke the database meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let view = corium::placement(&fleet.nodes[owner].endpoint(), "idle").await;
    assert_eq!(view.lease_expires_unix_ms, 0, "still cold: {view:?}");
    for node in [owner, standby] {
        let (_, text) = http_get(fleet.nodes[node].admin, "/metrics")
            .await
            .expect("metrics");
        assert!(text.contains("\ncorium_fleet_databases_owned 0\n"), "{text}");
    }
    assert_eq!(
        counts(&fleet, standby).await.followed,
        0,
        "nothing followed once it is cold"
    );
}

/// A `NotOwner` from the database's first standby carries the basis its
/// hot standby has applied (`last_basis_t`: what the answering node knows
/// durable), so a caller learns how far the owner has got without asking
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_not_owner_from_the_first_standby_carries_the_basis_it_has_applied() {
    let db = "basis-hinted";
    let (fleet, address, owner, standby) = written(Backend::Filesystem, &[], db).await;
    await_following(&fleet, standby, &address, db).await;
    let last = corium::transact(&address, db, "the-last", &[])
        .await
        .unwrap()
        .basis_t;
    let hinted = |node: usize| {
        let endpoint = fleet.nodes[node].endpoint();
        async move {
            let mut client = corium_protocol::pb::transactor_client::TransactorClient::new(
                corium::channel(&endpoint).await,
            );
            let status = client
                .status(corium_protocol::pb::StatusRequest { db: db.to_owned() })
                .await
                .expect_err("not the owner");
            corium_fleet_wire::not_owner::from_status(&status)
                .unwrap_or_else(|| panic!("a typed NotOwner: {status:?}"))
        }
    };
    corium_fleet_tests::eventually(
        Duration::from_secs(10),
        "the standby's NotOwner names the last basis",
        async || {
            let detail = hinted(standby).await;
            if detail.last_basis_t >= last {
                Ok(())
            } else {
                Err(format!("last_basis_t {} < {last}", detail.last_basis_t))
            }
        },
    )
    .await;
    assert_ne!(owner, standby, "the answer came from another node than the owner");
}
