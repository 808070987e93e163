//! One flag model for both binaries: the flag groups they share, each
//! declared once (a `clap::Args` that is also a piece of the `--config`
//! file, with its own validation into a named struct), and the one merge of
//! a `--config` TOML file under the flags.
//!
//! A binary's `Args` flattens the groups (`#[command(flatten)]
//! #[serde(flatten)]`), so a group's flags keep their names on the command
//! line and their `snake_case` keys in the file. Every setting is an
//! `Option` in `Args` (`None`: not given), its default applied at
//! validation, so "not given" survives the merge.
//!
//! Layout:
//! - this file — [`merge`]: flags (and the environment, which clap reads
//!   as flags) over the file, unknown and mistyped keys refused by name;
//! - [`membership`](MembershipFlags) — `--member`, `--replicas`,
//!   `--placement-map`, `--verify-node-identity` into a [`Membership`];
//! - [`logging`](LogFlags) — `--log`, `--log-format`;
//! - [`request_size`](RequestSizeFlags) — `--max-request-bytes`, the one
//!   request-size limit of both tiers;
//! - [`tls`](ServerTlsFlags) — `--tls-cert`, `--tls-key`, `--tls-client-ca`,
//!   and the named TLS pieces both binaries resolve to ([`Identity`],
//!   [`FleetTls`]).
//!
//! The storage group lives with the storage it resolves to
//! (`corium_fleet_store::flags`); stock Corium's authentication flags in
//! [`auth`](crate::auth) (never read from the file).

mod logging;
mod membership;
mod request_size;
mod tls;

pub use logging::LogFlags;
pub use membership::{Membership, MembershipFlags};
pub use request_size::{
    DEFAULT_MAX_REQUEST_BYTES, GRPC_FRAME_HEADER, MAX_MAX_REQUEST_BYTES, MIN_MAX_REQUEST_BYTES,
    RequestSizeFlags,
};
pub use tls::{FleetTls, Identity, ServerTlsFlags};

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::process::ConfigError;

/// The settings `flags` leave out (`None`), taken from the TOML file at
/// `path`: the flags (and the environment variables clap read into them)
/// win, a list flag given on the command line replaces the file's list.
///
/// The file's keys are `T`'s serialized field names (a flattened group's
/// fields among them); fields marked `#[serde(skip)]` (secrets, `--config`
/// itself) are never read from it and come back as their default, for the
/// caller to carry over from `flags`.
///
/// # Errors
/// The file cannot be read or is not TOML; a key that is not a setting
/// (naming it, and the setting it is likely a misspelling of); a value of
/// the wrong type (naming its key).
pub fn merge<T>(flags: &T, path: &Path) -> Result<T, ConfigError>
where
    T: Serialize + DeserializeOwned + Default,
{
    let file = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|error| ConfigError::from(format!("cannot read config file {file}: {error}")))?;
    let table: toml::Table =
        toml::from_str(&text).map_err(|error| ConfigError::from(format!("config file {file}: {error}")))?;
    let known = object(&T::default())?;
    let mut settings = Map::new();
    for (key, value) in table {
        if !known.contains_key(&key) {
            let hint =
                likely(&known, &key).map_or_else(String::new, |like| format!(" (did you mean `{like}`?)"));
            return Err(ConfigError::from(format!(
                "config file {file}: unknown setting `{key}`{hint}"
            )));
        }
        let value = serde_json::to_value(value)
            .map_err(|error| ConfigError::from(format!("config file {file}: `{key}`: {error}")))?;
        if value.is_null() {
            // TOML has no null: this was `nan` or `inf`, which no setting takes.
            return Err(ConfigError::from(format!(
                "config file {file}: `{key}`: not a finite number"
            )));
        }
        // Each key alone first, so a mistyped value is named by its key
        // (through `#[serde(flatten)]`, serde's own message names none).
        let alone = Map::from_iter([(key.clone(), value.clone())]);
        T::deserialize(Value::Object(alone))
            .map_err(|error| ConfigError::from(format!("config file {file}: `{key}`: {error}")))?;
        settings.insert(key, value);
    }
    for (key, value) in object(flags)? {
        if !value.is_null() {
            settings.insert(key, value);
        }
    }
    T::deserialize(Value::Object(settings))
        .map_err(|error| ConfigError::from(format!("config file {file}: {error}")))
}

/// `value`'s fields as a JSON object.
fn object(value: &impl Serialize) -> Result<Map<String, Value>, ConfigError> {
    match serde_json::to_value(value) {
        Ok(Value::Object(fields)) => Ok(fields),
        Ok(other) => Err(ConfigError::from(format!("settings are not a table: {other}"))),
        Err(error) => Err(ConfigError::from(format!("settings: {error}"))),
    }
}

