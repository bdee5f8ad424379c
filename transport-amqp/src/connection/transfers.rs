//! The client's transfers: reassembly of multi-frame deliveries, sends started on the broker,
//! requests handed to `$cbs` / `$management`, and the outcomes answered together.

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::definitions::Role;
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Rejected};
use fe2o3_amqp_types::performatives::{Disposition, Performative, Transfer};

use crate::codec;
use crate::error::WireError;
use crate::frame::{self};

use super::*;

/// The largest delivery to an entity we buffer; a larger one is refused once complete.
const MAX_DELIVERY_BYTES: usize = 100 * 1024 * 1024;
/// The largest request (`$management`, `$cbs`, coordinator) we buffer: the max-message-size
/// those links' attach announces, one frame's worth (1 MiB), however many transfers carry it.
const MAX_REQUEST_BYTES: usize = MAX_FRAME_SIZE as usize;
/// The message format of a batch: one data section per message.
const MSG_FORMAT_BATCH: u32 = 0x8001_3700;

/// A delivery being received over several frames.
#[derive(Debug)]
pub(super) struct Partial {
    pub(super) delivery_id: u32,
    pub(super) settled: bool,
    pub(super) format: u32,
    pub(super) bytes: BytesMut,
    pub(super) oversize: bool,
    /// The delivery's state (a transactional state names its transaction).
    pub(super) state: Option<DeliveryState>,
}

impl Connection {
    pub(super) async fn on_transfer(
        &mut self,
        channel: u16,
        transfer: Transfer,
        payload: Bytes,
    ) -> Result<(), WireError> {
        let session = self.session(channel)?;
        session.next_incoming_id = session.next_incoming_id.wrapping_add(1);
        let handle = transfer.handle.0;
        let Some(LinkState::Inbound(link)) = session.links.get_mut(&handle) else {
            return Err(WireError::new(
                "amqp:session:unattached-handle",
                400,
                format!("transfer on unknown handle {handle}"),
            ));
        };
        if transfer.aborted {
            link.partial = None;
            return Ok(());
        }
        let partial = match link.partial.take() {
            Some(p) => p,
            None => Partial {
                delivery_id: transfer.delivery_id.ok_or_else(|| {
                    WireError::new(
                        "amqp:invalid-field",
                        400,
                        "the first transfer of a delivery needs a delivery-id",
                    )
                })?,
                settled: transfer.settled.unwrap_or(false),
                format: transfer.message_format.unwrap_or(0),
                bytes: BytesMut::new(),
                oversize: false,
                state: None,
            },
        };
        let mut partial = partial;
        if partial.state.is_none() {
            partial.state = transfer.state;
        }
        let limit = match link.node {
            Node::Entity(_) => MAX_DELIVERY_BYTES,
            Node::Cbs | Node::Management(_) | Node::Coordinator => MAX_REQUEST_BYTES,
        };
        if transfer.more {
            if partial.bytes.len() + payload.len() > limit {
                partial.oversize = true;
                partial.bytes = BytesMut::new();
            } else if !partial.oversize {
                partial.bytes.extend_from_slice(&payload);
            }
            link.partial = Some(partial);
            return Ok(());
        }
        if !partial.oversize && partial.bytes.len() + payload.len() > limit {
            partial.oversize = true;
            partial.bytes = BytesMut::new();
        }
        let body = if partial.bytes.is_empty() && !partial.oversize {
            payload
        } else {
            if !partial.oversize {
                partial.bytes.extend_from_slice(&payload);
            }
            std::mem::take(&mut partial.bytes).freeze()
        };
        link.delivery_count = link.delivery_count.wrapping_add(1);
        link.credit = link.credit.saturating_sub(1);
        let node = link.node.clone();
        let path = link.path.clone();
        let delivery_id = partial.delivery_id;
        let settled = partial.settled;
        let oversize = partial.oversize;
        let txn = transactions::txn_id(partial.state.as_ref());
        if oversize && !matches!(node, Node::Entity(_)) {
            self.refuse_oversize_request(channel, handle, delivery_id, settled, &path);
            return Ok(());
        }
        match node {
            Node::Entity(address) => {
                link.in_flight += 1;
                let via = link.via.clone();
                let messages = if oversize {
                    Err(WireError::new(
                        "amqp:link:message-size-exceeded",
                        413,
                        "the message exceeds the largest delivery ironbus accepts",
                    ))
                } else {
                    decode_send(&body, partial.format)
                };
                if txn.is_some() || via.is_some() {
                    // In a transaction, or through a send-via link (`transactions.rs`).
                    let at = (channel, handle, delivery_id, settled);
                    self.start_special_send(at, address, via, txn, messages);
                    return Ok(());
                }
                let result = messages.and_then(|messages| {
                    self.cx.broker.start_send(address, messages).map_err(WireError::from)
                });
                match result {
                    Ok(future) => self.pending.push(Box::pin(async move {
                        let result = future.await.map(|_| ()).map_err(WireError::from);
                        Event::Sent { channel, handle, delivery_id, settled, result, txn: None }
                    })),
                    Err(e) => self.pending.push(Box::pin(async move {
                        let result = Err(e);
                        Event::Sent { channel, handle, delivery_id, settled, result, txn: None }
                    })),
                }
            }
            Node::Cbs => {
                let request = RequestDelivery::new(channel, delivery_id, settled);
                self.on_cbs_request(request, &path, &body).await;
                self.top_up(channel, handle);
            }
            Node::Management(address) => {
                let request = RequestDelivery::new(channel, delivery_id, settled);
                self.on_management_request(request, path, address, &body, txn);
                self.top_up(channel, handle);
            }
            Node::Coordinator => self.on_control(channel, handle, delivery_id, settled, &body),
        }
        Ok(())
    }

