//! A TCP proxy on loopback that can cut one node off from its storage: a
//! real network partition between a node and `PostgreSQL` or the S3 server,
//! for tests.
//!
//! While cut, established connections are dropped and new ones are closed on
//! accept, so the node's storage calls fail as they would behind a broken
//! network path; healing lets new connections through again.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::task::AbortHandle;

/// A cuttable TCP forwarder.
pub struct Partition {
    /// The loopback port a node reaches its storage through.
    pub port: u16,
    cut: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl Partition {
    /// Starts forwarding a fresh loopback port to `target`.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let accept = {
            let cut = Arc::clone(&cut);
            let connections = Arc::clone(&connections);
            tokio::spawn(async move {
                loop {
                    let Ok((mut inbound, _)) = listener.accept().await else {
                        continue;
                    };
                    if cut.load(Ordering::Acquire) {
                        drop(inbound);
                        continue;
                    }
                    let task = tokio::spawn(async move {
                        let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else {
                            return;
                        };
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    });
                    let mut live = connections.lock().unwrap_or_else(PoisonError::into_inner);
                    live.retain(|handle| !handle.is_finished());
                    live.push(task.abort_handle());
                }
            })
            .abort_handle()
        };
        Self {
            port,
            cut,
            connections,
            accept,
        }
    }

    /// Cuts the path: drops every connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        for handle in self
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            handle.abort();
        }
    }

    /// Heals the path.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::Release);
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
