//! `Command`: every request the broker sends a partition actor, with the channel its answer
//! comes back on. The actor takes up to `MAX_BATCH` of them into one cycle (`partition.rs`).

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::oneshot;

use super::{
    Lane, LaneConfig, PartitionCounts, SendOutcome, SessionGrant, SessionId, TransferId, Work,
};
use crate::description::QueueDescription;
use crate::error::{BrokerError, Result, SessionError};
use crate::message::{Disposition, Message, ReceivedMessage};
use crate::receiver::ReceiverShared;
use crate::types::{LockToken, ReceiveMode, SequenceNumber, SubQueue, Timestamp};

/// The answer to a session command.
pub(crate) type SessionReply<T> = oneshot::Sender<Result<T, SessionError>>;

/// A request to a partition actor.
pub(crate) enum Command {
    Send {
        messages: Vec<Arc<Message>>,
        reply: oneshot::Sender<Result<Vec<SendOutcome>>>,
    },
    /// Auto-forwarded messages, each with its transfer id: one outcome per message. A
    /// transfer this partition stored already is answered as a duplicate (see `transfer.rs`).
    Transfer {
        transfers: Vec<(TransferId, Arc<Message>)>,
        reply: oneshot::Sender<Result<Vec<Result<SendOutcome>>>>,
    },
    /// The sources of these transfers completed them: they can never come again.
    ForgetTransfers(Vec<TransferId>),
    /// A transaction's work in its via partition: all of it in this cycle's write, or none.
    Commit {
        work: Vec<Work>,
        reply: oneshot::Sender<Result<()>>,
    },
    /// Reserves sequence numbers for a transaction's scheduled messages.
    Reserve {
        count: usize,
        reply: oneshot::Sender<Result<Vec<SequenceNumber>>>,
    },
    /// Gives up numbers reserved by a transaction that rolled back.
    Unreserve(Vec<SequenceNumber>),
    Cancel {
        sequence_numbers: Vec<SequenceNumber>,
        reply: oneshot::Sender<Result<()>>,
    },
    /// Settles each locked message in turn; one outcome per item, in order.
    Settle {
        queue: SubQueue,
        items: Vec<(LockToken, Disposition)>,
        reply: oneshot::Sender<Result<Vec<Result<()>>>>,
    },
    RenewLock {
        queue: SubQueue,
        token: LockToken,
        reply: oneshot::Sender<Result<Timestamp>>,
    },
    ReceiveDeferred {
        queue: SubQueue,
        sequence_numbers: Vec<SequenceNumber>,
        mode: ReceiveMode,
        reply: oneshot::Sender<Result<Vec<ReceivedMessage>>>,
    },
    Peek {
        queue: SubQueue,
        from: SequenceNumber,
        max: usize,
        reply: oneshot::Sender<Result<Vec<ReceivedMessage>>>,
    },
    Counts {
        reply: oneshot::Sender<Result<PartitionCounts>>,
    },
    /// Batch delete: up to `max` unlocked messages of `queue` enqueued before `before` (of one
    /// session, if given), oldest sequence number first; answers how many were deleted
    /// (`state/purge.rs`).
    DeleteMessages {
        queue: SubQueue,
        max: usize,
        before: Timestamp,
        session: Option<SessionId>,
        reply: oneshot::Sender<Result<u64>>,
    },
    Update(Arc<QueueDescription>),
    Attach(Arc<ReceiverShared>),
    Detach(u64),
    /// Try to deliver (credit arrived).
    Deliver,
    /// Deliver what is possible, then acknowledge.
    Drain(oneshot::Sender<()>),
    /// Stop: the entity is deleted. Receivers are closed.
    Close,
    /// Stop after this cycle, leaving the partition's records and its receivers open: the
    /// partition moves to another owner (`broker/cluster.rs`). Acknowledged once stopped.
    Stop(oneshot::Sender<()>),
    /// A topic partition: start a subscription's lane (a new subscription: it has no records).
    AddLane(Box<Lane>),
    /// A topic partition: a subscription's settings or rules changed.
    Configure(Arc<LaneConfig>),
    /// A topic partition: the subscription is deleted; its records go with this cycle's write.
    RemoveLane(oneshot::Sender<Result<()>>),
    /// A topic partition: whether a message no subscription takes is refused.
    Filtering(bool),
    /// Locks a session for a receiver (`None`: the oldest unlocked one with an available
    /// message; `Ok(None)` if there is none) and delivers its messages to it from then on.
    AcceptSession {
        session: Option<SessionId>,
        receiver: Arc<ReceiverShared>,
        reply: SessionReply<Option<SessionGrant>>,
    },
    /// Extends the lock the receiver `holder` holds on its session.
    RenewSession {
        holder: u64,
        reply: SessionReply<Timestamp>,
    },
    /// Reads (`set` None) or sets a session's state; with a `holder`, only if it holds the
    /// session.
    SessionState {
        session: SessionId,
        holder: Option<u64>,
        set: Option<Option<Bytes>>,
        reply: SessionReply<Option<Bytes>>,
    },
    /// Up to `max` session ids after `after`, in id order (see `SessionIndex::list`).
    ListSessions {
        updated_after: Option<Timestamp>,
        after: Option<String>,
        max: usize,
        reply: oneshot::Sender<Result<Vec<String>>>,
    },
    /// Peeks the messages of one session.
    PeekSession {
        session: SessionId,
        from: SequenceNumber,
        max: usize,
        reply: oneshot::Sender<Result<Vec<ReceivedMessage>>>,
    },
    /// Receives deferred messages of the session `holder` holds.
    ReceiveDeferredSession {
        holder: u64,
        sequence_numbers: Vec<SequenceNumber>,
        mode: ReceiveMode,
        reply: oneshot::Sender<Result<Vec<ReceivedMessage>>>,
    },
}

