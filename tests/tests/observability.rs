//! Observability over real processes: one `Transact` is one trace across
//! both tiers at a real OTLP receiver, the correlation id is in both tiers'
//! log lines and in the response, and both tiers' `/metrics` pass
//! Prometheus's own linter (`promtool check metrics`).

use std::time::Duration;

use corium_fleet_tests::corium::{self, channel};
use corium_fleet_tests::otlp::{ReceivedSpan, Receiver};
use corium_fleet_tests::{Backend, Fleet};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_transact_is_one_trace_with_spans_from_both_tiers() {
    let receiver = Receiver::start().await;
    let env = otel_env(&receiver);
    let env: Vec<(&str, &str)> = env.iter().map(|(key, value)| (*key, value.as_str())).collect();
    let mut fleet = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .nodes(1)
        .env(&env)
        .start()
        .await;
    fleet.start_ingresses_with_env(1, &[], &env).await;
    let address = fleet.ingresses[0].endpoint();
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_correlation_id_is_in_both_tiers_logs_and_in_the_response() {
    let mut fleet = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .nodes(1)
        .node_flags(&[
            "--log",
            "info,corium_fleet_transactor=debug",
            "--log-format",
            "json",
        ])
        .start()
        .await;
    fleet
        .start_ingresses(
            1,
            &["--log", "info,corium_fleet_ingress=debug", "--log-format", "json"],
        )
        .await;
    let address = fleet.ingresses[0].endpoint();
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
    let lines = |log: String| -> Vec<serde_json::Value> {
        log.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|line| line.to_string().contains(&correlation))
            .collect()
    };
    let ingress = corium_fleet_tests::eventually(Duration::from_secs(10), "ingress log lines", async || {
        let found = lines(fleet.ingresses[0].log());
        if found.is_empty() {
            Err("none yet".to_owned())
        } else {
            Ok(found)
        }
    })
    .await;
    let node = corium_fleet_tests::eventually(Duration::from_secs(10), "node log lines", async || {
        let found = lines(fleet.nodes[0].log());
        if found.is_empty() {
            Err("none yet".to_owned())
        } else {
            Ok(found)
        }
    })
    .await;
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
