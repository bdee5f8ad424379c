//! The cluster link's encoding: a request one node sends the owner of a partition, and the
//! owner's reply (`remote.rs` sends and serves them). Versioned like the records: a call starts
//! with its version byte; a node refuses a version it does not know rather than guess.
//!
//! A call names its partition (entity store id and partition), the lane (a subscription's
//! entity id in a topic partition, else the entity's), and one request. Messages travel as
//! their body records (`message.rs`), so a link carries exactly what a store would.
//!
//! **Architecture Invariant:** the decoders read untrusted bytes (any peer that passed the
//! link's admission): every count is bounded by the bytes that remain before anything is
//! reserved, and malformed input is an error, never a panic.

use std::sync::Arc;

use bytes::Bytes;
use uuid::Uuid;

use self::error::{decode_error, decode_session_error, encode_error, encode_session_error};
use self::work::{decode_disposition, decode_work, encode_disposition, encode_work};
use super::message::{decode_body, encode_body};
use super::primitives::{DecodeResult, Reader, Writer};
use crate::broker::PartitionRef;
use crate::error::{BrokerError, SessionError};
use crate::message::{
    BrokerProperties, Disposition, Message, MessageLock, MessageState, ReceivedMessage,
};
use crate::partition::{LaneStats, PartitionCounts, SendOutcome, SessionId, TransferId, Work};
use crate::types::{LockToken, PartitionId, ReceiveMode, SequenceNumber, SubQueue, Timestamp};

mod error;
mod work;

const LINK_V1: u8 = 1;

/// What a node asks a partition's owner (one [`Command`](crate::partition::Command) each,
/// but for `Pull`, a receiver's borrowed credit).
#[derive(Debug)]
pub(crate) enum LinkRequest {
    Send(Vec<Arc<Message>>),
    Transfer(Vec<(TransferId, Arc<Message>)>),
    ForgetTransfers(Vec<TransferId>),
    Cancel(Vec<SequenceNumber>),
    Settle {
        queue: SubQueue,
        items: Vec<(LockToken, Disposition)>,
    },
    RenewLock {
        queue: SubQueue,
        token: LockToken,
    },
    ReceiveDeferred {
        queue: SubQueue,
        sequence_numbers: Vec<SequenceNumber>,
        mode: ReceiveMode,
    },
    Peek {
        queue: SubQueue,
        from: SequenceNumber,
        max: u32,
    },
    Counts,
    /// A batch delete in one partition (`Command::DeleteMessages`).
    DeleteMessages {
        queue: SubQueue,
        max: u32,
        before: Timestamp,
        session: Option<SessionId>,
    },
    /// A transaction's work, committed in one write of the via partition.
    Commit(Vec<Work>),
    /// Sequence numbers for a transaction's scheduled messages.
    Reserve(u32),
    Unreserve(Vec<SequenceNumber>),
    /// The shared view of every partition lane the node runs (the call's partition and lane
    /// are not used).
    Stats,
    /// Up to `max` messages for a receiver on another node, delivered in one cycle: the
    /// receiver's node lends that much of its credit.
    Pull {
        queue: SubQueue,
        mode: ReceiveMode,
        max: u32,
    },
    /// Locks a session (`None`: the next ready one) for a receiver on the caller's node: a
    /// stand-in receiver on the owner holds it (`remote/sessions.rs`).
    AcceptSession {
        session: Option<SessionId>,
        mode: ReceiveMode,
    },
    /// Up to `max` messages of the session the stand-in `holder` holds, delivered in one
    /// cycle against that much lent credit (0: only whether it still holds the session).
    SessionPull {
        holder: u64,
        max: u32,
    },
    /// The receiver on the caller's node closed: the stand-in releases its session.
    DetachSession {
        holder: u64,
    },
    RenewSession {
        holder: u64,
    },
    SessionState {
        session: SessionId,
        holder: Option<u64>,
        set: Option<Option<Bytes>>,
    },
    ListSessions {
        updated_after: Option<Timestamp>,
        after: Option<String>,
        max: u32,
    },
    PeekSession {
        session: SessionId,
        from: SequenceNumber,
        max: u32,
    },
    ReceiveDeferredSession {
        holder: u64,
        sequence_numbers: Vec<SequenceNumber>,
        mode: ReceiveMode,
    },
}

