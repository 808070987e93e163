//! The ingress's Prometheus metrics.

use std::sync::atomic::{AtomicU64, Ordering};

use corium_fleet_common::metrics::{Durations, Scrape};

/// Counters and histograms of one ingress.
#[derive(Default)]
pub(crate) struct Metrics {
    /// Owner-cache hits.
    pub cache_hits: AtomicU64,
    /// Owner-cache misses (storage reads, coalesced per database).
    pub cache_misses: AtomicU64,
    /// A cached owner answered `NotOwner`: the cache was stale.
    pub cache_stale: AtomicU64,
    /// Storage could not be read, and the last owner seen was used.
    pub stale_owner_served: AtomicU64,
    /// 1 while the last storage probe answered in time, else 0 (a gauge).
    pub storage_up: AtomicU64,
    /// Attempts sent to a transactor (one hop each).
    pub forwarded: AtomicU64,
    /// Owner-dependent calls sent again after an attempt that provably did
    /// not commit (a `NotOwner`, a refused connection, …).
    pub not_owner_retries: AtomicU64,
    /// Requests refused because a client sent fleet-internal metadata
    /// (`corium-hop`, `corium-principal`, `corium-lease-version`).
    pub loop_preventions: AtomicU64,
    /// Owner resolutions that failed (storage could not be read in time).
    pub resolution_failures: AtomicU64,
    /// Connect failures of candidate and any-node calls (each moves on to
    /// the next node).
    pub connect_retries: AtomicU64,
    /// `PeerServer` reads answered by a read replica that is not the owner.
    pub reads_to_replica: AtomicU64,
    /// `PeerServer` reads answered by the owner's node (no other replica
    /// could, or the owner is the only candidate).
    pub reads_to_owner: AtomicU64,
    /// `PeerServer` reads sent to another replica after one refused
    /// (behind the basis asked for, between owners) or could not be reached.
    pub read_retries: AtomicU64,
    /// Attempts whose outcome is unknown (the hop broke after sending).
    pub ambiguous_failures: AtomicU64,
    /// Ambiguous failures of a `Transact` with a request id, retried with
    /// the same id.
    pub ambiguous_retries: AtomicU64,
    /// `Transact` calls that arrived without a request id and got one here.
    pub request_ids_assigned: AtomicU64,
    /// Assigned request ids a database could not take (sent again without).
    pub request_ids_unsupported: AtomicU64,
    /// Nodes marked suspect after a call to them hung or broke.
    pub suspect_marks: AtomicU64,
    /// Requests whose route header disagreed with the body.
    pub rejected_route_mismatch: AtomicU64,
    /// Requests whose first message names no database, or an invalid name
    /// (or cannot be read for one).
    pub rejected_unroutable: AtomicU64,
    /// Requests over the body size limit.
    pub rejected_too_large: AtomicU64,
    /// Requests for methods the fleet does not serve.
    pub rejected_unknown_method: AtomicU64,
    /// Requests refused by the concurrency or per-client rate limit.
    pub rejected_limit: AtomicU64,
    /// Cleartext client connections closed for sending nothing within
    /// `--preface-timeout-ms`.
    pub preface_timeouts: AtomicU64,
    /// Client connections closed at once over `--max-connections` or
    /// `--max-connections-per-client`.
    pub rejected_connections: AtomicU64,
    /// Requests refused `UNAUTHENTICATED`: a missing or wrong credential
    /// where one is required.
    pub rejected_unauthenticated: AtomicU64,
    /// Requests refused because their body stopped arriving for
    /// `--body-progress-timeout-ms`.
    pub rejected_body_stalled: AtomicU64,
    /// Calls refused here because this ingress had the node's learned limit
    /// of calls open there.
    pub rejected_node_limit: AtomicU64,
    /// Retries the retry budget did not allow (the call ended with what was
    /// known).
    pub retry_budget_exhausted: AtomicU64,
    /// Forwarded streams reset because their client took no message for
    /// `--stream-stall-timeout-ms`.
    pub streams_stalled: AtomicU64,
    /// Client connections closed (GOAWAY) after `--max-connection-idle-ms`
    /// with no call open.
    pub connections_closed_idle: AtomicU64,
    /// Client connections closed (GOAWAY) at `--max-connection-age-ms`.
    pub connections_closed_aged: AtomicU64,
    /// Time from receiving a request to its answer's headers, across
    /// attempts.
    pub forward_seconds: Durations,
    /// Every call by method and status code, its duration to the end, and
    /// the calls in flight (end to end, as the client sees them).
    pub calls: corium_fleet_common::metrics::calls::Calls,
}

impl Metrics {
    /// Writes the ingress's own series.
    pub(crate) fn collect(&self, scrape: &mut Scrape<'_>) {
        for (name, help, value) in self.counters() {
            scrape.counter(name, help, value.load(Ordering::Relaxed));
        }
        scrape.counters(
            "corium_fleet_ingress_rejected_requests_total",
            "Requests the ingress answered itself without forwarding, by reason.",
            self.rejections()
                .map(|(reason, value)| ([("reason", reason)], value.load(Ordering::Relaxed))),
        );
        scrape.durations(
            "corium_fleet_ingress_forward_seconds",
            "Time from receiving a request to the owner's response headers.",
            &self.forward_seconds,
        );
        scrape.gauge(
            "corium_fleet_ingress_storage_up",
            "1 while the ingress's storage probe answers in time (routing goes on from the last owners seen when 0).",
            self.storage_up.load(Ordering::Relaxed),
        );
        self.calls.collect(scrape, "corium_fleet_ingress");
        corium_fleet_common::metrics::build_info(scrape, "corium_fleet_ingress", env!("CARGO_PKG_VERSION"));
    }

