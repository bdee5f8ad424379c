//! Sessions of a partition another node runs: the client node's half ([`SessionLinks`], part
//! of a `LinkedPartition`) and the owner's ([`RemoteHolders`] and `Broker::serve_session`).
//!
//! - Accepting a session through a node that does not run its partition offers the owner a
//!   **stand-in receiver** with the client receiver's mode. The partition grants the session
//!   to the stand-in, and its rules (one holder, the session lock and its expiry, delivery in
//!   order) act on the stand-in as on any local holder. The owner registers the stand-in by
//!   its id, the *remote holder*; the client node maps its receiver's id to that holder and
//!   translates every command that names a holder (renew, state, deferred receive, detach).
//! - Messages reach the client receiver through a **session pull loop** that borrows credit
//!   as a plain receiver's pull does: it lends up to [`MAX_PULL`] units to the stand-in, the
//!   owner delivers one cycle, takes back the rest and answers with the messages and whether
//!   the stand-in still holds its session. Without credit the loop still asks every
//!   [`SESSION_PROBE`], lending nothing, so that a lock that expires on the owner is soon
//!   lost by the client receiver too.
//!
//! **Architecture Invariant:** a stand-in holds its session only while its client receiver
//! can use it. The client's detach (its receiver dropped, or an accept given up) detaches the
//! stand-in, which releases the session as a local detach does; a session lost on the owner
//! (lock expiry, the partition stopping there) is lost by the client receiver at the next
//! pull; and a route that moves loses every session receiver it served, since the session
//! lock stayed with the old owner. A client node that vanishes without a detach holds its
//! sessions no longer than their locks (nobody renews them); the owner forgets the stand-ins
//! that lost their sessions when it registers the next one.
//!
//! **Architecture Invariant:** the owner acts on a holder id only in the partition and lane
//! its stand-in was granted in; an unknown holder is a lost session, never another
//! receiver's.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{oneshot, Notify};

use super::{ask_route, call, expect, messages, Peer, MAX_PEEK, MAX_PULL, PULL_IDLE, RETRY_AFTER};
use crate::broker::{Broker, PartitionRef};
use crate::clock::Clock;
use crate::codec::link::{LinkReply, LinkRequest, RemoteGrant};
use crate::error::{BrokerError, Result, SessionError};
use crate::partition::{Command, LaneId, Route, SessionGrant, SessionId};
use crate::receiver::ReceiverShared;
use crate::types::{PartitionId, SubQueue};

/// How often a session pull loop without credit asks whether its stand-in still holds the
/// session.
pub const SESSION_PROBE: Duration = Duration::from_secs(1);
/// The most session ids one listing over the link returns.
const MAX_LIST: usize = 1 << 16;

/// The stand-ins on this node that hold sessions for receivers on other nodes, by holder id.
#[derive(Debug, Default)]
pub(crate) struct RemoteHolders(Mutex<HashMap<u64, Held>>);

#[derive(Debug)]
struct Held {
    at: PartitionRef,
    lane: LaneId,
    stand_in: Arc<ReceiverShared>,
}

impl RemoteHolders {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Held>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a stand-in granted a session, and forgets those whose session ended without
    /// a detach (a stand-in closes when its session is lost, or its partition stops here).
    fn insert(&self, at: PartitionRef, lane: LaneId, stand_in: Arc<ReceiverShared>) {
        let mut held = self.lock();
        held.retain(|_, h| !h.stand_in.is_closed());
        held.insert(stand_in.id, Held { at, lane, stand_in });
    }

    fn get(&self, at: PartitionRef, lane: LaneId, holder: u64) -> Option<Arc<ReceiverShared>> {
        let held = self.lock();
        held.get(&holder).filter(|h| h.at == at && h.lane == lane).map(|h| h.stand_in.clone())
    }

    fn remove(&self, at: PartitionRef, lane: LaneId, holder: u64) -> Option<Arc<ReceiverShared>> {
        let mut held = self.lock();
        match held.get(&holder) {
            Some(h) if h.at == at && h.lane == lane => held.remove(&holder).map(|h| h.stand_in),
            _ => None,
        }
    }
}

