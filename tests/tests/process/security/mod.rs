//! Authentication and authorization over real processes: the ingress checks
//! credentials with stock Corium's flags and providers, the principal (never
//! the token) travels to the owner, and the owner authorizes with Corium's
//! guard. Every refusal has its negative control: the same call with the
//! right credential succeeds.
//!
//! - `authentication` — tokens at the ingress, every method class, stock
//!   clients with tokens, forged principals, client certificates;
//! - `authorization` — the operator surface, `--authz-db`, which
//!   certificates speak for a node;
//! - `certificates` — rotation under load, dialling a node by its id.

mod admin_port;
mod authentication;
mod authorization;
mod before_activation;
mod certificates;
mod holds;
mod not_owner_disclosure;
mod replica_relay;
mod request_ids;
mod roles;
mod two_databases;

use std::fmt::Display;
use std::time::Duration;

use corium_fleet_proto::fleet::fleet_admin_client::FleetAdminClient;
use corium_fleet_proto::fleet::requests_client::RequestsClient;
use corium_fleet_proto::fleet::{HandoffRequest, NodeStatusRequest};
use corium_fleet_tests::corium::{self, channel};
use corium_fleet_tests::{Fleet, FleetBuilder, eventually, http_get, metric};
use corium_protocol::pb::catalog_client::CatalogClient;
use corium_protocol::pb::peer_server_client::PeerServerClient;
use corium_protocol::pb::transactor_client::TransactorClient;
use tonic::Code;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

pub(crate) const TTL: Duration = Duration::from_millis(1500);
pub(crate) const TOKEN: &str = "fleet-test-secret";

pub(crate) type Intercepted = InterceptedService<Channel, Bearer>;

/// Presents `authorization: Bearer <token>`, or nothing.
#[derive(Clone)]
pub(crate) struct Bearer(Option<String>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        Ok(request)
    }
}

pub(crate) struct Clients {
    pub(crate) transactor: TransactorClient<Intercepted>,
    pub(crate) catalog: CatalogClient<Intercepted>,
    pub(crate) admin: FleetAdminClient<Intercepted>,
    pub(crate) requests: RequestsClient<Intercepted>,
    pub(crate) peer: PeerServerClient<Intercepted>,
}

pub(crate) async fn clients(endpoint: &str, token: Option<&str>) -> Clients {
    let channel = channel(endpoint).await;
    let bearer = Bearer(token.map(str::to_owned));
    Clients {
        transactor: TransactorClient::with_interceptor(channel.clone(), bearer.clone()),
        catalog: CatalogClient::with_interceptor(channel.clone(), bearer.clone()),
        admin: FleetAdminClient::with_interceptor(channel.clone(), bearer.clone()),
        requests: RequestsClient::with_interceptor(channel.clone(), bearer.clone()),
        peer: PeerServerClient::with_interceptor(channel, bearer),
    }
}

pub(crate) fn code<T>(result: Result<T, tonic::Status>) -> Code {
    match result {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    }
}

/// Starts `builder`'s nodes and one ingress, every process serving only
/// callers with [`TOKEN`] (`--serve-token`); the fleet and the ingress's
/// endpoint.
pub(crate) async fn start_strict(builder: FleetBuilder) -> (Fleet, String) {
    let mut fleet = builder.node_flags(&["--serve-token", TOKEN]).start().await;
    fleet.start_ingresses(1, &["--serve-token", TOKEN]).await;
    let address = fleet.ingresses[0].endpoint();
    (fleet, address)
}

/// Asserts that `clients` are served `NodeStatus`, an operator's call.
pub(crate) async fn assert_operator(clients: &mut Clients, fleet: &Fleet, what: impl Display) {
    let answer = clients
        .admin
        .node_status(NodeStatusRequest {})
        .await
        .unwrap_or_else(|status| panic!("{what}: {status:?}\n{}", fleet.logs()));
    assert!(!answer.into_inner().node_id.is_empty(), "{what}");
}

/// An operator (the development token) at `via` hands `db` to its second
/// candidate; the answer names it, and `item` then commits through
/// `address`.
pub(crate) async fn hand_off_then_write(
    fleet: &Fleet,
    via: &str,
    address: &str,
    db: &str,
    item: &str,
    what: impl Display,
) {
    let target = fleet.nodes[fleet.candidates(db)[1]].id.clone();
    let handed = corium::admin(via)
        .await
        .handoff(HandoffRequest {
            database: db.to_owned(),
            target_node_id: target.clone(),
        })
        .await
        .unwrap_or_else(|status| panic!("{what}: {status:?}\n{}", fleet.logs()));
    assert_eq!(handed.into_inner().to_node_id, target, "{what}");
    eventually(
        Duration::from_secs(20),
        format!("{what}: a write after the handoff"),
        async || corium::transact(address, db, item, &[]).await,
    )
    .await;
}

/// Every committed transaction of `db`, read through `Subscribe` at
/// `address` by the holder of `token`.
pub(crate) async fn log_as(address: &str, db: &str, token: &str) -> Vec<(u64, Vec<String>)> {
    let request = corium::with_bearer(tonic::Request::new(corium::subscribe_request(db, 0)), token);
    let mut stream = TransactorClient::new(channel(address).await)
        .subscribe(request)
        .await
        .unwrap_or_else(|status| panic!("subscribe to {db} at {address}: {status:?}"))
        .into_inner();
    corium::read_log(&mut stream)
        .await
        .unwrap_or_else(|status| panic!("read {db}'s log at {address}: {status:?}"))
}

/// One sample of a process's `/metrics`.
pub(crate) async fn sample(admin_port: u16, series: &str) -> Option<f64> {
    let (_, text) = http_get(admin_port, "/metrics").await?;
    metric(&text, series)
}

pub(crate) const SERVER_EXPIRY: &str =
    "corium_fleet_tls_certificate_expiry_timestamp_seconds{certificate=\"server\"}";
pub(crate) const UPSTREAM_EXPIRY: &str =
    "corium_fleet_tls_certificate_expiry_timestamp_seconds{certificate=\"upstream\"}";
