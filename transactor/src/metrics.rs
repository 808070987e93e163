//! The node's Prometheus metrics, rendered as text on the admin port.
//!
//! A handful of atomics, no registry: every series is listed in
//! [`Metrics::render`], which is the whole exposition.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the duration histogram buckets.
const BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

/// A fixed-bucket duration histogram.
#[derive(Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        for (bound, count) in BUCKETS.iter().zip(&self.counts) {
            if seconds <= *bound {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(
            u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (bound, count) in BUCKETS.iter().zip(&self.counts) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{bound}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        #[allow(clippy::cast_precision_loss)]
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

/// Counters and histograms of one node.
#[derive(Default)]
pub struct Metrics {
    /// Gauges refreshed by each standby-watcher pass.
    pub standby: AtomicU64,
    pub cold: AtomicU64,
    pub lease_renewals: AtomicU64,
    pub lease_renewal_failures: AtomicU64,
    pub not_owner: AtomicU64,
    pub activations: AtomicU64,
    pub activation_failures: AtomicU64,
    pub takeovers: AtomicU64,
    pub depositions: AtomicU64,
    pub evictions: AtomicU64,
    pub rejected_route_mismatch: AtomicU64,
    pub rejected_hop: AtomicU64,
    pub storage_unavailable: AtomicU64,
    pub activation_seconds: Histogram,
    pub recovery_seconds: Histogram,
}

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}");
}

fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
}

impl Metrics {
    /// The Prometheus text exposition.
    #[must_use]
    pub fn render(&self, owned: usize) -> String {
        let mut out = String::new();
        let load = |value: &AtomicU64| value.load(Ordering::Relaxed);
        gauge(
            &mut out,
            "corium_fleet_databases_owned",
            "Databases whose write lease this node holds.",
            owned as u64,
        );
        gauge(
            &mut out,
            "corium_fleet_databases_standby",
            "Databases this node is a candidate for, held by another live owner.",
            load(&self.standby),
        );
        gauge(
            &mut out,
            "corium_fleet_databases_cold",
            "Databases this node is a candidate for with no live owner.",
            load(&self.cold),
        );
        counter(
            &mut out,
            "corium_fleet_lease_renewals_total",
            "Lease renewals observed on owned databases (expiry moved forward).",
            load(&self.lease_renewals),
        );
        counter(
            &mut out,
            "corium_fleet_lease_renewal_failures_total",
            "Owned databases whose lease could not be renewed before it expired.",
            load(&self.lease_renewal_failures),
        );
        counter(
            &mut out,
            "corium_fleet_not_owner_total",
            "NotOwner answers.",
            load(&self.not_owner),
        );
        counter(
            &mut out,
            "corium_fleet_activations_total",
            "Databases activated (lease acquired and recovered) on this node.",
            load(&self.activations),
        );
        counter(
            &mut out,
            "corium_fleet_activation_failures_total",
            "Activation attempts that failed.",
            load(&self.activation_failures),
        );
        counter(
            &mut out,
            "corium_fleet_takeovers_total",
            "Activations after another owner's lease lapsed.",
            load(&self.takeovers),
        );
        counter(
            &mut out,
            "corium_fleet_depositions_total",
            "Cells dropped because another owner took the lease.",
            load(&self.depositions),
        );
        counter(
            &mut out,
            "corium_fleet_evictions_total",
            "Cells released gracefully (shutdown, delete).",
            load(&self.evictions),
        );
        counter(
            &mut out,
            "corium_fleet_rejected_route_mismatch_total",
            "Requests whose route header disagreed with the body.",
            load(&self.rejected_route_mismatch),
        );
        counter(
            &mut out,
            "corium_fleet_rejected_hop_total",
            "Requests refused for carrying more than one hop.",
            load(&self.rejected_hop),
        );
        counter(
            &mut out,
            "corium_fleet_storage_unavailable_total",
            "Requests answered UNAVAILABLE because ownership could not be verified.",
            load(&self.storage_unavailable),
        );
        self.activation_seconds.render(
            &mut out,
            "corium_fleet_activation_seconds",
            "Time from a request or takeover decision to a serving cell.",
        );
        self.recovery_seconds.render(
            &mut out,
            "corium_fleet_recovery_seconds",
            "Time Corium spent acquiring and recovering one database.",
        );
        out
    }
}
