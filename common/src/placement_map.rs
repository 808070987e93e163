//! The operator's placement map: per-database candidate lists that override
//! rendezvous placement (pinning a hot database to bigger nodes, keeping a
//! tenant in one region).
//!
//! The file has one database per line, candidates best first:
//!
//! ```text
//! # database = node, node[, node ...]
//! orders   = node-1, node-3
//! invoices = node-2, node-1
//! ```
//!
//! A map is parsed ([`Map::parse`]) and then checked against the live
//! members ([`Map::check`]); either step names the line at fault, and a
//! running process that fails to load a new map keeps the previous one
//! ([`Watched`]). At run time a mapped node that has left the fleet is
//! skipped and the list is filled from rendezvous order, so a map never
//! makes a database unplaceable.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::placement::{self, Member};

/// One database's mapped candidates and the line they came from.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Entry {
    /// The mapped node ids, best first; non-empty and without repeats.
    pub nodes: Vec<String>,
    /// The 1-based line of the map file the entry was read from, so that
    /// later checks can name it.
    pub line: usize,
}

/// A parsed placement map (empty when no map is configured).
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct Map {
    entries: BTreeMap<String, Entry>,
}

/// Why a map was refused; always names the line.
#[derive(Debug, thiserror::Error, Eq, PartialEq)]
#[error("placement map line {line}: {message}")]
pub struct MapError {
    /// The 1-based line at fault.
    pub line: usize,
    /// What is wrong with it.
    pub message: String,
}

/// Why a map file was refused: unreadable, or content at fault.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file cannot be read.
    #[error("cannot read placement map {}: {source}", path.display())]
    Read {
        /// The map file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file's content is refused.
    #[error("{}: {error}", path.display())]
    Invalid {
        /// The map file.
        path: PathBuf,
        /// The line at fault and why.
        error: MapError,
    },
}

impl LoadError {
    fn invalid(path: &Path) -> impl FnOnce(MapError) -> Self + '_ {
        |error| Self::Invalid {
            path: path.to_owned(),
            error,
        }
    }
}

fn read(path: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })
}

