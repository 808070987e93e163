//! The node's error type and its coarse kind.

use corium_fleet_common::kind::ErrorKind;

/// Why a node could not start or keep serving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("cannot open storage {storage}: {source}")]
    Storage {
        storage: String,
        #[source]
        source: corium_store::StoreError,
    },
    #[error("storage {0} did not answer within the storage timeout")]
    StorageTimeout(String),
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
}

impl Error {
    /// What the caller (an operator, a supervisor) should do.
    #[must_use]
    pub const fn kind(&self) -> ErrorKind {
        match self {
            Self::Config(_) => ErrorKind::GiveUp,
            Self::Storage { .. } | Self::StorageTimeout(_) => ErrorKind::RetryLater,
            Self::Serve(_) => ErrorKind::PageSomeone,
        }
    }
}
