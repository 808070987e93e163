//! The one way a test waits for something: poll until it holds, or fail
//! with what was last seen.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// How long [`eventually`] sleeps between two polls.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Polls `probe` every [`POLL_INTERVAL`] until it answers `Ok`, and returns
/// that value.
///
/// `probe` answers `Ok(value)` once the awaited condition holds, or
/// `Err(state)` describing what it saw instead (the failure message shows
/// the last one; see [`crate::WithLogs`] to add process logs read at the
/// deadline). A probe may itself panic on a state that must never occur
/// while waiting. The first poll is immediate; the last one starts before
/// `within` has passed.
///
/// # Panics
/// When `within` passes without an `Ok`: the message names `what`, the time
/// allowed and the last state seen.
pub async fn eventually<T, E: Display>(
    within: Duration,
    what: impl Display,
    mut probe: impl AsyncFnMut() -> Result<T, E>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        let state = match probe().await {
            Ok(value) => return value,
            Err(state) => state,
        };
        assert!(
            Instant::now() < deadline,
            "{what}: not within {within:?}; last seen: {state}"
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
