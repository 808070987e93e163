//! Members and the deterministic candidate function.
//!
//! `candidates` is weighted rendezvous hashing over the members with a zone
//! spread: every node and every ingress that sees the same member list
//! computes the same ranking without coordination. Placement is a hint; the
//! root-store lease alone decides the writer.

use serde::{Deserialize, Serialize};

/// Default number of candidates per database.
pub const DEFAULT_REPLICAS: usize = 2;

/// One transactor node as placement sees it.
#[derive(Clone, Debug, Eq, PartialEq, Serialize, Deserialize)]
pub struct Member {
    /// Stable node id (unique in the fleet).
    pub node_id: String,
    /// Failure domain; candidates spread across zones first.
    pub zone: String,
    /// Relative capacity; a member with weight 2 gets about twice the
    /// databases of one with weight 1. Zero removes it from placement.
    pub weight: u32,
    /// Internal (node-to-node / ingress-to-node) endpoint.
    pub endpoint: String,
}

/// Why a member description was refused.
#[derive(Debug, thiserror::Error, Eq, PartialEq)]
pub enum MemberError {
    /// The description has no `NODE_ID=ENDPOINT` head (or one side of it is
    /// empty); carries the whole description.
    #[error("member {0:?}: expected NODE_ID=ENDPOINT[,zone=ZONE][,weight=N]")]
    Syntax(String),
    /// A `weight=` option is not a `u32`.
    #[error("member {member:?}: weight {value:?} is not a whole number")]
    Weight {
        /// The whole member description.
        member: String,
        /// The weight text as given.
        value: String,
    },
    /// An option other than `zone=` or `weight=`.
    #[error("member {member:?}: unknown option {option:?} (expected zone= or weight=)")]
    Option {
        /// The whole member description.
        member: String,
        /// The unknown option as given.
        option: String,
    },
    /// Two members share a node id; carries the repeated id.
    #[error("node id {0:?} appears twice in the member list")]
    Duplicate(String),
}

impl std::str::FromStr for Member {
    type Err = MemberError;

    /// Parses `NODE_ID=ENDPOINT[,zone=ZONE][,weight=N]`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut parts = text.split(',');
        let head = parts.next().unwrap_or_default();
        let (node_id, endpoint) = head
            .split_once('=')
            .filter(|(id, endpoint)| !id.is_empty() && !endpoint.is_empty())
            .ok_or_else(|| MemberError::Syntax(text.to_owned()))?;
        let mut member = Member {
            node_id: node_id.to_owned(),
            zone: String::new(),
            weight: 1,
            endpoint: endpoint.to_owned(),
        };
        for option in parts {
            match option.split_once('=') {
                Some(("zone", zone)) => zone.clone_into(&mut member.zone),
                Some(("weight", weight)) => {
                    member.weight = weight.parse().map_err(|_| MemberError::Weight {
                        member: text.to_owned(),
                        value: weight.to_owned(),
                    })?;
                }
                _ => {
                    return Err(MemberError::Option {
                        member: text.to_owned(),
                        option: option.to_owned(),
                    });
                }
            }
        }
        Ok(member)
    }
}

/// Checks that node ids are unique.
///
/// # Errors
/// [`MemberError::Duplicate`] naming the first repeated id.
pub fn check_unique(members: &[Member]) -> Result<(), MemberError> {
    let mut seen = std::collections::BTreeSet::new();
    for member in members {
        if !seen.insert(member.node_id.as_str()) {
            return Err(MemberError::Duplicate(member.node_id.clone()));
        }
    }
    Ok(())
}

