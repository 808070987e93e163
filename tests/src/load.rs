//! A bounded write load: one task per database transacting unique items
//! through one address, recording every acknowledgement and every error with
//! its time, so a test can check that nothing acknowledged was lost and
//! measure each database's write unavailability.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use corium_protocol::pb::transactor_client::TransactorClient;

use crate::corium;

/// One database's outcome.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Acknowledged transactions: `t` → the item name it asserted.
    pub acked: BTreeMap<u64, String>,
    /// Failed attempts: elapsed since the load started, status code, message.
    pub errors: Vec<(Duration, tonic::Code, String)>,
    /// The longest time from the last acknowledgement before a run of
    /// failures to the first acknowledgement after it.
    pub longest_unavailable: Duration,
}

impl Outcome {
    /// Acknowledgements, errors and the longest unavailability, as text.
    #[must_use]
    pub fn summary(&self) -> String {
        format!(
            "{} acks, {} errors, longest unavailability {:?}",
            self.acked.len(),
            self.errors.len(),
            self.longest_unavailable
        )
    }

    /// Asserts that every failed attempt was retryable (`UNAVAILABLE` or
    /// `FAILED_PRECONDITION`: what clients see while a database moves); the
    /// failure message names `what`, the attempt's time, code and message.
    ///
    /// # Panics
    /// On any other failure.
    #[track_caller]
    pub fn assert_only_retryable_errors(&self, what: impl std::fmt::Display) {
        for (at, code, message) in &self.errors {
            assert!(
                matches!(code, tonic::Code::Unavailable | tonic::Code::FailedPrecondition),
                "{what} at {at:?}: {code:?} {message}"
            );
        }
    }
}

/// A load running in the background ([`start`]) until [`Running::stop`].
pub struct Running {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<BTreeMap<String, Outcome>>,
}

/// Starts [`run`] in the background over `dbs` through `address`.
#[must_use]
pub fn start(address: String, dbs: Vec<String>, max_per_db: usize) -> Running {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    Running {
        stop,
        task: tokio::spawn(run(address, dbs, max_per_db, stopped)),
    }
}

impl Running {
    /// Stops the load and returns each database's outcome.
    ///
    /// # Panics
    /// When the load already ended (every attempt made) or panicked.
    pub async fn stop(self) -> BTreeMap<String, Outcome> {
        self.stop.send(true).expect("the load still runs when stopped");
        self.task.await.expect("the load runs to its end")
    }
}

/// Runs until `stop` turns true (or `max_per_db` attempts), one task per
/// database, each transacting `"{db}-{n}"` through `address`.
///
/// # Panics
/// When a load task panics (it cannot reach `address`).
pub async fn run(
    address: String,
    dbs: Vec<String>,
    max_per_db: usize,
    stop: tokio::sync::watch::Receiver<bool>,
) -> BTreeMap<String, Outcome> {
    let started = Instant::now();
    let tasks: Vec<_> = dbs
        .into_iter()
        .map(|db| {
            let address = address.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut client = TransactorClient::new(corium::channel(&address).await);
                let mut outcome = Outcome::default();
                let mut last_ok: Option<Instant> = None;
                let mut failing_since_ok = false;
                for n in 0..max_per_db {
                    if *stop.borrow() {
                        break;
                    }
                    let name = format!("{db}-{n}");
                    let mut request = tonic::Request::new(corium::transact_request(&db, &name));
                    request.set_timeout(Duration::from_secs(10));
                    match client.transact(request).await {
                        Ok(response) => {
                            let now = Instant::now();
                            if failing_since_ok && let Some(last) = last_ok {
                                outcome.longest_unavailable = outcome.longest_unavailable.max(now - last);
                            }
                            failing_since_ok = false;
                            last_ok = Some(now);
                            outcome.acked.insert(response.into_inner().basis_t, name);
                        }
                        Err(status) => {
                            failing_since_ok = true;
                            outcome.errors.push((
                                started.elapsed(),
                                status.code(),
                                status.message().to_owned(),
                            ));
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                (db, outcome)
            })
        })
        .collect();
    let mut outcomes = BTreeMap::new();
    for task in tasks {
        let (db, outcome) = task.await.expect("load task");
        outcomes.insert(db, outcome);
    }
    outcomes
}

/// Checks every acknowledged transaction of `outcome` against `log` (read
/// back through Subscribe): each is present at its `t`, and no item name
/// this load wrote (`"{db}-{n}"`, acknowledged or not) appears in more than
/// one transaction. (Other strings repeat by design: the request record
/// the fleet adds to every transaction names its tempid.)
///
/// # Errors
/// A description of the first violation.
pub fn check(db: &str, outcome: &Outcome, log: &[(u64, Vec<String>)]) -> Result<(), String> {
    let by_t: BTreeMap<u64, &Vec<String>> = log.iter().map(|(t, names)| (*t, names)).collect();
    for (t, name) in &outcome.acked {
        if !by_t.get(t).is_some_and(|names| names.contains(name)) {
            return Err(format!("{db}: acknowledged {name} at t={t} is not in the log"));
        }
    }
    let mut seen = BTreeMap::new();
    let ours = format!("{db}-");
    for (t, names) in log {
        for name in names.iter().filter(|name| name.starts_with(&ours)) {
            if let Some(previous) = seen.insert(name.clone(), *t) {
                return Err(format!("{db}: {name} committed twice (t={previous} and t={t})"));
            }
        }
    }
    let ts: Vec<u64> = log.iter().map(|(t, _)| *t).collect();
    if ts.windows(2).any(|pair| pair[1] != pair[0] + 1) {
        return Err(format!("{db}: the log has a gap: {ts:?}"));
    }
    Ok(())
}
