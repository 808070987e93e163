//! gRPC metadata keys of the fleet wire protocol (brief, section 4) and the
//! parsing of their values.

/// Routing key = canonical database name. A hint only; must equal the body's
/// `db` or the request is rejected `INVALID_ARGUMENT`.
pub const DATABASE_ROUTE: &str = "corium-database-route";
/// Client-generated idempotency key for `Transact` (UUID text).
pub const REQUEST_ID: &str = "corium-request-id";
/// On a forwarded `Transact`: `ingress` when the ingress assigned
/// `corium-request-id` because the client sent none. A node then answers a
/// database that cannot take request ids with a typed refusal (nothing
/// committed; see `outcome::unsupported_status`) instead of an error, and
/// the ingress sends the call again without the id. Set by the fleet, never
/// by a client.
pub const REQUEST_ID_ORIGIN: &str = "corium-request-id-origin";
/// The value of [`REQUEST_ID_ORIGIN`] the ingress sets.
pub const ORIGIN_INGRESS: &str = "ingress";
/// `1` on a forwarded request; a node never forwards a request carrying it.
pub const HOP: &str = "corium-hop";
/// The lease version the ingress routed on; the owner accepts only if it
/// holds exactly that version. On a response: the lease version of the
/// owner that answered.
pub const LEASE_VERSION: &str = "corium-lease-version";
/// On a `Transact` response: `1` when the answer is the replay of a
/// transaction committed earlier under the same request id (possibly by an
/// earlier owner, under an earlier lease version).
pub const REPLAYED: &str = "corium-replayed";
/// Authenticated caller, trusted only from an ingress mTLS peer.
pub const PRINCIPAL: &str = "corium-principal";
/// Correlation id carried across client, ingress and owner.
pub const X_REQUEST_ID: &str = "x-request-id";
/// On a `Subscribe`: `1` from a node's hot standby, which follows the owner's
/// acknowledged stream. Such a stream does not keep its database from idle
/// eviction, and never activates it: a database not open at the node is
/// answered `NotOwner`. Harmless from anyone (it only takes away), so it is
/// not refused from clients.
pub const HOT_STANDBY: &str = "corium-hot-standby";
/// On a `corium.v1.PeerServer` read: the basis the answer must reflect at
/// least (a `t` the client has seen, e.g. its last write's `basis_t`). A
/// read replica waits until it has applied that basis, within the call's
/// deadline, and otherwise refuses `UNAVAILABLE` with a retry hint: never an
/// answer from behind it. Set by clients (the SDK sets its last written
/// basis); forwarded as sent.
pub const MIN_BASIS: &str = "corium-min-basis";

/// Why a metadata value was refused.
#[derive(Debug, thiserror::Error, Eq, PartialEq)]
pub enum MetadataError {
    /// A value is not visible ASCII, so it cannot be read as text.
    #[error("metadata {key} is not valid ASCII text")]
    NotText {
        /// The metadata key whose value was refused.
        key: &'static str,
    },
    /// A numeric key (`corium-hop`, `corium-lease-version`) does not parse
    /// as a `u64`.
    #[error("metadata {key} must be a non-negative integer, got {value:?}")]
    NotANumber {
        /// The metadata key whose value was refused.
        key: &'static str,
        /// The value as sent.
        value: String,
    },
    /// `corium-hop` is above 1: the request was forwarded more than once.
    #[error("{HOP} is {0}: a forwarded request is never forwarded again (at most 1 hop)")]
    TooManyHops(u64),
    /// `corium-database-route` names a different database than the body.
    #[error(
        "{DATABASE_ROUTE} {route:?} does not match the request's database {body:?}; \
         the body is authoritative"
    )]
    RouteMismatch {
        /// The database named by the route header.
        route: String,
        /// The database named by the request body, which wins.
        body: String,
    },
    /// `corium-request-id` is present but empty.
    #[error("{REQUEST_ID} is empty; send a UUID or leave it out")]
    EmptyRequestId,
    /// `corium-request-id` is longer than [`MAX_REQUEST_ID_BYTES`]; carries
    /// its length in bytes.
    #[error("{REQUEST_ID} is {0} bytes; a UUID is at most 45")]
    RequestIdTooLong(usize),
    /// `corium-request-id` is text but not a UUID in any of its forms.
    #[error("{REQUEST_ID} {0:?} is not a UUID")]
    RequestIdNotUuid(String),
}

