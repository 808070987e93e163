//! The calls a differential sequence is made of: every RPC of `corium.v1`
//! `Transactor`, `Catalog` and `PeerServer`, with the inputs a test picks.

/// The view of a database a `PeerServer` read names (`DbViewSpec`).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum View {
    /// The database as it is (no view).
    Current,
    /// As of basis `t`.
    AsOf(u64),
    /// Since basis `t`.
    Since(u64),
    /// Every assertion and retraction.
    History,
}

/// One call. EDN is given as text and encoded the way stock clients do.
#[derive(Clone, Debug)]
pub enum Op {
    /// `Catalog/CreateDatabase` with an EDN schema.
    Create {
        /// The database.
        db: String,
        /// The schema, EDN text.
        schema: String,
        /// The key to encrypt it under at rest (empty: not encrypted).
        storage_key: String,
    },
    /// `Catalog/CreateDatabase` with raw schema bytes (malformed input).
    CreateRaw {
        /// The database.
        db: String,
        /// The schema bytes as sent.
        schema: Vec<u8>,
    },
    /// `Transactor/Transact`.
    Transact {
        /// The database.
        db: String,
        /// The transaction forms, EDN text (a vector).
        edn: String,
        /// Commit only at this basis.
        expected_basis_t: Option<u64>,
    },
    /// `Transactor/Transact` with raw `tx_data` bytes (malformed input).
    TransactRaw {
        /// The database.
        db: String,
        /// The bytes as sent.
        tx_data: Vec<u8>,
    },
    /// `Transactor/Sync` to basis `t` (0: the current one).
    Sync {
        /// The database.
        db: String,
        /// The basis waited for.
        t: u64,
    },
    /// `Transactor/Status`.
    Status {
        /// The database.
        db: String,
    },
    /// `Transactor/Subscribe` from `from_basis_t`: the handshake and the
    /// backfill (every report up to the handshake's basis).
    Subscribe {
        /// The database.
        db: String,
        /// Reports after this basis.
        from_basis_t: u64,
    },
    /// `Transactor/SagaCommit`.
    SagaCommit {
        /// The parent database.
        db: String,
        /// The saga id.
        saga: String,
    },
    /// `Transactor/SagaFinish`.
    SagaFinish {
        /// The parent database.
        db: String,
        /// The saga id.
        saga: String,
        /// `aborted` or `expired`.
        status: String,
    },
    /// `Catalog/ListDatabases`.
    List,
    /// `Catalog/DeleteDatabase`.
    Delete {
        /// The database.
        db: String,
    },
    /// `Catalog/ForkDatabase`.
    Fork {
        /// The source.
        db: String,
        /// The new database.
        target: String,
        /// The source basis forked (0: the current one).
        as_of_t: u64,
    },
    /// `Catalog/GcDeletedDatabases` with no retention.
    GcDeleted,
    /// `Catalog/RequestIndex`.
    RequestIndex {
        /// The database.
        db: String,
    },
    /// `Catalog/SetIndexPolicy` (`None` fields read the policy).
    SetIndexPolicy {
        /// The database.
        db: String,
        /// The new indexing interval.
        interval_ms: Option<u64>,
    },
    /// `Catalog/GetStorageInfo`.
    StorageInfo {
        /// The database.
        db: String,
    },
    /// `Catalog/KeyStatus`.
    KeyStatus {
        /// The database.
        db: String,
    },
    /// `Catalog/RotateStorageKey`.
    RotateKey {
        /// The database.
        db: String,
    },
    /// `Catalog/RewrapKeys`.
    Rewrap {
        /// The database.
        db: String,
        /// The key-encryption key named.
        kek: String,
    },
    /// `Catalog/AlterSchema` to `desired` (EDN), as a plan the client has
    /// not read the installed schema for.
    AlterSchema {
        /// The database.
        db: String,
        /// The desired schema, EDN text.
        desired: String,
    },
    /// `PeerServer/Query`: one view, bound to `$`.
    Query {
        /// The database.
        db: String,
        /// Its view.
        view: View,
        /// The query, EDN text.
        query: String,
        /// The other inputs, EDN text (a vector).
        args: String,
    },
    /// `PeerServer/Pull`.
    Pull {
        /// The database.
        db: String,
        /// Its view.
        view: View,
        /// The pull pattern, EDN text.
        pattern: String,
        /// The entity: a lookup ref, an ident or an id, EDN text.
        eid: String,
    },
    /// `PeerServer/Datoms`.
    Datoms {
        /// The database.
        db: String,
        /// Its view.
        view: View,
        /// `eavt`, `aevt`, `avet` or `vaet` (or anything else, refused).
        index: String,
        /// The leading components, EDN text (a vector).
        components: String,
        /// At most this many (0: the server's limit).
        limit: u64,
    },
    /// `PeerServer/TxRange` from `start` to `end` (exclusive; 0: open).
    TxRange {
        /// The database.
        db: String,
        /// The first basis.
        start: u64,
        /// The basis after the last (0: the latest).
        end: u64,
    },
    /// `PeerServer/DbStats`.
    DbStats {
        /// The database.
        db: String,
        /// Its view.
        view: View,
    },
    /// `PeerServer/Transact`.
    PeerTransact {
        /// The database.
        db: String,
        /// The transaction forms, EDN text (a vector).
        edn: String,
    },
    /// `PeerServer/Subscribe`, as [`Op::Subscribe`].
    PeerSubscribe {
        /// The database.
        db: String,
        /// Reports after this basis.
        from_basis_t: u64,
    },
}

