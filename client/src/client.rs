//! [`Client`] (one fleet address) and [`Database`] (calls for one database).

use std::time::Duration;

use corium_fleet_wire::kind::ErrorKind;
use corium_fleet_wire::metadata;
use corium_protocol::pb;
use corium_protocol::pb::catalog_client::CatalogClient;
use corium_protocol::pb::transactor_client::TransactorClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::auth::{Authorized, Bearer};
use crate::config::Config;
use crate::error::{Error, status_kind};
use crate::retry::Backoff;
use crate::subscription::Subscription;

/// A connection to one fleet address. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    pub(crate) channel: Channel,
    /// `authorization: Bearer <token>` for every call ([`Config::token`]).
    pub(crate) bearer: Bearer,
    pub(crate) config: Config,
    /// The highest basis committed through this client, per database: every
    /// read waits for it (read-your-writes, `reads.rs`).
    pub(crate) written: crate::written::WrittenBases,
}

/// A committed transaction and the request id it was committed under.
#[derive(Clone, Debug, PartialEq)]
pub struct Transacted {
    /// The `corium-request-id` it was committed under (the same on every
    /// attempt).
    pub request_id: String,
    /// The owner's answer: the committed transaction's basis, tempids, …
    pub response: pb::TransactResponse,
    /// Attempts it took (1: no retry).
    pub attempts: u32,
}

impl Client {
    /// Connects to the fleet address (lazily: the first call dials, and
    /// reconnects are automatic).
    ///
    /// # Errors
    /// [`Error::Config`] for a bad endpoint, unreadable TLS material, or a
    /// token that cannot be sent as metadata.
    // Nothing to await yet (the channel dials lazily), but the SDK's
    // signature stays async: callers `.await` it, and dialling eagerly later
    // must not break them.
    #[allow(clippy::unused_async)]
    pub async fn connect(config: Config) -> Result<Self, Error> {
        let bearer =
            Bearer::new(config.token.as_deref()).map_err(|error| Error::Config(error.to_string()))?;
        let mut endpoint = Endpoint::from_shared(config.endpoint.clone())
            .map_err(|error| Error::Config(format!("endpoint {:?}: {error}", config.endpoint)))?
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(20))
            .keep_alive_timeout(Duration::from_secs(10));
        if let Some(tls) = &config.tls {
            let read = |path: &std::path::Path| {
                std::fs::read(path)
                    .map_err(|error| Error::Config(format!("cannot read {}: {error}", path.display())))
            };
            let mut settings = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(&tls.ca)?));
            if let Some((cert, key)) = &tls.identity {
                settings = settings.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            if let Some(domain) = &tls.domain {
                settings = settings.domain_name(domain.clone());
            }
            endpoint = endpoint
                .tls_config(settings)
                .map_err(|error| Error::Config(format!("TLS: {error}")))?;
        }
        Ok(Self {
            channel: endpoint.connect_lazy(),
            bearer,
            config,
            written: crate::written::WrittenBases::default(),
        })
    }

    /// Calls for `db`.
    #[must_use]
    pub fn database(&self, db: impl Into<String>) -> Database {
        Database {
            client: self.clone(),
            name: db.into(),
        }
    }

    /// The raw channel, for Corium's own generated clients. It carries no
    /// token by itself: wrap it with [`Client::interceptor`], e.g.
    /// `TransactorClient::with_interceptor(client.channel(), client.interceptor())`.
    #[must_use]
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    /// The interceptor that attaches the configured token
    /// ([`Config::token`]) to each request; attaches nothing without one.
    #[must_use]
    pub fn interceptor(&self) -> Bearer {
        self.bearer.clone()
    }

    /// The channel with the token attached, for the SDK's own calls.
    pub(crate) fn authorized(&self) -> Authorized {
        InterceptedService::new(self.channel.clone(), self.bearer.clone())
    }

    /// The fleet address, e.g. for a stock `corium-peer` configuration
    /// (the peer library brings its own connection management).
    #[must_use]
    pub fn endpoint(&self) -> &str {
        &self.config.endpoint
    }

    /// Runs `call` with retries on retryable kinds, inside the budget.
    pub(crate) async fn retrying<T, F, Fut>(&self, mut call: F) -> Result<(T, u32), (tonic::Status, u32)>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        let mut backoff = Backoff::new(&self.config.retry);
        loop {
            let attempt = tokio::time::timeout(self.config.request_timeout, call()).await;
            let status = match attempt {
                Ok(Ok(value)) => return Ok((value, backoff.attempts())),
                Ok(Err(status)) => status,
                Err(_) => tonic::Status::deadline_exceeded("the attempt's deadline passed"),
            };
            match status_kind(&status) {
                ErrorKind::RetryLater | ErrorKind::RetryAtHint => {
                    tracing::debug!(code = ?status.code(), attempt = backoff.attempts(), "retrying");
                    let hint = corium_fleet_wire::overload::retry_after(&status);
                    if !backoff.wait_at_least(hint).await {
                        return Err((status, backoff.attempts()));
                    }
                }
                ErrorKind::GiveUp | ErrorKind::PageSomeone => return Err((status, backoff.attempts())),
            }
        }
    }
}

