//! The read-ahead's rules, over an in-memory store.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use corium_fleet_store::prefix_read::{ListThenRead, PrefixRead};
use corium_store::{FullStore, RootStore as _};

use super::pool::is_record;
use super::*;

fn record(db: &str, version: u64, t: u64) -> String {
    format!("log:{db}:v{version:020}:r{t:020}")
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
    let budget = Budget::new(1, Arc::new(ListThenRead(Arc::clone(&store))));
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
    // A record written after the read is not served from memory.
    store.cas_root(&record("a", 2, 4), None, b"late").await.unwrap();
    assert_eq!(ahead.get(&record("a", 1, 2)), Some(vec![2]));
    assert_eq!(ahead.get(&record("a", 2, 4)), None);
    assert!(
        ahead.list(&log_prefix("a"), store.as_ref()).await.is_none(),
        "the second listing is storage's"
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
    let off = Budget::new(0, Arc::clone(&reader));
    let off_ahead = off.start("b");
    assert!(!reads_ahead(&off_ahead, "b").await, "read-ahead off");
    let _whole_log = off_ahead.whole_log();
    assert!(!reads_ahead(&off_ahead, "b").await, "read-ahead off");
    let budget = Budget::new(64, reader);
    let first = budget.start("a");
    assert!(
        !reads_ahead(&budget.start("b"), "b").await,
        "the first reserved all of it"
    );
    assert_eq!(budget.counts.skipped.load(Ordering::Relaxed), 1);
    first.finish();
    drop(first);
    assert!(reads_ahead(&budget.start("b"), "b").await);
}

#[tokio::test]
async fn a_whole_log_read_arms_an_open_cells_read_ahead_until_its_last_guard_goes() {
    let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
    for t in 1..=2 {
        store.cas_root(&record("a", 1, t), None, b"rec").await.unwrap();
    }
    let budget = Budget::new(1, Arc::new(ListThenRead(Arc::clone(&store))));
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
    assert!(
        ahead.list(&prefix, store.as_ref()).await.is_none(),
        "one bulk read"
    );
    assert_eq!(ahead.get(&record("a", 1, 3)).as_deref(), Some(&b"new"[..]));
    assert_eq!(budget.counts.whole_log_reads.load(Ordering::Relaxed), 1);
    assert_eq!(budget.counts.reads.load(Ordering::Relaxed), 1, "counted apart");
    drop(first);
    assert!(ahead.get(&record("a", 1, 1)).is_some(), "the second still reads");
    drop(second);
    assert_eq!(ahead.get(&record("a", 1, 1)), None, "dropped with the last guard");
    assert_eq!(budget.free_kib(), 1024, "and its budget came back");
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
    let budget = Budget::new(1, Arc::new(ListThenRead(Arc::clone(&store))));
    let prepared = budget.prepare("a").await.unwrap();
    assert_eq!(
        prepared,
        PreparedLog { records: 2, bytes: 6 },
        "the version-0 record is not kept"
    );
    // Committed after the prepare: the tail.
    store.cas_root(&record("a", 1, 4), None, b"tail").await.unwrap();
    let ahead = budget.start("a");
    assert!(
        ahead.list(&log_prefix("a"), store.as_ref()).await.is_none(),
        "the listing comes from storage"
    );
    assert_eq!(ahead.get(&record("a", 1, 2)).as_deref(), Some(&b"old"[..]));
    assert_eq!(ahead.get(&record("a", 0, 1)), None, "read from storage");
    assert_eq!(ahead.get(&record("a", 1, 4)), None, "read from storage");
    assert_eq!(budget.counts.prepared_used.load(Ordering::Relaxed), 1);
    ahead.finish();
    assert_eq!(budget.free_kib(), 1024, "the budget came back");
}

#[tokio::test]
async fn a_read_stopped_at_its_bound_lists_from_storage_and_serves_what_it_read() {
    let store: Arc<dyn FullStore> = Arc::new(corium_store::MemoryStore::default());
    for t in 1..=3 {
        store
            .cas_root(&record("a", 1, t), None, &vec![0; 400 << 10])
            .await
            .unwrap();
    }
    let budget = Budget::new(1, Arc::new(ListThenRead(Arc::clone(&store))));
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
