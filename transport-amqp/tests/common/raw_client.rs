//! A hand-driven AMQP client on a raw socket, for tests that need frames as .NET and Java send
//! them (transactional states on pre-settled requests, request settlement), and the frames and
//! request messages it sends.

use std::time::Duration;

use fe2o3_amqp::types::definitions::{Handle, ReceiverSettleMode, Role, SenderSettleMode};
use fe2o3_amqp::types::messaging::{
    AmqpValue, ApplicationProperties, DeliveryState, MessageId, Properties, Source, Target,
    TargetArchetype,
};
use fe2o3_amqp::types::performatives::{Attach, Performative, Transfer};
use fe2o3_amqp::types::primitives::{OrderedMap, SimpleValue, Symbol, Value};
use ironbus_transport_amqp::frame::{FrameReader, InFrame};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

async fn guard<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), future).await.expect("hung")
}

/// A hand-driven client on a raw socket, authenticated with SASL PLAIN.
pub(crate) struct Raw {
    pub write: OwnedWriteHalf,
    pub reader: FrameReader<OwnedReadHalf>,
    /// Frames read and not yet asked for.
    pub seen: Vec<(u16, Performative, bytes::Bytes)>,
}

impl Raw {
    pub(crate) async fn connect(addr: &str) -> Raw {
        Raw::connect_with(addr, super::raw::sasl_init()).await
    }

    /// Connects with SASL ANONYMOUS: no claims, as the Rust SDK before its CBS put-token.
    pub(crate) async fn anonymous(addr: &str) -> Raw {
        let mut init = bytes::BytesMut::new();
        let anonymous = fe2o3_amqp::types::sasl::SaslInit {
            mechanism: Symbol::from("ANONYMOUS"),
            initial_response: None,
            hostname: None,
        };
        let frame = fe2o3_amqp::frames::sasl::Frame::Init(anonymous);
        ironbus_transport_amqp::frame::write_sasl(&mut init, &frame);
        Raw::connect_with(addr, init.to_vec()).await
    }

    pub(crate) async fn connect_with(addr: &str, sasl_init: Vec<u8>) -> Raw {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (read, write) = stream.into_split();
        let mut reader = FrameReader::new(read);
        reader.set_max_frame_size(1 << 20);
        let mut raw = Raw { write, reader, seen: Vec::new() };
        let mut hello = super::raw::SASL_HEADER.to_vec();
        hello.extend(sasl_init);
        hello.extend(super::raw::AMQP_HEADER);
        hello.extend(super::raw::open());
        raw.write(hello).await;
        raw.reader.read_header().await.unwrap();
        // The SASL mechanisms, then the outcome, then the AMQP header.
        while !matches!(
            guard(raw.reader.read_frame()).await.expect("a SASL frame"),
            InFrame::Sasl(fe2o3_amqp::frames::sasl::Frame::Outcome(_))
        ) {}
        raw.reader.read_header().await.unwrap();
        raw.expect(|_, p| matches!(p, Performative::Open(_))).await;
        raw
    }

    pub(crate) async fn write(&mut self, bytes: Vec<u8>) {
        self.write.write_all(&bytes).await.unwrap();
    }

    pub(crate) async fn frame(&mut self, channel: u16, performative: Performative) {
        let mut out = bytes::BytesMut::new();
        ironbus_transport_amqp::frame::write_performative(&mut out, channel, &performative);
        self.write(out.to_vec()).await;
    }

    pub(crate) async fn begin(&mut self, channel: u16) {
        let mut begin = super::raw::begin();
        // The channel is in bytes 6..8 of the frame header.
        begin[6..8].copy_from_slice(&channel.to_be_bytes());
        self.write(begin).await;
        self.expect(|ch, p| ch == channel && matches!(p, Performative::Begin(_))).await;
    }

    /// Reads until a frame `done` accepts (frames read before it are kept for later).
    pub(crate) async fn expect(
        &mut self,
        mut done: impl FnMut(u16, &Performative) -> bool,
    ) -> (u16, Performative, bytes::Bytes) {
        if let Some(i) = self.seen.iter().position(|(ch, p, _)| done(*ch, p)) {
            return self.seen.remove(i);
        }
        loop {
            match guard(self.reader.read_frame()).await.expect("a frame") {
                InFrame::Amqp { channel, performative, payload } => {
                    if done(channel, &performative) {
                        return (channel, *performative, payload);
                    }
                    self.seen.push((channel, *performative, payload));
                }
                InFrame::Sasl(_) | InFrame::Empty => {}
            }
        }
    }

    /// Attaches a link (sender when `role` is the sender role) and waits for the broker's
    /// attach; returns it.
    pub(crate) async fn attach(&mut self, channel: u16, attach: Attach) -> Attach {
        let handle = attach.handle.0;
        self.frame(channel, Performative::Attach(attach)).await;
        match self
            .expect(|ch, p| {
                ch == channel && matches!(p, Performative::Attach(a) if a.handle.0 == handle)
            })
            .await
        {
            (_, Performative::Attach(a), _) => a,
            _ => unreachable!(),
        }
    }

