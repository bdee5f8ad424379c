//! Links: attach (authorization, existence, the link's state), refusal, detach, and credit —
//! the client's flow for our sender links, our top-ups for the client's sender links.
//!
//! A session receiver link (`com.microsoft:session-filter`) gets a `SessionReceiver` instead of
//! a `Receiver`; the attach reply echoes the session id and its lock's expiry
//! (`com.microsoft:locked-until-utc`, in .NET ticks). An accept of the next session waits off
//! the loop and is aborted by a detach. A link whose session lock is lost is detached with
//! `com.microsoft:session-lock-lost` a second after the loss: the session is free at once, and
//! a client that closes the link as its lock runs out gets a clean close.

use std::collections::VecDeque;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fe2o3_amqp_types::definitions::Fields;
use fe2o3_amqp_types::definitions::{Role, SenderSettleMode};
use fe2o3_amqp_types::messaging::TargetArchetype;
use fe2o3_amqp_types::performatives::{Attach, Detach, Flow, Performative};
use fe2o3_amqp_types::primitives::{Symbol, Value};
use futures_util::future::{AbortHandle, Abortable};
use ironbus_core::auth::Right;
use ironbus_core::{
    BrokerError, EntityAddress, EntityDescription, EntityPath, PathShape, ReceiveMode, Receiver,
    SessionError, SessionReceiver,
};

use crate::error::{WireError, SESSION_LOCK_LOST};
use crate::frame::{self};

use super::*;

/// Credit granted to each client sender link, and topped up as sends complete.
pub(super) const SENDER_CREDIT: u32 = 1000;

#[derive(Debug)]
pub(super) struct InboundLink {
    pub(super) node: Node,
    /// The node's path (for response routing).
    pub(super) path: String,
    pub(super) delivery_count: u32,
    pub(super) credit: u32,
    pub(super) in_flight: u32,
    pub(super) partial: Option<Partial>,
    /// A send-via link's via entity (its target; `node` is the final destination).
    pub(super) via: Option<EntityPath>,
}

impl InboundLink {
    pub(super) fn new(node: Node, path: impl Into<String>, delivery_count: u32) -> Self {
        InboundLink {
            node,
            path: path.into(),
            delivery_count,
            credit: SENDER_CREDIT,
            in_flight: 0,
            partial: None,
            via: None,
        }
    }
}

/// The source filter that asks for a session (amqp.md §7).
const SESSION_FILTER: &str = "com.microsoft:session-filter";
/// How long an accept-next waits when the client names no `com.microsoft:timeout`.
const DEFAULT_ACCEPT_WAIT: Duration = Duration::from_secs(60);
/// How long a session link whose lock expired stays attached before we detach it.
const LOCK_LOSS_NOTICE: Duration = Duration::from_secs(1);
/// .NET ticks (100 ns since 0001-01-01) at the Unix epoch.
const TICKS_AT_UNIX_EPOCH: i64 = 621_355_968_000_000_000;

/// What an entity link delivers from: a plain receiver, or one holding a session.
#[derive(Debug)]
pub(crate) enum LinkReceiver {
    Plain(Receiver),
    Session(Arc<SessionReceiver>),
}

impl LinkReceiver {
    pub(crate) fn session(&self) -> Option<&Arc<SessionReceiver>> {
        match self {
            LinkReceiver::Plain(_) => None,
            LinkReceiver::Session(s) => Some(s),
        }
    }
}

impl Deref for LinkReceiver {
    type Target = Receiver;

    fn deref(&self) -> &Receiver {
        match self {
            LinkReceiver::Plain(r) => r,
            LinkReceiver::Session(s) => s,
        }
    }
}

/// What a receiver attach's source filter asks of sessions: nothing (a plain receiver), a
/// named session, or (null) the next available one. The id may come as a string or a
/// described string (rs); anything else (a number, say) is refused, not taken for "next
/// available".
fn session_filter(attach: &Attach) -> Result<Option<Option<String>>, WireError> {
    let Some(filter) = attach.source.as_ref().and_then(|s| s.filter.as_ref()) else {
        return Ok(None);
    };
    let Some((_, value)) = filter.iter().find(|(k, _)| k.0 == SESSION_FILTER) else {
        return Ok(None);
    };
    let id = match value {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Described(d) => match &d.value {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            _ => return Err(not_a_session_id()),
        },
        _ => return Err(not_a_session_id()),
    };
    Ok(Some(id))
}

