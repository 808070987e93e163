//! `corium-fleet status`: the whole fleet in one table (or `--json`): every
//! node of the node registry with its zone, endpoint, whether its record is
//! live, what it owns and stands by for, its lease versions and its load.
//!
//! One `FleetAdmin.FleetStatus` call does it: the node that answers reads
//! the registry and asks every live member for its own `NodeStatus` over
//! the node-to-node connection. So it works through the ingress, which
//! sends the call to any node and could not have picked each node in turn.
//! Against a fleet that predates `FleetStatus` (`UNIMPLEMENTED`) it falls
//! back to the one node that answers `NodeStatus`, and says so.

use std::time::Duration;

use anyhow::Context as _;
use corium_fleet_proto::fleet::fleet_admin_client::FleetAdminClient;
use corium_fleet_proto::fleet::{
    DatabaseView, FleetMember, FleetStatusRequest, FleetStatusResponse, NodeStatusRequest, NodeStatusResponse,
};

use crate::node_args::{Authorized, NodeArgs};

/// `corium-fleet status` flags: the node (or ingress) to ask, and the
/// output.
#[derive(clap::Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) node: NodeArgs,
    /// Print JSON instead of a table (every node, with all its databases).
    #[arg(long)]
    json: bool,
    /// After the node table, list every owned database: owner, lease
    /// version, basis, standbys.
    #[arg(long)]
    databases: bool,
    /// Show one node's databases in full (owned, standby, cold) instead of
    /// the fleet table.
    #[arg(long = "node", value_name = "NODE_ID")]
    only: Option<String>,
}

/// Runs `corium-fleet status`: asks for the fleet and prints it.
///
/// # Errors
/// The endpoint cannot be reached or answered with an error; `--node` names
/// no member.
pub(crate) async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let fleet = fleet(&args.node).await?;
    if let Some(only) = &args.only {
        let member = fleet
            .members
            .iter()
            .find(|member| &member.node_id == only)
            .with_context(|| format!("no member {only:?} in the fleet's registry"))?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&member_json(member))?);
        } else {
            print_node(member);
        }
        return Ok(());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&fleet_json(&fleet))?);
        return Ok(());
    }
    print_fleet(&fleet);
    if args.databases {
        println!();
        print_databases(&fleet);
    }
    Ok(())
}

/// The fleet as the node (or ingress) at `node.endpoint` finds it.
///
/// # Errors
/// The endpoint cannot be reached or answered with an error.
pub(crate) async fn fleet(node: &NodeArgs) -> anyhow::Result<FleetStatusResponse> {
    let endpoint = node.endpoint.clone();
    // The answering node asks each member within twice its storage timeout
    // (10 s by default): leave room for that.
    let mut client = node.connect(&endpoint, Duration::from_secs(30)).await?;
    match client.fleet_status(FleetStatusRequest {}).await {
        Ok(response) => Ok(response.into_inner()),
        Err(status) if status.code() == tonic::Code::Unimplemented => {
            eprintln!(
                "corium-fleet: {endpoint} does not serve FleetStatus (an older fleet): showing the one node that answers"
            );
            one_node(&mut client, &endpoint).await
        }
        Err(status) => Err(status).with_context(|| format!("fleet status from {endpoint}")),
    }
}

/// The fleet as one node of an older fleet sees it: itself.
async fn one_node(
    client: &mut FleetAdminClient<Authorized>,
    endpoint: &str,
) -> anyhow::Result<FleetStatusResponse> {
    let status = client
        .node_status(NodeStatusRequest {})
        .await
        .with_context(|| format!("node status from {endpoint}"))?
        .into_inner();
    Ok(FleetStatusResponse {
        answered_by: status.node_id.clone(),
        now_unix_ms: 0,
        members: vec![FleetMember {
            node_id: status.node_id.clone(),
            zone: status.zone.clone(),
            weight: status.weight,
            endpoint: status.internal_endpoint.clone(),
            incarnation: status.incarnation.clone(),
            live: true,
            status: Some(status),
            ..FleetMember::default()
        }],
    })
}

/// The databases of `status` in state `state`.
fn in_state<'a>(status: &'a NodeStatusResponse, state: &'a str) -> impl Iterator<Item = &'a DatabaseView> {
    status.databases.iter().filter(move |db| db.state == state)
}

