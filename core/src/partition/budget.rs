//! Keeping a cycle's write within its store's [`WriteLimits`] ([`Store::limits`]): the cycle's
//! [`Budget`], the [`Size`] of what a journal holds, what a command is expected to write
//! ([`estimate`]), and the actor's phases under limits.
//!
//! A store with limits is never handed a batch it must split. Under limits a cycle:
//! - lets time's work (expired session locks and message locks, due scheduled messages,
//!   expiries, the end of duplicate-detection windows, forwarding reconciliation, a topic's
//!   due publishes) fill at most half its budget, and never so much that the first waiting
//!   command no longer fits: each lane's loops stop at [`Effects::stop_at`]
//!   (`effects.rs`), so a backlog is worked off over several cycles, each one's write durable
//!   before the next begins;
//! - takes commands in order while the journal and the next command's estimate fit; the
//!   command that does not fit and every one after it wait for the next cycle, which runs at
//!   once. A command of independent items (transfers, settlements, transfers to forget) is
//!   split instead: what fits now, the rest first thing next cycle, one answer for both;
//! - refuses a command that a cycle of its own could not hold (a send or a commit stays one
//!   atomic write; for a command of items, when its first item alone could not fit), with
//!   [`BrokerError::InvalidOperation`] to its caller, without applying it;
//! - bounds deliveries (receive-and-delete ones write) by what is left;
//! - never writes a batch over the limits: should an estimate have been short, the cycle fails
//!   as a failed write does (every reply an error, the partition rebuilt from the store).
//!
//! A store without limits ([`WriteLimits::UNLIMITED`]) takes none of these paths: the cycle is
//! what it is without this file, plus one comparison per item of open-ended work (the
//! journal keeps its byte count as it goes, an addition per record).
//!
//! [`Store::limits`]: crate::store::Store::limits
//! [`Effects::stop_at`]: super::effects::Effects::stop_at

use std::sync::Arc;

use tokio::sync::oneshot;

use super::{Command, LaneId, Partition, Work};
use crate::error::{BrokerError, Result};
use crate::message::{value_size, ApplicationProperties, Disposition, Message};
use crate::store::{WriteBatch, WriteLimits};
use crate::types::{ReceiveMode, Timestamp};

/// Operations (guards included) and bytes, as [`WriteLimits`] counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Size {
    pub(crate) ops: usize,
    pub(crate) bytes: usize,
}

impl Size {
    pub(crate) const ZERO: Size = Size { ops: 0, bytes: 0 };
    pub(crate) const MAX: Size = Size { ops: usize::MAX, bytes: usize::MAX };

    pub(crate) const fn new(ops: usize, bytes: usize) -> Size {
        Size { ops, bytes }
    }

    pub(crate) fn plus(self, other: Size) -> Size {
        Size::new(self.ops.saturating_add(other.ops), self.bytes.saturating_add(other.bytes))
    }

    pub(crate) fn minus(self, other: Size) -> Size {
        Size::new(self.ops.saturating_sub(other.ops), self.bytes.saturating_sub(other.bytes))
    }

    fn times(self, n: usize) -> Size {
        Size::new(self.ops.saturating_mul(n), self.bytes.saturating_mul(n))
    }

    fn min(self, other: Size) -> Size {
        Size::new(self.ops.min(other.ops), self.bytes.min(other.bytes))
    }

    /// Whether either count has reached `cap`'s.
    pub(crate) fn reaches(self, cap: Size) -> bool {
        self.ops >= cap.ops || self.bytes >= cap.bytes
    }

    /// Whether both counts are within `cap`'s.
    pub(crate) fn fits(self, cap: Size) -> bool {
        self.ops <= cap.ops && self.bytes <= cap.bytes
    }
}

