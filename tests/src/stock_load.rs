//! A stock Corium client writing through one address: a
//! `corium_peer::Connection` (its own retry rules, no route header, no
//! request id) transacting unique items into one database until told to
//! stop, every acknowledgement and error recorded, and the check that
//! nothing acknowledged is lost or committed twice. What the dev-fleet and
//! upgrade tests drive while they kill, restart and replace processes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use corium_peer::{ConnectConfig, Connection};

use crate::corium;
use crate::eventually::eventually;

/// What the stock writer saw: acknowledged items with their `t`, and
/// errors (a stock client cannot safely resend a write, so it moves on).
#[derive(Clone, Debug, Default)]
pub struct Writes {
    /// Acknowledged item → the `t` it was acknowledged at.
    pub acked: BTreeMap<String, u64>,
    /// Each failed write: when (since the writer started), the item and
    /// what the client said.
    pub errors: Vec<String>,
}

impl Writes {
    /// Every acknowledged item is in `log` at its `t`, and no item this
    /// writer sent (acknowledged or not) is there twice.
    ///
    /// # Errors
    /// The first violation, described.
    pub fn check(&self, log: &[(u64, Vec<String>)]) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for (t, names) in log {
            for name in names.iter().filter(|name| name.starts_with(ITEM)) {
                if !seen.insert(name.clone()) {
                    return Err(format!("{name} committed twice (again at t={t})"));
                }
            }
        }
        for (item, t) in &self.acked {
            if !log
                .iter()
                .any(|(logged, names)| logged == t && names.contains(item))
            {
                return Err(format!(
                    "{item} was acknowledged at t={t} and is not in the log there"
                ));
            }
        }
        Ok(())
    }
}

/// The prefix of every item a writer sends (`item-N`).
const ITEM: &str = "item-";

/// A stock client writing into one database in the background.
pub struct StockWriter {
    writes: Arc<Mutex<Writes>>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl StockWriter {
    /// Connects a stock client to `address` for `db` (failover timeout
    /// 30 s, as an application would set it) and writes `item-0`,
    /// `item-1`, … every 20 ms, each call bounded by 60 s.
    #[must_use]
    pub fn start(address: &str, db: &str) -> Self {
        let writes = Arc::new(Mutex::new(Writes::default()));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(write(
            address.to_owned(),
            db.to_owned(),
            Arc::clone(&writes),
            stopped,
        ));
        Self { writes, stop, task }
    }

    /// How many writes were acknowledged so far.
    #[must_use]
    pub fn acked(&self) -> usize {
        self.writes().acked.len()
    }

    /// What was seen so far.
    #[must_use]
    pub fn writes(&self) -> Writes {
        self.writes.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Waits until `count` writes were acknowledged (at most `within`).
    ///
    /// # Panics
    /// When they were not, naming `what` and the errors seen.
    pub async fn acked_at_least(&self, count: usize, within: Duration, what: &str) {
        eventually(within, what, async || {
            let writes = self.writes();
            if writes.acked.len() >= count {
                Ok(())
            } else {
                Err(format!(
                    "{} acknowledged; errors: {:?}",
                    writes.acked.len(),
                    writes.errors
                ))
            }
        })
        .await;
    }

    /// Stops writing (the call in flight is answered first, at most 2 min)
    /// and returns everything seen.
    ///
    /// # Panics
    /// When the writer does not stop within 2 min or its task panicked.
    pub async fn stop(self) -> Writes {
        let Self { writes, stop, task } = self;
        let _ = stop.send(true);
        tokio::time::timeout(Duration::from_mins(2), task)
            .await
            .expect("the writer stops within 2 min")
            .expect("the writer's task");
        writes.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

async fn write(
    address: String,
    db: String,
    writes: Arc<Mutex<Writes>>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut config = ConnectConfig::new(address, db);
    config.failover_timeout = Duration::from_secs(30);
    let started = std::time::Instant::now();
    let connection = tokio::time::timeout(Duration::from_secs(30), Connection::connect(config))
        .await
        .expect("the stock client connects within 30 s")
        .expect("the stock client connects");
    for n in 0.. {
        if *stop.borrow() {
            break;
        }
        let item = format!("{ITEM}{n}");
        let answer = tokio::time::timeout(
            Duration::from_mins(1),
            connection.transact(corium::item_forms(&item)),
        )
        .await;
        {
            let mut writes = writes.lock().unwrap_or_else(PoisonError::into_inner);
            match answer {
                Ok(Ok(result)) => {
                    writes.acked.insert(item, result.basis_t);
                }
                Ok(Err(error)) => writes
                    .errors
                    .push(format!("@{:?} {item}: {error}", started.elapsed())),
                Err(_) => writes
                    .errors
                    .push(format!("@{:?} {item}: no answer within 60 s", started.elapsed())),
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
