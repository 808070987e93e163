//! `corium-fleet where DATABASE`: where one database lives — its owner
//! (the lease holder), lease version and expiry, its ranked candidates, its
//! basis, and for an encrypted database its key and which candidates lack
//! it.
//!
//! Placement and the lease come from `FleetAdmin.DatabasePlacement`, which
//! any node answers from storage (so the ingress may send it anywhere). The
//! basis is the owner's: while the lease is live, `corium.v1
//! Transactor/Status` is asked, which the ingress routes to the owner (a
//! node that is not the owner answers with a `NotOwner`, followed once to
//! the owner's endpoint, as `handoff` does). It is not asked for a database
//! without a live owner, because through the ingress that call would
//! activate the database somewhere: `where` only looks. When the owner
//! cannot be asked, the basis the placement answer carries (non-zero only
//! when the answering node is the owner) is all there is.

use std::time::Duration;

use anyhow::Context as _;
use corium_fleet_proto::fleet::{DatabasePlacementRequest, DatabaseView};
use corium_protocol::pb;
use corium_protocol::pb::transactor_client::TransactorClient;

use crate::node_args::NodeArgs;

/// `corium-fleet where` flags: the database, and where to ask.
#[derive(clap::Args)]
pub(crate) struct WhereArgs {
    /// The database to locate.
    database: String,
    #[command(flatten)]
    pub(crate) node: NodeArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// The database's basis, and who said so.
enum Basis {
    /// The owner answered `Status`.
    Owner(pb::StatusResponse),
    /// The placement answer carried it (the answering node owns it).
    Placement(u64),
    /// Not known: no live owner, or the owner could not be asked (why).
    Unknown(String),
}

/// Runs `corium-fleet where`: prints the database's owner, lease, basis and
/// candidates.
///
/// # Errors
/// The endpoint cannot be reached, or the placement call failed (an invalid
/// name, storage unavailable, refused credentials).
pub(crate) async fn run(args: WhereArgs) -> anyhow::Result<()> {
    let endpoint = args.node.endpoint.clone();
    let channel = args.node.channel(&endpoint, Duration::from_secs(15)).await?;
    let view = corium_fleet_proto::fleet::fleet_admin_client::FleetAdminClient::new(channel.clone())
        .database_placement(DatabasePlacementRequest {
            database: args.database.clone(),
        })
        .await
        .with_context(|| format!("placement of {:?} from {endpoint}", args.database))?
        .into_inner()
        .view
        .context("the placement answer carries no view")?;
    let now = now_unix_ms();
    let live = !view.owner_id.is_empty() && view.lease_expires_unix_ms > now;
    let basis = if view.state == "absent" {
        Basis::Unknown("not in the catalog".to_owned())
    } else if !live {
        Basis::Unknown("no live owner: it activates on its next request".to_owned())
    } else {
        match owner_status(&args, channel).await {
            Ok(status) => Basis::Owner(status),
            Err(_) if view.basis_t > 0 => Basis::Placement(view.basis_t),
            Err(status) => Basis::Unknown(format!(
                "the owner could not be asked ({:?}: {}); ask through the ingress",
                status.code(),
                status.message()
            )),
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json(&view, live, &basis))?);
    } else {
        print(&view, live, &basis, now);
    }
    Ok(())
}

/// The owner's `Status` of the database: asked at the endpoint (the
/// ingress routes it to the owner), following one `NotOwner` hint to the
/// owner's endpoint when a node that is not the owner was asked.
async fn owner_status(
    args: &WhereArgs,
    channel: crate::node_args::Authorized,
) -> Result<pb::StatusResponse, tonic::Status> {
    let request = pb::StatusRequest {
        db: args.database.clone(),
    };
    match TransactorClient::new(channel).status(request.clone()).await {
        Ok(response) => Ok(response.into_inner()),
        Err(status) => match corium_fleet_wire::not_owner::from_status(&status) {
            Some(hint) if !hint.route_endpoint.is_empty() => {
                let Ok(owner) = args
                    .node
                    .channel(&hint.route_endpoint, Duration::from_secs(15))
                    .await
                else {
                    return Err(status);
                };
                TransactorClient::new(owner)
                    .status(request)
                    .await
                    .map(tonic::Response::into_inner)
            }
            _ => Err(status),
        },
    }
}

