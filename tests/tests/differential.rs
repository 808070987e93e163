//! Differential tests: the same scripted sequences of `corium.v1` calls
//! against a stock Corium transactor (crates.io `corium-cli` 0.1.90) and
//! through the fleet's ingress, every answer compared after the
//! normalisations in `corium_fleet_tests::differential::answer`. A
//! difference is a failure unless [`explained`] names it as one of the
//! intended differences `docs/design/0016-differential-tests.md` lists.

use std::collections::BTreeSet;

use corium_fleet_proto::fleet::HandoffRequest;
use corium_fleet_tests::differential::generate;
use corium_fleet_tests::differential::op::EVERY_RPC;
use corium_fleet_tests::differential::{Difference, Op, Transcript, differences, play, play_with};
use corium_fleet_tests::stock::StockTransactor;
use corium_fleet_tests::{Backend, Fleet, corium};

/// Intended differences, each explained in
/// `docs/design/0016-differential-tests.md` under its number: whether a
/// difference is one of them.
fn explained(found: &Difference) -> Option<u8> {
    let rpc = found.call.split_once(' ').map_or("", |(rpc, _)| rpc);
    match rpc {
        // 1. Creating a database that exists (design note 0005).
        "Catalog/CreateDatabase"
            if found.stock == "created false" && found.fleet.starts_with("error AlreadyExists: database") =>
        {
            Some(1)
        }
        // 2. A name no database can have: the same code and words, and the rule.
        "Catalog/CreateDatabase"
            if found
                .stock
                .starts_with("error InvalidArgument: invalid database name")
                && found.fleet.starts_with(&found.stock)
                && found.fleet.ends_with(
                    ": use 1-128 letters, digits, '-' or '_' (or a saga branch of such a database)",
                ) =>
        {
            Some(2)
        }
        // 3. Stock's `Sync` answers the basis its database opened at, and
        //    waits out its deadline for any later one (Corium 0.1.90's basis
        //    watch); the fleet answers the database's basis, at least `t`.
        "Transactor/Sync" => {
            let t: u64 = found
                .call
                .rsplit_once("t: ")
                .and_then(|(_, rest)| rest.trim_end_matches(" }").parse().ok())?;
            let fleet: u64 = found.fleet.strip_prefix("basis ")?.parse().ok()?;
            let stale = match found.stock.strip_prefix("basis ") {
                Some(stock) => stock.parse::<u64>().ok()? < fleet,
                None => found.stock == "error Cancelled: Timeout expired",
            };
            (stale && fleet >= t).then_some(3)
        }
        // 4. A schema change's generation counts changes since the database
        //    value was opened (Corium starts it at 0 on recovery); a fleet
        //    database reopens on every move and after a fork of it.
        "Catalog/AlterSchema" => {
            let generation = |answer: &str| -> Option<(u64, String)> {
                let (before, rest) = answer.split_once("generation ")?;
                let (number, after) = rest.split_once(',')?;
                Some((number.parse().ok()?, format!("{before}{after}")))
            };
            let (stock, stock_rest) = generation(&found.stock)?;
            let (fleet, fleet_rest) = generation(&found.fleet)?;
            (stock_rest == fleet_rest && fleet <= stock).then_some(4)
        }
        _ => None,
    }
}

const SCHEMA: &str = "[{:db/ident :item/name :db/valueType :db.type/string \
    :db/cardinality :db.cardinality/one :db/unique :db.unique/identity} \
    {:db/ident :item/tags :db/valueType :db.type/string :db/cardinality :db.cardinality/many} \
    {:db/ident :item/friend :db/valueType :db.type/ref :db/cardinality :db.cardinality/one} \
    {:db/ident :item/born :db/valueType :db.type/instant :db/cardinality :db.cardinality/one}]";

fn create(db: &str) -> Op {
    Op::Create {
        db: db.to_owned(),
        schema: SCHEMA.to_owned(),
    }
}

/// The transaction that opens saga `id` as corium-peer's
/// `saga::open_forms` writes it, rooted at basis 2, expiring in 2100.
fn open_saga(id: &str) -> String {
    format!(
        r#"[[:db/add "saga" :db.saga/id #uuid "{id}"] [:db/add "saga" :db.saga/status :db.saga.status/open] [:db/add "saga" :db.saga/basis-t 2] [:db/add "saga" :db.saga/owner "differential"] [:db/add "saga" :db.saga/expires-at #inst 4102444800000]]"#
    )
}

fn transact(db: &str, edn: &str) -> Op {
    Op::Transact {
        db: db.to_owned(),
        edn: edn.to_owned(),
        expected_basis_t: None,
    }
}

