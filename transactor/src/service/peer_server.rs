//! `corium.v1.PeerServer`, Corium's thin-client surface: reads (`Query`,
//! `Pull`, `Datoms`, `TxRange`, `DbStats`) from this node's read replica of
//! the database (`crate::replica`), at least as far as the client asked;
//! `Transact` and `Subscribe` as the owner serves them on `Transactor`
//! (the ingress routes those to the owner, with the same request ids).
//! A read's work runs on the process's read threads, below the writes'
//! priority.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use corium_fleet_wire::metadata;
use corium_protocol::authz::Action;
use corium_protocol::pb;
use corium_protocol::pb::peer_server_server::PeerServer;
use corium_protocol::pb::transactor_server::Transactor;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::admit::{Admitted, Door, Refused, admit};
use super::node::Node;
use super::transactor::FleetTransactor;
use crate::replica::{Replica, on_read_threads};
use crate::waiters::check_reach;

/// A stream of chunks, as Corium's peer server answers.
type Chunks<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The margin kept from a call's deadline, so a replica that cannot reach
/// the basis in time answers `UNAVAILABLE` with a hint before the caller
/// gives up.
const DEADLINE_MARGIN: Duration = Duration::from_millis(50);

/// How long a read may wait without `grpc-timeout` (the server's own bound
/// is a minute; a replica answers well before it).
const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// The fleet's `PeerServer` service.
pub(crate) struct FleetPeerServer(pub Arc<Node>);

/// The time left of the call's `grpc-timeout` (less a margin), or
/// [`DEFAULT_WAIT`].
fn time_left(map: &tonic::metadata::MetadataMap) -> Duration {
    map.get("grpc-timeout")
        .and_then(|value| value.to_str().ok())
        .and_then(metadata::grpc_timeout)
        .map_or(DEFAULT_WAIT, |timeout| timeout.saturating_sub(DEADLINE_MARGIN))
}

/// The view a `Pull`, `Datoms` or `DbStats` request names.
fn spec(view: Option<&pb::DbViewSpec>) -> Result<pb::DbViewSpec, Status> {
    view.cloned()
        .ok_or_else(|| Status::invalid_argument("request names no database"))
}

/// The basis a view names: as of `t` or since `t` need the database at `t`.
fn view_basis(spec: &pb::DbViewSpec) -> Option<u64> {
    match spec.view {
        Some(pb::db_view_spec::View::AsOf(t) | pb::db_view_spec::View::Since(t)) => Some(t),
        _ => None,
    }
}

impl FleetPeerServer {
    /// The replica that answers a read of `db` by `request`'s caller, once
    /// it has applied the client's `corium-min-basis` and the basis `view_t`
    /// names, and the read's place under the node's work limits (held until
    /// it is answered). The front door runs first: the caller is authorized
    /// for `action` (a view it is granted through is applied by the stock
    /// peer server), so nobody unauthorized makes a node build a replica;
    /// the wait for the basis holds a place among the node's waits, never a
    /// work place, and the work place is taken once the basis is reached.
    async fn replica<T>(
        &self,
        request: &Request<T>,
        db: &str,
        action: Action,
        view_t: Option<u64>,
    ) -> Result<(Arc<Replica>, Admitted), Status> {
        let node = &self.0;
        let min_basis = metadata::min_basis(request.metadata())
            .map_err(|error| Status::invalid_argument(error.to_string()))?;
        let mut admitted = admit(node, request, &Door::on(action, db).views().waits()).await?;
        let within = time_left(request.metadata());
        let started = std::time::Instant::now();
        let counts = &node.replicas.counts;
        let outcome = async {
            let replica = node.replicas.get(&node.host, &node.guard, db, within).await?;
            replica.check_following()?;
            if let Some(target) = min_basis
                && let Err(out_of_reach) = check_reach(db, target, replica.owner_basis_seen(), within)
            {
                node.waiters.count_out_of_reach();
                return Err(Refused::from(out_of_reach).into());
            }
            let waited = replica
                .reach(min_basis, view_t, within.saturating_sub(started.elapsed()))
                .await?;
            Ok::<_, Status>((replica, waited))
        }
        .await;
        match outcome {
            Ok((replica, waited)) => {
                let counter = if waited { &counts.waited } else { &counts.served };
                counter.fetch_add(1, Ordering::Relaxed);
                admitted.work_after_wait(node, db).await?;
                Ok((replica, admitted))
            }
            Err(status) => {
                counts.refused.fetch_add(1, Ordering::Relaxed);
                Err(status)
            }
        }
    }
}

