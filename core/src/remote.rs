//! Reaching a partition on another node (`CLUSTER.md` §3): the core's half of the cluster's
//! internal link. The link itself (sockets, admission) is a [`Peer`] the binary provides; the
//! core encodes each request (`codec/link.rs`), and serves other nodes' requests with
//! [`Broker::serve_link`].
//!
//! - Request/reply commands (send, transfer, settle, renew, peek, deferred receive, cancel,
//!   counts, a transaction's reservations and commit) travel as one call each. A lost link or a time-out is the retriable
//!   `PartitionUnavailable`, which the SDKs retry.
//! - Receivers **borrow credit**: for each receiver registered with a remote partition, a pull
//!   loop reserves up to [`MAX_PULL`] units of the receiver's credit and lends them to the
//!   owner, which delivers against them to a stand-in receiver in one cycle (a drain); the
//!   loop hands over what came and gives back the rest at once, nudging the receiver's other
//!   partitions. A pull that exhausted its partition waits [`PULL_IDLE`] before the next one,
//!   holding no credit. A receiver therefore never holds more than its credit, however many
//!   nodes serve it, and no credit waits on an empty partition.
//! - Sessions (`remote/sessions.rs`): the owner grants a session to a stand-in receiver that
//!   holds it for the receiver on the caller's node, which a session pull loop feeds with
//!   borrowed credit in the same way; a route that moves loses the sessions it served.
//! - Not yet across nodes: the size quota (a node counts only the partitions it runs).
//!
//! **Architecture Invariant:** a node serves a link request only for a partition that runs on
//! it; otherwise it answers `PartitionUnavailable` (the caller's view is stale), so a request
//! is never forwarded twice.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::{oneshot, Notify};

use crate::broker::{Broker, EntityHandle, PartitionRef};
use crate::clock::Clock;
use crate::codec::link::{decode_reply, decode_request, encode_reply, encode_request};
use crate::codec::link::{LinkReply, LinkRequest};
use crate::error::{BrokerError, Result};
use crate::message::Disposition;
use crate::partition::{Command, LaneId, LaneStats, RemotePartition, Route};
use crate::receiver::ReceiverShared;
use crate::types::PartitionId;

mod sessions;

pub(crate) use self::sessions::RemoteHolders;
use self::sessions::SessionLinks;
pub use self::sessions::SESSION_PROBE;

/// The most messages one pull borrows credit for.
pub const MAX_PULL: u32 = 64;
/// How long a receiver's pull loop waits after a pull that found its partition exhausted,
/// holding no credit meanwhile (so that other partitions can use it).
pub const PULL_IDLE: Duration = Duration::from_millis(50);
/// The most sequence numbers one reservation over the link takes (a transaction holds at most
/// 100 operations).
const MAX_RESERVE: usize = 100;
/// The most messages one peek over the link returns (a client asks for far fewer).
const MAX_PEEK: usize = 4096;
/// How long a receiver's pull waits after its owner could not be reached.
const RETRY_AFTER: Duration = Duration::from_millis(200);

/// One other node of the cluster, as the link reaches it.
#[async_trait]
pub trait Peer: Send + Sync + fmt::Debug + 'static {
    /// Sends one request to the node and returns its answer (what [`Broker::serve_link`]
    /// returned there).
    async fn call(&self, request: Bytes) -> std::result::Result<Bytes, PeerError>;

    /// The node's id, as `/health` shows who runs a partition (empty when unknown).
    fn node(&self) -> &str {
        ""
    }
}

/// Why a call over the link failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cluster link: {message}")]
pub struct PeerError {
    /// Whether the same call may succeed later (the node unreachable, a time-out, a lost
    /// connection); not so for a refused admission or a malformed answer.
    pub retriable: bool,
    pub message: String,
}

/// A partition whose owner is another node (the route's target there).
pub(crate) struct LinkedPartition {
    peer: Arc<dyn Peer>,
    at: PartitionRef,
    entity_name: String,
    clock: Arc<dyn Clock>,
    /// Pull loops by receiver id, stopped on detach or when the route moves.
    pulls: Mutex<HashMap<u64, oneshot::Sender<()>>>,
    /// Wakes the pull loops at once (a nudge: the owner published deliverable messages).
    wake: Arc<Notify>,
    /// Sessions held on the owner for receivers here.
    sessions: Arc<SessionLinks>,
}

impl fmt::Debug for LinkedPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkedPartition").field("at", &self.at).field("peer", &self.peer).finish()
    }
}

