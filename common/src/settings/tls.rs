//! TLS as the binaries' flags name it: the certificate a process serves
//! with (`--tls-cert`, `--tls-key`) and the CA its clients' certificates are
//! checked against (`--tls-client-ca`), and the named pieces both binaries
//! resolve their TLS flags to.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::process::ConfigError;

/// The files of one TLS identity.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Identity {
    /// PEM certificate (chain).
    pub cert: PathBuf,
    /// PEM private key of `cert`.
    pub key: PathBuf,
}

/// The fleet's internal mutual TLS as one process takes part in it: the
/// identity it presents (a node also serves with it), and the fleet CA the
/// other side's certificate must chain to. A node's `--tls-*`, the
/// ingress's `--upstream-*`.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct FleetTls {
    /// This process's certificate and key.
    pub identity: Identity,
    /// The fleet CA.
    pub ca: PathBuf,
}

impl FleetTls {
    /// The three files, all or none (`None`: cleartext).
    ///
    /// # Errors
    /// `refusal` when some but not all are given.
    pub fn all_or_none(
        ca: Option<PathBuf>,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
        refusal: &str,
    ) -> Result<Option<Self>, ConfigError> {
        match (ca, cert, key) {
            (None, None, None) => Ok(None),
            (Some(ca), Some(cert), Some(key)) => Ok(Some(Self {
                identity: Identity { cert, key },
                ca,
            })),
            _ => Err(ConfigError::from(refusal)),
        }
    }
}

/// The TLS a process serves its clients with: its certificate and key,
/// and the CA client certificates are checked against.
#[derive(clap::Args, Clone, Debug, Default, Serialize, Deserialize)]
#[command(next_help_heading = "TLS")]
#[serde(default)]
pub struct ServerTlsFlags {
    /// PEM certificate this process serves TLS with: a node's gRPC port
    /// (mutual TLS only, with --tls-key and --tls-client-ca), the ingress's
    /// --tls-listen port (with --tls-key).
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// PEM CA that client certificates are checked against: on a node, the
    /// fleet CA every caller must present a certificate of; on the ingress,
    /// the CA of the client certificates --tls-listen accepts (a client that
    /// presents one and no bearer token is the principal
    /// `client-cert/<certificate name>`).
    #[arg(long)]
    pub tls_client_ca: Option<PathBuf>,
}

impl ServerTlsFlags {
    /// A node's: the three flags make its internal routes mutual TLS, all
    /// or none (`None`: cleartext).
    ///
    /// # Errors
    /// Some but not all of the three, naming them.
    pub fn mutual(self) -> Result<Option<FleetTls>, ConfigError> {
        FleetTls::all_or_none(
            self.tls_client_ca,
            self.tls_cert,
            self.tls_key,
            "--tls-cert, --tls-key and --tls-client-ca go together: internal routes are mutual TLS",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(cert: bool, key: bool, ca: bool) -> ServerTlsFlags {
        let path = |given: bool, name: &str| given.then(|| PathBuf::from(name));
        ServerTlsFlags {
            tls_cert: path(cert, "cert.pem"),
            tls_key: path(key, "key.pem"),
            tls_client_ca: path(ca, "ca.pem"),
        }
    }

    #[test]
    fn mutual_tls_is_all_three_files_or_none() {
        assert_eq!(flags(false, false, false).mutual().unwrap(), None);
        let tls = flags(true, true, true).mutual().unwrap().unwrap();
        assert_eq!(tls.identity.cert, PathBuf::from("cert.pem"));
        assert_eq!(tls.identity.key, PathBuf::from("key.pem"));
        assert_eq!(tls.ca, PathBuf::from("ca.pem"));
        for partial in [
            flags(true, true, false),
            flags(false, false, true),
            flags(true, false, true),
        ] {
            let error = partial.mutual().unwrap_err().to_string();
            assert!(
                error.contains("--tls-cert, --tls-key and --tls-client-ca go together"),
                "{error}"
            );
        }
    }
}