/// The attach that accepts `attach`: the same link with the other role, nothing unsettled and
/// no capabilities (the caller sets what depends on the link).
fn attach_reply(attach: &Attach) -> Attach {
    let mut reply = attach.clone();
    reply.role = if attach.role == Role::Sender { Role::Receiver } else { Role::Sender };
    reply.unsettled = None;
    reply.incomplete_unsettled = false;
    reply.offered_capabilities = None;
    reply.desired_capabilities = None;
    reply
}

fn not_a_session_id() -> WireError {
    WireError::bad_request(format!(
        "the {SESSION_FILTER} filter must be a string naming a session, or null for the next \
         available session"
    ))
}

/// The accept-next wait the client asks for (`com.microsoft:timeout`, milliseconds).
fn accept_wait(attach: &Attach) -> Duration {
    let value = attach.properties.as_ref().and_then(|p| {
        p.iter().find(|(k, _)| k.0 == "com.microsoft:timeout").map(|(_, v)| v.clone())
    });
    match value.as_ref().and_then(crate::management::as_i64) {
        Some(ms) if ms >= 0 => Duration::from_millis(ms as u64),
        _ => DEFAULT_ACCEPT_WAIT,
    }
}

/// A finished accept-next for a session receiver attach (`None`: given up).
pub(super) struct Accepted {
    channel: u16,
    attach: Box<Attach>,
    result: Option<Result<SessionReceiver, SessionError>>,
}

#[derive(Debug)]
pub(super) enum Outbound {
    /// Deliveries from an entity.
    Entity { receiver: Arc<LinkReceiver>, address: EntityAddress },
    /// Responses of a `$cbs` / `$management` node.
    Responses { pending: VecDeque<Bytes> },
}

#[derive(Debug)]
pub(super) struct OutboundLink {
    pub(super) kind: Outbound,
    /// The node path (source address, normalized).
    pub(super) path: String,
    /// The client's terminus address (target), which requests name as reply-to.
    pub(super) target_address: Option<String>,
    pub(super) name: String,
    pub(super) delivery_count: u32,
    pub(super) credit: u32,
    pub(super) draining: bool,
}

impl OutboundLink {
    /// A new link on the client's receiver `attach`, from the node at `path`: no deliveries, no
    /// credit yet.
    fn new(kind: Outbound, path: String, attach: &Attach) -> Self {
        let target_address = match attach.target.as_deref() {
            Some(TargetArchetype::Target(t)) => t.address.clone(),
            _ => None,
        };
        OutboundLink {
            kind,
            path,
            target_address,
            name: attach.name.clone(),
            delivery_count: 0,
            credit: 0,
            draining: false,
        }
    }
}

#[derive(Debug)]
pub(super) enum LinkState {
    Inbound(InboundLink),
    Outbound(OutboundLink),
}

