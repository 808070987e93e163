//! The pace of a background loop: a tick every period until shutdown.

use std::time::Duration;

use tokio::sync::watch;

/// Ticks every `period` (a tick missed while the loop worked is delayed,
/// not bunched) until `shutdown` turns true or its sender is gone.
pub struct Every {
    ticks: tokio::time::Interval,
    shutdown: watch::Receiver<bool>,
}

impl Every {
    /// A pace of `period`; the first tick is at once.
    #[must_use]
    pub fn new(period: Duration, shutdown: watch::Receiver<bool>) -> Self {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self { ticks, shutdown }
    }

    /// Waits for the next tick: `true`, or `false` once shutdown is asked
    /// for (then the loop ends).
    pub async fn tick(&mut self) -> bool {
        if *self.shutdown.borrow() {
            return false;
        }
        tokio::select! {
            _ = self.shutdown.wait_for(|stop| *stop) => false,
            _ = self.ticks.tick() => true,
        }
    }
}

impl Every {
    /// [`Self::tick`], or sooner when `nudge` is notified (the next tick is
    /// then a period later).
    pub async fn tick_or(&mut self, nudge: &tokio::sync::Notify) -> bool {
        if *self.shutdown.borrow() {
            return false;
        }
        tokio::select! {
            _ = self.shutdown.wait_for(|stop| *stop) => false,
            _ = self.ticks.tick() => true,
            () = nudge.notified() => {
                self.ticks.reset();
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn ticks_until_shutdown() {
        let (stop, shutdown) = watch::channel(false);
        let mut every = Every::new(Duration::from_secs(1), shutdown);
        let started = tokio::time::Instant::now();
        assert!(every.tick().await, "the first tick is at once");
        assert!(every.tick().await);
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        stop.send(true).unwrap();
        assert!(!every.tick().await);
        drop(stop);
        assert!(!every.tick().await, "and stays over");
    }

    #[tokio::test(start_paused = true)]
    async fn a_nudge_ticks_at_once() {
        let (_stop, shutdown) = watch::channel(false);
        let mut every = Every::new(Duration::from_hours(1), shutdown);
        let nudge = tokio::sync::Notify::new();
        assert!(every.tick_or(&nudge).await, "the first tick is at once");
        let started = tokio::time::Instant::now();
        nudge.notify_one();
        assert!(every.tick_or(&nudge).await);
        assert_eq!(started.elapsed(), Duration::ZERO, "nudged, not an hour later");
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_sender_ends_the_loop() {
        let (stop, shutdown) = watch::channel(false);
        let mut every = Every::new(Duration::from_hours(1), shutdown);
        assert!(every.tick().await);
        drop(stop);
        assert!(!every.tick().await);
    }
}
