//! A stock Corium client (`corium-peer` from crates.io) against a Corium
//! Fleet address: create a database, transact, read the report back.
//!
//! ```text
//! cargo run -p corium-fleet-tests --example quickstart -- http://127.0.0.1:PORT
//! ```
//!
//! `CORIUM_TOKEN` in the environment is presented as the bearer token, as
//! stock Corium's command line does.

use std::time::Duration;

use corium_peer::{Admin, ConnectConfig, Connection};
use corium_query::edn::{Edn, read_one};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:7001".to_owned());
    let db = std::env::args().nth(2).unwrap_or_else(|| "demo".to_owned());
    let schema = read_one(
        "[{:db/ident :item/name :db/valueType :db.type/string \
           :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}]",
    )?;
    let Edn::Vector(schema) = schema else {
        unreachable!()
    };
    let token = std::env::var("CORIUM_TOKEN").ok();
    let mut admin = Admin::connect(&address, token.clone(), None).await?;
    // Corium answers `created: false` for an existing database; the fleet
    // answers ALREADY_EXISTS. Either way the database is there.
    let created = match admin.create_database(&db, &schema).await {
        Ok(created) => created,
        Err(corium_peer::PeerError::Rpc(status)) if status.code() == tonic::Code::AlreadyExists => false,
        Err(error) => return Err(error.into()),
    };
    println!(
        "database {db:?} {}",
        if created { "created" } else { "already exists" }
    );

    let connection = tokio::time::timeout(
        Duration::from_secs(30),
        Connection::connect({
            let mut config = ConnectConfig::new(&address, &db);
            config.token = token;
            config
        }),
    )
    .await??;
    let mut reports = connection.tx_reports();
    let Edn::Vector(tx) = read_one(r#"[{:db/id "w" :item/name "widget"}]"#)? else {
        unreachable!()
    };
    let result = connection.transact(tx).await?;
    let report = tokio::time::timeout(Duration::from_secs(10), reports.recv()).await??;
    println!(
        "committed t={} (report t={}, {} datoms)",
        result.basis_t,
        report.t,
        report.datoms.len()
    );
    Ok(())
}
