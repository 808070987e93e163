//! Process signals shared by the fleet binaries.

/// Resolves on the first SIGTERM or SIGINT (never, if handlers cannot be
/// installed; SIGKILL still stops the process).
pub async fn shutdown() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