#[tonic::async_trait]
impl PeerServer for FleetPeerServer {
    type QueryStream = Chunks<pb::QueryResultChunk>;

    async fn query(&self, request: Request<pb::QueryRequest>) -> Result<Response<Self::QueryStream>, Status> {
        let dbs = &request.get_ref().dbs;
        let db = dbs
            .first()
            .map(|spec| spec.db.clone())
            .ok_or_else(|| Status::invalid_argument("request names no database"))?;
        let view_t = dbs.iter().filter_map(view_basis).max();
        let (replica, _work) = self.replica(&request, &db, Action::Query, view_t).await?;
        on_read_threads(async move { replica.service.query(request).await }).await
    }

    async fn pull(&self, request: Request<pb::PullRequest>) -> Result<Response<pb::PullResponse>, Status> {
        let spec = spec(request.get_ref().db.as_ref())?;
        let (replica, _work) = self
            .replica(&request, &spec.db, Action::Pull, view_basis(&spec))
            .await?;
        on_read_threads(async move { replica.service.pull(request).await }).await
    }

    async fn transact(
        &self,
        request: Request<pb::TransactRequest>,
    ) -> Result<Response<pb::TransactResponse>, Status> {
        // The owner's own path: request ids, the ledger, the fence.
        FleetTransactor(Arc::clone(&self.0)).transact(request).await
    }

    type DatomsStream = Chunks<pb::DatomChunk>;

    async fn datoms(
        &self,
        request: Request<pb::DatomsRequest>,
    ) -> Result<Response<Self::DatomsStream>, Status> {
        let spec = spec(request.get_ref().db.as_ref())?;
        let (replica, _work) = self
            .replica(&request, &spec.db, Action::Datoms, view_basis(&spec))
            .await?;
        on_read_threads(async move { replica.service.datoms(request).await }).await
    }

    type TxRangeStream = Chunks<pb::TxChunk>;

    async fn tx_range(
        &self,
        request: Request<pb::TxRangeRequest>,
    ) -> Result<Response<Self::TxRangeStream>, Status> {
        let db = request.get_ref().db.clone();
        let (replica, _work) = self.replica(&request, &db, Action::TxRange, None).await?;
        on_read_threads(async move { replica.service.tx_range(request).await }).await
    }

    async fn db_stats(
        &self,
        request: Request<pb::DbStatsRequest>,
    ) -> Result<Response<pb::DbStatsResponse>, Status> {
        let spec = spec(request.get_ref().db.as_ref())?;
        let (replica, _work) = self
            .replica(&request, &spec.db, Action::Inspect, view_basis(&spec))
            .await?;
        on_read_threads(async move { replica.service.db_stats(request).await }).await
    }

    type SubscribeStream = super::subscribe::ItemStream;

    async fn subscribe(
        &self,
        request: Request<pb::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        // The owner's own stream (a stock peer server relays the
        // transactor's; the ingress routes this call to the owner).
        FleetTransactor(Arc::clone(&self.0)).subscribe(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_timeout(value: &str) -> tonic::metadata::MetadataMap {
        let mut map = tonic::metadata::MetadataMap::new();
        map.insert("grpc-timeout", value.parse().unwrap());
        map
    }

    #[test]
    fn the_wait_is_the_deadline_less_a_margin() {
        assert_eq!(time_left(&with_timeout("2S")), Duration::from_millis(1950));
        assert_eq!(time_left(&with_timeout("300m")), Duration::from_millis(250));
        assert_eq!(time_left(&with_timeout("10m")), Duration::ZERO);
        assert_eq!(time_left(&tonic::metadata::MetadataMap::new()), DEFAULT_WAIT);
        assert_eq!(time_left(&with_timeout("junk")), DEFAULT_WAIT);
    }

    #[test]
    fn as_of_and_since_name_a_basis_and_the_rest_do_not() {
        let spec = |view| pb::DbViewSpec { db: "a".into(), view };
        assert_eq!(view_basis(&spec(Some(pb::db_view_spec::View::AsOf(7)))), Some(7));
        assert_eq!(view_basis(&spec(Some(pb::db_view_spec::View::Since(3)))), Some(3));
        assert_eq!(
            view_basis(&spec(Some(pb::db_view_spec::View::History(true)))),
            None
        );
        assert_eq!(
            view_basis(&spec(Some(pb::db_view_spec::View::AsOfInstant(5)))),
            None
        );
        assert_eq!(view_basis(&spec(None)), None);
    }
}
