//! Running a sequence against one side, as a stock client does (no route
//! header, the development token, a deadline on every call), and comparing
//! two transcripts.
//!
//! `Transactor` and `Catalog` calls go to the side's endpoint (the stock
//! transactor, the fleet's address). `PeerServer` calls go where a thin
//! client of that side sends them (`peer.rs`): on stock, to a stock peer
//! server for the database, started on first use and kept for the run; on
//! the fleet, to its address. Both sides' reads are made at one basis: the
//! latest the transcript knows for the database (`Bases`), which the
//! fleet is asked for with `corium-min-basis` and the stock peer server is
//! waited for.
//!
//! Layout: this file holds the run and the comparison; `transactor.rs` the
//! `Transactor` and `Catalog` calls; `peer.rs` the `PeerServer` calls.

mod peer;
mod transactor;

use std::collections::HashMap;
use std::time::Duration;

use corium_query::edn::read_one;
use tonic::transport::Channel;

use super::answer::{self, Names};
use super::op::Op;

/// Every call's deadline: long, so a loaded machine (the whole suite on two
/// cores) does not turn a slow answer into a difference.
const DEADLINE: Duration = Duration::from_secs(20);

/// The deadline of a `Sync` to a later basis, which stock Corium 0.1.90
/// waits out (note 0016): short, as the wait is expected.
const WAIT_DEADLINE: Duration = Duration::from_secs(5);

/// Which server a sequence is played against, which decides where its
/// `PeerServer` calls go.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Side {
    /// A stock `corium transactor` at the endpoint: `PeerServer` calls go
    /// to stock peer servers following it, one per database.
    Stock,
    /// The fleet's address: every call goes there.
    Fleet,
}

/// One sequence's answers at one endpoint, one rendered line per call.
#[derive(Debug)]
pub struct Transcript {
    /// `(call, answer)`, in order.
    pub lines: Vec<(String, String)>,
}

/// The latest basis the transcript has shown for each database (by its
/// exact name): what a read after it must see at least.
#[derive(Default)]
struct Bases(HashMap<String, u64>);

impl Bases {
    /// `db` was seen at `t`.
    fn saw(&mut self, db: &str, t: u64) {
        let known = self.0.entry(db.to_owned()).or_default();
        *known = (*known).max(t);
    }

    /// The latest basis seen for `db` (0: none).
    fn of(&self, db: &str) -> u64 {
        self.0.get(db).copied().unwrap_or(0)
    }
}

/// A request with the development token and the call's deadline.
fn request<T>(message: T) -> tonic::Request<T> {
    let mut request = crate::corium::with_bearer(
        tonic::Request::new(message),
        corium_protocol::auth::DEFAULT_DEV_TOKEN,
    );
    request.set_timeout(DEADLINE);
    request
}

/// EDN text encoded as stock clients send it (invalid EDN: its text as a
/// string, which the server must refuse as it refuses any non-vector).
fn edn(text: &str) -> Vec<u8> {
    read_one(text).map_or_else(
        |_| corium_protocol::codec::encode_edn(&corium_query::edn::Edn::Str(text.to_owned())),
        |form| corium_protocol::codec::encode_edn(&form),
    )
}

/// Plays `ops` against `side` at `endpoint` in order.
///
/// # Panics
/// When the endpoint cannot be reached at all.
pub async fn play(side: Side, endpoint: &str, ops: &[Op]) -> Transcript {
    play_with(side, endpoint, ops, async |_, _| {}).await
}

/// What a run holds: the endpoint's channel, where `PeerServer` calls go,
/// the names given so far and the bases seen.
struct Run {
    channel: Channel,
    peers: peer::PeerServers,
    // Per database (a saga branch shares its database's ids): ids of two
    // databases are unrelated, and one name for both would tie them.
    names: HashMap<String, Names>,
    bases: Bases,
}

/// Plays `ops` against `side` at `endpoint` in order, running
/// `before(index, op)` before each call (a handoff, a kill: what happens
/// between two calls). The stock peer servers a run starts end with it.
///
/// # Panics
/// When the endpoint cannot be reached at all.
pub async fn play_with(
    side: Side,
    endpoint: &str,
    ops: &[Op],
    mut before: impl AsyncFnMut(usize, &Op),
) -> Transcript {
    let channel = crate::corium::channel(endpoint).await;
    let mut run = Run {
        peers: peer::PeerServers::new(side, endpoint, channel.clone()),
        channel,
        names: HashMap::new(),
        bases: Bases::default(),
    };
    let mut lines = Vec::with_capacity(ops.len());
    for (index, op) in ops.iter().enumerate() {
        before(index, op).await;
        let answer = call_until_answered(&mut run, op).await;
        match op {
            Op::Create { db, .. } | Op::Fork { target: db, .. } if !answer.starts_with("error") => {
                // A new database: its ids start afresh.
                let fresh = run.names.entry(db.clone()).or_default();
                *fresh = Names::default();
                transactor::learn_schema(&run.channel, db, fresh).await;
            }
            _ => {}
        }
        eprintln!("{endpoint}: {} → {answer}", op.rpc());
        lines.push((format!("{} {op:?}", op.rpc()), answer));
    }
    Transcript { lines }
}

/// One call whose answers differ.
#[derive(Clone, Debug)]
pub struct Difference {
    /// Its place in the sequence.
    pub index: usize,
    /// The call (`Service/Method` and the op).
    pub call: String,
    /// Stock Corium's answer.
    pub stock: String,
    /// The fleet's answer.
    pub fleet: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "call {}: {}\n  stock: {}\n  fleet: {}",
            self.index, self.call, self.stock, self.fleet
        )
    }
}

/// `op`'s answer, the call sent again (at most 8 times, 250 ms apart) while
/// it is refused `UNAVAILABLE` without the typed unknown outcome: the
/// fleet's word that nothing was done and a retry is safe (0009), as a
/// lease that could not be renewed in time on a loaded machine says. Such a
/// retry is one the client is told is safe, so it is not a difference.
async fn call_until_answered(run: &mut Run, op: &Op) -> String {
    let home = op.db().map_or("", corium_fleet_common::names::home).to_owned();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let names = run.names.entry(home.clone()).or_default();
        let answer = if op.is_peer_server() {
            run.peers.call(op, names, &mut run.bases).await
        } else {
            transactor::call(&run.channel, op, names, &mut run.bases).await
        };
        match answer {
            Ok(answer) => return answer,
            Err(status)
                if attempts < 8
                    && status.code() == tonic::Code::Unavailable
                    && corium_fleet_wire::outcome::from_status(&status).is_none() =>
            {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(status) => return answer::status(&status),
        }
    }
}

/// The calls whose answers differ, each with both answers.
///
/// # Panics
/// When the transcripts are not of one sequence (their lengths differ).
#[must_use]
pub fn differences(stock: &Transcript, fleet: &Transcript) -> Vec<Difference> {
    assert_eq!(stock.lines.len(), fleet.lines.len(), "one sequence, one length");
    stock
        .lines
        .iter()
        .zip(&fleet.lines)
        .enumerate()
        .filter(|(_, ((_, stock), (_, fleet)))| stock != fleet)
        .map(|(index, ((call, stock), (_, fleet)))| Difference {
            index,
            call: call.clone(),
            stock: stock.clone(),
            fleet: fleet.clone(),
        })
        .collect()
}
