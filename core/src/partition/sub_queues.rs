//! [`SubQueues`]: one value per sub-queue of a partition.

use std::ops::{Index, IndexMut};

use crate::types::SubQueue;

/// One `T` per [`SubQueue`], indexed by the sub-queue. A partition keeps its messages, its
/// available sets, its receivers and its published counts in these, so a new sub-queue (the
/// transfer queue, the transfer dead-letter queue) is a new variant of [`SubQueue`] and nothing
/// here.
#[derive(Debug)]
pub(crate) struct SubQueues<T>([T; SubQueue::ALL.len()]);

impl<T: Default> Default for SubQueues<T> {
    fn default() -> Self {
        SubQueues(std::array::from_fn(|_| T::default()))
    }
}

impl<T> SubQueues<T> {
    /// Every sub-queue with its value, in [`SubQueue::ALL`] order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (SubQueue, &T)> {
        SubQueue::ALL.into_iter().zip(self.0.iter())
    }

    /// Every value, in [`SubQueue::ALL`] order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.0.iter()
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.0.iter_mut()
    }
}

impl<T> Index<SubQueue> for SubQueues<T> {
    type Output = T;

    fn index(&self, queue: SubQueue) -> &T {
        &self.0[queue.index()]
    }
}

impl<T> IndexMut<SubQueue> for SubQueues<T> {
    fn index_mut(&mut self, queue: SubQueue) -> &mut T {
        &mut self.0[queue.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sub_queue_has_its_own_value() {
        let mut counts = SubQueues::<u32>::default();
        counts[SubQueue::DeadLetter] += 2;
        counts[SubQueue::Main] += 1;
        let all: Vec<_> = counts.iter().map(|(q, n)| (q, *n)).collect();
        assert_eq!(
            all,
            [
                (SubQueue::Main, 1),
                (SubQueue::DeadLetter, 2),
                (SubQueue::Transfer, 0),
                (SubQueue::TransferDeadLetter, 0),
                (SubQueue::SendVia, 0)
            ]
        );
    }
}
