//! Load-aware placement: which owned database to move where so that the
//! fleet's load evens out, as a pure function of each node's load and each
//! database's. A node's rebalancer runs it for its own databases;
//! `corium-fleet rebalance --dry-run` runs it for the whole fleet.
//!
//! The rule, after `CockroachDB`'s load-based lease rebalancing (a band
//! around the mean) and Orleans' activation shedding:
//!
//! - the signal is client calls per second (each database's own, so a move's
//!   effect is known before it is made);
//! - a node is *overfull* when its load is above the mean of the live nodes'
//!   by more than [`Settings::threshold`] (relative) and
//!   [`Settings::min_gap`] (absolute, so a quiet fleet never moves);
//! - a move takes one database from an overfull node to one of its other
//!   candidates that stays within the band afterwards (its load plus the
//!   database's at most the mean × (1 + threshold)), has memory room for the
//!   database, and ends closer: the database's load is below the difference
//!   between the two nodes, so every move strictly narrows it and a single
//!   hot database never bounces between two nodes;
//! - of those, the move that brings the overfull node closest to the mean;
//!   one per overfull node per round (the caller paces rounds and requires
//!   a node to be overfull on several in a row — the hysteresis).

use std::collections::HashMap;

/// One live node's load.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeLoad {
    /// The node id.
    pub node_id: String,
    /// Client calls per second over the last interval.
    pub calls_per_second: f64,
    /// Memory left under its budget in bytes (`None`: no budget).
    pub memory_room: Option<u64>,
}

/// One owned database's load.
#[derive(Clone, Debug, PartialEq)]
pub struct DatabaseLoad {
    /// The database.
    pub database: String,
    /// The node that owns it.
    pub owner: String,
    /// Its client calls per second over the last interval.
    pub calls_per_second: f64,
    /// Its estimated memory on its owner.
    pub memory_bytes: u64,
    /// Its candidates, best first (the only nodes it may move to).
    pub candidates: Vec<String>,
}

/// The band and the floor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// How far above the mean (a fraction of it) a node may be before it
    /// sheds a database, and how far a target may end up.
    pub threshold: f64,
    /// The least a node must be above the mean, in calls per second, before
    /// it sheds anything.
    pub min_gap: f64,
}

impl Default for Settings {
    /// 25 % and 20 calls per second.
    fn default() -> Self {
        Self {
            threshold: 0.25,
            min_gap: 20.0,
        }
    }
}

/// One planned move, with the figures that explain it.
#[derive(Clone, Debug, PartialEq)]
pub struct Move {
    /// The database to move.
    pub database: String,
    /// Its owner now.
    pub from: String,
    /// The candidate it goes to.
    pub to: String,
    /// The database's calls per second.
    pub database_load: f64,
    /// The source's calls per second before the move.
    pub from_load: f64,
    /// The target's calls per second before the move.
    pub to_load: f64,
    /// The fleet's mean calls per second per node.
    pub mean: f64,
}

impl Move {
    /// Why, in words an operator reads in `status` and the log.
    #[must_use]
    pub fn reason(&self) -> String {
        let above = if self.mean > 0.0 {
            (self.from_load / self.mean - 1.0) * 100.0
        } else {
            0.0
        };
        format!(
            "{} at {:.0} calls/s is {above:.0} % above the fleet mean of {:.0}; {} ({:.0} calls/s) to {} at {:.0}",
            self.from, self.from_load, self.mean, self.database, self.database_load, self.to, self.to_load
        )
    }
}

/// The mean calls per second of `nodes` (0 for none).
#[must_use]
pub fn mean(nodes: &[NodeLoad]) -> f64 {
    if nodes.is_empty() {
        return 0.0;
    }
    #[allow(
        clippy::cast_precision_loss,
        reason = "a node count is far inside f64's exact integers"
    )]
    let count = nodes.len() as f64;
    nodes.iter().map(|node| node.calls_per_second).sum::<f64>() / count
}

/// Whether `load` is overfull against `mean` under `settings`.
#[must_use]
pub fn overfull(load: f64, mean: f64, settings: Settings) -> bool {
    load > mean * (1.0 + settings.threshold) && load - mean > settings.min_gap
}