/// A session lock the owner granted to its stand-in `holder`, for a receiver on the caller's
/// node.
#[derive(Debug, Clone)]
pub(crate) struct RemoteGrant {
    pub(crate) session: SessionId,
    pub(crate) locked_until: Timestamp,
    pub(crate) holder: u64,
}

/// The owner's answer to a [`LinkRequest`], or its error.
#[derive(Debug)]
pub(crate) enum LinkReply {
    Sent(Vec<SendOutcome>),
    Transferred(Vec<Result<SendOutcome, BrokerError>>),
    Done,
    Settled(Vec<Result<(), BrokerError>>),
    Renewed(Timestamp),
    Messages(Vec<ReceivedMessage>),
    Counts(PartitionCounts),
    Reserved(Vec<SequenceNumber>),
    /// How many messages a batch delete deleted.
    Deleted(u64),
    /// Per lane (its entity id) and partition: its shared view.
    Stats(Vec<(u64, u16, LaneStats)>),
    Failed(BrokerError),
    /// An accept's answer: `None` when accept-next found no ready session.
    SessionAccepted(Option<RemoteGrant>),
    /// A session pull's messages, and whether the stand-in lost its session (it expired, or
    /// the holder is unknown): the caller's receiver loses it too.
    SessionMessages {
        messages: Vec<ReceivedMessage>,
        lost: bool,
    },
    SessionState(Option<Bytes>),
    Sessions(Vec<String>),
    SessionFailed(SessionError),
}

pub(crate) fn encode_request(at: PartitionRef, lane: u64, request: &LinkRequest) -> Bytes {
    let mut w = Writer::versioned(LINK_V1, 64);
    w.u64(at.entity);
    w.u16(at.partition);
    w.u64(lane);
    match request {
        LinkRequest::Send(messages) => {
            w.u8(1);
            w.u32(messages.len() as u32);
            for m in messages {
                w.bytes(&encode_body(m));
            }
        }
        LinkRequest::Transfer(transfers) => {
            w.u8(2);
            w.u32(transfers.len() as u32);
            for (id, m) in transfers {
                transfer_id(&mut w, id);
                w.bytes(&encode_body(m));
            }
        }
        LinkRequest::ForgetTransfers(ids) => {
            w.u8(3);
            w.u32(ids.len() as u32);
            ids.iter().for_each(|id| transfer_id(&mut w, id));
        }
        LinkRequest::Cancel(numbers) => {
            w.u8(4);
            sequence_numbers(&mut w, numbers);
        }
        LinkRequest::Settle { queue, items } => {
            w.u8(5);
            w.u8(sub_queue(*queue));
            w.u32(items.len() as u32);
            for (token, disposition) in items {
                w.array(token.0.as_bytes());
                encode_disposition(&mut w, disposition);
            }
        }
        LinkRequest::RenewLock { queue, token } => {
            w.u8(6);
            w.u8(sub_queue(*queue));
            w.array(token.0.as_bytes());
        }
        LinkRequest::ReceiveDeferred { queue, sequence_numbers: numbers, mode } => {
            w.u8(7);
            w.u8(sub_queue(*queue));
            w.u8(receive_mode(*mode));
            sequence_numbers(&mut w, numbers);
        }
        LinkRequest::Peek { queue, from, max } => {
            w.u8(8);
            w.u8(sub_queue(*queue));
            w.i64(from.0);
            w.u32(*max);
        }
        LinkRequest::Counts => w.u8(9),
        LinkRequest::DeleteMessages { queue, max, before, session } => {
            w.u8(23);
            w.u8(sub_queue(*queue));
            w.u32(*max);
            w.i64(before.as_millis());
            opt_session(&mut w, session.as_ref());
        }
        LinkRequest::Commit(work) => {
            w.u8(11);
            w.u32(work.len() as u32);
            work.iter().for_each(|item| encode_work(&mut w, item));
        }
        LinkRequest::Reserve(count) => {
            w.u8(12);
            w.u32(*count);
        }
        LinkRequest::Unreserve(numbers) => {
            w.u8(13);
            sequence_numbers(&mut w, numbers);
        }
        LinkRequest::Stats => w.u8(14),
        LinkRequest::Pull { queue, mode, max } => {
            w.u8(10);
            w.u8(sub_queue(*queue));
            w.u8(receive_mode(*mode));
            w.u32(*max);
        }
        LinkRequest::AcceptSession { session, mode } => {
            w.u8(15);
            opt_session(&mut w, session.as_ref());
            w.u8(receive_mode(*mode));
        }
        LinkRequest::SessionPull { holder, max } => {
            w.u8(16);
            w.u64(*holder);
            w.u32(*max);
        }
        LinkRequest::DetachSession { holder } => {
            w.u8(17);
            w.u64(*holder);
        }
        LinkRequest::RenewSession { holder } => {
            w.u8(18);
            w.u64(*holder);
        }
        LinkRequest::SessionState { session, holder, set } => {
            w.u8(19);
            w.str(session);
            match holder {
                Some(h) => {
                    w.u8(1);
                    w.u64(*h);
                }
                None => w.u8(0),
            }
            match set {
                Some(state) => {
                    w.u8(1);
                    w.opt_bytes(state);
                }
                None => w.u8(0),
            }
        }
        LinkRequest::ListSessions { updated_after, after, max } => {
            w.u8(20);
            w.opt_i64(updated_after.map(Timestamp::as_millis));
            w.opt_str(after);
            w.u32(*max);
        }
        LinkRequest::PeekSession { session, from, max } => {
            w.u8(21);
            w.str(session);
            w.i64(from.0);
            w.u32(*max);
        }
        LinkRequest::ReceiveDeferredSession { holder, sequence_numbers: numbers, mode } => {
            w.u8(22);
            w.u64(*holder);
            w.u8(receive_mode(*mode));
            sequence_numbers(&mut w, numbers);
        }
    }
    w.finish()
}

