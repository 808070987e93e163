//! The admin port is plaintext and reachable by whatever probes and scrapes
//! it; only `/metrics`, `/healthz` and `/readyz` answer everyone. The
//! ingress's `/status` and `/status.json` (every node, its internal
//! endpoint, the databases it owns) and a node's `/debug/*` answer a
//! connection from loopback (`kubectl port-forward`) or an operator's token.
//!
//! Every test process connects from loopback, which is trusted by default;
//! the ingress's `--admin-trust-loopback false` (for a pod whose sidecar
//! makes every connection local) stands in for a connection from elsewhere.

use std::time::Duration;

use corium_fleet_tests::{Backend, Fleet, corium};
use corium_protocol::auth::DEFAULT_DEV_TOKEN;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const DB: &str = "inventory";
/// A deployment's own token (`--serve-token`): its principal is an operator.
const SECRET: &str = "admin-port-test-token";

/// A plain HTTP/1.1 GET on loopback with an `Authorization: Bearer` header
/// when `token` is given: `(status, content type, body)`.
async fn get(port: u16, path: &str, token: Option<&str>) -> (u16, String, String) {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let authorization =
            token.map_or_else(String::new, |token| format!("Authorization: Bearer {token}\r\n"));
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{authorization}Connection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    };
    let answer = tokio::time::timeout(Duration::from_secs(10), attempt)
        .await
        .expect("the admin port answers");
    let status = answer[9..12].parse().unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let content_type = head
        .lines()
        .find_map(|line| {
            line.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_owned)
        })
        .unwrap_or_default();
    (status, content_type, body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_pages_answer_loopback_or_an_operator_and_probes_answer_everyone() {
    let mut fleet = Fleet::builder(Backend::Filesystem).nodes(2).start().await;
    // 0: the default (loopback trusted); 1: as if every caller were remote
    // (the test fleet's development token is an operator); 2: remote, with
    // a deployment's own token, where the development token is nobody.
    fleet.start_ingresses(1, &[]).await;
    fleet
        .start_ingresses(1, &["--admin-trust-loopback", "false"])
        .await;
    fleet
        .start_ingresses(1, &["--admin-trust-loopback", "false", "--serve-token", SECRET])
        .await;
    let address = fleet.ingresses[0].endpoint();
    assert!(corium::create(&address, DB).await.unwrap());
    corium::transact(&address, DB, "item", &[]).await.unwrap();
    let [local, remote, own_token] = [0, 1, 2].map(|index| fleet.ingresses[index].admin);
    let node_id = &fleet.nodes[0].id;

    // From loopback the page works as before, with no token.
    let (status, content_type, page) = get(local, "/status", None).await;
    assert_eq!(status, 200, "{page}");
    assert!(content_type.starts_with("text/html"), "{content_type}");
    let (status, _, json) = get(local, "/status.json", None).await;
    assert_eq!(status, 200, "{json}");
    assert!(json.contains(node_id.as_str()), "{json}");

    // Not from loopback: refused without an operator's token, in one line
    // that says what is needed, and nothing of the fleet in it.
    for path in ["/status", "/status.json", "/anything"] {
        for token in [None, Some("not-a-token")] {
            let (status, content_type, body) = get(remote, path, token).await;
            assert_eq!(status, 403, "{path} {token:?}: {body}");
            assert!(content_type.starts_with("text/plain"), "{content_type}");
            assert_eq!(body.lines().count(), 1, "{body}");
            assert!(body.contains("operator") && body.contains("Bearer"), "{body}");
            assert!(
                !body.contains(node_id.as_str()) && !body.contains("127.0.0.1"),
                "{body}"
            );
        }
    }
    // An operator's token is answered.
    let (status, _, json) = get(remote, "/status.json", Some(DEFAULT_DEV_TOKEN)).await;
    assert_eq!(status, 200, "{json}");
    assert!(json.contains(node_id.as_str()), "{json}");
    let (status, _, page) = get(remote, "/status", Some(DEFAULT_DEV_TOKEN)).await;
    assert_eq!(status, 200, "{page}");
    // Only the token the process authenticates operators with.
    let (status, _, body) = get(own_token, "/status.json", Some(DEFAULT_DEV_TOKEN)).await;
    assert_eq!(status, 403, "{body}");
    let (status, _, json) = get(own_token, "/status.json", Some(SECRET)).await;
    assert_eq!(status, 200, "{json}");
    assert!(json.contains(node_id.as_str()), "{json}");

    // Probes and the scrape: open to everyone.
    for port in [remote, own_token] {
        for path in ["/metrics", "/healthz", "/readyz"] {
            let (status, _, body) = get(port, path, None).await;
            assert_eq!(status, 200, "{path}: {body}");
        }
    }

    // A node's debug page: loopback (as every test connects) or a token.
    let admin = fleet.nodes[0].admin;
    for token in [None, Some(DEFAULT_DEV_TOKEN)] {
        let (status, content_type, body) = get(admin, "/debug/root-ops", token).await;
        assert_eq!(status, 200, "{token:?}: {body}");
        assert!(content_type.starts_with("application/json"), "{content_type}");
    }
}
