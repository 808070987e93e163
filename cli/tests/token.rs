//! The `corium-fleet` binary against an in-process gRPC server on 127.0.0.1
//! that records each call's `authorization` metadata and answers every call
//! with one configured status: the token is resolved as stock `corium`
//! resolves it (`--token`, `CORIUM_TOKEN`, else the development token;
//! empty: anonymous), sent by every client command, and a refusal prints
//! the hint.

use corium_fleet_tests::fake_server::{Call, FakeServer};

const DEV_TOKEN: &str = "corium-dev-insecure-token";

/// What one run of the binary left: the calls the server saw, its exit
/// status and its stderr.
struct Run {
    seen: Vec<Call>,
    success: bool,
    stderr: String,
}

/// Runs `corium-fleet ARGS --endpoint <fake>` with `env` (and no
/// inherited `CORIUM_TOKEN`) against a server answering `answer`.
async fn run(answer: tonic::Code, args: &[&str], env: &[(&str, &str)]) -> Run {
    let server = FakeServer::start(answer);
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_corium-fleet"));
    command
        .args(args)
        .args(["--endpoint", server.address()])
        .env_remove("CORIUM_TOKEN")
        .env_remove("CORIUM_FLEET_ENDPOINT")
        .envs(env.iter().copied())
        .kill_on_drop(true);
    let output = tokio::time::timeout(std::time::Duration::from_secs(30), command.output())
        .await
        .expect("corium-fleet finishes")
        .unwrap();
    Run {
        seen: server.calls(),
        success: output.status.success(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The `authorization` of the one call a run made.
fn sent(run: &Run) -> Option<&str> {
    assert_eq!(run.seen.len(), 1, "{:?}\n{}", run.seen, run.stderr);
    run.seen[0].authorization.as_deref()
}

const STATUS: &[&str] = &["status"];

#[tokio::test]
async fn the_token_resolves_like_stock_corium() {
    let code = tonic::Code::Unauthenticated;
    let bearer = |token: &str| Some(format!("Bearer {token}"));
    let flag = run(code, &["status", "--token", "s3cret"], &[]).await;
    assert_eq!(sent(&flag), bearer("s3cret").as_deref());
    let env = run(code, STATUS, &[("CORIUM_TOKEN", "from-env")]).await;
    assert_eq!(sent(&env), bearer("from-env").as_deref());
    let both = run(
        code,
        &["status", "--token", "s3cret"],
        &[("CORIUM_TOKEN", "from-env")],
    )
    .await;
    assert_eq!(sent(&both), bearer("s3cret").as_deref(), "the flag wins");
    let unset = run(code, STATUS, &[]).await;
    assert_eq!(sent(&unset), bearer(DEV_TOKEN).as_deref());
    let anonymous = run(code, &["status", "--token", ""], &[]).await;
    assert_eq!(sent(&anonymous), None);
    let anonymous_env = run(code, STATUS, &[("CORIUM_TOKEN", "")]).await;
    assert_eq!(sent(&anonymous_env), None);
}

#[tokio::test]
async fn every_client_command_sends_the_token_and_a_refusal_prints_the_hint() {
    let commands: [(&[&str], &str); 4] = [
        (STATUS, "/corium.fleet.v1.FleetAdmin/FleetStatus"),
        (
            &["where", "orders"],
            "/corium.fleet.v1.FleetAdmin/DatabasePlacement",
        ),
        (
            &["handoff", "orders", "--to", "node-2"],
            "/corium.fleet.v1.FleetAdmin/Handoff",
        ),
        (
            &["request-status", "orders", "9b1de1a6-6c1e-4a5e-9f3b-0d0c6c1f2a10"],
            "/corium.fleet.v1.Requests/Status",
        ),
    ];
    for (args, path) in commands {
        let refused = run(tonic::Code::Unauthenticated, args, &[("CORIUM_TOKEN", "s3cret")]).await;
        assert_eq!(
            refused.seen,
            [Call {
                path: path.to_owned(),
                authorization: Some("Bearer s3cret".to_owned())
            }],
            "{args:?}: {}",
            refused.stderr
        );
        assert!(!refused.success);
        assert!(
            refused.stderr.contains("the fleet refused the credentials"),
            "{args:?}: {}",
            refused.stderr
        );
        assert!(!refused.stderr.contains("s3cret"), "{}", refused.stderr);
        let denied = run(tonic::Code::PermissionDenied, args, &[]).await;
        assert!(!denied.success);
        assert!(
            denied.stderr.contains("does not allow them this call"),
            "{args:?}: {}",
            denied.stderr
        );
        let unavailable = run(tonic::Code::Unavailable, args, &[]).await;
        assert!(!unavailable.success);
        assert!(
            !unavailable.stderr.contains("CORIUM_TOKEN"),
            "no hint for another code: {}",
            unavailable.stderr
        );
    }
}
