//! `corium-fleet request-status DATABASE ID`: did the transaction sent under
//! request id `ID` commit? Asks the database's owner (through the ingress,
//! or straight to a node), which answers from the database itself: the
//! committed answer, or "not committed" after fencing the id so that it
//! never commits later.

use std::time::Duration;

use anyhow::{Context as _, bail};
use corium_fleet_proto::fleet::RequestStatusRequest;
use corium_fleet_proto::fleet::request_status_response::State;
use corium_fleet_proto::fleet::requests_client::RequestsClient;
use corium_protocol::pb;
use prost::Message as _;

use crate::node_args::NodeArgs;

/// `corium-fleet request-status` flags: the database, the request id, and
/// where to ask.
#[derive(clap::Args)]
pub(crate) struct RequestStatusArgs {
    /// The database the transaction was sent to.
    database: String,
    /// The `corium-request-id` it was sent under (an unknown-outcome answer
    /// names it).
    request_id: String,
    #[command(flatten)]
    pub(crate) node: NodeArgs,
}

/// Runs `corium-fleet request-status`: asks the owner and prints
/// "committed" (with the transaction's `t`) or "not committed".
///
/// # Errors
/// The endpoint cannot be reached, the call fails, or the answer does not
/// decode.
pub(crate) async fn run(args: RequestStatusArgs) -> anyhow::Result<()> {
    let channel = args
        .node
        .channel(&args.node.endpoint, Duration::from_secs(30))
        .await?;
    let mut request = tonic::Request::new(RequestStatusRequest {
        database: args.database.clone(),
        request_id: args.request_id.clone(),
    });
    if let Ok(route) = args.database.parse() {
        request
            .metadata_mut()
            .insert(corium_fleet_wire::metadata::DATABASE_ROUTE, route);
    }
    let answer = RequestsClient::new(channel)
        .status(request)
        .await
        .with_context(|| format!("request status of {} in {:?}", args.request_id, args.database))?
        .into_inner();
    match answer.state() {
        State::Committed => {
            let response = pb::TransactResponse::decode(answer.transact_response.as_slice())
                .context("the committed answer does not decode")?;
            println!(
                "committed: request {} is transaction t={} of {:?} (tx instant {} ms, {} tempids)",
                args.request_id,
                response.basis_t,
                args.database,
                response.tx_instant,
                tempid_count(&response.tempids)
            );
        }
        State::NotCommitted => println!(
            "not committed: request {} never committed in {:?}, and now never will (fenced at t={})",
            args.request_id, args.database, answer.basis_t
        ),
        State::Unspecified => bail!("the owner answered without a state"),
    }
    Ok(())
}

fn tempid_count(encoded: &[u8]) -> usize {
    match corium_protocol::codec::decode_edn(encoded) {
        Ok(corium_query::edn::Edn::Map(pairs)) => pairs.len(),
        _ => 0,
    }
}
