//! Request/response nodes: request deliveries accepted, `$management` requests authorized and
//! started on the broker, and responses routed to the client's response link.

use bytes::Bytes;
use fe2o3_amqp_types::definitions::Role;
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState};
use fe2o3_amqp_types::performatives::{Disposition, Performative};
use ironbus_core::EntityAddress;

use crate::frame::{self};
use crate::management;
use crate::request::{encode_error, encode_response, Dialect, Request};

use super::*;

impl Connection {
    /// Accepts a request delivery (`$cbs`, `$management`).
    pub(super) fn settle_request(&mut self, channel: u16, delivery_id: u32, settled: bool) {
        if !settled {
            let disposition = Disposition {
                role: Role::Receiver,
                first: delivery_id,
                last: None,
                settled: true,
                state: Some(DeliveryState::Accepted(Accepted {})),
                batchable: false,
            };
            frame::write_performative(
                &mut self.out,
                channel,
                &Performative::Disposition(disposition),
            );
        }
    }

    pub(super) fn on_management_request(
        &mut self,
        channel: u16,
        path: String,
        address: EntityAddress,
        body: &[u8],
        txn: Option<fe2o3_amqp_types::primitives::Binary>,
    ) {
        let request = match Request::decode(body) {
            Ok(r) => r,
            Err(e) => {
                let payload = encode_error(None, Dialect::Management, &e);
                return self.respond(channel, path, None, payload);
            }
        };
        let reply_to = request.reply_to.clone();
        let message_id = request.message_id.clone();
        let operation = request.property("operation").unwrap_or_default();
        // The right the operation names; an unknown operation needs none (it is answered with
        // amqp:not-implemented).
        if let Some(known) = management::Operation::parse(&operation) {
            if !self.grants.allows(&path, Some(known.right()), self.now()) {
                let e = cbs::unauthorized(&path, Some(known.right()));
                let payload = encode_error(message_id, Dialect::Management, &e);
                return self.respond(channel, path, reply_to, payload);
            }
        }
        // A session operation acts through the session receiver this connection holds.
        let held = match request.field("session-id") {
            Some(fe2o3_amqp_types::primitives::Value::String(id)) => {
                self.held_session(&address, id)
            }
            _ => None,
        };
        // A request in a transaction (its transfer's transactional-state) adds its work to it.
        let txn = match txn.map(|id| self.transaction(&id)).transpose() {
            Ok(txn) => txn,
            Err(e) => {
                let payload = encode_error(message_id, Dialect::Management, &e);
                return self.respond(channel, path, reply_to, payload);
            }
        };
        let in_transaction = txn.is_some();
        let cx = management::Context { held, txn };
        let broker = self.cx.broker.clone();
        let mut request: Pending = Box::pin(async move {
            let payload = match management::execute(broker, address, request, cx).await {
                Ok(o) => encode_response(
                    message_id,
                    Dialect::Management,
                    o.status,
                    o.description,
                    None,
                    o.body,
                ),
                Err(e) => encode_error(message_id, Dialect::Management, &e),
            };
            Event::Response { channel, node: path, reply_to, payload }
        });
        if in_transaction {
            // Its work reaches the transaction now, before a discharge read after it.
            if let Some(event) = (&mut request).now_or_never() {
                return self.pending.push(Box::pin(async move { event }));
            }
        }
        self.pending.push(request);
    }

    /// Queues a response on the client's response link for `node`: the link whose target is
    /// the reply-to address, else whose name is, else the one attached to the node in the same
    /// session.
    pub(super) fn respond(
        &mut self,
        channel: u16,
        node: String,
        reply_to: Option<String>,
        payload: Bytes,
    ) {
        let mut chosen: Option<(u16, u32)> = None;
        if let Some(reply_to) = &reply_to {
            'outer: for (ch, session) in &self.sessions {
                for (h, link) in &session.links {
                    if let LinkState::Outbound(l) = link {
                        if l.target_address.as_deref() == Some(reply_to.as_str())
                            || &l.name == reply_to
                        {
                            chosen = Some((*ch, *h));
                            break 'outer;
                        }
                    }
                }
            }
        }
        if chosen.is_none() {
            if let Some(session) = self.sessions.get(&channel) {
                chosen = session.links.iter().find_map(|(h, l)| match l {
                    LinkState::Outbound(o)
                        if matches!(o.kind, Outbound::Responses { .. }) && o.path == node =>
                    {
                        Some((channel, *h))
                    }
                    _ => None,
                });
            }
        }
        self.note_payload(payload.len());
        let Some((ch, h)) = chosen else {
            tracing::debug!(node = %node, ?reply_to, "no response link for a request; response dropped");
            return;
        };
        if let Some(LinkState::Outbound(OutboundLink {
            kind: Outbound::Responses { pending },
            ..
        })) = self.sessions.get_mut(&ch).and_then(|s| s.links.get_mut(&h))
        {
            pending.push_back(payload);
        }
    }
}
