//! Every answer the fleet can give a `Transact`, checked against the stock
//! clients' retry rules — one row of `docs/design/0009-stock-client-statuses.md`
//! per case below, through the real ingress, with the stock
//! `corium_peer::Connection` from crates.io as the client.
//!
//! One node sits behind a scripted hop (`tests/src/scripted.rs`) that the
//! node advertises, so the ingress routes through it; the hop's script makes
//! each `Transact` attempt misbehave the way the row needs, and counts what
//! reached it: every attempt (the ingress's sends) and every distinct
//! correlation id (`x-request-id`, one per call the client made — how often
//! the stock client sent it again). Two ingresses front the same node: one
//! assigns request ids (the default), one does not (`--assign-request-ids
//! false`). The durable log says how often each transaction committed.

use std::collections::BTreeSet;
use std::time::Duration;

use corium_fleet_tests::corium;
use corium_fleet_tests::scripted::{ScriptedHop, Step};
use corium_fleet_wire::not_owner::{self, Candidate, NotOwner};
use corium_fleet_wire::outcome::{self, Cause};
use corium_peer::{ConnectConfig, Connection, PeerError};

const DB: &str = "statuses";
/// The ingress's deadline for a call with none (stock `Connection` sends none).
const MAX_DEADLINE_MS: &str = "3000";

/// A row's script, made fresh for each run of it.
type Script = fn() -> Vec<Step>;

/// What one row expects.
struct Expect {
    /// Attempts that reached the hop.
    attempts: usize,
    /// Calls the client made (distinct correlation ids): 1 + its resends.
    client_sends: usize,
    /// Whether the client got a success.
    ok: bool,
    /// Times the transaction is in the durable log.
    commits: usize,
}

impl Expect {
    /// The client's one call succeeded after `attempts` at the hop, and the
    /// transaction committed once.
    fn success(attempts: usize) -> Self {
        Self {
            attempts,
            client_sends: 1,
            ok: true,
            commits: 1,
        }
    }

    /// The client's one call reached the hop once and ended in an error,
    /// with the transaction `commits` times in the log.
    fn error(commits: usize) -> Self {
        Self {
            attempts: 1,
            client_sends: 1,
            ok: false,
            commits,
        }
    }
}

/// One ingress to call through: the stock client connected to it and its
/// address.
#[derive(Clone, Copy)]
struct Through<'a> {
    connection: &'a Connection,
    address: &'a str,
}

/// What a row transacts: `forms` at the expected `basis`, asserting `item`
/// (what the durable log is searched for).
struct Transaction {
    item: String,
    forms: Vec<corium_query::edn::Edn>,
    basis: Option<u64>,
}

/// The hop's `NotOwner`: no live owner known, the one candidate listed (as a
/// node answers while a lease moves).
fn not_owner_status(_: Option<&str>) -> tonic::Status {
    not_owner::to_status(&NotOwner {
        database: DB.into(),
        retryable: true,
        candidates: vec![Candidate {
            node_id: "node-1".into(),
            zone: "zone-1".into(),
            endpoint: HOP.get().cloned().unwrap_or_default(),
            rank: 0,
            lacks_storage_key: false,
        }],
        ..NotOwner::default()
    })
}

