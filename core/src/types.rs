//! Domain newtypes shared by every module: names, identifiers, times.
//!
//! On a partitioned entity a [`SequenceNumber`] carries the partition id in its top 16 bits
//! and a [`LockToken`] (a UUID) in its first two bytes, so an operation by sequence number or
//! a settlement by token alone finds its partition.

use std::fmt;
use std::time::Duration;

use uuid::Uuid;

/// A point in time: milliseconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The latest representable time; used for "never".
    pub const MAX: Timestamp = Timestamp(i64::MAX);

    pub const fn from_millis(millis: i64) -> Self {
        Self(millis)
    }

    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// `self + by`, saturating at [`Timestamp::MAX`].
    pub fn saturating_add(self, by: Duration) -> Self {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        Self(self.0.saturating_add(by))
    }

    /// How long after `earlier` this is; zero if it is not after it.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0).max(0) as u64)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// A partition's index within its entity (0 for an entity without partitioning).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PartitionId(pub u16);

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A message's sequence number. For a partitioned entity the top 16 bits carry the partition id
/// and the low 48 bits the partition's own counter, as Service Bus does; for an entity without
/// partitioning the whole number is the counter. Counters start at 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SequenceNumber(pub i64);

impl SequenceNumber {
    /// Bits of the per-partition counter.
    pub const COUNTER_BITS: u32 = 48;
    const COUNTER_MASK: i64 = (1 << Self::COUNTER_BITS) - 1;

    /// The sequence number of `counter` in `partition` of an entity with or without
    /// partitioning.
    pub fn new(partitioned: bool, partition: PartitionId, counter: u64) -> Self {
        if partitioned {
            Self(
                ((partition.0 as i64) << Self::COUNTER_BITS)
                    | (counter as i64 & Self::COUNTER_MASK),
            )
        } else {
            Self(counter as i64)
        }
    }

    /// The partition this number was issued by.
    pub fn partition(self, partitioned: bool) -> PartitionId {
        if partitioned {
            PartitionId(((self.0 as u64) >> Self::COUNTER_BITS) as u16)
        } else {
            PartitionId(0)
        }
    }

    /// The per-partition counter part.
    pub fn counter(self, partitioned: bool) -> u64 {
        if partitioned {
            (self.0 & Self::COUNTER_MASK) as u64
        } else {
            self.0 as u64
        }
    }
}

/// The most sequence numbers one request may name: a deferred receive, a cancellation of
/// scheduled messages. Service Bus documents no such limit; 1000 is ironbus's page size
/// elsewhere (a peek's `message-count`, a session listing's `top`), so one request costs a
/// partition at most a page's work. More is refused as an argument out of range.
pub const MAX_SEQUENCE_NUMBERS: usize = 1000;

/// The most messages one batch delete (`com.microsoft:batch-delete-messages`) may ask for:
/// Service Bus's limit (Premium tier). More, or fewer than one, is an argument out of range.
pub const MAX_DELETE_MESSAGES: usize = 4000;

impl SequenceNumber {
    /// `numbers` without repetitions, each where it was first named: linear in their count
    /// (a request repeating one number thousands of times costs what its length does).
    pub fn distinct(numbers: &[SequenceNumber]) -> Vec<SequenceNumber> {
        let mut seen = std::collections::HashSet::with_capacity(numbers.len());
        numbers.iter().copied().filter(|seq| seen.insert(*seq)).collect()
    }
}

impl fmt::Display for SequenceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The token that identifies one lock on one message. A random (version 4) UUID whose first
/// two bytes are replaced by the partition id, so settlement by token alone finds its partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockToken(pub Uuid);

impl LockToken {
    /// A fresh token for a lock held in `partition`.
    pub fn generate(partition: PartitionId) -> Self {
        let mut bytes = *Uuid::new_v4().as_bytes();
        bytes[..2].copy_from_slice(&partition.0.to_be_bytes());
        Self(Uuid::from_bytes(bytes))
    }

    /// The partition whose lock this is.
    pub fn partition(self) -> PartitionId {
        let b = self.0.as_bytes();
        PartitionId(u16::from_be_bytes([b[0], b[1]]))
    }
}

