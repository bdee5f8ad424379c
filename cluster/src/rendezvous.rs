//! Desired owners: rendezvous (highest-random-weight) hashing of partitions over nodes.
//!
//! Each node's weight for a partition is xxh3-64 of the partition (entity id and partition
//! index, big-endian) followed by the node id; the node with the highest weight is the
//! partition's desired owner (equal weights: the greater node id). Removing a node moves only
//! the partitions it was desired for; adding one moves to it only the partitions it now wins,
//! about 1/n of them.
//!
//! **Architecture Invariant:** the weight never changes across releases (a test pins it): nodes
//! of different versions in one cluster must agree on desired owners.

use xxhash_rust::xxh3::xxh3_64;

use crate::config::NodeId;
use crate::host::PartitionRef;

/// `node`'s weight for `p`.
pub fn weight(node: &NodeId, p: PartitionRef) -> u64 {
    let mut input = Vec::with_capacity(10 + node.as_str().len());
    input.extend_from_slice(&p.entity.to_be_bytes());
    input.extend_from_slice(&p.partition.0.to_be_bytes());
    input.extend_from_slice(node.as_str().as_bytes());
    xxh3_64(&input)
}

/// The desired owner of `p` among `nodes`, `None` when there is none.
pub fn desired_owner(p: PartitionRef, nodes: &[NodeId]) -> Option<&NodeId> {
    nodes.iter().max_by(|a, b| (weight(a, p), *a).cmp(&(weight(b, p), *b)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ironbus_core::PartitionId;
    use proptest::prelude::*;

    use super::*;

    fn p(entity: u64, partition: u16) -> PartitionRef {
        PartitionRef::new(entity, PartitionId(partition))
    }

    fn nodes(names: &[&str]) -> Vec<NodeId> {
        names.iter().map(|n| NodeId::new(*n)).collect()
    }

    fn owners(nodes: &[NodeId], partitions: u16) -> BTreeMap<PartitionRef, NodeId> {
        (0..partitions)
            .map(|i| {
                (
                    p(u64::from(i % 7), i),
                    desired_owner(p(u64::from(i % 7), i), nodes).unwrap().clone(),
                )
            })
            .collect()
    }

    #[test]
    fn the_weight_is_pinned() {
        assert_eq!(weight(&NodeId::new("node-a"), p(1, 0)), 0x831d_13f2_8126_019e);
        assert_eq!(weight(&NodeId::new("node-b"), p(1, 0)), 0x60d0_bed5_390f_123f);
    }

    #[test]
    fn partitions_spread_evenly() {
        let nodes = nodes(&["a", "b", "c"]);
        let owners = owners(&nodes, 3000);
        for node in &nodes {
            let mine = owners.values().filter(|o| *o == node).count();
            assert!((850..1150).contains(&mine), "{node}: {mine} of 3000");
        }
        assert_eq!(desired_owner(p(0, 0), &[]), None);
    }

    proptest! {
        #[test]
        fn removing_a_node_moves_only_its_partitions(
            count in 2usize..8,
            removed in 0usize..8,
            partitions in 1u16..300,
        ) {
            let all: Vec<NodeId> = (0..count).map(|i| NodeId::new(format!("node-{i}"))).collect();
            let removed = &all[removed % count];
            let rest: Vec<NodeId> = all.iter().filter(|n| *n != removed).cloned().collect();
            let before = owners(&all, partitions);
            let after = owners(&rest, partitions);
            for (p, owner) in &before {
                if owner != removed {
                    prop_assert_eq!(&after[p], owner, "{} moved", p);
                }
            }
        }

        #[test]
        fn adding_a_node_moves_partitions_only_to_it(count in 1usize..8, partitions in 1u16..300) {
            let before: Vec<NodeId> = (0..count).map(|i| NodeId::new(format!("n{i}"))).collect();
            let mut after = before.clone();
            let joined = NodeId::new("joined");
            after.push(joined.clone());
            let (before, after) = (owners(&before, partitions), owners(&after, partitions));
            for (p, owner) in &after {
                prop_assert!(owner == &before[p] || owner == &joined);
            }
        }
    }
}
