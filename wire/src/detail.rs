//! Typed status details: a fleet message carried in `grpc-status-details-bin`
//! as a `google.rpc.Status` holding one `Any`. The one place that wraps and
//! unwraps them; [`not_owner`](crate::not_owner) and
//! [`outcome`](crate::outcome) build on it.

use corium_fleet_proto::rpc;
use prost::Message;

/// A status with `code`, `message` and `detail` (as `type_url`).
#[must_use]
pub fn to_status(code: tonic::Code, message: String, type_url: &str, detail: &impl Message) -> tonic::Status {
    let envelope = rpc::Status {
        code: code as i32,
        message: message.clone(),
        details: vec![prost_types::Any {
            type_url: type_url.to_owned(),
            value: detail.encode_to_vec(),
        }],
    };
    tonic::Status::with_details(code, message, envelope.encode_to_vec().into())
}

/// The detail of type `type_url` on a status of `code`, if it carries one.
#[must_use]
pub fn from_status<M: Message + Default>(
    status: &tonic::Status,
    code: tonic::Code,
    type_url: &str,
) -> Option<M> {
    if status.code() != code || status.details().is_empty() {
        return None;
    }
    let envelope = rpc::Status::decode(status.details()).ok()?;
    envelope
        .details
        .iter()
        .find(|any| any.type_url == type_url)
        .and_then(|any| M::decode(any.value.as_slice()).ok())
}