/// The hop's endpoint, for the scripted `NotOwner`'s candidate.
static HOP: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The owner's typed "outcome unknown" for the request's id (what a node
/// answers when a commit failed after its append may have landed).
fn unknown_status(request_id: Option<&str>) -> tonic::Status {
    outcome::to_status(
        DB,
        request_id,
        Cause::LeaseMoved,
        "post-append fence found a newer lease",
    )
}

/// The owner's refusal of an ingress-assigned id (a database created
/// outside the fleet).
fn unsupported_status(_: Option<&str>) -> tonic::Status {
    outcome::unsupported_status(DB, "it was created outside Corium Fleet")
}

/// How many times `item` is in the durable log.
async fn commits(address: &str, item: &str) -> usize {
    corium::log(address, DB)
        .await
        .unwrap()
        .iter()
        .filter(|(_, strings)| strings.iter().any(|string| string == item))
        .count()
}

/// Runs one row: `steps` scripted, the stock `Connection` of `through`
/// (already connected) sends `transaction`.
async fn row(
    name: &str,
    hop: &ScriptedHop,
    through: Through<'_>,
    steps: Vec<Step>,
    transaction: &Transaction,
    expect: &Expect,
) -> Option<tonic::Status> {
    let Transaction { item, forms, basis } = transaction;
    let _ = hop.take_received();
    hop.script(steps);
    let transact = through.connection.transact_at(forms.clone(), *basis);
    let answered = tokio::time::timeout(Duration::from_mins(1), transact)
        .await
        .unwrap_or_else(|_| panic!("{name}: the stock client hung"));
    let received = hop.take_received();
    eprintln!("{name}: {:?}", answered.as_ref().err());
    let status = match &answered {
        Ok(_) => None,
        Err(PeerError::Rpc(status)) => Some(status.clone()),
        Err(other) => panic!("{name}: not an RPC error: {other}"),
    };
    let sends: BTreeSet<&str> = received
        .iter()
        .filter_map(|received| received.correlation.as_deref())
        .collect();
    assert_eq!(
        received.len(),
        expect.attempts,
        "{name}: attempts at the hop: {received:#?}; answer {status:?}"
    );
    assert_eq!(
        sends.len(),
        expect.client_sends,
        "{name}: calls the stock client made: {received:#?}; answer {status:?}"
    );
    assert_eq!(answered.is_ok(), expect.ok, "{name}: {status:?}");
    assert_eq!(
        commits(through.address, item).await,
        expect.commits,
        "{name}: commits of {item}"
    );
    if let Some(status) = &status {
        // The rule the stock client applied must agree with what it did:
        // an answer it resends would have made it send again.
        assert!(
            !outcome::stock_peer_resends(status.code(), status.message()),
            "{name}: the call ended in an answer a stock client resends: {status:?}"
        );
    }
    status
}

/// A transaction asserting a fresh item named after `name`, at no expected
/// basis.
fn item(name: &str) -> Transaction {
    let item = format!("{name}-{}", uuid::Uuid::new_v4().simple());
    let forms = corium::item_forms(&item);
    Transaction {
        item,
        forms,
        basis: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)] // The whole table of answers runs behind one scripted hop (one per process).
async fn every_answer_to_a_transact_is_read_right_by_the_stock_client() {
    let (mut fleet, hop) = ScriptedHop::in_front_of_one_node().await;
    HOP.set(hop.endpoint()).expect("one hop per test process");
    fleet
        .start_ingresses(1, &["--max-deadline-ms", MAX_DEADLINE_MS])
        .await;
    fleet
        .start_ingresses(
            1,
            &[
                "--max-deadline-ms",
                MAX_DEADLINE_MS,
                "--assign-request-ids",
                "false",
                "--max-request-bytes",
                "65536",
            ],
        )
        .await;
    let assigning = fleet.ingresses[0].endpoint();
    let plain = fleet.ingresses[1].endpoint();
    assert!(corium::create(&assigning, DB).await.unwrap());
    let connect = |address: String| async move {
        let mut config = ConnectConfig::new(address, DB);
        config.failover_timeout = Duration::from_secs(20);
        Connection::connect(config).await.unwrap()
    };
    let with_ids = connect(assigning.clone()).await;
    let without = connect(plain.clone()).await;
    let assigning_ids = Through {
        connection: &with_ids,
        address: &assigning,
    };
    let no_ids = Through {
        connection: &without,
        address: &plain,
    };

    // A NotOwner is pre-commit: the ingress sends it again (once without an
    // id, until an answer with one), and the stock client resends it too.
    let steps = || {
        vec![
            Step::Refuse(not_owner_status(None)),
            Step::Refuse(not_owner_status(None)),
        ]
    };
    // The second NotOwner puts the call in the ingress's failover buffer
    // (both attempts provably did nothing), which sends it a third time: the
    // stock client sends once.
    let transaction = item("not-owner");
    row(
        "NotOwner twice, no id",
        &hop,
        no_ids,
        steps(),
        &transaction,
        &Expect::success(3),
    )
    .await;
    let transaction = item("not-owner-id");
    let expect = Expect::success(3);
    row(
        "NotOwner twice, assigned id",
        &hop,
        assigning_ids,
        steps(),
        &transaction,
        &expect,
    )
    .await;

    // Ambiguous after the commit — the owner's typed unknown outcome, a
    // reset stream, an answer cut after its headers, a NotOwner after an
    // ambiguous attempt: with an assigned id the ingress retries with the
    // same id and the client gets the committed answer; without, the client
    // gets an unknown outcome it does not resend. Committed once either way.
    let ambiguous: [(&str, Script); 4] = [
        ("owner's unknown outcome", || {
            vec![Step::CommitThenAnswer(unknown_status)]
        }),
        ("stream reset after the commit", || vec![Step::CommitThenReset]),
        ("answer cut after its headers", || vec![Step::CommitThenCut]),
        ("NotOwner after a reset", || {
            vec![Step::CommitThenReset, Step::Refuse(not_owner_status(None))]
        }),
    ];
    for (case, steps) in ambiguous {
        let name = format!("{case}, no id");
        let status = row(
            &name,
            &hop,
            no_ids,
            steps(),
            &item("ambiguous"),
            &Expect::error(1),
        )
        .await
        .expect("an error");
        assert_eq!(status.code(), tonic::Code::Unavailable, "{case}: {status:?}");
        let attempts = if case.starts_with("NotOwner") { 3 } else { 2 };
        let name = format!("{case}, assigned id");
        let expect = Expect::success(attempts);
        row(
            &name,
            &hop,
            assigning_ids,
            steps(),
            &item("ambiguous-id"),
            &expect,
        )
        .await;
        // Every attempt of the call carried the same id.
        let Transaction {
            item: name, forms, ..
        } = item("same-id");
        hop.script(steps());
        with_ids.transact(forms).await.unwrap();
        let ids: BTreeSet<Option<String>> = hop
            .take_received()
            .into_iter()
            .map(|received| received.request_id)
            .collect();
        assert_eq!(ids.len(), 1, "{case}: {ids:?}");
        assert!(ids.iter().all(Option::is_some), "{case}: {ids:?}");
        assert_eq!(commits(&assigning, &name).await, 1);
    }

    // No answer before the deadline: DEADLINE_EXCEEDED, never resent by a
    // stock client (the transaction committed: its outcome was unknown).
    for (label, through) in [("no id", no_ids), ("assigned id", assigning_ids)] {
        let address = through.address;
        let transaction = item("late");
        let name = &transaction.item;
        let steps = vec![Step::CommitThenHold(Duration::from_secs(5))];
        let row_name = format!("held past the deadline, {label}");
        let status = row(&row_name, &hop, through, steps, &transaction, &Expect::error(1))
            .await
            .expect("an error");
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
        // The answer names the id the ingress assigned; asking about it
        // gives the committed answer.
        if let Some(id) = status.metadata().get(corium_fleet_wire::metadata::REQUEST_ID) {
            let id = id.to_str().unwrap().to_owned();
            assert!(status.message().contains(&id), "{status:?}");
            let sdk = corium_fleet_client::Client::connect(corium_fleet_client::Config::new(address))
                .await
                .unwrap();
            let answer = sdk.database(DB).request_status(&id).await.unwrap();
            let corium_fleet_client::RequestStatus::Committed(committed) = answer else {
                panic!("{label}: {id} did not commit: {answer:?}");
            };
            let log = corium::log(address, DB).await.unwrap();
            assert!(
                log.iter()
                    .any(|(t, strings)| *t == committed.basis_t && strings.contains(name)),
                "{label}: {name} at t={}",
                committed.basis_t
            );
        } else {
            assert_eq!(label, "no id", "{status:?}");
        }
    }

    // Refusals before the commit that stock clients give up on: Corium's own
    // (an unknown attribute; a stale expected basis) and the ingress's (a
    // body over its limit).
    let corium_query::edn::Edn::Vector(bad) =
        corium_query::edn::read_one(r#"[{:db/id "x" :no/such "y"}]"#).unwrap()
    else {
        unreachable!("the forms are a vector")
    };
    let unknown_attribute = Transaction {
        item: "never".into(),
        forms: bad,
        basis: None,
    };
    let stale = Transaction {
        basis: Some(1),
        ..item("stale-basis")
    };
    let big = format!("{}{}", item("large").item, "x".repeat(100_000));
    let over_limit = Transaction {
        forms: corium::item_forms(&big),
        item: big,
        basis: None,
    };
    let never_sent = Expect {
        attempts: 0,
        client_sends: 0,
        ok: false,
        commits: 0,
    };
    let refusals = [
        (
            "unknown attribute",
            no_ids,
            unknown_attribute,
            Expect::error(0),
            tonic::Code::InvalidArgument,
        ),
        (
            "stale expected basis",
            assigning_ids,
            stale,
            Expect::error(0),
            tonic::Code::Aborted,
        ),
        (
            "over the ingress body limit",
            no_ids,
            over_limit,
            never_sent,
            tonic::Code::ResourceExhausted,
        ),
    ];
    for (name, through, transaction, expect, code) in refusals {
        let status = row(name, &hop, through, Vec::new(), &transaction, &expect)
            .await
            .expect("an error");
        assert_eq!(status.code(), code, "{status:?}");
    }

    // The owner refuses an assigned id (a database from outside the fleet):
    // nothing committed, so the ingress sends the call again without it.
    let Transaction {
        item: name, forms, ..
    } = item("unsupported");
    let _ = hop.take_received();
    hop.script(vec![Step::Refuse(unsupported_status(None))]);
    with_ids.transact(forms).await.unwrap();
    let received = hop.take_received();
    assert_eq!(received.len(), 2, "{received:#?}");
    assert!(
        received[0].request_id.is_some() && received[1].request_id.is_none(),
        "{received:#?}"
    );
    assert_eq!(commits(&assigning, &name).await, 1);
}
