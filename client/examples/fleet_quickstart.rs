//! The Corium Fleet SDK against a fleet address: create a database,
//! transact with request ids (retried safely), follow a resuming
//! subscription, read the status.
//!
//! ```text
//! make run                     # prints: corium-fleet: ready at http://127.0.0.1:PORT
//! cargo run -p corium-fleet-client --example fleet_quickstart -- http://127.0.0.1:PORT
//! ```
//!
//! A fleet that requires authentication: set `CORIUM_TOKEN` (e.g. to the
//! development token `corium-dev-insecure-token` that `make run` accepts);
//! unset or empty, the example connects anonymously, the SDK's default.

use corium_fleet_client::{Client, Config};

const SCHEMA: &str = "[{:db/ident :item/name :db/valueType :db.type/string \
    :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}]";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:4334".to_owned());
    let name = std::env::args().nth(2).unwrap_or_else(|| "sdk-demo".to_owned());
    let mut config = Config::new(&address);
    if let Some(token) = std::env::var("CORIUM_TOKEN")
        .ok()
        .filter(|token| !token.is_empty())
    {
        config = config.with_token(token);
    }
    let client = Client::connect(config).await?;
    let db = client.database(&name);
    let created = db.create(SCHEMA).await?;
    println!(
        "database {name:?} {}",
        if created { "created" } else { "already exists" }
    );

    let start = db.status().await?.basis_t;
    let mut subscription = db.subscribe(start);
    for i in 0..3 {
        let done = db
            .transact_edn(&format!(r#"[{{:db/id "w" :item/name "widget-{start}-{i}"}}]"#))
            .await?;
        println!(
            "committed t={} request-id={} attempts={}",
            done.response.basis_t, done.request_id, done.attempts
        );
    }
    for _ in 0..3 {
        let report = tokio::time::timeout(std::time::Duration::from_secs(10), subscription.next()).await??;
        println!("report t={} ({} datom bytes)", report.t, report.datoms.len());
    }
    let status = db.status().await?;
    println!("status: basis_t={}", status.basis_t);
    Ok(())
}