    /// Sends a transfer of `payload` on link `handle` (delivery `id`, tag = id).
    pub(crate) async fn transfer(
        &mut self,
        channel: u16,
        handle: u32,
        id: u32,
        settled: bool,
        state: Option<DeliveryState>,
        payload: Vec<u8>,
    ) {
        self.transfer_format(channel, (handle, id), settled, state, 0, payload).await;
    }

    /// Sends a transfer of `payload` in message format `format` on link `handle` (delivery
    /// `id`, tag = id).
    pub(crate) async fn transfer_format(
        &mut self,
        channel: u16,
        (handle, id): (u32, u32),
        settled: bool,
        state: Option<DeliveryState>,
        format: u32,
        payload: Vec<u8>,
    ) {
        let transfer = Transfer {
            handle: Handle(handle),
            delivery_id: Some(id),
            delivery_tag: Some(id.to_be_bytes().to_vec().into()),
            message_format: Some(format),
            settled: Some(settled),
            more: false,
            rcv_settle_mode: None,
            state,
            resume: false,
            aborted: false,
            batchable: false,
        };
        let mut out = bytes::BytesMut::new();
        ironbus_transport_amqp::frame::write_transfer(
            &mut out,
            channel,
            transfer,
            payload.into(),
            65536,
        );
        self.write(out.to_vec()).await;
    }

    /// The broker's disposition (as receiver of our transfers) of delivery `id`.
    pub(crate) async fn outcome(&mut self, channel: u16, id: u32) -> DeliveryState {
        let (_, p, _) = self
            .expect(|ch, p| {
                ch == channel
                    && matches!(p, Performative::Disposition(d)
                        if d.role == Role::Receiver && d.first <= id && id <= d.last.unwrap_or(d.first))
            })
            .await;
        match p {
            Performative::Disposition(d) => {
                assert!(d.settled);
                d.state.expect("a state")
            }
            _ => unreachable!(),
        }
    }

    /// The status and error condition of the next management response (on channel 1,
    /// handle 1).
    pub(crate) async fn response(&mut self) -> (i32, Option<String>) {
        let (_, _, payload) = self
            .expect(|ch, p| ch == 1 && matches!(p, Performative::Transfer(t) if t.handle.0 == 1))
            .await;
        status(&payload)
    }
}

pub(crate) fn value<T: serde::Serialize>(value: T) -> Vec<u8> {
    serde_amqp::to_vec(&AmqpValue(value)).unwrap()
}

pub(crate) fn link_attach(handle: u32, role: Role, address: &str, target: Option<&str>) -> Attach {
    let sender = role == Role::Sender;
    let (source, target) = match role {
        Role::Sender => (None, Some(address.to_owned())),
        Role::Receiver => (Some(address.to_owned()), target.map(str::to_owned)),
    };
    Attach {
        name: format!("link-{handle}"),
        handle: Handle(handle),
        role,
        snd_settle_mode: SenderSettleMode::Unsettled,
        rcv_settle_mode: ReceiverSettleMode::Second,
        source: Some(Box::new(Source::builder().address(source.unwrap_or_default()).build())),
        target: Some(Box::new(TargetArchetype::Target(Target {
            address: target,
            ..Target::builder().build()
        }))),
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count: sender.then_some(0),
        max_message_size: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

/// A link's flow giving `credit` (channel 0's framing, rewritten for `channel`).
pub(crate) fn flow(channel: u16, handle: u32, credit: u32) -> Vec<u8> {
    let mut flow = super::raw::flow(Some(handle), credit, false);
    flow[6..8].copy_from_slice(&channel.to_be_bytes());
    flow
}

/// A `$management` request message for `operation` with `body` (message-id `id`).
pub(crate) fn request(operation: &str, id: u64, reply_to: &str, body: Value) -> Vec<u8> {
    let properties = Properties::builder()
        .message_id(MessageId::Ulong(id))
        .reply_to(reply_to.to_owned())
        .build();
    let application = ApplicationProperties::builder().insert("operation", operation).build();
    let mut out = serde_amqp::to_vec(&properties).unwrap();
    out.extend(serde_amqp::to_vec(&application).unwrap());
    out.extend(value(body));
    out
}

pub(crate) fn map(entries: Vec<(&str, Value)>) -> Value {
    let mut m = OrderedMap::new();
    for (k, v) in entries {
        m.insert(Value::String(k.to_owned()), v);
    }
    Value::Map(m)
}

/// Status and error condition of a management response payload.
pub(crate) fn status(payload: &[u8]) -> (i32, Option<String>) {
    let request = ironbus_transport_amqp::request::Request::decode(payload).unwrap();
    let status = match request.application_properties.get("statusCode") {
        Some(SimpleValue::Int(s)) => *s,
        other => panic!("statusCode {other:?}"),
    };
    (status, request.property("errorCondition"))
}