impl Command {
    /// Answers the command with `error` where it asks for an answer (a drain is acknowledged,
    /// having nothing to deliver); drops the rest.
    pub(crate) fn refuse(self, error: &BrokerError) {
        fn fail<T>(reply: oneshot::Sender<Result<T>>, error: &BrokerError) {
            let _ = reply.send(Err(error.clone()));
        }
        fn fail_session<T>(reply: SessionReply<T>, error: &BrokerError) {
            let _ = reply.send(Err(error.clone().into()));
        }
        match self {
            Command::Send { reply, .. } => fail(reply, error),
            Command::Transfer { reply, .. } => fail(reply, error),
            Command::Commit { reply, .. } => fail(reply, error),
            Command::Reserve { reply, .. } => fail(reply, error),
            Command::Cancel { reply, .. } => fail(reply, error),
            Command::Settle { reply, .. } => fail(reply, error),
            Command::RenewLock { reply, .. } => fail(reply, error),
            Command::ReceiveDeferred { reply, .. } => fail(reply, error),
            Command::Peek { reply, .. } => fail(reply, error),
            Command::Counts { reply } => fail(reply, error),
            Command::DeleteMessages { reply, .. } => fail(reply, error),
            Command::RemoveLane(reply) => fail(reply, error),
            Command::ListSessions { reply, .. } => fail(reply, error),
            Command::PeekSession { reply, .. } => fail(reply, error),
            Command::ReceiveDeferredSession { reply, .. } => fail(reply, error),
            Command::AcceptSession { reply, .. } => fail_session(reply, error),
            Command::RenewSession { reply, .. } => fail_session(reply, error),
            Command::SessionState { reply, .. } => fail_session(reply, error),
            Command::Drain(ack) | Command::Stop(ack) => drop(ack.send(())),
            // The records stay until a later transfer's forget reaches them (or for ever: a
            // few small records per outage); a rebuild forgets reservations anyway.
            Command::ForgetTransfers(_)
            | Command::Unreserve(_)
            | Command::Update(_)
            | Command::Attach(_)
            | Command::Detach(_)
            | Command::Deliver
            | Command::Close
            | Command::AddLane(_)
            | Command::Configure(_)
            | Command::Filtering(_) => {}
        }
    }
}
