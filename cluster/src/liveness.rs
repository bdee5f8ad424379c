//! Which nodes are alive, judged by observation on this node's own clock.
//!
//! A node is alive while its heartbeat counter has changed within its lease, measured on the
//! *observer's* clock from the moment the observer first saw the current value. No two
//! machines' clocks are ever compared, only durations on one clock, so clock skew between
//! nodes cannot make a live node look dead (only a difference in clock *rates* could, and it
//! would need to be as large as the lease's margin over the renew interval). An observer that
//! has just started sees every row's value for the first time: every node with a row is alive
//! to it until it has watched it for a lease without change.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use ironbus_core::Timestamp;

use crate::config::NodeId;
use crate::rows::MemberRow;

/// What this node has seen of each node's heartbeat, and since when.
#[derive(Debug, Default)]
pub(crate) struct Liveness {
    seen: BTreeMap<NodeId, Seen>,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    heartbeat: u64,
    since: Timestamp,
}

/// One node as this node judged it in one round.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub(crate) row: MemberRow,
    /// The row's bytes as read (the guard of a deletion).
    pub(crate) raw: Bytes,
    pub(crate) alive: bool,
    /// How long the heartbeat has not changed, on this node's clock.
    pub(crate) silent_for: Duration,
}

/// The member rows of one round, judged.
#[derive(Debug, Default, Clone)]
pub(crate) struct Membership {
    peers: BTreeMap<NodeId, Peer>,
}

impl Liveness {
    /// Judges this round's member rows, read at `now` on this node's clock. Nodes without a row
    /// are forgotten: a row that comes back is watched afresh.
    pub(crate) fn observe(
        &mut self,
        rows: Vec<(NodeId, MemberRow, Bytes)>,
        now: Timestamp,
    ) -> Membership {
        let mut seen = BTreeMap::new();
        let mut peers = BTreeMap::new();
        for (node, row, raw) in rows {
            let earlier = self.seen.get(&node).filter(|s| s.heartbeat == row.heartbeat);
            let since = earlier.map_or(now, |s| s.since);
            let silent_for = now.saturating_since(since);
            seen.insert(node.clone(), Seen { heartbeat: row.heartbeat, since });
            let alive = silent_for < row.lease;
            peers.insert(node, Peer { row, raw, alive, silent_for });
        }
        self.seen = seen;
        Membership { peers }
    }
}

impl Membership {
    pub(crate) fn peer(&self, node: &NodeId) -> Option<&Peer> {
        self.peers.get(node)
    }

    /// Whether `node` has a row whose heartbeat changed within its lease.
    pub(crate) fn alive(&self, node: &NodeId) -> bool {
        self.peers.get(node).is_some_and(|p| p.alive)
    }

    /// The nodes that may be desired owners: alive and not leaving.
    pub(crate) fn candidates(&self) -> impl Iterator<Item = &NodeId> {
        self.peers.iter().filter(|(_, p)| p.alive && !p.row.leaving).map(|(node, _)| node)
    }

    /// The live nodes with the addresses of their links.
    pub(crate) fn alive_links(&self) -> impl Iterator<Item = (&NodeId, &str)> {
        self.peers.iter().filter(|(_, p)| p.alive).map(|(n, p)| (n, p.row.link_addr.as_str()))
    }

    /// The nodes silent for at least `after`, with their rows' bytes.
    pub(crate) fn silent(&self, after: Duration) -> impl Iterator<Item = (&NodeId, &Bytes)> {
        self.peers.iter().filter(move |(_, p)| p.silent_for >= after).map(|(n, p)| (n, &p.raw))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ironbus_core::Timestamp;

    use super::*;

    fn row(heartbeat: u64) -> (NodeId, MemberRow, Bytes) {
        let row = MemberRow {
            heartbeat,
            lease: Duration::from_secs(5),
            leaving: false,
            link_addr: "a:1".into(),
        };
        let raw = row.encode();
        (NodeId::new("a"), row, raw)
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_millis(1_000_000 + secs * 1000)
    }

    #[test]
    fn a_node_is_alive_until_its_heartbeat_stands_still_for_a_lease_on_this_clock() {
        let a = NodeId::new("a");
        let mut liveness = Liveness::default();
        // A new observer: alive, whatever the row says of time.
        assert!(liveness.observe(vec![row(40)], at(0)).alive(&a));
        assert!(liveness.observe(vec![row(40)], at(4)).alive(&a));
        let view = liveness.observe(vec![row(40)], at(5));
        assert!(!view.alive(&a), "unchanged for a whole lease");
        assert_eq!(view.silent(Duration::from_secs(5)).count(), 1);
        // A change, however late, starts a new lease from when it is seen.
        assert!(liveness.observe(vec![row(41)], at(9)).alive(&a));
        assert!(liveness.observe(vec![row(41)], at(13)).alive(&a));
        assert!(!liveness.observe(vec![row(41)], at(14)).alive(&a));
    }

    #[test]
    fn a_row_that_disappears_is_forgotten_and_watched_afresh_when_it_returns() {
        let a = NodeId::new("a");
        let mut liveness = Liveness::default();
        liveness.observe(vec![row(1)], at(0));
        let gone = liveness.observe(vec![], at(6));
        assert!(!gone.alive(&a) && gone.peer(&a).is_none());
        assert!(liveness.observe(vec![row(1)], at(7)).alive(&a));
    }

    #[test]
    fn leaving_nodes_are_alive_but_no_candidates() {
        let mut liveness = Liveness::default();
        let (node, mut leaving, _) = row(1);
        leaving.leaving = true;
        let raw = leaving.encode();
        let view = liveness.observe(vec![(node.clone(), leaving, raw)], at(0));
        assert!(view.alive(&node));
        assert_eq!(view.candidates().count(), 0);
    }
}
