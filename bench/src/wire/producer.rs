//! A producer on the lean client: one sender link, up to `window` unsettled sends in flight.

use std::{collections::VecDeque, sync::atomic::Ordering, time::Instant};

use anyhow::{bail, Context, Result};
use bytes::{BufMut, Bytes, BytesMut};
use fe2o3_amqp_types::{
    definitions::{Handle, Role, SenderSettleMode},
    messaging::DeliveryState,
    performatives::{Disposition, Flow, Performative},
};
use ironbus_transport_amqp::frame;
use tokio::sync::watch;

use super::{Link, Wire, CHANNEL, HANDLE};
use crate::{
    payload,
    producer::{aborted, ProducerReport},
    Participant, Phase, Producing, Run,
};

/// The header section of a durable message: `header` with `durable = true`.
const DURABLE_HEADER: [u8; 7] = [0x00, 0x53, 0x70, 0xc0, 0x02, 0x01, 0x41];
/// Bytes of a hand-encoded transfer performative (see [`write_transfer`]).
const TRANSFER_LEN: usize = 21;
/// Bytes of a frame header.
const FRAME_HEADER_LEN: usize = 8;

/// A producer, connected and attached, that has not sent yet.
#[derive(Debug)]
pub(crate) struct Producer {
    wire: Wire,
    /// Which producer of the run this is (picks its sessions).
    index: u32,
    count: u64,
    /// Our link's delivery count: transfers sent.
    delivery_count: u32,
    /// The first delivery count the broker's link credit does not admit.
    credit_limit: u32,
}

impl Participant for Producer {
    type Kind = Producing;

    /// Connects producer number `index` of the run and attaches its sender to the address.
    async fn attach(run: &Run, index: u32) -> Result<Producer> {
        let name = run.link_name('p', index);
        let mut wire = Wire::open(run.endpoint(index), &name).await?;
        let link = Link {
            name: format!("{name}-sender"),
            role: Role::Sender,
            snd_settle_mode: SenderSettleMode::Unsettled,
            source: name.clone(),
            target: run.options.address.clone(),
        };
        wire.attach(link)
            .await
            .with_context(|| format!("{name}: attaching a sender to {}", run.options.address))?;
        let count = run.options.share(index);
        Ok(Producer { wire, index, count, delivery_count: 0, credit_limit: 0 })
    }

    fn name(&self) -> &str {
        &self.wire.name
    }

    /// Sends this producer's share, keeping at most `window` sends unsettled, until all are
    /// acknowledged or the run is aborted.
    async fn work(
        &mut self,
        run: &Run,
        phase: &mut watch::Receiver<Phase>,
        report: &mut ProducerReport,
    ) -> Result<()> {
        let window = u64::from(run.options.window);
        let size = usize::try_from(run.options.size).unwrap_or(usize::MAX);
        let durable = run.options.durable;
        // Whether each delivery id from `oldest` on has been settled by the broker.
        let mut settled: VecDeque<bool> = VecDeque::new();
        let mut oldest: u32 = 0;
        let (mut sent, mut acknowledged) = (0u64, 0u64);
        while acknowledged < self.count {
            while sent < self.count
                && (settled.len() as u64) < window
                && self.credit_limit != self.delivery_count
                && self.wire.window_open()
            {
                let session = run.options.session_of(self.index, sent);
                let message = encode(size, durable, session.as_deref(), run.id);
                let wire = &mut self.wire;
                let frames = write_transfer(
                    &mut wire.out,
                    wire.peer_max_frame,
                    self.delivery_count,
                    message,
                );
                wire.next_outgoing_id = wire.next_outgoing_id.wrapping_add(frames);
                self.delivery_count = self.delivery_count.wrapping_add(1);
                settled.push_back(false);
                sent += 1;
            }
            self.wire.flush().await?;
            let (performative, _) = tokio::select! {
                frame = self.wire.next_frame() => frame?,
                _ = aborted(phase) => return Ok(()),
            };
            let mut next = Some(performative);
            while let Some(performative) = next.take() {
                let newly = self.on_frame(performative, &mut settled, &mut oldest)?;
                if newly > 0 {
                    acknowledged += newly;
                    run.counters.acknowledged.fetch_add(newly, Ordering::Relaxed);
                }
                if self.wire.reader.has_frame() {
                    next = Some(self.wire.next_frame().await?.0);
                }
            }
        }
        report.finished_at = Some(Instant::now());
        Ok(())
    }