/// On a `Transact` response: the basis the transaction committed at (its
/// `t`), as a header, so a proxy can learn it without decoding the body
/// (the ingress gives later reads on the same client connection at least
/// that basis: read-your-writes for stock thin clients).
pub const BASIS_T: &str = "corium-basis-t";

/// Parses a `grpc-timeout` value (`<digits><H|M|S|m|u|n>`, gRPC over
/// HTTP/2); `None` for anything else.
#[must_use]
pub fn grpc_timeout(text: &str) -> Option<std::time::Duration> {
    use std::time::Duration;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount.saturating_mul(3600)),
        "M" => Duration::from_secs(amount.saturating_mul(60)),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// Parses `corium-min-basis`: absent → `None`, else a `u64`.
///
/// # Errors
/// [`MetadataError::NotText`] or [`MetadataError::NotANumber`].
pub fn min_basis(map: &tonic::metadata::MetadataMap) -> Result<Option<u64>, MetadataError> {
    let Some(value) = map.get(MIN_BASIS) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| MetadataError::NotText { key: MIN_BASIS })?;
    text.trim()
        .parse()
        .map(Some)
        .map_err(|_| MetadataError::NotANumber {
            key: MIN_BASIS,
            value: text.to_owned(),
        })
}

/// The longest `corium-request-id` accepted (a braced URN-form UUID is 45).
pub const MAX_REQUEST_ID_BYTES: usize = 45;

/// Parses `corium-request-id`: absent → `None`; otherwise it must be a UUID
/// in any of its text forms.
///
/// # Errors
/// An empty, oversized, non-text or non-UUID value.
pub fn request_id(map: &tonic::metadata::MetadataMap) -> Result<Option<uuid::Uuid>, MetadataError> {
    let Some(value) = map.get(REQUEST_ID) else {
        return Ok(None);
    };
    let bytes = value.as_bytes();
    if bytes.is_empty() {
        return Err(MetadataError::EmptyRequestId);
    }
    if bytes.len() > MAX_REQUEST_ID_BYTES {
        return Err(MetadataError::RequestIdTooLong(bytes.len()));
    }
    let text = value
        .to_str()
        .map_err(|_| MetadataError::NotText { key: REQUEST_ID })?;
    uuid::Uuid::parse_str(text.trim())
        .map(Some)
        .map_err(|_| MetadataError::RequestIdNotUuid(text.to_owned()))
}

/// Whether the ingress assigned this request's `corium-request-id`
/// ([`REQUEST_ID_ORIGIN`] is [`ORIGIN_INGRESS`]).
#[must_use]
pub fn id_assigned_by_ingress(map: &tonic::metadata::MetadataMap) -> bool {
    map.get(REQUEST_ID_ORIGIN)
        .is_some_and(|value| value.as_bytes() == ORIGIN_INGRESS.as_bytes())
}

fn text<'a>(
    map: &'a tonic::metadata::MetadataMap,
    key: &'static str,
) -> Result<Option<&'a str>, MetadataError> {
    map.get(key)
        .map(|value| value.to_str().map_err(|_| MetadataError::NotText { key }))
        .transpose()
}

fn number(map: &tonic::metadata::MetadataMap, key: &'static str) -> Result<Option<u64>, MetadataError> {
    text(map, key)?
        .map(|value| {
            value
                .trim()
                .parse::<u64>()
                .map_err(|_| MetadataError::NotANumber {
                    key,
                    value: value.to_owned(),
                })
        })
        .transpose()
}

/// The fleet metadata of one incoming request, validated.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct Routing {
    /// `corium-hop`, 0 when absent.
    pub hop: u64,
    /// `corium-lease-version`, when the caller routed on one.
    pub lease_version: Option<u64>,
}

