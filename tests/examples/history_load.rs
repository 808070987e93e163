//! Writes a long history into one database at a Corium (or Corium Fleet)
//! address: `WRITERS` clients, each on its own connection, together sending
//! `N` transactions of one item with a ~200-byte name. Used to build the
//! databases that profiles and benchmarks of an open are taken on.
//!
//! ```text
//! cargo run --release -p corium-fleet-tests --example history_load -- http://127.0.0.1:4334 history 50000 16
//! ```

use std::time::{Duration, Instant};

use corium_fleet_tests::corium;
use corium_protocol::pb::transactor_client::TransactorClient;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut args = std::env::args().skip(1);
    let address = args.next().unwrap_or_else(|| "http://127.0.0.1:4334".to_owned());
    let db = args.next().unwrap_or_else(|| "history".to_owned());
    let transactions: usize = args.next().map_or(Ok(50_000), |n| n.parse())?;
    let writers: usize = args.next().map_or(Ok(16), |n| n.parse())?;
    if corium::create(&address, &db).await.is_err() {
        eprintln!("{db} exists; writing into it");
    }
    let prefix = format!("{}-{}", std::process::id(), "h".repeat(190));
    let per_writer = transactions.div_ceil(writers);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let channel = corium::channel(&address).await;
        let (db, prefix) = (db.clone(), prefix.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = TransactorClient::new(channel);
            for n in 0..per_writer {
                let request =
                    corium::transact_call(&db, &format!("{prefix}-{writer}-{n}"), Duration::from_secs(30));
                client.transact(request).await?;
            }
            Ok::<_, tonic::Status>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    println!(
        "{} transactions into {db} in {:.1} s",
        per_writer * writers,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