    async fn close(self) {
        self.wire.close().await;
    }
}

impl Producer {
    /// Applies a frame from the broker; returns how many sends it newly acknowledged.
    fn on_frame(
        &mut self,
        performative: Performative,
        settled: &mut VecDeque<bool>,
        oldest: &mut u32,
    ) -> Result<u64> {
        match performative {
            Performative::Flow(Flow {
                next_incoming_id,
                incoming_window,
                handle,
                delivery_count,
                link_credit,
                ..
            }) => {
                self.wire.on_session_flow(next_incoming_id, incoming_window);
                if handle == Some(Handle(HANDLE)) {
                    if let Some(credit) = link_credit {
                        let base = delivery_count.unwrap_or(self.delivery_count);
                        self.credit_limit = base.wrapping_add(credit);
                    }
                }
                Ok(0)
            }
            Performative::Disposition(Disposition {
                role: Role::Receiver,
                first,
                last,
                state,
                ..
            }) => {
                let last = last.unwrap_or(first);
                let mut newly = 0;
                for id in first..=last {
                    let Ok(index) = usize::try_from(id.wrapping_sub(*oldest)) else { continue };
                    let Some(done) = settled.get_mut(index) else { continue };
                    if *done {
                        continue;
                    }
                    match &state {
                        Some(DeliveryState::Accepted(_)) => {}
                        other => bail!("a message was not accepted: {other:?}"),
                    }
                    *done = true;
                    newly += 1;
                }
                while settled.front() == Some(&true) {
                    settled.pop_front();
                    *oldest = oldest.wrapping_add(1);
                }
                Ok(newly)
            }
            Performative::Detach(detach) => {
                bail!("the broker detached the link: {}", super::describe(detach.error.as_ref()))
            }
            _ => Ok(0),
        }
    }
}

/// Appends a transfer of `message` as delivery `id` (its tag: the id's four bytes), split if
/// `max_frame` needs it; returns the number of frames (transfer ids) used.
fn write_transfer(out: &mut BytesMut, max_frame: u32, id: u32, message: Bytes) -> u32 {
    let frame_len = FRAME_HEADER_LEN + TRANSFER_LEN + message.len();
    if frame_len > max_frame as usize {
        let transfer = frame::delivery_transfer(HANDLE, id, id.to_be_bytes().to_vec(), false);
        return frame::write_transfer(out, CHANNEL, transfer, message, max_frame);
    }
    out.reserve(frame_len);
    out.put_u32(frame_len as u32);
    out.put_slice(&[2, 0]); // data offset (words), AMQP frame
    out.put_u16(CHANNEL);
    // transfer: handle 0, delivery-id, delivery-tag, message-format 0, settled false, more false
    out.put_slice(&[0x00, 0x53, 0x14, 0xc0, 16, 6, 0x43, 0x70]);
    out.put_u32(id);
    out.put_slice(&[0xa0, 4]);
    out.put_u32(id);
    out.put_slice(&[0x43, 0x42, 0x42]);
    out.put_slice(&message);
    1
}

