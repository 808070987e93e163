//! Outlier detection: nodes whose calls recently timed out or hung.
//!
//! A frozen node (a paused process, a stalled VM) still completes TCP
//! handshakes, so calls to it are not refused — they hang until their
//! deadline. When such a node is a database's top candidate, routing by rank
//! would keep sending that database's calls into it after its lease lapsed.
//! A node whose call ended in a deadline or a broken connection is *suspect*
//! for a short while: candidate and any-node routing try it last. Owner
//! routing is unchanged (while a lease is live only its holder can serve).
//! One answered call clears the mark.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a mark lasts without a new failure.
pub(crate) const SUSPECT_FOR: Duration = Duration::from_secs(5);

/// Endpoints under suspicion, and until when.
#[derive(Default)]
pub(crate) struct Suspects(Mutex<HashMap<String, Instant>>);

impl Suspects {
    /// Marks `endpoint` suspect for [`SUSPECT_FOR`].
    pub(crate) fn mark(&self, endpoint: &str) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(endpoint.to_owned(), Instant::now() + SUSPECT_FOR);
    }

    /// Clears `endpoint` (it answered).
    pub(crate) fn clear(&self, endpoint: &str) {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !map.is_empty() {
            map.remove(endpoint);
        }
    }

    /// Whether `endpoint` is suspect now.
    #[must_use]
    pub(crate) fn is_suspect(&self, endpoint: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(endpoint)
            .is_some_and(|until| *until > Instant::now())
    }

    /// `endpoints` with the suspect ones moved to the end, order otherwise
    /// kept.
    pub(crate) fn order<T>(&self, items: Vec<T>, endpoint: impl Fn(&T) -> &str) -> Vec<T> {
        let (healthy, suspect): (Vec<T>, Vec<T>) = items
            .into_iter()
            .partition(|item| !self.is_suspect(endpoint(item)));
        healthy.into_iter().chain(suspect).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suspects_go_last_until_they_answer() {
        let suspects = Suspects::default();
        let all = vec!["a", "b", "c"];
        assert_eq!(suspects.order(all.clone(), |e| e), ["a", "b", "c"]);
        suspects.mark("a");
        assert_eq!(suspects.order(all.clone(), |e| e), ["b", "c", "a"]);
        suspects.clear("a");
        assert_eq!(suspects.order(all, |e| e), ["a", "b", "c"]);
    }
}
