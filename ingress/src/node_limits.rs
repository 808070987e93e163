//! How many calls this ingress keeps open at each node, learned from the
//! node's own refusals (additive increase, multiplicative decrease, as TCP
//! and Envoy's adaptive concurrency do), and regrown with time.
//!
//! A node at its limit refuses with `corium-shed-scope: node`. Each such
//! refusal shrinks this ingress's limit for the node by a tenth; each
//! answered call grows it by one over the limit. Calls over the limit are
//! refused here, with the same status and hint, without the hop: a refusal
//! made at the ingress costs the node nothing, so under overload the node's
//! CPU goes to work it admits instead of to saying no (`make bench`,
//! `overload`). Refusals about one database or one caller leave the node's
//! limit alone.
//!
//! Nothing a node refused once may stay learned: additive increase alone
//! needs about limit²/2 answered calls to climb back from the floor (and
//! none come while calls are refused here), so one attack on a node left
//! its writes refused for minutes (issue 35). From [`HOLD`] after the last
//! node-wide refusal the limit doubles every [`DOUBLING`], computed when it
//! is read: back from the floor to [`START`] within five seconds of the
//! refusals stopping, with traffic or without. Under real overload the
//! node keeps refusing (many times a second) and the limit stays down.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corium_fleet_wire::overload::{self, Scope};
use tokio::time::Instant;

/// The limit a node starts with, and never exceeds.
const START: f64 = 2048.0;
/// The smallest limit: a node that refuses everything still gets probes.
const FLOOR: f64 = 4.0;
/// What a refusal keeps of the limit.
const DECREASE: f64 = 0.9;
/// The hint of a refusal made here.
const HINT: Duration = Duration::from_millis(50);
/// How long the limit stays where a node-wide refusal left it before it
/// regrows: a burst of refusals is learned whole, not undone between them.
const HOLD: Duration = Duration::from_millis(250);
/// After [`HOLD`], the limit doubles this often until [`START`]: 9
/// doublings from [`FLOOR`], 4.75 s in all. A node that still refuses
/// (every ~75 ms or more often) keeps it from growing.
const DOUBLING: Duration = Duration::from_millis(500);

/// A node's learned limit: its value when last changed, and when the node
/// last refused for its own load (regrowth counts from there).
struct Learned {
    limit: f64,
    refused_at: Option<Instant>,
}

impl Learned {
    /// The limit at `now`: [`Learned::limit`] regrown since the last
    /// refusal, at most [`START`].
    fn at(&self, now: Instant) -> f64 {
        let Some(refused_at) = self.refused_at else {
            return self.limit;
        };
        if self.limit >= START {
            return START;
        }
        let regrowing = now.saturating_duration_since(refused_at).saturating_sub(HOLD);
        let doublings = regrowing.as_secs_f64() / DOUBLING.as_secs_f64();
        // 2^12 is past START / FLOOR: no need to raise further.
        (self.limit * doublings.min(12.0).exp2()).min(START)
    }
}

struct Node {
    open: AtomicUsize,
    learned: Mutex<Learned>,
}

