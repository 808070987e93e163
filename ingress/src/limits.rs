//! Admission limits in front of the forwarding path, each rejection a clear
//! gRPC status: a global concurrency limit (`RESOURCE_EXHAUSTED` when full,
//! never an unbounded queue) and a per-client token bucket
//! (`RESOURCE_EXHAUSTED` with the rate in the message). The client is its
//! peer address until client authentication gives the ingress a principal.
//! Body size and deadline caps are applied in the proxy, where the body and
//! `grpc-timeout` are read.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tonic::Status;

/// A token bucket: `rate` tokens a second, at most `burst` saved.
#[derive(Debug)]
pub struct Bucket {
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
    pub fn take(&mut self, rate: f64, burst: f64, now: Instant) -> bool {
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

/// The ingress's admission limits.
pub struct Limits {
    concurrency: Arc<tokio::sync::Semaphore>,
    max_concurrent: usize,
    /// Requests a second per client (0: unlimited).
    rate: f64,
    buckets: moka::sync::Cache<IpAddr, Arc<Mutex<Bucket>>>,
}

/// One admitted request; dropping it frees its concurrency slot.
pub struct Admission {
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Limits {
    /// At most `max_concurrent` requests in flight, and `rate_per_client`
    /// requests a second from one client address (0: unlimited; the burst is
    /// one second's worth).
    #[must_use]
    pub fn new(max_concurrent: usize, rate_per_client: u32) -> Self {
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
        }
    }

    /// Admits a request from `client`, or says why not.
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` over the client's rate or the concurrency limit.
    pub fn admit(&self, client: Option<IpAddr>) -> Result<Admission, Status> {
        if self.rate > 0.0
            && let Some(client) = client
        {
            let burst = self.rate.max(1.0);
            let bucket = self.buckets.get_with(client, || {
                Arc::new(Mutex::new(Bucket::new(burst, Instant::now())))
            });
            let allowed = bucket
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take(self.rate, burst, Instant::now());
            if !allowed {
                return Err(Status::resource_exhausted(format!(
                    "client {client} is over its limit of {} requests a second; retry later",
                    self.rate
                )));
            }
        }
        let permit = Arc::clone(&self.concurrency).try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "the ingress is at its limit of {} concurrent requests; retry later",
                self.max_concurrent
            ))
        })?;
        Ok(Admission { _permit: permit })
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
        let limits = Limits::new(2, 0);
        let first = limits.admit(None).unwrap();
        let _second = limits.admit(None).unwrap();
        let refused = limits.admit(None).err().unwrap();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        drop(first);
        assert!(limits.admit(None).is_ok());
    }

    #[test]
    fn rate_limit_is_per_client() {
        let limits = Limits::new(100, 1);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        assert!(limits.admit(Some(a)).is_ok());
        assert_eq!(
            limits.admit(Some(a)).err().unwrap().code(),
            tonic::Code::ResourceExhausted
        );
        assert!(limits.admit(Some(b)).is_ok());
    }
}
