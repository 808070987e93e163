//! Percentiles, medians and spreads of measured samples.

use std::time::Duration;

use serde::Serialize;

/// Latency percentiles of one round, in microseconds.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct Latency {
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) requests: usize,
    pub(crate) per_second: f64,
}

/// The `q` quantile (0..=1) of sorted samples, nearest rank.
#[must_use]
pub(crate) fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Summarises one round of request latencies over `elapsed`.
#[must_use]
pub(crate) fn latency(mut samples: Vec<Duration>, elapsed: Duration) -> Latency {
    samples.sort();
    #[allow(clippy::cast_precision_loss)]
    let per_second = samples.len() as f64 / elapsed.as_secs_f64().max(1e-9);
    Latency {
        p50_us: quantile(&samples, 0.50).as_secs_f64() * 1e6,
        p99_us: quantile(&samples, 0.99).as_secs_f64() * 1e6,
        requests: samples.len(),
        per_second,
    }
}

/// Median and range of repeated figures.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

/// The median and range of `values`.
#[must_use]
pub(crate) fn spread(values: &[f64]) -> Spread {
    if values.is_empty() {
        return Spread::default();
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    let median = if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        f64::midpoint(sorted[mid - 1], sorted[mid])
    };
    Spread {
        median,
        min: sorted[0],
        max: sorted[sorted.len() - 1],
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.0} ({:.0}–{:.0})", self.median, self.min, self.max)
    }
}

/// The machine's load average, as `/proc/loadavg` reports it.
#[must_use]
pub(crate) fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| text.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// A process's resident set in KiB.
#[must_use]
pub(crate) fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time (user + system) of process `pid` (`None`: this process) so far,
/// from `/proc/PID/stat`; zero when it cannot be read.
#[must_use]
pub(crate) fn cpu_time(pid: Option<u32>) -> std::time::Duration {
    let path = pid.map_or_else(|| "/proc/self/stat".to_owned(), |pid| format!("/proc/{pid}/stat"));
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |index: usize| {
        fields
            .get(index)
            .and_then(|field| field.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime, in clock ticks of 10 ms.
    std::time::Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_spreads() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        let summary = latency(samples, Duration::from_secs(1));
        assert!((summary.p50_us - 50.0).abs() < 1e-6);
        assert!((summary.p99_us - 99.0).abs() < 1e-6);
        assert!((summary.per_second - 100.0).abs() < 1e-6);
        let s = spread(&[3.0, 1.0, 2.0]);
        assert!((s.median - 2.0).abs() < 1e-9 && (s.min - 1.0).abs() < 1e-9 && (s.max - 3.0).abs() < 1e-9);
        assert!((spread(&[1.0, 2.0, 3.0, 4.0]).median - 2.5).abs() < 1e-9);
    }
}
