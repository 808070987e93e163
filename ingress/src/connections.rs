//! Caps on client connections: in total and per client address, so idle or
//! half-open sockets from one client cannot exhaust the ingress's file
//! descriptors for everyone. A connection over a cap is closed as soon as it
//! is accepted, before any TLS or HTTP/2 work, and counted.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use corium_fleet_common::counted::{Counted, Counts};

/// The open client connections, by address.
pub(crate) struct Connections {
    max_total: usize,
    max_per_client: usize,
    /// How long a client may stay silent after connecting (cleartext:
    /// before the HTTP/2 preface; TLS: the handshake's own bound applies).
    preface_timeout: std::time::Duration,
    total: AtomicUsize,
    /// Connections open per address: an address with nothing open is
    /// forgotten, so the map is bounded by the connections, not by every
    /// address ever seen.
    per_client: Counts<IpAddr>,
}

/// One admitted connection; its place is given back when dropped.
pub(crate) struct Slot {
    connections: Arc<Connections>,
    /// The client address's place (none for a connection without one).
    place: Option<Counted<IpAddr>>,
}

impl Connections {
    /// At most `max_total` connections, `max_per_client` from one address;
    /// a cleartext client silent for `preface_timeout` is closed.
    #[must_use]
    pub(crate) fn new(
        max_total: usize,
        max_per_client: usize,
        preface_timeout: std::time::Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            max_total,
            max_per_client,
            preface_timeout,
            total: AtomicUsize::new(0),
            per_client: Counts::new(),
        })
    }

    /// A place for a connection from `client`, or `None` over a cap.
    #[must_use]
    pub(crate) fn admit(self: &Arc<Self>, client: Option<IpAddr>) -> Option<Slot> {
        if self.total.fetch_add(1, Ordering::AcqRel) >= self.max_total {
            self.total.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let place = match client {
            Some(ip) => {
                let Some(place) = self.per_client.enter(&ip, self.max_per_client) else {
                    self.total.fetch_sub(1, Ordering::AcqRel);
                    return None;
                };
                Some(place)
            }
            None => None,
        };
        Some(Slot {
            connections: Arc::clone(self),
            place,
        })
    }

    /// How long a cleartext client may stay silent after connecting.
    #[must_use]
    pub(crate) fn preface_timeout(&self) -> std::time::Duration {
        self.preface_timeout
    }

    /// Connections open now.
    #[must_use]
    pub(crate) fn open(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    /// Writes the open-connections gauge (what the chart's autoscaler can
    /// scale on: a long-lived HTTP/2 client brings a connection, not CPU).
    pub(crate) fn collect(&self, scrape: &mut corium_fleet_common::metrics::Scrape<'_>) {
        scrape.gauge(
            "corium_fleet_ingress_connections",
            "Client connections open now, both listeners.",
            self.open(),
        );
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // The address's place first, then the total: the order they were
        // taken in, reversed.
        drop(self.place.take());
        self.connections.total.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_hold_and_places_come_back() {
        let connections = Connections::new(3, 2, std::time::Duration::from_secs(1));
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let first = connections.admit(Some(a)).unwrap();
        let _second = connections.admit(Some(a)).unwrap();
        assert!(connections.admit(Some(a)).is_none(), "per-client cap");
        let _third = connections.admit(Some(b)).unwrap();
        assert!(connections.admit(Some(b)).is_none(), "total cap");
        assert_eq!(connections.open(), 3);
        drop(first);
        assert!(connections.admit(Some(a)).is_some(), "a place comes back");
        assert_eq!(
            connections.open(),
            2,
            "the slot admitted above was dropped at once"
        );
    }

    #[test]
    fn addresses_with_nothing_open_are_forgotten() {
        let connections = Connections::new(100, 100, std::time::Duration::from_secs(1));
        for i in 0..50u8 {
            drop(connections.admit(Some([10, 0, 1, i].into())));
        }
        assert_eq!(connections.per_client.keys(), 0);
        assert_eq!(connections.open(), 0);
    }
}
