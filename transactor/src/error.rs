//! The node's error type and its coarse kind, and how a Corium node error
//! is classified (a failure in storage, a lost lease). The statuses callers
//! see are made at the service edge (`service/status.rs`).

use corium_fleet_wire::kind::ErrorKind;

/// Why a node could not start or keep serving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration the node cannot run with (flags, the placement map,
    /// a duplicate node id, TLS files).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The `--placement-map` file is unreadable or refused.
    #[error("--placement-map: {0}")]
    PlacementMap(#[from] corium_fleet_common::placement_map::LoadError),
    /// The node's TLS material could not be read.
    #[error(transparent)]
    Tls(#[from] corium_fleet_common::tls::TlsError),
    /// The storage backend cannot host cells.
    #[error(transparent)]
    Unshareable(#[from] crate::view::MemoryNotShared),
    /// The shared store could not be opened.
    #[error(transparent)]
    Open(#[from] corium_fleet_store::OpenError),
    /// The shared store failed while the node started.
    #[error("storage {storage} failed: {source}")]
    Storage {
        /// The storage, described without credentials.
        storage: String,
        /// Corium's error.
        #[source]
        source: corium_store::StoreError,
    },
    /// The gRPC server failed.
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// The read replicas' loopback relay could not listen.
    #[error("the replica relay cannot listen on loopback: {0}")]
    Relay(#[source] std::io::Error),
}

impl Error {
    /// What the caller (an operator, a supervisor) should do.
    #[must_use]
    pub const fn kind(&self) -> ErrorKind {
        match self {
            Self::Config(_) | Self::PlacementMap(_) | Self::Tls(_) | Self::Unshareable(_) => {
                ErrorKind::GiveUp
            }
            Self::Open(_) | Self::Storage { .. } => ErrorKind::RetryLater,
            Self::Serve(_) | Self::Relay(_) => ErrorKind::PageSomeone,
        }
    }
}

/// Whether a Corium node error is a failure in storage (or of a commit
/// whose storage outcome is unknown), as opposed to a refusal of the request.
#[must_use]
pub(crate) fn is_storage_failure(error: &corium_transactor::node::NodeError) -> bool {
    use corium_transactor::TransactError;
    use corium_transactor::node::NodeError;
    match error {
        NodeError::Store(_) | NodeError::Log(_) | NodeError::Lease(_) | NodeError::GroupCommit(_) => true,
        NodeError::Transact(inner) => matches!(
            inner,
            TransactError::Log(_) | TransactError::Store(_) | TransactError::IndexTask(_)
        ),
        _ => false,
    }
}

/// Whether a Corium node error says this node lost the database's lease.
#[must_use]
pub(crate) fn is_deposed(error: &corium_transactor::node::NodeError) -> bool {
    use corium_transactor::TransactError;
    use corium_transactor::node::NodeError;
    matches!(
        error,
        NodeError::Deposed(_) | NodeError::Transact(TransactError::Deposed { .. })
    )
}

/// The key a Corium node error says this node lacks: the database is
/// encrypted and the node holds no keyring, or its keyring does not resolve
/// the key the database's manifest names. Corium decides this before it
/// takes the lease, so the error proves nothing was fenced or written.
#[must_use]
pub(crate) fn missing_key(error: &corium_transactor::node::NodeError) -> Option<String> {
    use corium_crypt::KeyError;
    use corium_store::StoreError;
    use corium_transactor::keys::KeyWiringError;
    use corium_transactor::node::NodeError;
    match error {
        NodeError::Keys(KeyWiringError::NoKeyring { kek, .. }) => Some(kek.to_string()),
        NodeError::Keys(KeyWiringError::Store(StoreError::Keyring(
            KeyError::MissingKey { id, .. } | KeyError::MissingCurrentEpoch(id),
        ))) => Some(id.to_string()),
        _ => None,
    }
}
