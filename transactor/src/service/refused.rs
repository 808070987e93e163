//! Why the node's front door (`admit.rs`) turns a call away, typed; the
//! service edge makes the one status the caller sees (`status.rs`).

use corium_protocol::authz::AuthError;

use crate::host::Refusal;
use crate::waiters::OutOfReach;
use crate::work_limits::Overloaded;

/// Why the front door turned a call away.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    /// The guard denied the access.
    #[error(transparent)]
    Denied(AuthError),
    /// A grant that filters what the caller may see, on a surface that
    /// cannot apply the filter: refused rather than answered in full.
    #[error("view filtering is not enforced on this surface yet")]
    Filtered,
    /// The operator surface, asked by someone who is not an operator.
    #[error("{what} needs an operator: a principal with role {role:?}")]
    NotOperator {
        /// The call.
        what: &'static str,
        /// The role that would have been admitted.
        role: String,
    },
    /// The ownership decision's "no" (bad name or metadata, not the holder,
    /// an unknown database, ownership that cannot be verified).
    #[error(transparent)]
    Ownership(#[from] Refusal),
    /// The node's limits (work places, waits, a principal's rate).
    #[error("{}", .0.message)]
    Overloaded(Overloaded),
    /// A basis further ahead than the database can reach in time.
    #[error(transparent)]
    OutOfReach(#[from] OutOfReach),
}
