//! The storage flags both binaries take, and the [`StorageSettings`] they
//! validate into.

use std::path::PathBuf;

use corium_fleet_common::process::ConfigError;
use serde::{Deserialize, Serialize};

use crate::open::DEFAULT_POOL_SIZE;
use crate::postgres::PoolOptions;
use crate::storage::Storage;

/// Where the shared store is and how this process opens it; also the
/// `--config` file's keys of the same names.
#[derive(clap::Args, Clone, Debug, Default, Serialize, Deserialize)]
#[command(next_help_heading = "Storage")]
#[serde(default)]
pub struct StorageFlags {
    /// The storage every node shares (and the ingress reads to find lease
    /// holders): `filesystem` (under --data-dir), `postgres://…`, or
    /// `s3://BUCKET[/PREFIX]` (with --s3-endpoint / AWS_* credentials)
    /// [default: filesystem].
    #[arg(long, env = "CORIUM_FLEET_STORAGE")]
    pub storage: Option<String>,
    /// Data directory: the filesystem store, shared by every node and
    /// ingress of a filesystem fleet [default: ./.corium-fleet/data].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// S3 endpoint URL (for S3-compatible servers).
    #[arg(long, env = "CORIUM_FLEET_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// S3 region [default: us-east-1].
    #[arg(long, env = "AWS_REGION")]
    pub s3_region: Option<String>,
    /// Connections in this process's `PostgreSQL` pool, shared by every
    /// database it serves [default: 16].
    #[arg(long)]
    pub storage_pool_size: Option<usize>,
    /// `PostgreSQL` connections acknowledge every read at once, so a large
    /// row is not held up by delayed ACKs (40 ms each where the path's MSS
    /// is larger than the server's 8 KB writes: loopback, jumbo frames);
    /// `false` only to measure the difference [default: true].
    #[arg(long, value_name = "BOOL")]
    pub postgres_quick_ack: Option<bool>,
}

/// The validated storage settings.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct StorageSettings {
    /// The shared store (parsed at validation, so a bad `--storage` is a
    /// usage error).
    pub backend: Storage,
    /// The data directory (the filesystem store's root).
    pub data_dir: PathBuf,
    /// The `PostgreSQL` pool: its size (at least 1) and quick ACKs.
    pub pool: PoolOptions,
}

/// `--data-dir` when not given.
pub const DEFAULT_DATA_DIR: &str = ".corium-fleet/data";

impl StorageFlags {
    /// Validates into [`StorageSettings`].
    ///
    /// # Errors
    /// A message naming the flag at fault.
    pub fn validate(self) -> Result<StorageSettings, ConfigError> {
        let backend = Storage::parse(
            self.storage.as_deref().unwrap_or("filesystem"),
            self.s3_endpoint,
            self.s3_region,
        )
        .map_err(|error| ConfigError::setting("--storage", error))?;
        let size = match self.storage_pool_size.unwrap_or(DEFAULT_POOL_SIZE) {
            0 => return Err(ConfigError::from("--storage-pool-size must be at least 1")),
            size => size,
        };
        Ok(StorageSettings {
            backend,
            data_dir: self.data_dir.unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR)),
            pool: PoolOptions {
                size,
                quick_ack: self.postgres_quick_ack.unwrap_or(true),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_filesystem_under_the_data_dir() {
        let settings = StorageFlags::default().validate().unwrap();
        assert_eq!(settings.backend, Storage::Filesystem);
        assert_eq!(settings.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        assert_eq!(settings.pool, PoolOptions::sized(DEFAULT_POOL_SIZE));
    }

    #[test]
    fn s3_takes_its_endpoint_and_region_and_postgres_its_pool() {
        let s3 = StorageFlags {
            storage: Some("s3://bucket/prefix".to_owned()),
            s3_endpoint: Some("http://minio:9000".to_owned()),
            s3_region: Some("eu-west-1".to_owned()),
            ..StorageFlags::default()
        };
        assert_eq!(
            s3.validate().unwrap().backend,
            Storage::S3 {
                bucket: "bucket".to_owned(),
                prefix: "prefix".to_owned(),
                endpoint: Some("http://minio:9000".to_owned()),
                region: "eu-west-1".to_owned(),
            }
        );
        let postgres = StorageFlags {
            storage: Some("postgres://u@h/db".to_owned()),
            storage_pool_size: Some(4),
            postgres_quick_ack: Some(false),
            ..StorageFlags::default()
        };
        let settings = postgres.validate().unwrap();
        assert_eq!(
            settings.pool,
            PoolOptions {
                size: 4,
                quick_ack: false
            }
        );
    }

    #[test]
    fn bad_input_names_the_flag() {
        let flags = |storage: &str, pool: Option<usize>| StorageFlags {
            storage: Some(storage.to_owned()),
            storage_pool_size: pool,
            ..StorageFlags::default()
        };
        let unknown = flags("mysql://x", None).validate().unwrap_err().to_string();
        assert!(
            unknown.starts_with("--storage: ") && unknown.contains("unknown storage"),
            "{unknown}"
        );
        let bucket = flags("s3://", None).validate().unwrap_err().to_string();
        assert!(
            bucket.contains("--storage") && bucket.contains("bucket"),
            "{bucket}"
        );
        let pool = flags("filesystem", Some(0)).validate().unwrap_err().to_string();
        assert!(pool.contains("--storage-pool-size"), "{pool}");
    }
}