    /// Requests refused at the ingress, by `reason`: over a limit (the
    /// concurrency or open-calls cap, the client's rate), too large, naming
    /// no valid database, an unknown method, a route header that disagrees
    /// with the body, a missing or wrong credential, a body that stopped
    /// arriving, a node's learned limit, fleet-only metadata from a client.
    fn rejections(&self) -> [(&'static str, &AtomicU64); 9] {
        [
            ("limit", &self.rejected_limit),
            ("too_large", &self.rejected_too_large),
            ("unroutable", &self.rejected_unroutable),
            ("unknown_method", &self.rejected_unknown_method),
            ("route_mismatch", &self.rejected_route_mismatch),
            ("unauthenticated", &self.rejected_unauthenticated),
            ("body_stalled", &self.rejected_body_stalled),
            ("node_limit", &self.rejected_node_limit),
            ("fleet_metadata", &self.loop_preventions),
        ]
    }

    /// Every counter: its metric name, its help text and its value.
    #[allow(clippy::too_many_lines)] // One entry per counter: a table, not logic.
    fn counters(&self) -> [(&'static str, &'static str, &AtomicU64); 22] {
        [
            (
                "corium_fleet_ingress_owner_cache_hits_total",
                "Owner-cache hits.",
                &self.cache_hits,
            ),
            (
                "corium_fleet_ingress_owner_cache_misses_total",
                "Owner-cache misses (storage reads, coalesced per database).",
                &self.cache_misses,
            ),
            (
                "corium_fleet_ingress_stale_owner_served_total",
                "Calls routed on the last owner seen because storage could not be read.",
                &self.stale_owner_served,
            ),
            (
                "corium_fleet_ingress_owner_cache_stale_total",
                "Cached owners that answered NotOwner.",
                &self.cache_stale,
            ),
            (
                "corium_fleet_ingress_forwarded_total",
                "Requests forwarded to a transactor (one hop).",
                &self.forwarded,
            ),
            (
                "corium_fleet_ingress_not_owner_retries_total",
                "Owner-dependent requests sent again after a NotOwner or a refused connection.",
                &self.not_owner_retries,
            ),
            (
                "corium_fleet_ingress_resolution_failures_total",
                "Owner resolutions that failed (storage unavailable).",
                &self.resolution_failures,
            ),
            (
                "corium_fleet_ingress_reads_to_replica_total",
                "PeerServer reads answered by a read replica on a node other than the owner's.",
                &self.reads_to_replica,
            ),
            (
                "corium_fleet_ingress_reads_to_owner_total",
                "PeerServer reads answered on the owner's node.",
                &self.reads_to_owner,
            ),
            (
                "corium_fleet_ingress_read_retries_total",
                "PeerServer reads sent to another replica after one refused or could not be reached.",
                &self.read_retries,
            ),
            (
                "corium_fleet_ingress_connect_retries_total",
                "Requests retried on another node after a connect failure.",
                &self.connect_retries,
            ),
            (
                "corium_fleet_ingress_ambiguous_failures_total",
                "Forwarded requests whose outcome is unknown (connection lost after sending).",
                &self.ambiguous_failures,
            ),
            (
                "corium_fleet_ingress_ambiguous_retries_total",
                "Ambiguous failures of a Transact carrying corium-request-id, retried with the same id (safe: the owner commits an id at most once).",
                &self.ambiguous_retries,
            ),
            (
                "corium_fleet_ingress_request_ids_assigned_total",
                "Transact calls that arrived without corium-request-id and were given one by the ingress.",
                &self.request_ids_assigned,
            ),
            (
                "corium_fleet_ingress_request_ids_unsupported_total",
                "Assigned request ids refused by a database created outside the fleet (sent again without one).",
                &self.request_ids_unsupported,
            ),
            (
                "corium_fleet_ingress_suspect_marks_total",
                "Calls that hung or broke after sending; the node is tried last by candidate routing for 5 s.",
                &self.suspect_marks,
            ),
            (
                "corium_fleet_ingress_preface_timeouts_total",
                "Client connections closed for sending nothing within the preface timeout.",
                &self.preface_timeouts,
            ),
            (
                "corium_fleet_ingress_rejected_connections_total",
                "Client connections closed at once over a connection cap.",
                &self.rejected_connections,
            ),
            (
                "corium_fleet_ingress_retry_budget_exhausted_total",
                "Retries the retry budget did not allow.",
                &self.retry_budget_exhausted,
            ),
            (
                "corium_fleet_ingress_streams_stalled_total",
                "Forwarded streams reset because their client took no message in time.",
                &self.streams_stalled,
            ),
            (
                "corium_fleet_ingress_connections_closed_idle_total",
                "Client connections closed after being idle.",
                &self.connections_closed_idle,
            ),
            (
                "corium_fleet_ingress_connections_closed_aged_total",
                "Client connections closed at their maximum age.",
                &self.connections_closed_aged,
            ),
        ]
    }
}
