//! The node's own Prometheus series: a handful of atomics, each written
//! into the scrape by [`Metrics::collect`] (`admin_http.rs` adds the
//! components' collectors and serves the exposition).

use std::sync::atomic::{AtomicU64, Ordering};

use corium_fleet_common::metrics::{Durations, Scrape};

/// Counters and histograms of one node.
#[derive(Default)]
pub struct Metrics {
    /// Gauge refreshed by each standby-watcher pass.
    pub standby: AtomicU64,
    /// Lease renewals seen by the cell monitors (expiry moved forward).
    pub lease_renewals: AtomicU64,
    /// Renewals that failed until the lease expired locally.
    pub lease_renewal_failures: AtomicU64,
    /// `NotOwner` answers.
    pub not_owner: AtomicU64,
    /// Cells opened (acquire + recover).
    pub activations: AtomicU64,
    /// Activations that failed (storage, recovery).
    pub activation_failures: AtomicU64,
    /// Activations after another owner's lease lapsed.
    pub takeovers: AtomicU64,
    /// Cells dropped because Corium found their lease lost.
    pub depositions: AtomicU64,
    /// Cells released gracefully (idle, handoff, drain).
    pub evictions: AtomicU64,
    /// Cells dropped after a commit failed in storage (`Host::reset`).
    pub resets: AtomicU64,
    /// Cells released after being idle past `--idle-evict-after-ms`.
    pub idle_evictions: AtomicU64,
    /// Handoffs the target activated.
    pub handoffs: AtomicU64,
    /// `Transact` calls with a request id that committed.
    pub request_id_commits: AtomicU64,
    /// `Transact` calls with a request id already committed: answered from
    /// the durable record.
    pub request_id_replays: AtomicU64,
    /// `Transact` calls whose request id was already used by a different
    /// transaction, or fenced by a status query: refused, nothing committed.
    pub request_id_conflicts: AtomicU64,
    /// `Subscribe` calls refused at a subscription limit.
    pub subscriptions_refused: AtomicU64,
    /// Calls refused `PERMISSION_DENIED` by the fleet's own authorization
    /// (the authorizer, or the operator check).
    pub denied: AtomicU64,
    /// Calls refused `UNAUTHENTICATED` or `PERMISSION_DENIED` before any
    /// service ran: a missing or wrong credential, a forged principal.
    pub unauthenticated: AtomicU64,
    /// Handoffs whose target did not activate (the database is left cold).
    pub handoff_failures: AtomicU64,
    /// Handoffs started because this node stopped being a candidate.
    pub rebalances: AtomicU64,
    /// Requests refused for a route header that disagreed with the body
    /// (or other bad fleet metadata).
    pub rejected_route_mismatch: AtomicU64,
    /// Requests refused for a second hop.
    pub rejected_hop: AtomicU64,
    /// The node's memory budget in bytes (0: none).
    pub memory_budget_bytes: AtomicU64,
    /// What the node is estimated to hold, in bytes (`host/memory.rs`).
    pub memory_used_bytes: AtomicU64,
    /// Writes refused while the node was over its budget with no candidate
    /// to hand a database to.
    pub memory_write_refusals: AtomicU64,
    /// The part of it its read replicas hold.
    pub memory_replica_bytes: AtomicU64,
    /// The part of it that is not a cache (used less warm standbys and read
    /// replicas): what the node publishes to its peers as used, so that a
    /// cache never makes it look full.
    pub memory_firm_bytes: AtomicU64,
    /// Activations refused for memory (over budget, or a database too
    /// large for it).
    pub memory_refusals: AtomicU64,
    /// Activations this node had no memory for, sent to a candidate whose
    /// load showed room (a `NotOwner` naming it).
    pub memory_redirects: AtomicU64,
    /// Idle databases evicted to stay within the memory budget.
    pub memory_evictions: AtomicU64,
    /// Databases handed to a less busy candidate by load-aware placement.
    pub load_moves: AtomicU64,
    /// Request records retracted past the retention window.
    pub request_ids_expired: AtomicU64,
    /// Databases handed to another candidate to stay within the budget.
    pub memory_handoffs: AtomicU64,
    /// Ownership decisions that could not be verified (storage).
    pub storage_unavailable: AtomicU64,
    /// Time to activate a cell, lease and recovery included.
    pub activation_seconds: Durations,
    /// Time Corium took to open and recover a cell.
    pub recovery_seconds: Durations,
    /// Write unavailability of completed handoffs.
    pub handoff_seconds: Durations,
    /// Every call served, by method and status code, and its duration.
    pub calls: corium_fleet_common::metrics::calls::Calls,
}

