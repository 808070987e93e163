//! Load-aware placement on a node (`--load-balance`): every interval the
//! node measures its databases' calls per second (and its CPU), publishes
//! them in its registry record, and — when it has been above the fleet's
//! band for [`SUSTAINED`] intervals in a row — hands one database to a
//! less busy candidate with room, by graceful handoff, at most one per
//! [`MOVE_EVERY`]. Which database and where is `corium_fleet_common::balance`
//! (pure, shared with `corium-fleet rebalance --dry-run`); every move is
//! logged with its reason, kept in the node's status ([`Moves`]) and counted.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corium_fleet_common::balance::{self, DatabaseLoad, NodeLoad, Settings};

use super::{Host, now_unix_ms};

/// Intervals in a row a node must be above the band before it moves
/// anything: a burst does not move databases.
const SUSTAINED: u32 = 3;
/// At most one move for load per node per this interval.
const MOVE_EVERY: Duration = Duration::from_mins(1);
/// Moves kept for `status`.
const KEPT_MOVES: usize = 16;

/// Calls per second and CPU over the last interval.
#[derive(Clone, Debug, Default)]
pub struct Rates {
    /// Client calls per second to this node's databases.
    pub node: f64,
    /// Each open database's calls per second.
    pub databases: HashMap<String, f64>,
    /// The process's CPU in percent of one core.
    pub cpu_percent: u32,
}

/// One reading of the counters.
struct Reading {
    at: Instant,
    cpu_seconds: Option<f64>,
    /// Calls per database and lease version (a reopened cell counts anew).
    calls: HashMap<(String, u64), u64>,
}

/// One move made for load, as `status` shows it.
#[derive(Clone, Debug)]
pub struct Moved {
    /// The database.
    pub database: String,
    /// The node it went to.
    pub to: String,
    /// When (milliseconds since the Unix epoch).
    pub at_unix_ms: i64,
    /// Why, with the figures ([`balance::Move::reason`]).
    pub reason: String,
}

/// The meter, the hysteresis and the moves made.
#[derive(Default)]
pub struct Moves {
    last: Mutex<Option<Reading>>,
    rates: Mutex<Rates>,
    recent: Mutex<VecDeque<Moved>>,
}

impl Moves {
    /// The rates of the last interval.
    #[must_use]
    pub fn rates(&self) -> Rates {
        self.rates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The moves made for load, oldest first.
    #[must_use]
    pub fn recent(&self) -> Vec<Moved> {
        self.recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    fn record(&self, moved: Moved) {
        let mut recent = self
            .recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if recent.len() == KEPT_MOVES {
            recent.pop_front();
        }
        recent.push_back(moved);
    }
}

/// A count's rate over `seconds`.
fn per_second(count: u64, seconds: f64) -> f64 {
    #[allow(
        clippy::cast_precision_loss,
        reason = "call counts stay far inside f64's exact integers"
    )]
    let count = count as f64;
    count / seconds
}

impl Host {
    /// Reads the cells' call counters and the process's CPU, and keeps the
    /// rates since the last reading.
    fn measure(&self) -> Rates {
        let now = Reading {
            at: Instant::now(),
            cpu_seconds: corium_fleet_common::metrics::process::cpu_seconds(),
            calls: self
                .cells()
                .iter()
                .map(|cell| ((cell.db.clone(), cell.lease_version), cell.calls()))
                .collect(),
        };
        let mut last = self
            .moves
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let rates = last.as_ref().map_or_else(Rates::default, |before| {
            let seconds = now.at.duration_since(before.at).as_secs_f64().max(0.001);
            let databases: HashMap<String, f64> = now
                .calls
                .iter()
                .map(|((db, version), calls)| {
                    let earlier = before.calls.get(&(db.clone(), *version)).copied().unwrap_or(0);
                    (db.clone(), per_second(calls.saturating_sub(earlier), seconds))
                })
                .collect();
            let cpu_percent = match (before.cpu_seconds, now.cpu_seconds) {
                // A percentage of one core: a small whole number.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                (Some(before), Some(now)) => ((now - before).max(0.0) / seconds * 100.0).round() as u32,
                _ => 0,
            };
            Rates {
                node: databases.values().sum(),
                databases,
                cpu_percent,
            }
        });
        *last = Some(now);
        drop(last);
        *self
            .moves
            .rates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = rates.clone();
        rates
    }

