//! Exactly-once `Transact` with `corium-request-id`, over real processes:
//! replays return the first answer byte for byte, reuse with other bytes is
//! refused, concurrent duplicates commit once, and the record survives owner
//! crashes (including one between the log append and the reply), failover,
//! handoffs and restarts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use corium_fleet_proto::fleet::HandoffRequest;
use corium_fleet_tests::corium::{self, channel};
use corium_fleet_tests::{Backend, Fleet, eventually, http_get, metric};
use corium_fleet_wire::metadata::REQUEST_ID;
use corium_protocol::pb;

const TTL: Duration = Duration::from_millis(1500);

/// The statuses a caller retries with the same request id.
fn retryable(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unavailable | tonic::Code::FailedPrecondition | tonic::Code::DeadlineExceeded
    )
}

/// Transacts item `name` into `db` through `address` under request id `id`.
async fn with_id(
    address: &str,
    db: &str,
    name: &str,
    id: &str,
) -> Result<pb::TransactResponse, tonic::Status> {
    corium::transact(address, db, name, &[(REQUEST_ID, id)]).await
}

/// Retries `with_id` on retryable statuses until it succeeds (bounded).
async fn until_ok(address: &str, db: &str, name: &str, id: &str, fleet: &Fleet) -> pb::TransactResponse {
    eventually(
        Duration::from_secs(40),
        format!("{db} {id}: success"),
        async || {
            with_id(address, db, name, id).await.map_err(|status| {
                assert!(retryable(status.code()), "{db} {id}: not retryable: {status:?}");
                fleet.with_logs(format!("{status:?}"))
            })
        },
    )
    .await
}

/// `t`s of the log of `db` carrying item `name`.
async fn ts_of(address: &str, db: &str, name: &str) -> Vec<u64> {
    corium::log(address, db)
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, names)| names.iter().any(|n| n == name))
        .map(|(t, _)| t)
        .collect()
}

fn tempid_keys(response: &pb::TransactResponse) -> Vec<String> {
    match corium_protocol::codec::decode_edn(&response.tempids).unwrap() {
        corium_query::edn::Edn::Map(pairs) => pairs
            .into_iter()
            .map(|(key, _)| match key {
                corium_query::edn::Edn::Str(key) => key,
                other => panic!("tempid key {other:?}"),
            })
            .collect(),
        other => panic!("tempids {other:?}"),
    }
}

