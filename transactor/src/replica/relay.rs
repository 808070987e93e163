//! The replicas' relay: a loopback endpoint through which every read replica
//! of this node subscribes, so that a replica follows whoever holds its
//! database's lease *now* and survives an owner move with its state.
//!
//! A replica is a stock `corium_peer::Connection`. Its connection loop, on
//! a lost stream, resubscribes from the basis it has applied; it can only
//! do so at the endpoints it was built with, under one TLS configuration
//! (design note 0017, alternative 2: one configuration cannot check that
//! each node's certificate names *that* node). So the connection is pointed
//! here instead: each subscription is forwarded to the database's current
//! owner over the node-to-node mTLS, that owner's certificate checked to
//! name it, as the replica's own probe does. When the probe finds that the
//! owner changed it [`cut`](Relay::cut)s the relayed stream; the connection
//! resubscribes from its basis and the new owner sends only the tail
//! (design note 0023). Nothing is rebuilt and no history is replayed.
//!
//! The endpoint listens on loopback only and answers only callers that
//! present this process's relay secret (random, never written anywhere)
//! and the id of a live replica: nothing outside the process can use the
//! node's credentials through it.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use corium_fleet_common::names;
use corium_protocol::pb;
use corium_protocol::pb::transactor_client::TransactorClient;
use futures::StreamExt;
use tokio::sync::watch;
use tokio_stream::Stream;
use tonic::Status;
use tonic::transport::Channel;

use super::{ReplicaError, owner};
use crate::host::Host;

/// A relayed subscription: the owner's items until the replica's probe cuts
/// it (then it ends, and the replica resubscribes).
pub(crate) type RelayedStream = Pin<Box<dyn Stream<Item = Result<pb::SubscribeItem, Status>> + Send>>;

/// The node's relay: where its replicas subscribe, and the secret they
/// present.
pub(crate) struct Relay {
    /// `http://127.0.0.1:<port>`, once the listener is bound.
    endpoint: OnceLock<String>,
    /// Presented by replicas as `Bearer <secret>.<replica id>`: 256 random
    /// bits per process.
    secret: String,
    /// Per live replica, what ends its relayed streams when its owner
    /// changed. An id not here is refused: a replica's id is forgotten when
    /// it is dropped.
    cuts: Mutex<HashMap<u64, watch::Sender<u64>>>,
    next_id: AtomicU64,
}

/// One replica's place at the relay: what its connection is configured with.
pub(crate) struct Seat {
    /// The relay's endpoint.
    pub endpoint: String,
    /// The bearer token (`<secret>.<id>`, without the `Bearer ` scheme,
    /// which the connection adds).
    pub token: String,
    /// The replica's id at the relay (for [`Relay::cut`] and
    /// [`Relay::forget`]).
    pub id: u64,
}

impl Relay {
    /// A relay with a fresh secret; it serves once [`serving_at`](Self::serving_at)
    /// names its listener.
    #[must_use]
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            endpoint: OnceLock::new(),
            secret: format!(
                "{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            ),
            cuts: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        })
    }

    /// Records where the relay listens (a loopback address).
    pub(crate) fn serving_at(&self, address: std::net::SocketAddr) {
        let _ = self.endpoint.set(format!("http://{address}"));
    }

    fn cuts(&self) -> std::sync::MutexGuard<'_, HashMap<u64, watch::Sender<u64>>> {
        self.cuts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place for a new replica, or `None` when the relay is not serving
    /// (the replica then cannot be built here).
    pub(crate) fn seat(&self) -> Option<Seat> {
        let endpoint = self.endpoint.get()?.clone();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.cuts().insert(id, watch::channel(0).0);
        Some(Seat {
            endpoint,
            token: format!("{}.{id}", self.secret),
            id,
        })
    }

    /// Ends replica `id`'s relayed streams: its owner changed, and its
    /// connection must resubscribe (to the new one).
    pub(crate) fn cut(&self, id: u64) {
        if let Some(cut) = self.cuts().get(&id) {
            cut.send_modify(|generation| *generation += 1);
        }
    }

    /// Forgets replica `id` (it was dropped): its streams end and its token
    /// is refused from now on.
    pub(crate) fn forget(&self, id: u64) {
        self.cuts().remove(&id);
    }

    /// The live replica presenting `metadata`'s bearer token, with what
    /// ends its streams.
    ///
    /// # Errors
    /// [`ReplicaError::NotAReplica`] for anything else.
    pub(crate) fn admit(
        &self,
        metadata: &tonic::metadata::MetadataMap,
    ) -> Result<watch::Receiver<u64>, ReplicaError> {
        let presented = metadata
            .get("authorization")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .and_then(|token| token.rsplit_once('.'))
            .filter(|(secret, _)| same_secret(secret.as_bytes(), self.secret.as_bytes()))
            .and_then(|(_, id)| id.parse::<u64>().ok());
        presented
            .and_then(|id| self.cuts().get(&id).map(watch::Sender::subscribe))
            .ok_or(ReplicaError::NotAReplica)
    }

    /// Forwards a replica's subscription to `db`'s owner now; the stream
    /// ends when `cut` changes (or its replica is forgotten).
    ///
    /// # Errors
    /// No owner now, or the owner unreachable or refusing: the replica's
    /// connection tries again.
    pub(crate) async fn subscribe(
        &self,
        host: &Arc<Host>,
        request: pb::SubscribeRequest,
        mut cut: watch::Receiver<u64>,
    ) -> Result<RelayedStream, ReplicaError> {
        let mut owner = owner_client(host, &request.db).await?;
        let items = owner
            .subscribe(with_node_token(host, request))
            .await
            .map_err(|status| ReplicaError::Relayed(Box::new(status)))?
            .into_inner();
        cut.mark_unchanged();
        let cut = async move {
            // A change, or the sender gone (the replica was dropped).
            let _ = cut.changed().await;
        };
        Ok(Box::pin(items.take_until(cut)))
    }

    /// Forwards a replica connection's `Sync` to `db`'s owner now.
    ///
    /// # Errors
    /// As [`subscribe`](Self::subscribe).
    pub(crate) async fn sync(
        &self,
        host: &Arc<Host>,
        request: pb::SyncRequest,
    ) -> Result<pb::SyncResponse, ReplicaError> {
        owner_client(host, &request.db)
            .await?
            .sync(with_node_token(host, request))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| ReplicaError::Relayed(Box::new(status)))
    }

    /// Forwards a replica connection's `Status` to `db`'s owner now.
    ///
    /// # Errors
    /// As [`subscribe`](Self::subscribe).
    pub(crate) async fn status(
        &self,
        host: &Arc<Host>,
        request: pb::StatusRequest,
    ) -> Result<pb::StatusResponse, ReplicaError> {
        owner_client(host, &request.db)
            .await?
            .status(with_node_token(host, request))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| ReplicaError::Relayed(Box::new(status)))
    }
}

