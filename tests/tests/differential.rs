//! Differential tests: the same scripted sequences of `corium.v1` calls
//! against a stock Corium transactor (crates.io `corium-cli` 0.1.90), with
//! stock peer servers following it for `PeerServer`, and through the
//! fleet's ingress, every answer compared after the
//! normalisations in `corium_fleet_tests::differential::answer`. A
//! difference is a failure unless [`explained`] names it as one of the
//! intended differences `docs/design/0016-differential-tests.md` lists.

use std::collections::BTreeSet;

use corium_fleet_proto::fleet::HandoffRequest;
use corium_fleet_tests::differential::fixed::every_rpc;
use corium_fleet_tests::differential::generate;
use corium_fleet_tests::differential::op::EVERY_RPC;
use corium_fleet_tests::differential::{Difference, Op, Side, Transcript, differences, play, play_with};
use corium_fleet_tests::stock::StockTransactor;
use corium_fleet_tests::{Backend, Fleet, corium};

/// The database a call names (its `db` field).
fn named_db(call: &str) -> Option<&str> {
    call.split_once("db: \"")?.1.split('"').next()
}

/// The databases deleted (`deleted true`) in `transcript` before call
/// `index`.
fn deleted_before(transcript: &Transcript, index: usize) -> BTreeSet<String> {
    let mut deleted = BTreeSet::new();
    for (call, answer) in &transcript.lines[..index] {
        match named_db(call) {
            Some(db) if call.starts_with("Catalog/DeleteDatabase") && answer == "deleted true" => {
                deleted.insert(db.to_owned());
            }
            Some(db) if call.starts_with("Catalog/CreateDatabase") && answer == "created true" => {
                deleted.remove(db);
            }
            _ => {}
        }
    }
    deleted
}

/// Intended differences, each explained in
/// `docs/design/0016-differential-tests.md` under its number: whether a
/// difference is one of them (`deleted`: the databases deleted before it).
fn explained(found: &Difference, deleted: &BTreeSet<String>) -> Option<u8> {
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
        // 5. A `PeerServer` call about a database that does not exist: a
        //    stock peer server hosts one database and refuses any other with
        //    its own words; the fleet's address serves every database and
        //    refuses an unknown one with the transactor's. Same code.
        // 6. A `PeerServer` read of a deleted database: a stock peer server
        //    that hosted it goes on answering from its last state; the
        //    fleet's replica stops following it and the database is unknown.
        rpc if rpc.starts_with("PeerServer/") => {
            let db = named_db(&found.call)?;
            if found.fleet != format!("error NotFound: unknown database {db:?}") {
                return None;
            }
            if let Some(stock) = found
                .stock
                .strip_prefix("error NotFound: this peer server hosts ")
            {
                return stock.ends_with(&format!(", not {db:?}")).then_some(5);
            }
            (deleted.contains(db) && !found.stock.starts_with("error ")).then_some(6)
        }
        _ => None,
    }
}

/// The differences between two transcripts that are not [`explained`].
fn unexplained(stock: &Transcript, fleet: &Transcript) -> Vec<String> {
    differences(stock, fleet)
        .into_iter()
        .filter(|found| explained(found, &deleted_before(stock, found.index)).is_none())
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
async fn every_transactor_catalog_and_peer_server_rpc_answers_through_the_fleet_as_stock_corium_does() {
    let ops = every_rpc();
    let covered: BTreeSet<&str> = ops.iter().map(Op::rpc).collect();
    let missing: Vec<&&str> = EVERY_RPC.iter().filter(|rpc| !covered.contains(**rpc)).collect();
    assert!(missing.is_empty(), "not exercised: {missing:?}");

    let stock = StockTransactor::start().await.unwrap();
    let mut fleet = Fleet::builder(Backend::Filesystem).start().await;
    fleet.start_ingresses(1, &[]).await;
    every_rpc_answers_the_same(&stock, &fleet, &ops).await;
}

/// The sequence with every RPC on databases encrypted at rest (issue 50),
/// against a stock transactor and a fleet holding the same two keys under
/// the same IDs: created under the first, its key status read, rotated,
/// re-wrapped onto the second, forked (a fork mints its own manifest),
/// written, read by thin clients, deleted: the answers are stock's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_on_encrypted_databases_answers_through_the_fleet_as_stock_corium_does() {
    let keys = tempfile::tempdir().unwrap();
    let ids: Vec<String> = ["first", "next"]
        .iter()
        .enumerate()
        .map(|(index, name)| {
            let path = keys.path().join(format!("{name}.key"));
            std::fs::write(&path, format!("{:02x}", 0x40 + index).repeat(32)).unwrap();
            format!("file:{}", path.display())
        })
        .collect();
    let ops = corium_fleet_tests::differential::fixed::every_rpc_encrypted(&ids[0], &ids[1]);
    let stock = StockTransactor::start_with_keys(&[&ids[0], &ids[1]])
        .await
        .unwrap();
    let both = ids.join(",");
    let mut fleet = Fleet::builder(Backend::Filesystem)
        .env(&[("CORIUM_STORAGE_KEY", both.as_str())])
        .start()
        .await;
    fleet.start_ingresses(1, &[]).await;
    let answers = every_rpc_answers_the_same(&stock, &fleet, &ops).await;
    // The key calls were about real manifests (not "encrypted false").
    let answered = |rpc: &str| -> Vec<&str> {
        answers
            .lines
            .iter()
            .filter(|(call, _)| call.starts_with(rpc))
            .map(|(_, answer)| answer.as_str())
            .collect()
    };
    let status = answered("Catalog/KeyStatus");
    assert!(
        status.iter().any(|answer| answer.starts_with("encrypted true")),
        "{status:?}"
    );
    assert_eq!(answered("Catalog/RewrapKeys"), ["rewrapped"]);
}