/// A stand-in offered for a session: if the accept is given up before its answer (the
/// caller's link call dropped), the stand-in is closed and detached, releasing what it got.
struct Offer<'a> {
    route: &'a Route,
    lane: LaneId,
    stand_in: Arc<ReceiverShared>,
    answered: bool,
}

impl Drop for Offer<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.stand_in.close();
            self.route.send(self.lane, Command::Detach(self.stand_in.id));
        }
    }
}

/// Sends a session command through `route` and waits for its answer.
async fn ask_session<T: Send + 'static>(
    route: &Route,
    lane: LaneId,
    make: impl FnOnce(oneshot::Sender<Result<T, SessionError>>) -> Command,
) -> Result<T, SessionError> {
    let (tx, rx) = oneshot::channel();
    route.send(lane, make(tx));
    rx.await.unwrap_or(Err(SessionError::Broker(BrokerError::ShuttingDown)))
}

impl Broker {
    /// Serves a session request for partition `at` (which runs here, through `route`).
    pub(super) async fn serve_session(
        &self,
        at: PartitionRef,
        lane: LaneId,
        route: &Route,
        request: LinkRequest,
    ) -> Result<LinkReply> {
        let holders = self.remote_holders();
        let lost = || LinkReply::SessionFailed(SessionError::LockLost);
        let failed = LinkReply::SessionFailed;
        Ok(match request {
            LinkRequest::AcceptSession { session, mode } => {
                let id = self.new_receiver_id();
                let stand_in = Arc::new(ReceiverShared::new(id, mode, SubQueue::Main));
                let receiver = stand_in.clone();
                let mut offer = Offer { route, lane, stand_in, answered: false };
                let answer = ask_session(route, lane, |reply| Command::AcceptSession {
                    session,
                    receiver,
                    reply,
                })
                .await;
                offer.answered = true;
                match answer {
                    Ok(Some(SessionGrant { session, locked_until })) => {
                        holders.insert(at, lane, offer.stand_in.clone());
                        let grant = RemoteGrant { session, locked_until, holder: id };
                        LinkReply::SessionAccepted(Some(grant))
                    }
                    Ok(None) => LinkReply::SessionAccepted(None),
                    Err(e) => failed(e),
                }
            }
            LinkRequest::SessionPull { holder, max } => {
                let Some(stand_in) = holders.get(at, lane, holder) else {
                    return Ok(LinkReply::SessionMessages { messages: Vec::new(), lost: true });
                };
                let max = max.min(MAX_PULL);
                let mut messages = Vec::new();
                if max > 0 && !stand_in.is_closed() {
                    stand_in.lend(max);
                    let (drained, delivered) = oneshot::channel();
                    route.send(lane, Command::Drain(drained));
                    let _ = delivered.await;
                    messages = stand_in.reclaim().await;
                }
                // A stand-in closes when it loses its session (its lock expired).
                let lost = stand_in.is_closed();
                if lost {
                    holders.remove(at, lane, holder);
                }
                LinkReply::SessionMessages { messages, lost }
            }
            LinkRequest::DetachSession { holder } => {
                if let Some(stand_in) = holders.remove(at, lane, holder) {
                    stand_in.close();
                    route.send(lane, Command::Detach(holder));
                }
                LinkReply::Done
            }
            LinkRequest::RenewSession { holder } => {
                if holders.get(at, lane, holder).is_none() {
                    return Ok(lost());
                }
                match ask_session(route, lane, |reply| Command::RenewSession { holder, reply })
                    .await
                {
                    Ok(until) => LinkReply::Renewed(until),
                    Err(e) => failed(e),
                }
            }
            LinkRequest::SessionState { session, holder, set } => {
                if holder.is_some_and(|h| holders.get(at, lane, h).is_none()) {
                    return Ok(lost());
                }
                let make = |reply| Command::SessionState { session, holder, set, reply };
                match ask_session(route, lane, make).await {
                    Ok(state) => LinkReply::SessionState(state),
                    Err(e) => failed(e),
                }
            }
            LinkRequest::ListSessions { updated_after, after, max } => {
                let max = (max as usize).min(MAX_LIST);
                LinkReply::Sessions(
                    ask_route(route, lane, |reply| Command::ListSessions {
                        updated_after,
                        after,
                        max,
                        reply,
                    })
                    .await?,
                )
            }
            LinkRequest::PeekSession { session, from, max } => {
                let max = (max as usize).min(MAX_PEEK);
                LinkReply::Messages(
                    ask_route(route, lane, |reply| Command::PeekSession {
                        session,
                        from,
                        max,
                        reply,
                    })
                    .await?,
                )
            }
            LinkRequest::ReceiveDeferredSession { holder, sequence_numbers, mode } => {
                if holders.get(at, lane, holder).is_none() {
                    return Err(BrokerError::MessageLockLost);
                }
                LinkReply::Messages(
                    ask_route(route, lane, |reply| Command::ReceiveDeferredSession {
                        holder,
                        sequence_numbers,
                        mode,
                        reply,
                    })
                    .await?,
                )
            }
            _ => {
                return Err(BrokerError::InvalidOperation(
                    "cluster link: not a session request".into(),
                ))
            }
        })
    }
}

