//! TLS material that follows its files: certificates rotated on disk (by
//! cert-manager, a Kubernetes Secret update, or by hand) are picked up
//! without a restart, on a file change (polled) or at once on SIGHUP.
//!
//! A [`Reloading`] holds the configuration built from the files and builds a
//! new one when their modification times or sizes change. New connections
//! use the new configuration; established ones keep the one they were made
//! with. A build that fails (a half-written file, a key that does not match)
//! keeps the old configuration, logs a warning and is counted, and is tried
//! again on the next change. Each [`Reloading`] also reports its leaf
//! certificate's expiry for `corium_fleet_tls_certificate_expiry_timestamp_seconds`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use crate::tls::TlsError;

/// How often the files are looked at.
pub const POLL_INTERVAL: Duration = Duration::from_secs(5);

type Build<T> = Box<dyn Fn() -> Result<T, TlsError> + Send + Sync>;

/// A configuration of type `T` built from files, rebuilt when they change.
pub struct Reloading<T> {
    /// What it is, for logs and the metric label (`server`, `client`,
    /// `upstream`, `peer`).
    name: &'static str,
    /// The leaf certificate, whose expiry is reported.
    cert: PathBuf,
    /// Every file the configuration is built from.
    files: Vec<PathBuf>,
    build: Build<T>,
    current: RwLock<Arc<T>>,
    /// `(modified, length)` of each file at the last successful build; a
    /// difference triggers a rebuild.
    stamps: Mutex<Vec<Option<(SystemTime, u64)>>>,
    /// `notAfter` of the leaf certificate, in Unix seconds (0: unreadable).
    expiry: AtomicI64,
    reloads: AtomicU64,
    failures: AtomicU64,
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len()))
}

/// `notAfter` of the first certificate in a PEM file, in Unix seconds.
#[must_use]
pub fn not_after(cert: &Path) -> Option<i64> {
    let certs = crate::tls::certificates(cert).ok()?;
    let (_, parsed) = x509_parser::parse_x509_certificate(certs.first()?).ok()?;
    Some(parsed.validity().not_after.timestamp())
}

impl<T: Send + Sync + 'static> Reloading<T> {
    /// Builds the first configuration with `build` from `files` (the leaf
    /// certificate `cert` among them).
    ///
    /// # Errors
    /// The first build fails: the process cannot start with this material.
    pub fn new(
        name: &'static str,
        cert: &Path,
        files: Vec<PathBuf>,
        build: impl Fn() -> Result<T, TlsError> + Send + Sync + 'static,
    ) -> Result<Arc<Self>, TlsError> {
        let stamps = files.iter().map(|file| stamp(file)).collect();
        let first = build()?;
        Ok(Arc::new(Self {
            name,
            cert: cert.to_owned(),
            files,
            build: Box::new(build),
            current: RwLock::new(Arc::new(first)),
            stamps: Mutex::new(stamps),
            expiry: AtomicI64::new(not_after(cert).unwrap_or(0)),
            reloads: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }))
    }

    /// The configuration new connections use. The lock is only held to
    /// swap an `Arc`, so a poisoned one still holds a whole configuration.
    #[must_use]
    pub fn current(&self) -> Arc<T> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Something [`watch`] keeps current.
pub trait Reload: Send + Sync {
    /// Rebuilds if a file changed (or always, with `force`); returns
    /// whether a new configuration is in use.
    fn check(&self, force: bool) -> bool;
    /// This material's numbers, for `/metrics`.
    fn counts(&self) -> TlsCounts;
}

impl<T: Send + Sync + 'static> Reload for Reloading<T> {
    fn check(&self, force: bool) -> bool {
        let now: Vec<_> = self.files.iter().map(|file| stamp(file)).collect();
        let mut stamps = self.stamps.lock().unwrap_or_else(PoisonError::into_inner);
        if !force && *stamps == now {
            return false;
        }
        match (self.build)() {
            Ok(built) => {
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(built);
                *stamps = now;
                let expiry = not_after(&self.cert).unwrap_or(0);
                self.expiry.store(expiry, Ordering::Relaxed);
                self.reloads.fetch_add(1, Ordering::Relaxed);
                tracing::info!(certificate = self.name, cert = %self.cert.display(), not_after = expiry, "tls material reloaded");
                true
            }
            Err(error) => {
                // Keep serving with the old material; try again when the
                // files change again (a rotation may be half-written).
                *stamps = now;
                self.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(certificate = self.name, %error, "tls material changed but cannot be used; keeping the previous one");
                false
            }
        }
    }

    fn counts(&self) -> TlsCounts {
        TlsCounts {
            certificate: self.name,
            expiry: self.expiry.load(Ordering::Relaxed),
            reloads: self.reloads.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
        }
    }
}

