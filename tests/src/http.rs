//! Plain HTTP/1.1 on the admin port: readiness and Prometheus metrics.

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// One sample of a Prometheus text exposition, by its full series name
/// (`name` or `name{labels}`); `None` when the series is absent, so a check
/// on a counter fails if the counter is not exported at all.
#[must_use]
pub fn metric(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|line| {
        let (key, value) = line.rsplit_once(' ')?;
        (key == series).then(|| value.trim().parse().ok()).flatten()
    })
}

/// A plain HTTP/1.1 GET on loopback: `(status, body)`; `None` when the
/// server does not answer within 5 s.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .await
            .ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.ok()?;
        let status = answer.get(9..12)?.parse().ok()?;
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_owned())
            .unwrap_or_default();
        Some((status, body))
    };
    tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .ok()
        .flatten()
}