/// Whether a request id committed ([`Database::request_status`]).
#[derive(Clone, Debug, PartialEq)]
pub enum RequestStatus {
    /// Committed; the answer it had (what a resend with the id returns).
    Committed(pb::TransactResponse),
    /// Never committed, and never will: the owner fenced the id at `t`.
    NotCommitted {
        /// The `t` of the marker transaction that fenced the id.
        fenced_at: u64,
    },
}

/// Calls for one database. Cheap to clone.
#[derive(Clone)]
pub struct Database {
    pub(crate) client: Client,
    pub(crate) name: String,
}

pub(crate) fn request<T>(
    message: T,
    db: &str,
    timeout: Duration,
) -> Result<tonic::Request<T>, tonic::Status> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    let route = db.parse().map_err(|_| {
        tonic::Status::invalid_argument(format!("database name {db:?} is not valid metadata"))
    })?;
    request.metadata_mut().insert(metadata::DATABASE_ROUTE, route);
    Ok(request)
}

impl Database {
    /// The database's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Creates the database with `schema` (an EDN vector of attribute maps).
    /// `Ok(false)` when it already exists.
    ///
    /// # Errors
    /// The fleet's status after retries.
    pub async fn create(&self, schema: &str) -> Result<bool, Error> {
        let schema =
            corium_query::edn::read_one(schema).map_err(|error| Error::Config(format!("schema: {error}")))?;
        let schema = corium_protocol::codec::encode_edn(&schema);
        let timeout = self.client.config.request_timeout;
        let result = self
            .client
            .retrying(|| {
                let mut catalog = CatalogClient::new(self.client.authorized());
                let message = pb::CreateDatabaseRequest {
                    db: self.name.clone(),
                    schema: schema.clone(),
                    storage_key: String::new(),
                };
                async move {
                    let request = request(message, &self.name, timeout)?;
                    catalog
                        .create_database(request)
                        .await
                        .map(|r| r.into_inner().created)
                }
            })
            .await;
        match result {
            Ok((created, _)) => Ok(created),
            Err((status, _)) if status.code() == tonic::Code::AlreadyExists => Ok(false),
            Err((status, _)) => Err(Error::from_status(status)),
        }
    }

    /// Transacts EDN text (a vector of forms) under a fresh request id.
    ///
    /// # Errors
    /// See [`Database::transact_with_id`].
    pub async fn transact_edn(&self, tx: &str) -> Result<Transacted, Error> {
        let forms =
            corium_query::edn::read_one(tx).map_err(|error| Error::Config(format!("tx-data: {error}")))?;
        self.transact(corium_protocol::codec::encode_edn(&forms)).await
    }

    /// Transacts encoded tx-data under a fresh request id: a time-ordered
    /// UUID (version 7, 74 random bits after the time), so that a node can
    /// tell one older than its request-id retention window from one never
    /// used.
    ///
    /// # Errors
    /// See [`Database::transact_with_id`].
    pub async fn transact(&self, tx_data: Vec<u8>) -> Result<Transacted, Error> {
        self.transact_with_id(&fresh_request_id().to_string(), tx_data)
            .await
    }

    /// Transacts under `request_id`, retrying with the same id: the fleet
    /// commits it at most once and answers every retry with the committed
    /// answer.
    ///
    /// # Errors
    /// [`Error::Ambiguous`] when the budget ran out after a failure that may
    /// have committed (retry later with the same id); [`Error::NotOwner`] or
    /// [`Error::Status`] otherwise.
    pub async fn transact_with_id(&self, request_id: &str, tx_data: Vec<u8>) -> Result<Transacted, Error> {
        let timeout = self.client.config.request_timeout;
        let id = request_id
            .parse::<tonic::metadata::MetadataValue<_>>()
            .map_err(|_| Error::Config(format!("request id {request_id:?} is not valid metadata")))?;
        let result = self
            .client
            .retrying(|| {
                let mut transactor = TransactorClient::new(self.client.authorized());
                let message = pb::TransactRequest {
                    db: self.name.clone(),
                    protocol_version: corium_protocol::PROTOCOL_VERSION,
                    tx_data: tx_data.clone(),
                    expected_basis_t: None,
                };
                let id = id.clone();
                async move {
                    let mut request = request(message, &self.name, timeout)?;
                    request.metadata_mut().insert(metadata::REQUEST_ID, id);
                    transactor
                        .transact(request)
                        .await
                        .map(tonic::Response::into_inner)
                }
            })
            .await;
        match result {
            Ok((response, attempts)) => {
                self.client.written.record(&self.name, response.basis_t);
                Ok(Transacted {
                    request_id: request_id.to_owned(),
                    response,
                    attempts,
                })
            }
            Err((status, attempts)) if status_kind(&status) == ErrorKind::RetryLater => {
                Err(Error::Ambiguous {
                    request_id: request_id.to_owned(),
                    attempts,
                    last: status,
                })
            }
            Err((status, _)) => Err(Error::from_status(status)),
        }
    }

