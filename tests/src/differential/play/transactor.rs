//! The `Transactor` and `Catalog` calls of a sequence, at the side's
//! endpoint.

use std::fmt::Write as _;

use corium_protocol::pb;
use corium_protocol::pb::catalog_client::CatalogClient;
use corium_protocol::pb::transactor_client::TransactorClient;
use tonic::transport::Channel;

use super::{Bases, DEADLINE, WAIT_DEADLINE, edn, request};
use crate::differential::answer::{self, Names};
use crate::differential::op::Op;

#[allow(clippy::too_many_lines)] // one arm per RPC
pub(super) async fn call(
    channel: &Channel,
    op: &Op,
    names: &mut Names,
    bases: &mut Bases,
) -> Result<String, tonic::Status> {
    let mut transactor = TransactorClient::new(channel.clone());
    let mut catalog = CatalogClient::new(channel.clone());
    let version = corium_protocol::PROTOCOL_VERSION;
    Ok(match op {
        Op::Create {
            db,
            schema,
            storage_key,
        } => {
            let created = catalog
                .create_database(request(pb::CreateDatabaseRequest {
                    db: db.clone(),
                    schema: edn(schema),
                    storage_key: storage_key.clone(),
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
            bases.saw(db, response.basis_t);
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
            bases.saw(db, response.basis_t);
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
            bases.saw(db, response.basis_t);
            format!("basis {}", response.basis_t)
        }
        Op::Status { db } => {
            let response = transactor
                .status(request(pb::StatusRequest { db: db.clone() }))
                .await?
                .into_inner();
            bases.saw(db, response.basis_t);
            format!(
                "basis {}, has a lease owner {}, has an endpoint {}",
                response.basis_t,
                !response.lease_owner.is_empty(),
                !response.lease_owner_endpoint.is_empty()
            )
        }
        Op::Subscribe { db, from_basis_t } => {
            let stream = transactor
                .subscribe(request(pb::SubscribeRequest {
                    db: db.clone(),
                    protocol_version: version,
                    from_basis_t: *from_basis_t,
                }))
                .await?
                .into_inner();
            backfill(stream, db, *from_basis_t, names, bases).await?
        }
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
            bases.saw(db, response.basis_t);
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
            bases.saw(db, response.basis_t);
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
            bases.saw(target, response.basis_t);
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
            bases.saw(db, response.basis_t);
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
        Op::AlterSchema { db, desired } => alter_schema(&mut catalog, db, desired, bases).await?,
        Op::Query { .. }
        | Op::Pull { .. }
        | Op::Datoms { .. }
        | Op::TxRange { .. }
        | Op::DbStats { .. }
        | Op::PeerTransact { .. }
        | Op::PeerSubscribe { .. } => unreachable!("a PeerServer call: play/peer.rs"),
    })
}

/// A subscription's handshake and backfill: every report up to the
/// handshake's basis (heartbeats and index-basis announcements, which
/// depend on timing, skipped).
pub(super) async fn backfill(
    mut stream: tonic::Streaming<pb::SubscribeItem>,
    db: &str,
    from_basis_t: u64,
    names: &mut Names,
    bases: &mut Bases,
) -> Result<String, tonic::Status> {
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
                bases.saw(db, handshake.basis_t);
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
pub(super) async fn learn_schema(channel: &Channel, db: &str, names: &mut Names) {
    let mut transactor = TransactorClient::new(channel.clone());
    let Ok(response) = transactor
        .subscribe(request(crate::corium::subscribe_request(db, u64::MAX >> 1)))
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
    bases: &mut Bases,
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
    bases.saw(db, response.basis_t);
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
