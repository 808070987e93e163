#!/usr/bin/env bash
# What an open of a long transaction log costs, Corium's published corium-log 0.1.90 beside the
# same crate with the fleet's patch (patches/corium-log-0.1.90.patch, docs/upstream/0001), in one
# run: the filesystem log (VersionedLog: one file of N framed records) and the native log
# (NativeVersionedLog: one object per record, over an in-memory store, as PostgreSQL and S3 hold
# it), each opened for writing under a new lease version and then read from N-100 on (the tail a
# recovery from a recent index reads). Records are ~200-byte items of three datoms, like
# corium-fleet-bench history's.
#
#   scripts/bench/log-open.sh [N...]     (default: 5000 50000 200000; medians of 5 opens)
#
# A throwaway crate is generated under target/log-open-bench and built twice in release (once
# against crates.io's corium-log, once with [patch] to target/corium-patched/), so both sides run
# the same measuring code.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(5000 50000 200000)
bash "$root/scripts/corium-patch.sh" apply
work=$root/target/log-open-bench
mkdir -p "$work/src"
cat >"$work/src/main.rs" <<'EOF'
use std::sync::{Arc, Mutex};
use std::time::Instant;

use corium_core::{Datom, EntityId, Value};
use corium_log::{NativeLogStorage, NativeVersionedLog, TransactionLog, TxRecord, VersionedLog};

fn record(t: u64) -> TxRecord {
    let tx = EntityId::from_raw(0x3000_0000_0000 + t);
    let e = EntityId::from_raw(0x4000_0000_0000 + t);
    TxRecord {
        t,
        tx_instant: 1_700_000_000_000 + i64::try_from(t).unwrap(),
        datoms: vec![
            Datom { e: tx, a: EntityId::from_raw(50), v: Value::Long(1_700_000_000_000), tx, added: true },
            Datom { e, a: EntityId::from_raw(101), v: Value::Str(format!("item-{t}-{}", "h".repeat(190)).into()), tx, added: true },
            Datom { e, a: EntityId::from_raw(102), v: Value::Long(i64::try_from(t).unwrap()), tx, added: true },
        ],
    }
}

#[derive(Default)]
struct Objects(Mutex<std::collections::BTreeMap<(u64, u64), Vec<u8>>>);

#[async_trait::async_trait]
impl NativeLogStorage for Objects {
    async fn put_batch(&self, _: &str, version: u64, records: &[(u64, Vec<u8>)]) -> Result<bool, corium_log::LogError> {
        let mut bytes = Vec::new();
        for (_, framed) in records { bytes.extend_from_slice(framed); }
        self.0.lock().unwrap().insert((version, records.last().unwrap().0), bytes);
        Ok(true)
    }
    async fn read_record(&self, _: &str, version: u64, t: u64) -> Result<Option<Vec<u8>>, corium_log::LogError> {
        Ok(self.0.lock().unwrap().get(&(version, t)).cloned())
    }
    async fn list_records(&self, _: &str) -> Result<Vec<(u64, u64)>, corium_log::LogError> {
        Ok(self.0.lock().unwrap().keys().copied().collect())
    }
    async fn read_legacy_chunk(&self, _: &str, _: u64, _: u64) -> Result<Option<Vec<u8>>, corium_log::LogError> { Ok(None) }
    async fn list_legacy_chunks(&self, _: &str) -> Result<Vec<(u64, u64)>, corium_log::LogError> { Ok(Vec::new()) }
    async fn delete_all(&self, _: &str) -> Result<(), corium_log::LogError> { Ok(()) }
}

fn median(mut ms: Vec<f64>) -> f64 {
    ms.sort_by(f64::total_cmp);
    ms[ms.len() / 2]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: u64 = std::env::args().nth(1).unwrap().parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = Vec::new();
    for t in 1..=n {
        corium_log::append_framed_record(&mut bytes, &record(t)).unwrap();
    }
    std::fs::write(dir.path().join("db.v1.log"), &bytes).unwrap();
    let objects = Arc::new(Objects::default());
    for t in 1..=n {
        let mut frame = Vec::new();
        corium_log::append_framed_record(&mut frame, &record(t)).unwrap();
        objects.put_batch("db", 1, &[(t, frame)]).await.unwrap();
    }
    let tail_from = n.saturating_sub(100).max(1);
    let (mut fs, mut native) = (Vec::new(), Vec::new());
    for version in 2..7 {
        let started = Instant::now();
        let log = VersionedLog::open(dir.path(), "db", version).unwrap();
        assert_eq!(log.tx_range(tail_from, None).unwrap().len() as u64, n - tail_from + 1);
        fs.push(started.elapsed().as_secs_f64() * 1e3);
        drop(log);
        std::fs::remove_file(dir.path().join(format!("db.v{version}.log"))).unwrap();
        let started = Instant::now();
        let log = NativeVersionedLog::open(Arc::clone(&objects), "db", version).await.unwrap();
        assert_eq!(log.tx_range_async(tail_from, None).await.unwrap().len() as u64, n - tail_from + 1);
        native.push(started.elapsed().as_secs_f64() * 1e3);
    }
    println!("{n} {:.1} {:.1} {}", median(fs), median(native), bytes.len());
}
EOF
cat >"$work/Cargo.toml" <<'EOF'
[package]
name = "log-open-bench"
version = "0.0.0"
edition = "2021"
publish = false
[dependencies]
corium-log = "=0.1.90"
corium-core = "=0.1.90"
async-trait = "0.1"
tempfile = "3"
tokio = { version = "1", features = ["macros", "rt"] }
[workspace]
EOF
cp "$root/Cargo.lock" "$work/Cargo.lock"
build() { # $1: pristine|patched
  local args=()
  [ "$1" = patched ] && args=(--config "patch.crates-io.corium-log.path=\"$root/target/corium-patched/corium-log-0.1.90\"")
  (cd "$work" && CARGO_TARGET_DIR=$work/target-$1 cargo build --release --quiet "${args[@]}")
}
build pristine
build patched
printf '| transactions | log bytes | filesystem open + tail read, ms: 0.1.90 / patched | native open + tail read, ms: 0.1.90 / patched |\n|---|---|---|---|\n'
for n in "${sizes[@]}"; do
  read -r _ fs0 nat0 size < <("$work/target-pristine/release/log-open-bench" "$n")
  read -r _ fs1 nat1 _ < <("$work/target-patched/release/log-open-bench" "$n")
  printf '| %s | %s MiB | %s / %s | %s / %s |\n' "$n" "$((size / 1048576))" "$fs0" "$fs1" "$nat0" "$nat1"
done