/// What one lane adds at the end of a cycle, after its work: the partition record (the
/// sequence counter and the main queue's floor) and a body sweep's range delete.
const LANE_RESERVE: Size = Size::new(2, 128);
/// What a queue's main-queue floor adds, once per partition (a topic's lanes keep none): its
/// sweep's range delete and the clearing below a floor that falls (`journal.rs`).
const FLOOR_RESERVE: Size = Size::new(2, 128);
/// What one item of open-ended work (an expired lock, a due message, a relocation, a
/// delivery) may write past the check that let it start.
pub(crate) const ITEM: Size = Size::new(4, 1024);
/// What a record other than a body is expected to take: key, value, encoding.
const RECORD: usize = 128;

/// How much of its store's limits one cycle may fill.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    limits: WriteLimits,
}

impl Budget {
    pub(crate) fn new(limits: WriteLimits) -> Self {
        Budget { limits }
    }

    /// Whether the store has limits at all (else nothing here runs).
    pub(crate) fn is_limited(&self) -> bool {
        self.limits != WriteLimits::UNLIMITED
    }

    /// What a cycle's commands, time's work and deliveries may fill in a partition of `lanes`
    /// lanes: the limits less what the lanes add at the end of the cycle.
    fn whole(&self, lanes: usize) -> Size {
        Size::new(self.limits.max_ops, self.limits.max_bytes)
            .minus(LANE_RESERVE.times(lanes))
            .minus(FLOOR_RESERVE)
    }

    /// Whether `batch` may be handed to the store.
    pub(crate) fn admits(&self, batch: &WriteBatch) -> bool {
        !self.is_limited() || self.limits.admits_batch(batch)
    }

    pub(crate) fn limits(&self) -> WriteLimits {
        self.limits
    }

    /// The error of a command that writes more than one cycle may.
    fn too_large(&self, cost: Size) -> BrokerError {
        BrokerError::InvalidOperation(format!(
            "the request would write about {} records and {} bytes at once, more than this \
             entity's store takes in one transaction ({} records, {} bytes); send fewer or \
             smaller messages per request",
            cost.ops, cost.bytes, self.limits.max_ops, self.limits.max_bytes
        ))
    }
}

/// What storing `message` is expected to write: its body, its meta record, a duplicate-
/// detection record, and a meta record per topic copy.
fn message_cost(message: &Message, copies: usize) -> Size {
    let records = 3 + copies;
    Size::new(records, message.size().saturating_mul(2).saturating_add(records * RECORD))
}

/// What applying `command` is expected to write (an estimate, generous for what it counts);
/// `copies` is how many lanes a message sent to this lane is copied to (a topic's
/// subscriptions). Zero for commands that write little or nothing on their own.
pub(crate) fn estimate(command: &Command, copies: usize) -> Size {
    let per = |n: usize, ops: usize| Size::new(ops, ops * RECORD).times(n);
    match command {
        Command::Send { messages, .. } => {
            messages.iter().fold(Size::ZERO, |s, m| s.plus(message_cost(m, copies)))
        }
        Command::Transfer { transfers, .. } => transfers
            .iter()
            .fold(Size::ZERO, |s, (_, m)| s.plus(message_cost(m, copies)).plus(per(1, 1))),
        Command::Commit { work, .. } => work.iter().fold(Size::ZERO, |s, w| {
            s.plus(match w {
                Work::Send(m) | Work::Transfer(m) | Work::Schedule(_, m) => message_cost(m, copies),
                Work::Cancel(seqs) => per(seqs.len(), 2),
                Work::Settle { disposition, .. } => settle_cost(disposition),
                Work::SessionState { state, .. } => {
                    Size::new(1, RECORD + state.as_ref().map_or(0, |s| s.len()))
                }
            })
        }),
        Command::Settle { items, .. } => {
            items.iter().fold(Size::ZERO, |s, (_, d)| s.plus(settle_cost(d)))
        }
        Command::Cancel { sequence_numbers, .. } => per(sequence_numbers.len(), 2),
        // One message's worth: the delete stops at the lane's `stop_at` (best effort, as
        // Service Bus's is), so it never needs a cycle of its own.
        Command::DeleteMessages { .. } => per(1, 2),
        Command::ReceiveDeferred {
            sequence_numbers, mode: ReceiveMode::ReceiveAndDelete, ..
        }
        | Command::ReceiveDeferredSession {
            sequence_numbers,
            mode: ReceiveMode::ReceiveAndDelete,
            ..
        } => per(sequence_numbers.len(), 2),
        Command::SessionState { set: Some(state), .. } => {
            Size::new(1, RECORD + state.as_ref().map_or(0, |s| s.len()))
        }
        Command::ForgetTransfers(ids) => per(ids.len(), 1),
        Command::RemoveLane(_) => per(1, 1),
        _ => Size::ZERO,
    }
}