    /// Refuses a request larger than [`MAX_REQUEST_BYTES`] with
    /// `amqp:link:message-size-exceeded`: an unsettled one in its disposition; a pre-settled
    /// one (no disposition would tell the client) by detaching its link with the error.
    fn refuse_oversize_request(
        &mut self,
        channel: u16,
        handle: u32,
        delivery_id: u32,
        settled: bool,
        path: &str,
    ) {
        let error = WireError::new(
            "amqp:link:message-size-exceeded",
            413,
            format!("a request to {path} may have at most {MAX_REQUEST_BYTES} bytes"),
        );
        if !settled {
            let state = DeliveryState::Rejected(Rejected { error: Some(error.to_amqp()) });
            self.write_ack(channel, delivery_id, delivery_id, state);
            self.top_up(channel, handle);
            return;
        }
        if let Some(session) = self.sessions.get_mut(&channel) {
            session.links.remove(&handle);
            session.forget_link(handle, false);
        }
        self.roll_back_declared_by(channel, Some(handle));
        let detach = fe2o3_amqp_types::performatives::Detach {
            handle: handle.into(),
            closed: true,
            error: Some(error.to_amqp()),
        };
        frame::write_performative(&mut self.out, channel, &Performative::Detach(detach));
    }

    /// Answers the client's stored (or refused) transfers: consecutive accepted deliveries of a
    /// session in one disposition range, each refusal on its own with its error.
    pub(super) fn write_acks(&mut self) {
        if self.acks.is_empty() {
            return;
        }
        let mut acks = std::mem::take(&mut self.acks);
        acks.sort_by_key(|(channel, id, error)| (*channel, error.is_some(), *id));
        let mut range: Option<(u16, u32, u32)> = None;
        for (channel, id, error) in acks.drain(..) {
            if let Some(error) = error {
                let state = DeliveryState::Rejected(Rejected { error: Some(error.to_amqp()) });
                self.write_ack(channel, id, id, state);
                continue;
            }
            match range {
                Some((c, first, last)) if c == channel && last.wrapping_add(1) == id => {
                    range = Some((c, first, id));
                }
                _ => {
                    if let Some((c, first, last)) = range {
                        self.write_ack(c, first, last, DeliveryState::Accepted(Accepted {}));
                    }
                    range = Some((channel, id, id));
                }
            }
        }
        if let Some((c, first, last)) = range {
            self.write_ack(c, first, last, DeliveryState::Accepted(Accepted {}));
        }
        self.acks = acks;
    }

    pub(super) fn write_ack(&mut self, channel: u16, first: u32, last: u32, state: DeliveryState) {
        let disposition = Disposition {
            role: Role::Receiver,
            first,
            last: (last != first).then_some(last),
            settled: true,
            state: Some(state),
            batchable: false,
        };
        frame::write_performative(&mut self.out, channel, &Performative::Disposition(disposition));
    }

    /// A disposition of one of our deliveries (we are its sender): its state and whether we
    /// settle it.
    pub(super) fn write_delivery_state(
        &mut self,
        channel: u16,
        delivery_id: u32,
        settled: bool,
        state: Option<DeliveryState>,
    ) {
        let disposition = Disposition {
            role: Role::Sender,
            first: delivery_id,
            last: None,
            settled,
            state,
            batchable: false,
        };
        frame::write_performative(&mut self.out, channel, &Performative::Disposition(disposition));
    }
}

/// Decodes what a client sent: one message, or a batch (format 0x80013700).
pub(super) fn decode_send(
    body: &Bytes,
    format: u32,
) -> Result<Vec<ironbus_core::Message>, WireError> {
    let decoded = if format == MSG_FORMAT_BATCH {
        codec::decode_batch(body.clone())
    } else {
        codec::decode_message(body.clone()).map(|m| vec![m])
    };
    decoded.map_err(|e| WireError::new("amqp:decode-error", 400, e.to_string()))
}