impl Metrics {
    /// Writes the node's own series: `owned` databases (`owned_by_rank`
    /// by this node's candidate rank), `map_refused` placement map reloads.
    // One table of (name, help, value) rows: long, and clearer whole.
    #[allow(clippy::too_many_lines)]
    pub fn collect(
        &self,
        scrape: &mut Scrape<'_>,
        owned: usize,
        owned_by_rank: &[(String, u64)],
        map_refused: u64,
    ) {
        let load = |value: &AtomicU64| value.load(Ordering::Relaxed);
        scrape.gauge(
            "corium_fleet_databases_owned",
            "Databases whose write lease this node holds.",
            owned,
        );
        scrape.gauge(
            "corium_fleet_memory_budget_bytes",
            "The node's memory budget (--memory-budget-mib; 0: none).",
            load(&self.memory_budget_bytes),
        );
        scrape.gauge(
            "corium_fleet_memory_used_bytes",
            "What the node is estimated to hold against its budget: base, open databases by history, read-ahead, warm standbys, read replicas.",
            load(&self.memory_used_bytes),
        );
        scrape.gauge(
            "corium_fleet_memory_firm_bytes",
            "The part of the estimate that is not a cache (used less warm standbys and read replicas): the load published to peers.",
            load(&self.memory_firm_bytes),
        );
        scrape.gauge(
            "corium_fleet_memory_replica_bytes",
            "The part of the estimate the node's read replicas hold (dropped first past the budget).",
            load(&self.memory_replica_bytes),
        );
        scrape.counter(
            "corium_fleet_memory_refusals_total",
            "Activations refused RESOURCE_EXHAUSTED for memory (over budget, or a database too large for it).",
            load(&self.memory_refusals),
        );
        scrape.counter(
            "corium_fleet_memory_write_refusals_total",
            "Writes refused RESOURCE_EXHAUSTED while the node was over its memory budget and no candidate had room for a database.",
            load(&self.memory_write_refusals),
        );
        scrape.counter(
            "corium_fleet_memory_redirects_total",
            "Activations this node had no memory for, sent to a candidate whose published load showed room.",
            load(&self.memory_redirects),
        );
        scrape.counter(
            "corium_fleet_request_ids_expired_total",
            "Request-id records retracted past --request-id-retention-secs (their memory goes at the next open).",
            load(&self.request_ids_expired),
        );
        scrape.counter(
            "corium_fleet_load_moves_total",
            "Databases handed to a less busy candidate by load-aware placement (--load-balance).",
            load(&self.load_moves),
        );
        scrape.counter(
            "corium_fleet_memory_evictions_total",
            "Idle databases evicted to stay within the memory budget.",
            load(&self.memory_evictions),
        );
        scrape.counter(
            "corium_fleet_memory_handoffs_total",
            "Databases handed to another candidate to stay within the memory budget.",
            load(&self.memory_handoffs),
        );
        scrape.gauge(
            "corium_fleet_databases_standby",
            "Databases this node is a candidate for that another live node owns (watched for a lapse).",
            load(&self.standby),
        );
        scrape.counter(
            "corium_fleet_lease_renewals_total",
            "Lease renewals observed on owned databases (expiry moved forward).",
            load(&self.lease_renewals),
        );
        scrape.counter(
            "corium_fleet_lease_renewal_failures_total",
            "Owned databases whose lease could not be renewed before it expired.",
            load(&self.lease_renewal_failures),
        );
        scrape.counter(
            "corium_fleet_not_owner_total",
            "NotOwner answers.",
            load(&self.not_owner),
        );
        scrape.counter(
            "corium_fleet_activations_total",
            "Databases activated (lease acquired and recovered) on this node.",
            load(&self.activations),
        );
        scrape.counter(
            "corium_fleet_activation_failures_total",
            "Activation attempts that failed.",
            load(&self.activation_failures),
        );
        scrape.counter(
            "corium_fleet_takeovers_total",
            "Activations after another owner's lease lapsed.",
            load(&self.takeovers),
        );
        scrape.counter(
            "corium_fleet_depositions_total",
            "Cells dropped because another owner took the lease.",
            load(&self.depositions),
        );
        scrape.counter(
            "corium_fleet_evictions_total",
            "Cells released gracefully (idle, shutdown).",
            load(&self.evictions),
        );
        scrape.counter(
            "corium_fleet_cell_resets_total",
            "Cells dropped and recovered from storage after a commit failed in storage.",
            load(&self.resets),
        );
        scrape.counter(
            "corium_fleet_idle_evictions_total",
            "Cells released because they sat idle past --idle-evict-after-ms.",
            load(&self.idle_evictions),
        );
        scrape.counter(
            "corium_fleet_rejected_route_mismatch_total",
            "Requests whose route header disagreed with the body.",
            load(&self.rejected_route_mismatch),
        );
        scrape.counter(
            "corium_fleet_rejected_hop_total",
            "Requests refused for carrying more than one hop.",
            load(&self.rejected_hop),
        );
        scrape.counter(
            "corium_fleet_storage_unavailable_total",
            "Requests answered UNAVAILABLE because ownership could not be verified.",
            load(&self.storage_unavailable),
        );
        scrape.counter(
            "corium_fleet_request_id_commits_total",
            "Transactions with a corium-request-id that committed.",
            load(&self.request_id_commits),
        );
        scrape.counter(
            "corium_fleet_request_id_replays_total",
            "Transactions with an already-committed corium-request-id, answered from the durable record.",
            load(&self.request_id_replays),
        );
        scrape.counter(
            "corium_fleet_request_id_conflicts_total",
            "Transactions refused because their corium-request-id was used by a different transaction or fenced.",
            load(&self.request_id_conflicts),
        );
        scrape.counter(
            "corium_fleet_subscriptions_refused_total",
            "Subscribe calls refused at --max-subscriptions or --max-subscriptions-per-database.",
            load(&self.subscriptions_refused),
        );
        scrape.counter(
            "corium_fleet_denied_total",
            "Calls refused by the fleet's authorization (policy or operator check).",
            load(&self.denied),
        );
        scrape.counter(
            "corium_fleet_unauthenticated_total",
            "Calls refused before any service ran: missing or wrong credentials, a forged principal.",
            load(&self.unauthenticated),
        );
        scrape.counter(
            "corium_fleet_handoffs_total",
            "Databases handed to another node (admin, drain, rebalance) that it activated.",
            load(&self.handoffs),
        );
        scrape.counter(
            "corium_fleet_handoff_failures_total",
            "Handoffs whose target did not activate (the database was left cold).",
            load(&self.handoff_failures),
        );
        scrape.counter(
            "corium_fleet_rebalances_total",
            "Owned databases handed off because this node stopped being a candidate.",
            load(&self.rebalances),
        );
        scrape.counter(
            "corium_fleet_placement_map_refused_total",
            "Placement map reloads refused (the previous map stayed in force).",
            map_refused,
        );
        scrape.gauges(
            "corium_fleet_databases_owned_by_rank",
            "Owned databases by this node's candidate rank (none: not a candidate).",
            owned_by_rank
                .iter()
                .map(|(rank, count)| ([("rank", rank.as_str())], *count)),
        );
        scrape.durations(
            "corium_fleet_handoff_seconds",
            "Write unavailability of a handoff: old owner stops admitting until the new one serves.",
            &self.handoff_seconds,
        );
        scrape.durations(
            "corium_fleet_activation_seconds",
            "Time from a request or takeover decision to a serving cell.",
            &self.activation_seconds,
        );
        scrape.durations(
            "corium_fleet_recovery_seconds",
            "Time Corium spent acquiring and recovering one database.",
            &self.recovery_seconds,
        );
        self.calls.collect(scrape, "corium_fleet");
        corium_fleet_common::metrics::build_info(scrape, "corium_fleet", env!("CARGO_PKG_VERSION"));
    }
}
