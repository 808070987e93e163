//! `FaultyStore`: a storage wrapper that injects faults into the operations
//! one node makes, following a seeded [`Schedule`]: per-operation delay,
//! error, lost acknowledgement (the write happened, the caller sees an
//! error), stale root reads, a full partition from storage, a freeze (the
//! node's calls hang, then proceed: a paused process waking up) and a crash.
//!
//! It wraps Corium's `RootStore`/`BlobStore` below everything the node does
//! — leases, the native transaction log (one root per record batch), index
//! blobs, the registry — so a fault lands wherever the schedule says, at
//! any boundary of the commit/renew/publish protocol. The simulation tier
//! wraps each in-process node's view of one shared store in its own
//! `FaultyStore`; a real node wraps its store when
//! `CORIUM_FLEET_FAULT_SCHEDULE` is set (tests only; see `env.rs`).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use corium_store::{BlobId, BlobIdStream, BlobStore, FullStore, RootStore, StoreError};
use tokio::time::Instant;

use crate::schedule::{Fault, OpClass, Rng, Schedule, When};

/// How long a partitioned operation takes to fail (a refused connection,
/// not a hung one).
const PARTITION_FAILS_AFTER: Duration = Duration::from_millis(5);

/// The wrapper.
pub struct FaultyStore {
    inner: Arc<dyn FullStore>,
    state: Mutex<State>,
    /// Set by [`FaultyStore::crash_now`]: every operation fails from then on.
    severed: std::sync::atomic::AtomicBool,
}

/// A root's previous and latest value as this store saw them.
type Seen = (Option<Vec<u8>>, Option<Vec<u8>>);

#[derive(Debug)]
struct State {
    schedule: Schedule,
    /// When the schedule was armed: `@<ms>` entries count from here.
    epoch: Instant,
    rng: Rng,
    /// Operations seen per class (and in total, under `Any`), for
    /// `before`/`after` boundaries.
    counts: HashMap<OpClass, u64>,
    /// When each entry started (`None`: not yet).
    started: Vec<Option<Instant>>,
    /// For stale reads: per root, the value before the one this store last
    /// saw, and that last one.
    seen: HashMap<String, Seen>,
    /// Faults injected so far, by name.
    injected: BTreeMap<&'static str, u64>,
}

impl State {
    fn armed(schedule: Schedule) -> Self {
        Self {
            rng: Rng::new(schedule.seed),
            counts: HashMap::new(),
            started: schedule.entries.iter().map(|_| None).collect(),
            seen: HashMap::new(),
            injected: BTreeMap::new(),
            epoch: Instant::now(),
            schedule,
        }
    }

    fn start_of(&self, index: usize) -> Option<Instant> {
        match self.schedule.entries[index].when {
            When::At(at) => Some(self.epoch + at),
            When::Before(..) | When::After(..) => self.started[index],
        }
    }

    fn covers_now(&self, index: usize, now: Instant) -> bool {
        let entry = &self.schedule.entries[index];
        self.start_of(index)
            .is_some_and(|start| start <= now && (entry.fault.is_permanent() || now < start + entry.window))
    }
}

/// Which side of the operation a fault is looked up for.
#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Before,
    After,
}

/// The `abort` fault: the process dies here, with nothing flushed or
/// answered (the operation took effect when `phase` is "after").
fn abort(class: OpClass, phase: &str) -> ! {
    tracing::error!(?class, phase, "fault schedule: aborting the process");
    eprintln!("fault schedule: aborting the process {phase} a {class:?} operation");
    std::process::abort()
}

fn injected_error(what: &str) -> StoreError {
    StoreError::Io(std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        format!("storage fault injected: {what}"),
    ))
}