    /// Whether the transaction sent under `request_id` committed — the
    /// question an unknown outcome leaves ([`Error::Ambiguous`], or a stock
    /// client's "outcome unknown" naming the id the ingress assigned). The
    /// owner answers from the database itself, so any id ever used can be
    /// asked about; when the id did not commit, the owner first fences it
    /// (commits a marker under it), so the answer "not committed" stays
    /// true: a late copy of the request is refused.
    ///
    /// # Errors
    /// The fleet's status after retries (`INVALID_ARGUMENT` for an id that
    /// is not a UUID).
    pub async fn request_status(&self, request_id: &str) -> Result<RequestStatus, Error> {
        use corium_fleet_proto::fleet::request_status_response::State;
        use corium_fleet_proto::fleet::requests_client::RequestsClient;
        use prost::Message as _;
        let timeout = self.client.config.request_timeout;
        let result = self
            .client
            .retrying(|| {
                let mut requests = RequestsClient::new(self.client.authorized());
                let message = corium_fleet_proto::fleet::RequestStatusRequest {
                    database: self.name.clone(),
                    request_id: request_id.to_owned(),
                };
                async move {
                    let request = request(message, &self.name, timeout)?;
                    requests.status(request).await.map(tonic::Response::into_inner)
                }
            })
            .await;
        let answer = result.map_err(|(status, _)| Error::from_status(status))?.0;
        match answer.state() {
            State::Committed => pb::TransactResponse::decode(answer.transact_response.as_slice())
                .map(RequestStatus::Committed)
                .map_err(|error| Error::Protocol(format!("committed answer: {error}"))),
            State::NotCommitted => Ok(RequestStatus::NotCommitted {
                fenced_at: answer.basis_t,
            }),
            State::Unspecified => Err(Error::Protocol("request status without a state".into())),
        }
    }

    /// The database's status at its owner.
    ///
    /// # Errors
    /// The fleet's status after retries.
    pub async fn status(&self) -> Result<pb::StatusResponse, Error> {
        let timeout = self.client.config.request_timeout;
        self.client
            .retrying(|| {
                let mut transactor = TransactorClient::new(self.client.authorized());
                let message = pb::StatusRequest {
                    db: self.name.clone(),
                };
                async move {
                    let request = request(message, &self.name, timeout)?;
                    transactor.status(request).await.map(tonic::Response::into_inner)
                }
            })
            .await
            .map(|(status, _)| status)
            .map_err(|(status, _)| Error::from_status(status))
    }

    /// Subscribes to committed transactions after `from_basis_t`; the
    /// subscription resumes from the last report it delivered after any
    /// disconnect (owner failover, ingress restart).
    #[must_use]
    pub fn subscribe(&self, from_basis_t: u64) -> Subscription {
        Subscription::new(
            self.client.authorized(),
            self.name.clone(),
            self.client.config.clone(),
            from_basis_t,
        )
    }
}

/// A fresh time-ordered request id: the time in milliseconds, then random
/// bits taken from a version-4 UUID's (those outside its version and
/// variant).
fn fresh_request_id() -> uuid::Uuid {
    let random = uuid::Uuid::new_v4().into_bytes();
    let mut bits = [0u8; 10];
    bits[..6].copy_from_slice(&random[..6]);
    bits[6..].copy_from_slice(&random[9..13]);
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX));
    uuid::Builder::from_unix_timestamp_millis(millis, &bits).into_uuid()
}

#[cfg(test)]
mod tests {
    use super::fresh_request_id;

    #[test]
    fn fresh_request_ids_are_time_ordered_and_distinct() {
        let ids: Vec<uuid::Uuid> = (0..1000).map(|_| fresh_request_id()).collect();
        assert!(
            ids.iter()
                .all(|id| id.get_version() == Some(uuid::Version::SortRand))
        );
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
        // The time comes first: later ids never sort before earlier ones by it.
        assert!(
            ids.windows(2)
                .all(|pair| pair[0].as_u128() >> 80 <= pair[1].as_u128() >> 80)
        );
    }
}
