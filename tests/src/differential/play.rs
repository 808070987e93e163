//! Running a sequence against one endpoint, as a stock client does (no
//! route header, the development token, a deadline on every call), and
//! comparing two transcripts.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use corium_protocol::pb;
use corium_protocol::pb::catalog_client::CatalogClient;
use corium_protocol::pb::transactor_client::TransactorClient;
use corium_query::edn::read_one;
use tonic::transport::Channel;

use super::answer::{self, Names};
use super::op::Op;

/// Every call's deadline.
/// Every call's deadline: long, so a loaded machine (the whole suite on two
/// cores) does not turn a slow answer into a difference.
const DEADLINE: Duration = Duration::from_secs(20);

/// The deadline of a `Sync` to a later basis, which stock Corium 0.1.90
/// waits out (note 0016): short, as the wait is expected.
const WAIT_DEADLINE: Duration = Duration::from_secs(5);

/// One sequence's answers at one endpoint, one rendered line per call.
#[derive(Debug)]
pub struct Transcript {
    /// `(call, answer)`, in order.
    pub lines: Vec<(String, String)>,
}

/// A request with the development token and the call's deadline.
fn request<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(DEADLINE);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {}", corium_protocol::auth::DEFAULT_DEV_TOKEN)
            .parse()
            .expect("ASCII"),
    );
    request
}

/// EDN text encoded as stock clients send it (invalid EDN: its text as a
/// string, which the server must refuse as it refuses any non-vector).
fn edn(text: &str) -> Vec<u8> {
    read_one(text).map_or_else(
        |_| corium_protocol::codec::encode_edn(&corium_query::edn::Edn::Str(text.to_owned())),
        |form| corium_protocol::codec::encode_edn(&form),
    )
}

/// Plays `ops` against `endpoint` in order.
///
/// # Panics
/// When the endpoint cannot be reached at all.
pub async fn play(endpoint: &str, ops: &[Op]) -> Transcript {
    play_with(endpoint, ops, async |_, _| {}).await
}

/// Plays `ops` against `endpoint` in order, running `before(index, op)`
/// before each call (a handoff, a kill: what happens between two calls).
///
/// # Panics
/// When the endpoint cannot be reached at all.
pub async fn play_with(endpoint: &str, ops: &[Op], mut before: impl AsyncFnMut(usize, &Op)) -> Transcript {
    let channel = crate::corium::channel(endpoint).await;
    // Per database (a saga branch shares its database's ids): ids of two
    // databases are unrelated, and one name for both would tie them.
    let mut names: HashMap<String, Names> = HashMap::new();
    let mut lines = Vec::with_capacity(ops.len());
    for (index, op) in ops.iter().enumerate() {
        before(index, op).await;
        let home = op.db().map_or("", corium_fleet_common::names::home).to_owned();
        let answer = call_until_answered(&channel, op, names.entry(home).or_default()).await;
        match op {
            Op::Create { db, .. } | Op::Fork { target: db, .. } if !answer.starts_with("error") => {
                // A new database: its ids start afresh.
                let fresh = names.entry(db.clone()).or_default();
                *fresh = Names::default();
                learn_schema(&channel, db, fresh).await;
            }
            _ => {}
        }
        eprintln!("{endpoint}: {} → {answer}", op.rpc());
        lines.push((format!("{} {op:?}", op.rpc()), answer));
    }
    Transcript { lines }
}

/// One call whose answers differ.
#[derive(Clone, Debug)]
pub struct Difference {
    /// Its place in the sequence.
    pub index: usize,
    /// The call (`Service/Method` and the op).
    pub call: String,
    /// Stock Corium's answer.
    pub stock: String,
    /// The fleet's answer.
    pub fleet: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "call {}: {}\n  stock: {}\n  fleet: {}",
            self.index, self.call, self.stock, self.fleet
        )
    }
}

