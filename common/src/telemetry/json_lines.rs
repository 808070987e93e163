//! JSON log lines with the trace they belong to: `tracing-subscriber`'s
//! JSON line, plus `trace_id` and `span_id` (W3C hex) when the current span
//! belongs to an OpenTelemetry trace — so a log search and a trace search
//! meet on one id. Only while spans are exported (the trace is then
//! recorded, client → ingress → owner); without export the line is
//! `tracing-subscriber`'s own.

use std::fmt;

use opentelemetry::trace::TraceContextExt as _;
use tracing::{Event, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::fmt::format::{self, Format, Json, JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent};
use tracing_subscriber::registry::LookupSpan;

/// The JSON line format, with the trace ids added.
pub(super) struct JsonLines {
    inner: Format<Json>,
}

impl JsonLines {
    /// The JSON format with the current span's fields and no span list.
    pub(super) fn new() -> Self {
        Self {
            inner: format::format()
                .json()
                .with_current_span(true)
                .with_span_list(false),
        }
    }
}

/// `line` (one JSON object and its newline) with `"trace_id"` and
/// `"span_id"` added before its closing brace.
fn with_ids(line: &str, trace_id: &str, span_id: &str) -> Option<String> {
    let body = line.trim_end();
    let open = body.strip_suffix('}')?;
    let separator = if open.trim_end().ends_with('{') { "" } else { "," };
    Some(format!(
        "{open}{separator}\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\"}}\n"
    ))
}

impl<S> FormatEvent<S, JsonFields> for JsonLines
where
    S: Subscriber + for<'lookup> LookupSpan<'lookup>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // Read before formatting: the formatter holds span extensions while
        // it runs, and reading the trace takes them too.
        let ids = super::exporting().then(|| {
            let context = tracing::Span::current().context();
            let span = context.span();
            let span_context = span.span_context();
            span_context.is_valid().then(|| {
                (
                    span_context.trace_id().to_string(),
                    span_context.span_id().to_string(),
                )
            })
        });
        let mut line = String::new();
        self.inner.format_event(ctx, Writer::new(&mut line), event)?;
        match ids
            .flatten()
            .and_then(|(trace_id, span_id)| with_ids(&line, &trace_id, &span_id))
        {
            Some(traced) => writer.write_str(&traced),
            None => writer.write_str(&line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::with_ids;

    #[test]
    fn ids_go_inside_the_object() {
        let traced = with_ids("{\"level\":\"INFO\"}\n", "0af7", "b7ad").unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&traced).unwrap();
        assert_eq!(parsed["trace_id"], "0af7");
        assert_eq!(parsed["span_id"], "b7ad");
        assert_eq!(parsed["level"], "INFO");
        assert!(traced.ends_with("}\n"));
        let empty = with_ids("{}\n", "1", "2").unwrap();
        assert!(
            serde_json::from_str::<serde_json::Value>(&empty).is_ok(),
            "{empty}"
        );
        assert_eq!(with_ids("not json", "1", "2"), None);
    }
}
