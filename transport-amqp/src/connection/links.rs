//! Links: attach (authorization, existence, the link's state), refusal, detach, and credit —
//! the client's flow for our sender links, our top-ups for the client's sender links.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use fe2o3_amqp_types::definitions::{Role, SenderSettleMode};
use fe2o3_amqp_types::messaging::TargetArchetype;
use fe2o3_amqp_types::performatives::{Attach, Detach, Flow, Performative};
use ironbus_core::auth::Right;
use ironbus_core::{EntityAddress, EntityDescription, PathShape, ReceiveMode, Receiver};

use crate::error::WireError;
use crate::frame::{self};

use super::*;

/// Credit granted to each client sender link, and topped up as sends complete.
const SENDER_CREDIT: u32 = 1000;

#[derive(Debug)]
pub(super) struct InboundLink {
    pub(super) node: Node,
    /// The node's path (for response routing).
    pub(super) path: String,
    pub(super) delivery_count: u32,
    pub(super) credit: u32,
    pub(super) in_flight: u32,
    pub(super) partial: Option<Partial>,
}

#[derive(Debug)]
pub(super) enum Outbound {
    /// Deliveries from an entity.
    Entity { receiver: Arc<Receiver>, address: EntityAddress },
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
                    return self.refuse(
                        channel,
                        attach,
                        WireError::not_implemented(
                            "transactions are not implemented by ironbus yet",
                        ),
                    );
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
            Node::Cbs => {}
            Node::Entity(entity) | Node::Management(entity) => {
                let right = match (&node, client_sends) {
                    (Node::Entity(_), true) => Some(Right::Send),
                    (Node::Entity(_), false) => Some(Right::Listen),
                    _ => None,
                };
                if let Err(e) = self.cx.broker.get_entity(&entity.entity).await {
                    return self.refuse(channel, attach, WireError::from(e));
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
                    return self.refuse(
                        channel,
                        attach,
                        WireError::unauthorized(format!("unauthorized access to {path}: put a valid token with the needed rights on $cbs first")),
                    );
                }
            }
        }
        if !client_sends {
            if let Some(filter) = attach.source.as_ref().and_then(|s| s.filter.as_ref()) {
                if filter.keys().any(|k| k.0 == "com.microsoft:session-filter") {
                    return self.refuse(
                        channel,
                        attach,
                        WireError::not_implemented("sessions are not implemented by ironbus yet"),
                    );
                }
            }
        }

        let mut reply = attach.clone();
        reply.role = if client_sends { Role::Receiver } else { Role::Sender };
        reply.unsettled = None;
        reply.incomplete_unsettled = false;
        reply.properties = None;
        reply.offered_capabilities = None;
        reply.desired_capabilities = None;
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
            LinkState::Inbound(InboundLink {
                node,
                path,
                delivery_count: attach.initial_delivery_count.unwrap_or(0),
                credit: SENDER_CREDIT,
                in_flight: 0,
                partial: None,
            })
        } else {
            reply.initial_delivery_count = Some(0);
            reply.max_message_size = None;
            let target_address = match attach.target.as_deref() {
                Some(TargetArchetype::Target(t)) => t.address.clone(),
                _ => None,
            };
            let kind = match &node {
                Node::Entity(entity) => {
                    let mode = if attach.snd_settle_mode == SenderSettleMode::Settled {
                        ReceiveMode::ReceiveAndDelete
                    } else {
                        ReceiveMode::PeekLock
                    };
                    let receiver = match self.cx.broker.open_receiver(entity.clone(), mode).await {
                        Ok(r) => r,
                        Err(e) => return self.refuse(channel, attach, WireError::from(e)),
                    };
                    receiver.watch_with(self.watcher.clone());
                    receiver.set_outstanding(0);
                    Outbound::Entity { receiver: Arc::new(receiver), address: entity.clone() }
                }
                _ => Outbound::Responses { pending: VecDeque::new() },
            };
            LinkState::Outbound(OutboundLink {
                kind,
                path,
                target_address,
                name: attach.name.clone(),
                delivery_count: 0,
                credit: 0,
                draining: false,
            })
        };
        frame::write_performative(&mut self.out, channel, &Performative::Attach(reply));
        let inbound_count = match &link {
            LinkState::Inbound(l) => Some(l.delivery_count),
            LinkState::Outbound(_) => None,
        };
        let session = self.session(channel)?;
        session.links.insert(handle, link);
        if let Some(delivery_count) = inbound_count {
            self.write_link_flow(channel, handle, delivery_count, SENDER_CREDIT, false);
        }
        Ok(())
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

    pub(super) fn on_detach(&mut self, channel: u16, detach: Detach) -> Result<(), WireError> {
        let session = self.session(channel)?;
        let handle = detach.handle.0;
        if session.links.remove(&handle).is_none() {
            // Not ours (already refused, or never attached): nothing to answer.
            return Ok(());
        }
        session.unsettled.retain(|_, u| u.handle != handle);
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
