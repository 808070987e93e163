//! `corium-fleet rebalance --dry-run`: what load-aware placement would move
//! now. It reads the fleet's status (each node's calls per second and
//! memory room, each owned database's calls per second and candidates) and
//! runs the same plan the nodes run (`corium_fleet_common::balance`),
//! printing each move with its reason. Nothing is moved: nodes move
//! databases themselves (`--load-balance`, after three intervals in a row
//! above the band); `corium-fleet handoff` moves one by hand.

use corium_fleet_common::balance::{self, DatabaseLoad, NodeLoad, Settings};
use corium_fleet_proto::fleet::FleetStatusResponse;

use crate::node_args::NodeArgs;

/// `corium-fleet rebalance` flags.
#[derive(clap::Args)]
pub(crate) struct RebalanceArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// Print the moves load-aware placement would make now, and move
    /// nothing (required: nodes make the moves themselves).
    #[arg(long)]
    dry_run: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// The loads in a fleet status answer: every live member that reported
/// its load, and every database one of them owns.
fn loads(fleet: &FleetStatusResponse) -> (Vec<NodeLoad>, Vec<DatabaseLoad>) {
    let mut nodes = Vec::new();
    let mut databases = Vec::new();
    for member in fleet.members.iter().filter(|member| member.live) {
        let Some(status) = &member.status else { continue };
        let Some(load) = &status.load else { continue };
        nodes.push(NodeLoad {
            node_id: member.node_id.clone(),
            calls_per_second: load.calls_per_second,
            // Caches are dropped before a node refuses an activation.
            memory_room: (load.memory_budget_bytes > 0).then(|| {
                let firm = load.memory_used_bytes.saturating_sub(load.memory_cache_bytes);
                load.memory_budget_bytes.saturating_sub(firm)
            }),
        });
        databases.extend(
            status
                .databases
                .iter()
                .filter(|db| db.state == "owned")
                .map(|db| DatabaseLoad {
                    database: db.database.clone(),
                    owner: member.node_id.clone(),
                    calls_per_second: db.calls_per_second,
                    memory_bytes: db.memory_bytes,
                    candidates: db
                        .candidates
                        .iter()
                        .map(|candidate| candidate.node_id.clone())
                        .collect(),
                }),
        );
    }
    (nodes, databases)
}

/// Runs `corium-fleet rebalance`.
///
/// # Errors
/// Without `--dry-run`; the endpoint cannot be reached or answered with an
/// error.
pub(crate) async fn run(args: RebalanceArgs) -> anyhow::Result<()> {
    if !args.dry_run {
        anyhow::bail!(
            "nodes move databases for load themselves (--load-balance on each transactor): pass --dry-run to see what \
             they would move now, or move one yourself with `corium-fleet handoff DATABASE --to NODE`"
        );
    }
    let fleet = crate::status::fleet(&args.node).await?;
    let (nodes, databases) = loads(&fleet);
    let settings = Settings::default();
    let mean = balance::mean(&nodes);
    let moves = balance::plan(&nodes, &databases, settings);
    if args.json {
        let json = serde_json::json!({
            "mean_calls_per_second": mean,
            "band_calls_per_second": mean * (1.0 + settings.threshold),
            "nodes": nodes.iter().map(|node| serde_json::json!({
                "node_id": node.node_id, "calls_per_second": node.calls_per_second,
                "overfull": balance::overfull(node.calls_per_second, mean, settings),
            })).collect::<Vec<_>>(),
            "moves": moves.iter().map(|planned| serde_json::json!({
                "database": planned.database, "from": planned.from, "to": planned.to,
                "database_calls_per_second": planned.database_load, "reason": planned.reason(),
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    println!(
        "{} live nodes, mean {mean:.0} calls/s; a node sheds above {:.0} (and {:.0} over the mean)",
        nodes.len(),
        mean * (1.0 + settings.threshold),
        settings.min_gap
    );
    for node in &nodes {
        let mark = if balance::overfull(node.calls_per_second, mean, settings) {
            "  above the band"
        } else {
            ""
        };
        println!(
            "  {:<24} {:>8.0} calls/s{mark}",
            node.node_id, node.calls_per_second
        );
    }
    if moves.is_empty() {
        println!("nothing to move");
    }
    for planned in &moves {
        println!(
            "would move {} from {} to {}: {}",
            planned.database,
            planned.from,
            planned.to,
            planned.reason()
        );
    }
    Ok(())
}
