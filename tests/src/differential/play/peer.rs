//! The `PeerServer` calls of a sequence, where a thin client of each side
//! sends them, and at one basis on both sides.
//!
//! - Stock Corium serves `PeerServer` from `corium peer-server`, one
//!   process per database following the transactor: the run starts one for
//!   a database on its first `PeerServer` call (a database that does not
//!   exist cannot have one: the call goes to the run's first peer server,
//!   which refuses it, as a thin client pointed at the wrong peer server is
//!   refused) and keeps it until the run ends.
//! - The fleet serves it at its address (reads from replicas).
//!
//! A stock peer server follows its transactor asynchronously and ignores
//! `corium-min-basis`, so a read right after a write may find it behind.
//! Before each read both sides are brought to the latest basis the
//! transcript knows for the database: the fleet is sent it as
//! `corium-min-basis` (as the fleet SDK does), and the stock peer server is
//! waited for (its `DbStats` without a view, at most [`CATCH_UP`]).

use std::time::{Duration, Instant};

use corium_peer::server::assemble_query_result;
use corium_protocol::codec;
use corium_protocol::pb;
use corium_protocol::pb::peer_server_client::PeerServerClient;
use tonic::transport::Channel;

use super::{Bases, DEADLINE, Side, edn, request};
use crate::differential::answer::{self, Names};
use crate::differential::op::{Op, View};
use crate::stock::StockPeerServer;

/// How long a stock peer server is waited for to reach a basis.
const CATCH_UP: Duration = Duration::from_secs(20);

/// Where one side's `PeerServer` calls go.
pub(super) struct PeerServers {
    side: Side,
    /// The side's endpoint: the stock transactor its peer servers follow,
    /// or the fleet's address.
    endpoint: String,
    /// The endpoint's channel (the fleet's `PeerServer`).
    channel: Channel,
    /// Stock: the peer servers started, by database, in the order started.
    stock: Vec<(String, StockPeerServer, Channel)>,
}

/// Where a call about one database goes.
struct Route {
    channel: Channel,
    /// Whether the server there hosts the database (so a stock one can be
    /// waited for).
    hosts: bool,
}

impl PeerServers {
    pub(super) fn new(side: Side, endpoint: &str, channel: Channel) -> Self {
        Self {
            side,
            endpoint: endpoint.to_owned(),
            channel,
            stock: Vec::new(),
        }
    }

    /// Where a call about `db` goes: the fleet's address; on stock, the
    /// database's peer server (started now if there is none), else the
    /// first one started.
    async fn route(&mut self, db: &str) -> Result<Route, tonic::Status> {
        if self.side == Side::Fleet {
            return Ok(Route {
                channel: self.channel.clone(),
                hosts: true,
            });
        }
        if let Some((_, _, channel)) = self.stock.iter().find(|(hosted, ..)| hosted == db) {
            return Ok(Route {
                channel: channel.clone(),
                hosts: true,
            });
        }
        match StockPeerServer::start(&self.endpoint, db).await {
            Ok(server) => {
                let channel = crate::corium::channel(&server.endpoint).await;
                self.stock.push((db.to_owned(), server, channel.clone()));
                Ok(Route { channel, hosts: true })
            }
            Err(error) => match self.stock.first() {
                Some((_, _, channel)) => Ok(Route {
                    channel: channel.clone(),
                    hosts: false,
                }),
                None => Err(tonic::Status::not_found(format!(
                    "no stock peer server hosts {db:?} (none could start: {error})"
                ))),
            },
        }
    }

    /// A read's request: on the fleet, with `corium-min-basis` at `basis`.
    fn read<T>(&self, message: T, basis: u64) -> tonic::Request<T> {
        let mut request = request(message);
        if self.side == Side::Fleet {
            request
                .metadata_mut()
                .insert(corium_fleet_wire::metadata::MIN_BASIS, basis.into());
        }
        request
    }