/// The sessions a `LinkedPartition` holds on its owner for receivers here.
pub(super) struct SessionLinks {
    peer: Arc<dyn Peer>,
    at: PartitionRef,
    entity_name: String,
    clock: Arc<dyn Clock>,
    /// The partition's nudge (the owner published deliverable messages).
    wake: Arc<Notify>,
    links: Mutex<Links>,
}

#[derive(Default)]
struct Links {
    /// The route moved: no session is held through this partition any more.
    closed: bool,
    /// By client receiver id.
    held: HashMap<u64, Link>,
}

/// A receiver here holding a session through the stand-in `holder` on the owner.
struct Link {
    holder: u64,
    lane: LaneId,
    receiver: Arc<ReceiverShared>,
    /// Stops the receiver's session pull loop.
    stop: oneshot::Sender<()>,
}

impl SessionLinks {
    pub(super) fn new(
        peer: Arc<dyn Peer>,
        at: PartitionRef,
        entity_name: &str,
        clock: Arc<dyn Clock>,
        wake: Arc<Notify>,
    ) -> Arc<Self> {
        let entity_name = entity_name.to_owned();
        let links = Mutex::new(Links::default());
        Arc::new(SessionLinks { peer, at, entity_name, clock, wake, links })
    }

    fn links(&self) -> MutexGuard<'_, Links> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn call(
        &self,
        lane: LaneId,
        request: LinkRequest,
    ) -> impl Future<Output = Result<LinkReply>> + Send + 'static {
        call(self.peer.clone(), self.at, &self.entity_name, lane, request)
    }

    /// The stand-in on the owner that holds the session of the receiver `id` here.
    fn remote_holder(&self, id: u64) -> Option<u64> {
        self.links().held.get(&id).map(|l| l.holder)
    }

    /// Carries out a session command on the owner, answering its reply channel.
    pub(super) fn submit(self: &Arc<Self>, lane: LaneId, command: Command) {
        match command {
            Command::AcceptSession { session, receiver, reply } => {
                self.accept(lane, session, receiver, reply);
            }
            Command::RenewSession { holder, reply } => {
                let Some(holder) = self.remote_holder(holder) else {
                    return drop(reply.send(Err(SessionError::LockLost)));
                };
                let call = self.call(lane, LinkRequest::RenewSession { holder });
                answer_session(call, reply, |r| match r {
                    LinkReply::Renewed(until) => Some(until),
                    _ => None,
                });
            }
            Command::SessionState { session, holder, set, reply } => {
                let holder = match holder.map(|h| self.remote_holder(h)) {
                    Some(None) => return drop(reply.send(Err(SessionError::LockLost))),
                    Some(Some(remote)) => Some(remote),
                    None => None,
                };
                let call = self.call(lane, LinkRequest::SessionState { session, holder, set });
                answer_session(call, reply, |r| match r {
                    LinkReply::SessionState(state) => Some(state),
                    _ => None,
                });
            }
            Command::ReceiveDeferredSession { holder, sequence_numbers, mode, reply } => {
                let Some(holder) = self.remote_holder(holder) else {
                    return drop(reply.send(Err(BrokerError::MessageLockLost)));
                };
                let request =
                    LinkRequest::ReceiveDeferredSession { holder, sequence_numbers, mode };
                answer(self.call(lane, request), reply, messages);
            }
            Command::ListSessions { updated_after, after, max, reply } => {
                let max = u32::try_from(max).unwrap_or(u32::MAX);
                let request = LinkRequest::ListSessions { updated_after, after, max };
                answer(self.call(lane, request), reply, |r| match r {
                    LinkReply::Sessions(ids) => Some(ids),
                    _ => None,
                });
            }
            Command::PeekSession { session, from, max, reply } => {
                let max = u32::try_from(max).unwrap_or(u32::MAX);
                let request = LinkRequest::PeekSession { session, from, max };
                answer(self.call(lane, request), reply, messages);
            }
            command => command.refuse(&BrokerError::InvalidOperation(
                "cluster link: not a session command".into(),
            )),
        }
    }

    fn accept(
        self: &Arc<Self>,
        lane: LaneId,
        session: Option<SessionId>,
        receiver: Arc<ReceiverShared>,
        reply: oneshot::Sender<Result<Option<SessionGrant>, SessionError>>,
    ) {
        let call = self.call(lane, LinkRequest::AcceptSession { session, mode: receiver.mode });
        let links = self.clone();
        tokio::spawn(async move {
            let answer = session_answer(call.await, |r| match r {
                LinkReply::SessionAccepted(grant) => Some(grant),
                _ => None,
            });
            let outcome = match answer {
                Ok(Some(RemoteGrant { session, locked_until, holder })) => links
                    .adopt(lane, holder, receiver)
                    .map(|()| Some(SessionGrant { session, locked_until })),
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            };
            let _ = reply.send(outcome);
        });
    }

    /// Serves `receiver` from the stand-in `holder` from now on — unless the accept was
    /// given up meanwhile (the receiver is closed: its detach came before the grant) or the
    /// route moved, in which case the stand-in is detached at once.
    fn adopt(
        self: &Arc<Self>,
        lane: LaneId,
        holder: u64,
        receiver: Arc<ReceiverShared>,
    ) -> Result<(), SessionError> {
        let mut links = self.links();
        if links.closed || receiver.is_closed() {
            let moved = links.closed;
            drop(links);
            self.release(lane, holder);
            if moved {
                return Err(SessionError::Broker(BrokerError::PartitionUnavailable {
                    entity: self.entity_name.clone(),
                    partition: PartitionId(self.at.partition),
                }));
            }
            return Ok(());
        }
        let (stop, stopped) = oneshot::channel();
        links.held.insert(receiver.id, Link { holder, lane, receiver: receiver.clone(), stop });
        drop(links);
        tokio::spawn(self.clone().pull(lane, holder, receiver, stopped));
        Ok(())
    }

    /// Tells the owner to detach the stand-in `holder` (a call nobody waits for).
    fn release(&self, lane: LaneId, holder: u64) {
        let call = self.call(lane, LinkRequest::DetachSession { holder });
        tokio::spawn(async move { drop(call.await) });
    }

    /// The receiver `id` here detached: its session is released on the owner.
    pub(super) fn detach(&self, id: u64) {
        let link = self.links().held.remove(&id);
        if let Some(link) = link {
            let _ = link.stop.send(());
            self.release(link.lane, link.holder);
        }
    }

    /// The route moved: every session held through it is lost (the lock stayed with the
    /// owner it was granted by).
    pub(super) fn close(&self) {
        let held: Vec<Link> = {
            let mut links = self.links();
            links.closed = true;
            links.held.drain().map(|(_, link)| link).collect()
        };
        for link in held {
            let _ = link.stop.send(());
            link.receiver.lose();
            // If the old owner still runs the partition, its stand-in lets go at once.
            self.release(link.lane, link.holder);
        }
    }

    /// The session pull loop of `receiver`, whose session the stand-in `holder` holds.
    async fn pull(
        self: Arc<Self>,
        lane: LaneId,
        holder: u64,
        receiver: Arc<ReceiverShared>,
        mut stopped: oneshot::Receiver<()>,
    ) {
        let mut pause = None;
        loop {
            if let Some(pause) = pause {
                let again = self.clock.now().saturating_add(pause);
                tokio::select! {
                    _ = &mut stopped => return,
                    () = self.clock.sleep_until(again) => {}
                    () = self.wake.notified() => {}
                }
            }
            let probe = self.clock.now().saturating_add(SESSION_PROBE);
            tokio::select! {
                _ = &mut stopped => return,
                () = receiver.credit_or_close() => {}
                () = self.clock.sleep_until(probe) => {}
            }
            if receiver.is_closed() {
                return;
            }
            let max = receiver.reserve_up_to(MAX_PULL);
            let pulled = self.call(lane, LinkRequest::SessionPull { holder, max }).await;
            let pulled = pulled.and_then(|r| {
                expect(r, |r| match r {
                    LinkReply::SessionMessages { messages, lost } => Some((messages, lost)),
                    _ => None,
                })
            });
            let (messages, lost, failed) = match pulled {
                Ok((messages, lost)) => (messages, lost, false),
                Err(e) => {
                    tracing::debug!(entity = %self.entity_name, partition = self.at.partition, error = %e, "session pull failed");
                    (Vec::new(), !e.is_retriable(), true)
                }
            };
            let delivered = messages.len().min(max as usize) as u32;
            for message in messages.into_iter().take(max as usize) {
                receiver.deliver(message);
            }
            receiver.give_back(max - delivered);
            if lost {
                self.links().held.remove(&receiver.id);
                receiver.lose();
                self.release(lane, holder);
                return;
            }
            pause = if failed {
                Some(RETRY_AFTER)
            } else if max > 0 && delivered == max {
                None
            } else {
                Some(PULL_IDLE)
            };
        }
    }
}