/// FNV-1a over `parts` separated by a zero byte, finished with the splitmix64
/// mixer so that near-identical inputs spread over the whole range. Stable
/// across processes, platforms and releases (unlike `DefaultHasher`).
fn stable_hash(parts: &[&str]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain(std::iter::once(0)) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash = (hash ^ (hash >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash = (hash ^ (hash >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

/// Weighted rendezvous score (Schindelhauer & Schomaker): `-w / ln(u)` with
/// `u` uniform in (0, 1) drawn from the hash. Higher wins.
fn score(database: &str, member: &Member) -> f64 {
    // 53 high bits → a float in [0, 1); shift into (0, 1) so ln is finite.
    #[allow(clippy::cast_precision_loss)]
    let unit = ((stable_hash(&[database, &member.node_id]) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    -f64::from(member.weight) / unit.ln()
}

/// The top `replicas` members for `database`, best first: weighted
/// rendezvous order, taking at most one member per zone until every zone
/// present has one. Members with weight 0 never appear. Deterministic: the
/// same inputs give the same ranking on every node.
#[must_use]
pub fn candidates<'a>(database: &str, members: &'a [Member], replicas: usize) -> Vec<&'a Member> {
    let mut ranked: Vec<(f64, &Member)> = members
        .iter()
        .filter(|member| member.weight > 0)
        .map(|member| (score(database, member), member))
        .collect();
    // Ties (practically impossible) break on node id so order stays total.
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.node_id.cmp(&b.1.node_id)));
    let zones: std::collections::BTreeSet<&str> =
        ranked.iter().map(|(_, member)| member.zone.as_str()).collect();
    let mut chosen: Vec<&Member> = Vec::with_capacity(replicas);
    let mut used_zones = std::collections::BTreeSet::new();
    // First pass: one per zone, in score order.
    for (_, member) in &ranked {
        if chosen.len() == replicas || used_zones.len() == zones.len() {
            break;
        }
        if used_zones.insert(member.zone.as_str()) {
            chosen.push(member);
        }
    }
    // Every zone used: fill the rest in score order.
    for (_, member) in &ranked {
        if chosen.len() == replicas {
            break;
        }
        if !chosen.iter().any(|c| c.node_id == member.node_id) {
            chosen.push(member);
        }
    }
    chosen
}

/// The rank of `node_id` among the candidates of `database` (0 = preferred),
/// or `None` when it is not a candidate.
#[must_use]
pub fn rank_of(database: &str, members: &[Member], replicas: usize, node_id: &str) -> Option<usize> {
    candidates(database, members, replicas)
        .iter()
        .position(|member| member.node_id == node_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn member(id: &str, zone: &str, weight: u32) -> Member {
        Member {
            node_id: id.into(),
            zone: zone.into(),
            weight,
            endpoint: format!("http://{id}"),
        }
    }

    fn fleet(n: usize, zones: usize) -> Vec<Member> {
        (0..n)
            .map(|i| member(&format!("node-{i}"), &format!("z{}", i % zones), 1))
            .collect()
    }

    fn ids(list: &[&Member]) -> Vec<String> {
        list.iter().map(|m| m.node_id.clone()).collect()
    }

    #[test]
    fn parses_member_syntax() {
        let parsed: Member = "node-1=http://127.0.0.1:7001,zone=a,weight=3".parse().unwrap();
        assert_eq!(
            parsed,
            Member {
                node_id: "node-1".into(),
                zone: "a".into(),
                weight: 3,
                endpoint: "http://127.0.0.1:7001".into()
            }
        );
        assert!(matches!("node-1".parse::<Member>(), Err(MemberError::Syntax(_))));
        assert!(matches!(
            "n=e,weight=x".parse::<Member>(),
            Err(MemberError::Weight { .. })
        ));
        assert!(matches!(
            "n=e,colour=red".parse::<Member>(),
            Err(MemberError::Option { .. })
        ));
        assert_eq!(
            check_unique(&[member("a", "", 1), member("a", "", 1)]),
            Err(MemberError::Duplicate("a".into()))
        );
    }

    #[test]
    fn spreads_across_zones_first() {
        let members = vec![
            member("a1", "a", 1),
            member("a2", "a", 1),
            member("a3", "a", 1),
            member("b1", "b", 1),
        ];
        for db in 0..200 {
            let chosen = candidates(&format!("db{db}"), &members, 2);
            let zones: Vec<&str> = chosen.iter().map(|m| m.zone.as_str()).collect();
            assert!(zones.contains(&"a") && zones.contains(&"b"), "{zones:?}");
        }
    }

    #[test]
    fn zero_weight_never_chosen_and_short_fleets_give_what_they_have() {
        let members = vec![member("a", "a", 0), member("b", "b", 1)];
        assert_eq!(ids(&candidates("x", &members, 3)), vec!["b".to_owned()]);
    }

    #[test]
    fn weights_shift_load_proportionally() {
        let members = vec![member("light", "", 1), member("heavy", "", 3)];
        let heavy = (0..4000)
            .filter(|i| candidates(&format!("db{i}"), &members, 1)[0].node_id == "heavy")
            .count();
        // Expected share 3/4 = 3000; allow sampling noise.
        assert!((2800..3200).contains(&heavy), "heavy got {heavy} of 4000");
    }

    proptest! {
        #[test]
        fn same_inputs_same_ranking_regardless_of_member_order(db in "[a-z0-9]{1,20}", seed in any::<u64>()) {
            let members = fleet(7, 3);
            let mut shuffled = members.clone();
            let len = shuffled.len();
            shuffled.rotate_left(usize::try_from(seed % u64::try_from(len).unwrap()).unwrap());
            prop_assert_eq!(ids(&candidates(&db, &members, 3)), ids(&candidates(&db, &shuffled, 3)));
        }

        #[test]
        fn removing_a_member_moves_only_its_databases(dbs in proptest::collection::vec("[a-z0-9]{4,12}", 50..200), gone in 0usize..6) {
            let members = fleet(6, 6);
            let mut fewer = members.clone();
            let removed = fewer.remove(gone);
            for db in &dbs {
                let before = ids(&candidates(db, &members, 2));
                let after = ids(&candidates(db, &fewer, 2));
                if before.contains(&removed.node_id) {
                    // The survivor keeps its place at the head of the list.
                    let survivor: Vec<_> = before.iter().filter(|id| **id != removed.node_id).cloned().collect();
                    prop_assert_eq!(&after[..survivor.len()], &survivor[..]);
                } else {
                    prop_assert_eq!(before, after);
                }
            }
        }
    }

    #[test]
    fn adding_a_member_moves_about_r_over_n() {
        let members = fleet(5, 5);
        let mut more = members.clone();
        more.push(member("node-new", "z5", 1));
        let total = 3000;
        let moved = (0..total)
            .filter(|i| {
                let db = format!("db{i}");
                ids(&candidates(&db, &members, 2)) != ids(&candidates(&db, &more, 2))
            })
            .count();
        // Expected about r/N = 2/6 of databases; allow noise.
        let share = f64::from(u32::try_from(moved).unwrap()) / f64::from(total);
        assert!((0.27..0.40).contains(&share), "moved share {share}");
    }
}