/// `node`'s `/metrics` has `series` at `expected`.
async fn assert_metric(node: &corium_fleet_tests::Node, series: &str, expected: f64) {
    let (_, metrics) = http_get(node.admin, "/metrics").await.unwrap();
    assert_eq!(metric(&metrics, series), Some(expected), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// One scenario, step by step: long, and clearer whole.
#[allow(clippy::too_many_lines)]
async fn request_ids_commit_once_replay_the_first_answer_and_survive_failover() {
    for backend in Backend::all() {
        let db = "once";
        let (mut fleet, address) = Fleet::builder(backend.clone())
            .lease_ttl(TTL)
            .start_with_database(db)
            .await;
        corium::transact(&address, db, "plain", &[]).await.unwrap();

        let id = uuid::Uuid::new_v4().to_string();
        let first = with_id(&address, db, "a", &id).await.unwrap();
        let again = with_id(&address, db, "a", &id).await.unwrap();
        assert_eq!(
            first, again,
            "{backend:?}: a replay is the first answer, byte for byte"
        );
        assert_eq!(
            tempid_keys(&first),
            ["x"],
            "{backend:?}: the caller's tempids only"
        );
        assert_eq!(
            ts_of(&address, db, "a").await,
            [first.basis_t],
            "{backend:?}: committed once"
        );

        // Same id, other bytes: refused, nothing committed.
        let before = corium::log(&address, db).await.unwrap().len();
        let reused = with_id(&address, db, "b", &id).await.unwrap_err();
        assert_eq!(reused.code(), tonic::Code::InvalidArgument, "{reused:?}");
        assert!(reused.message().contains("already used"), "{reused:?}");
        let conflicts = "corium_fleet_request_id_conflicts_total";
        assert_metric(&fleet.nodes[fleet.candidates(db)[0]], conflicts, 1.0).await;
        // Malformed ids: refused before anything is validated.
        for bad in ["", "not-a-uuid", &"7".repeat(60)] {
            let status = with_id(&address, db, "c", bad).await.unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{bad:?}: {status:?}");
        }
        assert_eq!(
            corium::log(&address, db).await.unwrap().len(),
            before,
            "{backend:?}: nothing committed"
        );
        // An id on a call that is not a Transact is ignored.
        let mut client = pb::transactor_client::TransactorClient::new(channel(&address).await);
        let mut status_request = tonic::Request::new(pb::StatusRequest { db: db.to_owned() });
        status_request
            .metadata_mut()
            .insert(REQUEST_ID, "not-a-uuid".parse().unwrap());
        client.status(status_request).await.unwrap();

        // Concurrent duplicates: one commit, every caller the same answer.
        let concurrent = uuid::Uuid::new_v4().to_string();
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let (address, id) = (address.clone(), concurrent.clone());
                tokio::spawn(async move { with_id(&address, "once", "together", &id).await })
            })
            .collect();
        let mut answers = Vec::new();
        for call in calls {
            answers.push(call.await.unwrap().unwrap());
        }
        assert!(
            answers.windows(2).all(|pair| pair[0] == pair[1]),
            "{backend:?}: {answers:?}"
        );
        assert_eq!(ts_of(&address, db, "together").await, [answers[0].basis_t]);

        // The owner dies; its successor (fresh process state, no cache)
        // still knows both ids from the database itself.
        let owner = fleet.candidates(db)[0];
        fleet.nodes[owner].kill();
        until_ok(
            &address,
            db,
            "after-kill",
            &uuid::Uuid::new_v4().to_string(),
            &fleet,
        )
        .await;
        assert_eq!(
            with_id(&address, db, "a", &id).await.unwrap(),
            first,
            "{backend:?}: after failover"
        );
        assert_eq!(
            with_id(&address, db, "together", &concurrent).await.unwrap(),
            answers[0]
        );
        let successor = fleet.candidates(db)[1];
        assert_metric(
            &fleet.nodes[successor],
            "corium_fleet_request_id_replays_total",
            2.0,
        )
        .await;
        // Each replay read its record from the records the takeover kept
        // (right after its open) or with one bulk read of the log, never one
        // storage read per record (Corium reads the whole log for it) —
        // where the log is roots; the filesystem store keeps it in local
        // files.
        let bulk_reads = if matches!(backend, Backend::Filesystem) {
            0
        } else {
            2
        };
        let (_, metrics) = http_get(fleet.nodes[successor].admin, "/metrics").await.unwrap();
        // Counters: whole numbers.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let read =
            |series: &str| metric(&metrics, series).unwrap_or_else(|| panic!("{series}:\n{metrics}")) as u64;
        assert_eq!(
            read("corium_fleet_whole_log_reads_total") + read("corium_fleet_whole_log_reads_from_kept_total"),
            bulk_reads,
            "{metrics}"
        );
        // Restarted, the old owner does not preempt; a handoff back and the
        // record still holds.
        fleet.nodes[owner].restart().await;
        let mut admin = corium_fleet_tests::corium::admin(&fleet.nodes[successor].endpoint()).await;
        admin
            .handoff(HandoffRequest {
                database: db.to_owned(),
                target_node_id: fleet.nodes[owner].id.clone(),
            })
            .await
            .unwrap();
        assert_eq!(
            with_id(&address, db, "a", &id).await.unwrap(),
            first,
            "{backend:?}: after handoff"
        );
        assert_eq!(ts_of(&address, db, "a").await, [first.basis_t]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_dying_between_append_and_reply_is_retried_with_the_same_id_and_commits_once() {
    for backend in Backend::all() {
        let id = uuid::Uuid::new_v4().to_string();
        let db = "crashy";
        let (fleet, address) = Fleet::builder(backend.clone())
            .lease_ttl(TTL)
            .env(&[(corium_fleet_faults::env::CRASH_AFTER_COMMIT, &id)])
            .start_with_database(db)
            .await;
        corium::transact(&address, db, "before", &[]).await.unwrap();
        let owner = fleet.candidates(db)[0];

        // The owner commits, then dies before answering: the ingress sends
        // the call again with the same id until the successor serves it, so
        // the caller's first call gets the committed answer.
        let answer = with_id(&address, db, "in-flight", &id).await.unwrap();
        assert!(
            fleet.nodes[owner].log().contains("aborting after the commit"),
            "{}",
            fleet.nodes[owner].log()
        );
        let ts = ts_of(&address, db, "in-flight").await;
        assert_eq!(ts, [answer.basis_t], "{backend:?}: committed exactly once");
        assert_eq!(answer.basis_before + 1, answer.basis_t);
        assert_eq!(tempid_keys(&answer), ["x"]);
        assert_eq!(with_id(&address, db, "in-flight", &id).await.unwrap(), answer);
        let (_, metrics) = http_get(fleet.ingresses[0].admin, "/metrics").await.unwrap();
        assert!(
            metric(&metrics, "corium_fleet_ingress_ambiguous_retries_total")
                .is_some_and(|retries| retries >= 1.0),
            "{backend:?}: the ingress retried the ambiguous failure: {metrics}"
        );
    }
}

/// One acknowledged write: database, item, request id, the answer.
type Acked = (String, String, String, pb::TransactResponse);

/// Client `client` of the thousand-transaction test: 63 items into `db`,
/// each under its own request id, retried through a different ingress each
/// attempt (backing off up to 500 ms) for up to a minute. Returns what was
/// acknowledged and how many items needed a retry.
async fn write_through_ingresses(client: usize, addresses: &[String], db: &str) -> (Vec<Acked>, usize) {
    let mut acked = Vec::new();
    let mut retried = 0usize;
    for n in 0..63 {
        let id = uuid::Uuid::new_v4().to_string();
        let name = format!("c{client}-{n}");
        let deadline = Instant::now() + Duration::from_mins(1);
        let mut attempt = 0usize;
        let response = loop {
            // A random ingress per attempt.
            let address = &addresses[(client + n + attempt) % addresses.len()];
            match with_id(address, db, &name, &id).await {
                Ok(response) => break response,
                Err(status) => {
                    assert!(retryable(status.code()), "{db} {name}: {status:?}");
                    assert!(Instant::now() < deadline, "{db} {name}: {status:?}");
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(100 * attempt.min(5) as u64)).await;
                }
            }
        };
        if attempt > 0 {
            retried += 1;
        }
        acked.push((db.to_owned(), name, id, response));
    }
    (acked, retried)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_transactions_through_two_ingresses_survive_kills_and_handoffs_exactly_once() {
    thousand_transactions(Backend::all().remove(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_transactions_through_two_ingresses_survive_kills_and_handoffs_exactly_once_on_s3() {
    thousand_transactions(Backend::s3_from_env()).await;
}

/// 16 clients write 63 items each (1,008) through two ingresses while an
/// owner is killed, a database handed off and a node drained; every item
/// commits once, at its acknowledged t, and every id replays its answer.
async fn thousand_transactions(backend: Backend) {
    let mut fleet = Fleet::builder(backend.clone()).lease_ttl(TTL).start().await;
    fleet.start_ingresses(2, &[]).await;
    let addresses = fleet.ingress_endpoints();
    let dbs: Vec<String> = (0..4).map(|i| format!("busy-{i}")).collect();
    for db in &dbs {
        assert!(corium::create(&addresses[0], db).await.unwrap());
    }
    let started = Instant::now();
    let clients: Vec<_> = (0..16)
        .map(|client| {
            let addresses = addresses.clone();
            let db = dbs[client % dbs.len()].clone();
            tokio::spawn(async move { write_through_ingresses(client, &addresses, &db).await })
        })
        .collect();
    // Chaos while they run: SIGKILL an owner, hand a database off, SIGTERM
    // (drain) another node, bring everything back.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let victim = fleet.candidates(&dbs[0])[0];
    fleet.nodes[victim].kill();
    tokio::time::sleep(TTL * 3).await;
    fleet.nodes[victim].restart().await;
    let db1 = &dbs[1];
    let [holder, other] = fleet.candidates(db1)[..] else {
        panic!()
    };
    let placement = corium::placement(&fleet.nodes[other].endpoint(), db1).await;
    let (from, to) = if placement.owner_id == fleet.nodes[holder].id {
        (holder, other)
    } else {
        (other, holder)
    };
    let handed = corium_fleet_tests::corium::admin(&fleet.nodes[from].endpoint())
        .await
        .handoff(HandoffRequest {
            database: db1.clone(),
            target_node_id: fleet.nodes[to].id.clone(),
        })
        .await;
    eprintln!("handoff of {db1}: {handed:?}");
    let drained = fleet.candidates(&dbs[2])[0];
    fleet.nodes[drained].terminate().await;
    fleet.nodes[drained].restart().await;

    let mut acked = Vec::new();
    let mut retried = 0;
    for client in clients {
        let (mut client_acked, client_retried) = client.await.unwrap();
        acked.append(&mut client_acked);
        retried += client_retried;
    }
    eprintln!(
        "{} transactions acknowledged in {:?}, {retried} needed a retry with their id",
        acked.len(),
        started.elapsed()
    );
    assert_eq!(acked.len(), 16 * 63);
    let mut logs = BTreeMap::new();
    for db in &dbs {
        logs.insert(db.clone(), corium::log(&addresses[0], db).await.unwrap());
    }
    for db in &dbs {
        let mut seen = BTreeMap::new();
        for (t, names) in &logs[db] {
            // Item names only (the request record's strings are per-transaction
            // ids, digests and tempid names).
            for name in names
                .iter()
                .filter(|name| name.starts_with('c') && name.contains('-'))
            {
                assert!(
                    seen.insert(name.clone(), *t).is_none(),
                    "{db}: {name} committed twice"
                );
            }
        }
        let ts: Vec<u64> = logs[db].iter().map(|(t, _)| *t).collect();
        assert!(
            ts.windows(2).all(|pair| pair[1] == pair[0] + 1),
            "{db}: gap in {ts:?}"
        );
        for (acked_db, name, _, response) in acked.iter().filter(|entry| &entry.0 == db) {
            assert_eq!(
                seen.get(name),
                Some(&response.basis_t),
                "{acked_db}: {name} at its acknowledged t"
            );
        }
    }
    // Every id, sent again, returns its original answer.
    for (db, name, id, response) in acked.iter().step_by(7) {
        assert_eq!(
            &with_id(&addresses[1], db, name, id).await.unwrap(),
            response,
            "{db} {name}"
        );
    }
}

/// Runs `corium-fleet request-status DB ID --endpoint ADDRESS` and returns
/// its standard output.
fn request_status_cli(address: &str, db: &str, id: &str) -> String {
    let output = std::process::Command::new(corium_fleet_tests::bin_dir().join("corium-fleet"))
        .args(["request-status", db, id, "--endpoint", address])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "request-status: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_status_answers_the_committed_answer_or_fences_the_id_for_good() {
    use corium_fleet_client::{Client, Config, RequestStatus};
    for backend in Backend::all() {
        let db = "asked";
        let (mut fleet, address) = Fleet::builder(backend.clone())
            .lease_ttl(TTL)
            .start_with_database(db)
            .await;
        let sdk = Client::connect(Config::new(&address)).await.unwrap();
        let database = sdk.database(db);

        // Committed: the answer is the first one, byte for byte, through
        // the SDK and the CLI alike.
        let committed_id = uuid::Uuid::new_v4().to_string();
        let first = with_id(&address, db, "asked-a", &committed_id).await.unwrap();
        assert_eq!(
            database.request_status(&committed_id).await.unwrap(),
            RequestStatus::Committed(first.clone()),
            "{backend:?}"
        );
        let printed = request_status_cli(&address, db, &committed_id);
        assert!(
            printed.starts_with("committed") && printed.contains(&format!("t={}", first.basis_t)),
            "{backend:?}: {printed}"
        );

        // Never sent: "not committed", and the id is fenced — a late copy of
        // the request is refused and commits nothing, even after the owner
        // moves.
        let unused = uuid::Uuid::new_v4().to_string();
        let RequestStatus::NotCommitted { fenced_at } = database.request_status(&unused).await.unwrap()
        else {
            panic!("{backend:?}: an unused id is not committed");
        };
        assert!(fenced_at > first.basis_t, "{backend:?}");
        let owner = fleet.candidates(db)[0];
        fleet.nodes[owner].kill();
        let late = until_refused(&address, db, "asked-late", &unused).await;
        assert_eq!(late.code(), tonic::Code::InvalidArgument, "{backend:?}: {late:?}");
        assert!(late.message().contains("fenced"), "{backend:?}: {late:?}");
        assert!(ts_of(&address, db, "asked-late").await.is_empty(), "{backend:?}");
        // Asking again gives the same answer (the marker is durable).
        assert_eq!(
            database.request_status(&unused).await.unwrap(),
            RequestStatus::NotCommitted { fenced_at },
            "{backend:?}"
        );
        let printed = request_status_cli(&address, db, &unused);
        assert!(printed.starts_with("not committed"), "{backend:?}: {printed}");
        // A malformed id is refused.
        assert!(database.request_status("not-a-uuid").await.is_err());
    }
}

/// Sends `with_id` until it is refused with a status that is not retryable.
///
/// # Panics
/// When it commits, or is still answered a retryable status after 40 s.
async fn until_refused(address: &str, db: &str, name: &str, id: &str) -> tonic::Status {
    eventually(
        Duration::from_secs(40),
        format!("{db} {id}: refused with a status that is not retryable"),
        async || match with_id(address, db, name, id).await {
            Ok(response) => panic!("{db} {id}: committed after it was fenced: {response:?}"),
            Err(status) if retryable(status.code()) => Err(format!("{status:?}")),
            Err(status) => Ok(status),
        },
    )
    .await
}
