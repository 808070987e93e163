//! Following the registry: one read of every record per period, shared by
//! everything on a node that needs them.
//!
//! A node used to read the registry on two timers — the members view every
//! registry renewal, the standby watcher every third of the lease TTL —
//! each a listing and one read per record: about N² reads per period across
//! a fleet of N nodes (the scale model in `docs/benchmarks.md` measured
//! 9,427 ops/s at 100 nodes). [`follow`] reads the records once per period
//! through the store's bulk prefix read (one query on `PostgreSQL`) and hands
//! the same records to each user.

use std::sync::Arc;
use std::time::Duration;

use corium_store::StoreError;

use super::{PREFIX, Record};
use crate::prefix_read::PrefixRead;

/// The most record bytes one registry read holds: a record is a few hundred
/// bytes plus ~30 per owned database name, so 64 MiB is room for a million
/// owned databases. A registry past it is an error, never a partial view
/// (a missing record would hide a dead node's databases from their
/// candidates).
pub const MAX_REGISTRY_BYTES: usize = 64 << 20;

/// How often a node reads the registry: its renewal period, and at most a
/// third of the lease TTL, since each read is also a standby-watcher round
/// (a lapsed lease is noticed within a third of the TTL).
#[must_use]
pub fn period(registry_renew: Duration, lease_ttl: Duration) -> Duration {
    registry_renew.min(lease_ttl / 3).max(Duration::from_millis(50))
}

/// Every registry record, expired ones included, read through `reader` in
/// name order. Records that do not decode (a newer or damaged writer) are
/// skipped, as a per-record read skips them.
///
/// # Errors
/// Storage, or a registry larger than [`MAX_REGISTRY_BYTES`].
pub async fn read_records(reader: &dyn PrefixRead) -> Result<Vec<Record>, StoreError> {
    let read = reader.read_prefix(PREFIX, MAX_REGISTRY_BYTES).await?;
    if !read.complete {
        return Err(StoreError::Backend {
            kind: "registry".into(),
            detail: format!(
                "the node registry holds more than {MAX_REGISTRY_BYTES} bytes of records; \
                 refusing a partial view"
            ),
        });
    }
    Ok(read
        .rows
        .iter()
        .filter_map(|(_, bytes)| Record::decode(bytes))
        .collect())
}

/// Reads every record every `every` (each read bounded by `timeout`) and
/// hands them to `on_read`, until `stop`. A failed read is logged here and
/// skipped: users keep what they last had.
pub async fn follow(
    reader: Arc<dyn PrefixRead>,
    every: Duration,
    timeout: Duration,
    on_read: impl Fn(Vec<Record>) + Send,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut ticks = corium_fleet_common::every::Every::new(every, stop);
    while ticks.tick().await {
        match tokio::time::timeout(timeout, read_records(reader.as_ref())).await {
            Ok(Ok(records)) => on_read(records),
            Ok(Err(error)) => tracing::warn!(%error, "cannot read the node registry"),
            Err(_) => tracing::warn!(timeout_ms = timeout.as_millis(), "node registry read timed out"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use corium_fleet_common::owner::now_unix_ms;
    use corium_store::{FullStore, RootStore as _};

    use super::*;
    use crate::prefix_read::ListThenRead;
    use crate::registry::Members;

    fn record(id: &str, expires_unix_ms: i64, owned: &[&str]) -> Record {
        Record {
            node_id: id.into(),
            incarnation: format!("{id}-1"),
            zone: "z".into(),
            weight: 1,
            endpoint: format!("http://{id}"),
            expires_unix_ms,
            owned: owned.iter().map(|db| (*db).to_owned()).collect(),
            load: None,
            features: Vec::new(),
            storage_keys: Vec::new(),
        }
    }

    async fn put(store: &dyn FullStore, record: &Record) {
        store
            .cas_root(&record.name(), None, &record.encode())
            .await
            .unwrap();
    }

    #[test]
    fn the_registry_is_read_every_third_of_the_ttl_at_most() {
        let ms = Duration::from_millis;
        assert_eq!(period(ms(3_000), ms(5_000)), ms(5_000) / 3);
        assert_eq!(period(ms(1_000), ms(5_000)), ms(1_000));
        assert_eq!(period(ms(1_000), ms(60)), ms(50));
    }

    #[tokio::test]
    async fn one_read_returns_every_record_and_members_take_the_live_ones() {
        let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
        let far = now_unix_ms() + 60_000;
        put(store.as_ref(), &record("n2", far, &["b"])).await;
        put(store.as_ref(), &record("n1", far, &["a"])).await;
        put(store.as_ref(), &record("dead", now_unix_ms() - 1, &["c", "d"])).await;
        // Not a registry record: never read as one.
        store.cas_root("fleet-nodes-other", None, b"{}").await.unwrap();
        store
            .cas_root("fleet-node:junk", None, b"not json")
            .await
            .unwrap();

        let records = read_records(&ListThenRead(Arc::clone(&store))).await.unwrap();
        let ids: Vec<&str> = records.iter().map(|r| r.node_id.as_str()).collect();
        assert_eq!(
            ids,
            ["dead", "n1", "n2"],
            "every decodable record, expired ones included"
        );
        assert_eq!(
            records[0].owned,
            ["c", "d"],
            "a dead node's owned list stays readable"
        );

        let members = Members::default();
        members.set_live(&records);
        let live: Vec<String> = members.get().iter().map(|m| m.node_id.clone()).collect();
        assert_eq!(live, ["n1", "n2"]);
        // Nothing live: the members stay as they were.
        members.set_live(&records[..1]);
        assert_eq!(members.get().len(), 2);
    }

    /// A reader whose every read stops at its byte bound.
    struct Truncating;

    #[async_trait::async_trait]
    impl PrefixRead for Truncating {
        async fn read_prefix(
            &self,
            _prefix: &str,
            _max_bytes: usize,
        ) -> Result<crate::prefix_read::PrefixRows, StoreError> {
            Ok(crate::prefix_read::PrefixRows::default())
        }

        async fn list_after(&self, _prefix: &str, _after: &str) -> Result<Vec<String>, StoreError> {
            Ok(Vec::new())
        }
    }

    #[tokio::test]
    async fn a_partial_read_is_an_error_not_a_smaller_registry() {
        let error = read_records(&Truncating).await.unwrap_err();
        assert!(error.to_string().contains("partial view"), "{error}");
    }

    #[tokio::test(start_paused = true)]
    async fn follow_reads_once_per_period_until_stopped() {
        let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
        put(store.as_ref(), &record("n1", now_unix_ms() + 60_000, &[])).await;
        let reads = Arc::new(Mutex::new(0_u32));
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let counted = Arc::clone(&reads);
        let task = tokio::spawn(follow(
            Arc::new(ListThenRead(store)),
            Duration::from_secs(1),
            Duration::from_secs(5),
            move |records| {
                assert_eq!(records.len(), 1);
                *counted.lock().unwrap() += 1;
            },
            stop_rx,
        ));
        // Ticks at 0, 1, 2 and 3 s.
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        stop_tx.send(true).unwrap();
        task.await.unwrap();
        assert_eq!(*reads.lock().unwrap(), 4);
    }
}