impl LinkedPartition {
    pub(crate) fn new(
        peer: Arc<dyn Peer>,
        at: PartitionRef,
        entity_name: &str,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let wake = Arc::new(Notify::new());
        let sessions =
            SessionLinks::new(peer.clone(), at, entity_name, clock.clone(), wake.clone());
        LinkedPartition {
            peer,
            at,
            entity_name: entity_name.to_owned(),
            clock,
            pulls: Mutex::new(HashMap::new()),
            wake,
            sessions,
        }
    }

    fn pulls(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<()>>> {
        self.pulls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `request` and answers `reply` with what `answer` makes of the reply.
    fn ask<T: Send + 'static>(
        &self,
        lane: LaneId,
        request: LinkRequest,
        reply: oneshot::Sender<Result<T>>,
        answer: impl FnOnce(LinkReply) -> Option<T> + Send + 'static,
    ) {
        let call = self.call(lane, request);
        tokio::spawn(async move {
            let _ = reply.send(call.await.and_then(|r| expect(r, answer)));
        });
    }

    fn call(
        &self,
        lane: LaneId,
        request: LinkRequest,
    ) -> impl std::future::Future<Output = Result<LinkReply>> + Send + 'static {
        call(self.peer.clone(), self.at, &self.entity_name, lane, request)
    }

    fn start_pull(&self, lane: LaneId, receiver: Arc<ReceiverShared>) {
        let (stop, mut stopped) = oneshot::channel();
        self.pulls().insert(receiver.id, stop);
        let (peer, at, name) = (self.peer.clone(), self.at, self.entity_name.clone());
        let clock = self.clock.clone();
        let wake = self.wake.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => return,
                    () = receiver.credit_or_close() => {}
                }
                if receiver.is_closed() {
                    return;
                }
                let max = receiver.reserve_up_to(MAX_PULL);
                if max == 0 {
                    continue;
                }
                let request = LinkRequest::Pull { queue: receiver.queue, mode: receiver.mode, max };
                let pulled = call(peer.clone(), at, &name, lane, request).await;
                let (messages, failed) = match pulled.and_then(|r| expect(r, messages)) {
                    Ok(messages) => (messages, false),
                    Err(e) => {
                        tracing::debug!(entity = %name, partition = at.partition, error = %e, "pull failed");
                        (Vec::new(), true)
                    }
                };
                let unused = max.saturating_sub(messages.len() as u32);
                for message in messages.into_iter().take(max as usize) {
                    receiver.deliver(message);
                }
                receiver.give_back(unused);
                // A receiver that closed meanwhile never sees what this pull brought: unlock
                // it on the owner now rather than when its locks expire.
                let unseen = receiver.take_unseen_if_closed();
                let items: Vec<_> = unseen
                    .iter()
                    .filter_map(|m| m.lock_token())
                    .map(|token| (token, Disposition::Release))
                    .collect();
                if !items.is_empty() {
                    let request = LinkRequest::Settle { queue: receiver.queue, items };
                    drop(call(peer.clone(), at, &name, lane, request).await);
                }
                if unused > 0 {
                    // The partition is exhausted (or its owner unreachable): look again a
                    // little later, not in a tight loop.
                    let pause = if failed { RETRY_AFTER } else { PULL_IDLE };
                    let again = clock.now().saturating_add(pause);
                    tokio::select! {
                        _ = &mut stopped => return,
                        () = clock.sleep_until(again) => {}
                        () = wake.notified() => {}
                    }
                }
            }
        });
    }
}

