//! The debounce of membership: desired owners are computed from a set of live nodes only once
//! that set has stayed the same for a while, so a node that flaps or a burst of joins does not
//! move partitions back and forth.

use std::time::Duration;

use ironbus_core::Timestamp;

use crate::config::NodeId;

/// The set of candidate nodes last seen stable.
#[derive(Debug, Default)]
pub(crate) struct Settle {
    /// The set seen lately, and since when it has not changed.
    candidate: Option<(Vec<NodeId>, Timestamp)>,
    settled: Vec<NodeId>,
}

impl Settle {
    /// Takes this round's candidates (sorted) at `now`; returns the set that has stayed the
    /// same for `settle` (empty until one has).
    pub(crate) fn observe(
        &mut self,
        nodes: Vec<NodeId>,
        now: Timestamp,
        settle: Duration,
    ) -> &[NodeId] {
        match &self.candidate {
            Some((seen, _)) if *seen == nodes => {}
            _ => self.candidate = Some((nodes, now)),
        }
        if let Some((nodes, since)) = &self.candidate {
            if now.saturating_since(*since) >= settle && self.settled != *nodes {
                self.settled = nodes.clone();
            }
        }
        &self.settled
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ironbus_core::Timestamp;

    use super::*;

    #[test]
    fn a_view_is_adopted_only_after_staying_the_same_for_the_settle_time() {
        let (a, b) = (NodeId::new("a"), NodeId::new("b"));
        let t = |ms| Timestamp::from_millis(ms);
        let settle = Duration::from_secs(1);
        let mut s = Settle::default();
        let only_a: &[NodeId] = std::slice::from_ref(&a);
        assert!(s.observe(vec![a.clone()], t(0), settle).is_empty());
        assert_eq!(s.observe(vec![a.clone()], t(1000), settle), only_a);
        // b flaps in and out: never adopted.
        assert_eq!(s.observe(vec![a.clone(), b.clone()], t(2000), settle), only_a);
        assert_eq!(s.observe(vec![a.clone()], t(2500), settle), only_a);
        assert_eq!(s.observe(vec![a.clone(), b.clone()], t(3000), settle), only_a);
        assert_eq!(s.observe(vec![a.clone(), b.clone()], t(3999), settle), only_a);
        assert_eq!(s.observe(vec![a.clone(), b.clone()], t(4000), settle), [a, b]);
    }
}
