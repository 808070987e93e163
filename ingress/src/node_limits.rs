//! How many calls this ingress keeps open at each node, learned from the
//! node's own refusals (additive increase, multiplicative decrease, as TCP
//! and Envoy's adaptive concurrency do).
//!
//! A node at its limit refuses with `corium-shed-scope: node`. Each such
//! refusal shrinks this ingress's limit for the node by a tenth; each
//! answered call grows it by one over the limit. Calls over the limit are
//! refused here, with the same status and hint, without the hop: a refusal
//! made at the ingress costs the node nothing, so under overload the node's
//! CPU goes to work it admits instead of to saying no (`make bench`,
//! `overload`). Refusals about one database or one caller leave the node's
//! limit alone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corium_fleet_wire::overload::{self, Scope};

/// The limit a node starts with, and never exceeds.
const START: f64 = 2048.0;
/// The smallest limit: a node that refuses everything still gets probes.
const FLOOR: f64 = 4.0;
/// What a refusal keeps of the limit.
const DECREASE: f64 = 0.9;
/// The hint of a refusal made here.
const HINT: Duration = Duration::from_millis(50);

struct Node {
    open: AtomicUsize,
    limit: Mutex<f64>,
}

/// Every node's learned limit.
pub struct NodeLimits {
    /// Off (`--adaptive-node-limit false`): every call goes to its node.
    enabled: bool,
    nodes: Mutex<HashMap<String, Arc<Node>>>,
}

/// One call open at a node; [`NodePermit::answered`] or
/// [`NodePermit::refused`] tells the limit how it went.
pub struct NodePermit {
    node: Arc<Node>,
}

impl Drop for NodePermit {
    fn drop(&mut self) {
        self.node.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl NodePermit {
    /// The node answered (anything but a node-wide refusal).
    pub fn answered(&self) {
        let mut limit = self
            .node
            .limit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *limit = (*limit + 1.0 / *limit).min(START);
    }

    /// The node refused the call for its own load.
    pub fn refused(&self) {
        let mut limit = self
            .node
            .limit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *limit = (*limit * DECREASE).max(FLOOR);
    }

    /// Tells the limit how a response with `headers` went.
    pub fn observe(&self, headers: &hyper::http::HeaderMap) {
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
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            nodes: Mutex::default(),
        }
    }

    /// Calls this ingress has open at `endpoint` now.
    #[must_use]
    pub fn open(&self, endpoint: &str) -> usize {
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
    pub fn acquire(&self, endpoint: &str) -> Result<NodePermit, tonic::Status> {
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
                    limit: Mutex::new(START),
                });
                nodes.insert(endpoint.to_owned(), Arc::clone(&node));
                node
            }
        };
        let limit = *node
            .limit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
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

    /// The learned limit of `endpoint` (for tests and metrics).
    #[must_use]
    pub fn limit(&self, endpoint: &str) -> Option<f64> {
        let nodes = self
            .nodes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        nodes.get(endpoint).map(|node| {
            *node
                .limit
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        })
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
}
