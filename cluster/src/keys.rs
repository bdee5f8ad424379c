//! The cluster's keys in the namespace store (store 0), beside the core's own.
//!
//! ```text
//! c m <node id>                           member row of a node (`rows.rs`)
//! c o <entity id u64> <partition u16>     owner row of a partition (`rows.rs`)
//! c t                                     claim counter: the last token handed out (u64)
//! ```
//!
//! **Architecture Invariant:** every cluster key starts with the tag `c`, which starts no key
//! of the core's layout (the core's keys start with `n`, the namespace, or `p`, a partition):
//! the core never scans, range-deletes or guards a cluster key, nor the cluster a core key. A
//! test checks the tag against the keys of the core's layout. Integers are big-endian.

use bytes::{BufMut, Bytes, BytesMut};
use ironbus_core::PartitionId;

use crate::config::NodeId;
use crate::host::PartitionRef;

/// The first byte of every cluster key.
pub(crate) const CLUSTER: u8 = b'c';
const MEMBER: u8 = b'm';
const OWNER: u8 = b'o';
const CLAIM_COUNTER: u8 = b't';

/// The key of `node`'s member row.
pub(crate) fn member(node: &NodeId) -> Bytes {
    let mut k = BytesMut::with_capacity(2 + node.as_str().len());
    k.put_u8(CLUSTER);
    k.put_u8(MEMBER);
    k.put_slice(node.as_str().as_bytes());
    k.freeze()
}

/// The prefix of every member row.
pub(crate) fn members_prefix() -> Bytes {
    Bytes::from_static(&[CLUSTER, MEMBER])
}

/// The node a member row's key names.
pub(crate) fn node_of(key: &[u8]) -> Option<NodeId> {
    let id = key.strip_prefix(&[CLUSTER, MEMBER][..])?;
    Some(NodeId::new(std::str::from_utf8(id).ok()?))
}

/// The key of `p`'s owner row.
pub(crate) fn owner(p: PartitionRef) -> Bytes {
    let mut k = BytesMut::with_capacity(12);
    k.put_u8(CLUSTER);
    k.put_u8(OWNER);
    k.put_u64(p.entity);
    k.put_u16(p.partition.0);
    k.freeze()
}

/// The prefix of every owner row.
pub(crate) fn owners_prefix() -> Bytes {
    Bytes::from_static(&[CLUSTER, OWNER])
}

/// The partition an owner row's key names.
pub(crate) fn partition_of(key: &[u8]) -> Option<PartitionRef> {
    let rest: [u8; 10] = key.strip_prefix(&[CLUSTER, OWNER][..])?.try_into().ok()?;
    let entity = u64::from_be_bytes(rest[..8].try_into().ok()?);
    let partition = u16::from_be_bytes(rest[8..].try_into().ok()?);
    Some(PartitionRef::new(entity, PartitionId(partition)))
}

/// The key of the claim counter.
pub(crate) fn claim_counter() -> Bytes {
    Bytes::from_static(&[CLUSTER, CLAIM_COUNTER])
}

#[cfg(test)]
mod tests {
    use ironbus_core::testing::keys as core_keys;
    use ironbus_core::{PartitionId, SequenceNumber, SubQueue};

    use super::*;

    #[test]
    fn no_key_of_the_core_starts_with_the_cluster_tag() {
        let p = PartitionId(3);
        let core = [
            core_keys::entity("q"),
            core_keys::entity(""),
            core_keys::entities_prefix(),
            core_keys::next_entity_id(),
            core_keys::store_count(),
            core_keys::entity_prefix(u64::MAX),
            core_keys::partition_prefix(7, p),
            core_keys::partition_record(7, p),
            core_keys::message(7, p, SubQueue::Main, SequenceNumber(1)),
            core_keys::body(7, p, SequenceNumber(1)),
            core_keys::session(7, p, "s"),
            core_keys::transfer_record(7, p, 8, SequenceNumber(1)),
            core_keys::fence(7, p),
        ];
        let ours = [
            member(&NodeId::new("n")),
            members_prefix(),
            owner(PartitionRef::new(7, p)),
            owners_prefix(),
            claim_counter(),
        ];
        for key in &core {
            assert_ne!(key.first(), Some(&CLUSTER), "the core uses the cluster's tag: {key:?}");
            for cluster in &ours {
                assert!(!key.starts_with(cluster) && !cluster.starts_with(key), "{key:?}");
            }
        }
    }

    #[test]
    fn keys_name_their_node_and_partition_and_sort_by_partition() {
        assert_eq!(node_of(&member(&NodeId::new("node-1"))), Some(NodeId::new("node-1")));
        assert!(member(&NodeId::new("x")).starts_with(&members_prefix()));
        let p = PartitionRef::new(258, PartitionId(9));
        assert_eq!(partition_of(&owner(p)), Some(p));
        assert!(owner(p).starts_with(&owners_prefix()));
        assert!(owner(p) < owner(PartitionRef::new(258, PartitionId(10))));
        assert!(owner(p) < owner(PartitionRef::new(259, PartitionId(0))));
        assert_eq!(partition_of(&claim_counter()), None);
        assert_eq!(node_of(&owner(p)), None);
    }
}