pub(crate) fn decode_request(bytes: &[u8]) -> DecodeResult<(PartitionRef, u64, LinkRequest)> {
    let (mut r, version) = Reader::versioned(bytes, "link request")?;
    if version != LINK_V1 {
        return Err(r.unknown_version(version));
    }
    let at = PartitionRef { entity: r.u64()?, partition: r.u16()? };
    let lane = r.u64()?;
    let request = match r.u8()? {
        1 => LinkRequest::Send(list(&mut r, 4, |r| Ok(Arc::new(decode_body(&r.bytes()?)?)))?),
        2 => LinkRequest::Transfer(list(&mut r, 20, |r| {
            Ok((read_transfer_id(r)?, Arc::new(decode_body(&r.bytes()?)?)))
        })?),
        3 => LinkRequest::ForgetTransfers(list(&mut r, 16, read_transfer_id)?),
        4 => LinkRequest::Cancel(read_sequence_numbers(&mut r)?),
        5 => {
            let queue = read_sub_queue(&mut r)?;
            let items = list(&mut r, 17, |r| Ok((lock_token(r)?, decode_disposition(r)?)))?;
            LinkRequest::Settle { queue, items }
        }
        6 => LinkRequest::RenewLock { queue: read_sub_queue(&mut r)?, token: lock_token(&mut r)? },
        7 => LinkRequest::ReceiveDeferred {
            queue: read_sub_queue(&mut r)?,
            mode: read_receive_mode(&mut r)?,
            sequence_numbers: read_sequence_numbers(&mut r)?,
        },
        8 => LinkRequest::Peek {
            queue: read_sub_queue(&mut r)?,
            from: SequenceNumber(r.i64()?),
            max: r.u32()?,
        },
        9 => LinkRequest::Counts,
        11 => LinkRequest::Commit(list(&mut r, 1, decode_work)?),
        12 => LinkRequest::Reserve(r.u32()?),
        13 => LinkRequest::Unreserve(read_sequence_numbers(&mut r)?),
        14 => LinkRequest::Stats,
        10 => LinkRequest::Pull {
            queue: read_sub_queue(&mut r)?,
            mode: read_receive_mode(&mut r)?,
            max: r.u32()?,
        },
        15 => LinkRequest::AcceptSession {
            session: r.opt(|r| Ok(SessionId::from(r.str()?)))?,
            mode: read_receive_mode(&mut r)?,
        },
        16 => LinkRequest::SessionPull { holder: r.u64()?, max: r.u32()? },
        17 => LinkRequest::DetachSession { holder: r.u64()? },
        18 => LinkRequest::RenewSession { holder: r.u64()? },
        19 => LinkRequest::SessionState {
            session: SessionId::from(r.str()?),
            holder: r.opt(Reader::u64)?,
            set: r.opt(|r| r.opt(Reader::bytes))?,
        },
        20 => LinkRequest::ListSessions {
            updated_after: r.opt(|r| Ok(Timestamp::from_millis(r.i64()?)))?,
            after: r.opt(Reader::str)?,
            max: r.u32()?,
        },
        21 => LinkRequest::PeekSession {
            session: SessionId::from(r.str()?),
            from: SequenceNumber(r.i64()?),
            max: r.u32()?,
        },
        22 => LinkRequest::ReceiveDeferredSession {
            holder: r.u64()?,
            mode: read_receive_mode(&mut r)?,
            sequence_numbers: read_sequence_numbers(&mut r)?,
        },
        23 => LinkRequest::DeleteMessages {
            queue: read_sub_queue(&mut r)?,
            max: r.u32()?,
            before: Timestamp::from_millis(r.i64()?),
            session: r.opt(|r| Ok(SessionId::from(r.str()?)))?,
        },
        other => return Err(r.corrupted(&format!("link request kind {other}"))),
    };
    Ok((at, lane, request))
}