impl Node {
    fn learned(&self) -> std::sync::MutexGuard<'_, Learned> {
        self.learned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The limit now; the clock is read only while one is regrowing (and
    /// once it has regrown whole, no more).
    fn limit(&self) -> f64 {
        let mut learned = self.learned();
        if learned.limit >= START {
            return START;
        }
        let now = learned.at(Instant::now());
        if now >= START {
            learned.limit = START;
        }
        now
    }
}

/// Every node's learned limit.
pub(crate) struct NodeLimits {
    /// Off (`--adaptive-node-limit false`): every call goes to its node.
    enabled: bool,
    nodes: Mutex<HashMap<String, Arc<Node>>>,
}

/// One call open at a node; [`NodePermit::answered`] or
/// [`NodePermit::refused`] tells the limit how it went.
pub(crate) struct NodePermit {
    node: Arc<Node>,
}

impl Drop for NodePermit {
    fn drop(&mut self) {
        self.node.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl NodePermit {
    /// The node answered (anything but a node-wide refusal).
    pub(crate) fn answered(&self) {
        let mut learned = self.node.learned();
        if learned.limit >= START {
            // The usual case: nothing to learn, no clock to read.
            return;
        }
        let now = learned.at(Instant::now());
        learned.limit = if now >= START {
            START
        } else {
            (learned.limit + 1.0 / now).min(START)
        };
    }

    /// The node refused the call for its own load.
    pub(crate) fn refused(&self) {
        let mut learned = self.node.learned();
        let now = Instant::now();
        learned.limit = (learned.at(now) * DECREASE).max(FLOOR);
        learned.refused_at = Some(now);
    }

    /// Tells the limit how a response with `headers` went.
    pub(crate) fn observe(&self, headers: &hyper::http::HeaderMap) {
        let shed_by_node = headers
            .get(overload::SCOPE)
            .and_then(|value| Scope::parse(value.as_bytes()))
            == Some(Scope::Node);
        if shed_by_node {
            self.refused();
        } else {
            self.answered();
        }
    }
}

impl NodeLimits {
    /// Limits that refuse over the learned limit when `enabled`.
    #[must_use]
    pub(crate) fn new(enabled: bool) -> Self {
        Self {
            enabled,
            nodes: Mutex::default(),
        }
    }

    /// Calls this ingress has open at `endpoint` now.
    #[must_use]
    pub(crate) fn open(&self, endpoint: &str) -> usize {
        self.nodes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(endpoint)
            .map_or(0, |node| node.open.load(Ordering::Acquire))
    }

    /// A place for one call at `endpoint`.
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` with a hint when this ingress already has the
    /// node's learned limit of calls open there.
    pub(crate) fn acquire(&self, endpoint: &str) -> Result<NodePermit, tonic::Status> {
        let node = {
            let mut nodes = self
                .nodes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(node) = nodes.get(endpoint) {
                Arc::clone(node)
            } else {
                let node = Arc::new(Node {
                    open: AtomicUsize::new(0),
                    learned: Mutex::new(Learned {
                        limit: START,
                        refused_at: None,
                    }),
                });
                nodes.insert(endpoint.to_owned(), Arc::clone(&node));
                node
            }
        };
        let limit = node.limit();
        let open = node.open.fetch_add(1, Ordering::AcqRel);
        #[allow(clippy::cast_precision_loss)]
        let over = open as f64 >= limit;
        let permit = NodePermit { node };
        if over && self.enabled {
            return Err(overload::refused_for(
                Scope::Ingress,
                format!(
                    "the node serving this database is at its limit of {limit:.0} open calls from this ingress; retry later"
                ),
                HINT,
            ));
        }
        Ok(permit)
    }

    /// The learned limit of `endpoint` now.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn limit(&self, endpoint: &str) -> Option<f64> {
        let nodes = self
            .nodes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        nodes.get(endpoint).map(|node| node.limit())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_shrink_the_limit_and_answers_grow_it_back() {
        let limits = NodeLimits::new(true);
        let permit = limits.acquire("n1").unwrap();
        assert!((limits.limit("n1").unwrap() - START).abs() < f64::EPSILON);
        for _ in 0..100 {
            permit.refused();
        }
        assert!(
            (limits.limit("n1").unwrap() - FLOOR).abs() < f64::EPSILON,
            "floored"
        );
        // At the floor, the fifth open call is refused here.
        let held: Vec<NodePermit> = (0..3).map(|_| limits.acquire("n1").unwrap()).collect();
        let refused = limits.acquire("n1").err().expect("over the learned limit");
        assert!(overload::is_refusal(&refused));
        assert_eq!(overload::scope(refused.metadata()), Some(Scope::Ingress));
        // Another node is not affected.
        assert!(limits.acquire("n2").is_ok());
        drop(held);
        for _ in 0..100 {
            permit.answered();
        }
        assert!(limits.limit("n1").unwrap() > 10.0, "{:?}", limits.limit("n1"));
    }

    #[test]
    fn only_node_wide_refusals_shrink_the_limit() {
        let limits = NodeLimits::new(true);
        let permit = limits.acquire("n1").unwrap();
        for scope in [Scope::Caller, Scope::Database] {
            let status = overload::refused_for(scope, "x".into(), HINT);
            let headers = status.into_http::<tonic::body::Body>().into_parts().0.headers;
            permit.observe(&headers);
        }
        assert!((limits.limit("n1").unwrap() - START).abs() < f64::EPSILON);
        let status = overload::refused_for(Scope::Node, "x".into(), HINT);
        permit.observe(&status.into_http::<tonic::body::Body>().into_parts().0.headers);
        assert!(limits.limit("n1").unwrap() < START);
    }

    fn refusal(scope: Scope) -> hyper::http::HeaderMap {
        let status = overload::refused_for(scope, "x".into(), HINT);
        status.into_http::<tonic::body::Body>().into_parts().0.headers
    }

    /// Issue 35: an attack drove a node's limit to the floor, and writes to
    /// that node were still refused here minutes later. Once the node stops
    /// refusing, the limit is whole again within seconds, with no traffic
    /// at all in between.
    #[tokio::test(start_paused = true)]
    async fn the_limit_recovers_within_seconds_of_the_last_refusal_without_traffic() {
        let limits = NodeLimits::new(true);
        let permit = limits.acquire("n1").unwrap();
        for _ in 0..100 {
            permit.observe(&refusal(Scope::Node));
        }
        drop(permit);
        assert!((limits.limit("n1").unwrap() - FLOOR).abs() < f64::EPSILON);
        // Held where the refusals left it for a moment, then regrowing.
        tokio::time::advance(HOLD).await;
        assert!((limits.limit("n1").unwrap() - FLOOR).abs() < f64::EPSILON);
        tokio::time::advance(Duration::from_secs(1)).await;
        let regrowing = limits.limit("n1").unwrap();
        assert!(regrowing > 2.0 * FLOOR && regrowing < START, "{regrowing}");
        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(
            (limits.limit("n1").unwrap() - START).abs() < f64::EPSILON,
            "back to its start 5.25 s after the last refusal: {:?}",
            limits.limit("n1")
        );
        // And calls are let through again: as many as the start allows.
        let held: Vec<NodePermit> = (0..100).map(|_| limits.acquire("n1").unwrap()).collect();
        assert_eq!(limits.open("n1"), held.len());
    }

    /// Under sustained overload the node keeps refusing, and the limit stays
    /// down: regrowth does not undo the decrease while refusals continue.
    #[tokio::test(start_paused = true)]
    async fn a_node_that_keeps_refusing_keeps_its_limit_down() {
        let limits = NodeLimits::new(true);
        let permit = limits.acquire("n1").unwrap();
        for _ in 0..60 {
            permit.refused();
        }
        assert!((limits.limit("n1").unwrap() - FLOOR).abs() < f64::EPSILON);
        // A refusal every 300 ms (past the hold) for a minute, calls
        // answered in between.
        for _ in 0..200 {
            tokio::time::advance(Duration::from_millis(300)).await;
            permit.answered();
            permit.refused();
        }
        let after = limits.limit("n1").unwrap();
        assert!(after < 16.0, "{after}");
    }

    /// Refusals about one caller or one database (whoever provoked them)
    /// never lower the node's limit, however many and for however long.
    #[tokio::test(start_paused = true)]
    async fn caller_and_database_refusals_never_lower_the_node_limit() {
        let limits = NodeLimits::new(true);
        let permit = limits.acquire("n1").unwrap();
        for _ in 0..1000 {
            permit.observe(&refusal(Scope::Caller));
            permit.observe(&refusal(Scope::Database));
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        assert!((limits.limit("n1").unwrap() - START).abs() < f64::EPSILON);
        let held: Vec<NodePermit> = (0..500).map(|_| limits.acquire("n1").unwrap()).collect();
        assert_eq!(held.len(), 500);
    }
}