impl fmt::Display for LockToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A queue's (or, later, topic's) name as the user spelled it. Names compare case-insensitively,
/// as in Service Bus; [`EntityName::key`] is the canonical lowercase form.
#[derive(Debug, Clone)]
pub struct EntityName(String);

impl EntityName {
    /// Wraps a name without validating it; see [`crate::description::validate_entity_name`].
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The canonical (lowercase) form used for lookups and storage.
    pub fn key(&self) -> String {
        self.0.to_lowercase()
    }
}

impl PartialEq for EntityName {
    fn eq(&self, other: &Self) -> bool {
        self.0.eq_ignore_ascii_case(&other.0) || self.key() == other.key()
    }
}

impl Eq for EntityName {}

impl fmt::Display for EntityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which queue of an entity an operation addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum SubQueue {
    /// The entity's own messages.
    #[default]
    Main,
    /// `$DeadLetterQueue`: messages dead-lettered by clients or by the broker.
    DeadLetter,
    /// `$Transfer`: messages of an auto-forwarding entity waiting for the forwarder to move
    /// them to their destination. Internal: no client receives from it.
    Transfer,
    /// `$Transfer/$DeadLetterQueue`: transfers that could not be delivered (send-via).
    TransferDeadLetter,
    /// Send-via transfers: messages a transaction (or a send-via link) sent *through* this
    /// entity to another one, each naming its destination, waiting for the forwarder.
    /// Internal: no client receives from it, and it has no address.
    SendVia,
}

impl SubQueue {
    pub(crate) const ALL: [SubQueue; 5] = [
        SubQueue::Main,
        SubQueue::DeadLetter,
        SubQueue::Transfer,
        SubQueue::TransferDeadLetter,
        SubQueue::SendVia,
    ];

    pub(crate) fn index(self) -> usize {
        match self {
            SubQueue::Main => 0,
            SubQueue::DeadLetter => 1,
            SubQueue::Transfer => 2,
            SubQueue::TransferDeadLetter => 3,
            SubQueue::SendVia => 4,
        }
    }

    pub(crate) fn tag(self) -> u8 {
        match self {
            SubQueue::Main => b'm',
            SubQueue::DeadLetter => b'd',
            SubQueue::Transfer => b't',
            SubQueue::TransferDeadLetter => b'y',
            SubQueue::SendVia => b'v',
        }
    }

    /// Whether the sub-queue holds dead letters (a message there cannot be dead-lettered
    /// again).
    pub(crate) fn is_dead_letter(self) -> bool {
        matches!(self, SubQueue::DeadLetter | SubQueue::TransferDeadLetter)
    }
}

/// How a receiver takes messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReceiveMode {
    /// The message is locked for the receiver until it settles it or the lock expires.
    #[default]
    PeekLock,
    /// The message is deleted as it is handed to the receiver (at most once).
    ReceiveAndDelete,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitioned_sequence_number_carries_partition_in_top_16_bits() {
        let cases = [(0u16, 1u64), (1, 1), (15, 42), (0xffff, (1 << 48) - 1)];
        for (partition, counter) in cases {
            let seq = SequenceNumber::new(true, PartitionId(partition), counter);
            assert_eq!(seq.0 as u64 >> 48, partition as u64, "{partition}/{counter}");
            assert_eq!(seq.partition(true), PartitionId(partition));
            assert_eq!(seq.counter(true), counter);
        }
        assert_eq!(SequenceNumber::new(true, PartitionId(3), 7).0, (3 << 48) | 7);
    }

    #[test]
    fn unpartitioned_sequence_number_is_the_counter() {
        let seq = SequenceNumber::new(false, PartitionId(0), 12345);
        assert_eq!(seq.0, 12345);
        assert_eq!(seq.partition(false), PartitionId(0));
    }

    #[test]
    fn lock_token_carries_its_partition() {
        for p in [0u16, 1, 15, 300] {
            let a = LockToken::generate(PartitionId(p));
            let b = LockToken::generate(PartitionId(p));
            assert_eq!(a.partition(), PartitionId(p));
            assert_ne!(a, b);
        }
    }

    #[test]
    fn entity_names_compare_case_insensitively() {
        assert_eq!(EntityName::new("Orders"), EntityName::new("orders"));
        assert_eq!(EntityName::new("Orders").key(), "orders");
    }
}
