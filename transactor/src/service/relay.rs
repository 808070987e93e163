//! The replicas' relay as a gRPC service (`replica/relay.rs` says what it
//! is for): `corium.v1.Transactor`'s `Subscribe`, `Sync` and `Status` on a
//! loopback listener, forwarded to the database's owner now. Its front door
//! is the relay's own and comes first: only a caller presenting this
//! process's relay secret and a live replica's id gets any work done; writes
//! are not relayed at all.

use std::sync::Arc;
use std::time::Duration;

use corium_protocol::pb;
use corium_protocol::pb::transactor_server::{Transactor, TransactorServer};
use tonic::{Request, Response, Status};

use crate::host::Host;
use crate::replica::{Relay, RelayedStream};

/// A relayed call that is not a subscription gets no longer than this.
const RELAYED_CALL_DEADLINE: Duration = Duration::from_secs(30);

/// The relay's `corium.v1.Transactor`.
pub(crate) struct RelaySvc {
    relay: Arc<Relay>,
    host: Arc<Host>,
}

fn not_relayed() -> Status {
    Status::unimplemented("the replica relay relays reads only")
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
        let cut = self.relay.admit(request.metadata())?;
        let stream = self
            .relay
            .subscribe(&self.host, request.into_inner(), cut)
            .await?;
        Ok(Response::new(stream))
    }

    async fn sync(&self, request: Request<pb::SyncRequest>) -> Result<Response<pb::SyncResponse>, Status> {
        self.relay.admit(request.metadata())?;
        let answer = tokio::time::timeout(
            RELAYED_CALL_DEADLINE,
            self.relay.sync(&self.host, request.into_inner()),
        )
        .await
        .map_err(|_| Status::deadline_exceeded("the owner did not answer the relayed sync in time"))??;
        Ok(Response::new(answer))
    }

    async fn status(
        &self,
        request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        self.relay.admit(request.metadata())?;
        let answer = tokio::time::timeout(
            RELAYED_CALL_DEADLINE,
            self.relay.status(&self.host, request.into_inner()),
        )
        .await
        .map_err(|_| Status::deadline_exceeded("the owner did not answer the relayed status in time"))??;
        Ok(Response::new(answer))
    }
}

/// Serves `relay` on `listener` (loopback) until `stop` turns true.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    relay: Arc<Relay>,
    host: Arc<Host>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let service = TransactorServer::new(RelaySvc { relay, host })
        .max_decoding_message_size(crate::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(crate::MAX_MESSAGE_BYTES);
    let stopped = async move {
        let _ = stop.wait_for(|stop| *stop).await;
    };
    if let Err(error) = tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(listener), stopped)
        .await
    {
        tracing::error!(%error, "the replica relay stopped; read replicas cannot follow a new owner");
    }
}
