//! The metadata names the forwarding path touches on every call, parsed
//! once. A `&str` name is parsed and validated again on each lookup or
//! insert (`http`'s `parse_hdr`: 2.5 % of the ingress's instructions per call
//! under callgrind, design note 0018); a [`HeaderName`] goes straight to the
//! hash.

use corium_fleet_wire::metadata;
use hyper::http::HeaderName;

/// `corium-hop`.
pub(super) static HOP: HeaderName = HeaderName::from_static(metadata::HOP);
/// `corium-principal`.
pub(super) static PRINCIPAL: HeaderName = HeaderName::from_static(metadata::PRINCIPAL);
/// `corium-lease-version`.
pub(super) static LEASE_VERSION: HeaderName = HeaderName::from_static(metadata::LEASE_VERSION);
/// `corium-request-id-origin`.
pub(super) static REQUEST_ID_ORIGIN: HeaderName = HeaderName::from_static(metadata::REQUEST_ID_ORIGIN);
/// `corium-request-id`.
pub(super) static REQUEST_ID: HeaderName = HeaderName::from_static(metadata::REQUEST_ID);
/// `x-request-id`.
pub(super) static X_REQUEST_ID: HeaderName = HeaderName::from_static(metadata::X_REQUEST_ID);
/// `corium-database-route`.
pub(super) static DATABASE_ROUTE: HeaderName = HeaderName::from_static(metadata::DATABASE_ROUTE);
/// `corium-min-basis`.
pub(super) static MIN_BASIS: HeaderName = HeaderName::from_static(metadata::MIN_BASIS);
/// `corium-basis-t`.
pub(super) static BASIS_T: HeaderName = HeaderName::from_static(metadata::BASIS_T);
/// `grpc-timeout`.
pub(super) static GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
/// `grpc-status-details-bin`.
pub(super) static GRPC_STATUS_DETAILS: HeaderName = HeaderName::from_static("grpc-status-details-bin");
/// `grpc-message`.
pub(super) static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// Metadata only the fleet sets; a client sending any of it is refused.
pub(super) static FLEET_ONLY: [&HeaderName; 4] = [&HOP, &PRINCIPAL, &LEASE_VERSION, &REQUEST_ID_ORIGIN];
