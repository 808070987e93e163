//! Helpers over the stock `corium.v1` clients from crates.io.

use std::fmt::{Debug, Display};
use std::time::Duration;

use corium_protocol::codec;
use corium_protocol::pb;
use corium_protocol::pb::catalog_client::CatalogClient;
use corium_protocol::pb::transactor_client::TransactorClient;
use corium_query::edn::{Edn, read_one};
use tonic::transport::Channel;

/// The schema every test database uses: one unique string attribute.
pub const SCHEMA: &str = "[{:db/ident :item/name :db/valueType :db.type/string \
    :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}]";

/// A channel to `endpoint` with connect and request deadlines.
///
/// # Panics
/// When the endpoint cannot be reached.
pub async fn channel(endpoint: &str) -> Channel {
    tonic::transport::Endpoint::from_shared(endpoint.to_owned())
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .connect()
        .await
        .unwrap_or_else(|error| panic!("connect {endpoint}: {error}"))
}

/// A `FleetAdmin` client that presents the development token (the operator
/// identity of a fleet started with default flags).
pub type Admin = corium_fleet_proto::fleet::fleet_admin_client::FleetAdminClient<
    tonic::service::interceptor::InterceptedService<
        Channel,
        fn(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status>,
    >,
>;

/// Adds `authorization: Bearer <development token>`.
///
/// # Errors
/// Never.
pub fn with_dev_token(request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
    Ok(with_bearer(request, corium_protocol::auth::DEFAULT_DEV_TOKEN))
}

/// `request` with `authorization: Bearer <token>`.
///
/// # Panics
/// When `token` is not a valid header value.
#[must_use]
pub fn with_bearer<T>(mut request: tonic::Request<T>, token: &str) -> tonic::Request<T> {
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().expect("ASCII"));
    request
}

/// A `FleetAdmin` client for the node or ingress at `endpoint`, as an
/// operator (the development token).
///
/// # Panics
/// When the endpoint cannot be reached.
pub async fn admin(endpoint: &str) -> Admin {
    corium_fleet_proto::fleet::fleet_admin_client::FleetAdminClient::with_interceptor(
        channel(endpoint).await,
        with_dev_token as fn(_) -> _,
    )
}

/// The encoded schema.
///
/// # Panics
/// Never: [`SCHEMA`] is valid EDN.
#[must_use]
pub fn schema() -> Vec<u8> {
    codec::encode_edn(&read_one(SCHEMA).unwrap())
}

/// A transaction asserting one item named `name`.
///
/// # Panics
/// Never: the forms are valid EDN for any name.
#[must_use]
pub fn item_tx(name: &str) -> Vec<u8> {
    let forms = read_one(&format!("[{{:db/id \"x\" :item/name {name:?}}}]")).unwrap();
    codec::encode_edn(&forms)
}

/// Forms for the peer API: the [`SCHEMA`].
///
/// # Panics
/// Never: [`SCHEMA`] is a vector.
#[must_use]
pub fn schema_forms() -> Vec<Edn> {
    let Edn::Vector(forms) = read_one(SCHEMA).unwrap() else {
        unreachable!("the schema is a vector")
    };
    forms
}

/// Forms for the peer API: one item named `name`.
///
/// # Panics
/// Never: the forms are valid EDN for any name.
#[must_use]
pub fn item_forms(name: &str) -> Vec<Edn> {
    match read_one(&format!("[{{:db/id \"x\" :item/name {name:?}}}]")).unwrap() {
        Edn::Vector(forms) => forms,
        _ => unreachable!(),
    }
}

/// Creates `db` at `endpoint`.
///
/// # Errors
/// The node's status.
pub async fn create(endpoint: &str, db: &str) -> Result<bool, tonic::Status> {
    let mut catalog = CatalogClient::new(channel(endpoint).await);
    Ok(catalog
        .create_database(pb::CreateDatabaseRequest {
            db: db.to_owned(),
            schema: schema(),
            storage_key: String::new(),
        })
        .await?
        .into_inner()
        .created)
}

/// A `Transact` request asserting item `name`.
#[must_use]
pub fn transact_request(db: &str, name: &str) -> pb::TransactRequest {
    pb::TransactRequest {
        db: db.to_owned(),
        protocol_version: corium_protocol::PROTOCOL_VERSION,
        tx_data: item_tx(name),
        expected_basis_t: None,
    }
}

