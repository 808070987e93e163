//! `corium-fleet certs`: a development CA and the certificates a fleet's
//! mTLS needs — one per transactor node (server and client auth) and one
//! per ingress (client auth to transactors, server auth for clients).
//!
//! Files in the output directory: `ca.pem` (the fleet CA; trust it),
//! `ca.key`, and `NAME.pem` / `NAME.key` per node and ingress. Every leaf
//! names itself by its common name and DNS names (`NAME`, `localhost`) and by
//! `127.0.0.1`, so a loopback fleet verifies. Development use only: the CA
//! key sits next to the certificates.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, SanType,
};

/// `corium-fleet certs` flags: where to write, and for which names.
#[derive(clap::Args, Clone)]
pub(crate) struct CertsArgs {
    /// Directory to write the CA and certificates into.
    #[arg(long, default_value = ".corium-fleet/certs")]
    pub(crate) out: PathBuf,
    /// Transactor node names (repeatable).
    #[arg(long = "node", default_values = ["node-1", "node-2", "node-3"])]
    pub(crate) nodes: Vec<String>,
    /// Ingress names (repeatable); transactors trust `corium-principal` only
    /// from a peer whose certificate carries one of these names.
    #[arg(long = "ingress", default_values = ["corium-fleet-ingress"])]
    pub(crate) ingresses: Vec<String>,
    /// Replace certificates already in the directory.
    #[arg(long)]
    pub(crate) force: bool,
}

fn write(dir: &Path, name: &str, contents: &str) -> anyhow::Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, contents).with_context(|| format!("cannot write {}", path.display()))
}

fn leaf(name: &str, issuer: &Issuer<'_, KeyPair>, dir: &Path) -> anyhow::Result<()> {
    let mut params = CertificateParams::new(vec![name.to_owned(), "localhost".to_owned()])
        .with_context(|| format!("invalid certificate name {name:?}"))?;
    params
        .subject_alt_names
        .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    write(dir, &format!("{name}.pem"), &cert.pem())?;
    write(dir, &format!("{name}.key"), &key.serialize_pem())
}

/// Whether `dir` already holds a complete set for these names.
#[must_use]
pub(crate) fn complete(args: &CertsArgs) -> bool {
    let names = args.nodes.iter().chain(&args.ingresses);
    args.out.join("ca.pem").exists()
        && names.clone().all(|name| {
            args.out.join(format!("{name}.pem")).exists() && args.out.join(format!("{name}.key")).exists()
        })
}

/// Generates the CA and every certificate.
///
/// # Errors
/// Files exist (without `--force`), or cannot be written.
pub(crate) fn generate(args: &CertsArgs) -> anyhow::Result<()> {
    if args.out.join("ca.pem").exists() && !args.force {
        bail!(
            "{} already holds a fleet CA; pass --force to replace every certificate in it",
            args.out.display()
        );
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "Corium Fleet development CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    write(&args.out, "ca.pem", &ca_cert.pem())?;
    write(&args.out, "ca.key", &ca_key.serialize_pem())?;
    let issuer = Issuer::new(ca, ca_key);
    for name in args.nodes.iter().chain(&args.ingresses) {
        leaf(name, &issuer, &args.out)?;
    }
    Ok(())
}

/// Runs `corium-fleet certs`: generates, then says what was written.
///
/// # Errors
/// As [`generate`].
pub(crate) fn run(args: &CertsArgs) -> anyhow::Result<()> {
    generate(args)?;
    println!(
        "corium-fleet: wrote a development CA and certificates for {} node(s) and {} ingress(es) to {}",
        args.nodes.len(),
        args.ingresses.len(),
        args.out.display()
    );
    Ok(())
}
