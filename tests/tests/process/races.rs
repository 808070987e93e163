//! Catalog races over real processes (issue 51, item 7): forks into one
//! target at once, a delete racing an activation and a handoff of the same
//! database, and creates of one name at once. Each round asserts what a
//! lost race would leave behind: two copies, a stray reservation, a lease
//! still held, a database that answers after it was deleted, a second
//! `created: true`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corium_fleet_tests::corium::{self, channel, placement};
use corium_fleet_tests::{Backend, Fleet, eventually};
use corium_protocol::pb;
use corium_protocol::pb::catalog_client::CatalogClient;
use corium_protocol::pb::transactor_client::TransactorClient;
use corium_store::RootStore as _;

/// The fleet's shared filesystem store, opened beside its nodes.
async fn store(fleet: &Fleet) -> Arc<dyn corium_store::FullStore> {
    corium_fleet_store::open(
        &corium_fleet_store::Storage::Filesystem,
        &fleet.path("data"),
        Duration::from_secs(10),
    )
    .await
    .expect("the fleet's store opens")
}

/// The databases `ListDatabases` names through `address`.
async fn listed(address: &str) -> Vec<String> {
    CatalogClient::new(channel(address).await)
        .list_databases(pb::ListDatabasesRequest {})
        .await
        .expect("ListDatabases")
        .into_inner()
        .dbs
}

/// `ForkDatabase` of `source` into `target` through `address`, on a
/// connection of its own.
async fn fork(address: &str, source: &str, target: &str) -> Result<pb::ForkDatabaseResponse, tonic::Status> {
    CatalogClient::new(channel(address).await)
        .fork_database(pb::ForkDatabaseRequest {
            db: source.to_owned(),
            target: target.to_owned(),
            as_of_t: 0,
        })
        .await
        .map(tonic::Response::into_inner)
}

/// `DeleteDatabase` of `db` through `address`.
async fn delete(address: &str, db: &str) -> Result<pb::DeleteDatabaseResponse, tonic::Status> {
    CatalogClient::new(channel(address).await)
        .delete_database(pb::DeleteDatabaseRequest { db: db.to_owned() })
        .await
        .map(tonic::Response::into_inner)
}

/// Two database names whose top candidates differ, so forks of them run
/// in two processes.
fn sources_on_two_nodes(fleet: &Fleet) -> (String, String) {
    let names: Vec<String> = (0..64).map(|i| format!("fork-race-src-{i}")).collect();
    let first = &names[0];
    let top = fleet.candidates(first)[0];
    let second = names
        .iter()
        .find(|name| fleet.candidates(name)[0] != top)
        .expect("some name has another top candidate");
    (first.clone(), second.clone())
}

/// Transactions in each fork source: enough that reading the source's log
/// (Corium's fork does it between checking the target is free and writing
/// its log) takes a while — the window the reservation closes.
const RECORDS: usize = 120;

