//! How the SDK reaches the fleet and how patient it is.

use std::path::PathBuf;
use std::time::Duration;

/// TLS to the fleet address (`https://` endpoints).
#[derive(Clone, Debug)]
pub struct Tls {
    /// PEM CA that signed the ingress's certificate.
    pub ca: PathBuf,
    /// Client certificate and key (PEM), when the address wants mTLS.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// Name to verify the certificate against [default: the endpoint's host].
    pub domain: Option<String>,
}

/// Retries: capped exponential backoff with full jitter, inside a budget.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// Total time one call may spend across its attempts.
    pub budget: Duration,
    /// Attempts at most (the first included).
    pub max_attempts: u32,
    /// Backoff before the second attempt; doubles each time.
    pub initial_backoff: Duration,
    /// Backoff never exceeds this.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// 30 s, 20 attempts, 50 ms doubling to 2 s: enough to ride out a
    /// failover (lease TTL + a renewal interval, 5 s + 1.7 s by default).
    fn default() -> Self {
        Self {
            budget: Duration::from_secs(30),
            max_attempts: 20,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
        }
    }
}

/// Client configuration.
#[derive(Clone)]
pub struct Config {
    /// The fleet address, `http://HOST:PORT` or `https://HOST:PORT`.
    pub endpoint: String,
    /// TLS settings; `None` for an `http://` endpoint.
    pub tls: Option<Tls>,
    /// Connect deadline.
    pub connect_timeout: Duration,
    /// Deadline of one attempt of a unary call.
    pub request_timeout: Duration,
    /// A subscription that delivers nothing (not even a heartbeat) for this
    /// long is reconnected.
    pub stream_idle_timeout: Duration,
    /// How unary calls and subscription reconnects are retried.
    pub retry: RetryPolicy,
    /// Bearer token sent as `authorization: Bearer <token>` on every call
    /// (unary calls, `Subscribe` and its reconnects, `request_status`).
    ///
    /// Default `None`: no `authorization` header, an anonymous caller —
    /// the same default as `corium_peer::ConnectConfig`. A fleet that
    /// requires authentication refuses anonymous calls with
    /// `UNAUTHENTICATED`, which the SDK never retries. The `corium` and
    /// `corium-fleet` command-line tools instead default to Corium's
    /// development token (`corium_protocol::auth::DEFAULT_DEV_TOKEN`); set
    /// it here to behave like them against a development fleet.
    ///
    /// The token is never shown by `Config`'s `Debug` output.
    pub token: Option<String>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("endpoint", &self.endpoint)
            .field("tls", &self.tls)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("stream_idle_timeout", &self.stream_idle_timeout)
            .field("retry", &self.retry)
            .field("token", &self.token.as_ref().map(|_| "[REDACTED]"))
            .finish()
    }
}

impl Config {
    /// Defaults for `endpoint`: 5 s connect, 10 s per attempt, 30 s stream
    /// idle, the default retry policy, no token (anonymous).
    #[must_use]
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            tls: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            stream_idle_timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            token: None,
        }
    }

    /// With TLS.
    #[must_use]
    pub fn with_tls(mut self, tls: Tls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// With a retry policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// With a bearer token, sent on every call (see [`Config::token`]).
    #[must_use]
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_token_is_none_like_corium_peer() {
        assert_eq!(Config::new("http://127.0.0.1:1").token, None);
        assert_eq!(
            Config::new("http://127.0.0.1:1").with_token("t").token.as_deref(),
            Some("t")
        );
    }

    #[test]
    fn debug_redacts_the_token() {
        let shown = format!("{:?}", Config::new("http://127.0.0.1:1").with_token("s3cret"));
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("REDACTED"), "{shown}");
    }
}
