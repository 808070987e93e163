//! What the process's allocator holds, by its own accounting: jemalloc's
//! `stats.allocated` (bytes the program has allocated and not freed) and
//! `stats.resident` (the pages it keeps), when the binary runs on jemalloc.
//!
//! `main.rs` makes jemalloc the global allocator and calls
//! [`jemalloc_is_global`], which also starts jemalloc's background threads:
//! pages freed by an eviction or a handoff then go back to the system within
//! jemalloc's decay (10 s), so the resident set falls. A process that runs the
//! library on another allocator (the in-process simulation) reads nothing
//! here, and the memory budget keeps its per-datom estimate
//! (`host/memory.rs`).

use std::sync::atomic::{AtomicBool, Ordering};

static JEMALLOC: AtomicBool = AtomicBool::new(false);

/// How long freed pages stay with jemalloc before its background threads
/// return them to the system (jemalloc's default is 10 s): a node that
/// evicted or handed a database away shows it in its resident set within
/// about this long.
const DIRTY_DECAY_MS: isize = 1_000;

/// Says that jemalloc is the process's global allocator, starts its
/// background threads and shortens its decay, so freed pages are returned to
/// the system within about [`DIRTY_DECAY_MS`].
pub fn jemalloc_is_global() {
    use tikv_jemalloc_ctl::{Access as _, AsName as _};
    JEMALLOC.store(true, Ordering::Relaxed);
    if let Err(error) = tikv_jemalloc_ctl::background_thread::write(true) {
        tracing::warn!(%error, "jemalloc's background threads did not start; freed memory goes back to the system more slowly");
    }
    // New arenas take the default; the ones that exist already are set one
    // by one.
    let mut decays = vec![b"arenas.dirty_decay_ms\0".to_vec()];
    let arenas = tikv_jemalloc_ctl::arenas::narenas::read().unwrap_or(0);
    decays.extend((0..arenas).map(|arena| format!("arena.{arena}.dirty_decay_ms\0").into_bytes()));
    for name in &decays {
        if let Err(error) = name.name().write(DIRTY_DECAY_MS) {
            tracing::debug!(%error, control = %String::from_utf8_lossy(name), "jemalloc decay not set");
        }
    }
}

/// The allocator's view of the process's heap.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct Heap {
    /// Bytes allocated and not freed.
    pub allocated: u64,
    /// Bytes in pages the allocator keeps resident (allocated, free but not
    /// yet returned, and its metadata).
    pub resident: u64,
}

/// The heap now, by jemalloc's accounting; `None` when jemalloc is not the
/// global allocator or does not answer.
#[must_use]
pub fn heap() -> Option<Heap> {
    if !JEMALLOC.load(Ordering::Relaxed) {
        return None;
    }
    // Its statistics are a snapshot taken at each epoch.
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    let allocated = tikv_jemalloc_ctl::stats::allocated::read().ok()?;
    let resident = tikv_jemalloc_ctl::stats::resident::read().ok()?;
    Some(Heap {
        allocated: u64::try_from(allocated).unwrap_or(u64::MAX),
        resident: u64::try_from(resident).unwrap_or(u64::MAX),
    })
}
