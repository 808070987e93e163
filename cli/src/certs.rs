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
    #[arg(long, conflicts_with = "renew")]
    pub(crate) force: bool,
    /// Keep the CA in the directory and issue every node and ingress a new
    /// certificate and key (a rotation: running processes pick them up
    /// within seconds, or at once on SIGHUP).
    #[arg(long)]
    pub(crate) renew: bool,
}

/// Writes `contents` to `dir/name` atomically (a temporary file renamed
/// over it), so a process reloading the file never reads half of it.
fn write(dir: &Path, name: &str, contents: &str) -> anyhow::Result<()> {
    let path = dir.join(name);
    let temporary = dir.join(format!(".{name}.tmp"));
    std::fs::write(&temporary, contents).with_context(|| format!("cannot write {}", temporary.display()))?;
    std::fs::rename(&temporary, &path).with_context(|| format!("cannot replace {}", path.display()))
}

/// How long a development leaf certificate is valid.
const LEAF_VALIDITY_DAYS: i64 = 365;

fn leaf(name: &str, issuer: &Issuer<'_, KeyPair>, dir: &Path) -> anyhow::Result<()> {
    let mut params = CertificateParams::new(vec![name.to_owned(), "localhost".to_owned()])
        .with_context(|| format!("invalid certificate name {name:?}"))?;
    params
        .subject_alt_names
        .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    // A real validity (a year from now), so expiry can be watched and a
    // renewal is visible in `corium_fleet_tls_certificate_expiry_timestamp_seconds`.
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(LEAF_VALIDITY_DAYS);
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
    if args.renew {
        return renew(args);
    }
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

/// Re-issues every leaf under the CA already in `args.out`. The key of each
/// leaf is written before its certificate, so a reload between the two sees
/// a key that does not match, refuses it and keeps the old pair until the
/// certificate follows.
///
/// # Errors
/// No CA in the directory, or files that cannot be read or written.
fn renew(args: &CertsArgs) -> anyhow::Result<()> {
    let read = |name: &str| {
        let path = args.out.join(name);
        std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {} (renew needs the CA)", path.display()))
    };
    let ca_key = KeyPair::from_pem(&read("ca.key")?).context("ca.key is not a PEM private key")?;
    let issuer =
        Issuer::from_ca_cert_pem(&read("ca.pem")?, ca_key).context("ca.pem is not a PEM certificate")?;
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
    if args.renew {
        println!(
            "corium-fleet: issued new certificates for {} node(s) and {} ingress(es) under the CA in {}",
            args.nodes.len(),
            args.ingresses.len(),
            args.out.display()
        );
        return Ok(());
    }
    println!(
        "corium-fleet: wrote a development CA and certificates for {} node(s) and {} ingress(es) to {}",
        args.nodes.len(),
        args.ingresses.len(),
        args.out.display()
    );
    Ok(())
}
