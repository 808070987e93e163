//! The replicas' relay: a loopback endpoint through which every read replica
//! of this node subscribes, so that a replica follows whoever holds its
//! database's lease *now* and survives an owner move with its state.
//!
//! A replica is a stock `corium_peer::Connection`. Its connection loop, on
//! a lost stream, resubscribes from the basis it has applied; it can only
//! do so at the endpoints it was built with, under one TLS configuration
//! (design note 0017, alternative 2: one configuration cannot check that
//! each node's certificate names *that* node). So the connection is pointed
//! here instead. Each replica has a [`Seat`] holding the owner it follows —
//! the one decision, made by the replica's probe — and a subscription
//! through its seat is forwarded to that owner over the client the probe
//! already holds (the node-to-node mTLS, the owner's certificate checked to
//! name it): no lookup and no new connection per subscription. When the
//! probe [`follow`](Seat::follow)s a new owner, the relayed stream ends; the
//! connection resubscribes from its basis and the new owner sends only the
//! tail (design note 0023). Nothing is rebuilt and no history is replayed.
//!
//! The endpoint listens on loopback only and answers only callers that
//! present this process's relay secret (random, never written anywhere)
//! and the id of a live replica: nothing outside the process can use the
//! node's credentials through it.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use corium_protocol::pb;
use corium_protocol::pb::transactor_client::TransactorClient;
use futures::StreamExt;
use tokio::sync::watch;
use tokio_stream::Stream;
use tonic::Status;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;

use super::ReplicaError;

/// A relayed subscription: the owner's items until the replica follows
/// another owner (then it ends, and the replica resubscribes).
pub(crate) type RelayedStream = Pin<Box<dyn Stream<Item = Result<pb::SubscribeItem, Status>> + Send>>;

/// The owner a replica follows now.
#[derive(Clone)]
pub(crate) struct Owner {
    /// The node holding the lease (over mTLS its certificate was verified
    /// to name it).
    pub node: String,
    /// A client of it: the probe's `Sync` and the relayed subscription.
    pub client: TransactorClient<Channel>,
}

/// The node's relay: where its replicas subscribe, and the secret they
/// present.
pub(crate) struct Relay {
    /// `http://127.0.0.1:<port>`, once the listener is bound.
    endpoint: OnceLock<String>,
    /// Presented by replicas as `Bearer <secret>.<replica id>`: 256 random
    /// bits per process.
    secret: String,
    /// `Bearer <node token>`, as this node presents itself to its peers
    /// (`None` with `--serve-open`).
    node_token: Option<MetadataValue<Ascii>>,
    /// Per live replica, the owner it follows and its probe's nudge. An id
    /// not here is refused: a seat leaves when its replica is dropped.
    seats: Mutex<HashMap<u64, Following>>,
    next_id: AtomicU64,
}

/// What the relay knows of one replica: the owner it follows (watched),
/// and how to wake its probe.
#[derive(Clone)]
pub(crate) struct Following {
    /// The owner; it changes when the probe follows another.
    pub(crate) owner: watch::Receiver<Owner>,
    /// Woken when the owner refused or ended a relayed subscription (a move
    /// under way): the probe asks at once instead of at its next period, so
    /// the replica's next subscription finds the new owner sooner.
    pub(crate) nudge: Arc<tokio::sync::Notify>,
}

/// One replica's place at the relay; dropping it forgets the replica (its
/// token is refused and its relayed streams end).
pub(crate) struct Seat {
    /// The relay's endpoint, for the replica's connection.
    pub endpoint: String,
    /// The bearer token (`<secret>.<id>`, without the `Bearer ` scheme,
    /// which the connection adds).
    pub token: String,
    id: u64,
    owner: watch::Sender<Owner>,
    nudge: Arc<tokio::sync::Notify>,
    relay: Arc<Relay>,
}

impl Seat {
    /// The owner this replica follows now.
    pub(crate) fn owner(&self) -> Owner {
        self.owner.borrow().clone()
    }

    /// Follows `owner` from now on: the relayed streams to the previous one
    /// end, and the next subscription goes to `owner`.
    pub(crate) fn follow(&self, owner: Owner) {
        self.owner.send_replace(owner);
    }

    /// Wakes when a relayed subscription was refused or ended by its owner
    /// (the probe then asks at once).
    pub(crate) fn nudged(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&self.nudge)
    }

    /// `Bearer <node token>`: how this node presents itself to the owner.
    pub(crate) fn node_token(&self) -> Option<MetadataValue<Ascii>> {
        self.relay.node_token.clone()
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.relay.seats().remove(&self.id);
    }
}