impl Connection {
    /// Answers an attach: accepts it as a link, or refuses it (a null terminus, then a
    /// closing detach with the error).
    pub(super) async fn on_attach(
        &mut self,
        channel: u16,
        attach: Attach,
    ) -> Result<(), WireError> {
        self.session(channel)?;
        let handle = attach.handle.0;
        let client_sends = attach.role == Role::Sender;
        let address = if client_sends {
            match attach.target.as_deref() {
                Some(TargetArchetype::Target(t)) => t.address.clone(),
                Some(TargetArchetype::Coordinator(_)) => {
                    return self.attach_coordinator(channel, attach);
                }
                None => None,
            }
        } else {
            attach.source.as_ref().and_then(|s| s.address.clone())
        };
        let Some(address) = address else {
            return self.refuse(channel, attach, WireError::bad_request("the link has no address"));
        };
        let path = node_path(&address);
        let node = match resolve(&path) {
            Ok(node) => node,
            Err(e) => return self.refuse(channel, attach, e),
        };
        let now = self.now();
        // Authorization and existence.
        match &node {
            Node::Cbs | Node::Coordinator => {}
            Node::Entity(entity) | Node::Management(entity) => {
                let right = match (&node, client_sends) {
                    (Node::Entity(_), true) => Some(Right::Send),
                    (Node::Entity(_), false) => Some(Right::Listen),
                    _ => None,
                };
                match self.cx.broker.get_entity(&entity.entity).await {
                    Ok(_) => {}
                    // Service Bus names the address the client asked for, in full.
                    Err(BrokerError::EntityNotFound { .. }) => {
                        let url = entity_url(self.hostname.as_deref(), &address, &path);
                        return self.refuse(channel, attach, WireError::not_found(&url));
                    }
                    Err(e) => return self.refuse(channel, attach, WireError::from(e)),
                }
                if matches!(node, Node::Entity(_))
                    && client_sends
                    && entity.entity.shape() == PathShape::Subscription
                {
                    return self.refuse(
                        channel,
                        attach,
                        WireError::new(
                            "amqp:not-allowed",
                            400,
                            format!("{path} is a subscription: send to its topic"),
                        ),
                    );
                }
                if !self.grants.allows(&path, right, now) {
                    return self.refuse(channel, attach, cbs::unauthorized(&path, right));
                }
            }
        }
        // A send-via link: the target is the via entity, the destination a link property.
        let mut via = None;
        let node = match (&node, client_sends) {
            (Node::Entity(target), true) => match self.send_via_destination(&attach).await {
                None => node,
                Some(Err(e)) => return self.refuse(channel, attach, e),
                Some(Ok(destination)) => {
                    via = Some(target.entity.clone());
                    Node::Entity(destination)
                }
            },
            _ => node,
        };
        let session = if client_sends {
            None
        } else {
            match session_filter(&attach) {
                Ok(session) => session,
                Err(e) => return self.refuse(channel, attach, e),
            }
        };

        let mut reply = attach_reply(&attach);
        reply.properties = None;
        let link = if client_sends {
            reply.initial_delivery_count = None;
            let max_message_size = match &node {
                Node::Entity(e) => {
                    self.cx.broker.get_entity(&e.entity).await.ok().and_then(|info| {
                        match info.description {
                            EntityDescription::Queue(q) => Some(q.max_message_size() as u64),
                            EntityDescription::Topic(t) => {
                                Some(t.max_message_size_in_kilobytes.saturating_mul(1024))
                            }
                            _ => None,
                        }
                    })
                }
                _ => None,
            };
            reply.max_message_size = max_message_size.or(Some(u64::from(MAX_FRAME_SIZE)));
            let mut link = InboundLink::new(node, path, attach.initial_delivery_count.unwrap_or(0));
            link.via = via;
            LinkState::Inbound(link)
        } else {
            reply.initial_delivery_count = Some(0);
            reply.max_message_size = None;
            let kind = match &node {
                Node::Entity(entity) => {
                    let mode = if attach.snd_settle_mode == SenderSettleMode::Settled {
                        ReceiveMode::ReceiveAndDelete
                    } else {
                        ReceiveMode::PeekLock
                    };
                    let receiver = match session {
                        None => match self.cx.broker.open_receiver(entity.clone(), mode).await {
                            Ok(r) => LinkReceiver::Plain(r),
                            Err(e) => return self.refuse(channel, attach, WireError::from(e)),
                        },
                        Some(id) => {
                            let broker = &self.cx.broker;
                            let accepted = match id {
                                Some(id) => broker.accept_session(entity.clone(), &id, mode).await,
                                None => {
                                    // It may wait long: the loop goes on meanwhile.
                                    self.start_accept_next(channel, attach, entity.clone(), mode);
                                    return Ok(());
                                }
                            };
                            let session = match accepted {
                                Ok(s) => s,
                                Err(e) => return self.refuse(channel, attach, WireError::from(e)),
                            };
                            session_reply(&mut reply, &session);
                            LinkReceiver::Session(Arc::new(session))
                        }
                    };
                    self.deliver_from(receiver, entity.clone())
                }
                _ => Outbound::Responses { pending: VecDeque::new() },
            };
            LinkState::Outbound(OutboundLink::new(kind, path, &attach))
        };
        frame::write_performative(&mut self.out, channel, &Performative::Attach(reply));
        let inbound_count = match &link {
            LinkState::Inbound(l) => Some(l.delivery_count),
            LinkState::Outbound(_) => None,
        };
        let entity = match &link {
            LinkState::Inbound(InboundLink { node: Node::Entity(a), via, .. }) => {
                Some(via.clone().unwrap_or_else(|| a.entity.clone()))
            }
            LinkState::Outbound(OutboundLink {
                kind: Outbound::Entity { address, .. }, ..
            }) => Some(address.entity.clone()),
            _ => None,
        };
        let session = self.session(channel)?;
        if let Some(entity) = entity {
            session.txn.note_link(Some(&entity));
        }
        session.links.insert(handle, link);
        if let Some(delivery_count) = inbound_count {
            self.write_link_flow(channel, handle, delivery_count, SENDER_CREDIT, false);
        }
        Ok(())
    }

