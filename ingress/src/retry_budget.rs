//! The ingress's retry budget: retries that cost a node work are allowed
//! as a fraction of the calls the ingress takes, plus a small floor a
//! second, so that when nodes fail or shed load the ingress adds at most
//! that much work on top of what clients send (Finagle's and linkerd's
//! budget, as a token bucket).
//!
//! Redirects that cost no work — after a typed `NotOwner`, or a connection
//! the node refused — are not charged: they are routing, not retries.

use std::sync::Mutex;
use std::time::Instant;

/// How many seconds of the floor (and of deposits) the budget can save.
const SAVE_SECONDS: f64 = 10.0;
/// One retry, less the rounding of adding up fractions (five deposits of
/// 0.2 make 0.999…).
const ONE: f64 = 1.0 - 1e-9;

/// A shared retry budget.
pub(crate) struct RetryBudget {
    /// Budget added per call taken.
    ratio: f64,
    /// Budget added a second, whatever the traffic.
    floor: f64,
    /// Most budget saved: ten seconds of the floor, plus as many deposits.
    cap: f64,
    state: Mutex<State>,
}

struct State {
    balance: f64,
    updated: Instant,
}

impl RetryBudget {
    /// `ratio` retries per call taken, plus `floor` a second.
    #[must_use]
    pub(crate) fn new(ratio: f64, floor: u32) -> Self {
        let floor = f64::from(floor);
        let cap = (floor * SAVE_SECONDS).max(1.0) + ratio * 1000.0;
        Self {
            ratio,
            floor,
            cap,
            state: Mutex::new(State {
                balance: floor * SAVE_SECONDS,
                updated: Instant::now(),
            }),
        }
    }

    fn with<T>(&self, now: Instant, f: impl FnOnce(&mut f64) -> T) -> T {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let elapsed = now.saturating_duration_since(state.updated).as_secs_f64();
        state.balance = (state.balance + elapsed * self.floor).min(self.cap);
        state.updated = now;
        f(&mut state.balance)
    }

    /// A call was taken: its share of retries goes into the budget.
    pub(crate) fn deposit(&self) {
        self.deposit_at(Instant::now());
    }

    fn deposit_at(&self, now: Instant) {
        let (ratio, cap) = (self.ratio, self.cap);
        self.with(now, |balance| *balance = (*balance + ratio).min(cap));
    }

    /// Whether a retry is in the budget now (without taking it).
    pub(crate) fn available(&self) -> bool {
        self.with(Instant::now(), |balance| *balance >= ONE)
    }

    /// Takes one retry from the budget, if there is one.
    pub(crate) fn withdraw(&self) -> bool {
        self.withdraw_at(Instant::now())
    }

    fn withdraw_at(&self, now: Instant) -> bool {
        self.with(now, |balance| {
            if *balance >= ONE {
                *balance = (*balance - 1.0).max(0.0);
                true
            } else {
                false
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn retries_are_a_fraction_of_calls_once_the_savings_are_spent() {
        let budget = RetryBudget::new(0.2, 0);
        let now = Instant::now();
        // No floor, nothing saved: retries come only from calls taken.
        assert!(!budget.withdraw_at(now));
        for _ in 0..100 {
            budget.deposit_at(now);
        }
        let allowed = (0..100).filter(|_| budget.withdraw_at(now)).count();
        assert_eq!(allowed, 20, "a fifth of 100 calls");
    }

    #[test]
    fn the_floor_refills_with_time_and_is_capped() {
        let budget = RetryBudget::new(0.0, 10);
        let start = Instant::now();
        // Ten seconds of the floor saved at start.
        assert_eq!((0..200).filter(|_| budget.withdraw_at(start)).count(), 100);
        assert!(!budget.withdraw_at(start));
        let later = start + Duration::from_secs(1);
        assert_eq!((0..200).filter(|_| budget.withdraw_at(later)).count(), 10);
        // A long quiet spell saves no more than the cap.
        let much_later = later + Duration::from_hours(1);
        assert_eq!((0..500).filter(|_| budget.withdraw_at(much_later)).count(), 100);
    }
}
