//! Who a caller is, decided with Corium's own authentication
//! (`corium_protocol::authz::Guard` and its identity providers), the same way
//! at both tiers.
//!
//! - [`flags`] — the stock transactor's authentication flags
//!   (`--serve-token`, `--require-auth`, `--serve-open`, `--oidc-*`) and the
//!   [`Guard`](corium_protocol::authz::Guard) they select, plus the fleet's
//!   `--operator-role`;
//! - [`envelope`] — the authenticated principal as the ingress sends it to
//!   the owner (`corium-principal`), trusted only from an ingress's mTLS
//!   certificate.
//!
//! The rule both tiers follow: a client's bearer token is checked where the
//! client connects (the ingress, or a node it calls directly); the principal
//! it yields travels on, the token never does.

pub mod envelope;
pub mod flags;

pub use envelope::{EnvelopeError, decode, encode};
pub use flags::{AuthFlags, DATA_ADMIN_ROLE, DEFAULT_OPERATOR_ROLE, FLEET_NODE_ROLE, bearer};