    /// The fleet as load-aware placement sees it: every live member that
    /// published a load (this node with its fresh rates), and this node's
    /// databases.
    async fn fleet_load(&self, rates: &Rates) -> (Vec<NodeLoad>, Vec<DatabaseLoad>) {
        let own_room = self
            .config
            .memory_budget
            .map(|budget| budget.saturating_sub(self.metrics.memory_firm_bytes.load(Ordering::Relaxed)));
        let nodes = self
            .members
            .get()
            .iter()
            .filter_map(|member| {
                if member.node_id == self.config.node_id {
                    return Some(NodeLoad {
                        node_id: member.node_id.clone(),
                        calls_per_second: rates.node,
                        memory_room: own_room,
                    });
                }
                self.loads.get(&member.node_id).map(|load| NodeLoad {
                    node_id: member.node_id.clone(),
                    calls_per_second: f64::from(load.calls_per_second),
                    memory_room: (load.memory_budget_bytes > 0)
                        .then(|| load.memory_budget_bytes.saturating_sub(load.memory_used_bytes)),
                })
            })
            .collect();
        let memory = self.memory_use().await;
        let databases = self
            .cells()
            .iter()
            .map(|cell| DatabaseLoad {
                database: cell.db.clone(),
                owner: self.config.node_id.clone(),
                calls_per_second: rates.databases.get(&cell.db).copied().unwrap_or(0.0),
                memory_bytes: memory.databases.get(&cell.db).copied().unwrap_or(0),
                candidates: self
                    .candidates(&cell.db)
                    .into_iter()
                    .map(|member| member.node_id)
                    .collect(),
            })
            .collect();
        (nodes, databases)
    }

    /// Measures the load every interval until `shutdown`, and with
    /// `--load-balance` on moves a database when this node stays above the
    /// band (module docs).
    pub(crate) async fn balance_load(self: Arc<Self>, shutdown: tokio::sync::watch::Receiver<bool>) {
        let interval = self.config.load_balance.unwrap_or(Duration::from_secs(10));
        let mut every = corium_fleet_common::every::Every::new(interval, shutdown);
        let mut over_for = 0u32;
        let mut last_move: Option<Instant> = None;
        while every.tick().await {
            let rates = self.measure();
            if self.config.load_balance.is_none() || self.is_stopping() {
                continue;
            }
            let (nodes, databases) = self.fleet_load(&rates).await;
            let settings = Settings::default();
            if balance::overfull(rates.node, balance::mean(&nodes), settings) {
                over_for += 1;
            } else {
                over_for = 0;
            }
            if over_for < SUSTAINED || last_move.is_some_and(|at| at.elapsed() < MOVE_EVERY) {
                continue;
            }
            let Some(planned) = balance::plan(&nodes, &databases, settings)
                .into_iter()
                .find(|planned| planned.from == self.config.node_id)
            else {
                continue;
            };
            let Some(target) = self
                .candidates(&planned.database)
                .into_iter()
                .find(|member| member.node_id == planned.to)
            else {
                continue;
            };
            let reason = planned.reason();
            tracing::info!(db = %planned.database, to = %planned.to, %reason, "moving a database for load");
            last_move = Some(Instant::now());
            over_for = 0;
            self.metrics.load_moves.fetch_add(1, Ordering::Relaxed);
            self.moves.record(Moved {
                database: planned.database.clone(),
                to: planned.to.clone(),
                at_unix_ms: now_unix_ms(),
                reason,
            });
            self.hand_to_first(&planned.database, vec![target], "load").await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_kept_are_the_latest() {
        let moves = Moves::default();
        for n in 0..(KEPT_MOVES + 3) {
            moves.record(Moved {
                database: format!("db-{n}"),
                to: "n2".into(),
                at_unix_ms: 0,
                reason: String::new(),
            });
        }
        let recent = moves.recent();
        assert_eq!(recent.len(), KEPT_MOVES);
        assert_eq!(recent[0].database, "db-3");
        assert_eq!(recent.last().unwrap().database, format!("db-{}", KEPT_MOVES + 2));
    }
}