/// A settlement: the meta record deleted or rewritten (moved, for a dead letter, with the
/// reason, the description and the properties laid over the message's), the body.
fn settle_cost(disposition: &Disposition) -> Size {
    let laid = |properties: &ApplicationProperties| -> usize {
        properties.iter().map(|(k, v)| k.len() + value_size(v) + 8).sum()
    };
    let text = match disposition {
        Disposition::DeadLetter { reason, description, properties } => {
            reason.as_ref().map_or(0, String::len)
                + description.as_ref().map_or(0, String::len)
                + laid(properties)
        }
        Disposition::Abandon { properties } | Disposition::Defer { properties } => laid(properties),
        Disposition::Complete | Disposition::Release => 0,
    };
    Size::new(3, 3 * RECORD + 2 * text)
}

/// Answers a command that can never fit a cycle with `error`, without applying it (each
/// transfer of a [`Command::Transfer`] with it). A command without an answer is applied
/// anyway (none is estimated so large, and the write's own check still holds).
fn refuse(
    partition: &mut Partition,
    lane: LaneId,
    command: Command,
    error: BrokerError,
    now: Timestamp,
) -> bool {
    let fx = &mut partition.state.fx;
    match command {
        Command::Send { reply, .. } => fx.reply(reply, Err(error)),
        // Refused one by one, so that the forwarder dead-letters them rather than retrying.
        Command::Transfer { transfers, reply } => {
            fx.reply(reply, Ok(transfers.iter().map(|_| Err(error.clone())).collect()))
        }
        Command::Commit { reply, .. } => fx.reply(reply, Err(error)),
        Command::Settle { reply, .. } => fx.reply(reply, Err(error)),
        Command::Cancel { reply, .. } => fx.reply(reply, Err(error)),
        Command::ReceiveDeferred { reply, .. } | Command::ReceiveDeferredSession { reply, .. } => {
            fx.lists.push((reply, Err(error)));
        }
        Command::SessionState { reply, .. } => fx.reply(reply, Err(error.into())),
        Command::RemoveLane(reply) => fx.reply(reply, Err(error)),
        command => return partition.apply(lane, command, now),
    }
    true
}

/// Splits a command of independent items (transfers, settlements, transfers to forget) into
/// what fits `room` and the rest, the rest's answer joined to the first's: the caller gets one
/// answer, an error if either part failed. A transfer stored by a part whose answer is lost is
/// answered as a duplicate when the forwarder sends it again (the ledger, `transfer.rs`); a
/// settlement is answered with a lost lock. Gives the command back if it has no such items or
/// not even one fits.
fn split(command: Command, room: Size, copies: usize) -> Result<(Command, Command), Command> {
    /// How many of the items, in order, fit `room` together.
    fn fitting(costs: impl Iterator<Item = Size>, room: Size) -> usize {
        let mut total = Size::ZERO;
        costs
            .take_while(|cost| {
                total = total.plus(*cost);
                total.fits(room)
            })
            .count()
    }
    match command {
        Command::Transfer { mut transfers, reply } => {
            let per =
                |(_, m): &(_, Arc<Message>)| message_cost(m, copies).plus(Size::new(1, RECORD));
            let n = fitting(transfers.iter().map(per), room);
            if n == 0 || n == transfers.len() {
                return Err(Command::Transfer { transfers, reply });
            }
            let rest = transfers.split_off(n);
            let (first_reply, rest_reply) = joined(reply);
            Ok((
                Command::Transfer { transfers, reply: first_reply },
                Command::Transfer { transfers: rest, reply: rest_reply },
            ))
        }
        Command::Settle { queue, mut items, reply } => {
            let n = fitting(items.iter().map(|(_, d)| settle_cost(d)), room);
            if n == 0 || n == items.len() {
                return Err(Command::Settle { queue, items, reply });
            }
            let rest = items.split_off(n);
            let (first_reply, rest_reply) = joined(reply);
            Ok((
                Command::Settle { queue, items, reply: first_reply },
                Command::Settle { queue, items: rest, reply: rest_reply },
            ))
        }
        Command::ForgetTransfers(mut ids) => {
            let n = fitting(ids.iter().map(|_| Size::new(1, RECORD)), room);
            if n == 0 || n == ids.len() {
                return Err(Command::ForgetTransfers(ids));
            }
            let rest = ids.split_off(n);
            Ok((Command::ForgetTransfers(ids), Command::ForgetTransfers(rest)))
        }
        command => Err(command),
    }
}

