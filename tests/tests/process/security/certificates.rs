//! Certificates: rotated under load with no failed call, and a node dialled
//! only if its certificate names its node id.

use std::time::Duration;

use corium_fleet_proto::fleet::HandoffRequest;
use corium_fleet_tests::corium::{self};
use corium_fleet_tests::{Backend, Fleet, eventually};
use tonic::Code;

use super::{SERVER_EXPIRY, TTL, UPSTREAM_EXPIRY, hand_off_then_write, sample};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_under_load_with_no_failed_call() {
    let db = "rotating";
    let (mut fleet, address) = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .mtls()
        .start_with_database(db)
        .await;
    let mut issued = Vec::new();
    for node in &fleet.nodes {
        issued.push(
            sample(node.admin, SERVER_EXPIRY)
                .await
                .expect("a node on mTLS reports its expiry"),
        );
    }
    let ingress_issued = sample(fleet.ingresses[0].admin, UPSTREAM_EXPIRY).await.unwrap();
    // Expiry has a resolution of one second: renew in a later one.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    // A writer that never stops while the certificates change under it.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (address, stop) = (address.clone(), std::sync::Arc::clone(&stop));
        tokio::spawn(async move {
            let mut written = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && written < 5_000 {
                corium::transact(&address, db, &format!("w{written}"), &[])
                    .await
                    .map_err(|status| format!("write {written} failed: {status:?}"))?;
                written += 1;
            }
            Ok::<u32, String>(written)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut everyone: Vec<&str> = fleet.nodes.iter().map(|node| node.id.as_str()).collect();
    everyone.push(corium_fleet_common::launch::INGRESS_IDENTITY);
    fleet.issue_certs(&everyone);
    // The ingress and node-1 are told at once; the others notice the files.
    fleet.ingresses[0].signal(nix::sys::signal::Signal::SIGHUP);
    fleet.nodes[0].signal(nix::sys::signal::Signal::SIGHUP);
    for (node, issued) in fleet.nodes.iter().zip(&issued) {
        eventually(
            Duration::from_secs(20),
            format!("{} serves its new certificate", node.id),
            async || match sample(node.admin, SERVER_EXPIRY).await {
                Some(expiry) if expiry > *issued => Ok(()),
                other => Err(format!("expiry {other:?}, issued {issued}")),
            },
        )
        .await;
    }
    eventually(
        Duration::from_secs(20),
        "the ingress uses its new certificate",
        async || match sample(fleet.ingresses[0].admin, UPSTREAM_EXPIRY).await {
            Some(expiry) if expiry > ingress_issued => Ok(()),
            other => Err(format!("expiry {other:?}, issued {ingress_issued}")),
        },
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer
        .await
        .unwrap()
        .unwrap_or_else(|error| panic!("{error}\n{}", fleet.logs()));
    assert!(written > 0);
    eprintln!("{written} writes across the rotation, none failed");

    // New connections are made with the new certificates: a fresh ingress,
    // and a handoff (the owner dials the target with its new certificate).
    fleet.start_ingresses(1, &[]).await;
    let fresh = fleet.ingresses[1].endpoint();
    corium::transact(&fresh, db, "through-a-fresh-ingress", &[])
        .await
        .unwrap();
    hand_off_then_write(
        &fleet,
        &fresh,
        &address,
        db,
        "after-rotation",
        "a handoff after the rotation",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_whose_certificate_names_another_node_is_refused() {
    let db = "verified";
    let (fleet, address) = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .mtls()
        .start_with_database(db)
        .await;
    corium::transact(&address, db, "first", &[]).await.unwrap();
    let candidates = fleet.candidates(db);
    let (owner, target) = (candidates[0], candidates[1]);
    let other = (0..fleet.nodes.len())
        .find(|n| *n != owner && *n != target)
        .unwrap();
    let certs = fleet.certs().unwrap();
    let reloads = "corium_fleet_tls_reloads_total{certificate=\"server\",result=\"ok\"}";
    let reload = async |fleet: &Fleet, node: usize, after: f64| {
        fleet.nodes[node].signal(nix::sys::signal::Signal::SIGHUP);
        eventually(
            Duration::from_secs(20),
            "the target reloads its certificate",
            async || match sample(fleet.nodes[node].admin, reloads).await {
                Some(count) if count > after => Ok(count),
                other => Err(format!("{other:?}")),
            },
        )
        .await
    };
    // The target now presents a certificate of the fleet's CA that names
    // another node.
    let (target_id, other_id) = (fleet.nodes[target].id.clone(), fleet.nodes[other].id.clone());
    for extension in ["key", "pem"] {
        let staged = certs.join(format!(".{target_id}.{extension}"));
        std::fs::copy(certs.join(format!("{other_id}.{extension}")), &staged).unwrap();
        std::fs::rename(&staged, certs.join(format!("{target_id}.{extension}"))).unwrap();
    }
    let count = reload(&fleet, target, 0.0).await;
    let handoff = async || {
        corium::admin(&address)
            .await
            .handoff(HandoffRequest {
                database: db.to_owned(),
                target_node_id: target_id.clone(),
            })
            .await
    };
    let refused = handoff().await.unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    // Nothing changed: the owner still holds the database and writes.
    let view = corium::placement(&address, db).await;
    assert_eq!(
        view.owner_id.split('/').next(),
        Some(fleet.nodes[owner].id.as_str()),
        "{view:?}"
    );
    corium::transact(&address, db, "still-here", &[]).await.unwrap();

    // The negative control: the target's own certificate again.
    fleet.issue_certs(&[&target_id]);
    reload(&fleet, target, count).await;
    let handed = handoff()
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", fleet.logs()));
    assert_eq!(handed.into_inner().to_node_id, target_id);
}