/// A client of `db`'s owner now, over the node-to-node mTLS (its
/// certificate checked to name it).
async fn owner_client(host: &Arc<Host>, db: &str) -> Result<TransactorClient<Channel>, ReplicaError> {
    let (node, endpoint) = owner::holder(host, names::home(db)).await?;
    Ok(TransactorClient::new(host.peers.channel(&endpoint, &node).await?))
}

/// `message` as this node sends it to a peer: under its own token.
fn with_node_token<T>(host: &Host, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = host
        .peers
        .token()
        .and_then(|token| format!("Bearer {token}").parse().ok())
    {
        request.metadata_mut().insert("authorization", token);
    }
    request
}

/// Compares two secrets in time that does not depend on where they differ.
fn same_secret(presented: &[u8], expected: &[u8]) -> bool {
    presented.len() == expected.len()
        && presented
            .iter()
            .zip(expected)
            .fold(0_u8, |difference, (a, b)| difference | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(token: &str) -> tonic::metadata::MetadataMap {
        let mut metadata = tonic::metadata::MetadataMap::new();
        metadata.insert("authorization", format!("Bearer {token}").parse().unwrap());
        metadata
    }

    #[test]
    fn only_a_live_replica_with_the_secret_is_admitted() {
        let relay = Relay::new();
        assert!(relay.seat().is_none(), "no seat before the relay serves");
        relay.serving_at("127.0.0.1:9".parse().unwrap());
        let seat = relay.seat().unwrap();
        assert_eq!(seat.endpoint, "http://127.0.0.1:9");
        assert!(relay.admit(&bearer(&seat.token)).is_ok());
        let other = relay.seat().unwrap();
        assert_ne!(other.id, seat.id);
        for refused in [
            String::new(),
            "nonsense".to_owned(),
            format!("{}.{}", "0".repeat(64), seat.id),
            format!("{}.999", relay.secret),
            format!("{}.{}", &relay.secret[1..], seat.id),
        ] {
            assert!(
                matches!(relay.admit(&bearer(&refused)), Err(ReplicaError::NotAReplica)),
                "{refused:?} is refused"
            );
        }
        assert!(matches!(
            relay.admit(&tonic::metadata::MetadataMap::new()),
            Err(ReplicaError::NotAReplica)
        ));
        relay.forget(seat.id);
        assert!(
            matches!(relay.admit(&bearer(&seat.token)), Err(ReplicaError::NotAReplica)),
            "a forgotten replica's token is refused"
        );
        assert!(relay.admit(&bearer(&other.token)).is_ok());
    }

    #[tokio::test]
    async fn a_cut_reaches_only_its_replica() {
        let relay = Relay::new();
        relay.serving_at("127.0.0.1:9".parse().unwrap());
        let (one, two) = (relay.seat().unwrap(), relay.seat().unwrap());
        let mut first = relay.admit(&bearer(&one.token)).unwrap();
        let second = relay.admit(&bearer(&two.token)).unwrap();
        relay.cut(one.id);
        assert!(first.has_changed().unwrap());
        assert!(!second.has_changed().unwrap());
        first.mark_unchanged();
        relay.forget(one.id);
        assert!(first.changed().await.is_err(), "forgetting ends the streams too");
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abd", b"abc"));
        assert!(!same_secret(b"ab", b"abc"));
        assert!(!same_secret(b"", b"abc"));
    }
}