    /// `op`'s answer.
    #[allow(clippy::too_many_lines)] // one arm per RPC
    pub(super) async fn call(
        &mut self,
        op: &Op,
        names: &mut Names,
        bases: &mut Bases,
    ) -> Result<String, tonic::Status> {
        let db = op.db().unwrap_or_default();
        let route = self.route(db).await?;
        let at_least = bases.of(db);
        if op.is_peer_read() && self.side == Side::Stock && route.hosts {
            catch_up(&route.channel, db, at_least).await;
        }
        let mut client = PeerServerClient::new(route.channel);
        Ok(match op {
            Op::Query {
                view, query, args, ..
            } => {
                let stream = client
                    .query(self.read(
                        pb::QueryRequest {
                            dbs: vec![spec(db, *view)],
                            query: edn(query),
                            args: edn(args),
                            fuel: 0,
                        },
                        at_least,
                    ))
                    .await?
                    .into_inner();
                let chunks = collect(stream).await?;
                let shape = chunks
                    .first()
                    .map_or(pb::ResultShape::Relation, pb::QueryResultChunk::shape);
                match assemble_query_result(&chunks) {
                    Ok(result) => answer::query_result(shape, &result, names),
                    Err(error) => format!("<unassembled result: {error}>"),
                }
            }
            Op::Pull {
                view, pattern, eid, ..
            } => {
                let response = client
                    .pull(self.read(
                        pb::PullRequest {
                            db: Some(spec(db, *view)),
                            pattern: edn(pattern),
                            eid: edn(eid),
                        },
                        at_least,
                    ))
                    .await?
                    .into_inner();
                match codec::decode_edn(&response.result) {
                    Ok(pulled) => answer::edn(&pulled, names),
                    Err(error) => format!("<undecodable pull: {error}>"),
                }
            }
            Op::Datoms {
                view,
                index,
                components,
                limit,
                ..
            } => {
                let chunks = self
                    .datoms(
                        &mut client,
                        spec(db, *view),
                        index,
                        edn(components),
                        *limit,
                        at_least,
                    )
                    .await?;
                answer::datom_chunks(&chunks, names)
            }
            Op::TxRange { start, end, .. } => {
                let stream = client
                    .tx_range(self.read(
                        pb::TxRangeRequest {
                            db: db.to_owned(),
                            start: *start,
                            end: *end,
                        },
                        at_least,
                    ))
                    .await?
                    .into_inner();
                let txes: Vec<String> = collect(stream)
                    .await?
                    .into_iter()
                    .flat_map(|chunk| chunk.txes)
                    .map(|tx| format!("t {} {}", tx.t, answer::logged(tx.tx_instant, &tx.datoms, names)))
                    .collect();
                format!("{} transactions [{}]", txes.len(), txes.join("; "))
            }
            Op::DbStats { view, .. } => {
                let response = client
                    .db_stats(self.read(
                        pb::DbStatsRequest {
                            db: Some(spec(db, *view)),
                        },
                        at_least,
                    ))
                    .await?
                    .into_inner();
                if *view == View::Current {
                    bases.saw(db, response.basis_t);
                }
                // Every datom of the same view, to take the fleet's own out
                // of the counts (the harness's call, not the sequence's).
                let listing = match self
                    .datoms(&mut client, spec(db, *view), "eavt", edn("[]"), 0, at_least)
                    .await
                {
                    Ok(listing) => listing,
                    // Gone between the two calls (a deleted database whose
                    // replica retired meanwhile, note 0016 deviation 6):
                    // the answer a moment later, which is the listing's.
                    Err(status) if status.code() == tonic::Code::NotFound => return Err(status),
                    Err(status) => {
                        // Uncorrected counts then differ: say why.
                        eprintln!(
                            "{:?}: the listing of {db:?} for DbStats failed: {status:?}",
                            self.side
                        );
                        Vec::new()
                    }
                };
                answer::stats(&response, &listing, names)
            }
            Op::PeerTransact { edn: text, .. } => {
                let response = client
                    .transact(request(pb::TransactRequest {
                        db: db.to_owned(),
                        protocol_version: corium_protocol::PROTOCOL_VERSION,
                        tx_data: edn(text),
                        expected_basis_t: None,
                    }))
                    .await?
                    .into_inner();
                bases.saw(db, response.basis_t);
                answer::transacted(&response, names)
            }
            Op::PeerSubscribe { from_basis_t, .. } => {
                let stream = client
                    .subscribe(request(crate::corium::subscribe_request(db, *from_basis_t)))
                    .await?
                    .into_inner();
                super::transactor::backfill(stream, db, *from_basis_t, names, bases).await?
            }
            other => unreachable!("not a PeerServer call: {other:?}"),
        })
    }

    /// A `Datoms` call's chunks.
    async fn datoms(
        &self,
        client: &mut PeerServerClient<Channel>,
        view: pb::DbViewSpec,
        index: &str,
        components: Vec<u8>,
        limit: u64,
        basis: u64,
    ) -> Result<Vec<Vec<u8>>, tonic::Status> {
        let stream = client
            .datoms(self.read(
                pb::DatomsRequest {
                    db: Some(view),
                    index: index.to_owned(),
                    components,
                    limit,
                },
                basis,
            ))
            .await?
            .into_inner();
        Ok(collect(stream)
            .await?
            .into_iter()
            .map(|chunk| chunk.datoms)
            .collect())
    }
}

/// `db` in `view`, as a request names it.
fn spec(db: &str, view: View) -> pb::DbViewSpec {
    pb::DbViewSpec {
        db: db.to_owned(),
        view: match view {
            View::Current => None,
            View::AsOf(t) => Some(pb::db_view_spec::View::AsOf(t)),
            View::Since(t) => Some(pb::db_view_spec::View::Since(t)),
            View::History => Some(pb::db_view_spec::View::History(true)),
        },
    }
}

/// Every message of a stream, within [`DEADLINE`].
async fn collect<T>(mut stream: tonic::Streaming<T>) -> Result<Vec<T>, tonic::Status> {
    tokio::time::timeout(DEADLINE, async {
        let mut items = Vec::new();
        while let Some(item) = stream.message().await? {
            items.push(item);
        }
        Ok(items)
    })
    .await
    .map_err(|_| tonic::Status::deadline_exceeded("the stream did not end within the deadline"))?
}

/// Waits (at most [`CATCH_UP`]) until the stock peer server at `channel`
/// has applied `db` up to `basis`; one that does not is left as it is, and
/// its answer compared (a stale answer is then a difference).
async fn catch_up(channel: &Channel, db: &str, basis: u64) {
    let mut client = PeerServerClient::new(channel.clone());
    let started = Instant::now();
    let mut at = None;
    while started.elapsed() < CATCH_UP {
        let stats = client
            .db_stats(request(pb::DbStatsRequest {
                db: Some(spec(db, View::Current)),
            }))
            .await;
        match stats {
            Ok(stats) if stats.get_ref().basis_t >= basis => return,
            Ok(stats) => at = Some(stats.into_inner().basis_t),
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("the stock peer server of {db:?} did not reach basis {basis} within {CATCH_UP:?} (at {at:?})");
}
