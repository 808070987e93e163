//! The storage a test fleet runs on: the filesystem store, a fresh
//! `PostgreSQL` database per test, or a fresh prefix per test in a bucket of
//! a real S3 server (`SeaweedFS`, which `make test` starts).

use std::net::SocketAddr;
use std::process::Command;

/// `psql URL -tAc COMMAND` (the `psql` that `make test` installs): its
/// output, trimmed.
///
/// # Panics
/// When `psql` cannot run or the command fails.
#[must_use]
pub fn psql(url: &str, command: &str) -> String {
    let output = Command::new("psql")
        .args([url, "-tAc", command])
        .output()
        .expect("psql runs (make test installs PostgreSQL)");
    assert!(
        output.status.success(),
        "psql {command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// The variable naming the S3 endpoint the suite runs on
/// (`http://127.0.0.1:PORT`); `make test` sets it from
/// `scripts/seaweedfs.sh start`.
pub const S3_ENDPOINT_VAR: &str = "CORIUM_FLEET_TEST_S3_ENDPOINT";
/// Set to `1` to run the suite without S3, knowingly (each test that would
/// have used it says so on its standard error).
pub const SKIP_S3_VAR: &str = "CORIUM_FLEET_TEST_SKIP_S3";

/// The bucket `scripts/seaweedfs.sh` creates; `CORIUM_FLEET_TEST_S3_BUCKET`
/// names another.
pub const S3_BUCKET: &str = "fleet";

/// Storage a test fleet runs on.
#[derive(Clone, Debug)]
pub enum Backend {
    /// Corium's filesystem store in the fleet's temporary directory.
    Filesystem,
    /// A `PostgreSQL` database of its own (see [`Backend::postgres`]).
    Postgres {
        /// The database's URL, `postgres://user@host:port/name`.
        url: String,
    },
    /// A key prefix of its own in a bucket of an S3-compatible server with
    /// conditional writes (see [`Backend::s3`]).
    S3 {
        /// The server, `http://host:port` (`--s3-endpoint`).
        endpoint: String,
        /// The bucket (it exists).
        bucket: String,
        /// The prefix no other test uses.
        prefix: String,
    },
}

impl Backend {
    /// Every backend the suite runs against: the filesystem, `PostgreSQL`
    /// (required: `make test` starts a server and sets
    /// `CORIUM_FLEET_TEST_PG_URL`) and, when `CORIUM_FLEET_TEST_S3_ENDPOINT`
    /// is set (`make test` sets it), S3 — in that order.
    ///
    /// # Panics
    /// When the `PostgreSQL` URL or the S3 endpoint is not set (run the suite
    /// through `make test`; `CORIUM_FLEET_TEST_SKIP_S3=1` leaves S3 out, with
    /// a warning on every test that would have used it), or a database
    /// cannot be created on `PostgreSQL`.
    #[must_use]
    pub fn all() -> Vec<Self> {
        let base = std::env::var("CORIUM_FLEET_TEST_PG_URL").expect(
            "CORIUM_FLEET_TEST_PG_URL is not set: run the suite with `make test`, which starts PostgreSQL",
        );
        let mut all = vec![Self::Filesystem, Self::postgres(&base)];
        if let Ok(endpoint) = std::env::var(S3_ENDPOINT_VAR) {
            all.push(Self::s3(&endpoint));
        } else if std::env::var(SKIP_S3_VAR).is_ok_and(|value| value == "1") {
            // Leaving S3 out is a choice made out loud, never a default: a
            // suite that passes without it has not tested it.
            eprintln!("WARNING: {SKIP_S3_VAR}=1: this test runs WITHOUT S3 (filesystem and PostgreSQL only)");
        } else {
            panic!(
                "{S3_ENDPOINT_VAR} is not set: run the suite with `make test`, which starts SeaweedFS \
                 (S3); to leave S3 out knowingly, set {SKIP_S3_VAR}=1"
            );
        }
        all
    }

    /// A fresh, empty `PostgreSQL` database on the server at `base`.
    ///
    /// # Panics
    /// When `psql` cannot run or create the database, or `base` does not end
    /// in `/DATABASE`.
    #[must_use]
    pub fn postgres(base: &str) -> Self {
        let name = format!("fleet_{}", uuid::Uuid::new_v4().simple());
        // Its output is the command's tag.
        let _ = psql(base, &format!("CREATE DATABASE {name}"));
        let (server, _) = base.rsplit_once('/').expect("postgres URL ends in /DATABASE");
        Self::Postgres {
            url: format!("{server}/{name}"),
        }
    }

    /// A fresh, empty prefix (`t-<uuid>`) in the suite's bucket on the S3
    /// server at `endpoint`: no other test sees its roots.
    #[must_use]
    pub fn s3(endpoint: &str) -> Self {
        Self::S3 {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            bucket: std::env::var("CORIUM_FLEET_TEST_S3_BUCKET").unwrap_or_else(|_| S3_BUCKET.to_owned()),
            prefix: format!("t-{}", uuid::Uuid::new_v4().simple()),
        }
    }

    /// A fresh prefix on the S3 server `make test` started.
    ///
    /// # Panics
    /// When `CORIUM_FLEET_TEST_S3_ENDPOINT` is not set.
    #[must_use]
    pub fn s3_from_env() -> Self {
        let endpoint = std::env::var(S3_ENDPOINT_VAR).unwrap_or_else(|_| {
            panic!("{S3_ENDPOINT_VAR} is not set: run the suite with `make test`, which starts SeaweedFS (scripts/seaweedfs.sh)")
        });
        Self::s3(&endpoint)
    }

    /// The value of a process's `--storage` flag.
    pub(crate) fn flag(&self) -> String {
        match self {
            Self::Filesystem => "filesystem".to_owned(),
            Self::Postgres { url } => url.clone(),
            Self::S3 { bucket, prefix, .. } => format!("s3://{bucket}/{prefix}"),
        }
    }

    /// `--storage` and the flags besides it a process needs to reach this
    /// storage, with `data_dir` for the filesystem's (as a node gets them).
    #[must_use]
    pub fn storage_args(&self, data_dir: &std::path::Path) -> Vec<String> {
        let mut args = vec!["--storage".to_owned(), self.flag()];
        if matches!(self, Self::Filesystem) {
            args.extend(["--data-dir".to_owned(), data_dir.display().to_string()]);
        }
        for (flag, value) in self.flags() {
            args.extend([flag.to_owned(), value]);
        }
        args
    }

    /// The stock transactor's read-only discovery flags for this store,
    /// which a node needs before `corium backup` can read it (`None` for the
    /// filesystem, which needs none): the suite's own URL on `PostgreSQL` (a
    /// real deployment gives a read-only role), the nodes' own keys on S3
    /// (the suite's server checks none).
    #[must_use]
    pub fn read_only_flags(&self) -> Option<Vec<String>> {
        match self {
            Self::Filesystem => None,
            Self::Postgres { url } => Some(vec!["--postgres-read-only-url".into(), url.clone()]),
            Self::S3 { .. } => {
                let key = |name: &str| std::env::var(name).unwrap_or_else(|_| "fleet-test".to_owned());
                Some(vec![
                    "--s3-read-only-access-key-id".into(),
                    key("AWS_ACCESS_KEY_ID"),
                    "--s3-read-only-secret-access-key".into(),
                    key("AWS_SECRET_ACCESS_KEY"),
                ])
            }
        }
    }

    /// The environment a process needs to reach this storage (S3's keys).
    #[must_use]
    pub fn process_env(&self) -> Vec<(String, String)> {
        self.env()
    }

    /// The flags besides `--storage` a process needs to reach this storage.
    pub(crate) fn flags(&self) -> Vec<(&'static str, String)> {
        match self {
            Self::Filesystem | Self::Postgres { .. } => Vec::new(),
            Self::S3 { endpoint, .. } => vec![("--s3-endpoint", endpoint.clone())],
        }
    }

    /// The environment a process needs to reach this storage: S3
    /// credentials (the test process's `AWS_*` keys, else any: the suite's
    /// server checks none), and no instance-metadata lookups.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        match self {
            Self::Filesystem | Self::Postgres { .. } => Vec::new(),
            Self::S3 { .. } => {
                let key = |name: &str| std::env::var(name).unwrap_or_else(|_| "fleet-test".to_owned());
                vec![
                    ("AWS_ACCESS_KEY_ID".to_owned(), key("AWS_ACCESS_KEY_ID")),
                    ("AWS_SECRET_ACCESS_KEY".to_owned(), key("AWS_SECRET_ACCESS_KEY")),
                    ("AWS_EC2_METADATA_DISABLED".to_owned(), "true".to_owned()),
                ]
            }
        }
    }

    /// The storage server's address, and this backend reached through
    /// `127.0.0.1:port` instead (a [`crate::proxy::Partition`] there):
    /// `PostgreSQL` and S3, whose servers are on the network.
    pub(crate) fn through(&self, port: u16) -> Option<(SocketAddr, Self)> {
        match self {
            Self::Filesystem => None,
            Self::Postgres { url } => {
                let (scheme_user, rest) = url.split_once('@')?;
                let (host_port, db) = rest.split_once('/')?;
                let target = host_port.parse().ok()?;
                Some((
                    target,
                    Self::Postgres {
                        url: format!("{scheme_user}@127.0.0.1:{port}/{db}"),
                    },
                ))
            }
            Self::S3 {
                endpoint,
                bucket,
                prefix,
            } => {
                let (scheme, host_port) = endpoint.split_once("://")?;
                let target = host_port.parse().ok()?;
                Some((
                    target,
                    Self::S3 {
                        endpoint: format!("{scheme}://127.0.0.1:{port}"),
                        bucket: bucket.clone(),
                        prefix: prefix.clone(),
                    },
                ))
            }
        }
    }
}
