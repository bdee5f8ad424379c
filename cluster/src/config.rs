//! What a node is told at start: its id, its link address and the ownership timings.

use std::fmt;
use std::time::Duration;

/// A node's name in the cluster: unique among the nodes sharing a namespace store and stable
/// across the node's restarts (a restarted node recognises its own rows by it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(String);

impl NodeId {
    /// The most bytes a node id may have.
    pub const MAX_LEN: usize = 255;

    pub fn new(id: impl Into<String>) -> Self {
        NodeId(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How one node takes part in ownership. [`Config::new`] gives the defaults: a renewal every
/// second, a lease of five seconds, demotion after three (3/5 of the lease), and a membership
/// view acted on once it has been stable for one renew interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub node_id: NodeId,
    /// Where other nodes reach this one over the internal link (handed to their hosts in
    /// [`Route::Remote`](crate::Route::Remote)).
    pub link_addr: String,
    /// How often the node renews its member row and runs a round.
    pub renew_interval: Duration,
    /// How long other nodes wait, each on its own clock, for this node's heartbeat to change
    /// before they consider it dead and take its partitions.
    pub lease: Duration,
    /// How long after its last successful renewal, on its own clock, the node stops serving
    /// every partition (shorter than the lease).
    pub demote_after: Duration,
    /// How long the set of live nodes must stay unchanged before the node computes desired
    /// owners from it (debounces joins and departures).
    pub settle: Duration,
}

impl Config {
    /// The defaults for `node_id`, reachable at `link_addr`.
    pub fn new(node_id: NodeId, link_addr: impl Into<String>) -> Self {
        Config {
            node_id,
            link_addr: link_addr.into(),
            renew_interval: Duration::from_secs(1),
            lease: Duration::from_secs(5),
            demote_after: Duration::from_secs(3),
            settle: Duration::from_secs(1),
        }
    }

    /// After how long without a heartbeat a node's member row may be deleted: ten leases.
    pub fn forget_after(&self) -> Duration {
        self.lease * 10
    }

    /// Refuses timings that cannot work: a node must renew at least once before it demotes,
    /// and demote before the others' leases of it run out.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.node_id.0.is_empty() || self.node_id.0.len() > NodeId::MAX_LEN {
            return Err(ConfigError::NodeId(self.node_id.0.len()));
        }
        if self.link_addr.len() > usize::from(u16::MAX) {
            return Err(ConfigError::LinkAddr(self.link_addr.len()));
        }
        let millis = |d: Duration| d.as_millis();
        let ordered = millis(self.renew_interval) > 0
            && self.renew_interval < self.demote_after
            && self.demote_after < self.lease
            && millis(self.lease) < u128::from(u32::MAX);
        if !ordered {
            return Err(ConfigError::Timings {
                renew_interval: self.renew_interval,
                demote_after: self.demote_after,
                lease: self.lease,
            });
        }
        Ok(())
    }
}

/// A [`Config`] that [`Config::check`] refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("a node id of {0} bytes (between 1 and 255)")]
    NodeId(usize),
    #[error("a link address of {0} bytes (at most 65535)")]
    LinkAddr(usize),
    #[error(
        "timings out of order: need 0 < renew interval ({renew_interval:?}) < demote-after \
         ({demote_after:?}) < lease ({lease:?}), in whole milliseconds"
    )]
    Timings { renew_interval: Duration, demote_after: Duration, lease: Duration },
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Config, ConfigError, NodeId};

    #[test]
    fn defaults_pass_and_timings_out_of_order_are_refused() {
        let config = Config::new(NodeId::new("a"), "127.0.0.1:5000");
        assert_eq!(config.check(), Ok(()));
        assert_eq!(config.forget_after(), Duration::from_secs(50));
        let late = Config { demote_after: config.lease, ..config.clone() };
        assert!(matches!(late.check(), Err(ConfigError::Timings { .. })));
        let slow = Config { renew_interval: config.demote_after, ..config.clone() };
        assert!(matches!(slow.check(), Err(ConfigError::Timings { .. })));
        let nameless = Config { node_id: NodeId::new(""), ..config };
        assert_eq!(nameless.check(), Err(ConfigError::NodeId(0)));
    }
}
