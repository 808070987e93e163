//! The ingress's per-call authentication work, alone: reading the bearer
//! token, Corium's `Guard::authenticate` with stock Corium's default
//! providers, and the principal envelope (`corium-principal`) replacing the
//! `authorization` header — the CPU each forwarded call pays for security,
//! measured in-process with the same functions the ingress calls
//! (`ingress/src/proxy/intake.rs`, `Proxy::authenticate`).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use corium_fleet_common::auth::{self, AuthFlags};
use corium_protocol::auth::DEFAULT_DEV_TOKEN;
use hyper::http::{HeaderMap, HeaderValue};
use serde::Serialize;

use crate::stats::{Spread, spread};

/// Calls per round.
const CALLS: u32 = 200_000;

/// Nanoseconds of CPU per call, by case (spreads over rounds; the JSON
/// field names are the cases, the unit is nanoseconds).
#[derive(Debug, Serialize)]
pub(crate) struct Result {
    /// No token: anonymous, the envelope encoded once and copied.
    pub(crate) anonymous: Spread,
    /// The development token: an operator principal, encoded each call.
    pub(crate) token: Spread,
    /// A strict fleet refusing a wrong token.
    pub(crate) refused: Spread,
}

fn headers(token: Option<&str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/grpc"));
    headers.insert("te", HeaderValue::from_static("trailers"));
    if let Some(token) = token {
        headers.insert(
            "authorization",
            HeaderValue::from_str(&format!("Bearer {token}")).expect("ASCII"),
        );
    }
    headers
}

/// What the ingress does per call over an mTLS hop.
fn authenticate(
    guard: &corium_protocol::authz::Guard,
    anonymous: &HeaderValue,
    headers: &mut HeaderMap,
) -> bool {
    let credentials = auth::bearer(headers.get("authorization").map(HeaderValue::as_bytes));
    let Ok(principal) = guard.authenticate(&credentials) else {
        return false;
    };
    headers.remove("authorization");
    let value = if principal.is_anonymous() {
        anonymous.clone()
    } else {
        HeaderValue::from_str(&auth::encode(&principal)).expect("base64")
    };
    headers.insert("corium-principal", value);
    true
}

/// CPU nanoseconds per call of `authenticate` on copies of `template`.
fn per_call(guard: &corium_protocol::authz::Guard, template: &HeaderMap, expect: bool) -> f64 {
    let anonymous = HeaderValue::from_str(&auth::encode(&corium_protocol::authz::Principal::anonymous()))
        .expect("base64");
    // The header map copy is the baseline every call pays anyway; measure
    // it and subtract it.
    let copying = Instant::now();
    for _ in 0..CALLS {
        black_box(template.clone());
    }
    let copy = copying.elapsed();
    let started = Instant::now();
    for _ in 0..CALLS {
        let mut headers = template.clone();
        assert_eq!(authenticate(guard, &anonymous, black_box(&mut headers)), expect);
        black_box(headers);
    }
    let total = started.elapsed().saturating_sub(copy);
    total.as_secs_f64() * 1e9 / f64::from(CALLS)
}

/// Runs `rounds` rounds of each case.
pub(crate) fn run(rounds: usize) -> Result {
    let open = AuthFlags::default()
        .guard(Arc::new(corium_protocol::authz::AllowAll))
        .expect("default flags");
    let strict = AuthFlags {
        serve_token: Some("s3cret".to_owned()),
        ..AuthFlags::default()
    }
    .guard(Arc::new(corium_protocol::authz::AllowAll))
    .expect("a token");
    let (mut anonymous, mut token, mut refused) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds.max(1) {
        anonymous.push(per_call(&open, &headers(None), true));
        token.push(per_call(&open, &headers(Some(DEFAULT_DEV_TOKEN)), true));
        refused.push(per_call(&strict, &headers(Some("wrong")), false));
    }
    Result {
        anonymous: spread(&anonymous),
        token: spread(&token),
        refused: spread(&refused),
    }
}