pub(crate) fn encode_reply(reply: &LinkReply) -> Bytes {
    let mut w = Writer::versioned(LINK_V1, 64);
    match reply {
        LinkReply::Sent(outcomes) => {
            w.u8(1);
            w.u32(outcomes.len() as u32);
            outcomes.iter().for_each(|o| send_outcome(&mut w, o));
        }
        LinkReply::Transferred(outcomes) => {
            w.u8(2);
            w.u32(outcomes.len() as u32);
            for outcome in outcomes {
                match outcome {
                    Ok(o) => {
                        w.u8(0);
                        send_outcome(&mut w, o);
                    }
                    Err(e) => {
                        w.u8(1);
                        encode_error(&mut w, e);
                    }
                }
            }
        }
        LinkReply::Done => w.u8(3),
        LinkReply::Settled(outcomes) => {
            w.u8(4);
            w.u32(outcomes.len() as u32);
            for outcome in outcomes {
                match outcome {
                    Ok(()) => w.u8(0),
                    Err(e) => {
                        w.u8(1);
                        encode_error(&mut w, e);
                    }
                }
            }
        }
        LinkReply::Renewed(until) => {
            w.u8(5);
            w.i64(until.as_millis());
        }
        LinkReply::Messages(messages) => {
            w.u8(6);
            w.u32(messages.len() as u32);
            messages.iter().for_each(|m| encode_received(&mut w, m));
        }
        LinkReply::Counts(c) => {
            w.u8(7);
            for n in [
                c.active,
                c.deferred,
                c.scheduled,
                c.dead_lettered,
                c.transfer,
                c.transfer_dead_lettered,
                c.send_via,
                c.size_bytes,
                c.incoming_total,
                c.outgoing_total,
            ] {
                w.u64(n);
            }
        }
        LinkReply::Failed(e) => {
            w.u8(8);
            encode_error(&mut w, e);
        }
        LinkReply::Reserved(numbers) => {
            w.u8(9);
            sequence_numbers(&mut w, numbers);
        }
        LinkReply::Stats(lanes) => {
            w.u8(10);
            w.u32(lanes.len() as u32);
            for (lane, partition, stats) in lanes {
                w.u64(*lane);
                w.u16(*partition);
                w.bool(stats.available);
                stats.deliverable.iter().for_each(|n| w.u64(*n));
                w.u64(stats.size_bytes);
                w.u64(stats.ready_sessions);
            }
        }
        LinkReply::SessionAccepted(grant) => {
            w.u8(11);
            match grant {
                Some(g) => {
                    w.u8(1);
                    w.str(&g.session);
                    w.i64(g.locked_until.as_millis());
                    w.u64(g.holder);
                }
                None => w.u8(0),
            }
        }
        LinkReply::SessionMessages { messages, lost } => {
            w.u8(12);
            w.bool(*lost);
            w.u32(messages.len() as u32);
            messages.iter().for_each(|m| encode_received(&mut w, m));
        }
        LinkReply::SessionState(state) => {
            w.u8(13);
            w.opt_bytes(state);
        }
        LinkReply::Sessions(ids) => {
            w.u8(14);
            w.u32(ids.len() as u32);
            ids.iter().for_each(|id| w.str(id));
        }
        LinkReply::SessionFailed(e) => {
            w.u8(15);
            encode_session_error(&mut w, e);
        }
        LinkReply::Deleted(count) => {
            w.u8(16);
            w.u64(*count);
        }
    }
    w.finish()
}

