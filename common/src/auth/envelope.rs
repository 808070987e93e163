//! `corium-principal`: an authenticated principal in one header value.
//!
//! The value is URL-safe base64 (no padding) of a small JSON object
//! `{"v":1,"p":provider,"s":subject,"r":[roles],"c":{claims}}`. It carries
//! no signature: a node trusts it only when the connection it arrived on
//! presents an ingress's mTLS certificate, and only from the request headers
//! (the node reads it in its interceptor; trailers, which tonic merges later,
//! are never consulted). See `docs/security.md`.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use corium_protocol::authz::Principal;

/// The largest envelope a node decodes; a principal is a few hundred bytes,
/// and anything larger is refused before it is parsed.
pub const MAX_ENVELOPE_BYTES: usize = 8 * 1024;

/// The envelope format this build writes and reads.
const VERSION: u32 = 1;

/// Why an envelope was refused. Any of these means the sender is not a
/// well-behaved ingress of this fleet: the call is refused, never guessed at.
#[derive(Debug, thiserror::Error, Eq, PartialEq)]
pub enum EnvelopeError {
    /// Over [`MAX_ENVELOPE_BYTES`].
    #[error("corium-principal is {0} bytes, over the limit of {MAX_ENVELOPE_BYTES}")]
    TooLarge(usize),
    /// Not base64, not JSON of the expected shape, or an empty subject.
    #[error("corium-principal is malformed: {0}")]
    Malformed(String),
    /// Written by a newer ingress than this node understands.
    #[error("corium-principal format {0} is not supported (this node reads format {VERSION})")]
    Version(u32),
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Wire {
    v: u32,
    p: String,
    s: String,
    #[serde(default)]
    r: BTreeSet<String>,
    #[serde(default)]
    c: BTreeMap<String, String>,
}

/// `principal` as a header value (visible ASCII).
///
/// # Panics
/// Never: a struct of strings, sets and maps always serializes.
#[must_use]
pub fn encode(principal: &Principal) -> String {
    let wire = Wire {
        v: VERSION,
        p: principal.provider.clone(),
        s: principal.subject.clone(),
        r: principal.roles.clone(),
        c: principal.claims.clone(),
    };
    #[allow(
        clippy::expect_used,
        reason = "a struct of strings, sets and string-keyed maps always serializes to JSON"
    )]
    let json = serde_json::to_vec(&wire).expect("strings and maps always serialize");
    URL_SAFE_NO_PAD.encode(json)
}

/// The principal in a header value written by [`encode`].
///
/// # Errors
/// Too large, malformed, or of an unknown format version.
pub fn decode(value: &str) -> Result<Principal, EnvelopeError> {
    if value.len() > MAX_ENVELOPE_BYTES {
        return Err(EnvelopeError::TooLarge(value.len()));
    }
    let json = URL_SAFE_NO_PAD
        .decode(value)
        .map_err(|error| EnvelopeError::Malformed(error.to_string()))?;
    let wire: Wire =
        serde_json::from_slice(&json).map_err(|error| EnvelopeError::Malformed(error.to_string()))?;
    if wire.v != VERSION {
        return Err(EnvelopeError::Version(wire.v));
    }
    if wire.s.is_empty() || wire.p.is_empty() {
        return Err(EnvelopeError::Malformed("empty subject or provider".to_owned()));
    }
    Ok(Principal {
        subject: wire.s,
        provider: wire.p,
        roles: wire.r,
        claims: wire.c,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn anonymous_and_the_dev_token_principal_round_trip() {
        for principal in [
            Principal::anonymous(),
            Principal::new("static-token", "operator").with_role("admin"),
        ] {
            let value = encode(&principal);
            assert!(
                value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            );
            assert_eq!(decode(&value), Ok(principal));
        }
    }

    #[test]
    fn refuses_junk_oversize_and_unknown_versions() {
        assert!(matches!(decode("not base64!"), Err(EnvelopeError::Malformed(_))));
        assert!(matches!(
            decode(&URL_SAFE_NO_PAD.encode(b"[1,2]")),
            Err(EnvelopeError::Malformed(_))
        ));
        let empty = URL_SAFE_NO_PAD.encode(br#"{"v":1,"p":"x","s":""}"#);
        assert!(matches!(decode(&empty), Err(EnvelopeError::Malformed(_))));
        let future = URL_SAFE_NO_PAD.encode(br#"{"v":2,"p":"x","s":"y"}"#);
        assert_eq!(decode(&future), Err(EnvelopeError::Version(2)));
        let huge = "A".repeat(MAX_ENVELOPE_BYTES + 1);
        assert_eq!(
            decode(&huge),
            Err(EnvelopeError::TooLarge(MAX_ENVELOPE_BYTES + 1))
        );
    }

    proptest! {
        #[test]
        fn any_principal_round_trips(
            provider in "\\PC{1,20}",
            subject in "\\PC{1,40}",
            roles in proptest::collection::btree_set("\\PC{0,12}", 0..4),
            claims in proptest::collection::btree_map("\\PC{0,12}", "\\PC{0,24}", 0..4),
        ) {
            let principal = Principal { subject, provider, roles, claims };
            prop_assert_eq!(decode(&encode(&principal)), Ok(principal));
        }
    }
}
