//! Observability over real processes: one `Transact` is one trace across
//! both tiers at a real OTLP receiver (and both tiers' JSON log lines of it
//! carry its `trace_id`), the correlation id is in both tiers' log lines and
//! in the response, and both tiers' `/metrics` pass
//! Prometheus's own linter (`promtool check metrics`).

use std::time::Duration;

use corium_fleet_tests::corium::{self, channel};
use corium_fleet_tests::otlp::{ReceivedSpan, Receiver};
use corium_fleet_tests::{Backend, Fleet, Node};
use corium_protocol::pb::transactor_client::TransactorClient;

const TTL: Duration = Duration::from_millis(1500);

/// Span export settings for a fleet process: the receiver, and batches
/// sent every 100 ms.
fn otel_env(receiver: &Receiver) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.clone()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
    ]
}

/// Starts one node and one ingress, both logging JSON lines at debug level
/// for their own crate, each with `env`; the fleet and the ingress's
/// endpoint.
async fn start_with_debug_json_logs(env: &[(&str, &str)]) -> (Fleet, String) {
    let mut fleet = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .nodes(1)
        .env(env)
        .node_flags(&[
            "--log",
            "info,corium_fleet_transactor=debug",
            "--log-format",
            "json",
        ])
        .start()
        .await;
    fleet
        .start_ingresses_with_env(
            1,
            &["--log", "info,corium_fleet_ingress=debug", "--log-format", "json"],
            env,
        )
        .await;
    let address = fleet.ingresses[0].endpoint();
    (fleet, address)
}

