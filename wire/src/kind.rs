//! The coarse classification every fleet error maps to. Callers decide
//! retries on the kind, never on a message string.

/// What a caller should do about an error.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum ErrorKind {
    /// Retry now against the hinted node (a `NotOwner` with a route).
    RetryAtHint,
    /// Retry later, after a backoff (storage or owner briefly unreachable,
    /// a lease in takeover).
    RetryLater,
    /// The request is wrong or refers to something that does not exist;
    /// retrying the same request cannot succeed.
    GiveUp,
    /// Something an operator must look at (bad configuration, corruption).
    PageSomeone,
}
