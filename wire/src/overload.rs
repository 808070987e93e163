//! "Not now": a refusal for load — a node's queue is full, a principal is
//! over its rate, a cap is reached — as `RESOURCE_EXHAUSTED` with the
//! standard `google.rpc.RetryInfo` detail saying when to try again.
//!
//! The refusal is always sent before the request did any work, so resending
//! it is safe; stock Corium clients do not resend `RESOURCE_EXHAUSTED`
//! (corium-peer 0.1.90 resends only what its `retry_is_safe` recognises),
//! the fleet's SDK waits at least the hint before it does, and the ingress
//! passes the refusal on instead of multiplying it with retries of its own.

use std::time::Duration;

use corium_fleet_proto::{RETRY_INFO_TYPE_URL, rpc};

/// The longest hint a refusal carries (a longer wait is the client's call).
pub const MAX_HINT: Duration = Duration::from_secs(30);

/// Metadata on a refusal naming what was full, so a proxy can tell a node
/// at its limit (back off from the node) from one caller over its own
/// (back off from nothing else).
pub const SCOPE: &str = "corium-shed-scope";

/// What a refusal is about.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Scope {
    /// The node as a whole: its running calls and queue are full.
    Node,
    /// One database's share of the node.
    Database,
    /// One caller (a principal's rate, a client's open calls).
    Caller,
    /// Places for long-lived streams (subscriptions) on a node or a
    /// database: not a load the node sheds, so a proxy does not back off
    /// from the node for its other calls.
    Streams,
    /// The ingress itself, or its view of a node.
    Ingress,
}

impl Scope {
    /// The metadata value.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Node => "node",
            Self::Database => "database",
            Self::Caller => "caller",
            Self::Streams => "streams",
            Self::Ingress => "ingress",
        }
    }

    /// The scope a metadata value names.
    #[must_use]
    pub fn parse(value: &[u8]) -> Option<Self> {
        [
            Self::Node,
            Self::Database,
            Self::Caller,
            Self::Streams,
            Self::Ingress,
        ]
        .into_iter()
        .find(|scope| scope.as_str().as_bytes() == value)
    }
}

/// A `RESOURCE_EXHAUSTED` refusal about `scope`, saying `message`, to be
/// retried no sooner than `retry_after` (at most [`MAX_HINT`]).
#[must_use]
pub fn refused_for(scope: Scope, message: String, retry_after: Duration) -> tonic::Status {
    let mut status = refused(message, retry_after);
    status
        .metadata_mut()
        .insert(SCOPE, tonic::metadata::MetadataValue::from_static(scope.as_str()));
    status
}

/// The scope a refusal names (read from response headers or trailers).
#[must_use]
pub fn scope(headers: &tonic::metadata::MetadataMap) -> Option<Scope> {
    headers
        .get(SCOPE)
        .and_then(|value| Scope::parse(value.as_bytes()))
}

/// A `RESOURCE_EXHAUSTED` refusal saying `message`, to be retried no sooner
/// than `retry_after` (at most [`MAX_HINT`]).
#[must_use]
pub fn refused(message: String, retry_after: Duration) -> tonic::Status {
    let delay = retry_after.min(MAX_HINT);
    let detail = rpc::RetryInfo {
        retry_delay: Some(prost_types::Duration {
            seconds: i64::try_from(delay.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(delay.subsec_nanos()).unwrap_or(0),
        }),
    };
    crate::detail::to_status(
        tonic::Code::ResourceExhausted,
        message,
        RETRY_INFO_TYPE_URL,
        &detail,
    )
}

/// `UNAVAILABLE` with the standard retry hint (at most [`MAX_HINT`]): a
/// state that passes — a read replica behind the basis asked for, or between
/// owners. Nothing was done, so the call may be sent again, here or to
/// another replica, after `retry_after`.
#[must_use]
pub fn unavailable(message: String, retry_after: Duration) -> tonic::Status {
    let delay = retry_after.min(MAX_HINT);
    let detail = rpc::RetryInfo {
        retry_delay: Some(prost_types::Duration {
            seconds: i64::try_from(delay.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(delay.subsec_nanos()).unwrap_or(0),
        }),
    };
    crate::detail::to_status(tonic::Code::Unavailable, message, RETRY_INFO_TYPE_URL, &detail)
}

/// The retry hint of a status that carries one (any code; the standard
/// detail may accompany `UNAVAILABLE` too).
#[must_use]
pub fn retry_after(status: &tonic::Status) -> Option<Duration> {
    let detail: rpc::RetryInfo = crate::detail::from_status(status, status.code(), RETRY_INFO_TYPE_URL)?;
    let delay = detail.retry_delay?;
    let seconds = u64::try_from(delay.seconds).ok()?;
    let nanos = u32::try_from(delay.nanos).ok()?;
    Some(Duration::new(seconds, nanos).min(MAX_HINT))
}

/// Whether `status` is a load refusal made by the fleet (a
/// `RESOURCE_EXHAUSTED` with a retry hint): sent before any work was done.
#[must_use]
pub fn is_refusal(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::ResourceExhausted && retry_after(status).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unavailable_hint_survives_the_round_trip() {
        let status = unavailable("replica behind".into(), Duration::from_millis(500));
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(retry_after(&status), Some(Duration::from_millis(500)));
        assert!(!is_refusal(&status), "not a load refusal");
    }

    #[test]
    fn the_hint_survives_the_round_trip() {
        let status = refused("queue full".into(), Duration::from_millis(250));
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert_eq!(status.message(), "queue full");
        assert_eq!(retry_after(&status), Some(Duration::from_millis(250)));
        assert!(is_refusal(&status));
        // Through HTTP headers, as the ingress and clients see it.
        let headers = status
            .clone()
            .into_http::<tonic::body::Body>()
            .into_parts()
            .0
            .headers;
        let parsed = tonic::Status::from_header_map(&headers).expect("a status");
        assert_eq!(retry_after(&parsed), Some(Duration::from_millis(250)));
    }

    #[test]
    fn the_scope_travels_in_the_headers() {
        let status = refused_for(Scope::Node, "full".into(), Duration::from_millis(100));
        let headers = status.into_http::<tonic::body::Body>().into_parts().0.headers;
        let parsed = tonic::Status::from_header_map(&headers).expect("a status");
        assert_eq!(scope(parsed.metadata()), Some(Scope::Node));
        assert_eq!(Scope::parse(b"caller"), Some(Scope::Caller));
        assert_eq!(Scope::parse(b"junk"), None);
    }

    #[test]
    fn hints_are_capped_and_plain_statuses_have_none() {
        let long = refused("later".into(), Duration::from_hours(1));
        assert_eq!(retry_after(&long), Some(MAX_HINT));
        let plain = tonic::Status::resource_exhausted("body too large");
        assert_eq!(retry_after(&plain), None);
        assert!(!is_refusal(&plain));
    }
}
