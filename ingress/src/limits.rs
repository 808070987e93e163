//! Admission limits in front of the forwarding path, each refusal a
//! `RESOURCE_EXHAUSTED` with a retry hint (`corium_fleet_wire::overload`):
//! a global concurrency limit (never an unbounded queue), a cap on the calls
//! one client address has open (streams until they end), and a per-client
//! token bucket keyed by the principal the caller authenticated as (by its
//! address when anonymous: behind a load balancer, anonymous callers share
//! one). Body size and deadline caps are applied in the proxy, where the
//! body and `grpc-timeout` are read.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corium_fleet_common::counted::{Counted, Counts};
use corium_fleet_wire::overload;
use tonic::Status;

/// A token bucket: `rate` tokens a second, at most `burst` saved.
#[derive(Debug)]
pub(crate) struct Bucket {
    tokens: f64,
    updated: Instant,
}

impl Bucket {
    fn new(burst: f64, now: Instant) -> Self {
        Self {
            tokens: burst,
            updated: now,
        }
    }

    /// Takes one token if there is one.
    pub(crate) fn take(&mut self, rate: f64, burst: f64, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.updated = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Whom a rate limit counts against: the principal a caller authenticated
/// as, or, for anonymous callers, its address.
#[derive(Clone, Debug, Eq, Hash, PartialEq)]
pub(crate) enum ClientKey {
    /// An anonymous caller, by address.
    Address(IpAddr),
    /// An authenticated principal (`provider:subject`).
    Principal(Arc<str>),
}

impl std::fmt::Display for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Address(ip) => write!(f, "client {ip}"),
            Self::Principal(name) => write!(f, "principal {name}"),
        }
    }
}

/// The ingress's admission limits.
pub(crate) struct Limits {
    concurrency: Arc<tokio::sync::Semaphore>,
    max_concurrent: usize,
    /// Requests a second per client (0: unlimited).
    rate: f64,
    buckets: moka::sync::Cache<ClientKey, Arc<Mutex<Bucket>>>,
    /// Calls open per client address, streams until they end.
    streams: Counts<IpAddr>,
    max_streams_per_client: usize,
}

/// One admitted request; dropping it frees its concurrency slot.
pub(crate) struct Admission {
    _permit: tokio::sync::OwnedSemaphorePermit,
    /// The client's open-call place, to be held by the response body.
    pub stream: Option<StreamSlot>,
}

/// A client's place for one open call; given back when dropped (with the
/// response body, so a stream holds it for its life).
pub(crate) type StreamSlot = Counted<IpAddr>;

/// How soon a caller refused for concurrency may try again.
const BUSY_HINT: Duration = Duration::from_millis(100);

impl Limits {
    /// At most `max_concurrent` requests in flight, `max_streams_per_client`
    /// calls open from one address, and `rate_per_client` requests a second
    /// from one client (0: unlimited; the burst is one second's worth).
    #[must_use]
    pub(crate) fn new(max_concurrent: usize, max_streams_per_client: usize, rate_per_client: u32) -> Self {
        Self {
            concurrency: Arc::new(tokio::sync::Semaphore::new(max_concurrent)),
            max_concurrent,
            rate: f64::from(rate_per_client),
            // Idle clients' buckets are full again after burst/rate seconds;
            // forgetting them after a minute loses nothing.
            buckets: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_idle(Duration::from_mins(1))
                .build(),
            streams: Counts::new(),
            max_streams_per_client,
        }
    }