/// Answers `reply` with what `answer` makes of the call's reply (a plain broker request).
fn answer<T: Send + 'static>(
    call: impl Future<Output = Result<LinkReply>> + Send + 'static,
    reply: oneshot::Sender<Result<T>>,
    answer: impl FnOnce(LinkReply) -> Option<T> + Send + 'static,
) {
    tokio::spawn(async move {
        let _ = reply.send(call.await.and_then(|r| expect(r, answer)));
    });
}

/// Answers `reply` with what `answer` makes of the call's reply (a session request).
fn answer_session<T: Send + 'static>(
    call: impl Future<Output = Result<LinkReply>> + Send + 'static,
    reply: oneshot::Sender<Result<T, SessionError>>,
    answer: impl FnOnce(LinkReply) -> Option<T> + Send + 'static,
) {
    tokio::spawn(async move {
        let _ = reply.send(session_answer(call.await, answer));
    });
}

/// A reply of the kind `answer` expects, the owner's session or broker error, or a protocol
/// error.
fn session_answer<T>(
    reply: Result<LinkReply>,
    answer: impl FnOnce(LinkReply) -> Option<T>,
) -> Result<T, SessionError> {
    match reply {
        Ok(LinkReply::SessionFailed(e)) => Err(e),
        Ok(reply) => expect(reply, answer).map_err(SessionError::from),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ReceiveMode;

    fn stand_in(id: u64) -> Arc<ReceiverShared> {
        Arc::new(ReceiverShared::new(id, ReceiveMode::PeekLock, SubQueue::Main))
    }

    #[test]
    fn a_holder_is_known_only_in_its_partition_and_lane() {
        let holders = RemoteHolders::default();
        let at = PartitionRef { entity: 1, partition: 2 };
        let other = PartitionRef { entity: 1, partition: 3 };
        holders.insert(at, 7, stand_in(10));
        assert!(holders.get(other, 7, 10).is_none(), "another partition");
        assert!(holders.get(at, 8, 10).is_none(), "another lane");
        assert!(holders.remove(other, 7, 10).is_none());
        assert_eq!(holders.get(at, 7, 10).map(|s| s.id), Some(10));
        assert_eq!(holders.remove(at, 7, 10).map(|s| s.id), Some(10));
        assert!(holders.get(at, 7, 10).is_none(), "removed");
    }

    #[test]
    fn stand_ins_that_lost_their_session_are_forgotten_at_the_next_grant() {
        let holders = RemoteHolders::default();
        let at = PartitionRef { entity: 1, partition: 0 };
        let lost = stand_in(1);
        holders.insert(at, 1, lost.clone());
        lost.lose();
        holders.insert(at, 1, stand_in(2));
        assert!(holders.get(at, 1, 1).is_none());
        assert!(holders.get(at, 1, 2).is_some());
    }
}