/// [`transact_request`] as a call that gives up after `within` (its
/// `grpc-timeout`).
#[must_use]
pub fn transact_call(db: &str, name: &str, within: Duration) -> tonic::Request<pb::TransactRequest> {
    let mut request = tonic::Request::new(transact_request(db, name));
    request.set_timeout(within);
    request
}

/// A `Subscribe` request for `db` from `from_basis_t`, at this protocol
/// version.
#[must_use]
pub fn subscribe_request(db: &str, from_basis_t: u64) -> pb::SubscribeRequest {
    pb::SubscribeRequest {
        db: db.to_owned(),
        protocol_version: corium_protocol::PROTOCOL_VERSION,
        from_basis_t,
    }
}

/// Transacts item `name` into `db` at `endpoint`, with extra metadata.
///
/// # Errors
/// The node's status.
///
/// # Panics
/// When a metadata value is not a valid header value, or the endpoint
/// cannot be reached.
pub async fn transact(
    endpoint: &str,
    db: &str,
    name: &str,
    metadata: &[(&'static str, &str)],
) -> Result<pb::TransactResponse, tonic::Status> {
    let mut client = TransactorClient::new(channel(endpoint).await);
    let mut request = tonic::Request::new(transact_request(db, name));
    for (key, value) in metadata {
        request.metadata_mut().insert(*key, value.parse().unwrap());
    }
    Ok(client.transact(request).await?.into_inner())
}

/// Transacts items `{prefix}-0` … `{prefix}-{count - 1}` into `db` at
/// `endpoint`, one after another: each acknowledged `t` → its item name.
///
/// # Panics
/// When a transaction fails.
pub async fn transact_items(
    endpoint: &str,
    db: &str,
    prefix: &str,
    count: usize,
) -> std::collections::BTreeMap<u64, String> {
    let mut acked = std::collections::BTreeMap::new();
    for i in 0..count {
        let name = format!("{prefix}-{i}");
        let response = transact(endpoint, db, &name, &[])
            .await
            .unwrap_or_else(|status| panic!("{db}: {name}: {status:?}"));
        acked.insert(response.basis_t, name);
    }
    acked
}

/// Every committed transaction of `db` read back through `Subscribe` from
/// basis 0 at `endpoint`: `(t, item names asserted)`, in log order.
///
/// # Errors
/// The node's status.
pub async fn log(endpoint: &str, db: &str) -> Result<Vec<(u64, Vec<String>)>, tonic::Status> {
    let mut client = TransactorClient::new(channel(endpoint).await);
    let mut stream = client.subscribe(subscribe_request(db, 0)).await?.into_inner();
    read_log(&mut stream).await
}

/// Asserts that a call failed with `code` and returns its status for
/// further checks; the failure message names `what` and the answer seen.
///
/// # Panics
/// When the call succeeded, or failed with another code.
#[track_caller]
pub fn expect_code<T: Debug>(
    result: Result<T, tonic::Status>,
    code: tonic::Code,
    what: impl Display,
) -> tonic::Status {
    match result {
        Ok(answer) => panic!("{what}: expected {code:?}, got an answer: {answer:?}"),
        Err(status) => {
            assert_eq!(status.code(), code, "{what}: {status:?}");
            status
        }
    }
}

/// Every item name in a log read by [`log`] or [`read_log`], in log order.
#[must_use]
pub fn names(log: &[(u64, Vec<String>)]) -> Vec<&String> {
    log.iter().flat_map(|(_, names)| names).collect()
}

/// How many item names in a log read by [`log`] or [`read_log`] start
/// with `prefix`.
#[must_use]
pub fn count_names_with_prefix(log: &[(u64, Vec<String>)], prefix: &str) -> usize {
    names(log)
        .into_iter()
        .filter(|name| name.starts_with(prefix))
        .count()
}

/// Reads a `Subscribe` stream from basis 0 until it has delivered every
/// transaction up to the basis its handshake named: `(t, strings
/// asserted)`, in log order. Each message waits at most 30 s.
///
/// # Errors
/// The stream's status, or `DEADLINE_EXCEEDED` when it stalls.
pub async fn read_log<S>(stream: &mut S) -> Result<Vec<(u64, Vec<String>)>, tonic::Status>
where
    S: futures::Stream<Item = Result<pb::SubscribeItem, tonic::Status>> + Unpin,
{
    use futures::StreamExt as _;
    let mut interner = corium_core::KeywordInterner::default();
    let mut basis = None;
    let mut records = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .map_err(|_| tonic::Status::deadline_exceeded("subscription stalled"))?
            .transpose()?;
        let Some(item) = next.and_then(|item| item.item) else {
            break;
        };
        match item {
            pb::subscribe_item::Item::Handshake(handshake) => basis = Some(handshake.basis_t),
            pb::subscribe_item::Item::Report(report) => {
                records.push((report.t, report_strings(&report, &mut interner)?));
            }
            _ => {}
        }
        if basis.is_some_and(|basis| records.last().map_or(basis == 0, |(t, _)| *t >= basis)) {
            break;
        }
    }
    Ok(records)
}

/// The strings a reported transaction asserted (item names, request ids).
///
/// # Errors
/// The report does not decode.
pub fn report_strings(
    report: &pb::TxReport,
    interner: &mut corium_core::KeywordInterner,
) -> Result<Vec<String>, tonic::Status> {
    let datoms = codec::decode_datoms(&report.datoms, interner)
        .map_err(|error| tonic::Status::internal(error.to_string()))?;
    Ok(datoms
        .iter()
        .filter_map(|datom| match &datom.v {
            corium_core::Value::Str(name) => Some(name.to_string()),
            _ => None,
        })
        .collect())
}

/// Sends raw bytes as a gRPC request body over HTTP/2 to `endpoint` + `path`
/// and returns the call's status (trailers-only or trailing), so tests can
/// send what no typed client would.
///
/// # Panics
/// When the endpoint cannot be reached at all.
pub async fn raw_call(
    endpoint: &str,
    path: &str,
    headers: &[(&'static str, &str)],
    body: Vec<u8>,
) -> tonic::Status {
    raw_call_with_trailers(endpoint, path, headers, body, &[]).await
}

/// [`raw_call`], with request `trailers` after the body: what a client that
/// tries to slip metadata past a header check would send.
///
/// # Panics
/// When the endpoint cannot be reached at all, or a header is invalid.
pub async fn raw_call_with_trailers(
    endpoint: &str,
    path: &str,
    headers: &[(&'static str, &str)],
    body: Vec<u8>,
    trailers: &[(&'static str, &str)],
) -> tonic::Status {
    use http_body_util::BodyExt as _;
    type Frames = Vec<Result<hyper::body::Frame<bytes::Bytes>, std::convert::Infallible>>;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let mut frames: Frames = vec![Ok(hyper::body::Frame::data(bytes::Bytes::from(body)))];
    if !trailers.is_empty() {
        let mut map = hyper::HeaderMap::new();
        for (key, value) in trailers {
            map.insert(*key, value.parse().unwrap());
        }
        frames.push(Ok(hyper::body::Frame::trailers(map)));
    }
    let mut request = hyper::Request::post(format!("{endpoint}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (key, value) in headers {
        request = request.header(*key, *value);
    }
    let request = request
        .body(http_body_util::StreamBody::new(futures::stream::iter(frames)))
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(30), client.request(request))
        .await
        .unwrap()
        .unwrap();
    if let Some(status) = tonic::Status::from_header_map(response.headers()) {
        return status;
    }
    let collected = tokio::time::timeout(Duration::from_secs(30), response.into_body().collect())
        .await
        .unwrap()
        .unwrap();
    let trailers = collected.trailers().cloned().unwrap_or_default();
    tonic::Status::from_header_map(&trailers).unwrap_or_else(|| tonic::Status::ok(""))
}

/// A body framed as one uncompressed gRPC message.
///
/// # Panics
/// When the message is 4 GiB or longer.
#[must_use]
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut body = vec![0];
    body.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    body.extend_from_slice(message);
    body
}

/// One database's placement and lease holder as the node (or ingress) at
/// `endpoint` reads it from storage. A read: asked again (up to 10 times,
/// 200 ms apart) when the answering node fails under it, as it may while a
/// test kills nodes.
///
/// # Panics
/// When every attempt fails.
pub async fn placement(endpoint: &str, db: &str) -> corium_fleet_proto::fleet::DatabaseView {
    use corium_fleet_proto::fleet::DatabasePlacementRequest;
    let mut last = None;
    for _ in 0..10 {
        match admin(endpoint)
            .await
            .database_placement(DatabasePlacementRequest {
                database: db.to_owned(),
            })
            .await
        {
            Ok(answer) => return answer.into_inner().view.expect("a placement answer has a view"),
            Err(status) => last = Some(status),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("placement of {db:?} at {endpoint}: {last:?}")
}