impl Op {
    /// `Transact` of the EDN `edn` into `db`, at whatever basis it has.
    #[must_use]
    pub fn transact(db: &str, edn: &str) -> Self {
        Self::Transact {
            db: db.to_owned(),
            edn: edn.to_owned(),
            expected_basis_t: None,
        }
    }

    /// The database the call names (a fork: its source), if any.
    #[must_use]
    pub fn db(&self) -> Option<&str> {
        match self {
            Self::Create { db, .. }
            | Self::CreateRaw { db, .. }
            | Self::Transact { db, .. }
            | Self::TransactRaw { db, .. }
            | Self::Sync { db, .. }
            | Self::Status { db }
            | Self::Subscribe { db, .. }
            | Self::SagaCommit { db, .. }
            | Self::SagaFinish { db, .. }
            | Self::Delete { db }
            | Self::Fork { db, .. }
            | Self::RequestIndex { db }
            | Self::SetIndexPolicy { db, .. }
            | Self::StorageInfo { db }
            | Self::KeyStatus { db }
            | Self::RotateKey { db }
            | Self::Rewrap { db, .. }
            | Self::AlterSchema { db, .. }
            | Self::Query { db, .. }
            | Self::Pull { db, .. }
            | Self::Datoms { db, .. }
            | Self::TxRange { db, .. }
            | Self::DbStats { db, .. }
            | Self::PeerTransact { db, .. }
            | Self::PeerSubscribe { db, .. } => Some(db),
            Self::List | Self::GcDeleted => None,
        }
    }

    /// The RPC's name, `Service/Method`.
    #[must_use]
    pub fn rpc(&self) -> &'static str {
        match self {
            Self::Create { .. } | Self::CreateRaw { .. } => "Catalog/CreateDatabase",
            Self::Transact { .. } | Self::TransactRaw { .. } => "Transactor/Transact",
            Self::Sync { .. } => "Transactor/Sync",
            Self::Status { .. } => "Transactor/Status",
            Self::Subscribe { .. } => "Transactor/Subscribe",
            Self::SagaCommit { .. } => "Transactor/SagaCommit",
            Self::SagaFinish { .. } => "Transactor/SagaFinish",
            Self::List => "Catalog/ListDatabases",
            Self::Delete { .. } => "Catalog/DeleteDatabase",
            Self::Fork { .. } => "Catalog/ForkDatabase",
            Self::GcDeleted => "Catalog/GcDeletedDatabases",
            Self::RequestIndex { .. } => "Catalog/RequestIndex",
            Self::SetIndexPolicy { .. } => "Catalog/SetIndexPolicy",
            Self::StorageInfo { .. } => "Catalog/GetStorageInfo",
            Self::KeyStatus { .. } => "Catalog/KeyStatus",
            Self::RotateKey { .. } => "Catalog/RotateStorageKey",
            Self::Rewrap { .. } => "Catalog/RewrapKeys",
            Self::AlterSchema { .. } => "Catalog/AlterSchema",
            Self::Query { .. } => "PeerServer/Query",
            Self::Pull { .. } => "PeerServer/Pull",
            Self::Datoms { .. } => "PeerServer/Datoms",
            Self::TxRange { .. } => "PeerServer/TxRange",
            Self::DbStats { .. } => "PeerServer/DbStats",
            Self::PeerTransact { .. } => "PeerServer/Transact",
            Self::PeerSubscribe { .. } => "PeerServer/Subscribe",
        }
    }

    /// Whether the call is a `PeerServer` read (answered from a replica on
    /// the fleet, from a peer server that follows its transactor on stock).
    #[must_use]
    pub fn is_peer_read(&self) -> bool {
        matches!(
            self,
            Self::Query { .. }
                | Self::Pull { .. }
                | Self::Datoms { .. }
                | Self::TxRange { .. }
                | Self::DbStats { .. }
        )
    }

    /// Whether the call goes to `PeerServer`.
    #[must_use]
    pub fn is_peer_server(&self) -> bool {
        self.is_peer_read() || matches!(self, Self::PeerTransact { .. } | Self::PeerSubscribe { .. })
    }
}

/// Every RPC of `Transactor`, `Catalog` and `PeerServer`, for the coverage
/// check.
pub const EVERY_RPC: [&str; 25] = [
    "Transactor/Transact",
    "Transactor/SagaCommit",
    "Transactor/SagaFinish",
    "Transactor/Subscribe",
    "Transactor/Sync",
    "Transactor/Status",
    "Catalog/CreateDatabase",
    "Catalog/DeleteDatabase",
    "Catalog/ForkDatabase",
    "Catalog/ListDatabases",
    "Catalog/GcDeletedDatabases",
    "Catalog/RequestIndex",
    "Catalog/SetIndexPolicy",
    "Catalog/GetStorageInfo",
    "Catalog/KeyStatus",
    "Catalog/RotateStorageKey",
    "Catalog/RewrapKeys",
    "Catalog/AlterSchema",
    "PeerServer/Query",
    "PeerServer/Pull",
    "PeerServer/Transact",
    "PeerServer/Datoms",
    "PeerServer/TxRange",
    "PeerServer/DbStats",
    "PeerServer/Subscribe",
];