/// The known key `key` likely misspells: the same letters but for case,
/// `-` and `_` (`node-id`, `nodeid`, `Node_Id` for `node_id`).
fn likely<'a>(known: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    let letters = |text: &str| {
        text.chars()
            .filter(|c| *c != '-' && *c != '_')
            .flat_map(char::to_lowercase)
            .collect::<String>()
    };
    let wanted = letters(key);
    known
        .keys()
        .find(|candidate| letters(candidate) == wanted)
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use clap::Parser;
    use serde::Deserialize;

    use super::*;

    /// A binary's flags in small: one of its own, two shared groups, a
    /// secret and `--config`, which the file never sets.
    #[derive(Debug, Default, Parser, Serialize, Deserialize)]
    #[serde(default)]
    struct Flags {
        #[arg(long)]
        #[serde(skip)]
        config: Option<PathBuf>,
        #[arg(long)]
        lease_ttl_ms: Option<u64>,
        #[arg(long)]
        ratio: Option<f64>,
        #[command(flatten)]
        #[serde(flatten)]
        membership: MembershipFlags,
        #[command(flatten)]
        #[serde(flatten)]
        logging: LogFlags,
        #[arg(long)]
        #[serde(skip)]
        secret: Option<String>,
    }

    /// `text` as a config file, under `flags`.
    fn merged(text: &str, flags: &[&str]) -> Result<Flags, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("settings.toml");
        std::fs::write(&path, text).unwrap();
        let flags = Flags::try_parse_from(std::iter::once("test").chain(flags.iter().copied())).unwrap();
        merge(&flags, &path).map_err(|error| error.to_string())
    }

    #[test]
    fn the_file_fills_what_the_flags_leave_out() {
        let merged = merged(
            "lease_ttl_ms = 2000\nreplicas = 3\nlog_format = \"json\"\nratio = 1\n",
            &["--log", "debug"],
        )
        .unwrap();
        assert_eq!(merged.lease_ttl_ms, Some(2000));
        assert_eq!(merged.membership.replicas, Some(3));
        assert_eq!(merged.logging.log.as_deref(), Some("debug"));
        assert_eq!(merged.logging.log_format, Some(crate::telemetry::LogFormat::Json));
        // A whole number where a fraction is expected is the fraction.
        assert_eq!(merged.ratio, Some(1.0));
    }

    #[test]
    fn a_flag_wins_over_the_file() {
        let merged = merged("lease_ttl_ms = 2000\nreplicas = 3\n", &["--lease-ttl-ms", "900"]).unwrap();
        assert_eq!(merged.lease_ttl_ms, Some(900));
        assert_eq!(merged.membership.replicas, Some(3));
    }

    #[test]
    fn a_list_flag_replaces_the_files_list() {
        let file = "members = [\"a=http://a\", \"b=http://b\"]\n";
        let merged_flag = merged(file, &["--member", "c=http://c"]).unwrap();
        assert_eq!(
            merged_flag.membership.members,
            Some(vec!["c=http://c".to_owned()])
        );
        let from_file = merged(file, &[]).unwrap();
        assert_eq!(from_file.membership.members.map(|members| members.len()), Some(2));
    }

    #[test]
    fn an_unknown_key_is_refused_by_name() {
        let error = merged("lease_tll_ms = 2000\n", &[]).unwrap_err();
        assert!(error.contains("`lease_tll_ms`"), "{error}");
        assert!(error.contains("settings.toml"), "{error}");
        let error = merged("lease-ttl-ms = 2000\n", &[]).unwrap_err();
        assert!(error.contains("did you mean `lease_ttl_ms`"), "{error}");
        // What never comes from the file is not a key of it.
        for key in ["secret = \"x\"\n", "config = \"other.toml\"\n"] {
            assert!(merged(key, &[]).unwrap_err().contains("unknown setting"), "{key}");
        }
    }

    #[test]
    fn a_mistyped_value_is_refused_by_its_key() {
        for (text, key) in [
            ("lease_ttl_ms = \"soon\"\n", "`lease_ttl_ms`"),
            ("replicas = -1\n", "`replicas`"),
            ("log_format = \"xml\"\n", "`log_format`"),
            ("members = \"a=http://a\"\n", "`members`"),
            ("ratio = nan\n", "`ratio`"),
        ] {
            let error = merged(text, &[]).unwrap_err();
            assert!(error.contains(key), "{text}: {error}");
        }
    }

    #[test]
    fn an_unreadable_or_malformed_file_says_which() {
        let flags = Flags::default();
        let error = merge(&flags, Path::new("/nonexistent/settings.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("cannot read config file /nonexistent/settings.toml"),
            "{error}"
        );
        assert!(merged("replicas = \n", &[]).unwrap_err().contains("config file"));
    }
}