impl RemotePartition for LinkedPartition {
    fn submit(&self, lane: LaneId, command: Command) {
        match command {
            Command::Send { messages, reply } => {
                self.ask(lane, LinkRequest::Send(messages), reply, |r| match r {
                    LinkReply::Sent(outcomes) => Some(outcomes),
                    _ => None,
                });
            }
            Command::Transfer { transfers, reply } => {
                self.ask(lane, LinkRequest::Transfer(transfers), reply, |r| match r {
                    LinkReply::Transferred(outcomes) => Some(outcomes),
                    _ => None,
                });
            }
            Command::ForgetTransfers(ids) => {
                let call = self.call(lane, LinkRequest::ForgetTransfers(ids));
                tokio::spawn(async move { drop(call.await) });
            }
            Command::Cancel { sequence_numbers, reply } => {
                self.ask(lane, LinkRequest::Cancel(sequence_numbers), reply, |r| match r {
                    LinkReply::Done => Some(()),
                    _ => None,
                });
            }
            Command::Settle { queue, items, reply } => {
                self.ask(lane, LinkRequest::Settle { queue, items }, reply, |r| match r {
                    LinkReply::Settled(outcomes) => Some(outcomes),
                    _ => None,
                });
            }
            Command::RenewLock { queue, token, reply } => {
                self.ask(lane, LinkRequest::RenewLock { queue, token }, reply, |r| match r {
                    LinkReply::Renewed(until) => Some(until),
                    _ => None,
                });
            }
            Command::ReceiveDeferred { queue, sequence_numbers, mode, reply } => {
                let request = LinkRequest::ReceiveDeferred { queue, sequence_numbers, mode };
                self.ask(lane, request, reply, messages);
            }
            Command::Peek { queue, from, max, reply } => {
                let max = u32::try_from(max).unwrap_or(u32::MAX);
                self.ask(lane, LinkRequest::Peek { queue, from, max }, reply, messages);
            }
            Command::Counts { reply } => {
                self.ask(lane, LinkRequest::Counts, reply, |r| match r {
                    LinkReply::Counts(counts) => Some(counts),
                    _ => None,
                });
            }
            Command::DeleteMessages { queue, max, before, session, reply } => {
                let max = u32::try_from(max).unwrap_or(u32::MAX);
                let request = LinkRequest::DeleteMessages { queue, max, before, session };
                self.ask(lane, request, reply, |r| match r {
                    LinkReply::Deleted(count) => Some(count),
                    _ => None,
                });
            }
            Command::Commit { work, reply } => {
                self.ask(lane, LinkRequest::Commit(work), reply, |r| match r {
                    LinkReply::Done => Some(()),
                    _ => None,
                });
            }
            Command::Reserve { count, reply } => {
                let count = u32::try_from(count).unwrap_or(u32::MAX);
                self.ask(lane, LinkRequest::Reserve(count), reply, |r| match r {
                    LinkReply::Reserved(numbers) => Some(numbers),
                    _ => None,
                });
            }
            Command::Unreserve(numbers) => {
                let call = self.call(lane, LinkRequest::Unreserve(numbers));
                tokio::spawn(async move { drop(call.await) });
            }
            // A forwarder forwards what its own node runs.
            Command::Attach(receiver) if receiver.local_only => {}
            Command::Attach(receiver) => self.start_pull(lane, receiver),
            Command::Detach(id) => {
                if let Some(stop) = self.pulls().remove(&id) {
                    let _ = stop.send(());
                }
                self.sessions.detach(id);
            }
            Command::Deliver => self.wake.notify_waiters(),
            // Management reaches the owner through the namespace, not the link.
            Command::Update(_)
            | Command::AddLane(_)
            | Command::Configure(_)
            | Command::Filtering(_)
            | Command::Close => {}
            Command::RemoveLane(reply) => drop(reply.send(Ok(()))),
            command @ (Command::Drain(_) | Command::Stop(_)) => {
                command.refuse(&BrokerError::ShuttingDown);
            }
            command @ (Command::AcceptSession { .. }
            | Command::RenewSession { .. }
            | Command::SessionState { .. }
            | Command::ListSessions { .. }
            | Command::PeekSession { .. }
            | Command::ReceiveDeferredSession { .. }) => self.sessions.submit(lane, command),
        }
    }

    fn owner(&self) -> String {
        self.peer.node().to_owned()
    }

    fn close(&self) {
        for (_, stop) in self.pulls().drain() {
            let _ = stop.send(());
        }
        self.sessions.close();
    }
}

fn messages(reply: LinkReply) -> Option<Vec<crate::message::ReceivedMessage>> {
    match reply {
        LinkReply::Messages(messages) => Some(messages),
        _ => None,
    }
}

/// A reply of the kind `answer` expects, the owner's error, or a protocol error.
fn expect<T>(reply: LinkReply, answer: impl FnOnce(LinkReply) -> Option<T>) -> Result<T> {
    match reply {
        LinkReply::Failed(e) => Err(e),
        reply => answer(reply).ok_or_else(|| {
            BrokerError::InvalidOperation("cluster link: an answer of the wrong kind".into())
        }),
    }
}

