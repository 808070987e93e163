//! The replicas' relay (`transactor/src/replica/relay.rs`): a loopback
//! endpoint that forwards subscriptions with the node's own credentials. A
//! caller on the node's machine that is not one of its replicas gets nothing
//! through it: no token, the development token, a guessed secret — each
//! `UNAUTHENTICATED` — and a write is never relayed.

use corium_fleet_tests::Fleet;
use corium_fleet_tests::corium::{self, expect_code};
use corium_protocol::pb;
use corium_protocol::pb::transactor_client::TransactorClient;
use tonic::Code;

/// The relay's address, from the node's log line saying where it listens.
fn relay_address(log: &str) -> String {
    let line = log
        .lines()
        .find(|line| line.contains("replica relay listening on loopback"))
        .unwrap_or_else(|| panic!("the node logs its relay's address:\n{log}"));
    let start = line.find("127.0.0.1:").expect("the relay listens on 127.0.0.1");
    line[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
        .collect()
}

fn with_token<T>(message: T, token: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replica_relay_serves_no_one_but_the_nodes_replicas() {
    let (fleet, address) = Fleet::filesystem_with_ingress(2, &[]).await;
    assert!(corium::create(&address, "relayed").await.unwrap());
    let before = corium::transact(&address, "relayed", "item", &[])
        .await
        .unwrap()
        .basis_t;
    let relay = relay_address(&fleet.nodes[0].log());
    let mut client = TransactorClient::connect(format!("http://{relay}"))
        .await
        .expect("the relay accepts connections on loopback");

    let dev_token = corium_protocol::auth::DEFAULT_DEV_TOKEN;
    let guessed = format!("{}.1", "0".repeat(64));
    for token in [None, Some(dev_token), Some(guessed.as_str()), Some("1")] {
        let answers = [
            (
                "Subscribe",
                client
                    .subscribe(with_token(corium::subscribe_request("relayed", 0), token))
                    .await
                    .map(drop),
                Code::Unauthenticated,
            ),
            (
                "Sync",
                client
                    .sync(with_token(
                        pb::SyncRequest {
                            db: "relayed".to_owned(),
                            t: 0,
                        },
                        token,
                    ))
                    .await
                    .map(drop),
                Code::Unauthenticated,
            ),
            (
                "Transact",
                client
                    .transact(with_token(
                        corium::transact_request("relayed", "through-the-relay"),
                        token,
                    ))
                    .await
                    .map(drop),
                Code::Unimplemented,
            ),
        ];
        for (call, answer, expected) in answers {
            expect_code(answer, expected, format!("{call} with {token:?}"));
        }
    }
    // Nothing was written through it: the next write lands right after the
    // first (the negative control: the fleet itself still writes).
    let after = corium::transact(&address, "relayed", "item-2", &[])
        .await
        .unwrap()
        .basis_t;
    assert_eq!(after, before + 1, "no transaction came through the relay");
}
