//! `corium-fleet handoff DATABASE --to NODE`: moves one database to a named
//! live candidate (rebalancing, maintenance). Ask any node: a node that does
//! not own the database answers with a typed `NotOwner`, and the command
//! follows it to the owner once.

use std::time::Duration;

use anyhow::{Context as _, bail};
use corium_fleet_proto::fleet::HandoffRequest;
use corium_fleet_wire::not_owner;

use crate::node_args::NodeArgs;

/// `corium-fleet handoff` flags: the database, its new holder, and a node
/// to ask.
#[derive(clap::Args)]
pub(crate) struct HandoffArgs {
    /// The database to move.
    database: String,
    /// Node id of the live candidate that takes it.
    #[arg(long)]
    to: String,
    #[command(flatten)]
    pub(crate) node: NodeArgs,
}

/// Runs `corium-fleet handoff`: asks the node, follows one `NotOwner` hint
/// to the owner, and prints how long writes were unavailable.
///
/// # Errors
/// The node cannot be reached, the database has no live owner, or the
/// owner refused the handoff.
pub(crate) async fn run(args: HandoffArgs) -> anyhow::Result<()> {
    let request = HandoffRequest {
        database: args.database.clone(),
        target_node_id: args.to.clone(),
    };
    let mut endpoint = args.node.endpoint.clone();
    for attempt in 0..2 {
        let mut client = args.node.connect(&endpoint, Duration::from_mins(1)).await?;
        match client.handoff(request.clone()).await {
            Ok(response) => {
                let done = response.into_inner();
                println!(
                    "handed {:?} from {} to {} (lease version {}) in {} ms{}",
                    done.database,
                    done.from_node_id,
                    done.to_node_id,
                    done.lease_version,
                    done.unavailable_ms,
                    if done.drained {
                        ""
                    } else {
                        "; some in-flight calls did not finish in time"
                    }
                );
                return Ok(());
            }
            Err(status) => match not_owner::from_status(&status) {
                Some(hint) if attempt == 0 && !hint.route_endpoint.is_empty() => {
                    endpoint = hint.route_endpoint;
                }
                Some(hint) if hint.owner_id.is_empty() => {
                    bail!(
                        "{:?} has no live owner: nothing to hand off (it activates on its next request)",
                        args.database
                    )
                }
                _ => {
                    return Err(status)
                        .with_context(|| format!("handoff of {:?} to {}", args.database, args.to));
                }
            },
        }
    }
    bail!(
        "the owner of {:?} moved while the handoff was being routed; try again",
        args.database
    )
}