/// Forks into one target at once. The ingress sends a fork to its source's
/// owner, so two forks of one source meet in one process (where Corium's
/// per-process fork lock would serialise them anyway), and forks of two
/// sources owned by two nodes meet only in storage: the reservation root
/// `fleet-fork:<target>` is what keeps the second from writing the target's
/// log while the first does. Each round races two forks of one source and
/// one of another source (another owner) into a fresh target.
///
/// Exactly one fork answers `created: true`; every other is refused with
/// `ABORTED` (the target is reserved) or `ALREADY_EXISTS` (the winner had
/// finished), naming the target — neither a code a stock client resends.
/// The target is the winner's copy: its log is the winning source's log at
/// fork time, transaction for transaction. No reservation root is left,
/// `ListDatabases` names the target once, a later fork into it is
/// `ALREADY_EXISTS` and changes nothing, and both sources and the target
/// take writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_into_one_target_at_once_leave_exactly_the_winners_copy() {
    let (fleet, address) = Fleet::builder(Backend::Filesystem).start_with_ingress().await;
    let (one, other) = sources_on_two_nodes(&fleet);
    let owners = (fleet.candidates(&one)[0], fleet.candidates(&other)[0]);
    assert_ne!(owners.0, owners.1);
    for source in [&one, &other] {
        assert!(corium::create(&address, source).await.unwrap(), "create {source}");
    }
    tokio::join!(
        corium::transact_items(&address, &one, "one", RECORDS),
        corium::transact_items(&address, &other, "other", RECORDS),
    );
    let logs = [
        corium::log(&address, &one).await.unwrap(),
        corium::log(&address, &other).await.unwrap(),
    ];
    let store = store(&fleet).await;
    let mut aborted = 0;
    for round in 0..3 {
        let target = format!("fork-race-dst-{round}");
        let started = Instant::now();
        let (a, b, c) = tokio::join!(
            fork(&address, &one, &target),
            fork(&address, &one, &target),
            fork(&address, &other, &target),
        );
        let answers = [(&one, &logs[0], a), (&one, &logs[0], b), (&other, &logs[1], c)];
        let summary: Vec<String> = answers
            .iter()
            .map(|(source, _, answer)| match answer {
                Ok(response) => format!(
                    "{source}: created={} basis_t={}",
                    response.created, response.basis_t
                ),
                Err(status) => format!("{source}: {:?} {}", status.code(), status.message()),
            })
            .collect();
        let what = format!("round {round} ({:?}): {summary:#?}", started.elapsed());
        eprintln!("{what}");
        let winners: Vec<_> = answers.iter().filter(|(_, _, answer)| answer.is_ok()).collect();
        assert_eq!(winners.len(), 1, "{}", fleet.with_logs(&what));
        let (source, source_log, Ok(won)) = winners[0] else {
            unreachable!()
        };
        assert!(won.created, "{what}");
        assert_eq!(
            won.basis_t,
            source_log.last().unwrap().0,
            "{what}: forked at the source's basis"
        );
        for (_, _, answer) in &answers {
            let Err(status) = answer else { continue };
            assert!(
                matches!(status.code(), tonic::Code::Aborted | tonic::Code::AlreadyExists),
                "{}",
                fleet.with_logs(&what)
            );
            assert!(status.message().contains(&format!("{target:?}")), "{what}");
            if status.code() == tonic::Code::Aborted {
                aborted += 1;
            }
        }
        // The target is the winner's copy, nothing of a loser's in it.
        let copied = corium::log(&address, &target).await.unwrap();
        assert_eq!(&copied, *source_log, "{what}: {target} is a copy of {source}");
        // The loser leaves nothing behind.
        let reservations = store.list_roots("fleet-fork:").await.unwrap();
        assert!(reservations.is_empty(), "{what}: {reservations:?}");
        let dbs = listed(&address).await;
        assert_eq!(
            dbs.iter().filter(|db| **db == target).count(),
            1,
            "{what}: {dbs:?}"
        );
        // A fork into it now, of either source, is refused and changes
        // nothing.
        for later in [&one, &other] {
            let status = fork(&address, later, &target).await.unwrap_err();
            assert_eq!(status.code(), tonic::Code::AlreadyExists, "{what}: {status:?}");
        }
        assert_eq!(corium::log(&address, &target).await.unwrap(), copied, "{what}");
        let written = corium::transact(&address, &target, &format!("{target}-own"), &[])
            .await
            .unwrap_or_else(|status| panic!("{what}: {status:?}"));
        assert_eq!(written.basis_before, won.basis_t, "{what}");
    }
    // The sources are untouched and still take writes.
    for (source, log) in [(&one, &logs[0]), (&other, &logs[1])] {
        assert_eq!(&corium::log(&address, source).await.unwrap(), log, "{source}");
        corium::transact(&address, source, &format!("{source}-after"), &[])
            .await
            .unwrap_or_else(|status| panic!("{source}: {status:?}"));
    }
    eprintln!("forks refused ABORTED (reserved) over the rounds: {aborted} of 6");
}

/// What one racer of [`a_delete_racing_activations_and_a_handoff_ends_deleted_with_no_lease_held`] saw.
type Seen = Vec<String>;

/// Writes to `db` through `address` until one is refused `NOT_FOUND` (the
/// delete won) or `within` passes; each write activates the database where
/// it lands if it is cold. Each gives up after `within` too: a write whose
/// commit the delete cut off has an unknown outcome, which the ingress
/// tries to settle until the call's deadline.
async fn keep_writing(address: String, db: String, within: Duration) -> Seen {
    let mut seen = Vec::new();
    let deadline = Instant::now() + within;
    let mut client = TransactorClient::new(channel(&address).await);
    let mut i = 0;
    while Instant::now() < deadline {
        i += 1;
        let call = corium::transact_call(&db, &format!("w-{i}"), within);
        match client.transact(call).await.map(tonic::Response::into_inner) {
            Ok(response) => seen.push(format!("ok t={}", response.basis_t)),
            Err(status) if status.code() == tonic::Code::NotFound => {
                seen.push("NOT_FOUND".to_owned());
                break;
            }
            Err(status) => seen.push(format!("{:?} {}", status.code(), status.message())),
        }
    }
    seen
}

