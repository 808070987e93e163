//! Corium Fleet's view of the shared store, shared by the transactor nodes
//! and the ingress (which reads it, never writes a database): the storage
//! flag, opening the store, reading a database's roots, the node registry,
//! and the delegation store wrappers share.
//!
//! Layout:
//! - [`storage`] — `--storage` (`filesystem`, `postgres://…`, `s3://…`) and
//!   its backend configuration;
//! - [`flags`] — the storage flags both binaries take (`--storage`,
//!   `--data-dir`, `--s3-*`, the pool), validated into [`StorageSettings`];
//! - [`keys`] — `--storage-key`, stock Corium's storage keys, read into a
//!   keyring (the nodes, `corium-fleet backup` and `restore`);
//! - [`open`](mod@open) — opening it through Corium's backend registry, with
//!   bounded retries;
//! - [`prefix_read`] — every root under a prefix with its bytes, in one
//!   query on `PostgreSQL` (a database's log records on activation), and
//!   [`Opened`], a store with its bulk reader;
//! - [`pg_connect`] — `PostgreSQL` connections that acknowledge at once
//!   (no 40 ms delayed-ACK stalls on large rows);
//! - [`postgres`] — `PostgreSQL` over a pool of a stated size, with the
//!   listing index created at start;
//! - [`s3`] — S3 over an SDK client with the fleet's retries;
//! - [`roots`] — the one reader of a database's catalog entry and lease;
//! - [`registry`] — node records in storage: live members, unique node ids,
//!   the databases each node owns;
//! - [`delegate`] — [`delegate_blobs!`], the blob half of every store wrapper.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod delegate;
pub mod flags;
pub mod keys;
pub mod open;
pub mod pg_connect;
pub mod postgres;
pub mod prefix_read;
pub mod registry;
pub mod roots;
pub mod s3;
pub mod storage;

pub use flags::{StorageFlags, StorageSettings};
pub use open::{DEFAULT_POOL_SIZE, OpenError, open, open_store, open_with_pool};
pub use prefix_read::Opened;
pub use roots::{ReadError, RootView};
pub use storage::{Storage, StorageFlagError};

/// What [`delegate_blobs!`] expands to needs; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
    pub use corium_store::{BlobId, BlobIdStream, BlobStore, StoreError};
}