/// The lowest and highest lease version of the databases `status` owns.
fn lease_range(status: &NodeStatusResponse) -> Option<(u64, u64)> {
    in_state(status, "owned").fold(None, |range, db| {
        let (low, high) = range.unwrap_or((db.lease_version, db.lease_version));
        Some((low.min(db.lease_version), high.max(db.lease_version)))
    })
}

/// `member` as JSON: its registry record, reachability, counts, lease
/// versions, load and every database it reported.
fn member_json(member: &FleetMember) -> serde_json::Value {
    let status = member.status.as_ref();
    let names = |state: &str| -> Vec<String> {
        status.map_or_else(Vec::new, |status| {
            in_state(status, state).map(|db| db.database.clone()).collect()
        })
    };
    let databases: Vec<_> = status
        .map(|status| status.databases.iter().map(database_json).collect())
        .unwrap_or_default();
    serde_json::json!({
        "node_id": member.node_id,
        "zone": member.zone,
        "weight": member.weight,
        "endpoint": member.endpoint,
        "incarnation": member.incarnation,
        "live": member.live,
        "expires_unix_ms": member.expires_unix_ms,
        "registry_owned": member.registry_owned,
        "reachable": status.is_some(),
        "error": (!member.error.is_empty()).then_some(&member.error),
        "storage": status.map(|status| &status.storage),
        "lease_ttl_ms": status.map(|status| status.lease_ttl_ms),
        "owned": status.map(|status| status.owned),
        "standby": status.map(|status| status.standby),
        "cold": status.map(|status| status.cold),
        "owned_databases": names("owned"),
        "standby_databases": names("standby"),
        "lease_versions": status.and_then(lease_range).map(|(min, max)| serde_json::json!({
            "min": min, "max": max,
        })),
        "load": status.and_then(|status| status.load.as_ref()).map(|load| serde_json::json!({
            "calls_running": load.calls_running,
            "calls_waiting": load.calls_waiting,
            "max_inflight": load.max_inflight,
            "subscriptions": load.subscriptions,
            "calls_total": load.calls_total,
            "read_replicas": load.read_replicas,
            "replica_lag": load.replica_lag,
        })),
        "memory_budget_bytes": status.and_then(|status| status.load.as_ref()).map(|load| load.memory_budget_bytes),
        "memory_used_bytes": status.and_then(|status| status.load.as_ref()).map(|load| load.memory_used_bytes),
        "memory_cache_bytes": status.and_then(|status| status.load.as_ref()).map(|load| load.memory_cache_bytes),
        "memory_resident_bytes": status.and_then(|status| status.load.as_ref()).map(|load| load.memory_resident_bytes),
        "memory_estimate_error_percent": status
            .and_then(|status| status.load.as_ref())
            .and_then(|load| estimate_error_percent(load.memory_used_bytes, load.memory_resident_bytes)),
        "calls_per_second": status.and_then(|status| status.load.as_ref()).map(|load| load.calls_per_second),
        "cpu_percent": status.and_then(|status| status.load.as_ref()).map(|load| load.cpu_percent),
        "storage_keys": status.map(|status| &status.storage_keys),
        "load_moves": status.map(|status| status.load_moves.iter().map(|moved| serde_json::json!({
            "database": moved.database, "to": moved.to, "at_unix_ms": moved.at_unix_ms, "reason": moved.reason,
        })).collect::<Vec<_>>()),
        "databases": databases,
    })
}

/// One database as a node reported it.
fn database_json(db: &DatabaseView) -> serde_json::Value {
    serde_json::json!({
        "database": db.database, "state": db.state, "owner": db.owner_id,
        "lease_version": db.lease_version, "lease_expires_unix_ms": db.lease_expires_unix_ms,
        "basis_t": db.basis_t, "owner_rank": owner_rank(db), "memory_bytes": db.memory_bytes,
        "calls_per_second": db.calls_per_second,
        "candidates": db.candidates.iter().map(|c| serde_json::json!({
            "node_id": c.node_id, "zone": c.zone, "rank": c.rank,
        })).collect::<Vec<_>>(),
    })
}

/// The whole answer as JSON.
fn fleet_json(fleet: &FleetStatusResponse) -> serde_json::Value {
    serde_json::json!({
        "answered_by": fleet.answered_by,
        "now_unix_ms": fleet.now_unix_ms,
        "nodes": fleet.members.iter().map(member_json).collect::<Vec<_>>(),
    })
}