fn call(
    peer: Arc<dyn Peer>,
    at: PartitionRef,
    entity_name: &str,
    lane: LaneId,
    request: LinkRequest,
) -> impl std::future::Future<Output = Result<LinkReply>> + Send + 'static {
    let bytes = encode_request(at, lane, &request);
    let unavailable = BrokerError::PartitionUnavailable {
        entity: entity_name.to_owned(),
        partition: PartitionId(at.partition),
    };
    async move {
        match peer.call(bytes).await {
            Ok(answer) => decode_reply(&answer).map_err(|e| {
                BrokerError::InvalidOperation(format!("cluster link: a malformed answer: {e}"))
            }),
            Err(e) if e.retriable => {
                tracing::debug!(error = %e, "link call failed");
                Err(unavailable)
            }
            Err(e) => Err(BrokerError::InvalidOperation(e.to_string())),
        }
    }
}

impl Broker {
    /// Serves one request another node sent over the cluster's link, for a partition that
    /// runs on this node, and returns the answer to send back. Malformed requests and
    /// partitions that do not run here are answered with errors, never a panic.
    pub async fn serve_link(&self, request: &[u8]) -> Bytes {
        let reply = match decode_request(request) {
            Ok((at, lane, request)) => {
                self.serve_call(at, lane, request).await.unwrap_or_else(LinkReply::Failed)
            }
            Err(e) => LinkReply::Failed(BrokerError::InvalidOperation(format!(
                "cluster link: a malformed request: {e}"
            ))),
        };
        encode_reply(&reply)
    }

    async fn serve_call(
        &self,
        at: PartitionRef,
        lane: LaneId,
        request: LinkRequest,
    ) -> Result<LinkReply> {
        if let LinkRequest::Stats = request {
            return Ok(LinkReply::Stats(self.local_stats()));
        }
        let (entity, index) = self.partition_of(at)?;
        let route = entity.partitions[index].route.clone();
        if !route.is_local() {
            return Err(BrokerError::PartitionUnavailable {
                entity: entity.path.to_string(),
                partition: PartitionId(at.partition),
            });
        }
        Ok(match request {
            LinkRequest::Send(messages) => LinkReply::Sent(
                ask_route(&route, lane, |reply| Command::Send { messages, reply }).await?,
            ),
            LinkRequest::Transfer(transfers) => LinkReply::Transferred(
                ask_route(&route, lane, |reply| Command::Transfer { transfers, reply }).await?,
            ),
            LinkRequest::ForgetTransfers(ids) => {
                route.send(lane, Command::ForgetTransfers(ids));
                LinkReply::Done
            }
            LinkRequest::Cancel(sequence_numbers) => {
                ask_route(&route, lane, |reply| Command::Cancel { sequence_numbers, reply })
                    .await?;
                LinkReply::Done
            }
            LinkRequest::Settle { queue, items } => LinkReply::Settled(
                ask_route(&route, lane, |reply| Command::Settle { queue, items, reply }).await?,
            ),
            LinkRequest::RenewLock { queue, token } => LinkReply::Renewed(
                ask_route(&route, lane, |reply| Command::RenewLock { queue, token, reply }).await?,
            ),
            LinkRequest::ReceiveDeferred { queue, sequence_numbers, mode } => LinkReply::Messages(
                ask_route(&route, lane, |reply| Command::ReceiveDeferred {
                    queue,
                    sequence_numbers,
                    mode,
                    reply,
                })
                .await?,
            ),
            LinkRequest::Peek { queue, from, max } => {
                let max = (max as usize).min(MAX_PEEK);
                LinkReply::Messages(
                    ask_route(&route, lane, |reply| Command::Peek { queue, from, max, reply })
                        .await?,
                )
            }
            LinkRequest::DeleteMessages { queue, max, before, session } => {
                let max = (max as usize).min(crate::types::MAX_DELETE_MESSAGES);
                LinkReply::Deleted(
                    ask_route(&route, lane, |reply| Command::DeleteMessages {
                        queue,
                        max,
                        before,
                        session,
                        reply,
                    })
                    .await?,
                )
            }
            LinkRequest::Commit(work) => {
                let sends_via =
                    work.iter().any(|w| matches!(w, crate::partition::Work::Transfer(_)));
                ask_route(&route, lane, |reply| Command::Commit { work, reply }).await?;
                if sends_via {
                    // What it sent through this entity is forwarded by this node's forwarder.
                    let via = self.entities().values().find(|e| e.id == lane).cloned();
                    if let Some(via) = via {
                        self.ensure_send_via_forwarder(&via);
                    }
                }
                LinkReply::Done
            }
            LinkRequest::Reserve(count) => {
                // A transaction holds at most 100 operations (Service Bus's limit).
                let count = (count as usize).min(MAX_RESERVE);
                LinkReply::Reserved(
                    ask_route(&route, lane, |reply| Command::Reserve { count, reply }).await?,
                )
            }
            LinkRequest::Unreserve(numbers) => {
                route.send(lane, Command::Unreserve(numbers));
                LinkReply::Done
            }
            LinkRequest::Stats => LinkReply::Stats(self.local_stats()),
            LinkRequest::Counts => {
                LinkReply::Counts(ask_route(&route, lane, |reply| Command::Counts { reply }).await?)
            }
            LinkRequest::Pull { queue, mode, max } => {
                let stand_in = Arc::new(ReceiverShared::new(self.new_receiver_id(), mode, queue));
                stand_in.lend(max.min(MAX_PULL));
                route.send(lane, Command::Attach(stand_in.clone()));
                let (drained, delivered) = oneshot::channel();
                route.send(lane, Command::Drain(drained));
                let _ = delivered.await;
                let messages = stand_in.reclaim().await;
                route.send(lane, Command::Detach(stand_in.id));
                LinkReply::Messages(messages)
            }
            request @ (LinkRequest::AcceptSession { .. }
            | LinkRequest::SessionPull { .. }
            | LinkRequest::DetachSession { .. }
            | LinkRequest::RenewSession { .. }
            | LinkRequest::SessionState { .. }
            | LinkRequest::ListSessions { .. }
            | LinkRequest::PeekSession { .. }
            | LinkRequest::ReceiveDeferredSession { .. }) => {
                self.serve_session(at, lane, &route, request).await?
            }
        })
    }
}