    /// What an entity link delivers from `receiver` at `address`: watched by this connection,
    /// with nothing outstanding until the client gives credit.
    fn deliver_from(&self, receiver: LinkReceiver, address: EntityAddress) -> Outbound {
        receiver.watch_with(self.watcher.clone());
        receiver.set_outstanding(0);
        Outbound::Entity { receiver: Arc::new(receiver), address }
    }

    pub(super) fn refuse(
        &mut self,
        channel: u16,
        attach: Attach,
        error: WireError,
    ) -> Result<(), WireError> {
        tracing::debug!(link = %attach.name, condition = error.condition, description = %error.description, "attach refused");
        let mut reply = attach;
        let client_sends = reply.role == Role::Sender;
        reply.role = if client_sends { Role::Receiver } else { Role::Sender };
        if client_sends {
            reply.target = None;
            reply.initial_delivery_count = None;
        } else {
            reply.source = None;
            reply.initial_delivery_count = Some(0);
        }
        reply.unsettled = None;
        reply.properties = None;
        let handle = reply.handle.clone();
        frame::write_performative(&mut self.out, channel, &Performative::Attach(reply));
        let detach = Detach { handle, closed: true, error: Some(error.to_amqp()) };
        frame::write_performative(&mut self.out, channel, &Performative::Detach(detach));
        Ok(())
    }

    /// Detaches every session link whose session lock was lost (expired), with
    /// `com.microsoft:session-lock-lost`, [`LOCK_LOSS_NOTICE`] after the loss was seen; its
    /// unsettled deliveries are forgotten. The session is free for others at once; the link
    /// just stays attached, delivering nothing, for that moment: a client that stops receiving
    /// as its lock runs out (the Python SDK's receive wait equal to the lock duration) closes
    /// the link itself, as against Service Bus, instead of racing our detach by milliseconds.
    pub(super) fn detach_lost_sessions(&mut self) {
        let mut lost = Vec::new();
        for (channel, session) in &self.sessions {
            for (handle, link) in &session.links {
                if let LinkState::Outbound(OutboundLink {
                    kind: Outbound::Entity { receiver, .. },
                    ..
                }) = link
                {
                    if receiver.session().is_some_and(|s| s.is_lock_lost()) {
                        lost.push((*channel, *handle));
                    }
                }
            }
        }
        // The common case on every pass of the loop: nothing lost, nothing waiting.
        if lost.is_empty() && self.lost_since.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut since = std::mem::take(&mut self.lost_since);
        since.retain(|key, _| lost.contains(key));
        let mut due = Vec::new();
        for key in lost {
            let seen = *since.entry(key).or_insert_with(|| {
                self.pending.push(Box::pin(async {
                    tokio::time::sleep(LOCK_LOSS_NOTICE).await;
                    Event::LockLossDue
                }));
                now
            });
            if now.duration_since(seen) >= LOCK_LOSS_NOTICE {
                since.remove(&key);
                due.push(key);
            }
        }
        self.lost_since = since;
        for (channel, handle) in due {
            let Some(session) = self.sessions.get_mut(&channel) else { continue };
            session.links.remove(&handle);
            session.forget_link(handle, true);
            let error = WireError::new(
                SESSION_LOCK_LOST,
                410,
                "the session lock was lost: it expired; accept the session again",
            );
            let detach =
                Detach { handle: handle.into(), closed: true, error: Some(error.to_amqp()) };
            frame::write_performative(&mut self.out, channel, &Performative::Detach(detach));
        }
    }

