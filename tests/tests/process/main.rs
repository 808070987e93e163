//! The multi-process tier: real fleet binaries (nodes, ingresses,
//! `corium-fleet dev`), real storage (the filesystem, Postgres, S3), the real stock Corium
//! clients and CLI, in one test binary (one link for the whole tier; the
//! simulation, the fault suite's process tier and the differential runs are
//! binaries of their own, for `make soak` and `make differential`).
//!
//! One module per concern, as the files were before they shared a binary:
//! ownership and fencing (`foundation`, `placement`, `rebalance`, `drain`,
//! `fast_moves`, `hot_standby`), memory and load (`memory_budget`, `idle_cost`, `load_balance`), the
//! ingress (`ingress`, `failover_buffer`, `readiness`),
//! exactly-once (`exactly_once`, `stock_exactly_once`, `stock_statuses`,
//! `retention`),
//! reads (`reads`, `sdk`), encrypted databases (`encryption`), operating it (`dev_fleet`, `fleet_status`,
//! `status_page`, `observability`, `stock_cli`, `backup`, `storage_setup`,
//! `docker_context`, `upgrade`), and the hostile clients (`bounds`, `security`).

mod backup;
mod bounds;
mod deadlines;
mod dev_fleet;
mod docker_context;
mod drain;
mod encryption;
mod exactly_once;
mod failover_buffer;
mod fast_moves;
mod fleet_status;
mod foundation;
mod hot_standby;
mod idle_cost;
mod ingress;
mod load_balance;
mod memory_budget;
mod observability;
mod placement;
mod races;
mod readiness;
mod reads;
mod rebalance;
mod retention;
mod sdk;
mod security;
mod slow_open;
mod status_page;
mod stock_cli;
mod stock_exactly_once;
mod stock_statuses;
mod storage_setup;
mod subscriptions;
mod upgrade;