/// Hands `db` from whoever owns it to another candidate, asking the top
/// candidate first and following `NotOwner` answers, until one handoff
/// happens, the database is gone, or `within` passes.
async fn keep_handing_off(fleet: &Fleet, db: &str, within: Duration) -> Seen {
    let mut seen = Vec::new();
    let deadline = Instant::now() + within;
    let candidates = fleet.candidates(db);
    let mut from = candidates[0];
    while Instant::now() < deadline {
        let to = fleet.other_candidate(db, from).expect("two candidates");
        match fleet.handoff(from, db, to).await {
            Ok(_) => {
                seen.push(format!(
                    "handed {} -> {}",
                    fleet.nodes[from].id, fleet.nodes[to].id
                ));
                break;
            }
            Err(status) if status.code() == tonic::Code::NotFound => {
                seen.push("NOT_FOUND".to_owned());
                break;
            }
            Err(status) => {
                let holder = corium_fleet_wire::not_owner::from_status(&status)
                    .map(|hint| hint.owner_id)
                    .filter(|owner| !owner.is_empty());
                seen.push(format!("{:?} {}", status.code(), status.message()));
                from = holder.map_or(from, |owner| fleet.index(&owner));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    seen
}

/// A `DeleteDatabase` racing writes that activate the database (through
/// the ingress, and straight at its second candidate, as a client with a
/// stale route would) and a handoff of it to another candidate. Rounds
/// alternate between a cold database (evicted for idleness: the delete and
/// the writes each activate it) and a hot one (owned: the handoff moves
/// it under the delete).
///
/// Afterwards — once the delete has answered `deleted: true` (a delete
/// refused mid-race is sent again, as a client would) — the database is
/// gone: `ListDatabases` does not name it, a write through the ingress
/// and straight at every candidate is `NOT_FOUND`, no candidate reports a
/// live owner, and its catalog entry and lease root (`meta:`/`db:`) are
/// gone from storage. Creating the name again makes an empty database:
/// nothing of the deleted one comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_racing_activations_and_a_handoff_ends_deleted_with_no_lease_held() {
    let (fleet, address) = Fleet::builder(Backend::Filesystem)
        .node_flags(&["--idle-evict-after-ms", "500"])
        .start_with_ingress()
        .await;
    let store = store(&fleet).await;
    for round in 0..6 {
        let cold = round % 2 == 0;
        let db = format!("delete-race-{round}");
        let candidates = fleet.candidates(&db);
        assert!(corium::create(&address, &db).await.unwrap(), "create {db}");
        corium::transact_items(&address, &db, "before", 3).await;
        if cold {
            eventually(
                Duration::from_secs(20),
                format!("{db} evicted for idleness"),
                async || {
                    let view = placement(&fleet.nodes[candidates[0]].endpoint(), &db).await;
                    if view.lease_expires_unix_ms == 0 {
                        Ok(())
                    } else {
                        Err(format!("{view:?}"))
                    }
                },
            )
            .await;
        }
        let race = Duration::from_secs(2);
        let started = Instant::now();
        let straight = fleet.nodes[candidates[1]].endpoint();
        let (deleted, through_ingress, straight_at_second, handoff) = tokio::join!(
            delete(&address, &db),
            keep_writing(address.clone(), db.clone(), race),
            keep_writing(straight, db.clone(), race),
            keep_handing_off(&fleet, &db, race),
        );
        let mut what = format!(
            "round {round} ({}): delete {deleted:?}\nwrites through the ingress {through_ingress:?}\n\
             writes at {} {straight_at_second:?}\nhandoff {handoff:?}",
            if cold { "cold" } else { "hot" },
            fleet.nodes[candidates[1]].id,
        );
        let answer = settle_delete(&fleet, &address, &db, deleted, &mut what).await;
        write!(
            what,
            "\nthe delete finally answered {answer:?} ({:?} into the round)",
            started.elapsed()
        )
        .unwrap();
        eprintln!("{what}");
        assert_gone(&fleet, store.as_ref(), &address, &db, &what).await;
    }
}

/// Sends a delete refused mid-race (the owner moved under it) again, as a
/// client would, until it answers; a later attempt may find the database
/// gone when an earlier one's answer was lost on the way. The last answer.
async fn settle_delete(
    fleet: &Fleet,
    address: &str,
    db: &str,
    first: Result<pb::DeleteDatabaseResponse, tonic::Status>,
    what: &mut String,
) -> Result<pb::DeleteDatabaseResponse, tonic::Status> {
    let mut answer = first;
    for attempt in 1.. {
        match &answer {
            Ok(response) if response.deleted => break,
            Ok(_) if attempt > 1 => break,
            Err(status) if status.code() == tonic::Code::NotFound && attempt > 1 => break,
            Ok(_) => panic!("{}", fleet.with_logs(format!("{what}: deleted: false"))),
            Err(status) if status.code() == tonic::Code::NotFound => {
                panic!(
                    "{}",
                    fleet.with_logs(format!("{what}: NOT_FOUND before any delete"))
                )
            }
            Err(status) => {
                assert!(
                    attempt < 20,
                    "{}",
                    fleet.with_logs(format!("{what}: the last delete {status:?}"))
                );
                write!(what, "\ndelete again after {status:?}").unwrap();
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        answer = delete(address, db).await;
    }
    answer
}

/// Asserts that deleted `db` is gone and stays gone: nothing a racer
/// started brings it back or keeps a lease on it (a stale activation would
/// renew one), no node serves it, and a database created under its name
/// again starts empty.
async fn assert_gone(
    fleet: &Fleet,
    store: &dyn corium_store::FullStore,
    address: &str,
    db: &str,
    what: &str,
) {
    let candidates = fleet.candidates(db);
    let meta = format!("meta:{db}");
    let root = format!("db:{db}");
    eventually(
        fleet.lease_ttl * 4,
        format!("{db}: nothing holds it"),
        async || {
            let mut left = Vec::new();
            for name in [&meta, &root] {
                if let Some(bytes) = store.get_root(name).await.unwrap() {
                    left.push(format!("{name}: {}", String::from_utf8_lossy(&bytes)));
                }
            }
            for &candidate in &candidates {
                let view = placement(&fleet.nodes[candidate].endpoint(), db).await;
                if !view.owner_id.is_empty() || view.lease_expires_unix_ms != 0 {
                    left.push(format!("{}: {view:?}", fleet.nodes[candidate].id));
                }
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(fleet.with_logs(format!("{what}\nleft: {left:#?}")))
            }
        },
    )
    .await;
    assert!(!listed(address).await.iter().any(|listed| listed == db), "{what}");
    let status = corium::transact(address, db, "after", &[]).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound, "{what}: {status:?}");
    for &candidate in &candidates {
        let status = corium::transact(&fleet.nodes[candidate].endpoint(), db, "after", &[])
            .await
            .unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::NotFound,
            "{what}: at {}: {status:?}",
            fleet.nodes[candidate].id
        );
    }
    // Nothing of the deleted database is left to come back. (Through the
    // ingress that just cached it as unknown: the create forgets that.)
    assert!(corium::create(address, db).await.unwrap(), "{what}: recreate");
    let fresh = corium::transact(address, db, "fresh", &[])
        .await
        .unwrap_or_else(|status| panic!("{}", fleet.with_logs(format!("{what}: recreated: {status:?}"))));
    let log = corium::log(address, db).await.unwrap();
    let names: BTreeSet<&String> = corium::names(&log).into_iter().collect();
    assert_eq!(
        names,
        BTreeSet::from([&"fresh".to_owned()]),
        "{what}: the recreated database holds only its own write ({fresh:?}): {log:?}"
    );
}

/// Creates of one name at once: through two ingresses (each sends a
/// create to the name's top candidate, so they meet in one process), and
/// straight at its top two candidates (as two ingresses with different
/// views of which candidate is up would; they meet only in storage).
/// Exactly one answers `created: true`; the other is `ALREADY_EXISTS`
/// (design note 0005: the fleet answers a status where stock Corium says
/// `created: false`), and the database works through both ingresses with
/// both writes in its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_of_one_name_at_once_create_it_once() {
    let mut fleet = Fleet::builder(Backend::Filesystem).start().await;
    fleet.start_ingresses(2, &[]).await;
    let addresses = fleet.ingress_endpoints();
    for round in 0..16 {
        let db = format!("create-race-{round}");
        let candidates = fleet.candidates(&db);
        let (at, way) = if round % 2 == 0 {
            (addresses.clone(), "through two ingresses")
        } else {
            (
                vec![
                    fleet.nodes[candidates[0]].endpoint(),
                    fleet.nodes[candidates[1]].endpoint(),
                ],
                "straight at two candidates",
            )
        };
        let (first, second) = tokio::join!(corium::create(&at[0], &db), corium::create(&at[1], &db));
        let what = format!("{db} {way}: {first:?} / {second:?}");
        let created = [&first, &second]
            .iter()
            .filter(|answer| matches!(answer, Ok(true)))
            .count();
        assert_eq!(created, 1, "{}", fleet.with_logs(&what));
        for answer in [&first, &second] {
            match answer {
                Ok(true) => {}
                Err(status) if status.code() == tonic::Code::AlreadyExists => {
                    assert!(status.message().contains(&format!("{db:?}")), "{what}");
                }
                other => panic!(
                    "{}",
                    fleet.with_logs(format!("{what}: the loser answered {other:?}"))
                ),
            }
        }
        for (i, address) in addresses.iter().enumerate() {
            corium::transact(address, &db, &format!("via-{i}"), &[])
                .await
                .unwrap_or_else(|status| panic!("{what}: via ingress {i}: {status:?}"));
        }
        let log = corium::log(&addresses[0], &db).await.unwrap();
        assert_eq!(
            corium::names(&log),
            [&"via-0".to_owned(), &"via-1".to_owned()],
            "{what}"
        );
    }
}
