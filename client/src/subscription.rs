//! Subscriptions that survive disconnects: after any stream failure the SDK
//! reconnects through the fleet address asking for reports after the last
//! one it delivered, so the caller sees every `t` once, in order, with no
//! gap (the owner backfills from the durable log).

use corium_fleet_wire::kind::ErrorKind;
use corium_protocol::pb;
use corium_protocol::pb::transactor_client::TransactorClient;

use crate::auth::Authorized;
use crate::config::Config;
use crate::error::{Error, status_kind};
use crate::retry::Backoff;

/// A resuming subscription. Call [`Subscription::next`] in a loop.
pub struct Subscription {
    /// The fleet address's channel (shared with the client it came from),
    /// attaching the client's token to every (re)subscribe.
    channel: Authorized,
    /// The database subscribed to.
    db: String,
    /// The client's timeouts and retry budget.
    config: Config,
    /// The last `t` delivered: reconnects ask for reports after it.
    last_t: u64,
    stream: Option<tonic::Streaming<pb::SubscribeItem>>,
    /// Reconnects since the subscription was created.
    reconnects: u64,
}

impl Subscription {
    pub(crate) const fn new(channel: Authorized, db: String, config: Config, from_basis_t: u64) -> Self {
        Self {
            channel,
            db,
            config,
            last_t: from_basis_t,
            stream: None,
            reconnects: 0,
        }
    }

    /// The last `t` delivered.
    #[must_use]
    pub const fn last_t(&self) -> u64 {
        self.last_t
    }

    /// How many times the stream was re-established.
    #[must_use]
    pub const fn reconnects(&self) -> u64 {
        self.reconnects
    }

    async fn open(&mut self) -> Result<(), tonic::Status> {
        let mut client = TransactorClient::new(self.channel.clone());
        let mut request = tonic::Request::new(pb::SubscribeRequest {
            db: self.db.clone(),
            protocol_version: corium_protocol::PROTOCOL_VERSION,
            from_basis_t: self.last_t,
        });
        let route = self
            .db
            .parse()
            .map_err(|_| tonic::Status::invalid_argument("database name is not valid metadata"))?;
        request
            .metadata_mut()
            .insert(corium_fleet_wire::metadata::DATABASE_ROUTE, route);
        let stream = tokio::time::timeout(self.config.request_timeout, client.subscribe(request))
            .await
            .map_err(|_| tonic::Status::deadline_exceeded("subscribe did not answer in time"))??;
        self.stream = Some(stream.into_inner());
        Ok(())
    }

    /// The next committed transaction after the last one delivered.
    ///
    /// # Errors
    /// When the stream cannot be re-established within the retry budget, or
    /// the fleet refuses it (unknown database).
    pub async fn next(&mut self) -> Result<pb::TxReport, Error> {
        let mut backoff: Option<Backoff> = None;
        loop {
            // A stream that broke after it was established is always worth
            // resuming (it is read-only and resumes from `last_t`), unless
            // the fleet said the request itself is wrong.
            let mut mid_stream = false;
            let failure = match &mut self.stream {
                None => match self.open().await {
                    Ok(()) => continue,
                    Err(status) => status,
                },
                Some(stream) => {
                    match tokio::time::timeout(self.config.stream_idle_timeout, stream.message()).await {
                        Ok(Ok(Some(item))) => {
                            if let Some(pb::subscribe_item::Item::Report(report)) = item.item {
                                // A backfill after a reconnect may repeat `t`s
                                // already delivered; skip them.
                                if report.t > self.last_t {
                                    self.last_t = report.t;
                                    return Ok(report);
                                }
                            }
                            backoff = None;
                            continue;
                        }
                        Ok(Ok(None)) => tonic::Status::unavailable("the subscription ended"),
                        Ok(Err(status)) => {
                            mid_stream = true;
                            status
                        }
                        Err(_) => tonic::Status::deadline_exceeded("the subscription went quiet"),
                    }
                }
            };
            self.stream = None;
            let kind = status_kind(&failure);
            let retryable = matches!(kind, ErrorKind::RetryLater | ErrorKind::RetryAtHint)
                || (mid_stream && kind != ErrorKind::GiveUp)
                || failure.code() == tonic::Code::Cancelled;
            if !retryable {
                return Err(Error::from_status(failure));
            }
            let backoff = backoff.get_or_insert_with(|| Backoff::new(&self.config.retry));
            tracing::debug!(code = ?failure.code(), last_t = self.last_t, "subscription interrupted; resuming");
            if !backoff
                .wait_at_least(corium_fleet_wire::overload::retry_after(&failure))
                .await
            {
                return Err(Error::from_status(failure));
            }
            self.reconnects += 1;
        }
    }
}