pub(crate) fn decode_reply(bytes: &[u8]) -> DecodeResult<LinkReply> {
    let (mut r, version) = Reader::versioned(bytes, "link reply")?;
    if version != LINK_V1 {
        return Err(r.unknown_version(version));
    }
    Ok(match r.u8()? {
        1 => LinkReply::Sent(list(&mut r, 1, read_send_outcome)?),
        2 => LinkReply::Transferred(list(&mut r, 1, |r| match r.u8()? {
            0 => Ok(Ok(read_send_outcome(r)?)),
            _ => Ok(Err(decode_error(r)?)),
        })?),
        3 => LinkReply::Done,
        4 => LinkReply::Settled(list(&mut r, 1, |r| match r.u8()? {
            0 => Ok(Ok(())),
            _ => Ok(Err(decode_error(r)?)),
        })?),
        5 => LinkReply::Renewed(Timestamp::from_millis(r.i64()?)),
        6 => LinkReply::Messages(list(&mut r, 40, decode_received)?),
        7 => LinkReply::Counts(PartitionCounts {
            active: r.u64()?,
            deferred: r.u64()?,
            scheduled: r.u64()?,
            dead_lettered: r.u64()?,
            transfer: r.u64()?,
            transfer_dead_lettered: r.u64()?,
            send_via: r.u64()?,
            size_bytes: r.u64()?,
            incoming_total: r.u64()?,
            outgoing_total: r.u64()?,
        }),
        8 => LinkReply::Failed(decode_error(&mut r)?),
        9 => LinkReply::Reserved(read_sequence_numbers(&mut r)?),
        10 => LinkReply::Stats(list(&mut r, 67, |r| {
            let (lane, partition, available) = (r.u64()?, r.u16()?, r.bool()?);
            let mut deliverable = [0; 5];
            for n in &mut deliverable {
                *n = r.u64()?;
            }
            let stats = LaneStats {
                available,
                deliverable,
                size_bytes: r.u64()?,
                ready_sessions: r.u64()?,
            };
            Ok((lane, partition, stats))
        })?),
        11 => LinkReply::SessionAccepted(r.opt(|r| {
            Ok(RemoteGrant {
                session: SessionId::from(r.str()?),
                locked_until: Timestamp::from_millis(r.i64()?),
                holder: r.u64()?,
            })
        })?),
        12 => {
            let lost = r.bool()?;
            LinkReply::SessionMessages { lost, messages: list(&mut r, 40, decode_received)? }
        }
        13 => LinkReply::SessionState(r.opt(Reader::bytes)?),
        14 => LinkReply::Sessions(list(&mut r, 4, |r| r.str())?),
        15 => LinkReply::SessionFailed(decode_session_error(&mut r)?),
        16 => LinkReply::Deleted(r.u64()?),
        other => return Err(r.corrupted(&format!("link reply kind {other}"))),
    })
}