/// What the first item of a command [`split`] can divide is expected to write.
fn first_item(command: &Command, copies: usize) -> Option<Size> {
    match command {
        Command::Transfer { transfers, .. } => {
            transfers.first().map(|(_, m)| message_cost(m, copies).plus(Size::new(1, RECORD)))
        }
        Command::Settle { items, .. } => items.first().map(|(_, d)| settle_cost(d)),
        Command::ForgetTransfers(ids) => ids.first().map(|_| Size::new(1, RECORD)),
        _ => None,
    }
}

/// Two reply channels whose answers, concatenated, answer `reply` (an error if either part's
/// is one).
fn joined<T: Send + 'static>(reply: ListOf<T>) -> (ListOf<T>, ListOf<T>) {
    let (first_tx, first_rx) = oneshot::channel::<Result<Vec<T>>>();
    let (rest_tx, rest_rx) = oneshot::channel::<Result<Vec<T>>>();
    tokio::spawn(async move {
        let answer = match (first_rx.await, rest_rx.await) {
            (Ok(Ok(mut first)), Ok(Ok(rest))) => {
                first.extend(rest);
                Ok(first)
            }
            (Ok(Err(e)), _) | (_, Ok(Err(e))) => Err(e),
            _ => Err(BrokerError::ShuttingDown),
        };
        let _ = reply.send(answer);
    });
    (first_tx, rest_tx)
}

/// The reply channel of a command answered with one outcome per item.
type ListOf<T> = oneshot::Sender<Result<Vec<T>>>;

impl Partition {
    /// What every lane's journal holds, together.
    pub(super) fn journal_size(&self) -> Size {
        self.states().fold(Size::ZERO, |size, state| size.plus(state.fx.size()))
    }

    fn lanes(&self) -> usize {
        1 + self.topic.as_ref().map_or(0, |t| t.lanes.len())
    }

    /// Shares what the journal has left below `cap` between the lanes' open-ended work (their
    /// `stop_at`). A cycle that has written nothing yet lets each lane do one item at least.
    fn share(&mut self, cap: Size) {
        let total = self.journal_size();
        let lanes = self.lanes();
        let room = cap.minus(total);
        let mut each = Size::new(room.ops / lanes, room.bytes / lanes);
        if total == Size::ZERO {
            each = Size::new(each.ops.max(1), each.bytes.max(1));
        }
        for state in self.states_mut() {
            state.fx.stop_at = state.fx.size().plus(each);
        }
    }

    /// Time's work under limits: at most half the budget, and room left for `first`, the
    /// first waiting command's estimate.
    pub(super) fn process_due_within(&mut self, now: Timestamp, first: Size) {
        let whole = self.budget.whole(self.lanes());
        let half = Size::new(whole.ops / 2, whole.bytes / 2);
        let cap = half.min(whole.minus(first.min(whole))).minus(ITEM);
        self.share(cap);
        for state in self.states_mut() {
            state.process_due(now);
        }
        if let Some(topic) = &mut self.topic {
            topic.publish_due(&mut self.state, Some(cap));
        }
    }

