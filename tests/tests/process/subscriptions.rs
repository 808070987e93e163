//! Subscriptions across the death and the drain of the ingress carrying
//! them (issue 51, `docs/invariants.md` §7): a stock `corium_peer`
//! connection (its own reconnect rules) and an SDK subscription, both
//! through a balancer (a Kubernetes Service) in front of the ingress that
//! carries them, while a stock client writes through another ingress. The
//! carrying ingress is killed (SIGKILL), sent SIGTERM (its drain ends the
//! subscriptions first, then closes), or recycles its connections by age;
//! the subscribers reconnect through the balancer and resubscribe from
//! their basis. Asserted: each subscriber received every transaction of
//! the log from its first report to the last acknowledged write, each
//! exactly once and in order — no gap, no repeat.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use corium_fleet_client::{Client, Config};
use corium_fleet_tests::balancer::Balancer;
use corium_fleet_tests::stock_load::StockWriter;
use corium_fleet_tests::{Backend, Fleet, corium, eventually};
use corium_peer::{ConnectConfig, Connection};

/// What happens to the ingress carrying the subscriptions.
#[derive(Clone, Copy, Debug)]
enum Ending {
    /// SIGKILL, out of the balancer first.
    Killed,
    /// SIGTERM (a drain), out of the balancer first.
    Drained,
    /// Both ingresses recycle every connection after 1.5 s
    /// (`--max-connection-age-ms`), behind one balancer.
    Aged,
}

/// What a subscriber received: the `t`s in arrival order, and why its
/// stream ended early, if it did (read by the test, which fails on it: a
/// panic in the collecting task would only end that task).
#[derive(Default)]
struct Stream {
    ts: Vec<u64>,
    ended: Option<String>,
}

type Received = Arc<Mutex<Stream>>;

/// Records `t`, or why the stream ended.
fn record(received: &Received, next: Result<u64, String>) {
    let mut stream = received.lock().unwrap_or_else(PoisonError::into_inner);
    match next {
        Ok(t) => stream.ts.push(t),
        Err(why) => stream.ended = Some(why),
    }
}

/// A stock connection's reports, collected until `stop`.
fn collect_stock(connection: &Connection, received: Received) -> tokio::task::JoinHandle<()> {
    let mut reports = connection.tx_reports();
    tokio::spawn(async move {
        loop {
            match tokio::time::timeout(Duration::from_mins(2), reports.recv()).await {
                Ok(Ok(report)) => record(&received, Ok(report.t)),
                Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(missed))) => {
                    let why =
                        format!("the test's reader lagged {missed} reports behind (not the fleet's doing)");
                    return record(&received, Err(why));
                }
                Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) | Err(_) => return,
            }
        }
    })
}

/// An SDK subscription's reports from `from`, collected until aborted.
fn collect_sdk(client: &Client, db: &str, from: u64, received: Received) -> tokio::task::JoinHandle<()> {
    let mut subscription = client.database(db).subscribe(from);
    tokio::spawn(async move {
        loop {
            match tokio::time::timeout(Duration::from_mins(2), subscription.next()).await {
                Ok(Ok(report)) => record(&received, Ok(report.t)),
                Ok(Err(error)) => {
                    return record(&received, Err(format!("the SDK subscription ended: {error}")));
                }
                Err(_) => return,
            }
        }
    })
}