/// How long ago (negative) or ahead `at_ms` is from `now_ms`, for people.
fn relative(at_ms: i64, now_ms: i64) -> String {
    let delta = at_ms.saturating_sub(now_ms);
    #[allow(clippy::cast_precision_loss)]
    let seconds = delta.unsigned_abs() as f64 / 1000.0;
    if delta >= 0 {
        format!("in {seconds:.1} s")
    } else {
        format!("{seconds:.1} s ago")
    }
}

/// How far a node's memory estimate (what its budget is checked against)
/// is from its resident set, in percent of the resident set: positive when
/// the estimate is higher. `None` when the node reports no resident set (0:
/// not Linux, or a node that predates the field).
fn estimate_error_percent(used: u64, resident: u64) -> Option<f64> {
    if resident == 0 {
        return None;
    }
    #[allow(clippy::cast_precision_loss)]
    let (used, resident) = (used as f64, resident as f64);
    Some(((used - resident) / resident * 1000.0).round() / 10.0)
}

/// A node's memory for people: estimate of budget, in MiB, the part of it
/// that is caches, and the resident set with the estimate's error.
fn memory_text(load: &corium_fleet_proto::fleet::NodeLoad) -> String {
    let mib = |bytes: u64| bytes / (1024 * 1024);
    let caches = if load.memory_cache_bytes >= 1024 * 1024 {
        format!(" ({} MiB caches)", mib(load.memory_cache_bytes))
    } else {
        String::new()
    };
    let resident = estimate_error_percent(load.memory_used_bytes, load.memory_resident_bytes).map_or_else(
        String::new,
        |error| {
            format!(
                ", resident {} MiB (estimate {error:+.1} %)",
                mib(load.memory_resident_bytes)
            )
        },
    );
    if load.memory_budget_bytes == 0 {
        format!(
            "{} MiB (no budget){caches}{resident}",
            mib(load.memory_used_bytes)
        )
    } else {
        format!(
            "{}/{} MiB{caches}{resident}",
            mib(load.memory_used_bytes),
            mib(load.memory_budget_bytes)
        )
    }
}

/// One row of the node table.
fn node_row(member: &FleetMember, now_ms: i64) -> [String; 10] {
    let dash = || "-".to_owned();
    let state = if member.expires_unix_ms == 0 && !member.live {
        "no record".to_owned()
    } else if !member.live {
        "expired".to_owned()
    } else if member.status.is_none() {
        "unreachable".to_owned()
    } else {
        "live".to_owned()
    };
    let (owned, standby, cold, leases, load) = if let Some(status) = &member.status {
        (
            status.owned.to_string(),
            status.standby.to_string(),
            status.cold.to_string(),
            match lease_range(status) {
                Some((low, high)) if low == high => format!("v{low}"),
                Some((low, high)) => format!("v{low}-v{high}"),
                None => dash(),
            },
            status.load.as_ref().map_or_else(dash, |load| {
                format!(
                    "{}/{} running, {} waiting, {} subs, {} calls ({:.0}/s, CPU {} %), {} read replicas (lag {}), memory {}",
                    load.calls_running,
                    load.max_inflight,
                    load.calls_waiting,
                    load.subscriptions,
                    load.calls_total,
                    load.calls_per_second,
                    load.cpu_percent,
                    load.read_replicas,
                    load.replica_lag,
                    memory_text(load)
                )
            }),
        )
    } else {
        // What the registry last said, and why there is nothing more.
        let why = if member.error.is_empty() {
            if member.expires_unix_ms == 0 {
                "no registry record".to_owned()
            } else {
                format!(
                    "record expired {}; last listed {} owned",
                    relative(member.expires_unix_ms, now_ms),
                    member.registry_owned.len()
                )
            }
        } else {
            member.error.clone()
        };
        (dash(), dash(), dash(), dash(), why)
    };
    [
        member.node_id.clone(),
        member.zone.clone(),
        member.endpoint.clone(),
        state,
        owned,
        standby,
        cold,
        leases,
        load,
        member.status.as_ref().map_or_else(
            || "-".to_owned(),
            |status| {
                if status.storage_keys.is_empty() {
                    "none".to_owned()
                } else {
                    status.storage_keys.join(" ")
                }
            },
        ),
    ]
}

