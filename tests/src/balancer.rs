//! A round-robin TCP balancer on loopback: what a Kubernetes Service (or any
//! L4 balancer without affinity) does in front of the ingress tier. Each new
//! client connection goes to the next target in a list that can change while
//! it runs, so a client that reconnects lands on another ingress.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::task::AbortHandle;

/// A round-robin forwarder over a changing list of loopback ports.
pub struct Balancer {
    /// The loopback port clients connect to.
    pub port: u16,
    targets: Arc<Mutex<Vec<u16>>>,
    /// Client connections accepted so far (also the round robin's place).
    accepted: Arc<AtomicUsize>,
    accept: AbortHandle,
}

impl Balancer {
    /// Starts forwarding a fresh loopback port to `targets`, round robin.
    ///
    /// # Panics
    /// When no loopback port can be bound or `targets` is empty.
    pub async fn start(targets: Vec<u16>) -> Self {
        assert!(!targets.is_empty(), "a balancer needs a target");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let targets = Arc::new(Mutex::new(targets));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (shared, next) = (Arc::clone(&targets), Arc::clone(&accepted));
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                let target = {
                    let targets = shared.lock().unwrap_or_else(PoisonError::into_inner);
                    targets[next.fetch_add(1, Ordering::Relaxed) % targets.len()]
                };
                tokio::spawn(async move {
                    if let Ok(mut upstream) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
            }
        })
        .abort_handle();
        Self {
            port,
            targets,
            accepted,
            accept,
        }
    }

    /// `http://127.0.0.1:PORT`: the address clients are given.
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How many client connections it has accepted.
    #[must_use]
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Adds a target: later connections may go to it.
    pub fn add(&self, port: u16) {
        self.targets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(port);
    }
}

impl Balancer {
    /// Takes a target out (a Kubernetes Service dropping a terminating
    /// pod): later connections go to the others; open ones stay where they
    /// are until either side closes them.
    ///
    /// # Panics
    /// When it would leave no target.
    pub fn remove(&self, port: u16) {
        let mut targets = self.targets.lock().unwrap_or_else(PoisonError::into_inner);
        targets.retain(|target| *target != port);
        assert!(!targets.is_empty(), "a balancer needs a target");
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