/// `received` is exactly the log's transactions from its first `t` on,
/// up to at least `last_acked`: in order, none missing, none twice.
fn gapless(who: &str, received: &[u64], log: &[u64], last_acked: u64) -> Result<(), String> {
    let first = *received
        .first()
        .ok_or_else(|| format!("{who} received nothing"))?;
    let expected: Vec<u64> = log.iter().copied().filter(|t| *t >= first).collect();
    if received.last().copied().unwrap_or(0) < last_acked {
        return Err(format!(
            "{who} stopped at t={:?}, before the last acknowledged t={last_acked}",
            received.last()
        ));
    }
    let upto: Vec<u64> = expected
        .iter()
        .copied()
        .filter(|t| *t <= *received.last().unwrap_or(&0))
        .collect();
    if received != upto.as_slice() {
        let missing: Vec<u64> = upto.iter().filter(|t| !received.contains(t)).copied().collect();
        let mut repeated: Vec<u64> = received.to_vec();
        repeated.sort_unstable();
        repeated.dedup();
        return Err(format!(
            "{who}: {} received, {} in the log from t={first}; missing {missing:?}; repeats {}; in order {}",
            received.len(),
            upto.len(),
            received.len() - repeated.len(),
            received.windows(2).all(|pair| pair[0] < pair[1])
        ));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_stay_gapless_when_their_ingress_dies_drains_or_recycles_connections() {
    for ending in [Ending::Killed, Ending::Drained, Ending::Aged] {
        let mut fleet = Fleet::builder(Backend::Filesystem).nodes(2).start().await;
        let flags: &[&str] = match ending {
            Ending::Aged => &["--max-connection-age-ms", "1500"],
            Ending::Killed | Ending::Drained => &[],
        };
        fleet.start_ingresses(2, flags).await;
        let (carrier, writer_ingress) = (fleet.ingresses[0].grpc, fleet.ingresses[1].endpoint());
        let balancer = Balancer::start(vec![carrier]).await;
        if matches!(ending, Ending::Aged) {
            balancer.add(fleet.ingresses[1].grpc);
        }
        let address = balancer.endpoint();
        let db = "followed";
        assert!(corium::create(&writer_ingress, db).await.unwrap());
        let first = corium::transact(&writer_ingress, db, "before-subscribing", &[])
            .await
            .unwrap();

        let stock = Connection::connect(ConnectConfig::new(address.clone(), db))
            .await
            .unwrap_or_else(|error| panic!("{ending:?}: {error}\n{}", fleet.logs()));
        let stock_received = Received::default();
        let stock_task = collect_stock(&stock, Arc::clone(&stock_received));
        let sdk = Client::connect(Config::new(&address)).await.unwrap();
        let sdk_received = Received::default();
        let sdk_task = collect_sdk(&sdk, db, first.basis_t, Arc::clone(&sdk_received));

        let writer = StockWriter::start(&writer_ingress, db);
        writer
            .acked_at_least(20, Duration::from_secs(30), "writes before")
            .await;
        match ending {
            Ending::Killed => {
                balancer.add(fleet.ingresses[1].grpc);
                balancer.remove(carrier);
                fleet.ingresses[0].kill();
            }
            Ending::Drained => {
                balancer.add(fleet.ingresses[1].grpc);
                balancer.remove(carrier);
                fleet.ingresses[0].terminate().await;
            }
            // Several ages pass while the writes go on.
            Ending::Aged => tokio::time::sleep(Duration::from_secs(5)).await,
        }
        writer
            .acked_at_least(writer.acked() + 40, Duration::from_mins(1), "writes after")
            .await;
        let seen = writer.stop().await;
        assert!(seen.errors.is_empty(), "{ending:?}: {:?}", seen.errors);
        let last_acked = seen.acked.values().copied().max().unwrap();
        for (who, received) in [("stock peer", &stock_received), ("SDK", &sdk_received)] {
            eventually(
                Duration::from_secs(30),
                &format!("{ending:?}: the {who} subscriber reaches t={last_acked}"),
                async || {
                    let (last, ended) = {
                        let stream = received.lock().unwrap_or_else(PoisonError::into_inner);
                        (stream.ts.last().copied(), stream.ended.clone())
                    };
                    if let Some(why) = ended {
                        panic!("{ending:?}: the {who} subscriber's stream ended at {last:?}: {why}");
                    }
                    if last >= Some(last_acked) {
                        Ok(())
                    } else {
                        Err(format!("at {last:?}"))
                    }
                },
            )
            .await;
        }
        stock_task.abort();
        sdk_task.abort();
        let log: Vec<u64> = corium::log(&writer_ingress, db)
            .await
            .unwrap()
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        for (who, received) in [("stock peer", &stock_received), ("SDK", &sdk_received)] {
            let received = received.lock().unwrap_or_else(PoisonError::into_inner).ts.clone();
            gapless(who, &received, &log, last_acked)
                .unwrap_or_else(|error| panic!("{ending:?}: {error}\n{}", fleet.logs()));
            eprintln!(
                "{ending:?}: the {who} subscriber received t={}..={} ({} reports), gapless",
                received[0],
                received[received.len() - 1],
                received.len()
            );
        }
    }
}

#[test]
fn the_gap_check_finds_a_gap_a_repeat_and_a_short_stream() {
    let log = [1, 2, 3, 4, 5, 6];
    assert!(gapless("s", &[3, 4, 5, 6], &log, 6).is_ok());
    assert!(
        gapless("s", &[3, 5, 6], &log, 6)
            .unwrap_err()
            .contains("missing [4]")
    );
    assert!(gapless("s", &[3, 4, 4, 5, 6], &log, 6).is_err());
    assert!(
        gapless("s", &[3, 4, 5], &log, 6)
            .unwrap_err()
            .contains("before the last")
    );
    assert!(gapless("s", &[], &log, 6).is_err());
}
