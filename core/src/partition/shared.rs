//! What the rest of the broker sees of a partition without asking its actor
//! ([`PartitionShared`]: availability, deliverable counts, size, ready sessions), and the same
//! view as an owner sends it to other cluster nodes ([`LaneStats`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use super::sub_queues::SubQueues;
use crate::types::SubQueue;

/// A lane's shared view as its owner sends it to other nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LaneStats {
    pub(crate) available: bool,
    /// Deliverable messages per sub-queue, in `SubQueue::ALL`'s order.
    pub(crate) deliverable: [u64; 5],
    pub(crate) size_bytes: u64,
    pub(crate) ready_sessions: u64,
}

/// What the rest of the broker can see of a partition without asking it.
#[derive(Debug)]
pub(crate) struct PartitionShared {
    pub(super) available: AtomicBool,
    pub(super) deliverable: SubQueues<AtomicU64>,
    pub(super) nudge_pending: AtomicBool,
    pub(super) size_bytes: AtomicU64,
    /// Sessions that accept-next could lock now (session-enabled entities only).
    pub(super) ready_sessions: AtomicU64,
    /// Woken when `ready_sessions` grows: accept-next waiters wait on it.
    pub(crate) session_ready: Notify,
}

impl PartitionShared {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(PartitionShared {
            available: AtomicBool::new(true),
            deliverable: SubQueues::default(),
            nudge_pending: AtomicBool::new(false),
            size_bytes: AtomicU64::new(0),
            ready_sessions: AtomicU64::new(0),
            session_ready: Notify::new(),
        })
    }

    pub(crate) fn is_available(&self) -> bool {
        self.available.load(Ordering::Acquire)
    }

    pub(crate) fn has_deliverable(&self, queue: SubQueue) -> bool {
        self.deliverable[queue].load(Ordering::SeqCst) > 0
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        self.size_bytes.load(Ordering::Relaxed)
    }

    /// Marks the partition (un)available without an actor: a cluster node's view of a
    /// partition it does not run (see `route.rs`).
    pub(crate) fn mark_available(&self, available: bool) {
        self.available.store(available, Ordering::Release);
    }

    /// What other nodes need to know of this lane of a partition (see `remote.rs`).
    pub(crate) fn stats(&self) -> LaneStats {
        LaneStats {
            available: self.is_available(),
            deliverable: SubQueue::ALL.map(|q| self.deliverable[q].load(Ordering::SeqCst)),
            size_bytes: self.size_bytes(),
            ready_sessions: self.ready_sessions(),
        }
    }

    /// Takes what the owner on another node published (see `remote.rs`).
    pub(crate) fn apply(&self, stats: &LaneStats) {
        self.available.store(stats.available, Ordering::Release);
        // No actor here clears it: let the next nudge through.
        self.nudge_pending.store(false, Ordering::Release);
        for (q, n) in SubQueue::ALL.into_iter().zip(stats.deliverable) {
            self.deliverable[q].store(n, Ordering::SeqCst);
        }
        self.size_bytes.store(stats.size_bytes, Ordering::Relaxed);
        let before = self.ready_sessions.swap(stats.ready_sessions, Ordering::SeqCst);
        if stats.ready_sessions > before {
            self.session_ready.notify_waiters();
        }
    }

    pub(crate) fn ready_sessions(&self) -> u64 {
        self.ready_sessions.load(Ordering::SeqCst)
    }
}