    /// The session receiver this connection holds for `session` of `address`, if any.
    pub(super) fn held_session(
        &self,
        address: &EntityAddress,
        session: &str,
    ) -> Option<Arc<SessionReceiver>> {
        self.sessions.values().flat_map(|s| s.links.values()).find_map(|link| match link {
            LinkState::Outbound(OutboundLink {
                kind: Outbound::Entity { receiver, address: a },
                ..
            }) if a == address => receiver.session().filter(|s| s.session_id() == session).cloned(),
            _ => None,
        })
    }

    /// Starts an accept-next for a session receiver attach; [`Connection::on_session_accepted`]
    /// answers the attach when it finishes.
    fn start_accept_next(
        &mut self,
        channel: u16,
        attach: Attach,
        address: EntityAddress,
        mode: ReceiveMode,
    ) {
        let wait = accept_wait(&attach);
        let broker = self.cx.broker.clone();
        let handle = attach.handle.0;
        let (abort, registration) = AbortHandle::new_pair();
        if let Some(session) = self.sessions.get_mut(&channel) {
            session.accepting.insert(handle, abort);
        }
        let accept = Abortable::new(
            async move { broker.accept_next_session(address.clone(), mode, wait).await },
            registration,
        );
        self.pending.push(Box::pin(async move {
            // Given up (the client detached): nothing to answer.
            let result = accept.await.ok();
            Event::SessionAccepted(Accepted { channel, attach: Box::new(attach), result })
        }));
    }

    /// Answers a session receiver attach whose accept-next finished: the link with its session,
    /// or a refusal (`com.microsoft:timeout` when no session became available). An accept the
    /// client gave up meanwhile is dropped, which releases its session.
    pub(super) fn on_session_accepted(&mut self, accepted: Accepted) {
        let Accepted { channel, attach, result } = accepted;
        let handle = attach.handle.0;
        let waiting =
            self.sessions.get_mut(&channel).is_some_and(|s| s.accepting.remove(&handle).is_some());
        let Some(result) = result.filter(|_| waiting) else { return };
        let attach = *attach;
        let session = match result {
            Ok(s) => s,
            Err(e) => {
                let _ = self.refuse(channel, attach, WireError::from(e));
                return;
            }
        };
        let path = attach
            .source
            .as_ref()
            .and_then(|s| s.address.as_deref())
            .map(node_path)
            .unwrap_or_default();
        let Ok(Node::Entity(address)) = resolve(&path) else { return };
        let address_entity = address.entity.clone();
        let mut reply = attach_reply(&attach);
        reply.initial_delivery_count = Some(0);
        reply.max_message_size = None;
        session_reply(&mut reply, &session);
        let kind = self.deliver_from(LinkReceiver::Session(Arc::new(session)), address);
        let link = LinkState::Outbound(OutboundLink::new(kind, path, &attach));
        frame::write_performative(&mut self.out, channel, &Performative::Attach(reply));
        if let Some(session) = self.sessions.get_mut(&channel) {
            session.txn.note_link(Some(&address_entity));
            session.links.insert(handle, link);
        }
    }

    pub(super) fn on_detach(&mut self, channel: u16, detach: Detach) -> Result<(), WireError> {
        let session = self.session(channel)?;
        let handle = detach.handle.0;
        if let Some(abort) = session.accepting.remove(&handle) {
            // A pending accept-next given up: cancel it and answer the detach.
            abort.abort();
            let reply = Detach { handle: detach.handle, closed: detach.closed, error: None };
            frame::write_performative(&mut self.out, channel, &Performative::Detach(reply));
            return Ok(());
        }
        if !session.links.contains_key(&handle) {
            // Not ours (already refused, or never attached): nothing to answer.
            return Ok(());
        }
        // Settlements read before the detach reach the partition before the receiver is
        // dropped: a session link's detach releases its session, and the messages it had
        // accepted must not be released with it (and redelivered).
        self.start_settles();
        let session = self.session(channel)?;
        let session_link = session.links.remove(&handle).is_some_and(|link| is_session_link(&link));
        session.forget_link(handle, session_link);
        // A coordinator link's undischarged transactions are rolled back.
        self.roll_back_declared_by(channel, Some(handle));
        let reply = Detach { handle: detach.handle, closed: detach.closed, error: None };
        frame::write_performative(&mut self.out, channel, &Performative::Detach(reply));
        Ok(())
    }