/// Prints rows under `header`, each column as wide as its widest cell.
fn print_table<const N: usize>(header: [&str; N], rows: &[[String; N]]) {
    let mut widths = header.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// The node table, under one summary line.
fn print_fleet(fleet: &FleetStatusResponse) {
    let live = fleet.members.iter().filter(|member| member.live).count();
    let owned: u32 = fleet
        .members
        .iter()
        .filter_map(|member| member.status.as_ref().map(|status| status.owned))
        .sum();
    println!(
        "fleet: {} nodes ({live} live), {owned} databases owned; asked {}",
        fleet.members.len(),
        fleet.answered_by
    );
    let rows: Vec<_> = fleet
        .members
        .iter()
        .map(|member| node_row(member, fleet.now_unix_ms))
        .collect();
    print_table(
        [
            "NODE",
            "ZONE",
            "ENDPOINT",
            "STATE",
            "OWNED",
            "STANDBY",
            "COLD",
            "LEASES",
            "LOAD",
            "STORAGE KEYS",
        ],
        &rows,
    );
}

/// Every owned database, by name, with its standbys.
fn print_databases(fleet: &FleetStatusResponse) {
    let mut rows: Vec<[String; 5]> = fleet
        .members
        .iter()
        .filter_map(|member| member.status.as_ref())
        .flat_map(|status| in_state(status, "owned"))
        .map(|db| {
            let standbys: Vec<String> = db
                .candidates
                .iter()
                .filter(|candidate| candidate.node_id != db.owner_id)
                .map(|candidate| format!("{}:{}", candidate.rank, candidate.node_id))
                .collect();
            [
                db.database.clone(),
                db.owner_id.clone(),
                db.lease_version.to_string(),
                db.basis_t.to_string(),
                standbys.join(" "),
            ]
        })
        .collect();
    rows.sort();
    print_table(
        ["DATABASE", "OWNER", "LEASE", "BASIS", "STANDBY (rank:node)"],
        &rows,
    );
}

/// The key ids a node resolves, for people: an encrypted database under
/// any other key is never served there.
fn storage_keys(status: &NodeStatusResponse) -> String {
    if status.storage_keys.is_empty() {
        "none (encrypted databases are not served here)".to_owned()
    } else {
        status.storage_keys.join(", ")
    }
}

/// One node in full: its identity, counts and every database it reported.
fn print_node(member: &FleetMember) {
    let Some(status) = &member.status else {
        println!(
            "node {} (zone {:?}, {}): {} — the registry lists {} owned: {}",
            member.node_id,
            member.zone,
            member.endpoint,
            if member.live {
                format!("not reachable ({})", member.error)
            } else {
                "not live".to_owned()
            },
            member.registry_owned.len(),
            member.registry_owned.join(" ")
        );
        return;
    };
    println!(
        "node {} (zone {:?}, {}) storage {} — owned {}, standby {}, cold {}",
        status.node_id,
        status.zone,
        status.internal_endpoint,
        status.storage,
        status.owned,
        status.standby,
        status.cold
    );
    println!("storage keys: {}", storage_keys(status));
    let rows: Vec<_> = status
        .databases
        .iter()
        .map(|db| {
            let candidates: Vec<String> = db
                .candidates
                .iter()
                .map(|c| format!("{}:{}", c.rank, c.node_id))
                .collect();
            [
                db.database.clone(),
                db.state.clone(),
                db.owner_id.clone(),
                owner_rank(db).map_or_else(|| "-".to_owned(), |rank| rank.to_string()),
                db.lease_version.to_string(),
                db.basis_t.to_string(),
                candidates.join(" "),
            ]
        })
        .collect();
    print_table(
        [
            "DATABASE",
            "STATE",
            "OWNER",
            "RANK",
            "LEASE",
            "BASIS",
            "CANDIDATES (rank:node)",
        ],
        &rows,
    );
}

/// The owner's rank among the candidates (`None`: no owner, or the owner is
/// not a candidate — it will hand the database off).
pub(crate) fn owner_rank(db: &DatabaseView) -> Option<u32> {
    db.candidates
        .iter()
        .find(|candidate| !db.owner_id.is_empty() && candidate.node_id == db.owner_id)
        .map(|candidate| candidate.rank)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(db: &str, lease_version: u64) -> DatabaseView {
        DatabaseView {
            database: db.to_owned(),
            state: "owned".to_owned(),
            owner_id: "node-1".to_owned(),
            lease_version,
            ..DatabaseView::default()
        }
    }

    /// The estimate's error is relative to the resident set, signed, and
    /// absent when there is no resident set to compare with; the table
    /// shows it beside the resident set.
    #[test]
    fn the_estimate_error_is_relative_to_the_resident_set() {
        const MIB: u64 = 1024 * 1024;
        assert_eq!(estimate_error_percent(120 * MIB, 100 * MIB), Some(20.0));
        assert_eq!(estimate_error_percent(90 * MIB, 100 * MIB), Some(-10.0));
        assert_eq!(estimate_error_percent(323 * MIB, 69 * MIB), Some(368.1));
        assert_eq!(estimate_error_percent(5 * MIB, 0), None);
        let load = corium_fleet_proto::fleet::NodeLoad {
            memory_used_bytes: 110 * MIB,
            memory_budget_bytes: 200 * MIB,
            memory_resident_bytes: 100 * MIB,
            ..Default::default()
        };
        assert_eq!(
            memory_text(&load),
            "110/200 MiB, resident 100 MiB (estimate +10.0 %)"
        );
        let old_node = corium_fleet_proto::fleet::NodeLoad {
            memory_used_bytes: 110 * MIB,
            ..Default::default()
        };
        assert_eq!(memory_text(&old_node), "110 MiB (no budget)");
    }

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        node: NodeArgs,
    }

    /// The default endpoint is the fleet's address (the ingress listens on
    /// stock Corium's port); a CA alone is enough for TLS; a refused
    /// connection says what to check.
    #[tokio::test]
    async fn the_default_endpoint_is_the_fleet_and_a_refusal_says_what_to_check() {
        use clap::Parser as _;
        let flags = Flags::try_parse_from(["status"]).unwrap();
        if std::env::var_os("CORIUM_FLEET_ENDPOINT").is_none() {
            assert_eq!(flags.node.endpoint, "http://127.0.0.1:4334");
        }
        assert!(
            Flags::try_parse_from(["status", "--ca", "ca.pem"]).is_ok(),
            "--ca alone"
        );
        assert!(
            Flags::try_parse_from(["status", "--cert", "c.pem", "--key", "k.pem"]).is_err(),
            "a certificate needs its CA"
        );
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", closed.local_addr().unwrap());
        drop(closed);
        let Err(error) = flags.node.channel(&endpoint, Duration::from_secs(5)).await else {
            panic!("nothing listens at {endpoint}");
        };
        let words = format!("{error:#}");
        assert!(
            words.contains(&endpoint)
                && words.contains("is the fleet running there?")
                && words.contains("CORIUM_FLEET_ENDPOINT"),
            "{words}"
        );
    }

    #[test]
    fn a_node_row_summarises_leases_and_says_why_a_member_has_no_status() {
        let status = NodeStatusResponse {
            owned: 2,
            databases: vec![owned("a", 7), owned("b", 3)],
            storage_keys: vec!["file:/keys/a".to_owned(), "env:B".to_owned()],
            ..NodeStatusResponse::default()
        };
        let live = FleetMember {
            node_id: "node-1".to_owned(),
            live: true,
            expires_unix_ms: 10_000,
            status: Some(status),
            ..FleetMember::default()
        };
        let row = node_row(&live, 9_000);
        assert_eq!(
            (row[3].as_str(), row[4].as_str(), row[7].as_str()),
            ("live", "2", "v3-v7")
        );
        assert_eq!(row[9], "file:/keys/a env:B");
        let expired = FleetMember {
            node_id: "node-2".to_owned(),
            expires_unix_ms: 4_000,
            registry_owned: vec!["c".to_owned()],
            ..FleetMember::default()
        };
        let row = node_row(&expired, 9_000);
        assert_eq!(row[3], "expired");
        assert_eq!(row[8], "record expired 5.0 s ago; last listed 1 owned");
        assert_eq!(row[9], "-", "no status, no keys known");
        let unreachable = FleetMember {
            node_id: "node-3".to_owned(),
            live: true,
            expires_unix_ms: 10_000,
            error: "Unavailable: cannot reach peer".to_owned(),
            ..FleetMember::default()
        };
        let row = node_row(&unreachable, 9_000);
        assert_eq!(
            (row[3].as_str(), row[8].as_str()),
            ("unreachable", "Unavailable: cannot reach peer")
        );
        let json = member_json(&live);
        assert_eq!(json["owned_databases"], serde_json::json!(["a", "b"]));
        assert_eq!(json["lease_versions"], serde_json::json!({"min": 3, "max": 7}));
        assert_eq!(json["storage_keys"], serde_json::json!(["file:/keys/a", "env:B"]));
    }
}