/// A count, then that many items of at least `min_bytes` each (checked against what remains
/// before anything is reserved).
fn list<T>(
    r: &mut Reader<'_>,
    min_bytes: usize,
    mut item: impl FnMut(&mut Reader<'_>) -> DecodeResult<T>,
) -> DecodeResult<Vec<T>> {
    let count = r.u32()? as usize;
    if count.saturating_mul(min_bytes.max(1)) > r.remaining() {
        return Err(r.corrupted("a count larger than the call"));
    }
    (0..count).map(|_| item(r)).collect()
}

fn transfer_id(w: &mut Writer, id: &TransferId) {
    w.u64(id.source);
    w.i64(id.sequence_number.0);
}

fn read_transfer_id(r: &mut Reader<'_>) -> DecodeResult<TransferId> {
    Ok(TransferId { source: r.u64()?, sequence_number: SequenceNumber(r.i64()?) })
}

fn sequence_numbers(w: &mut Writer, numbers: &[SequenceNumber]) {
    w.u32(numbers.len() as u32);
    numbers.iter().for_each(|n| w.i64(n.0));
}

fn read_sequence_numbers(r: &mut Reader<'_>) -> DecodeResult<Vec<SequenceNumber>> {
    list(r, 8, |r| Ok(SequenceNumber(r.i64()?)))
}

fn opt_session(w: &mut Writer, session: Option<&SessionId>) {
    match session {
        Some(id) => {
            w.u8(1);
            w.str(id);
        }
        None => w.u8(0),
    }
}

fn lock_token(r: &mut Reader<'_>) -> DecodeResult<LockToken> {
    Ok(LockToken(Uuid::from_bytes(r.array()?)))
}

const SUB_QUEUES: [SubQueue; 5] = SubQueue::ALL;

fn sub_queue(queue: SubQueue) -> u8 {
    queue.index() as u8
}

fn read_sub_queue(r: &mut Reader<'_>) -> DecodeResult<SubQueue> {
    let i = r.u8()?;
    SUB_QUEUES.get(usize::from(i)).copied().ok_or_else(|| r.corrupted("sub-queue"))
}

fn receive_mode(mode: ReceiveMode) -> u8 {
    match mode {
        ReceiveMode::PeekLock => 0,
        ReceiveMode::ReceiveAndDelete => 1,
    }
}

fn read_receive_mode(r: &mut Reader<'_>) -> DecodeResult<ReceiveMode> {
    match r.u8()? {
        0 => Ok(ReceiveMode::PeekLock),
        1 => Ok(ReceiveMode::ReceiveAndDelete),
        _ => Err(r.corrupted("receive mode")),
    }
}

fn send_outcome(w: &mut Writer, outcome: &SendOutcome) {
    match outcome {
        SendOutcome::Enqueued(n) => {
            w.u8(0);
            w.i64(n.0);
        }
        SendOutcome::Duplicate => w.u8(1),
    }
}

fn read_send_outcome(r: &mut Reader<'_>) -> DecodeResult<SendOutcome> {
    match r.u8()? {
        0 => Ok(SendOutcome::Enqueued(SequenceNumber(r.i64()?))),
        1 => Ok(SendOutcome::Duplicate),
        _ => Err(r.corrupted("send outcome")),
    }
}

fn message_state(state: MessageState) -> u8 {
    match state {
        MessageState::Active => 0,
        MessageState::Deferred => 1,
        MessageState::Scheduled => 2,
    }
}

fn encode_received(w: &mut Writer, m: &ReceivedMessage) {
    w.bytes(&encode_body(&m.message));
    let b = &m.broker;
    w.i64(b.sequence_number.0);
    w.i64(b.enqueued_sequence_number.0);
    w.i64(b.enqueued_time.as_millis());
    w.u16(b.partition_id.0);
    w.u32(b.delivery_count);
    w.u8(message_state(b.state));
    w.i64(b.expires_at.as_millis());
    w.opt_str(&b.dead_letter_source);
    w.opt_str(&b.dead_letter_reason);
    w.opt_str(&b.dead_letter_error_description);
    match &m.lock {
        Some(lock) => {
            w.u8(1);
            w.array(lock.token.0.as_bytes());
            w.i64(lock.locked_until.as_millis());
        }
        None => w.u8(0),
    }
}

fn decode_received(r: &mut Reader<'_>) -> DecodeResult<ReceivedMessage> {
    let message = Arc::new(decode_body(&r.bytes()?)?);
    let broker = BrokerProperties {
        sequence_number: SequenceNumber(r.i64()?),
        enqueued_sequence_number: SequenceNumber(r.i64()?),
        enqueued_time: Timestamp::from_millis(r.i64()?),
        partition_id: PartitionId(r.u16()?),
        delivery_count: r.u32()?,
        state: match r.u8()? {
            0 => MessageState::Active,
            1 => MessageState::Deferred,
            2 => MessageState::Scheduled,
            _ => return Err(r.corrupted("message state")),
        },
        expires_at: Timestamp::from_millis(r.i64()?),
        dead_letter_source: r.opt(Reader::str)?,
        dead_letter_reason: r.opt(Reader::str)?,
        dead_letter_error_description: r.opt(Reader::str)?,
    };
    let lock = r.opt(|r| {
        Ok(MessageLock { token: lock_token(r)?, locked_until: Timestamp::from_millis(r.i64()?) })
    })?;
    Ok(ReceivedMessage { message, broker, lock })
}

#[cfg(test)]
mod tests;