impl Relay {
    /// A relay with a fresh secret, forwarding under `node_token`; it
    /// serves once [`serving_at`](Self::serving_at) names its listener.
    #[must_use]
    pub(crate) fn new(node_token: Option<&str>) -> Arc<Self> {
        Arc::new(Self {
            endpoint: OnceLock::new(),
            secret: format!(
                "{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            ),
            node_token: node_token.and_then(|token| format!("Bearer {token}").parse().ok()),
            seats: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        })
    }

    /// Records where the relay listens (a loopback address).
    pub(crate) fn serving_at(&self, address: std::net::SocketAddr) {
        let _ = self.endpoint.set(format!("http://{address}"));
    }

    fn seats(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Following>> {
        self.seats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A seat for a new replica following `owner`, or `None` when the relay
    /// is not serving (the replica then cannot be built here).
    pub(crate) fn seat(self: &Arc<Self>, owner: Owner) -> Option<Seat> {
        let endpoint = self.endpoint.get()?.clone();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = watch::channel(owner);
        let nudge = Arc::new(tokio::sync::Notify::new());
        self.seats().insert(
            id,
            Following {
                owner: receiver,
                nudge: Arc::clone(&nudge),
            },
        );
        Some(Seat {
            endpoint,
            token: format!("{}.{id}", self.secret),
            id,
            owner: sender,
            nudge,
            relay: Arc::clone(self),
        })
    }

    /// What the relay knows of the live replica presenting `metadata`'s
    /// bearer token: the owner it follows, watched.
    ///
    /// # Errors
    /// [`ReplicaError::NotAReplica`] for anything else.
    pub(crate) fn admit(&self, metadata: &tonic::metadata::MetadataMap) -> Result<Following, ReplicaError> {
        let presented = metadata
            .get("authorization")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .and_then(|token| token.rsplit_once('.'))
            .filter(|(secret, _)| same_secret(secret.as_bytes(), self.secret.as_bytes()))
            .and_then(|(_, id)| id.parse::<u64>().ok());
        presented
            .and_then(|id| self.seats().get(&id).cloned())
            .ok_or(ReplicaError::NotAReplica)
    }

    /// Forwards a replica's subscription to the owner it follows; the
    /// stream ends when the replica follows another (or is dropped).
    ///
    /// # Errors
    /// The replica followed another owner meanwhile, or the owner refused
    /// or could not be reached: the replica's connection tries again.
    pub(crate) async fn subscribe(
        &self,
        request: pb::SubscribeRequest,
        Following {
            owner: mut following,
            nudge,
        }: Following,
    ) -> Result<RelayedStream, ReplicaError> {
        let mut owner = following.borrow_and_update().clone();
        let mut request = tonic::Request::new(request);
        if let Some(token) = &self.node_token {
            request.metadata_mut().insert("authorization", token.clone());
        }
        // A change, or the seat gone (the replica was dropped).
        let mut moved = Box::pin(async move {
            let _ = following.changed().await;
        });
        let answered = tokio::select! {
            answered = owner.client.subscribe(request) => answered,
            () = &mut moved => {
                return Err(ReplicaError::not_now(
                    format!("the replica now follows another owner than {}; resubscribe", owner.node),
                    std::time::Duration::ZERO,
                ));
            }
        };
        let items = match answered {
            Ok(answer) => answer.into_inner(),
            Err(status) => {
                nudge.notify_one();
                return Err(ReplicaError::Relayed(Box::new(status)));
            }
        };
        // An owner that ends the stream (it drained, or refused mid-way) is
        // likely moving the database: the probe asks at once. A move the
        // probe made itself ends the stream through `moved` instead.
        let on_error = Arc::clone(&nudge);
        let items = items
            .inspect(move |item| {
                if item.is_err() {
                    on_error.notify_one();
                }
            })
            .chain(futures::stream::poll_fn(move |_| {
                nudge.notify_one();
                std::task::Poll::Ready(None)
            }));
        Ok(Box::pin(items.take_until(moved)))
    }
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

    /// An owner at an address nothing listens on (the client connects
    /// lazily: nothing is dialled here).
    fn owner(node: &str) -> Owner {
        let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:9").connect_lazy();
        Owner {
            node: node.to_owned(),
            client: TransactorClient::new(channel),
        }
    }

    #[tokio::test]
    async fn only_a_live_replica_with_the_secret_is_admitted() {
        let relay = Relay::new(None);
        assert!(
            relay.seat(owner("node-1")).is_none(),
            "no seat before the relay serves"
        );
        relay.serving_at("127.0.0.1:9".parse().unwrap());
        let seat = relay.seat(owner("node-1")).unwrap();
        assert_eq!(seat.endpoint, "http://127.0.0.1:9");
        assert!(relay.admit(&bearer(&seat.token)).is_ok());
        let other = relay.seat(owner("node-2")).unwrap();
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
        let token = seat.token.clone();
        drop(seat);
        assert!(
            matches!(relay.admit(&bearer(&token)), Err(ReplicaError::NotAReplica)),
            "a dropped replica's token is refused"
        );
        assert!(relay.admit(&bearer(&other.token)).is_ok());
    }

    #[tokio::test]
    async fn following_another_owner_reaches_only_that_replica() {
        let relay = Relay::new(None);
        relay.serving_at("127.0.0.1:9".parse().unwrap());
        let (one, two) = (
            relay.seat(owner("node-1")).unwrap(),
            relay.seat(owner("node-1")).unwrap(),
        );
        let mut first = relay.admit(&bearer(&one.token)).unwrap().owner;
        let second = relay.admit(&bearer(&two.token)).unwrap().owner;
        one.follow(owner("node-2"));
        assert!(first.has_changed().unwrap());
        assert!(!second.has_changed().unwrap());
        assert_eq!(first.borrow_and_update().node, "node-2");
        assert_eq!(two.owner().node, "node-1");
        drop(one);
        assert!(
            first.changed().await.is_err(),
            "dropping the seat ends the streams too"
        );
    }

    #[tokio::test]
    async fn a_refused_subscription_wakes_the_replicas_probe() {
        let relay = Relay::new(None);
        relay.serving_at("127.0.0.1:9".parse().unwrap());
        let seat = relay.seat(owner("node-1")).unwrap();
        let nudged = seat.nudged();
        let following = relay.admit(&bearer(&seat.token)).unwrap();
        // Nothing listens at the owner's address: the subscription fails.
        let answer = relay.subscribe(pb::SubscribeRequest::default(), following).await;
        assert!(matches!(answer, Err(ReplicaError::Relayed(_))));
        tokio::time::timeout(std::time::Duration::from_secs(1), nudged.notified())
            .await
            .expect("the probe is woken");
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abd", b"abc"));
        assert!(!same_secret(b"ab", b"abc"));
        assert!(!same_secret(b"", b"abc"));
    }
}
