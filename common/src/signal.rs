//! Process signals shared by the fleet binaries, and the watch flags they
//! set (shutdown, leaving).

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

/// Resolves once `flag` is true (or its sender is gone): a shutdown or
/// leaving flag in a `select!`. Never holds the receiver's borrow across an
/// await, so the future stays `Send`.
pub async fn until_true(flag: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = flag.wait_for(|value| *value).await;
}