/// An encoded message: a durable header if asked for, properties with group-id (the SessionId)
/// if a session is given, then one data section with the stamped body.
fn encode(size: usize, durable: bool, session: Option<&str>, run_id: u64) -> Bytes {
    let body = payload::body(size, payload::now_nanos(), run_id);
    let session_len = session.map_or(0, |s| s.len().min(255));
    let mut message =
        BytesMut::with_capacity(DURABLE_HEADER.len() + 8 + 18 + session_len + body.len());
    if durable {
        message.put_slice(&DURABLE_HEADER);
    }
    if let Some(session) = session {
        // properties: a list8 of 11 fields, the first ten null, group-id a str8
        let session = &session.as_bytes()[..session_len];
        message.put_slice(&[0x00, 0x53, 0x73, 0xc0, (1 + 10 + 2 + session_len) as u8, 11]);
        message.put_slice(&[0x40; 10]);
        message.put_slice(&[0xa1, session_len as u8]);
        message.put_slice(session);
    }
    message.put_slice(&[0x00, 0x53, 0x75]);
    match u8::try_from(body.len()) {
        Ok(len) => message.put_slice(&[0xa0, len]),
        Err(_) => {
            message.put_u8(0xb0);
            message.put_u32(u32::try_from(body.len()).unwrap_or(u32::MAX));
        }
    }
    message.put_slice(&body);
    message.freeze()
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp_types::messaging::{message::__private::Deserializable, Body, Message};
    use serde_amqp::Value;

    use super::*;

    #[test]
    fn an_encoded_message_decodes_as_a_durable_data_message() {
        for size in [16, 300] {
            let bytes = encode(size, true, None, 9);
            let Deserializable(message): Deserializable<Message<Body<Value>>> =
                serde_amqp::from_slice(&bytes).unwrap();
            assert!(message.header.unwrap().durable);
            let Body::Data(batch) = message.body else { panic!("not data: {:?}", message.body) };
            let data = batch.into_iter().next().unwrap();
            assert_eq!(data.0.len(), size);
            assert_eq!(payload::read(&data.0).unwrap().run_id, 9);
            assert_eq!(super::super::first_data(&bytes).unwrap().len(), size);
        }
        assert!(encode(16, false, None, 1).starts_with(&[0x00, 0x53, 0x75]));
    }

    #[test]
    fn a_session_message_carries_its_session_as_group_id() {
        let bytes = encode(1024, true, Some("session-17"), 5);
        let Deserializable(message): Deserializable<Message<Body<Value>>> =
            serde_amqp::from_slice(&bytes).unwrap();
        assert!(message.header.unwrap().durable);
        let properties = message.properties.unwrap();
        assert_eq!(properties.group_id.as_deref(), Some("session-17"));
        assert_eq!(properties.message_id, None);
        let Body::Data(batch) = message.body else { panic!("not data: {:?}", message.body) };
        assert_eq!(batch.into_iter().next().unwrap().0.len(), 1024);
        assert_eq!(payload::read(super::super::first_data(&bytes).unwrap()).unwrap().run_id, 5);
    }

    #[tokio::test]
    async fn a_transfer_decodes_as_the_transfer_it_stands_for_whole_or_split() {
        for (max_frame, size) in [(1 << 20, 1024), (512, 2000)] {
            let message = encode(size, true, None, 3);
            let mut out = BytesMut::new();
            let frames = write_transfer(&mut out, max_frame, 0x0102_0304, message.clone());
            let mut reader = frame::FrameReader::new(&out[..]);
            reader.set_max_frame_size(max_frame);
            let mut payload = Vec::new();
            for index in 0..frames {
                let frame::InFrame::Amqp { channel, performative, payload: part } =
                    reader.read_frame().await.unwrap()
                else {
                    panic!("not an AMQP frame")
                };
                let Performative::Transfer(transfer) = *performative else {
                    panic!("not a transfer")
                };
                assert_eq!((channel, transfer.handle.clone()), (CHANNEL, Handle(HANDLE)));
                assert_eq!(transfer.more, index + 1 < frames);
                if index == 0 {
                    assert_eq!(transfer.delivery_id, Some(0x0102_0304));
                    assert_eq!(transfer.delivery_tag.unwrap().as_ref(), &[1, 2, 3, 4]);
                    assert_eq!((transfer.message_format, transfer.settled), (Some(0), Some(false)));
                }
                payload.extend_from_slice(&part);
            }
            assert_eq!(payload, message);
            assert!(!reader.has_frame());
            assert_eq!(frames > 1, max_frame == 512);
        }
    }
}