/// Validates the fleet metadata of a request for database `body_db`:
/// the route header (if any) must name the same database, the hop count must
/// be at most 1, and numeric keys must parse.
///
/// # Errors
/// Returns the first [`MetadataError`] found; nothing has been acted on yet.
pub fn check(map: &tonic::metadata::MetadataMap, body_db: &str) -> Result<Routing, MetadataError> {
    if let Some(route) = text(map, DATABASE_ROUTE)?
        && route != body_db
    {
        return Err(MetadataError::RouteMismatch {
            route: route.to_owned(),
            body: body_db.to_owned(),
        });
    }
    let hop = number(map, HOP)?.unwrap_or(0);
    if hop > 1 {
        return Err(MetadataError::TooManyHops(hop));
    }
    Ok(Routing {
        hop,
        lease_version: number(map, LEASE_VERSION)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::metadata::MetadataMap;

    fn map(pairs: &[(&'static str, &str)]) -> MetadataMap {
        let mut map = MetadataMap::new();
        for (key, value) in pairs {
            map.insert(*key, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn grpc_timeouts_parse_in_every_unit() {
        use std::time::Duration;
        assert_eq!(grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(grpc_timeout("300m"), Some(Duration::from_millis(300)));
        assert_eq!(grpc_timeout("1H"), Some(Duration::from_hours(1)));
        assert_eq!(grpc_timeout("5n"), Some(Duration::from_nanos(5)));
        assert_eq!(grpc_timeout("5u"), Some(Duration::from_micros(5)));
        assert_eq!(grpc_timeout("10"), None, "a unit is required");
        assert_eq!(grpc_timeout("junk"), None);
        assert_eq!(grpc_timeout(""), None);
    }

    #[test]
    fn min_basis_is_a_number_or_absent() {
        assert_eq!(min_basis(&map(&[])), Ok(None));
        assert_eq!(min_basis(&map(&[(MIN_BASIS, "42")])), Ok(Some(42)));
        assert!(matches!(
            min_basis(&map(&[(MIN_BASIS, "-1")])),
            Err(MetadataError::NotANumber { key: MIN_BASIS, .. })
        ));
        assert!(min_basis(&map(&[(MIN_BASIS, "soon")])).is_err());
    }

    #[test]
    fn absent_keys_are_fine() {
        assert_eq!(check(&map(&[]), "a"), Ok(Routing::default()));
    }

    #[test]
    fn matching_route_and_one_hop_pass() {
        let routing = check(
            &map(&[(DATABASE_ROUTE, "a"), (HOP, "1"), (LEASE_VERSION, "7")]),
            "a",
        )
        .unwrap();
        assert_eq!(
            routing,
            Routing {
                hop: 1,
                lease_version: Some(7)
            }
        );
    }

    #[test]
    fn mismatched_route_is_refused() {
        assert_eq!(
            check(&map(&[(DATABASE_ROUTE, "b")]), "a"),
            Err(MetadataError::RouteMismatch {
                route: "b".into(),
                body: "a".into()
            })
        );
    }

    #[test]
    fn request_ids_must_be_uuids() {
        let with = |value: &'static str| {
            let mut map = tonic::metadata::MetadataMap::new();
            map.insert(REQUEST_ID, value.parse().unwrap());
            request_id(&map)
        };
        assert_eq!(request_id(&tonic::metadata::MetadataMap::new()), Ok(None));
        let id = "67e55044-10b1-426f-9247-bb680e5fe0c8";
        assert_eq!(with(id).unwrap().unwrap().to_string(), id);
        assert_eq!(with(""), Err(MetadataError::EmptyRequestId));
        assert!(matches!(
            with("not-a-uuid"),
            Err(MetadataError::RequestIdNotUuid(_))
        ));
        assert!(matches!(
            with("67e55044-10b1-426f-9247-bb680e5fe0c8-67e55044-10b1-426f"),
            Err(MetadataError::RequestIdTooLong(_))
        ));
    }

    #[test]
    fn second_hop_is_refused() {
        assert_eq!(
            check(&map(&[(HOP, "2")]), "a"),
            Err(MetadataError::TooManyHops(2))
        );
    }

    #[test]
    fn garbage_lease_version_is_refused() {
        assert!(matches!(
            check(&map(&[(LEASE_VERSION, "seven")]), "a"),
            Err(MetadataError::NotANumber {
                key: LEASE_VERSION,
                ..
            })
        ));
    }
}
