//! [`Effects`]: what a cycle of [`PartitionState`](super::state::PartitionState) decided and
//! the actor carries out once the cycle's write is done — the records to write (the
//! [`Journal`]), deliveries, answers and replies. The buffers are kept from cycle to cycle.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::bodies::Outgoing;
use super::budget::Size;
use super::journal::Journal;
use super::tally::Tally;
use crate::error::{BrokerError, Result};
use crate::message::ReceivedMessage;
use crate::receiver::ReceiverShared;
use crate::types::{SequenceNumber, SubQueue};

/// What deleting a released body may take: its key, with room to spare.
const RELEASED_BODY_BYTES: usize = 32;

/// A reply waiting for the cycle's write: it answers with the write's error if that failed.
pub(crate) type Reply = Box<dyn FnOnce(&Result<(), BrokerError>) + Send + Sync>;
/// Where a peek or a deferred receive is answered.
pub(crate) type ListReply = oneshot::Sender<Result<Vec<ReceivedMessage>>>;

pub(crate) struct Effects {
    /// The records this cycle changed, written as one batch.
    pub(crate) journal: Journal,
    /// Messages handed to receivers (their credit reserved), sent once written.
    pub(crate) deliveries: Vec<(Arc<ReceiverShared>, Outgoing)>,
    /// Peeks and deferred receives, answered after their bodies are loaded.
    pub(crate) lists: Vec<(ListReply, Result<Vec<Outgoing>>)>,
    pub(crate) replies: Vec<Reply>,
    pub(crate) drains: Vec<oneshot::Sender<()>>,
    /// Messages stored this cycle whose bodies did not fit the cache: dropped after the write.
    pub(crate) transient: Vec<(SubQueue, SequenceNumber)>,
    /// Whether the cycle must read from the store even if it writes nothing (counts are asked
    /// for: they must fail while the store does).
    pub(crate) probe: bool,
    /// Messages in, out and settled this cycle.
    pub(crate) tally: Tally,
    /// Bodies this cycle's removals let go of, when bodies are shared between lanes (a topic's
    /// partition): the actor counts them down and deletes a body no copy uses.
    pub(crate) released: Vec<SequenceNumber>,
    /// The journal size at which open-ended work (what time makes due, forwarding
    /// reconciliation, deliveries) stops for this cycle: [`Size::MAX`] unless the store has
    /// write limits (see `budget.rs`).
    pub(crate) stop_at: Size,
    /// Whether open-ended work stopped at `stop_at` with work left that no deadline brings
    /// back: the next cycle runs at once.
    pub(crate) more: bool,
}

impl Effects {
    pub(crate) fn new(journal: Journal) -> Self {
        Effects {
            journal,
            deliveries: Vec::new(),
            lists: Vec::new(),
            replies: Vec::new(),
            drains: Vec::new(),
            transient: Vec::new(),
            probe: false,
            tally: Tally::default(),
            released: Vec::new(),
            stop_at: Size::MAX,
            more: false,
        }
    }

    /// What this cycle writes so far, counting each released body as a delete it may become.
    pub(crate) fn size(&self) -> Size {
        let released = self.released.len();
        self.journal.size().plus(Size::new(released, released * RELEASED_BODY_BYTES))
    }

    /// Whether open-ended work must stop for this cycle (see `stop_at`).
    pub(crate) fn full(&self) -> bool {
        self.size().reaches(self.stop_at)
    }

    /// Queues a reply to be sent after the cycle's write: `answer` if the write succeeded,
    /// the write's error otherwise.
    pub(crate) fn reply<T, E>(&mut self, tx: oneshot::Sender<Result<T, E>>, answer: Result<T, E>)
    where
        T: Send + Sync + 'static,
        E: From<BrokerError> + Send + Sync + 'static,
    {
        self.replies.push(Box::new(move |written: &Result<(), BrokerError>| {
            let _ = tx.send(match written {
                Ok(()) => answer,
                Err(e) => Err(e.clone().into()),
            });
        }));
    }

    /// Hands over the deliveries and sends the answers and replies of the cycle, whose write
    /// came to `result` (bodies are loaded if it is `Ok`). Deliveries of a failed cycle give
    /// their credit back. Drains are acknowledged unless the cycle left work over (`more`).
    pub(crate) fn complete(&mut self, result: &Result<(), BrokerError>) {
        for (receiver, outgoing) in self.deliveries.drain(..) {
            if result.is_ok() {
                receiver.deliver(outgoing.finish());
            } else {
                receiver.cancel_reservation();
            }
        }
        for (reply, answer) in self.lists.drain(..) {
            let answer = match result {
                Ok(()) => answer.map(|list| list.into_iter().map(Outgoing::finish).collect()),
                Err(e) => Err(e.clone()),
            };
            let _ = reply.send(answer);
        }
        for reply in self.replies.drain(..) {
            reply(result);
        }
        // A drain waits while work is left over for the next cycle (a store's write limits
        // cut the deliveries short): it answers once everything possible was delivered.
        if !(self.more && result.is_ok()) {
            for drain in self.drains.drain(..) {
                let _ = drain.send(());
            }
        }
    }
}

impl std::fmt::Debug for Effects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Effects")
            .field("journal", &self.journal)
            .field("deliveries", &self.deliveries.len())
            .field("lists", &self.lists.len())
            .field("replies", &self.replies.len())
            .finish_non_exhaustive()
    }
}
