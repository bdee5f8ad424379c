//! Request/response nodes: request deliveries accepted, `$management` requests authorized and
//! started on the broker, and responses routed to the client's response link.
//!
//! A `$management` request is authorized by the right its operation names. A request sent
//! unsettled is accepted after its response is handed to the response link, so that when the
//! link has credit the response is written before the disposition: a sync client that reads
//! one frame at a time from several threads stops reading at its response, and the disposition
//! behind it ends the read of a thread whose response another thread took. Without credit on
//! the response link the disposition goes first and the response waits for credit.

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
    /// Accepts a request delivery (`$cbs`, `$management`) that the client sent unsettled.
    fn settle_request(&mut self, request: RequestDelivery) {
        let Some(delivery_id) = request.unsettled else { return };
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
            request.channel,
            &Performative::Disposition(disposition),
        );
    }

    pub(super) fn on_management_request(
        &mut self,
        request_at: RequestDelivery,
        path: String,
        address: EntityAddress,
        body: &[u8],
        txn: Option<fe2o3_amqp_types::primitives::Binary>,
    ) {
        let request = match Request::decode(body) {
            Ok(r) => r,
            Err(e) => {
                let payload = encode_error(None, Dialect::Management, &e);
                return self.respond(request_at, path, None, payload);
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
                return self.respond(request_at, path, reply_to, payload);
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
                return self.respond(request_at, path, reply_to, payload);
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
            Event::Response { request: request_at, node: path, reply_to, payload }
        });
        if in_transaction {
            // Its work reaches the transaction now, before a discharge read after it.
            if let Some(event) = (&mut request).now_or_never() {
                return self.pending.push(Box::pin(async move { event }));
            }
        }
        self.pending.push(request);
    }

    /// Sends a response on the client's response link for `node` (the link whose target is
    /// the reply-to address, else whose name is, else the one attached to the node in the same
    /// session), then settles the request. The response goes first when the link has credit:
    /// a client that reads one frame at a time from several threads (the sync Python SDK) stops
    /// reading once it has its response, and the disposition behind it ends the read of a
    /// thread whose response another thread took, instead of that read waiting out its
    /// time-out while holding the socket.
    pub(super) fn respond(
        &mut self,
        request: RequestDelivery,
        node: String,
        reply_to: Option<String>,
        payload: Bytes,
    ) {
        let channel = request.channel;
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
            return self.settle_request(request);
        };
        if let Some(LinkState::Outbound(OutboundLink {
            kind: Outbound::Responses { pending },
            ..
        })) = self.sessions.get_mut(&ch).and_then(|s| s.links.get_mut(&h))
        {
            pending.push_back(payload);
        }
        if !self.writes_paused() {
            self.pump_link(ch, h);
        }
        self.settle_request(request);
    }
}

/// A `$cbs` or `$management` request delivery: the session it arrived on, and its delivery id
/// while the client awaits its settlement (it was sent unsettled).
#[derive(Clone, Copy, Debug)]
pub(super) struct RequestDelivery {
    pub(super) channel: u16,
    pub(super) unsettled: Option<u32>,
}

impl RequestDelivery {
    pub(super) fn new(channel: u16, delivery_id: u32, settled: bool) -> Self {
        Self { channel, unsettled: (!settled).then_some(delivery_id) }
    }
}