impl FaultyStore {
    /// Wraps `inner`, following `schedule`; `@<ms>` entries count from now.
    #[must_use]
    pub fn new(inner: Arc<dyn FullStore>, schedule: Schedule) -> Self {
        Self {
            inner,
            state: Mutex::new(State::armed(schedule)),
            severed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Replaces the schedule: times and operation counts start again from
    /// now (faults injected so far are kept in the tally).
    pub fn arm(&self, schedule: Schedule) {
        let mut state = self.state();
        let injected = std::mem::take(&mut state.injected);
        *state = State::armed(schedule);
        state.injected = injected;
    }

    /// The schedule this store follows.
    #[must_use]
    pub fn schedule(&self) -> Schedule {
        self.state().schedule.clone()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Faults injected so far, by name (`error`, `lost-ack`, …).
    #[must_use]
    pub fn injected(&self) -> BTreeMap<&'static str, u64> {
        self.state().injected.clone()
    }

    /// Whether a `crash` entry has started: the node behind this store is
    /// dead to storage from then on.
    #[must_use]
    pub fn crashed(&self) -> bool {
        if self.severed.load(std::sync::atomic::Ordering::Acquire) {
            return true;
        }
        let now = Instant::now();
        let state = self.state();
        (0..state.schedule.entries.len())
            .any(|index| state.schedule.entries[index].fault == Fault::Crash && state.covers_now(index, now))
    }

    /// Cuts the node off for good, outside the schedule: the simulation's
    /// process crash (nothing the node does reaches storage any more).
    pub fn crash_now(&self) {
        self.severed.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether a `freeze` entry covers this instant.
    #[must_use]
    pub fn frozen(&self) -> bool {
        let now = Instant::now();
        let state = self.state();
        (0..state.schedule.entries.len())
            .any(|index| state.schedule.entries[index].fault == Fault::Freeze && state.covers_now(index, now))
    }

    /// Counts an operation of `class` (an append counts as a log operation
    /// too). Returns its number in every class it counts toward.
    fn count(&self, class: OpClass) -> Vec<(OpClass, u64)> {
        let mut state = self.state();
        let mut classes = vec![class, OpClass::Any];
        if class == OpClass::Append {
            classes.push(OpClass::Log);
        }
        classes
            .into_iter()
            .map(|counted| {
                let n = state.counts.entry(counted).or_insert(0);
                *n += 1;
                (counted, *n)
            })
            .collect()
    }

    /// Starts the entries whose boundary this operation (numbered by
    /// [`Self::count`]) is.
    fn trigger(&self, phase: Phase, numbers: &[(OpClass, u64)]) {
        let now = Instant::now();
        let mut state = self.state();
        for index in 0..state.schedule.entries.len() {
            let entry = &state.schedule.entries[index];
            let ((When::Before(boundary_class, at), Phase::Before)
            | (When::After(boundary_class, at), Phase::After)) = (entry.when, phase)
            else {
                continue;
            };
            let hit = numbers
                .iter()
                .any(|(counted, n)| *counted == boundary_class && *n == at);
            if hit && state.started[index].is_none() {
                tracing::warn!(entry = %entry, "fault schedule: boundary reached; fault starts");
                state.started[index] = Some(now);
            }
        }
    }

    /// The fault to apply to one operation in `phase`, after the coin
    /// flips; the most severe wins. For `freeze`, also when it ends.
    /// `stale_only` looks for a stale-read entry alone (a root read asks
    /// that first); otherwise stale-read entries are left out.
    fn pick(&self, phase: Phase, class: OpClass, write: bool, stale_only: bool) -> Option<(Fault, Instant)> {
        let now = Instant::now();
        let mut state = self.state();
        let mut chosen: Option<(Fault, Instant)> = None;
        let severity = |fault: Fault| match fault {
            Fault::Abort => 7,
            Fault::Crash => 6,
            Fault::Partition => 5,
            Fault::Freeze => 4,
            Fault::Error | Fault::LostAck => 3,
            Fault::Stale => 2,
            Fault::Delay(_) => 1,
        };
        for index in 0..state.schedule.entries.len() {
            let entry = state.schedule.entries[index].clone();
            if !entry.ops.covers(class) || !state.covers_now(index, now) {
                continue;
            }
            let applies = match (entry.fault, phase) {
                (Fault::Stale, Phase::Before) => stale_only,
                _ if stale_only => false,
                (Fault::Abort | Fault::Crash | Fault::Partition | Fault::Freeze, _)
                | (Fault::Error | Fault::Delay(_), Phase::Before) => true,
                (Fault::LostAck, Phase::After) => write,
                _ => false,
            };
            if !applies || !state.rng.chance(entry.probability) {
                continue;
            }
            let until = state.start_of(index).map_or(now, |start| start + entry.window);
            if chosen.is_none_or(|(fault, _)| severity(entry.fault) > severity(fault)) {
                chosen = Some((entry.fault, until));
            }
        }
        if let Some((fault, _)) = chosen {
            let name = match fault {
                Fault::Delay(_) => "delay",
                Fault::Error => "error",
                Fault::LostAck => "lost-ack",
                Fault::Stale => "stale",
                Fault::Partition => "partition",
                Fault::Freeze => "freeze",
                Fault::Crash => "crash",
                Fault::Abort => "abort",
            };
            *state.injected.entry(name).or_insert(0) += 1;
        }
        chosen
    }

    /// Runs one operation under the schedule.
    async fn apply<T>(
        &self,
        class: OpClass,
        write: bool,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        if self.severed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(injected_error("crashed"));
        }
        let numbers = self.count(class);
        self.trigger(Phase::Before, &numbers);
        match self.pick(Phase::Before, class, write, false) {
            Some((Fault::Abort, _)) => abort(class, "before"),
            Some((Fault::Crash, _)) => return Err(injected_error("crashed")),
            Some((Fault::Partition, _)) => {
                tokio::time::sleep(PARTITION_FAILS_AFTER).await;
                return Err(injected_error("partitioned from storage"));
            }
            Some((Fault::Error, _)) => return Err(injected_error("error")),
            Some((Fault::Freeze, until)) => tokio::time::sleep_until(until).await,
            Some((Fault::Delay(by), _)) => tokio::time::sleep(by).await,
            Some((Fault::Stale | Fault::LostAck, _)) | None => {}
        }
        let result = op.await;
        if self.severed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(injected_error("crashed during the operation"));
        }
        self.trigger(Phase::After, &numbers);
        match self.pick(Phase::After, class, write, false) {
            Some((Fault::Abort, _)) => abort(class, "after"),
            // The operation took effect; its answer is lost.
            Some((Fault::Crash, _)) => Err(injected_error("crashed after the operation")),
            Some((Fault::Partition, _)) => Err(injected_error("partitioned before the answer")),
            Some((Fault::LostAck, _)) if result.is_ok() => Err(injected_error("acknowledgement lost")),
            Some((Fault::Freeze, until)) => {
                tokio::time::sleep_until(until).await;
                result
            }
            _ => result,
        }
    }

    fn saw(&self, name: &str, value: Option<&[u8]>) {
        let mut state = self.state();
        let slot = state.seen.entry(name.to_owned()).or_insert((None, None));
        if slot.1.as_deref() != value {
            slot.0 = slot.1.take();
            slot.1 = value.map(<[u8]>::to_vec);
        }
    }
}

#[async_trait]
impl BlobStore for FaultyStore {
    async fn put(&self, bytes: &[u8]) -> Result<BlobId, StoreError> {
        self.apply(OpClass::Blob, true, self.inner.put(bytes)).await
    }
    async fn get(&self, id: &BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        self.apply(OpClass::Blob, false, self.inner.get(id)).await
    }
    async fn contains(&self, id: &BlobId) -> Result<bool, StoreError> {
        self.apply(OpClass::Blob, false, self.inner.contains(id)).await
    }
    async fn put_if_absent(&self, bytes: &[u8]) -> Result<BlobId, StoreError> {
        self.apply(OpClass::Blob, true, self.inner.put_if_absent(bytes))
            .await
    }
    async fn delete(&self, id: &BlobId) -> Result<(), StoreError> {
        self.apply(OpClass::Blob, true, self.inner.delete(id)).await
    }
    async fn list(&self) -> Result<BlobIdStream, StoreError> {
        self.apply(OpClass::Blob, false, self.inner.list()).await
    }
    async fn modified_at(&self, id: &BlobId) -> Result<Option<SystemTime>, StoreError> {
        self.apply(OpClass::Blob, false, self.inner.modified_at(id)).await
    }
}

#[async_trait]
impl RootStore for FaultyStore {
    async fn get_root(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let class = OpClass::of_root(name);
        // A stale read answers the value this store saw before the latest
        // one (when it saw two), without asking storage.
        if self
            .pick(Phase::Before, class, false, true)
            .map(|(fault, _)| fault)
            == Some(Fault::Stale)
        {
            let previous = self
                .state()
                .seen
                .get(name)
                .and_then(|(previous, current)| (previous != current).then(|| previous.clone()));
            if let Some(previous) = previous {
                return Ok(previous);
            }
        }
        let value = self.apply(class, false, self.inner.get_root(name)).await?;
        self.saw(name, value.as_deref());
        Ok(value)
    }

