//! Metrics in the Prometheus text format, written by `prometheus-client`.
//!
//! Each binary builds one [`Registry`] at start holding one collector: a
//! [`Collect`] closure that reads the process's counters, gauges and
//! histograms at each scrape, then the standard process series
//! ([`process::collect`]). A component exposes its series
//! as `fn collect(&self, scrape: &mut Scrape)`; [`Scrape`] hands each value to
//! the library's encoder, which writes the `# HELP`/`# TYPE` lines, the
//! names (a counter's `_total`), the label escaping and the number formats.
//!
//! Layout:
//! - this file — [`Scrape`], [`Collect`], [`exposition`], the duration buckets;
//! - [`calls`] — every gRPC call by method, kind and status code (both tiers);
//! - [`process`] — the standard `process_*` series, from `metrics-process`.

pub mod calls;
pub mod process;

use std::fmt;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
pub use prometheus_client::registry::Registry;

/// The media type of [`exposition`]'s text (Prometheus's text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Upper bounds (seconds) of the duration histograms' buckets: from 100 µs
/// (a forward on loopback) to 60 s (a handoff of a long history on
/// `PostgreSQL`; the longest deadline).
const DURATION_BUCKETS: [f64; 18] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0,
];

/// A histogram over [`DURATION_BUCKETS`].
fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// Durations, in seconds, in a histogram over `DURATION_BUCKETS`.
#[derive(Clone, Debug)]
pub struct Durations(Histogram);

impl Default for Durations {
    fn default() -> Self {
        Self(duration_histogram())
    }
}

impl Durations {
    /// Records one duration.
    pub fn observe(&self, elapsed: Duration) {
        self.0.observe(elapsed.as_secs_f64());
    }
}

/// The registry's series in Prometheus's text format.
#[must_use]
pub fn exposition(registry: &Registry) -> String {
    let mut text = String::new();
    if let Err(error) = prometheus_client::encoding::prometheus_text::encode(&mut text, registry) {
        tracing::warn!(%error, "metrics could not be encoded");
    }
    text
}

/// A registry holding `collect` and the process's standard series.
#[must_use]
pub fn registry(collect: impl Fn(&mut Scrape<'_>) + Send + Sync + 'static) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Collect(move |scrape: &mut Scrape<'_>| {
        collect(scrape);
        process::collect(scrape);
    })));
    registry
}

/// One scrape being written: each call adds one metric family. The first
/// encoding error is kept (and returned by the collector); later calls do
/// nothing.
pub struct Scrape<'a> {
    encoder: DescriptorEncoder<'a>,
    result: fmt::Result,
}

impl Scrape<'_> {
    /// A counter. `name` is the full series name (ending in `_total`, as
    /// alerts and dashboards spell it; the encoder adds the suffix back).
    pub fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.metric(name, help, &ConstCounter::new(value));
    }

    /// A gauge.
    pub fn gauge<V: EncodeGaugeValue + fmt::Debug>(&mut self, name: &str, help: &str, value: V) {
        self.metric(name, help, &ConstGauge::new(value));
    }

    /// A counter with one series per label set.
    pub fn counters<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (L, u64)>,
    ) {
        self.family(name, help, MetricType::Counter, samples, |value, encoder| {
            ConstCounter::new(value).encode(encoder)
        });
    }

    /// A gauge with one series per label set.
    pub fn gauges<L: EncodeLabelSet, V: EncodeGaugeValue + fmt::Debug>(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (L, V)>,
    ) {
        self.family(name, help, MetricType::Gauge, samples, |value, encoder| {
            ConstGauge::new(value).encode(encoder)
        });
    }

    /// A histogram with one series per label set.
    pub fn histograms<'h, L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (L, &'h Histogram)>,
    ) {
        self.family(
            name,
            help,
            MetricType::Histogram,
            samples,
            |histogram: &Histogram, encoder| EncodeMetric::encode(histogram, encoder),
        );
    }

    /// A duration histogram.
    pub fn durations(&mut self, name: &str, help: &str, durations: &Durations) {
        self.metric(name, help, &durations.0);
    }

    /// Any metric of the library (a histogram, a family).
    pub fn metric(&mut self, name: &str, help: &str, metric: &impl EncodeMetric) {
        if self.result.is_err() {
            return;
        }
        let name = family_name(name, metric.metric_type());
        self.result = self
            .encoder
            .encode_descriptor(name, help, None, metric.metric_type())
            .and_then(|encoder| metric.encode(encoder));
    }

    fn family<L: EncodeLabelSet, V>(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricType,
        samples: impl IntoIterator<Item = (L, V)>,
        encode: impl Fn(V, prometheus_client::encoding::MetricEncoder<'_>) -> fmt::Result,
    ) {
        if self.result.is_err() {
            return;
        }
        let name = family_name(name, kind);
        self.result = self
            .encoder
            .encode_descriptor(name, help, None, kind)
            .and_then(|mut encoder| {
                for (labels, value) in samples {
                    encode(value, encoder.encode_family(&labels)?)?;
                }
                Ok(())
            });
    }
}

/// The family name the encoder takes: a counter's without its `_total`.
fn family_name(name: &str, kind: MetricType) -> &str {
    match kind {
        MetricType::Counter => name.strip_suffix("_total").unwrap_or(name),
        _ => name,
    }
}

/// A collector made of a closure that writes a [`Scrape`].
pub struct Collect<F>(pub F);

impl<F> fmt::Debug for Collect<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Collect")
    }
}

impl<F: Fn(&mut Scrape<'_>) + Send + Sync + 'static> Collector for Collect<F> {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        let mut scrape = Scrape {
            encoder,
            result: Ok(()),
        };
        (self.0)(&mut scrape);
        scrape.result
    }
}

/// Writes `<prefix>_build_info{version="…",corium="…"} 1`.
pub fn build_info(scrape: &mut Scrape<'_>, prefix: &str, version: &str) {
    scrape.gauges(
        &format!("{prefix}_build_info"),
        "The running build: the fleet's version and the Corium crates it is built on.",
        [([("version", version), ("corium", crate::CORIUM_VERSION)], 1_u64)],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_writes_families_in_the_text_format() {
        let histogram = Durations::default();
        histogram.observe(Duration::from_millis(3));
        let registry = registry(move |scrape| {
            scrape.counter("test_things_total", "Things.", 3);
            scrape.gauge("test_level", "A level.", 7_u64);
            scrape.counters(
                "test_refused_total",
                "Refusals, by reason.",
                [([("reason", "limit")], 2), ([("reason", "a \"quoted\" one")], 1)],
            );
            scrape.durations("test_seconds", "Durations.", &histogram);
        });
        let text = exposition(&registry);
        for line in [
            "# HELP test_things_total Things.",
            "# TYPE test_things_total counter",
            "test_things_total 3",
            "# TYPE test_level gauge",
            "test_level 7",
            "test_refused_total{reason=\"limit\"} 2",
            "test_refused_total{reason=\"a \\\"quoted\\\" one\"} 1",
            "# TYPE test_seconds histogram",
            "test_seconds_bucket{le=\"0.0025\"} 0",
            "test_seconds_bucket{le=\"0.005\"} 1",
            "test_seconds_bucket{le=\"+Inf\"} 1",
            "test_seconds_count 1",
            "# TYPE process_cpu_seconds_total counter",
        ] {
            assert!(
                text.lines().any(|got| got == line),
                "{line:?} missing from\n{text}"
            );
        }
    }
}
