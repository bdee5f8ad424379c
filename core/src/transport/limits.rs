//! Connection limits: how many connections a listener serves at once, in all and per client IP
//! address. A connection holds a [`ConnectionPermit`] for as long as it is served; the count is
//! taken and given back under one lock, so it is exact however many connections come and go at
//! once.
//!
//! Protocol-neutral, so every transport uses this one module (each re-exports it as its own
//! `limits`); how a refusal is answered is the transport's.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// Limits on a listener's connections; 0 means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most connections served at once.
    pub max_connections: usize,
    /// Most connections served at once from one IP address.
    pub max_connections_per_ip: usize,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitExceeded {
    /// `max_connections` connections are open.
    Total(usize),
    /// `max_connections_per_ip` connections from this address are open.
    PerIp(usize),
}

impl fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitExceeded::Total(max) => write!(
                f,
                "the server's connection limit ({max}, --max-connections) is reached; try again later"
            ),
            LimitExceeded::PerIp(max) => write!(
                f,
                "the connection limit per client address ({max}, --max-connections-per-ip) is \
                 reached; try again later"
            ),
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// Counts a listener's connections against its [`ConnectionLimits`].
#[derive(Debug, Default)]
pub struct ConnectionCounter {
    limits: ConnectionLimits,
    counts: Mutex<Counts>,
}

impl ConnectionCounter {
    pub fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(ConnectionCounter { limits, counts: Mutex::default() })
    }

    /// Counts a connection from `ip`, or says which limit it would exceed.
    pub fn try_acquire(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionPermit, LimitExceeded> {
        let ip = ip.to_canonical();
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let max = self.limits.max_connections;
        if max > 0 && counts.total >= max {
            return Err(LimitExceeded::Total(max));
        }
        let per_ip = self.limits.max_connections_per_ip;
        let from_ip = counts.per_ip.get(&ip).copied().unwrap_or(0);
        if per_ip > 0 && from_ip >= per_ip {
            return Err(LimitExceeded::PerIp(per_ip));
        }
        counts.total += 1;
        counts.per_ip.insert(ip, from_ip + 1);
        Ok(ConnectionPermit { counter: self.clone(), ip })
    }

    /// Connections counted now.
    pub fn current(&self) -> usize {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner).total
    }
}

/// One counted connection; dropping it gives the slot back.
#[derive(Debug)]
pub struct ConnectionPermit {
    counter: Arc<ConnectionCounter>,
    ip: IpAddr,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        let mut counts = self.counter.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts.total = counts.total.saturating_sub(1);
        if let Some(n) = counts.per_ip.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.per_ip.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_count_exactly_and_slots_come_back() {
        let counter = ConnectionCounter::new(ConnectionLimits {
            max_connections: 3,
            max_connections_per_ip: 2,
        });
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = counter.try_acquire(a).unwrap();
        let _a2 = counter.try_acquire(a).unwrap();
        assert_eq!(counter.try_acquire(a).unwrap_err(), LimitExceeded::PerIp(2));
        // The same address written as an IPv4-mapped IPv6 address is the same client.
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(counter.try_acquire(mapped).unwrap_err(), LimitExceeded::PerIp(2));
        let _b1 = counter.try_acquire(b).unwrap();
        assert_eq!(counter.try_acquire(b).unwrap_err(), LimitExceeded::Total(3));
        drop(a1);
        assert_eq!(counter.current(), 2);
        let _b2 = counter.try_acquire(b).unwrap();
        assert_eq!(counter.current(), 3);
    }

    #[test]
    fn zero_is_unlimited() {
        let counter = ConnectionCounter::new(ConnectionLimits::default());
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let permits: Vec<_> = (0..1000).map(|_| counter.try_acquire(ip).unwrap()).collect();
        assert_eq!(counter.current(), 1000);
        drop(permits);
        assert_eq!(counter.current(), 0);
    }

    #[test]
    fn concurrent_acquires_never_exceed_the_limit() {
        let counter = ConnectionCounter::new(ConnectionLimits {
            max_connections: 5,
            max_connections_per_ip: 0,
        });
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let counter = counter.clone();
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        if let Ok(permit) = counter.try_acquire(ip) {
                            assert!(counter.current() <= 5);
                            drop(permit);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(counter.current(), 0);
    }
}