/// Plays `ops` (the fixed sequence, or a variant of it) against `stock`
/// and through `fleet`'s first ingress, and asserts the answers are the
/// same but for the explained differences; returns the stock transcript.
async fn every_rpc_answers_the_same(stock: &StockTransactor, fleet: &Fleet, ops: &[Op]) -> Transcript {
    // A pause after the delete, so the fleet's replica of the deleted
    // database has seen it gone before the reads (deviation 6; without it
    // they may come first and answer as stock does).
    let deleted = ops
        .iter()
        .position(|op| matches!(op, Op::Delete { db } if db == "diff-copy"))
        .expect("the sequence deletes diff-copy");
    let pause = async |index: usize, _: &Op| {
        if index == deleted + 1 {
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        }
    };
    let stock_answers = play_with(Side::Stock, &stock.endpoint, ops, pause).await;
    let fleet_answers = play_with(Side::Fleet, &fleet.ingresses[0].endpoint(), ops, pause).await;
    assert_same(&stock_answers, &fleet_answers);
    stock_answers
}

/// The same sequence while `diff-a` is handed to another node before every
/// write, sync, subscription, saga call and `PeerServer` call on it or on
/// its saga branches (the saga opened, stepped, synced, subscribed, read,
/// committed and aborted across handoffs of its database; every read after
/// a move answered by a replica that follows the new owner): the answers
/// are still stock Corium's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_answers_while_the_database_and_its_sagas_move_between_every_call() {
    let ops = every_rpc();
    let stock = StockTransactor::start().await.unwrap();
    let (fleet, address) = Fleet::builder(Backend::Filesystem).start_with_ingress().await;
    let stock_answers = play(Side::Stock, &stock.endpoint, &ops).await;
    let mut handoffs = 0;
    let fleet_answers = play_with(Side::Fleet, &address, &ops, async |_, op| {
        let moves = matches!(
            op,
            Op::Transact { .. }
                | Op::Sync { .. }
                | Op::Subscribe { .. }
                | Op::SagaCommit { .. }
                | Op::SagaFinish { .. }
        ) || op.is_peer_server();
        if !moves || op.db().map(corium_fleet_common::names::home) != Some("diff-a") {
            return;
        }
        let view = corium::placement(&address, "diff-a").await;
        if view.owner_id.is_empty() {
            return;
        }
        let owner = fleet.index(&view.owner_id);
        let Some(target) = fleet.other_candidate("diff-a", owner) else {
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
    eprintln!("{handoffs} handoffs");
    assert!(
        handoffs >= 40,
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
    let (fleet, address) = Fleet::builder(Backend::Filesystem).start_with_ingress().await;
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
        let found = unexplained(
            &play(Side::Stock, &stock.endpoint, &ops).await,
            &play(Side::Fleet, &address, &ops).await,
        );
        if found.is_empty() {
            continue;
        }
        let shrunk = generate::shrink(ops.clone(), 30, async |candidate: &[Op]| {
            let (stock, _fleet, address) = fresh_pair().await;
            !unexplained(
                &play(Side::Stock, &stock.endpoint, candidate).await,
                &play(Side::Fleet, &address, candidate).await,
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
    let target = fleet.other_candidate(db, owner)?;
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
        let stock_answers = play(Side::Stock, &stock.endpoint, &ops).await;
        let mut rng = corium_fleet_faults::Rng::new(seed ^ 0x5eed);
        let mut created = std::collections::BTreeSet::new();
        let fleet_answers = play_with(Side::Fleet, &address, &ops, async |_, op| {
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
