//! Prometheus text exposition helpers: counters, gauges and a fixed-bucket
//! histogram, written without a metrics registry.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the duration histogram buckets: from 100 µs
/// (a forward on loopback) to 60 s (a handoff of a long history on
/// `PostgreSQL`; the longest deadline).
const BUCKETS: [f64; 18] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0,
];

/// A fixed-bucket duration histogram.
#[derive(Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Records one duration: counts it in every bucket whose bound it does
    /// not exceed (buckets are cumulative, as Prometheus expects) and adds it
    /// to the total count and sum.
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

    /// Durations recorded so far.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Appends the histogram's exposition.
    pub fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        self.render_series(out, name, "");
    }

    /// Appends the histogram's series with `labels` (`key="value",…`, or
    /// empty), under a `# TYPE` line the caller wrote.
    pub fn render_series(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (bound, count) in BUCKETS.iter().zip(&self.counts) {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        #[allow(clippy::cast_precision_loss)]
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {sum}\n{name}_count{braces} {count}");
    }
}

/// Appends one counter.
pub fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}");
}

/// Appends one gauge.
pub fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
}

/// Appends `<prefix>_build_info{version="…",corium="…"} 1`.
pub fn build_info(out: &mut String, prefix: &str, version: &str, corium: &str) {
    let _ = writeln!(
        out,
        "# HELP {prefix}_build_info The running build: the fleet's version and the Corium crates it is built on.\n# TYPE {prefix}_build_info gauge\n{prefix}_build_info{{version=\"{version}\",corium=\"{corium}\"}} 1"
    );
}

/// The CPU time (user and system) this process has used, in seconds, from
/// Linux's `/proc/self/stat` (`None` elsewhere).
#[must_use]
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) in `)`.
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let number = |index: usize| fields.get(index).and_then(|field| field.parse::<f64>().ok());
    // utime, stime (fields 14, 15 of stat; 11, 12 after the state), in
    // clock ticks of 100 a second (USER_HZ on Linux).
    Some((number(11)? + number(12)?) / 100.0)
}

/// Appends the standard `process_*` series (Linux `/proc`): CPU seconds,
/// resident memory, open and maximum file descriptors, start time.
pub fn process(out: &mut String) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    // Fields after the command name (which may hold spaces) in `)`.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let number = |index: usize| fields.get(index).and_then(|field| field.parse::<f64>().ok());
    // Start time: field 22 of stat (19 after the state), in clock ticks of
    // 100 a second (USER_HZ on Linux).
    let ticks = 100.0;
    if let Some(seconds) = cpu_seconds() {
        let _ = writeln!(
            out,
            "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total {seconds}"
        );
    }
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|text| {
        text.lines()
            .find_map(|line| line.strip_prefix("btime "))
            .and_then(|value| value.trim().parse::<f64>().ok())
    });
    if let (Some(boot), Some(start)) = (boot, number(19)) {
        let _ = writeln!(
            out,
            "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {}",
            boot + start / ticks
        );
    }
    if let Some(resident) = crate::memory::resident_bytes() {
        let _ = writeln!(
            out,
            "# HELP process_resident_memory_bytes Resident memory size in bytes.\n# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {resident}"
        );
    }
    if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
        let _ = writeln!(
            out,
            "# HELP process_open_fds Number of open file descriptors.\n# TYPE process_open_fds gauge\nprocess_open_fds {}",
            entries.count()
        );
    }
    let max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with("Max open files"))
                .and_then(|line| {
                    line.split_whitespace()
                        .nth(3)
                        .and_then(|soft| soft.parse::<u64>().ok())
                })
        });
    if let Some(max_fds) = max_fds {
        let _ = writeln!(
            out,
            "# HELP process_max_fds Maximum number of open file descriptors.\n# TYPE process_max_fds gauge\nprocess_max_fds {max_fds}"
        );
    }
}
