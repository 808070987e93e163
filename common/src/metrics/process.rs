//! The standard `process_*` series (CPU seconds, resident and virtual
//! memory, open and maximum file descriptors, start time, threads), read at
//! each scrape by `metrics-process` (which reads Linux's `/proc` with
//! `procfs`: the clock-tick rate and page size come from the system, not
//! from constants); and the CPU time alone, for load-aware placement.

use super::Scrape;

/// Writes the process's own series, read now.
pub fn collect(scrape: &mut Scrape<'_>) {
    let now = metrics_process::collector::collect();
    if let Some(seconds) = now.cpu_seconds_total {
        scrape.metric(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            &prometheus_client::metrics::counter::ConstCounter::new(seconds),
        );
    }
    let gauges = [
        (
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            now.resident_memory_bytes,
        ),
        (
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            now.virtual_memory_bytes,
        ),
        (
            "process_open_fds",
            "Number of open file descriptors.",
            now.open_fds,
        ),
        (
            "process_max_fds",
            "Maximum number of open file descriptors (0: unlimited).",
            now.max_fds,
        ),
        (
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            now.start_time_seconds,
        ),
        (
            "process_threads",
            "Number of OS threads in the process.",
            now.threads,
        ),
    ];
    for (name, help, value) in gauges {
        if let Some(value) = value {
            scrape.gauge(name, help, value);
        }
    }
}

/// The CPU time (user and system) this process has used, in seconds, from
/// one `getrusage` call (`None` if it fails): what load-aware placement
/// reads every interval, without the rest of the scrape's `/proc` reads.
#[must_use]
pub fn cpu_seconds() -> Option<f64> {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).ok()?;
    let seconds = |time: nix::sys::time::TimeVal| {
        // Seconds and microseconds of CPU time: far inside f64's exact range.
        #[allow(clippy::cast_precision_loss)]
        let whole = time.tv_sec() as f64;
        #[allow(clippy::cast_precision_loss)]
        let micros = time.tv_usec() as f64;
        whole + micros / 1e6
    };
    Some(seconds(usage.user_time()) + seconds(usage.system_time()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_series_are_read_from_the_system() {
        // Spend some CPU first (bounded), so its counter is above zero.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut spin = 0_u64;
        while cpu_seconds().unwrap_or_default() < 0.02 && std::time::Instant::now() < deadline {
            spin = std::hint::black_box(spin.wrapping_mul(31).wrapping_add(7));
        }
        let text = super::super::exposition(&super::super::registry(|_| {}));
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_start_time_seconds",
            "process_threads",
        ] {
            let value: f64 = text
                .lines()
                .find_map(|line| line.strip_prefix(&format!("{name} ")))
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("{name} missing from\n{text}"));
            assert!(value > 0.0, "{name} {value}");
        }
        // The start time is a Unix time in seconds, not clock ticks.
        let started = text
            .lines()
            .find_map(|line| line.strip_prefix("process_start_time_seconds "))
            .and_then(|value| value.parse::<f64>().ok())
            .unwrap_or_default();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |elapsed| elapsed.as_secs_f64());
        assert!(started <= now && started > now - 86_400.0, "{started} vs {now}");
        // getrusage and /proc agree on the CPU time (to the clock tick and
        // the time between the two reads).
        let exported = text
            .lines()
            .find_map(|line| line.strip_prefix("process_cpu_seconds_total "))
            .and_then(|value| value.parse::<f64>().ok())
            .unwrap_or_default();
        let direct = cpu_seconds().unwrap_or_default();
        assert!(
            direct >= exported - 0.05 && direct - exported < 0.5,
            "getrusage {direct} s, /proc {exported} s"
        );
    }
}