    async fn cas_root(&self, name: &str, expected: Option<&[u8]>, new: &[u8]) -> Result<(), StoreError> {
        let result = self
            .apply(
                OpClass::of_write(name),
                true,
                self.inner.cas_root(name, expected, new),
            )
            .await;
        if result.is_ok() {
            self.saw(name, Some(new));
        }
        result
    }

    async fn delete_root(&self, name: &str) -> Result<(), StoreError> {
        let result = self
            .apply(OpClass::of_root(name), true, self.inner.delete_root(name))
            .await;
        if result.is_ok() {
            self.saw(name, None);
        }
        result
    }

    async fn list_roots(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        self.apply(OpClass::of_root(prefix), false, self.inner.list_roots(prefix))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(schedule: &str) -> FaultyStore {
        FaultyStore::new(
            Arc::new(corium_store::MemoryStore::default()),
            schedule.parse().unwrap(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_partition_fails_every_operation_inside_its_window_only() {
        let store = store("seed=1; @100ms partition for 200ms");
        store.cas_root("db:a", None, b"1").await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(store.get_root("db:a").await.is_err());
        assert!(store.put(b"x").await.is_err());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(store.get_root("db:a").await.unwrap(), Some(b"1".to_vec()));
        assert_eq!(store.injected()["partition"], 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_acknowledgement_still_writes() {
        let store = store("@0ms lost-ack for 1000ms op=log");
        assert!(store.cas_root("log:a:v1:r1", None, b"r").await.is_err());
        assert_eq!(store.get_root("log:a:v1:r1").await.unwrap(), Some(b"r".to_vec()));
        // Other classes are untouched.
        store.cas_root("db:a", None, b"1").await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn boundaries_count_operations_of_their_class() {
        let store = store("after lease#2 crash");
        store.cas_root("db:a", None, b"1").await.unwrap();
        store.get_root("log:a:v1:r1").await.unwrap();
        assert!(!store.crashed());
        // The second lease operation takes effect, then the node is gone.
        assert!(store.cas_root("db:a", Some(b"1"), b"2").await.is_err());
        assert!(store.crashed());
        assert!(store.get_root("meta:a").await.is_err());
        let inner = store.inner.clone();
        assert_eq!(inner.get_root("db:a").await.unwrap(), Some(b"2".to_vec()));
    }

    #[tokio::test(start_paused = true)]
    async fn append_boundaries_count_log_writes_only_and_log_boundaries_count_both() {
        let appends = store("after append#2 crash");
        appends.get_root("log:a:v1:r1").await.unwrap();
        appends.list_roots("log:a:").await.unwrap();
        appends.cas_root("log:a:v1:r1", None, b"t1").await.unwrap();
        assert!(!appends.crashed(), "reads of the log are not appends");
        // The second append lands, then the node is gone before it hears so.
        assert!(appends.cas_root("log:a:v1:r2", None, b"t2").await.is_err());
        assert!(appends.crashed());
        assert_eq!(
            appends.inner.get_root("log:a:v1:r2").await.unwrap(),
            Some(b"t2".to_vec())
        );
        // `log#n` counts appends and reads alike.
        let logs = store("after log#2 crash");
        logs.get_root("log:a:v1:r1").await.unwrap();
        assert!(logs.cas_root("log:a:v1:r1", None, b"t1").await.is_err());
        // `op=log` covers appends.
        let lost = store("@0ms lost-ack for 1000ms op=log");
        assert!(lost.cas_root("log:a:v1:r1", None, b"t1").await.is_err());
        assert_eq!(lost.injected()["lost-ack"], 1);
    }

    #[test]
    fn abort_parses_and_is_permanent() {
        let schedule: Schedule = "seed=3; after append#7 abort".parse().unwrap();
        assert_eq!(schedule.entries[0].fault, Fault::Abort);
        assert!(schedule.entries[0].fault.is_permanent());
        assert_eq!(schedule.to_string(), "seed=3; after append#7 abort");
    }

    #[tokio::test(start_paused = true)]
    async fn a_freeze_holds_calls_until_it_ends_then_lets_them_through() {
        let store = store("before lease#1 freeze for 500ms");
        let started = Instant::now();
        store.cas_root("db:a", None, b"1").await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(500));
        assert!(!store.frozen());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_read_answers_the_previous_value() {
        let store = store("@1000ms stale for 1000ms op=lease");
        store.cas_root("db:a", None, b"1").await.unwrap();
        store.cas_root("db:a", Some(b"1"), b"2").await.unwrap();
        assert_eq!(store.get_root("db:a").await.unwrap(), Some(b"2".to_vec()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(store.get_root("db:a").await.unwrap(), Some(b"1".to_vec()));
        assert_eq!(store.injected()["stale"], 1);
    }

    #[tokio::test(start_paused = true)]
    async fn probabilistic_faults_follow_the_seed() {
        async fn failures(seed: u64) -> Vec<bool> {
            let store = store(&format!("seed={seed}; @0ms error for 10000ms p=0.5"));
            let mut out = Vec::new();
            for _ in 0..32 {
                out.push(store.get_root("db:a").await.is_err());
            }
            out
        }
        let a = failures(5).await;
        assert_eq!(a, failures(5).await);
        assert_ne!(a, failures(6).await);
        assert!(a.iter().any(|f| *f) && a.iter().any(|f| !*f));
    }
}