    /// What the first waiting command needs room for (see
    /// [`Partition::process_due_within`]): its estimate, or its first item's if it can be
    /// split.
    pub(super) fn first_estimate(&self, commands: &[(LaneId, Command)]) -> Size {
        let Some((lane, command)) = commands.first() else { return Size::ZERO };
        let copies = self.copies(*lane);
        first_item(command, copies).unwrap_or_else(|| estimate(command, copies))
    }

    /// How many lanes a message sent through `lane` is copied to.
    fn copies(&self, lane: LaneId) -> usize {
        match &self.topic {
            Some(topic) if lane == self.cx.entity_id => topic.lanes.len(),
            _ => 0,
        }
    }

    /// The commands of the cycle under limits: applied in order while they fit; the rest stay
    /// in `commands` for the next cycle. False when the partition should stop.
    pub(super) fn apply_within(
        &mut self,
        commands: &mut Vec<(LaneId, Command)>,
        now: Timestamp,
    ) -> bool {
        let whole = self.budget.whole(self.lanes());
        let mut keep_running = true;
        let mut left = Vec::new();
        let mut queued = commands.drain(..);
        while let Some((lane, command)) = queued.next() {
            let copies = self.copies(lane);
            let cost = estimate(&command, copies);
            let total = self.journal_size();
            if !total.plus(cost).fits(whole) {
                let command = match split(command, whole.minus(total), copies) {
                    Ok((first, rest)) => {
                        // As much as fits now, the rest first thing next cycle.
                        left.push((lane, rest));
                        left.extend(queued.by_ref());
                        self.share(whole.minus(estimate(&first, copies)).minus(ITEM));
                        keep_running &= self.apply(lane, first, now);
                        break;
                    }
                    Err(command) => command,
                };
                if first_item(&command, copies).unwrap_or(cost).fits(whole) {
                    // A cycle of its own holds it (or its first item): the next one.
                    left.push((lane, command));
                    left.extend(queued.by_ref());
                    break;
                }
                // Not even a cycle of its own would hold it (or one item of it).
                let error = self.budget.too_large(cost);
                tracing::warn!(entity = %self.cx.entity_name, partition = %self.cx.partition, ops = cost.ops, bytes = cost.bytes, "request over the store's write limits refused");
                keep_running &= refuse(self, lane, command, error, now);
                continue;
            }
            // What time makes due inside a command (a message sent already expired) shares
            // what the command leaves.
            self.share(whole.minus(cost).minus(ITEM));
            keep_running &= self.apply(lane, command, now);
        }
        drop(queued);
        commands.append(&mut left);
        keep_running
    }

    /// Deliveries under limits: what the journal has left.
    pub(super) fn deliver_within(&mut self, now: Timestamp) {
        let whole = self.budget.whole(self.lanes());
        self.share(whole.minus(ITEM));
        self.deliver(now);
    }

