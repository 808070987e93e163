//! Stock Corium's key flag for the commands that read or write a database's
//! data themselves (`backup`, `restore`): `--storage-key ID`, repeatable or
//! comma-separated, `CORIUM_STORAGE_KEY`, with the IDs a stock `corium
//! backup --storage-key` takes (`file:/path`, `env:NAME`). Resolved before
//! anything is read, so a key that cannot be read fails the command naming
//! it.

use std::sync::Arc;

use anyhow::Context as _;
use corium_crypt::{KeyId, Keyring, StaticKeyring};

/// `--storage-key` flags.
#[derive(clap::Args, Clone, Default)]
pub(crate) struct StorageKeyArgs {
    /// A key an encrypted database is encrypted under (repeatable, or
    /// comma-separated): `file:/path` (32 raw bytes or 64 hex digits) or
    /// `env:NAME`, the exact ID the database was created with. Unencrypted
    /// databases need none.
    #[arg(long = "storage-key", env = "CORIUM_STORAGE_KEY", value_delimiter = ',')]
    storage_keys: Vec<String>,
}

impl StorageKeyArgs {
    /// The keyring over every key named (`None`: none named).
    ///
    /// # Errors
    /// An ID is malformed, names an unknown scheme, or its material cannot
    /// be read or is not 256 bits: the message names the ID.
    pub(crate) fn keyring(&self) -> anyhow::Result<Option<Arc<dyn Keyring>>> {
        let ids: Vec<&str> = self
            .storage_keys
            .iter()
            .map(|id| id.trim())
            .filter(|id| !id.is_empty())
            .collect();
        if ids.is_empty() {
            return Ok(None);
        }
        let ids = ids
            .into_iter()
            .map(|id| KeyId::new(id.to_owned()))
            .collect::<Result<Vec<_>, _>>()
            .context("--storage-key")?;
        let keyring = StaticKeyring::resolve(ids).context("--storage-key")?;
        Ok(Some(Arc::new(keyring)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(ids: &[&str]) -> StorageKeyArgs {
        StorageKeyArgs {
            storage_keys: ids.iter().map(|id| (*id).to_owned()).collect(),
        }
    }

    #[test]
    fn keys_resolve_and_a_bad_one_is_named() {
        assert!(args(&[]).keyring().unwrap().is_none());
        assert!(args(&[" "]).keyring().unwrap().is_none(), "blank ids are no keys");
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k");
        std::fs::write(&key, "ab".repeat(32)).unwrap();
        let id = format!("file:{}", key.display());
        let keyring = args(&[&id]).keyring().unwrap().expect("a keyring");
        assert_eq!(keyring.key_ids().len(), 1);
        let missing = format!("file:{}", dir.path().join("absent").display());
        let error = format!("{:#}", args(&[&id, &missing]).keyring().err().expect("refused"));
        assert!(error.contains("absent"), "{error}");
        std::fs::write(&key, "short").unwrap();
        let error = format!("{:#}", args(&[&id]).keyring().err().expect("refused"));
        assert!(error.contains("32 bytes"), "{error}");
    }
}
