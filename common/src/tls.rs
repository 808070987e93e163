//! The fleet's mTLS: loading PEM files into rustls configurations, and
//! reading a peer's identity from its certificate.
//!
//! Every internal hop is mutually authenticated against one fleet CA.
//! A certificate *names an ingress* when its subject common name or one of
//! its DNS names is in the transactor's ingress-identity list; only such a
//! peer may carry `corium-principal`.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Why TLS material could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file, as displayed.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file meant to hold certificates holds none.
    #[error("{path} holds no PEM certificate")]
    NoCertificate {
        /// The file, as displayed.
        path: String,
    },
    /// A file meant to hold a private key holds none that rustls can read.
    #[error("{path} holds no PEM private key")]
    NoKey {
        /// The file, as displayed.
        path: String,
    },
    /// rustls refused the material (a bad certificate, a key that does not
    /// match, an unusable protocol set).
    #[error("invalid TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    /// The client-certificate verifier could not be built from the CA.
    #[error("invalid client-verifier configuration: {0}")]
    Verifier(String),
}

/// PEM bytes of a file.
///
/// # Errors
/// The file cannot be read.
pub fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Every certificate in a PEM file.
///
/// # Errors
/// Unreadable, or no certificate in it.
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.display().to_string(),
        });
    }
    Ok(certs)
}

/// The private key in a PEM file (PKCS#8, PKCS#1 or SEC1).
///
/// # Errors
/// Unreadable, or no key in it.
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|_| TlsError::NoKey {
        path: path.display().to_string(),
    })
}

/// Makes `ring` the process's rustls provider. The dependency tree enables
/// both `ring` and `aws-lc-rs` (Corium's S3 client brings the latter), and
/// libraries that build TLS from defaults (tonic) panic unless exactly one
/// is installed. Idempotent.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The `ring` provider, for configurations built here.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in `ca`, as trust roots.
pub(crate) fn roots(ca: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(ca)? {
        roots.add(cert)?;
    }
    Ok(roots)
}

/// A client configuration presenting `cert`/`key` and trusting only `ca`
/// (ALPN is left to the HTTP connector that uses it).
///
/// # Errors
/// Unreadable or invalid material.
pub fn client_config(ca: &Path, cert: &Path, key: &Path) -> Result<rustls::ClientConfig, TlsError> {
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots(ca)?)
        .with_client_auth_cert(certificates(cert)?, private_key(key)?)?)
}

/// A server configuration for `cert`/`key`, speaking HTTP/2; with
/// `client_ca`, every client must present a certificate signed by it.
///
/// # Errors
/// Unreadable or invalid material.
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<rustls::ServerConfig, TlsError> {
    server_config_for(cert, key, client_ca.map(|ca| (ca, true)))
}

/// A server configuration for `cert`/`key`, speaking HTTP/2, verifying
/// client certificates against `clients`' CA: every client must present
/// one when its flag is true; otherwise a client may present one (and a
/// certificate it presents must verify) or none.
///
/// # Errors
/// Unreadable or invalid material.
pub fn server_config_for(
    cert: &Path,
    key: &Path,
    clients: Option<(&Path, bool)>,
) -> Result<rustls::ServerConfig, TlsError> {
    let builder =
        rustls::ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let builder = match clients {
        Some((ca, required)) => {
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider());
            let verifier = if required {
                verifier
            } else {
                verifier.allow_unauthenticated()
            };
            let verifier = verifier
                .build()
                .map_err(|error| TlsError::Verifier(error.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certificates(cert)?, private_key(key)?)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// The names a certificate identifies itself by: its subject common names
/// and its DNS subject-alternative names.
#[must_use]
pub fn names(cert: &[u8]) -> Vec<String> {
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert) else {
        return Vec::new();
    };
    let mut names: Vec<String> = parsed
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_owned))
        .collect();
    if let Ok(Some(san)) = parsed.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                names.push((*dns).to_owned());
            }
        }
    }
    names
}

/// Whether a peer certificate names one of `identities`.
#[must_use]
pub fn names_any(cert: &[u8], identities: &[String]) -> bool {
    names(cert)
        .iter()
        .any(|name| identities.iter().any(|identity| identity == name))
}