/// `process`'s JSON log lines that mention `text`, once it has written
/// some (within 10 s).
async fn json_lines_naming(process: &Node, text: &str) -> Vec<serde_json::Value> {
    corium_fleet_tests::eventually(
        Duration::from_secs(10),
        format!("{} log lines naming {text}", process.id),
        async || {
            let found: Vec<serde_json::Value> = process
                .log()
                .lines()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .filter(|line| line.to_string().contains(text))
                .collect();
            if found.is_empty() {
                Err("none yet")
            } else {
                Ok(found)
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_transact_is_one_trace_with_spans_from_both_tiers() {
    let receiver = Receiver::start().await;
    let env = otel_env(&receiver);
    let env: Vec<(&str, &str)> = env.iter().map(|(key, value)| (*key, value.as_str())).collect();
    let (fleet, address) = start_with_debug_json_logs(&env).await;
    assert!(corium::create(&address, "traced").await.unwrap());
    // The client starts the trace (W3C traceparent, sampled).
    let trace_id = uuid::Uuid::new_v4().simple().to_string();
    let client_span = "00f067aa0ba902b7";
    let mut request = tonic::Request::new(corium::transact_request("traced", "one"));
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{trace_id}-{client_span}-01").parse().unwrap(),
    );
    TransactorClient::new(channel(&address).await)
        .transact(request)
        .await
        .unwrap();
    let spans: Vec<ReceivedSpan> =
        corium_fleet_tests::eventually(Duration::from_secs(20), "spans from both tiers", async || {
            let spans: Vec<ReceivedSpan> = receiver
                .spans()
                .into_iter()
                .filter(|span| span.trace_id == trace_id)
                .collect();
            let from = |service: &str| spans.iter().any(|span| span.service == service);
            if from("corium-fleet-ingress")
                && from("corium-fleet-transactor")
                && spans.iter().any(|s| s.name == "commit")
            {
                Ok(spans)
            } else {
                Err(format!("{spans:#?}"))
            }
        })
        .await;
    let find = |name: &str| {
        spans
            .iter()
            .find(|span| span.name == name)
            .unwrap_or_else(|| panic!("no {name} span in {spans:#?}"))
    };
    // client → ingress forward → hop → node call → ownership, commit.
    let forward = find("forward");
    assert_eq!(forward.service, "corium-fleet-ingress");
    assert_eq!(
        forward.parent_span_id, client_span,
        "the client's span is the parent"
    );
    let hop = find("hop");
    assert_eq!(hop.parent_span_id, forward.span_id);
    let call = find("call");
    assert_eq!(call.service, "corium-fleet-transactor");
    assert_eq!(
        call.parent_span_id, hop.span_id,
        "the node's span continues the hop's"
    );
    for name in ["ownership", "commit"] {
        let span = find(name);
        assert_eq!(span.service, "corium-fleet-transactor");
        assert_eq!(span.trace_id, trace_id);
    }
    let db = forward.attributes.iter().find(|(key, _)| key == "db");
    assert_eq!(db.map(|(_, value)| value.as_str()), Some("traced"), "{forward:?}");
    // Each tier's JSON log lines of the call name its trace, and a span of
    // it the receiver holds.
    for (tier, log) in [
        ("ingress", fleet.ingresses[0].log()),
        ("node", fleet.nodes[0].log()),
    ] {
        let traced: Vec<serde_json::Value> = log
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|line| line["trace_id"] == trace_id.as_str())
            .collect();
        assert!(
            !traced.is_empty(),
            "no {tier} log line names trace {trace_id}:\n{log}"
        );
        assert!(
            traced
                .iter()
                .any(|line| spans.iter().any(|span| line["span_id"] == span.span_id.as_str())),
            "{tier}: {traced:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_correlation_id_is_in_both_tiers_logs_and_in_the_response() {
    let (fleet, address) = start_with_debug_json_logs(&[]).await;
    assert!(corium::create(&address, "correlated").await.unwrap());
    let correlation = format!("corr-{}", uuid::Uuid::new_v4().simple());
    let mut request = tonic::Request::new(corium::transact_request("correlated", "one"));
    request
        .metadata_mut()
        .insert("x-request-id", correlation.parse().unwrap());
    let response = TransactorClient::new(channel(&address).await)
        .transact(request)
        .await
        .unwrap();
    assert_eq!(
        response
            .metadata()
            .get("x-request-id")
            .and_then(|value| value.to_str().ok()),
        Some(correlation.as_str()),
        "the correlation id comes back"
    );
    // Without one, the ingress makes one and returns it.
    let response = TransactorClient::new(channel(&address).await)
        .transact(corium::transact_request("correlated", "two"))
        .await
        .unwrap();
    assert!(response.metadata().get("x-request-id").is_some());
    // Each tier wrote JSON lines naming the call's correlation id.
    let ingress = json_lines_naming(&fleet.ingresses[0], &correlation).await;
    let node = json_lines_naming(&fleet.nodes[0], &correlation).await;
    assert_eq!(
        ingress[0]["span"]["x_request_id"].as_str(),
        Some(correlation.as_str()),
        "{:#}",
        ingress[0]
    );
    assert_eq!(
        node[0]["span"]["x_request_id"].as_str(),
        Some(correlation.as_str()),
        "{:#}",
        node[0]
    );
}

/// `GET /metrics` on `port`: the `Content-Type` and the body.
async fn scrape(port: u16) -> (String, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("scraped in time")
        .unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let content_type = head
        .lines()
        .find_map(|line| line.strip_prefix("content-type: "))
        .unwrap_or_default()
        .to_owned();
    (content_type, body.to_owned())
}

/// `promtool check metrics` on `text`: its findings (empty when clean).
fn promtool(text: &str) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool is installed (make test installs Debian's prometheus)");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let findings = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() {
        findings
    } else {
        format!("promtool failed: {findings}")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_tiers_metrics_pass_promtool_and_count_calls_by_method_and_code() {
    let (fleet, address) = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .nodes(1)
        .start_with_database("metered")
        .await;
    corium::transact_items(&address, "metered", "m", 5).await;
    corium::expect_code(
        corium::transact(&address, "junk name", "x", &[]).await,
        tonic::Code::InvalidArgument,
        "a junk database name",
    );
    // A database that does not exist: the ingress answers from storage;
    // asked directly, the node answers.
    let absent = corium::transact(&address, "absent-db", "x", &[])
        .await
        .unwrap_err();
    assert_eq!(absent.code(), tonic::Code::NotFound);
    let absent = corium::transact(&fleet.nodes[0].endpoint(), "absent-db", "x", &[])
        .await
        .unwrap_err();
    assert_eq!(absent.code(), tonic::Code::NotFound);
    let log = corium::log(&address, "metered").await.unwrap();
    assert!(log.len() >= 5);
    for (tier, port, prefix) in [
        ("ingress", fleet.ingresses[0].admin, "corium_fleet_ingress"),
        ("node", fleet.nodes[0].admin, "corium_fleet"),
    ] {
        let (content_type, text) = scrape(port).await;
        assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8", "{tier}");
        let findings = promtool(&text);
        assert!(
            findings.trim().is_empty(),
            "{tier}: promtool check metrics:\n{findings}\n{text}"
        );
        let transacts = format!(
            "{prefix}_requests_total{{method=\"/corium.v1.Transactor/Transact\",kind=\"unary\",code=\"OK\"}}"
        );
        let value = corium_fleet_tests::metric(&text, &transacts);
        assert!(
            value.is_some_and(|count| count >= 5.0),
            "{tier}: {transacts} = {value:?}\n{text}"
        );
        assert!(text.contains(&format!("{prefix}_build_info{{")), "{tier}");
        assert!(text.contains("process_resident_memory_bytes "), "{tier}");
        assert!(text.contains(&format!("{prefix}_request_duration_seconds_bucket{{method=\"/corium.v1.Transactor/Transact\",kind=\"unary\",le=\"60\"}}")), "{tier}");
    }
    // Errors by code at each tier.
    let (_, ingress) = scrape(fleet.ingresses[0].admin).await;
    let invalid = "corium_fleet_ingress_requests_total{method=\"/corium.v1.Transactor/Transact\",kind=\"unary\",code=\"INVALID_ARGUMENT\"}";
    assert_eq!(
        corium_fleet_tests::metric(&ingress, invalid),
        Some(1.0),
        "{ingress}"
    );
    let (_, node) = scrape(fleet.nodes[0].admin).await;
    let not_found = "corium_fleet_requests_total{method=\"/corium.v1.Transactor/Transact\",kind=\"unary\",code=\"NOT_FOUND\"}";
    assert_eq!(corium_fleet_tests::metric(&node, not_found), Some(1.0), "{node}");
    // Corium's own counters of the database, from its cell.
    let corium_transactions = "corium_fleet_database_transactions_total{db=\"metered\"}";
    assert!(
        corium_fleet_tests::metric(&node, corium_transactions).is_some_and(|count| count >= 5.0),
        "{node}"
    );
    // The subscription that read the log ended CANCELLED or OK, and is not
    // in flight any more.
    assert!(
        ingress.contains("corium_fleet_ingress_requests_in_flight "),
        "{ingress}"
    );
}

/// Span export over TLS: a node given an `https://` collector, the CA that
/// signed the collector's certificate (`OTEL_EXPORTER_OTLP_CERTIFICATE`)
/// and a client certificate for a collector that asks for one (mTLS) sends
/// its spans there; without the client certificate the collector admits
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_to_a_collector_over_mtls() {
    let certs = collector_certs();
    let read = |name: &str| std::fs::read(certs.path().join(name)).unwrap();
    let receiver = Receiver::start_tls(
        (read("collector.pem"), read("collector.key")),
        Some(read("ca.pem")),
    )
    .await;
    spans_reach_an_mtls_collector(&receiver, certs.path(), &[]).await;
}

/// The same over OTLP/HTTP (`http/protobuf`): TLS and the client
/// certificate from the same standard variables, an HTTPS collector that
/// asks for one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_to_an_http_collector_over_mtls() {
    let certs = collector_certs();
    let path = |name: &str| certs.path().join(name);
    let receiver = Receiver::start_http_tls(
        &path("collector.pem"),
        &path("collector.key"),
        Some(&path("ca.pem")),
    )
    .await;
    spans_reach_an_mtls_collector(
        &receiver,
        certs.path(),
        &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")],
    )
    .await;
}

/// A CA and certificates for a collector and an exporter, from
/// `corium-fleet certs`.
fn collector_certs() -> tempfile::TempDir {
    let certs = tempfile::tempdir().unwrap();
    let made = std::process::Command::new(corium_fleet_tests::bin_dir().join("corium-fleet"))
        .args(["certs", "--out"])
        .arg(certs.path())
        .args(["--node", "collector", "--node", "exporter", "--ingress", "unused"])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    certs
}

/// A fleet exporting to `receiver` (which requires a client certificate
/// signed by `certs`' CA) with `extra` variables: without a client
/// certificate nothing lands; with one, the node's spans arrive.
async fn spans_reach_an_mtls_collector(receiver: &Receiver, certs: &std::path::Path, extra: &[(&str, &str)]) {
    let path = |name: &str| certs.join(name).display().to_string();
    let export = |client: bool| {
        let mut env = vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.clone()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", path("ca.pem")),
        ];
        if client {
            env.push(("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", path("exporter.pem")));
            env.push(("OTEL_EXPORTER_OTLP_CLIENT_KEY", path("exporter.key")));
        }
        env.extend(extra.iter().map(|(key, value)| (*key, (*value).to_owned())));
        env
    };
    let start = async |client: bool| {
        let env = export(client);
        let env: Vec<(&str, &str)> = env.iter().map(|(key, value)| (*key, value.as_str())).collect();
        Fleet::builder(Backend::Filesystem)
            .nodes(1)
            .env(&env)
            .start_with_ingress()
            .await
    };
    // Without a client certificate: refused at the handshake, nothing lands.
    let (anonymous, address) = start(false).await;
    assert!(corium::create(&address, "untraced").await.unwrap());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(receiver.spans().is_empty(), "{:#?}", receiver.spans());
    drop(anonymous);

    let (fleet, address) = start(true).await;
    assert!(corium::create(&address, "traced").await.unwrap());
    corium::transact(&address, "traced", "one", &[]).await.unwrap();
    spans_arrive_from(&fleet, receiver, &["corium-fleet-transactor"]).await;
}

/// Span export over OTLP/HTTP (`OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`):
/// both tiers' spans reach an HTTP collector at `/v1/traces`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_over_otlp_http() {
    let receiver = Receiver::start_http().await;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let mut fleet = Fleet::builder(Backend::Filesystem)
        .nodes(1)
        .env(&env)
        .start()
        .await;
    fleet.start_ingresses_with_env(1, &[], &env).await;
    let address = fleet.ingresses[0].endpoint();
    assert!(corium::create(&address, "traced").await.unwrap());
    corium::transact(&address, "traced", "one", &[]).await.unwrap();
    spans_arrive_from(
        &fleet,
        &receiver,
        &["corium-fleet-transactor", "corium-fleet-ingress"],
    )
    .await;
}

/// Waits (20 s at most) until `receiver` holds spans from every one of
/// `services`.
async fn spans_arrive_from(fleet: &Fleet, receiver: &Receiver, services: &[&str]) {
    corium_fleet_tests::eventually(
        Duration::from_secs(20),
        fleet.with_logs(format!("spans from {services:?}")),
        async || {
            let from: std::collections::HashSet<String> =
                receiver.spans().into_iter().map(|span| span.service).collect();
            if services.iter().all(|service| from.contains(*service)) {
                Ok(())
            } else {
                Err(format!("from {from:?}"))
            }
        },
    )
    .await;
}

/// The metric families both tiers export are the ones the chart's checks
/// hold the dashboard and the alerts against
/// (`scripts/chart-tools/metrics/{transactor,ingress}.prom`): this test
/// scrapes a real fleet on mTLS (so the TLS series are there, as in the
/// chart) and compares. `CORIUM_FLEET_UPDATE_METRICS=1` rewrites the files
/// instead; commit them with the change to the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_captured_metrics_are_what_both_tiers_export() {
    let (fleet, address) = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .nodes(1)
        .mtls()
        .start_with_database("captured")
        .await;
    corium::transact(&address, "captured", "c-1", &[]).await.unwrap();
    let update = std::env::var_os("CORIUM_FLEET_UPDATE_METRICS").is_some_and(|value| value == "1");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/chart-tools/metrics");
    let mut stale = Vec::new();
    for (tier, port) in [
        ("transactor", fleet.nodes[0].admin),
        ("ingress", fleet.ingresses[0].admin),
    ] {
        let (_, text) = scrape(port).await;
        let families: Vec<&str> = text
            .lines()
            .filter(|line| line.starts_with("# HELP ") || line.starts_with("# TYPE "))
            .collect();
        assert!(families.len() > 40, "{tier}: {text}");
        let captured = format!(
            "# The metric families of the {tier} tier (HELP and TYPE lines), written by the test\n\
             # the_charts_captured_metrics_are_what_both_tiers_export (tests/tests/process/observability.rs).\n\
             # Regenerate: CORIUM_FLEET_UPDATE_METRICS=1 cargo nextest run -p corium-fleet-tests --test process captured_metrics\n{}\n",
            families.join("\n")
        );
        let path = dir.join(format!("{tier}.prom"));
        if update {
            std::fs::write(&path, &captured).unwrap();
        } else if std::fs::read_to_string(&path).unwrap_or_default() != captured {
            stale.push(format!("{}:\n{captured}", path.display()));
        }
    }
    assert!(
        stale.is_empty(),
        "the captured metrics are out of date; regenerate them with \
         CORIUM_FLEET_UPDATE_METRICS=1 cargo nextest run -p corium-fleet-tests --test process captured_metrics \
         and commit them. Exported now:\n{}",
        stale.join("\n")
    );
}
