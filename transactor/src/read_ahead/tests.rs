//! The read-ahead's rules, over an in-memory store.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use corium_fleet_store::prefix_read::{ListThenRead, PrefixRead};
use corium_store::{BlobId, BlobStore as _, FullStore, RootStore as _};

use super::log::KEPT_AFTER_OPEN;
use super::pool::{is_record, log_prefix};
use super::*;

fn record(db: &str, version: u64, t: u64) -> String {
    format!("log:{db}:v{version:020}:r{t:020}")
}

/// A counter's value now.
fn count(counter: &std::sync::atomic::AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// A store holding log records `ts` of database `a` (lease version 1), each
/// `bytes`.
async fn store_with_log(ts: std::ops::RangeInclusive<u64>, bytes: &[u8]) -> Arc<dyn FullStore> {
    let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
    for t in ts {
        store.cas_root(&record("a", 1, t), None, bytes).await.unwrap();
    }
    store
}

/// A budget of `mib` for reading ahead and `warm_mib` for warm databases,
/// reading `store` by a listing and a read a record.
fn budget_over(store: &Arc<dyn FullStore>, mib: usize, warm_mib: usize) -> Budget {
    Budget::new(mib, warm_mib, Arc::new(ListThenRead(Arc::clone(store))))
}

#[test]
fn only_per_record_keys_are_kept() {
    let prefix = log_prefix("a");
    assert!(is_record(&prefix, &record("a", 1, 7)));
    for name in [
        "log:a:v00000000000000000001".to_owned(),
        "log:a:v00000000000000000001:c00000000000000000002".to_owned(),
        record("ab", 1, 7),
        "log:a:v1:r7".to_owned(),
        "meta:a".to_owned(),
    ] {
        assert!(!is_record(&prefix, &name), "{name}");
    }
}

#[tokio::test]
async fn the_first_log_listing_reads_ahead_and_later_reads_are_served_until_finish() {
    let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
    for t in 1..=3 {
        store
            .cas_root(&record("a", 1, t), None, &[u8::try_from(t).unwrap()])
            .await
            .unwrap();
    }
    store.cas_root(&record("b", 1, 1), None, b"other").await.unwrap();
    let budget = budget_over(&store, 1, 0);
    let ahead = budget.start("a");
    assert!(
        ahead.list("meta:", store.as_ref()).await.is_none(),
        "other prefixes pass through"
    );
    let names = ahead
        .list(&log_prefix("a"), store.as_ref())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(names, (1..=3).map(|t| record("a", 1, t)).collect::<Vec<_>>());
    // A record another process writes after the read (a deposed writer's)
    // is neither served from memory nor in the later listings of the open:
    // every pass sees the one listing.
    store.cas_root(&record("a", 1, 4), None, b"late").await.unwrap();
    assert_eq!(ahead.get(&record("a", 1, 2)), Some(vec![2]));
    assert_eq!(ahead.get(&record("a", 1, 4)), None);
    for _ in 0..3 {
        let again = ahead
            .list(&log_prefix("a"), store.as_ref())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(again, names, "the first listing, served");
    }
    assert_eq!(count(&budget.counts.listings_served), 3);
    // A log root of the cell's own makes it stale: the next listing is
    // storage's (the cell's record in it), and is served in turn.
    ahead.writing(&record("a", 2, 5));
    store.cas_root(&record("a", 2, 5), None, b"own").await.unwrap();
    ahead.writing("db:a");
    let fresh = ahead
        .list(&log_prefix("a"), store.as_ref())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(fresh, store.list_roots(&log_prefix("a")).await.unwrap());
    assert!(fresh.contains(&record("a", 2, 5)));
    assert_eq!(count(&budget.counts.listings_served), 3);
    let served = ahead
        .list(&log_prefix("a"), store.as_ref())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(served, fresh);
    assert_eq!(
        count(&budget.counts.listings_served),
        4,
        "a root outside the log (db:a) changes nothing"
    );
    // The budget holds only what the bytes use (3 bytes: 1 KiB).
    assert_eq!(budget.free_kib(), 1023);
    ahead.finish();
    assert_eq!(ahead.get(&record("a", 1, 2)), None);
    assert_eq!(budget.free_kib(), 1024);
}

#[tokio::test]
async fn a_spent_budget_or_an_off_switch_reads_nothing_ahead() {
    let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
    let reader: Arc<dyn PrefixRead> = Arc::new(ListThenRead(Arc::clone(&store)));
    store.cas_root(&record("b", 1, 1), None, b"x").await.unwrap();
    let reads_ahead =
        async |ahead: &ReadAhead, db: &str| ahead.list(&log_prefix(db), store.as_ref()).await.is_some();
    let off = Budget::new(0, 0, Arc::clone(&reader));
    let off_ahead = off.start("b");
    assert!(!reads_ahead(&off_ahead, "b").await, "read-ahead off");
    let _whole_log = off_ahead.whole_log();
    assert!(!reads_ahead(&off_ahead, "b").await, "read-ahead off");
    let budget = Budget::new(64, 0, reader);
    let first = budget.start("a");
    assert!(
        !reads_ahead(&budget.start("b"), "b").await,
        "the first reserved all of it"
    );
    assert_eq!(count(&budget.counts.skipped), 1);
    first.finish();
    drop(first);
    assert!(reads_ahead(&budget.start("b"), "b").await);
}

#[tokio::test]
async fn a_whole_log_read_arms_an_open_cells_read_ahead_until_its_last_guard_goes() {
    let store = store_with_log(1..=2, b"rec").await;
    let budget = budget_over(&store, 1, 0);
    let prefix = log_prefix("a");
    // An activation that read ahead, then finished.
    let ahead = budget.start("a");
    assert!(ahead.list(&prefix, store.as_ref()).await.is_some());
    ahead.finish();
    assert_eq!(budget.free_kib(), 1024);
    assert!(
        ahead.list(&prefix, store.as_ref()).await.is_none(),
        "off once open"
    );
    // Two overlapping whole-log reads share one bulk read.
    let first = ahead.whole_log();
    let second = ahead.whole_log();
    store.cas_root(&record("a", 1, 3), None, b"new").await.unwrap();
    let names = ahead.list(&prefix, store.as_ref()).await.unwrap().unwrap();
    assert_eq!(
        names.len(),
        3,
        "the bulk read is the listing, new records included"
    );
    assert_eq!(
        ahead.list(&prefix, store.as_ref()).await.unwrap().unwrap(),
        names,
        "one bulk read; the second listing is the first's"
    );
    assert_eq!(ahead.get(&record("a", 1, 3)).as_deref(), Some(&b"new"[..]));
    assert_eq!(count(&budget.counts.whole_log_reads), 1);
    assert_eq!(count(&budget.counts.reads), 1, "counted apart");
    drop(first);
    assert!(ahead.get(&record("a", 1, 1)).is_some(), "the second still reads");
    drop(second);
    assert_eq!(ahead.get(&record("a", 1, 1)), None, "dropped with the last guard");
    assert_eq!(budget.free_kib(), 1024, "and its budget came back");
    // The listing went with them: the next whole-log read lists again.
    store.cas_root(&record("a", 1, 4), None, b"next").await.unwrap();
    let guard = ahead.whole_log();
    let again = ahead.list(&prefix, store.as_ref()).await.unwrap().unwrap();
    assert_eq!(again.len(), 4, "{again:?}");
    drop(guard);
    // A cell created here (no activation) arms the same way.
    let created = budget.idle("a");
    assert!(created.list(&prefix, store.as_ref()).await.is_none());
    let guard = created.whole_log();
    assert!(created.list(&prefix, store.as_ref()).await.is_some());
    drop(guard);
    assert_eq!(budget.free_kib(), 1024);
}

#[tokio::test]
async fn a_prepared_log_starts_the_activation_keeps_no_fork_records_and_reads_the_tail() {
    let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
    store.cas_root(&record("a", 0, 1), None, b"forked").await.unwrap();
    for t in 2..=3 {
        store.cas_root(&record("a", 1, t), None, b"old").await.unwrap();
    }
    let budget = budget_over(&store, 1, 0);
    let prepared = budget.prepare("a", store.as_ref()).await.unwrap();
    assert_eq!(
        prepared,
        PreparedLog {
            records: 2,
            bytes: 6,
            index_blobs: 0,
            index_bytes: 0
        },
        "the version-0 record is not kept"
    );
    // Committed after the prepare: the tail.
    store.cas_root(&record("a", 1, 4), None, b"tail").await.unwrap();
    let ahead = budget.start("a");
    assert_eq!(
        ahead.get(&record("a", 1, 2)).as_deref(),
        Some(&b"old"[..]),
        "served before the listing too"
    );
    let listed = ahead
        .list(&log_prefix("a"), store.as_ref())
        .await
        .expect("the first listing reads the tail")
        .unwrap();
    assert_eq!(
        listed,
        store.list_roots(&log_prefix("a")).await.unwrap(),
        "the listing is storage's, taken now"
    );
    assert_eq!(ahead.get(&record("a", 1, 2)).as_deref(), Some(&b"old"[..]));
    assert_eq!(
        ahead.get(&record("a", 0, 1)),
        None,
        "a fork record is read from storage"
    );
    assert_eq!(
        ahead.get(&record("a", 1, 4)).as_deref(),
        Some(&b"tail"[..]),
        "the tail was read with the listing"
    );
    assert_eq!(
        ahead
            .list(&log_prefix("a"), store.as_ref())
            .await
            .unwrap()
            .unwrap(),
        listed,
        "later listings are that one"
    );
    assert_eq!(count(&budget.counts.prepared_used), 1);
    ahead.finish();
    assert_eq!(budget.free_kib(), 1024, "the budget came back");
}

#[tokio::test]
async fn a_read_stopped_at_its_bound_lists_from_storage_and_serves_what_it_read() {
    let store = store_with_log(1..=3, &vec![0; 400 << 10]).await;
    let budget = budget_over(&store, 1, 0);
    let ahead = budget.start("a");
    let names = ahead
        .list(&log_prefix("a"), store.as_ref())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(names.len(), 3, "every record listed");
    assert!(ahead.get(&record("a", 1, 2)).is_some());
    assert!(ahead.get(&record("a", 1, 3)).is_none(), "past the 1 MiB bound");
}

/// Publishes an index for `db`: chunks, a manifest naming them, and a
/// `db:` root naming the manifest. Returns (manifest, chunks).
async fn publish_index(
    store: &dyn FullStore,
    db: &str,
    chunks: &[&[u8]],
    encrypted: bool,
) -> (BlobId, Vec<BlobId>) {
    let mut ids = Vec::new();
    for chunk in chunks {
        ids.push(store.put(chunk).await.unwrap());
    }
    let manifest = store
        .put(&corium_store::encode_index_manifest(&ids))
        .await
        .unwrap();
    let root = corium_store::DbRoot {
        format_version: corium_store::FORMAT_VERSION,
        lease_version: 1,
        owner: "n1".into(),
        lease_expires_unix_ms: 0,
        owner_endpoint: String::new(),
        index_basis_t: 1,
        roots: Some([
            manifest.clone(),
            manifest.clone(),
            manifest.clone(),
            manifest.clone(),
        ]),
        history_roots: Some([
            manifest.clone(),
            manifest.clone(),
            manifest.clone(),
            manifest.clone(),
        ]),
        next_entity_id: 0,
        last_tx_instant: i64::MIN,
        key_manifest_version: u64::from(encrypted),
    };
    let name = corium_store::db_root_name(db);
    let old = store.get_root(&name).await.unwrap();
    store
        .cas_root(&name, old.as_deref(), &root.encode())
        .await
        .unwrap();
    (manifest, ids)
}

#[tokio::test]
async fn an_activations_first_blob_read_reads_the_whole_index_and_serves_both_passes_until_finish() {
    let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
    let (manifest, chunks) =
        publish_index(store.as_ref(), "a", &[b"chunk-1", b"chunk-2", b"chunk-3"], false).await;
    let unnamed = store.put(b"not in the index").await.unwrap();
    let budget = budget_over(&store, 1, 0);
    let ahead = budget.start("a");
    // Recovery lists the log first: that read keeps only the budget its
    // bytes use (none here), the rest is free for the index.
    assert!(ahead.list(&log_prefix("a"), store.as_ref()).await.is_some());
    for _pass in 0..2 {
        assert_eq!(
            ahead.blob(&manifest, store.as_ref()).await,
            store.get(&manifest).await.unwrap()
        );
        for chunk in &chunks {
            assert_eq!(
                ahead.blob(chunk, store.as_ref()).await,
                store.get(chunk).await.unwrap()
            );
        }
    }
    assert_eq!(
        ahead.blob(&unnamed, store.as_ref()).await,
        None,
        "read from storage"
    );
    assert_eq!(count(&budget.counts.index_reads), 1, "one read of the index");
    assert_eq!(count(&budget.counts.index_blobs_served), 8);
    assert!(budget.free_kib() < 1024, "the blobs hold budget");
    ahead.finish();
    assert_eq!(
        ahead.blob(&manifest, store.as_ref()).await,
        None,
        "dropped at finish"
    );
    assert_eq!(budget.free_kib(), 1024, "and the budget came back");
}

#[tokio::test]
async fn a_prepared_index_is_served_and_an_encrypted_or_unpublished_one_reads_nothing() {
    let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
    let (manifest, chunks) = publish_index(store.as_ref(), "a", &[b"one", b"two"], false).await;
    let budget = budget_over(&store, 1, 0);
    let prepared = budget.prepare("a", store.as_ref()).await.unwrap();
    assert_eq!(prepared.index_blobs, 3, "the manifest and its two chunks");
    // Published again after the prepare: the first blob the open lacks
    // tops the held index up from the root as it is now.
    let (_, newer) = publish_index(store.as_ref(), "a", &[b"one", b"three"], false).await;
    let ahead = budget.start("a");
    assert_eq!(
        ahead.blob(&chunks[1], store.as_ref()).await.as_deref(),
        Some(&b"two"[..])
    );
    assert!(ahead.blob(&manifest, store.as_ref()).await.is_some());
    let reads = count(&budget.counts.index_reads);
    assert_eq!(
        ahead.blob(&newer[1], store.as_ref()).await.as_deref(),
        Some(&b"three"[..])
    );
    assert_eq!(count(&budget.counts.index_reads), reads + 1);
    ahead.finish();

    publish_index(store.as_ref(), "secret", &[b"ciphertext"], true).await;
    let ahead = budget.start("secret");
    let any = store.put(b"ciphertext").await.unwrap();
    assert_eq!(
        ahead.blob(&any, store.as_ref()).await,
        None,
        "an encrypted index is not parsed"
    );
    ahead.finish();
    let ahead = budget.start("never-indexed");
    assert_eq!(ahead.blob(&any, store.as_ref()).await, None);
}

#[tokio::test]
async fn a_warm_database_is_refreshed_with_new_records_only_and_its_activation_starts_from_it() {
    let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
    store.cas_root(&record("a", 0, 1), None, b"forked").await.unwrap();
    for t in 2..=3 {
        store.cas_root(&record("a", 1, t), None, b"old").await.unwrap();
    }
    let (manifest, _) = publish_index(store.as_ref(), "a", &[b"chunk"], false).await;
    let budget = budget_over(&store, 1, 1);
    let warm = Arc::clone(&budget.warm);
    warm.refresh("a", store.as_ref()).await.unwrap();
    assert_eq!(count(&warm.counts.records_read), 2, "no fork record");
    assert_eq!(count(&warm.counts.blobs_read), 2, "the manifest and its chunk");
    store.cas_root(&record("a", 1, 4), None, b"new").await.unwrap();
    warm.refresh("a", store.as_ref()).await.unwrap();
    assert_eq!(count(&warm.counts.records_read), 3, "only the new record");
    assert_eq!(
        count(&budget.counts.listings_since),
        1,
        "the second refresh listed after the first one's names"
    );
    assert_eq!(count(&warm.counts.blobs_read), 2, "the index did not change");
    assert_eq!(warm.usage().0, 1);
    // The takeover: the listing is storage's, the records and blobs are
    // served, a record committed after the last refresh is read.
    store.cas_root(&record("a", 1, 5), None, b"tail").await.unwrap();
    let ahead = budget.start("a");
    let listed = ahead
        .list(&log_prefix("a"), store.as_ref())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(listed.len(), 5, "storage's listing, fork record included");
    assert_eq!(listed, store.list_roots(&log_prefix("a")).await.unwrap());
    assert_eq!(
        count(&budget.counts.listings_since),
        2,
        "the takeover listed after the warm names"
    );
    assert_eq!(ahead.get(&record("a", 1, 4)).as_deref(), Some(&b"new"[..]));
    assert_eq!(
        ahead.get(&record("a", 1, 5)).as_deref(),
        Some(&b"tail"[..]),
        "the tail was read with the listing"
    );
    assert!(ahead.blob(&manifest, store.as_ref()).await.is_some());
    assert_eq!(count(&warm.counts.takeovers), 1);
    assert_eq!(warm.usage(), (0, 0), "handed over, not kept twice");
    ahead.finish();
}

#[tokio::test]
async fn warm_records_go_with_their_database_and_stop_at_the_budget() {
    let store = store_with_log(1..=3, &vec![7; 400 << 10]).await;
    store.cas_root(&record("b", 1, 1), None, b"b").await.unwrap();
    let budget = budget_over(&store, 1, 1);
    let warm = Arc::clone(&budget.warm);
    warm.refresh("a", store.as_ref()).await.unwrap();
    assert_eq!(count(&warm.counts.records_read), 2, "1 MiB holds two");
    assert_eq!(count(&warm.counts.budget_full), 1);
    assert!(warm.usage().1 <= warm.budget_bytes());
    // No longer its first standby: dropped, and the budget comes back.
    warm.retain(&std::collections::HashSet::from(["b".to_owned()]));
    assert_eq!(warm.usage(), (0, 0));
    warm.refresh("b", store.as_ref()).await.unwrap();
    assert_eq!(warm.usage(), (1, 1));
    // Off: nothing is read.
    let off = budget_over(&store, 1, 0);
    off.warm.refresh("b", store.as_ref()).await.unwrap();
    assert_eq!(off.warm.usage(), (0, 0));
}

#[tokio::test]
async fn warm_records_fill_at_most_half_the_nodes_room_and_go_when_dropped() {
    let store = store_with_log(1..=8, &vec![7; 100 << 10]).await;
    let budget = budget_over(&store, 1, 4);
    let warm = Arc::clone(&budget.warm);
    // 500 KiB of room under the node's budget: at most 250 KiB warm.
    warm.limit_to_room(Some(500 << 10));
    warm.refresh("a", store.as_ref()).await.unwrap();
    let (_, held) = warm.usage();
    assert!(held > 0, "something is kept");
    assert!(held <= 250 << 10, "{held} bytes held past half the room");
    assert_eq!(count(&warm.counts.records_read), 2);
    assert_eq!(count(&warm.counts.budget_full), 1);
    // No room at all: nothing more is read, and what is held stays until
    // dropped.
    warm.limit_to_room(Some(0));
    warm.refresh("a", store.as_ref()).await.unwrap();
    assert_eq!(count(&warm.counts.records_read), 2);
    assert_eq!(warm.usage().1, held);
    warm.drop_all();
    assert_eq!(warm.usage(), (0, 0), "dropped, with its budget");
    // No node budget: only the warm budget bounds it (all 800 KiB fit).
    warm.limit_to_room(None);
    warm.refresh("a", store.as_ref()).await.unwrap();
    assert_eq!(warm.usage(), (1, 8 * (100 << 10)));
    // The firm part of the read-ahead budget never counts warm bytes.
    assert_eq!(budget.held_bytes(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_opens_records_are_kept_for_the_first_whole_log_reads_then_dropped() {
    let store = store_with_log(1..=3, b"rec").await;
    let budget = budget_over(&store, 1, 0);
    let prefix = log_prefix("a");
    let ahead = budget.start("a");
    let listed = ahead.list(&prefix, store.as_ref()).await.unwrap().unwrap();
    ahead.finish_keeping();
    assert_eq!(count(&budget.counts.kept), 1);
    assert_eq!(budget.free_kib(), 1023, "the records still hold their budget");
    let served_by_recovery = count(&budget.counts.served);
    // A replay right after the open: its listings are the open's (the cell
    // wrote nothing since) and its reads are served.
    {
        let _replay = ahead.whole_log();
        assert_eq!(
            ahead.list(&prefix, store.as_ref()).await.unwrap().unwrap(),
            listed
        );
        assert_eq!(ahead.get(&record("a", 1, 2)).as_deref(), Some(&b"rec"[..]));
    }
    assert_eq!(count(&budget.counts.kept_used), 1);
    assert_eq!(
        count(&budget.counts.served),
        served_by_recovery,
        "served to a whole-log read, not counted as recovery's"
    );
    assert_eq!(count(&budget.counts.whole_log_reads), 0, "no bulk read");
    // The cell commits: the next whole-log read lists from storage and
    // still reads the kept records from memory.
    ahead.writing(&record("a", 2, 4));
    store.cas_root(&record("a", 2, 4), None, b"new").await.unwrap();
    {
        let _read = ahead.whole_log();
        let fresh = ahead.list(&prefix, store.as_ref()).await.unwrap().unwrap();
        assert_eq!(fresh.len(), 4, "the new record is listed: {fresh:?}");
        assert!(ahead.get(&record("a", 1, 1)).is_some());
        assert_eq!(ahead.get(&record("a", 2, 4)), None, "the tail comes from storage");
    }
    // Its time up, the records go and the budget comes back.
    tokio::time::sleep(KEPT_AFTER_OPEN + std::time::Duration::from_millis(10)).await;
    assert_eq!(ahead.get(&record("a", 1, 1)), None);
    assert_eq!(budget.free_kib(), 1024);
    // A failed open keeps nothing.
    let failed = budget.start("a");
    assert!(failed.list(&prefix, store.as_ref()).await.is_some());
    failed.finish();
    assert_eq!(failed.get(&record("a", 1, 1)), None);
    assert_eq!(budget.free_kib(), 1024);
}

#[tokio::test]
async fn kept_records_give_their_budget_to_the_next_activation() {
    let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
    store
        .cas_root(&record("a", 1, 1), None, &vec![7; 300 << 10])
        .await
        .unwrap();
    store.cas_root(&record("b", 1, 1), None, b"b").await.unwrap();
    let budget = budget_over(&store, 1, 0);
    let kept = budget.start("a");
    assert!(kept.list(&log_prefix("a"), store.as_ref()).await.is_some());
    kept.finish_keeping();
    assert_eq!(budget.free_kib(), 1024 - 300);
    // Another database activates: it needs the budget more.
    let next = budget.start("b");
    assert_eq!(count(&budget.counts.kept_evicted), 1);
    assert_eq!(kept.get(&record("a", 1, 1)), None, "the kept records went");
    assert!(
        next.list(&log_prefix("b"), store.as_ref()).await.is_some(),
        "read ahead"
    );
    assert_eq!(count(&budget.counts.skipped), 0);
    next.finish();
    assert_eq!(budget.free_kib(), 1024);
    // A whole-log read in progress keeps them until it ends.
    let kept = budget.start("a");
    assert!(kept.list(&log_prefix("a"), store.as_ref()).await.is_some());
    kept.finish_keeping();
    let reading = kept.whole_log();
    let next = budget.start("b");
    assert!(
        kept.get(&record("a", 1, 1)).is_some(),
        "in use: not dropped under the read"
    );
    drop(reading);
    assert_eq!(kept.get(&record("a", 1, 1)), None, "dropped when the read ended");
    next.finish();
}

#[tokio::test]
async fn a_listing_since_a_held_one_is_the_full_listing_or_nothing() {
    let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
    let reader = ListThenRead(Arc::clone(&store));
    let counts = super::pool::Counts::default();
    let prefix = log_prefix("a");
    for t in 1..=3 {
        store.cas_root(&record("a", 1, t), None, b"r").await.unwrap();
    }
    let known = store.list_roots(&prefix).await.unwrap();
    store.cas_root(&record("a", 2, 4), None, b"r").await.unwrap();
    let since = super::pool::list_since(&reader, &counts, &prefix, &known)
        .await
        .unwrap();
    assert_eq!(since, Some(store.list_roots(&prefix).await.unwrap()));
    assert_eq!(
        super::pool::list_since(&reader, &counts, &prefix, &known[..1])
            .await
            .unwrap(),
        None,
        "one name proves nothing"
    );
    // The database deleted (every name removed) and created again: the held
    // last name is gone, so the held listing is not used.
    for name in store.list_roots(&prefix).await.unwrap() {
        store.delete_root(&name).await.unwrap();
    }
    store
        .cas_root(&record("a", 5, 1), None, b"new life")
        .await
        .unwrap();
    assert_eq!(
        super::pool::list_since(&reader, &counts, &prefix, &known)
            .await
            .unwrap(),
        None
    );
    assert_eq!(count(&counts.listings_since), 1);
}

/// A reader through which the owner commits one more record each time the
/// log is read in bulk (it keeps serving while its target reads ahead).
struct CommittingWhileRead {
    inner: ListThenRead,
    store: Arc<dyn FullStore>,
    next: std::sync::atomic::AtomicU64,
}

#[async_trait::async_trait]
impl PrefixRead for CommittingWhileRead {
    async fn read_prefix(
        &self,
        prefix: &str,
        max_bytes: usize,
    ) -> Result<corium_fleet_store::prefix_read::PrefixRows, corium_store::StoreError> {
        let read = self.inner.read_prefix(prefix, max_bytes).await;
        let t = self.next.fetch_add(1, Ordering::Relaxed);
        self.store
            .cas_root(&record("a", 1, t), None, b"meanwhile")
            .await?;
        read
    }

    async fn list_after(&self, prefix: &str, after: &str) -> Result<Vec<String>, corium_store::StoreError> {
        self.inner.list_after(prefix, after).await
    }
}

#[tokio::test]
async fn a_handoffs_read_catches_up_with_what_the_owner_committed_meanwhile() {
    let store = store_with_log(1..=3, b"old").await;
    let reader = CommittingWhileRead {
        inner: ListThenRead(Arc::clone(&store)),
        store: Arc::clone(&store),
        next: std::sync::atomic::AtomicU64::new(4),
    };
    let budget = Budget::new(1, 0, Arc::new(reader));
    let prepared = budget.prepare("a", store.as_ref()).await.unwrap();
    assert_eq!(prepared.records, 4, "the record committed during the read too");
    assert_eq!(count(&budget.counts.listings_since), 1);
    // The activation lists after the held names and has nothing to read.
    let ahead = budget.start("a");
    let listed = ahead
        .list(&log_prefix("a"), store.as_ref())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(listed, store.list_roots(&log_prefix("a")).await.unwrap());
    assert_eq!(ahead.get(&record("a", 1, 4)).as_deref(), Some(&b"meanwhile"[..]));
    assert_eq!(count(&budget.counts.listings_since), 2);
    ahead.finish();
}

#[tokio::test]
async fn a_warm_database_deleted_since_its_last_refresh_is_listed_in_full() {
    let store = store_with_log(1..=3, b"old").await;
    let budget = budget_over(&store, 1, 1);
    budget.warm.refresh("a", store.as_ref()).await.unwrap();
    for name in store.list_roots(&log_prefix("a")).await.unwrap() {
        store.delete_root(&name).await.unwrap();
    }
    store.cas_root(&record("a", 2, 1), None, b"reborn").await.unwrap();
    budget.warm.refresh("a", store.as_ref()).await.unwrap();
    assert_eq!(count(&budget.counts.listings_since), 0);
    let ahead = budget.start("a");
    let listed = ahead
        .list(&log_prefix("a"), store.as_ref())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        listed,
        [record("a", 2, 1)],
        "the old records are gone from the listing"
    );
    assert_eq!(ahead.get(&record("a", 1, 2)), None, "and from memory");
    assert_eq!(ahead.get(&record("a", 2, 1)).as_deref(), Some(&b"reborn"[..]));
    ahead.finish();
}

#[tokio::test]
async fn a_warm_index_the_owner_published_again_is_topped_up_once_at_the_first_blob_it_lacks() {
    let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
    store.cas_root(&record("a", 1, 1), None, b"r").await.unwrap();
    let (_, old_chunks) = publish_index(store.as_ref(), "a", &[b"kept chunk"], false).await;
    let budget = budget_over(&store, 1, 1);
    budget.warm.refresh("a", store.as_ref()).await.unwrap();
    // The owner publishes again (one chunk the same, one new) and dies.
    let (manifest, chunks) = publish_index(store.as_ref(), "a", &[b"kept chunk", b"new chunk"], false).await;
    assert_eq!(chunks[0], old_chunks[0]);
    let ahead = budget.start("a");
    let reads_before = count(&budget.counts.index_reads);
    assert_eq!(
        ahead.blob(&manifest, store.as_ref()).await,
        store.get(&manifest).await.unwrap(),
        "the new manifest, read with what it names"
    );
    assert_eq!(count(&budget.counts.index_reads), reads_before + 1);
    for chunk in &chunks {
        assert_eq!(
            ahead.blob(chunk, store.as_ref()).await,
            store.get(chunk).await.unwrap()
        );
    }
    // Topped up once: a blob the root does not name is storage's to give.
    let stray = store.put(b"stray").await.unwrap();
    assert_eq!(ahead.blob(&stray, store.as_ref()).await, None);
    assert_eq!(count(&budget.counts.index_reads), reads_before + 1, "one top-up");
    ahead.finish();
    assert_eq!(budget.free_kib(), 1024, "its budget came back");
}

#[tokio::test]
async fn a_refresh_after_the_takeover_does_not_read_beside_it() {
    let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
    store.cas_root(&record("a", 1, 1), None, b"r").await.unwrap();
    let budget = budget_over(&store, 1, 1);
    budget.warm.refresh("a", store.as_ref()).await.unwrap();
    let ahead = budget.start("a");
    let read = count(&budget.warm.counts.records_read);
    budget.warm.refresh("a", store.as_ref()).await.unwrap();
    assert_eq!(budget.warm.usage(), (0, 0), "not warmed again");
    assert_eq!(count(&budget.warm.counts.records_read), read);
    ahead.finish();
}
