//! The replicas' relay as a gRPC service (`replica/relay.rs` says what it
//! is for): `corium.v1.Transactor`'s `Subscribe` on a loopback listener,
//! forwarded to the owner the subscribing replica follows. Its front door
//! is the relay's own and comes first: only a caller presenting this
//! process's relay secret and a live replica's id gets any work done. A
//! replica's connection subscribes and nothing else (the fleet's replicas
//! never write, sync or ask status through it), so nothing else is relayed.

use std::sync::Arc;

use corium_protocol::pb;
use corium_protocol::pb::transactor_server::{Transactor, TransactorServer};
use tonic::{Request, Response, Status};

use crate::replica::{Relay, RelayedStream};

/// The relay's `corium.v1.Transactor`.
pub(crate) struct RelaySvc {
    relay: Arc<Relay>,
}

fn not_relayed() -> Status {
    Status::unimplemented("the replica relay relays subscriptions only")
}

#[tonic::async_trait]
impl Transactor for RelaySvc {
    async fn transact(
        &self,
        _: Request<pb::TransactRequest>,
    ) -> Result<Response<pb::TransactResponse>, Status> {
        Err(not_relayed())
    }

    async fn saga_commit(
        &self,
        _: Request<pb::SagaCommitRequest>,
    ) -> Result<Response<pb::SagaCommitResponse>, Status> {
        Err(not_relayed())
    }

    async fn saga_finish(
        &self,
        _: Request<pb::SagaFinishRequest>,
    ) -> Result<Response<pb::SagaFinishResponse>, Status> {
        Err(not_relayed())
    }

    type SubscribeStream = RelayedStream;

    async fn subscribe(
        &self,
        request: Request<pb::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let following = self.relay.admit(request.metadata())?;
        let stream = self.relay.subscribe(request.into_inner(), following).await?;
        Ok(Response::new(stream))
    }

    async fn sync(&self, request: Request<pb::SyncRequest>) -> Result<Response<pb::SyncResponse>, Status> {
        self.relay.admit(request.metadata())?;
        Err(not_relayed())
    }

    async fn status(
        &self,
        request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        self.relay.admit(request.metadata())?;
        Err(not_relayed())
    }
}

/// Serves `relay` on `listener` (loopback) until `stop` turns true.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    relay: Arc<Relay>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let service = TransactorServer::new(RelaySvc { relay })
        .max_decoding_message_size(super::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(super::MAX_MESSAGE_BYTES);
    let stopped = async move { corium_fleet_common::signal::until_true(&mut stop).await };
    if let Err(error) = tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(listener), stopped)
        .await
    {
        tracing::error!(%error, "the replica relay stopped; read replicas cannot follow a new owner");
    }
}