    /// Whether a lane stopped open-ended work for want of room: the next cycle runs at once.
    pub(super) fn has_more(&self) -> bool {
        self.budget.is_limited() && self.states().any(|s| s.fx.more)
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::oneshot;

    use super::{estimate, first_item, split, Budget, Size, RECORD};
    use crate::message::Disposition;
    use crate::partition::{Command, TransferId};
    use crate::store::{WriteBatch, WriteLimits};
    use crate::types::{LockToken, PartitionId, SequenceNumber, SubQueue};

    #[test]
    fn transfers_to_forget_split_at_what_fits() {
        let ids: Vec<TransferId> =
            (0..10).map(|i| TransferId { source: 7, sequence_number: SequenceNumber(i) }).collect();
        let command = Command::ForgetTransfers(ids);
        assert_eq!(estimate(&command, 0), Size::new(10, 10 * RECORD));
        assert_eq!(first_item(&command, 0), Some(Size::new(1, RECORD)));
        let Ok((Command::ForgetTransfers(first), Command::ForgetTransfers(rest))) =
            split(command, Size::new(4, usize::MAX), 0)
        else {
            panic!("split in two");
        };
        assert_eq!((first.len(), rest.len()), (4, 6));
        assert_eq!(first[3].sequence_number, SequenceNumber(3));
        assert_eq!(rest[0].sequence_number, SequenceNumber(4));
        let none = split(Command::ForgetTransfers(rest), Size::ZERO, 0);
        assert!(matches!(none, Err(Command::ForgetTransfers(ids)) if ids.len() == 6));
    }

    #[tokio::test]
    async fn a_split_settlement_is_answered_once_with_both_parts_in_order() {
        let items: Vec<_> =
            (0..5).map(|_| (LockToken::generate(PartitionId(0)), Disposition::Complete)).collect();
        let (reply, answer) = oneshot::channel();
        let command = Command::Settle { queue: SubQueue::Main, items, reply };
        let room = Size::new(3 * 2, usize::MAX);
        let Ok((
            Command::Settle { items: a, reply: ra, .. },
            Command::Settle { items: b, reply: rb, .. },
        )) = split(command, room, 0)
        else {
            panic!("split in two");
        };
        assert_eq!((a.len(), b.len()), (2, 3));
        let _ = rb.send(Ok(vec![Ok(()), Err(crate::BrokerError::MessageLockLost), Ok(())]));
        let _ = ra.send(Ok(vec![Ok(()), Ok(())]));
        let joined = answer.await.expect("answered").expect("both parts written");
        assert_eq!(joined.len(), 5);
        assert_eq!(
            joined[3],
            Err(crate::BrokerError::MessageLockLost),
            "the first part comes first"
        );

        let items = vec![(LockToken::generate(PartitionId(0)), Disposition::Complete); 2];
        let (reply, answer) = oneshot::channel();
        let command = Command::Settle { queue: SubQueue::Main, items, reply };
        let Ok((Command::Settle { reply: ra, .. }, Command::Settle { reply: rb, .. })) =
            split(command, Size::new(3, usize::MAX), 0)
        else {
            panic!("split in two");
        };
        let _ = ra.send(Ok(vec![Ok(())]));
        drop(rb);
        assert!(answer.await.expect("answered").is_err(), "a part lost is the whole's error");
    }

    #[test]
    fn sizes_saturate_and_compare_by_either_count() {
        assert_eq!(Size::MAX.plus(Size::new(1, 1)), Size::MAX);
        assert_eq!(Size::new(1, 5).minus(Size::new(2, 2)), Size::new(0, 3));
        assert!(Size::new(3, 0).reaches(Size::new(3, 100)));
        assert!(Size::new(0, 100).reaches(Size::new(3, 100)));
        assert!(!Size::new(2, 99).reaches(Size::new(3, 100)));
        assert!(Size::new(3, 100).fits(Size::new(3, 100)));
        assert!(!Size::new(4, 100).fits(Size::new(3, 100)));
        assert!(!Size::ZERO.reaches(Size::MAX));
    }

    #[test]
    fn an_unlimited_budget_admits_any_batch_and_a_limited_one_only_what_fits() {
        let mut batch = WriteBatch::new();
        for i in 0..10u8 {
            batch.put(vec![i], vec![0; 10]);
        }
        assert!(!Budget::new(WriteLimits::UNLIMITED).is_limited());
        assert!(Budget::new(WriteLimits::UNLIMITED).admits(&batch));
        let limited = Budget::new(WriteLimits { max_ops: 9, max_bytes: 1000 });
        assert!(limited.is_limited());
        assert!(!limited.admits(&batch));
        assert!(Budget::new(WriteLimits { max_ops: 10, max_bytes: 110 }).admits(&batch));
        assert_eq!(limited.whole(2), Size::new(3, 1000 - 384));
    }
}