impl Broker {
    /// The shared view of every lane of every partition that runs here.
    fn local_stats(&self) -> Vec<(u64, u16, LaneStats)> {
        let mut stats = Vec::new();
        for entity in self.entities().values() {
            for (p, handle) in entity.partitions.iter().enumerate() {
                if handle.route.is_local() {
                    stats.push((entity.id, p as u16, handle.shared.stats()));
                }
            }
        }
        stats
    }

    /// Marks the partitions node `node` runs unavailable in this node's view: round-robin
    /// sends go elsewhere until it answers again (or its partitions move).
    pub fn mark_unreachable(&self, node: &str) {
        if node.is_empty() {
            return;
        }
        let owner = crate::partition::Owner::Node(node.to_owned());
        for entity in self.entities().values() {
            for p in entity.partitions.iter().filter(|p| p.route.owner() == owner) {
                p.shared.mark_available(false);
            }
        }
    }

    /// Asks the node behind `peer` for the shared view of the partitions it runs, and takes
    /// it for the partitions this node reaches there: availability, deliverable messages, size
    /// (the quota) and ready sessions (accept-next). The cluster calls it a few times a second
    /// per node. A node that does not answer has its partitions marked unavailable here.
    pub async fn poll_stats(&self, peer: Arc<dyn Peer>) -> Result<()> {
        let at = PartitionRef { entity: 0, partition: 0 };
        let node = peer.node().to_owned();
        let answer = call(peer, at, "", 0, LinkRequest::Stats).await.and_then(|reply| {
            expect(reply, |r| match r {
                LinkReply::Stats(lanes) => Some(lanes),
                _ => None,
            })
        });
        let lanes = match answer {
            Ok(lanes) => lanes,
            Err(e) => {
                self.mark_unreachable(&node);
                return Err(e);
            }
        };
        let entities: HashMap<u64, Arc<EntityHandle>> =
            self.entities().values().map(|e| (e.id, e.clone())).collect();
        for (lane, p, stats) in lanes {
            let Some(handle) = entities.get(&lane).and_then(|e| e.partitions.get(usize::from(p)))
            else {
                continue;
            };
            if handle.route.is_local() {
                continue;
            }
            handle.shared.apply(&stats);
            if stats.deliverable.iter().any(|n| *n > 0) {
                handle.send(Command::Deliver);
            }
        }
        Ok(())
    }
}

/// Sends a command to lane `lane` through `route` and waits for its answer.
async fn ask_route<T: Send + 'static>(
    route: &Route,
    lane: LaneId,
    make: impl FnOnce(oneshot::Sender<Result<T>>) -> Command,
) -> Result<T> {
    let (tx, rx) = oneshot::channel();
    route.send(lane, make(tx));
    rx.await.unwrap_or(Err(BrokerError::ShuttingDown))
}