    /// Admits a request from `client` under the concurrency limits, or says
    /// why not.
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` with a retry hint over the ingress's concurrency
    /// limit or the client's open calls.
    pub(crate) fn admit(&self, client: Option<IpAddr>) -> Result<Admission, Status> {
        let stream = match client {
            Some(client) => {
                let Some(place) = self.streams.enter(&client, self.max_streams_per_client) else {
                    return Err(overload::refused_for(
                        overload::Scope::Caller,
                        format!(
                            "client {client} has {} calls open, its limit; retry later",
                            self.max_streams_per_client
                        ),
                        BUSY_HINT,
                    ));
                };
                Some(place)
            }
            None => None,
        };
        let permit = Arc::clone(&self.concurrency).try_acquire_owned().map_err(|_| {
            overload::refused_for(
                overload::Scope::Ingress,
                format!(
                    "the ingress is at its limit of {} concurrent requests; retry later",
                    self.max_concurrent
                ),
                BUSY_HINT,
            )
        })?;
        Ok(Admission {
            _permit: permit,
            stream,
        })
    }

    /// Whether a per-client rate is set (`--rate-limit-per-client`).
    #[must_use]
    pub(crate) fn rates(&self) -> bool {
        self.rate > 0.0
    }

    /// Counts a request against `client`'s rate.
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` with the time until the next allowed request.
    pub(crate) fn rate(&self, client: &ClientKey) -> Result<(), Status> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let burst = self.rate.max(1.0);
        let bucket = self.buckets.get_with_by_ref(client, || {
            Arc::new(Mutex::new(Bucket::new(burst, Instant::now())))
        });
        let allowed = bucket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take(self.rate, burst, Instant::now());
        if allowed {
            Ok(())
        } else {
            Err(overload::refused_for(
                overload::Scope::Caller,
                format!(
                    "{client} is over its limit of {} requests a second; retry later",
                    self.rate
                ),
                Duration::from_secs_f64(1.0 / self.rate),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_refills_at_the_rate_and_caps_at_the_burst() {
        let start = Instant::now();
        let mut bucket = Bucket::new(2.0, start);
        assert!(bucket.take(10.0, 2.0, start));
        assert!(bucket.take(10.0, 2.0, start));
        assert!(!bucket.take(10.0, 2.0, start));
        assert!(bucket.take(10.0, 2.0, start + Duration::from_millis(100)));
        // A long idle period refills only up to the burst.
        let later = start + Duration::from_mins(1);
        assert!(bucket.take(10.0, 2.0, later));
        assert!(bucket.take(10.0, 2.0, later));
        assert!(!bucket.take(10.0, 2.0, later));
    }

    #[test]
    fn concurrency_limit_rejects_instead_of_queueing() {
        let limits = Limits::new(2, 100, 0);
        let first = limits.admit(None).unwrap();
        let _second = limits.admit(None).unwrap();
        let refused = limits.admit(None).err().unwrap();
        assert!(overload::is_refusal(&refused), "{refused:?}");
        drop(first);
        assert!(limits.admit(None).is_ok());
    }

    #[test]
    fn rate_limit_is_per_client() {
        let limits = Limits::new(100, 100, 1);
        let a = ClientKey::Address("127.0.0.1".parse().unwrap());
        let b = ClientKey::Address("127.0.0.2".parse().unwrap());
        let alice = ClientKey::Principal("token:alice".into());
        assert!(limits.rate(&a).is_ok());
        let refused = limits.rate(&a).err().unwrap();
        assert!(overload::is_refusal(&refused), "{refused:?}");
        assert!(limits.rate(&b).is_ok());
        assert!(limits.rate(&alice).is_ok());
        assert!(limits.rate(&alice).is_err());
    }

    #[test]
    fn open_calls_are_capped_per_address_until_their_streams_end() {
        let limits = Limits::new(100, 2, 0);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let first = limits.admit(Some(a)).unwrap();
        let second = limits.admit(Some(a)).unwrap();
        // The concurrency permits end at the response headers; the stream
        // places live on in the bodies.
        let (one, two) = (first.stream, second.stream);
        assert!(overload::is_refusal(&limits.admit(Some(a)).err().unwrap()));
        assert!(limits.admit(Some("127.0.0.2".parse().unwrap())).is_ok());
        drop(one);
        let third = limits.admit(Some(a)).unwrap();
        drop((two, third));
        assert_eq!(limits.streams.keys(), 0, "finished clients are forgotten");
    }
}