/// One sequence with every `Transactor` and `Catalog` RPC, answers and
/// errors both: writes and reads, the catalog's other calls, then sagas and
/// the catalog's lifecycle.
fn every_rpc() -> Vec<Op> {
    let a = "diff-a";
    [writes_and_reads(a), catalog(a), sagas_and_lifecycle(a)].concat()
}

/// Creates, transactions (committed and refused), `Sync`, `Status` and
/// subscriptions.
fn writes_and_reads(a: &str) -> Vec<Op> {
    vec![
        Op::List,
        create(a),
        create(a),
        create("not a valid name!"),
        Op::CreateRaw {
            db: "diff-junk".to_owned(),
            schema: vec![0xff, 0x00, 0x13],
        },
        transact(a, r#"[{:db/id "x" :item/name "one"}]"#),
        transact(
            a,
            r#"[{:db/id "y" :item/name "two" :item/friend "z" :item/tags "t1"} {:db/id "z" :item/name "three" :item/born #inst 981173106000}]"#,
        ),
        // An upsert of "one", and a second tag on "two".
        transact(
            a,
            r#"[{:db/id "u" :item/name "one" :item/tags "t2"} [:db/add [:item/name "two"] :item/tags "t3"]]"#,
        ),
        transact(a, r"[{:db/id"),
        transact(a, r#"[{:db/id "x" :nope/nope 1}]"#),
        transact(a, r#"[{:db/id "x" :item/name 42}]"#),
        Op::Transact {
            db: a.to_owned(),
            edn: r#"[{:db/id "x" :item/name "stale"}]"#.to_owned(),
            expected_basis_t: Some(99),
        },
        Op::TransactRaw {
            db: a.to_owned(),
            tx_data: vec![0xde, 0xad],
        },
        transact("diff-nope", r#"[{:db/id "x" :item/name "one"}]"#),
        transact(a, r#"[[:db/retract [:item/name "two"] :item/tags "t1"]]"#),
        Op::Sync {
            db: a.to_owned(),
            t: 0,
        },
        Op::Sync {
            db: a.to_owned(),
            t: 2,
        },
        Op::Sync {
            db: "diff-nope".to_owned(),
            t: 0,
        },
        Op::Status { db: a.to_owned() },
        Op::Status {
            db: "diff-nope".to_owned(),
        },
        Op::Subscribe {
            db: a.to_owned(),
            from_basis_t: 0,
        },
        Op::Subscribe {
            db: a.to_owned(),
            from_basis_t: 3,
        },
    ]
}

/// Indexing, storage and key calls, and a schema plan.
fn catalog(a: &str) -> Vec<Op> {
    vec![
        Op::RequestIndex { db: a.to_owned() },
        Op::SetIndexPolicy {
            db: a.to_owned(),
            interval_ms: None,
        },
        Op::SetIndexPolicy {
            db: a.to_owned(),
            interval_ms: Some(60_000),
        },
        Op::StorageInfo { db: a.to_owned() },
        Op::KeyStatus { db: a.to_owned() },
        Op::RotateKey { db: a.to_owned() },
        Op::Rewrap {
            db: a.to_owned(),
            kek: "none".to_owned(),
        },
        Op::AlterSchema {
            db: a.to_owned(),
            desired: SCHEMA.to_owned(),
        },
    ]
}

/// Sagas opened, stepped, committed and aborted; a fork, deletes, GC.
fn sagas_and_lifecycle(a: &str) -> Vec<Op> {
    let saga = "0123456789abcdef0123456789abcdef".to_owned();
    let other_saga = "fedcba9876543210fedcba9876543210".to_owned();
    vec![
        // A saga: opened on the parent, a step on its branch, committed;
        // a second one opened and aborted; then both again (refused).
        transact(a, &open_saga(&saga)),
        transact(
            &format!("{a}.saga.{saga}"),
            r#"[{:db/id "s" :item/name "in the saga"}]"#,
        ),
        Op::Sync {
            db: format!("{a}.saga.{saga}"),
            t: 0,
        },
        Op::Subscribe {
            db: format!("{a}.saga.{saga}"),
            from_basis_t: 0,
        },
        Op::SagaCommit {
            db: a.to_owned(),
            saga: saga.clone(),
        },
        transact(a, &open_saga(&other_saga)),
        Op::SagaFinish {
            db: a.to_owned(),
            saga: other_saga.clone(),
            status: "aborted".to_owned(),
        },
        Op::SagaCommit {
            db: a.to_owned(),
            saga: other_saga.clone(),
        },
        Op::SagaFinish {
            db: a.to_owned(),
            saga: "ffffffffffffffffffffffffffffffff".to_owned(),
            status: "aborted".to_owned(),
        },
        Op::Fork {
            db: a.to_owned(),
            target: "diff-copy".to_owned(),
            as_of_t: 0,
        },
        transact("diff-copy", r#"[{:db/id "x" :item/name "in the copy"}]"#),
        Op::List,
        Op::Delete {
            db: "diff-copy".to_owned(),
        },
        Op::Delete {
            db: "diff-nope".to_owned(),
        },
        Op::List,
        Op::GcDeleted,
    ]
}

/// The differences between two transcripts that are not [`explained`].
fn unexplained(stock: &Transcript, fleet: &Transcript) -> Vec<String> {
    differences(stock, fleet)
        .into_iter()
        .filter(|found| explained(found).is_none())
        .map(|found| found.to_string())
        .collect()
}

fn assert_same(stock: &Transcript, fleet: &Transcript) {
    let unexplained = unexplained(stock, fleet);
    assert!(
        unexplained.is_empty(),
        "{} unexplained differences:\n{}\n\nstock transcript:\n{}",
        unexplained.len(),
        unexplained.join("\n"),
        stock
            .lines
            .iter()
            .map(|(call, answer)| format!("{call}\n  → {answer}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transactor_and_catalog_rpc_answers_through_the_fleet_as_a_stock_transactor_does() {
    let ops = every_rpc();
    let covered: BTreeSet<&str> = ops.iter().map(Op::rpc).collect();
    let missing: Vec<&&str> = EVERY_RPC.iter().filter(|rpc| !covered.contains(**rpc)).collect();
    assert!(missing.is_empty(), "not exercised: {missing:?}");

    let stock = StockTransactor::start().await.unwrap();
    let mut fleet = Fleet::builder(Backend::Filesystem).start().await;
    fleet.start_ingresses(1, &[]).await;
    let stock_answers = play(&stock.endpoint, &ops).await;
    let fleet_answers = play(&fleet.ingresses[0].endpoint(), &ops).await;
    assert_same(&stock_answers, &fleet_answers);
}

/// The same sequence while `diff-a` is handed to another node before every
/// call on it or on its saga branches (the saga opened, stepped, synced,
/// subscribed, committed and aborted across handoffs of its database): the
/// answers are still stock Corium's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_answers_while_the_database_and_its_sagas_move_between_every_call() {
    let ops = every_rpc();
    let stock = StockTransactor::start().await.unwrap();
    let mut fleet = Fleet::builder(Backend::Filesystem).start().await;
    fleet.start_ingresses(1, &[]).await;
    let address = fleet.ingresses[0].endpoint();
    let stock_answers = play(&stock.endpoint, &ops).await;
    let mut handoffs = 0;
    let fleet_answers = play_with(&address, &ops, async |_, op| {
        let (Op::Transact { db, .. }
        | Op::Sync { db, .. }
        | Op::Subscribe { db, .. }
        | Op::SagaCommit { db, .. }
        | Op::SagaFinish { db, .. }) = op
        else {
            return;
        };
        if corium_fleet_common::names::home(db) != "diff-a" {
            return;
        }
        let view = corium::placement(&address, "diff-a").await;
        if view.owner_id.is_empty() {
            return;
        }
        let owner = fleet.index(&view.owner_id);
        let Some(target) = fleet.candidates("diff-a").into_iter().find(|node| *node != owner) else {
            return;
        };
        corium::admin(&fleet.nodes[owner].endpoint())
            .await
            .handoff(HandoffRequest {
                database: "diff-a".to_owned(),
                target_node_id: fleet.nodes[target].id.clone(),
            })
            .await
            .unwrap_or_else(|status| panic!("handoff before {op:?}: {status:?}"));
        handoffs += 1;
    })
    .await;
    assert!(
        handoffs >= 10,
        "the database moved before every call on it: {handoffs}"
    );
    assert_same(&stock_answers, &fleet_answers);
}

/// `name` from the environment, else `default`.
fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// A fresh stock transactor and a fresh fleet (with its ingress address).
async fn fresh_pair() -> (StockTransactor, Fleet, String) {
    let stock = StockTransactor::start().await.unwrap();
    let mut fleet = Fleet::builder(Backend::Filesystem).start().await;
    fleet.start_ingresses(1, &[]).await;
    let address = fleet.ingresses[0].endpoint();
    (stock, fleet, address)
}

/// Generated sequences (`generate::sequence`): `CORIUM_FLEET_DIFF_SEEDS`
/// seeds (default 4) from `CORIUM_FLEET_DIFF_FIRST_SEED` (default 1), each
/// `CORIUM_FLEET_DIFF_LENGTH` calls long (default 40), against one stock
/// transactor and one fleet. A failing seed is shrunk on fresh servers and
/// printed with the command that replays it; `make differential` runs many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_sequences_answer_through_the_fleet_as_a_stock_transactor_does() {
    let seeds = env_or("CORIUM_FLEET_DIFF_SEEDS", 4);
    let first = env_or("CORIUM_FLEET_DIFF_FIRST_SEED", 1);
    let length = usize::try_from(env_or("CORIUM_FLEET_DIFF_LENGTH", 40)).unwrap_or(40);
    let (stock, _fleet, address) = fresh_pair().await;
    for seed in first..first + seeds {
        let ops = generate::sequence(seed, &format!("g{seed}"), length);
        let found = unexplained(&play(&stock.endpoint, &ops).await, &play(&address, &ops).await);
        if found.is_empty() {
            continue;
        }
        let shrunk = generate::shrink(ops.clone(), 30, async |candidate: &[Op]| {
            let (stock, _fleet, address) = fresh_pair().await;
            !unexplained(
                &play(&stock.endpoint, candidate).await,
                &play(&address, candidate).await,
            )
            .is_empty()
        })
        .await;
        panic!(
            "seed {seed}: {} unexplained differences:\n{}\n\nshrunk to {} calls:\n{shrunk:#?}\n\nreplay: \
             CORIUM_FLEET_DIFF_FIRST_SEED={seed} CORIUM_FLEET_DIFF_SEEDS=1 CORIUM_FLEET_DIFF_LENGTH={length} \
             cargo nextest run -p corium-fleet-tests --test differential generated",
            found.len(),
            found.join("\n"),
            shrunk.len()
        );
    }
}

/// What happens to a database's owner before a call, in
/// [`generated_sequences_answer_the_same_while_their_databases_move_and_owners_die`].
async fn move_or_kill(
    fleet: &mut Fleet,
    address: &str,
    db: &str,
    rng: &mut corium_fleet_faults::Rng,
) -> Option<&'static str> {
    let roll = rng.below(10);
    if roll >= 4 {
        return None;
    }
    let view = corium::placement(address, db).await;
    if view.owner_id.is_empty() {
        return None;
    }
    let owner = fleet.index(&view.owner_id);
    if roll == 0 {
        // The owner dies between two calls and comes back; the next call
        // waits out the lease at the ingress.
        fleet.nodes[owner].kill();
        fleet.nodes[owner].restart().await;
        return Some("kill");
    }
    let target = fleet.candidates(db).into_iter().find(|node| *node != owner)?;
    corium::admin(&fleet.nodes[owner].endpoint())
        .await
        .handoff(HandoffRequest {
            database: db.to_owned(),
            target_node_id: fleet.nodes[target].id.clone(),
        })
        .await
        .ok()
        .map(|_| "handoff")
}

/// Generated sequences while, before 4 calls in 10 on an existing
/// database, its owner hands it to another candidate (3 in 4) or is
/// killed (SIGKILL) and restarted (1 in 4): the answers are still stock's.
/// `CORIUM_FLEET_DIFF_MOVING_SEEDS` seeds (default 2) from
/// `CORIUM_FLEET_DIFF_FIRST_SEED`, `CORIUM_FLEET_DIFF_LENGTH` calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_sequences_answer_the_same_while_their_databases_move_and_owners_die() {
    let seeds = env_or("CORIUM_FLEET_DIFF_MOVING_SEEDS", 2);
    let first = env_or("CORIUM_FLEET_DIFF_FIRST_SEED", 1);
    let length = usize::try_from(env_or("CORIUM_FLEET_DIFF_LENGTH", 40)).unwrap_or(40);
    let (stock, mut fleet, address) = fresh_pair().await;
    let (mut handoffs, mut kills) = (0, 0);
    for seed in first..first + seeds {
        let ops = generate::sequence(seed, &format!("m{seed}"), length);
        let stock_answers = play(&stock.endpoint, &ops).await;
        let mut rng = corium_fleet_faults::Rng::new(seed ^ 0x5eed);
        let mut created = std::collections::BTreeSet::new();
        let fleet_answers = play_with(&address, &ops, async |_, op| {
            let Some(db) = op.db().map(corium_fleet_common::names::home) else {
                return;
            };
            if created.contains(db) {
                match move_or_kill(&mut fleet, &address, db, &mut rng).await {
                    Some("kill") => kills += 1,
                    Some(_) => handoffs += 1,
                    None => {}
                }
            }
            if matches!(op, Op::Create { .. }) {
                created.insert(db.to_owned());
            }
        })
        .await;
        let found = unexplained(&stock_answers, &fleet_answers);
        assert!(
            found.is_empty(),
            "seed {seed}: {} unexplained differences while databases moved:\n{}\n\nreplay: \
             CORIUM_FLEET_DIFF_FIRST_SEED={seed} CORIUM_FLEET_DIFF_MOVING_SEEDS=1 CORIUM_FLEET_DIFF_LENGTH={length} \
             cargo nextest run -p corium-fleet-tests --test differential owners_die",
            found.len(),
            found.join("\n"),
        );
    }
    assert!(
        handoffs > 0 && kills > 0,
        "both movements happened: {handoffs} handoffs, {kills} kills"
    );
}