fn at(line: usize, message: impl Into<String>) -> MapError {
    MapError {
        line,
        message: message.into(),
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
}

impl Map {
    /// Parses the map text. Blank lines and `#` comments are ignored.
    ///
    /// # Errors
    /// The first malformed line: no `=`, a bad database name, an empty or
    /// repeated node, or a database listed twice.
    pub fn parse(text: &str) -> Result<Self, MapError> {
        let mut entries = BTreeMap::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let content = raw.split('#').next().unwrap_or_default().trim();
            if content.is_empty() {
                continue;
            }
            let (db, nodes) = content
                .split_once('=')
                .ok_or_else(|| at(line, format!("expected `database = node, node`, got {content:?}")))?;
            let db = db.trim();
            if !valid_name(db) {
                return Err(at(
                    line,
                    format!("invalid database name {db:?}: use 1-128 letters, digits, '-' or '_'"),
                ));
            }
            let mut listed: Vec<String> = Vec::new();
            for node in nodes.split(',').map(str::trim) {
                if node.is_empty() {
                    return Err(at(line, format!("empty node id in the list for {db:?}")));
                }
                if listed.iter().any(|seen| seen == node) {
                    return Err(at(line, format!("node {node:?} is listed twice for {db:?}")));
                }
                listed.push(node.to_owned());
            }
            if let Some(previous) = entries.insert(db.to_owned(), Entry { nodes: listed, line }) {
                return Err(at(
                    line,
                    format!("database {db:?} is already mapped on line {}", previous.line),
                ));
            }
        }
        Ok(Self { entries })
    }

    /// Checks the map against the live members: every named node must be a
    /// member with a non-zero weight, and every entry must name at least
    /// `replicas` of them.
    ///
    /// # Errors
    /// The first entry that names an unknown node or too few nodes.
    pub fn check(&self, members: &[Member], replicas: usize) -> Result<(), MapError> {
        let mut by_line: Vec<(&String, &Entry)> = self.entries.iter().collect();
        by_line.sort_by_key(|(_, entry)| entry.line);
        for (db, entry) in by_line {
            for node in &entry.nodes {
                if !members
                    .iter()
                    .any(|member| &member.node_id == node && member.weight > 0)
                {
                    return Err(at(
                        entry.line,
                        format!("{db:?} names {node:?}, which is not a live member of the fleet"),
                    ));
                }
            }
            let wanted = replicas.min(members.iter().filter(|member| member.weight > 0).count());
            if entry.nodes.len() < wanted {
                return Err(at(
                    entry.line,
                    format!(
                        "{db:?} names {} node(s); placement needs {wanted} live candidates",
                        entry.nodes.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The mapped entry of `database`, if any.
    #[must_use]
    pub fn get(&self, database: &str) -> Option<&Entry> {
        self.entries.get(database)
    }

    /// How many databases the map pins.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the map pins nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Reads, parses and checks a map file.
    ///
    /// # Errors
    /// A message naming the file and, for bad content, the line.
    pub fn load(path: &Path, members: &[Member], replicas: usize) -> Result<Self, LoadError> {
        let map = Self::parse(&read(path)?).map_err(LoadError::invalid(path))?;
        map.check(members, replicas).map_err(LoadError::invalid(path))?;
        Ok(map)
    }
}

impl Map {
    /// Loads a map at process start. `strict` (static members: the list is
    /// the whole fleet) applies every check. Otherwise (registry: members
    /// come and go, and a mapped node may simply not have started yet) a
    /// named node that is not live is returned as a warning instead of an
    /// error, so pods do not crash-loop while a mapped node is down; every
    /// other check still applies, and later reloads are strict.
    ///
    /// # Errors
    /// A message naming the file and, for bad content, the line.
    pub fn load_at_start(
        path: &Path,
        members: &[Member],
        replicas: usize,
        strict: bool,
    ) -> Result<(Self, Vec<String>), LoadError> {
        if strict {
            return Self::load(path, members, replicas).map(|map| (map, Vec::new()));
        }
        let map = Self::parse(&read(path)?).map_err(LoadError::invalid(path))?;
        let mut warnings = Vec::new();
        let mut by_line: Vec<(&String, &Entry)> = map.entries.iter().collect();
        by_line.sort_by_key(|(_, entry)| entry.line);
        for (db, entry) in by_line {
            if entry.nodes.len() < replicas {
                return Err(LoadError::invalid(path)(at(
                    entry.line,
                    format!(
                        "{db:?} names {} node(s); placement needs {replicas} candidates",
                        entry.nodes.len()
                    ),
                )));
            }
            for node in &entry.nodes {
                if !members.iter().any(|member| &member.node_id == node) {
                    warnings.push(format!(
                        "{}: {}",
                        path.display(),
                        at(
                            entry.line,
                            format!("{db:?} names {node:?}, which is not live yet")
                        )
                    ));
                }
            }
        }
        Ok((map, warnings))
    }
}

/// The candidates of `database`: the map's entry when there is one (its live
/// members in map order, filled from rendezvous order if some have left),
/// else rendezvous placement.
#[must_use]
pub fn candidates<'a>(database: &str, members: &'a [Member], replicas: usize, map: &Map) -> Vec<&'a Member> {
    let Some(entry) = map.get(database) else {
        return placement::candidates(database, members, replicas);
    };
    let mut chosen: Vec<&Member> = entry
        .nodes
        .iter()
        .filter_map(|node| {
            members
                .iter()
                .find(|member| &member.node_id == node && member.weight > 0)
        })
        .take(replicas)
        .collect();
    if chosen.len() < replicas {
        for member in placement::candidates(database, members, members.len()) {
            if chosen.len() == replicas {
                break;
            }
            if !chosen.iter().any(|c| c.node_id == member.node_id) {
                chosen.push(member);
            }
        }
    }
    chosen
}

/// A map shared by everything that places databases, reloaded from its file
/// in the background. A reload that fails keeps the previous map.
#[derive(Clone, Default)]
pub struct Watched {
    current: Arc<RwLock<Arc<Map>>>,
    /// Reloads refused since start (exported as a metric).
    pub refused: Arc<std::sync::atomic::AtomicU64>,
}

impl Watched {
    /// A holder starting from `map`.
    #[must_use]
    pub fn new(map: Map) -> Self {
        Self {
            current: Arc::new(RwLock::new(Arc::new(map))),
            refused: Arc::default(),
        }
    }

    /// The map in force.
    #[must_use]
    pub fn get(&self) -> Arc<Map> {
        Arc::clone(
            &self
                .current
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Puts `map` in force.
    pub fn replace(&self, map: Map) {
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(map);
    }

    /// Re-reads `path` every `period` until `shutdown` turns true. A changed
    /// file that parses and checks against `members()` replaces the map; one
    /// that does not is logged with the line at fault and ignored.
    pub async fn follow(
        self,
        path: PathBuf,
        period: Duration,
        members: impl Fn() -> Arc<Vec<Member>> + Send,
        replicas: usize,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        // The first pass re-reads the file: anything written since the
        // initial load is checked like any later change.
        let mut last_text: Option<String> = None;
        let mut unreadable = false;
        loop {
            tokio::select! {
                () = tokio::time::sleep(period) => {}
                _ = shutdown.changed() => return,
            }
            if *shutdown.borrow() {
                return;
            }
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(error) => {
                    // Logged once per unreadable streak.
                    if !unreadable {
                        unreadable = true;
                        last_text = None;
                        self.refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tracing::error!(path = %path.display(), %error, "cannot read placement map; keeping the previous map");
                    }
                    continue;
                }
            };
            unreadable = false;
            if last_text.as_deref() == Some(text.as_str()) {
                continue;
            }
            last_text = Some(text.clone());
            let loaded = Map::parse(&text).and_then(|map| map.check(&members(), replicas).map(|()| map));
            match loaded {
                Ok(map) => {
                    tracing::info!(path = %path.display(), databases = map.len(), "placement map reloaded");
                    self.replace(map);
                }
                Err(error) => {
                    self.refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::error!(path = %path.display(), line = error.line, error = %error.message, "placement map refused; keeping the previous map");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet() -> Vec<Member> {
        ["node-1", "node-2", "node-3"]
            .iter()
            .enumerate()
            .map(|(i, id)| Member {
                node_id: (*id).into(),
                zone: format!("z{i}"),
                weight: 1,
                endpoint: format!("http://{id}"),
            })
            .collect()
    }

    fn ids(list: &[&Member]) -> Vec<String> {
        list.iter().map(|m| m.node_id.clone()).collect()
    }

    #[test]
    fn parses_entries_and_comments() {
        let map = Map::parse("# pinned\norders = node-3, node-1\n\n invoices=node-2,node-3 # hot\n").unwrap();
        assert_eq!(map.len(), 2);
        assert_eq!(map.get("orders").unwrap().nodes, vec!["node-3", "node-1"]);
        assert_eq!(map.get("invoices").unwrap().line, 4);
        map.check(&fleet(), 2).unwrap();
    }

    #[test]
    fn names_the_line_at_fault() {
        let cases = [
            ("a = node-1, node-2\nno equals sign\n", 2, "expected"),
            (
                "a = node-1, node-2\na = node-2, node-3\n",
                2,
                "already mapped on line 1",
            ),
            ("bad name! = node-1\n", 1, "invalid database name"),
            ("a = node-1, , node-2\n", 1, "empty node id"),
            ("a = node-1, node-1\n", 1, "listed twice"),
        ];
        for (text, line, needle) in cases {
            let error = Map::parse(text).unwrap_err();
            assert_eq!(error.line, line, "{text:?}: {error}");
            assert!(error.to_string().contains(needle), "{text:?}: {error}");
        }
        let unknown = Map::parse("a = node-1, node-2\nb = node-1, node-9\n").unwrap();
        let error = unknown.check(&fleet(), 2).unwrap_err();
        assert_eq!(error.line, 2);
        assert!(error.message.contains("node-9"), "{error}");
        let short = Map::parse("a = node-1\n").unwrap();
        assert!(short.check(&fleet(), 2).unwrap_err().message.contains("needs 2"));
    }

    #[test]
    fn overrides_rendezvous_and_fills_when_a_mapped_node_leaves() {
        let members = fleet();
        let map = Map::parse("orders = node-3, node-2\n").unwrap();
        assert_eq!(
            ids(&candidates("orders", &members, 2, &map)),
            vec!["node-3", "node-2"]
        );
        // Unmapped databases keep rendezvous placement.
        assert_eq!(
            ids(&candidates("other", &members, 2, &map)),
            ids(&placement::candidates("other", &members, 2))
        );
        // node-3 leaves: node-2 leads, the next rendezvous member fills.
        let fewer: Vec<Member> = members
            .iter()
            .filter(|m| m.node_id != "node-3")
            .cloned()
            .collect();
        assert_eq!(
            ids(&candidates("orders", &fewer, 2, &map)),
            vec!["node-2", "node-1"]
        );
    }

    #[test]
    fn registry_start_warns_about_nodes_not_yet_live() {
        let dir = std::env::temp_dir().join(format!("placement-map-start-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("map");
        std::fs::write(&path, "orders = node-1, node-9\n").unwrap();
        let members = fleet();
        assert!(matches!(
            Map::load_at_start(&path, &members, 2, true),
            Err(LoadError::Invalid {
                error: MapError { line: 1, .. },
                ..
            })
        ));
        let (map, warnings) = Map::load_at_start(&path, &members, 2, false).unwrap();
        assert_eq!(map.len(), 1);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("node-9"), "{warnings:?}");
        std::fs::write(&path, "orders = node-1\n").unwrap();
        let refused = Map::load_at_start(&path, &members, 2, false).unwrap_err();
        assert!(refused.to_string().contains("needs 2"), "{refused}");
        assert!(matches!(
            Map::load_at_start(&dir.join("missing"), &members, 2, false),
            Err(LoadError::Read { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_refused_reload_keeps_the_previous_map() {
        let dir = std::env::temp_dir().join(format!("placement-map-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("map");
        std::fs::write(&path, "orders = node-1, node-2\n").unwrap();
        let members = Arc::new(fleet());
        let watched = Watched::new(Map::load(&path, &members, 2).unwrap());
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let follower = tokio::spawn(watched.clone().follow(
            path.clone(),
            Duration::from_millis(10),
            move || Arc::clone(&members),
            2,
            shutdown,
        ));
        std::fs::write(&path, "orders = node-1, node-9\n").unwrap();
        for _ in 0..200 {
            if watched.refused.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(watched.refused.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(
            watched.get().get("orders").unwrap().nodes,
            vec!["node-1", "node-2"]
        );
        std::fs::write(&path, "orders = node-2, node-3\n").unwrap();
        for _ in 0..200 {
            if watched.get().get("orders").unwrap().nodes[0] == "node-2" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            watched.get().get("orders").unwrap().nodes,
            vec!["node-2", "node-3"]
        );
        stop.send(true).unwrap();
        follower.await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
