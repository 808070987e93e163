//! Stock Corium's storage-key flag, for every process that opens an
//! encrypted database's data: the nodes, and `corium-fleet backup` /
//! `restore`. `--storage-key ID` (repeatable or comma-separated,
//! `CORIUM_STORAGE_KEY`, `storage_keys` in a `--config` file), with the IDs
//! a stock `corium transactor --storage-key` takes (`file:/path`,
//! `env:NAME`, through `corium_crypt::StaticKeyring`). Every key is read
//! once, when the flags are validated: one that cannot be read fails then,
//! naming it.

use std::sync::Arc;

use corium_crypt::{KeyId, Keyring, StaticKeyring};
use corium_fleet_common::process::ConfigError;
use serde::{Deserialize, Serialize};

/// `--storage-key`.
#[derive(clap::Args, Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StorageKeyFlags {
    /// A key-encryption key this process can resolve, for databases
    /// encrypted at rest (repeatable, or comma-separated): `file:/path` (32
    /// raw bytes or 64 hex digits) or `env:NAME`, the exact ID a database
    /// was created under, as a stock `corium --storage-key` takes them.
    /// Every key is read once, at start: one that cannot be read fails it,
    /// naming it. An encrypted database opens only where its key resolves.
    #[arg(long = "storage-key", env = "CORIUM_STORAGE_KEY", value_delimiter = ',')]
    pub storage_keys: Option<Vec<String>>,
}

/// The keys of `--storage-key`, read: Corium's keyring over them.
#[derive(Clone, Default)]
pub struct StorageKeys {
    /// The keyring (`None`: no keys, as a stock process started without
    /// `--storage-key`).
    pub keyring: Option<Arc<dyn Keyring>>,
}

impl StorageKeyFlags {
    /// Reads every key named (blank IDs are none).
    ///
    /// # Errors
    /// An ID is malformed, names an unknown scheme, or its material cannot
    /// be read or is not 256 bits: the message names the ID.
    pub fn resolve(&self) -> Result<StorageKeys, ConfigError> {
        let ids = self
            .storage_keys
            .iter()
            .flatten()
            .map(|id| id.trim())
            .filter(|id| !id.is_empty())
            .map(|id| KeyId::new(id.to_owned()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| ConfigError::from(format!("--storage-key: {error}")))?;
        if ids.is_empty() {
            return Ok(StorageKeys::default());
        }
        // Corium's errors name the key that cannot be read.
        let keyring = StaticKeyring::resolve(ids)
            .map_err(|error| ConfigError::from(format!("--storage-key: {error}")))?;
        Ok(StorageKeys {
            keyring: Some(Arc::new(keyring)),
        })
    }
}

impl StorageKeys {
    /// The key IDs held (never material).
    #[must_use]
    pub fn ids(&self) -> Vec<String> {
        self.keyring.as_ref().map_or_else(Vec::new, |keyring| {
            keyring.key_ids().iter().map(ToString::to_string).collect()
        })
    }

    /// Whether `key_id` resolves here.
    #[must_use]
    pub fn holds(&self, key_id: &str) -> bool {
        self.keyring
            .as_ref()
            .is_some_and(|keyring| keyring.key_ids().iter().any(|id| id.as_str() == key_id))
    }
}

impl std::fmt::Debug for StorageKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageKeys")
            .field("ids", &self.ids())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(ids: &[&str]) -> StorageKeyFlags {
        StorageKeyFlags {
            storage_keys: Some(ids.iter().map(|id| (*id).to_owned()).collect()),
        }
    }

    #[test]
    fn keys_resolve_and_a_bad_one_is_named() {
        assert!(StorageKeyFlags::default().resolve().unwrap().keyring.is_none());
        assert!(
            flags(&[" "]).resolve().unwrap().keyring.is_none(),
            "blank ids are no keys"
        );
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k");
        std::fs::write(&key, "ab".repeat(32)).unwrap();
        let id = format!("file:{}", key.display());
        let keys = flags(&[&id]).resolve().unwrap();
        assert_eq!(keys.ids(), std::slice::from_ref(&id));
        assert!(keys.holds(&id) && !keys.holds("file:/elsewhere"));
        let missing = format!("file:{}", dir.path().join("absent").display());
        let error = flags(&[&id, &missing]).resolve().unwrap_err().to_string();
        assert!(
            error.contains("--storage-key") && error.contains("absent"),
            "{error}"
        );
        std::fs::write(&key, "short").unwrap();
        let error = flags(&[&id]).resolve().unwrap_err().to_string();
        assert!(error.contains("32 bytes"), "{error}");
    }
}