/// `op`'s answer, the call sent again (at most 8 times, 250 ms apart) while
/// it is refused `UNAVAILABLE` without the typed unknown outcome: the
/// fleet's word that nothing was done and a retry is safe (0009), as a
/// lease that could not be renewed in time on a loaded machine says. Such a
/// retry is one the client is told is safe, so it is not a difference.
async fn call_until_answered(channel: &Channel, op: &Op, names: &mut Names) -> String {
    let mut attempts = 0;
    loop {
        attempts += 1;
        match call(channel, op, names).await {
            Ok(answer) => return answer,
            Err(status)
                if attempts < 8
                    && status.code() == tonic::Code::Unavailable
                    && corium_fleet_wire::outcome::from_status(&status).is_none() =>
            {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(status) => return answer::status(&status),
        }
    }
}

/// The calls whose answers differ, each with both answers.
///
/// # Panics
/// When the transcripts are not of one sequence (their lengths differ).
#[must_use]
pub fn differences(stock: &Transcript, fleet: &Transcript) -> Vec<Difference> {
    assert_eq!(stock.lines.len(), fleet.lines.len(), "one sequence, one length");
    stock
        .lines
        .iter()
        .zip(&fleet.lines)
        .enumerate()
        .filter(|(_, ((_, stock), (_, fleet)))| stock != fleet)
        .map(|(index, ((call, stock), (_, fleet)))| Difference {
            index,
            call: call.clone(),
            stock: stock.clone(),
            fleet: fleet.clone(),
        })
        .collect()
}

#[allow(clippy::too_many_lines)] // one arm per RPC
async fn call(channel: &Channel, op: &Op, names: &mut Names) -> Result<String, tonic::Status> {
    let mut transactor = TransactorClient::new(channel.clone());
    let mut catalog = CatalogClient::new(channel.clone());
    let version = corium_protocol::PROTOCOL_VERSION;
    Ok(match op {
        Op::Create { db, schema } => {
            let created = catalog
                .create_database(request(pb::CreateDatabaseRequest {
                    db: db.clone(),
                    schema: edn(schema),
                    storage_key: String::new(),
                }))
                .await?
                .into_inner()
                .created;
            format!("created {created}")
        }
        Op::CreateRaw { db, schema } => {
            let created = catalog
                .create_database(request(pb::CreateDatabaseRequest {
                    db: db.clone(),
                    schema: schema.clone(),
                    storage_key: String::new(),
                }))
                .await?
                .into_inner()
                .created;
            format!("created {created}")
        }
        Op::Transact {
            db,
            edn: text,
            expected_basis_t,
        } => {
            let response = transactor
                .transact(request(pb::TransactRequest {
                    db: db.clone(),
                    protocol_version: version,
                    tx_data: edn(text),
                    expected_basis_t: *expected_basis_t,
                }))
                .await?
                .into_inner();
            answer::transacted(&response, names)
        }
        Op::TransactRaw { db, tx_data } => {
            let response = transactor
                .transact(request(pb::TransactRequest {
                    db: db.clone(),
                    protocol_version: version,
                    tx_data: tx_data.clone(),
                    expected_basis_t: None,
                }))
                .await?
                .into_inner();
            answer::transacted(&response, names)
        }
        Op::Sync { db, t } => {
            let mut sync = request(pb::SyncRequest {
                db: db.clone(),
                t: *t,
            });
            if *t > 0 {
                sync.set_timeout(WAIT_DEADLINE);
            }
            let response = transactor.sync(sync).await?.into_inner();
            format!("basis {}", response.basis_t)
        }
        Op::Status { db } => {
            let response = transactor
                .status(request(pb::StatusRequest { db: db.clone() }))
                .await?
                .into_inner();
            format!(
                "basis {}, has a lease owner {}, has an endpoint {}",
                response.basis_t,
                !response.lease_owner.is_empty(),
                !response.lease_owner_endpoint.is_empty()
            )
        }
        Op::Subscribe { db, from_basis_t } => subscribe(&mut transactor, db, *from_basis_t, names).await?,
        Op::SagaCommit { db, saga } => {
            let response = transactor
                .saga_commit(request(pb::SagaCommitRequest {
                    db: db.clone(),
                    protocol_version: version,
                    saga: saga.clone(),
                    guards: edn("[]"),
                    resolutions: edn("[]"),
                }))
                .await?
                .into_inner();
            format!(
                "committed {}, basis {} → {}, steps {}, datoms {}",
                response.committed, response.basis_before, response.basis_t, response.steps, response.datoms
            )
        }
        Op::SagaFinish { db, saga, status } => {
            let response = transactor
                .saga_finish(request(pb::SagaFinishRequest {
                    db: db.clone(),
                    protocol_version: version,
                    saga: saga.clone(),
                    status: status.clone(),
                    compensation: Vec::new(),
                    replace_compensation: false,
                }))
                .await?
                .into_inner();
            format!(
                "status {}, basis {} → {}, compensated {}",
                response.status, response.basis_before, response.basis_t, response.compensated
            )
        }
        Op::List => {
            let mut dbs = catalog
                .list_databases(request(pb::ListDatabasesRequest {}))
                .await?
                .into_inner()
                .dbs;
            dbs.sort();
            format!("{dbs:?}")
        }
        Op::Delete { db } => {
            let deleted = catalog
                .delete_database(request(pb::DeleteDatabaseRequest { db: db.clone() }))
                .await?
                .into_inner()
                .deleted;
            format!("deleted {deleted}")
        }
        Op::Fork { db, target, as_of_t } => {
            let response = catalog
                .fork_database(request(pb::ForkDatabaseRequest {
                    db: db.clone(),
                    target: target.clone(),
                    as_of_t: *as_of_t,
                }))
                .await?
                .into_inner();
            format!("created {}, basis {}", response.created, response.basis_t)
        }
        Op::GcDeleted => {
            catalog
                .gc_deleted_databases(request(pb::GcDeletedDatabasesRequest {
                    retention_millis: None,
                }))
                .await?;
            // How many blobs a sweep finds depends on the store's layout.
            "swept".to_owned()
        }
        Op::RequestIndex { db } => {
            let response = catalog
                .request_index(request(pb::RequestIndexRequest { db: db.clone() }))
                .await?
                .into_inner();
            format!("index basis {}", response.index_basis_t)
        }
        Op::SetIndexPolicy { db, interval_ms } => {
            let response = catalog
                .set_index_policy(request(pb::SetIndexPolicyRequest {
                    db: db.clone(),
                    interval_ms: *interval_ms,
                    backoff: None,
                    tail_threshold: None,
                    tail_deadline_ms: None,
                }))
                .await?
                .into_inner();
            format!("{response:?}")
        }
        Op::StorageInfo { db } => {
            let response = catalog
                .get_storage_info(request(pb::GetStorageInfoRequest { db: db.clone() }))
                .await?
                .into_inner();
            let kind = match response.storage.and_then(|storage| storage.backend) {
                None => "none",
                Some(pb::storage_connection::Backend::Memory(_)) => "memory",
                Some(pb::storage_connection::Backend::Filesystem(_)) => "filesystem",
                Some(pb::storage_connection::Backend::Postgres(_)) => "postgres",
                Some(pb::storage_connection::Backend::Turso(_)) => "turso",
                Some(pb::storage_connection::Backend::S3(_)) => "s3",
                Some(pb::storage_connection::Backend::Plugin(_)) => "plugin",
            };
            format!("basis {}, storage {kind}", response.basis_t)
        }
        Op::KeyStatus { db } => {
            let response = catalog
                .key_status(request(pb::KeyStatusRequest { db: db.clone() }))
                .await?
                .into_inner();
            format!(
                "encrypted {}, kek {:?}, epochs {}, basis {}, rotation due {}, unavailable {}, fenced {}",
                response.encrypted,
                response.kek,
                response.storage_keys.len(),
                response.basis_t,
                response.rotation_due,
                response.keys_unavailable,
                response.keys_fenced
            )
        }
        Op::RotateKey { db } => {
            let response = catalog
                .rotate_storage_key(request(pb::RotateStorageKeyRequest { db: db.clone() }))
                .await?
                .into_inner();
            format!("epoch {}", response.epoch)
        }
        Op::Rewrap { db, kek } => {
            catalog
                .rewrap_keys(request(pb::RewrapKeysRequest {
                    db: db.clone(),
                    kek: kek.clone(),
                }))
                .await?;
            "rewrapped".to_owned()
        }
        Op::AlterSchema { db, desired } => alter_schema(&mut catalog, db, desired).await?,
    })
}

/// The handshake and the backfill: every report up to the handshake's
/// basis (heartbeats and index-basis announcements, which depend on timing,
/// skipped).
async fn subscribe(
    transactor: &mut TransactorClient<Channel>,
    db: &str,
    from_basis_t: u64,
    names: &mut Names,
) -> Result<String, tonic::Status> {
    let mut stream = transactor
        .subscribe(request(pb::SubscribeRequest {
            db: db.to_owned(),
            protocol_version: corium_protocol::PROTOCOL_VERSION,
            from_basis_t,
        }))
        .await?
        .into_inner();
    let mut out = String::new();
    let mut backfilled_to = None;
    loop {
        if backfilled_to.is_some_and(|(basis, last)| last >= basis) {
            break;
        }
        let item = tokio::time::timeout(DEADLINE, stream.message())
            .await
            .map_err(|_| tonic::Status::deadline_exceeded("no subscription item within the deadline"))??;
        let Some(item) = item.and_then(|item| item.item) else {
            out.push_str("; end");
            break;
        };
        match item {
            pb::subscribe_item::Item::Handshake(handshake) => {
                let _ = write!(
                    out,
                    "handshake basis {}, schema {}",
                    handshake.basis_t,
                    answer::schema(&handshake.schema, names)
                );
                backfilled_to = Some((handshake.basis_t, from_basis_t));
            }
            pb::subscribe_item::Item::Report(report) => {
                let _ = write!(
                    out,
                    "; report t {} instant {} datoms {}",
                    report.t,
                    if report.tx_instant == 0 { "0" } else { "set" },
                    answer::datoms(&report.datoms, names)
                );
                if let Some((_, last)) = &mut backfilled_to {
                    *last = report.t;
                }
            }
            pb::subscribe_item::Item::IndexBasis(_) | pb::subscribe_item::Item::Heartbeat(_) => {}
        }
    }
    Ok(out)
}

/// Reads `db`'s schema from a subscription's handshake, so datoms about the
/// fleet's own attributes are known (the harness's own call, not part of
/// the sequence; a failure leaves nothing learned).
async fn learn_schema(channel: &Channel, db: &str, names: &mut Names) {
    let mut transactor = TransactorClient::new(channel.clone());
    let Ok(response) = transactor
        .subscribe(request(pb::SubscribeRequest {
            db: db.to_owned(),
            protocol_version: corium_protocol::PROTOCOL_VERSION,
            from_basis_t: u64::MAX >> 1,
        }))
        .await
    else {
        return;
    };
    let mut stream = response.into_inner();
    if let Ok(Ok(Some(pb::SubscribeItem {
        item: Some(pb::subscribe_item::Item::Handshake(handshake)),
    }))) = tokio::time::timeout(DEADLINE, stream.message()).await
    {
        let _ = answer::schema(&handshake.schema, names);
    }
}

/// `AlterSchema` the way `corium schema update --apply` does it: the plan is
/// asked for (a call without a digest, refused with the current plan's
/// digest), then applied under that digest. The digest covers the installed
/// schema, which on the fleet includes its request-id attributes, so it is
/// not part of the answer.
async fn alter_schema(
    catalog: &mut CatalogClient<Channel>,
    db: &str,
    desired: &str,
) -> Result<String, tonic::Status> {
    let ask = |plan_digest: String| {
        request(pb::AlterSchemaRequest {
            db: db.to_owned(),
            desired_schema: edn(desired),
            plan_digest,
            installed_fingerprint: String::new(),
            observed_basis_t: 0,
            prune: false,
            allow: Vec::new(),
            ack: Vec::new(),
            tool: "fleet-differential".to_owned(),
        })
    };
    let response = match catalog.alter_schema(ask(String::new())).await {
        Ok(response) => response,
        Err(status) => {
            const CURRENT: &str = "the current plan for this schema file is ";
            let Some(digest) = status
                .message()
                .split_once(CURRENT)
                .and_then(|(_, rest)| rest.split(';').next())
            else {
                return Err(status);
            };
            catalog.alter_schema(ask(digest.to_owned())).await?
        }
    }
    .into_inner();
    Ok(format!(
        "basis {}, generation {}, changed {}, steps {}, installed {:?}",
        response.basis_t,
        response.schema_generation,
        response.changed,
        response.steps,
        response
            .installed_idents
            .iter()
            .filter(|ident| !answer::fleet_own(ident))
            .collect::<Vec<_>>()
    ))
}