/// The moves that even out `nodes`' load: at most one per overfull node,
/// each of one of its `databases` to one of that database's candidates (see
/// the module docs). Deterministic: ties go to the name that sorts first.
#[must_use]
pub fn plan(nodes: &[NodeLoad], databases: &[DatabaseLoad], settings: Settings) -> Vec<Move> {
    let mean = mean(nodes);
    let by_id: HashMap<&str, &NodeLoad> = nodes.iter().map(|node| (node.node_id.as_str(), node)).collect();
    let ceiling = mean * (1.0 + settings.threshold);
    let mut sources: Vec<&NodeLoad> = nodes
        .iter()
        .filter(|node| overfull(node.calls_per_second, mean, settings))
        .collect();
    sources.sort_by(|a, b| a.node_id.cmp(&b.node_id));
    let mut moves = Vec::new();
    for source in sources {
        let mut best: Option<(f64, Move)> = None;
        for db in databases
            .iter()
            .filter(|db| db.owner == source.node_id && db.calls_per_second > 0.0)
        {
            for target in db
                .candidates
                .iter()
                .filter(|id| **id != source.node_id)
                .filter_map(|id| by_id.get(id.as_str()))
            {
                let fits = target.calls_per_second + db.calls_per_second <= ceiling;
                let narrows = db.calls_per_second < source.calls_per_second - target.calls_per_second;
                let room = target.memory_room.is_none_or(|room| db.memory_bytes < room);
                if !(fits && narrows && room) {
                    continue;
                }
                let distance = (source.calls_per_second - db.calls_per_second - mean).abs();
                let candidate = Move {
                    database: db.database.clone(),
                    from: source.node_id.clone(),
                    to: target.node_id.clone(),
                    database_load: db.calls_per_second,
                    from_load: source.calls_per_second,
                    to_load: target.calls_per_second,
                    mean,
                };
                let better = best.as_ref().is_none_or(|(best_distance, best_move)| {
                    match distance.total_cmp(best_distance) {
                        std::cmp::Ordering::Less => true,
                        std::cmp::Ordering::Equal => {
                            (&candidate.database, &candidate.to) < (&best_move.database, &best_move.to)
                        }
                        std::cmp::Ordering::Greater => false,
                    }
                });
                if better {
                    best = Some((distance, candidate));
                }
            }
        }
        moves.extend(best.map(|(_, chosen)| chosen));
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node(id: &str, load: f64) -> NodeLoad {
        NodeLoad {
            node_id: id.into(),
            calls_per_second: load,
            memory_room: None,
        }
    }

    fn db(name: &str, owner: &str, load: f64, candidates: &[&str]) -> DatabaseLoad {
        DatabaseLoad {
            database: name.into(),
            owner: owner.into(),
            calls_per_second: load,
            memory_bytes: 1,
            candidates: candidates.iter().map(|id| (*id).to_owned()).collect(),
        }
    }

    #[test]
    fn a_hot_node_sheds_the_database_that_evens_it_out() {
        let nodes = [node("n1", 300.0), node("n2", 0.0), node("n3", 0.0)];
        let dbs = [
            db("a", "n1", 200.0, &["n1", "n2"]),
            db("b", "n1", 100.0, &["n1", "n3"]),
        ];
        let moves = plan(&nodes, &dbs, Settings::default());
        // Mean 100: moving a (200) leaves n1 at 100, but n2 would end at 200,
        // past the band (125); moving b leaves n1 at 200 and n3 at 100.
        assert_eq!(moves.len(), 1, "{moves:?}");
        assert_eq!((moves[0].database.as_str(), moves[0].to.as_str()), ("b", "n3"));
        let reason = moves[0].reason();
        assert!(
            reason.contains("n1 at 300 calls/s is 200 % above the fleet mean of 100"),
            "{reason}"
        );
    }

    #[test]
    fn nothing_moves_without_a_gain() {
        // One hot database: moving it only moves the heat.
        let moves = plan(
            &[node("n1", 500.0), node("n2", 0.0)],
            &[db("hot", "n1", 500.0, &["n1", "n2"])],
            Settings::default(),
        );
        assert!(moves.is_empty(), "{moves:?}");
        // Within the band, or too small a gap to matter.
        let near = [node("n1", 110.0), node("n2", 90.0)];
        assert!(plan(&near, &[db("a", "n1", 10.0, &["n1", "n2"])], Settings::default()).is_empty());
        let quiet = [node("n1", 10.0), node("n2", 0.0)];
        assert!(plan(&quiet, &[db("a", "n1", 5.0, &["n1", "n2"])], Settings::default()).is_empty());
        // Only among its candidates.
        let nodes = [node("n1", 200.0), node("n2", 0.0), node("n3", 0.0)];
        assert!(
            plan(
                &nodes,
                &[
                    db("a", "n1", 100.0, &["n1", "n3"]),
                    db("b", "n1", 100.0, &["n1", "n3"])
                ],
                Settings::default()
            )
            .iter()
            .all(|planned| planned.to == "n3")
        );
        // Not to a node without memory room for it.
        let mut full = node("n2", 0.0);
        full.memory_room = Some(1);
        assert!(
            plan(
                &[node("n1", 200.0), full],
                &[
                    db("a", "n1", 100.0, &["n1", "n2"]),
                    db("b", "n1", 100.0, &["n1", "n2"])
                ],
                Settings::default()
            )
            .is_empty()
        );
    }

    fn fleet() -> impl Strategy<Value = (Vec<NodeLoad>, Vec<DatabaseLoad>)> {
        (2usize..6)
            .prop_flat_map(|count| {
                let ids: Vec<String> = (0..count).map(|n| format!("n{n}")).collect();
                let dbs = proptest::collection::vec((0..count, 0..count, 0.0f64..500.0), 0..20);
                (Just(ids), dbs)
            })
            .prop_map(|(ids, dbs)| {
                let databases: Vec<DatabaseLoad> = dbs
                    .into_iter()
                    .enumerate()
                    .map(|(n, (owner, other, load))| DatabaseLoad {
                        database: format!("db{n}"),
                        owner: ids[owner].clone(),
                        calls_per_second: load,
                        memory_bytes: 0,
                        candidates: vec![ids[owner].clone(), ids[other].clone()],
                    })
                    .collect();
                let nodes = ids
                    .iter()
                    .map(|id| NodeLoad {
                        node_id: id.clone(),
                        calls_per_second: databases
                            .iter()
                            .filter(|db| &db.owner == id)
                            .map(|db| db.calls_per_second)
                            .sum(),
                        memory_room: None,
                    })
                    .collect();
                (nodes, databases)
            })
    }

    proptest! {
        /// Every move is of a database its source owns, to another of its
        /// candidates, from an overfull node, ends within the band and
        /// narrows the pair's difference; one per source.
        #[test]
        fn every_move_narrows_and_stays_in_the_band((nodes, databases) in fleet()) {
            let settings = Settings::default();
            let moves = plan(&nodes, &databases, settings);
            let load = |id: &str| nodes.iter().find(|node| node.node_id == id).unwrap().calls_per_second;
            let mean = mean(&nodes);
            let mut sources = std::collections::BTreeSet::new();
            for planned in &moves {
                prop_assert!(sources.insert(planned.from.clone()), "one move per source");
                let db = databases.iter().find(|db| db.database == planned.database).unwrap();
                prop_assert_eq!(&db.owner, &planned.from);
                prop_assert!(db.candidates.contains(&planned.to) && planned.to != planned.from);
                prop_assert!(overfull(load(&planned.from), mean, settings));
                prop_assert!(load(&planned.to) + db.calls_per_second <= mean * (1.0 + settings.threshold));
                let before = load(&planned.from) - load(&planned.to);
                let after = ((load(&planned.from) - db.calls_per_second) - (load(&planned.to) + db.calls_per_second)).abs();
                prop_assert!(after < before, "{after} < {before}");
            }
        }
    }
}
