//! The storage a test fleet runs on: the filesystem store, or a fresh
//! `PostgreSQL` database per test.

use std::net::SocketAddr;
use std::process::Command;

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
}

impl Backend {
    /// Every backend the suite runs against. `PostgreSQL` is required: `make
    /// test` starts a server and sets `CORIUM_FLEET_TEST_PG_URL`.
    ///
    /// # Panics
    /// When the `PostgreSQL` URL is not set (run the suite through `make test`),
    /// or a database cannot be created on it.
    #[must_use]
    pub fn all() -> Vec<Self> {
        let base = std::env::var("CORIUM_FLEET_TEST_PG_URL").expect(
            "CORIUM_FLEET_TEST_PG_URL is not set: run the suite with `make test`, which starts PostgreSQL",
        );
        vec![Self::Filesystem, Self::postgres(&base)]
    }

    /// A fresh, empty `PostgreSQL` database on the server at `base`.
    ///
    /// # Panics
    /// When `psql` cannot run or create the database, or `base` does not end
    /// in `/DATABASE`.
    #[must_use]
    pub fn postgres(base: &str) -> Self {
        let name = format!("fleet_{}", uuid::Uuid::new_v4().simple());
        let output = Command::new("psql")
            .arg(base)
            .arg("-v")
            .arg("ON_ERROR_STOP=1")
            .arg("-qc")
            .arg(format!("CREATE DATABASE {name}"))
            .output()
            .expect("psql runs");
        assert!(
            output.status.success(),
            "create database: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let (server, _) = base.rsplit_once('/').expect("postgres URL ends in /DATABASE");
        Self::Postgres {
            url: format!("{server}/{name}"),
        }
    }

    /// The value of a process's `--storage` flag.
    pub(crate) fn flag(&self) -> String {
        match self {
            Self::Filesystem => "filesystem".to_owned(),
            Self::Postgres { url } => url.clone(),
        }
    }

    /// The `PostgreSQL` server address and the URL with its host:port
    /// replaced by `127.0.0.1:port`.
    pub(crate) fn through(&self, port: u16) -> Option<(SocketAddr, String)> {
        let Self::Postgres { url } = self else { return None };
        let (scheme_user, rest) = url.split_once('@')?;
        let (host_port, db) = rest.split_once('/')?;
        let target = host_port.parse().ok()?;
        Some((target, format!("{scheme_user}@127.0.0.1:{port}/{db}")))
    }
}