/// One certificate's numbers: when it expires, and its reloads.
#[derive(Clone, Copy, Debug)]
pub struct TlsCounts {
    /// The certificate's name (the `certificate` label).
    pub certificate: &'static str,
    /// When the certificate in use expires (Unix time; 0: unreadable).
    pub expiry: i64,
    /// Reloads that put new material in use.
    pub reloads: u64,
    /// Reloads whose files could not be used (the old material stayed).
    pub failures: u64,
}

/// Writes the TLS series of `set` (nothing when the process has no TLS
/// material).
pub fn collect(set: &[Arc<dyn Reload>], scrape: &mut crate::metrics::Scrape<'_>) {
    if set.is_empty() {
        return;
    }
    let counts: Vec<TlsCounts> = set.iter().map(|material| material.counts()).collect();
    scrape.gauges(
        "corium_fleet_tls_certificate_expiry_timestamp_seconds",
        "When each certificate in use expires (Unix time).",
        counts
            .iter()
            .map(|count| ([("certificate", count.certificate)], count.expiry)),
    );
    scrape.counters(
        "corium_fleet_tls_reloads_total",
        "Reloads of TLS material after its files changed, by result.",
        counts.iter().flat_map(|count| {
            [
                (
                    [("certificate", count.certificate), ("result", "ok")],
                    count.reloads,
                ),
                (
                    [("certificate", count.certificate), ("result", "failed")],
                    count.failures,
                ),
            ]
        }),
    );
}

/// Keeps `set` current until `shutdown` turns true: looks at the files every
/// [`POLL_INTERVAL`], and rebuilds everything at once on SIGHUP.
pub async fn watch(set: Vec<Arc<dyn Reload>>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    if set.is_empty() {
        return;
    }
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let force = tokio::select! {
            _ = tick.tick() => false,
            Some(()) = async {
                match hangup.as_mut() {
                    Some(signal) => signal.recv().await,
                    None => std::future::pending().await,
                }
            } => true,
            () = crate::signal::until_true(&mut shutdown) => return,
        };
        if force {
            tracing::info!("SIGHUP: reloading tls material");
        }
        for material in &set {
            material.check(force);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn rebuilds_on_change_and_keeps_the_old_material_when_the_new_cannot_be_used() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("material");
        write(&file, "one");
        let path = file.clone();
        let reloading = Reloading::new("test", &file, vec![file.clone()], move || {
            let text = std::fs::read_to_string(&path).unwrap();
            if text.starts_with("bad") {
                Err(TlsError::Verifier("bad material".to_owned()))
            } else {
                Ok(text)
            }
        })
        .unwrap();
        assert_eq!(*reloading.current(), "one");
        assert!(!reloading.check(false), "unchanged files are not rebuilt");
        write(&file, "two!");
        assert!(reloading.check(false));
        assert_eq!(*reloading.current(), "two!");
        write(&file, "bad material");
        assert!(!reloading.check(false));
        assert_eq!(
            *reloading.current(),
            "two!",
            "a failed build keeps the old material"
        );
        let material: Arc<dyn Reload> = reloading.clone();
        let set = vec![material];
        let out = crate::metrics::exposition(&crate::metrics::registry(move |scrape| collect(&set, scrape)));
        assert!(
            out.contains("corium_fleet_tls_reloads_total{certificate=\"test\",result=\"ok\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("corium_fleet_tls_reloads_total{certificate=\"test\",result=\"failed\"} 1"),
            "{out}"
        );
        // Forced (SIGHUP) rebuilds even without a change.
        write(&file, "three");
        assert!(reloading.check(true));
        assert_eq!(*reloading.current(), "three");
    }
}