/// Milliseconds since the Unix epoch.
fn now_unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
        })
}

/// The answer as JSON.
fn json(view: &DatabaseView, live: bool, basis: &Basis) -> serde_json::Value {
    let (basis_t, source, error) = match basis {
        Basis::Owner(status) => (Some(status.basis_t), Some("owner"), None),
        Basis::Placement(basis_t) => (Some(*basis_t), Some("placement"), None),
        Basis::Unknown(why) => (None, None, Some(why.as_str())),
    };
    serde_json::json!({
        "database": view.database,
        "exists": view.state != "absent",
        "owner": (!view.owner_id.is_empty()).then_some(&view.owner_id),
        "owner_endpoint": (!view.owner_endpoint.is_empty()).then_some(&view.owner_endpoint),
        "live": live,
        "lease_version": view.lease_version,
        "lease_expires_unix_ms": view.lease_expires_unix_ms,
        "owner_rank": crate::status::owner_rank(view),
        "basis_t": basis_t,
        "basis_source": source,
        "basis_unknown": error,
        "storage_key": (!view.storage_key.is_empty()).then_some(&view.storage_key),
        "candidates": view.candidates.iter().map(|c| serde_json::json!({
            "node_id": c.node_id, "zone": c.zone, "endpoint": c.endpoint, "rank": c.rank,
            "lacks_storage_key": c.lacks_storage_key,
        })).collect::<Vec<_>>(),
    })
}

/// The answer for people.
fn print(view: &DatabaseView, live: bool, basis: &Basis, now: i64) {
    println!("database    {}", view.database);
    if view.state == "absent" {
        println!("state       not in the catalog");
    }
    if view.owner_id.is_empty() {
        println!("owner       none");
    } else {
        println!(
            "owner       {} ({}){}",
            view.owner_id,
            view.owner_endpoint,
            if live { "" } else { " — lease not live" }
        );
        let expiry = if view.lease_expires_unix_ms == 0 {
            "released".to_owned()
        } else {
            let delta = view.lease_expires_unix_ms.saturating_sub(now);
            #[allow(clippy::cast_precision_loss)]
            let seconds = delta.unsigned_abs() as f64 / 1000.0;
            if delta >= 0 {
                format!("expires in {seconds:.1} s (renewed while held)")
            } else {
                format!("expired {seconds:.1} s ago")
            }
        };
        println!("lease       version {}, {expiry}", view.lease_version);
    }
    if !view.storage_key.is_empty() {
        let lacking: Vec<&str> = view
            .candidates
            .iter()
            .filter(|c| c.lacks_storage_key)
            .map(|c| c.node_id.as_str())
            .collect();
        if lacking.is_empty() {
            println!("encrypted   under {}", view.storage_key);
        } else {
            println!(
                "encrypted   under {}; candidates without it (never serve it): {}",
                view.storage_key,
                lacking.join(", ")
            );
        }
    }
    match basis {
        Basis::Owner(status) => println!("basis       t {} (from the owner)", status.basis_t),
        Basis::Placement(basis_t) => println!("basis       t {basis_t} (from the answering node)"),
        Basis::Unknown(why) => println!("basis       unknown: {why}"),
    }
    let candidates: Vec<String> = view
        .candidates
        .iter()
        .map(|c| {
            format!(
                "{}:{} ({}{}{})",
                c.rank,
                c.node_id,
                c.zone,
                if c.node_id == view.owner_id { ", owner" } else { "" },
                if c.lacks_storage_key {
                    ", lacks the key"
                } else {
                    ""
                }
            )
        })
        .collect();
    println!("candidates  {}", candidates.join("  "));
}