    pub(super) fn on_flow(&mut self, channel: u16, flow: Flow) -> Result<(), WireError> {
        let Some(session) = self.sessions.get_mut(&channel) else {
            return Err(no_session(channel));
        };
        session.remote_incoming_window = flow
            .next_incoming_id
            .unwrap_or(0)
            .wrapping_add(flow.incoming_window)
            .wrapping_sub(session.next_outgoing_id);
        let Some(handle) = flow.handle.as_ref().map(|h| h.0) else {
            if flow.echo {
                self.write_session_flow(channel);
            }
            return Ok(());
        };
        let Some(link) = session.links.get_mut(&handle) else { return Ok(()) };
        if matches!(link, LinkState::Outbound(_)) && transactions::asks_acquisition(&flow) {
            return self.refuse_acquisition(channel, handle);
        }
        match link {
            LinkState::Outbound(link) => {
                let client_count = flow.delivery_count.unwrap_or(link.delivery_count);
                let credit = client_count
                    .wrapping_add(flow.link_credit.unwrap_or(0))
                    .wrapping_sub(link.delivery_count);
                link.credit = credit;
                match &link.kind {
                    Outbound::Entity { receiver, .. } => {
                        receiver.set_outstanding(credit);
                        if flow.drain && !link.draining {
                            link.draining = true;
                            let receiver = receiver.clone();
                            self.pending.push(Box::pin(async move {
                                receiver.drain().await;
                                Event::Drained { channel, handle }
                            }));
                        }
                    }
                    Outbound::Responses { .. } => {
                        if flow.drain {
                            self.pending
                                .push(Box::pin(async move { Event::Drained { channel, handle } }));
                        }
                    }
                }
                if flow.echo {
                    let (count, credit) = (link.delivery_count, link.credit);
                    self.write_link_flow(channel, handle, count, credit, false);
                }
            }
            LinkState::Inbound(link) => {
                if flow.echo {
                    let (count, credit) = (link.delivery_count, link.credit);
                    self.write_link_flow(channel, handle, count, credit, false);
                }
            }
        }
        Ok(())
    }

    /// Gives a client sender more credit once it has used half, keeping what is in flight to
    /// the store within [`SENDER_CREDIT`].
    pub(super) fn top_up(&mut self, channel: u16, handle: u32) {
        let Some(LinkState::Inbound(link)) =
            self.sessions.get_mut(&channel).and_then(|s| s.links.get_mut(&handle))
        else {
            return;
        };
        if link.credit < SENDER_CREDIT / 2 && link.in_flight < SENDER_CREDIT / 2 {
            link.credit = SENDER_CREDIT - link.in_flight;
            let (count, credit) = (link.delivery_count, link.credit);
            self.write_link_flow(channel, handle, count, credit, false);
        }
    }
}

/// Whether `link` delivers from a session the connection holds.
pub(super) fn is_session_link(link: &LinkState) -> bool {
    matches!(
        link,
        LinkState::Outbound(OutboundLink { kind: Outbound::Entity { receiver, .. }, .. })
            if receiver.session().is_some()
    )
}

/// A session link's attach reply: the session id in the source filter (as a plain string) and
/// the session lock's expiry in .NET ticks in the properties (amqp.md §7).
fn session_reply(reply: &mut Attach, session: &SessionReceiver) {
    if let Some(source) = reply.source.as_mut() {
        let filter = source.filter.get_or_insert_with(Default::default);
        filter.insert(Symbol::from(SESSION_FILTER), Value::String(session.session_id().to_owned()));
    }
    let ticks = session.locked_until().as_millis().saturating_mul(10_000) + TICKS_AT_UNIX_EPOCH;
    let mut properties = Fields::new();
    properties.insert(Symbol::from("com.microsoft:locked-until-utc"), Value::Long(ticks));
    reply.properties = Some(properties);
}
