//! How many connections one client may hold open at once (issue 12, item 6): time limits
//! end slow connections, but a client opening them faster than they end could still take
//! every file descriptor, and then `accept` fails for everyone.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use ratewarden_policy::{IpGrouping, TrustedProxies};

/// Open connections by client, each client (an IPv4 address, an IPv6 /64) held to `[server]
/// max_connections_per_client` on one listener of one worker: nginx's `limit_conn` in spirit.
pub(crate) struct Clients {
    open: Mutex<HashMap<IpAddr, usize>>,
    grouping: IpGrouping,
    max: usize,
}

/// One counted connection, uncounted when dropped.
pub(crate) struct Open {
    clients: Arc<Clients>,
    client: IpAddr,
}

impl Drop for Open {
    fn drop(&mut self) {
        let mut open = self
            .clients
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                // The map holds only clients with connections open: bounded by them.
                open.remove(&self.client);
            }
        }
    }
}

impl Clients {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            open: Mutex::new(HashMap::new()),
            grouping: IpGrouping::default(),
            max,
        }
    }

    /// Counts a connection from `ip`; `None` when that client has too many open, `Some`
    /// (counting nothing) for a proxy in `trusted`: proxies carry many clients'
    /// connections.
    pub(crate) fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        trusted: &TrustedProxies,
    ) -> Option<Option<Open>> {
        if trusted.contains(ip) {
            return Some(None);
        }
        let client = self.grouping.key(ip).network();
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(client).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(Some(Open {
            clients: Arc::clone(self),
            client,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_gets_its_share_and_back_as_connections_close() {
        let clients = Arc::new(Clients::new(2));
        let trusted = TrustedProxies::parse(["10.0.0.1"]).unwrap();
        let admit = |ip: IpAddr| clients.admit(ip, &trusted);
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let a = admit(ip).unwrap();
        let _b = admit(ip).unwrap();
        assert!(admit(ip).is_none());
        // Another host of the same IPv6 /64 is the same client; another client is not.
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        let _c = admit(v6("2001:db8::1")).unwrap();
        let _d = admit(v6("2001:db8::2")).unwrap();
        assert!(admit(v6("2001:db8::3")).is_none());
        assert!(admit("192.0.2.2".parse().unwrap()).is_some());
        drop(a);
        assert!(admit(ip).is_some());
        // A proxy is never refused.
        let proxy = "10.0.0.1".parse().unwrap();
        let held: Vec<_> = (0..10).map(|_| admit(proxy).unwrap()).collect();
        assert_eq!(held.len(), 10);
        assert_eq!(
            clients.open.lock().unwrap().len(),
            2,
            "only clients with connections"
        );
    }
}
