//! Capped exponential backoff with full jitter, bounded by attempts and a
//! time budget.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::RetryPolicy;

/// One call's retry state.
pub struct Backoff {
    policy: RetryPolicy,
    started: Instant,
    attempts: u32,
    /// xorshift state for jitter (seeded from a random UUID).
    seed: u64,
}

impl Backoff {
    /// A call's first attempt under `policy`; the budget runs from now.
    #[must_use]
    pub fn new(policy: &RetryPolicy) -> Self {
        let seed = u64::try_from(uuid::Uuid::new_v4().as_u128() & u128::from(u64::MAX)).unwrap_or(1) | 1;
        Self {
            policy: policy.clone(),
            started: Instant::now(),
            attempts: 1,
            seed,
        }
    }

    /// Attempts made so far.
    #[must_use]
    pub const fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The time left in the budget.
    #[must_use]
    pub fn remaining(&self) -> Duration {
        self.policy.budget.saturating_sub(self.started.elapsed())
    }

    /// The cap of the next backoff: `initial × 2^(attempts-1)`, at most
    /// `max_backoff`.
    #[must_use]
    pub fn cap(&self) -> Duration {
        let shift = self.attempts.saturating_sub(1).min(20);
        self.policy
            .initial_backoff
            .saturating_mul(1 << shift)
            .min(self.policy.max_backoff)
    }

    fn jitter(&mut self, cap: Duration) -> Duration {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let cap_ms = u64::try_from(cap.as_millis()).unwrap_or(u64::MAX).max(1);
        Duration::from_millis(self.seed % (cap_ms + 1))
    }

    /// Waits before the next attempt, or returns `false` when attempts or
    /// budget are spent (the wait never overruns the budget).
    pub async fn wait(&mut self) -> bool {
        self.wait_at_least(None).await
    }

    /// [`wait`](Self::wait), but no shorter than `hint` (a server's retry
    /// hint, `google.rpc.RetryInfo`): a refusal for load is honoured, not
    /// answered with a faster retry.
    pub async fn wait_at_least(&mut self, hint: Option<Duration>) -> bool {
        if self.attempts >= self.policy.max_attempts {
            return false;
        }
        let cap = self.cap();
        let delay = self.jitter(cap).max(hint.unwrap_or_default());
        if delay >= self.remaining() {
            return false;
        }
        tokio::time::sleep(delay).await;
        self.attempts += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(attempts: u32, budget_ms: u64) -> RetryPolicy {
        RetryPolicy {
            budget: Duration::from_millis(budget_ms),
            max_attempts: attempts,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(80),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_doubles_to_the_cap_and_stops_at_the_attempt_limit() {
        let mut backoff = Backoff::new(&policy(6, 60_000));
        let mut caps = vec![backoff.cap()];
        while backoff.wait().await {
            caps.push(backoff.cap());
        }
        let ms: Vec<u128> = caps.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [10, 20, 40, 80, 80, 80]);
        assert_eq!(backoff.attempts(), 6);
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_bounds_the_total_wait() {
        let mut backoff = Backoff::new(&policy(1000, 500));
        let started = tokio::time::Instant::now();
        while backoff.wait().await {}
        assert!(
            started.elapsed() <= Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        assert!(backoff.attempts() > 5, "it did retry: {}", backoff.attempts());
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_hint_lengthens_the_wait_but_never_past_the_budget() {
        let mut backoff = Backoff::new(&policy(10, 1000));
        let started = tokio::time::Instant::now();
        assert!(backoff.wait_at_least(Some(Duration::from_millis(300))).await);
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "{:?}",
            started.elapsed()
        );
        // A hint longer than what is left of the budget ends the retries.
        assert!(!backoff.wait_at_least(Some(Duration::from_secs(5))).await);
    }

    #[test]
    fn jitter_stays_within_the_cap() {
        let mut backoff = Backoff::new(&policy(10, 1000));
        for _ in 0..1000 {
            assert!(backoff.jitter(Duration::from_millis(40)) <= Duration::from_millis(40));
        }
    }
}
