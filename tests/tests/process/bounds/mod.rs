//! Resource bounds over real processes: what a client chooses cannot make
//! the fleet do unbounded work, and an attack on one database leaves a
//! well-behaved client of another alone.
//!
//! - `names` — junk database names, refused before storage, and memory;
//! - `connections` — connection caps, preface, idle and body timeouts,
//!   open calls per client;
//! - `streams` — subscription limits, subscribers that never read;
//! - `overload` — shedding at the node, rates per principal, the SDK
//!   honouring hints, and a well-behaved client beside each attack.

mod connections;
mod names;
mod overload;
mod streams;

use std::time::Duration;

pub(crate) const TTL: Duration = Duration::from_millis(1500);
