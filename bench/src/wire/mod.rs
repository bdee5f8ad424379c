//! `--client wire`: a lean AMQP 1.0 client written for this load generator, on the frame codec
//! of ironbus's AMQP transport (`ironbus_transport_amqp::frame`).
//!
//! Why: the load generator shares the machine's cores with the broker it measures, so every
//! microsecond it spends per message is taken from the broker. fe2o3-amqp's client (still
//! available as `--client fe2o3`) writes each frame with its own system call and runs each link
//! as several tasks; this client runs one connection, session and link per task, writes whatever
//! a burst produced with one call, encodes its transfers by hand and reads bodies without
//! decoding the sections around them. The frames on the wire are the ones any AMQP client sends:
//! one transfer per message, one disposition per accepted range, flows to grant credit.
//!
//! Invariants:
//! - One connection carries one session (channel 0) and one link (handle 0).
//! - A producer never sends beyond the link credit or the session window the broker granted.
//! - Frames queued in `out` are written before waiting for the broker (`flush`).

mod consumer;
mod producer;

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use bytes::BytesMut;
use fe2o3_amqp::frames::sasl;
use fe2o3_amqp_types::{
    definitions::{self, Handle, ReceiverSettleMode, Role, SenderSettleMode},
    messaging::{Source, Target},
    performatives::{Attach, Begin, Close, Detach, End, Open, Performative},
    primitives::{Binary, Symbol},
    sasl::{SaslCode, SaslInit},
};
use ironbus_transport_amqp::frame::{self, FrameReader, InFrame, ProtocolHeader};
use tokio::{
    io::AsyncWriteExt,
    net::{
        tcp::{OwnedReadHalf, OwnedWriteHalf},
        TcpStream,
    },
};

pub(crate) use consumer::Consumer;
pub(crate) use producer::Producer;

use crate::endpoint::{Endpoint, Login};

/// The largest frame this client accepts.
const MAX_FRAME_SIZE: u32 = 1 << 20;
/// The session window this client offers: large enough never to hold a broker back in a run.
const SESSION_WINDOW: u32 = 1 << 30;
/// The one session's channel and the one link's handle.
const CHANNEL: u16 = 0;
const HANDLE: u32 = 0;
/// How long closing waits for the broker's `close`.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The link a producer or consumer attaches: rcv-settle-mode first, handle 0.
#[derive(Debug)]
struct Link {
    name: String,
    /// Our role.
    role: Role,
    snd_settle_mode: SenderSettleMode,
    /// The addresses of the source and the target.
    source: String,
    target: String,
}

/// One connection with one session on it.
#[derive(Debug)]
struct Wire {
    /// Who this is, for errors.
    name: String,
    reader: FrameReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    /// Frames waiting for `flush`.
    out: BytesMut,
    /// The broker's largest frame.
    peer_max_frame: u32,
    /// The transfer id of our next transfer frame.
    next_outgoing_id: u32,
    /// The first transfer id the broker's session window does not admit.
    outgoing_limit: u32,
    /// The transfer id of the broker's next transfer frame.
    next_incoming_id: u32,
}

impl Wire {
    /// Connects, authenticates (SASL ANONYMOUS or PLAIN), opens the connection and begins the
    /// session.
    async fn open(endpoint: &Endpoint, container_id: &str) -> Result<Wire> {
        let login = endpoint.login().context("--client wire")?;
        let stream = TcpStream::connect(endpoint.host_port())
            .await
            .with_context(|| format!("connecting to {}", endpoint.shown_url()))?;
        // Small flow and disposition frames must not wait for delayed ACKs.
        stream.set_nodelay(true).context("setting TCP_NODELAY")?;
        let (read, writer) = stream.into_split();
        let mut wire = Wire {
            name: container_id.to_owned(),
            reader: FrameReader::new(read),
            writer,
            out: BytesMut::with_capacity(64 * 1024),
            peer_max_frame: frame::MIN_MAX_FRAME_SIZE,
            next_outgoing_id: 0,
            outgoing_limit: 0,
            next_incoming_id: 0,
        };
        wire.authenticate(&login, endpoint.host()).await?;

        wire.out.extend_from_slice(&ProtocolHeader::Amqp.bytes());
        let open = Open {
            container_id: container_id.to_owned(),
            hostname: Some(endpoint.host().to_owned()),
            max_frame_size: MAX_FRAME_SIZE.into(),
            channel_max: 0.into(),
            idle_time_out: None,
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        frame::write_performative(&mut wire.out, 0, &Performative::Open(open));
        let begin = Begin {
            remote_channel: None,
            next_outgoing_id: 0,
            incoming_window: SESSION_WINDOW,
            outgoing_window: SESSION_WINDOW,
            handle_max: Handle(0),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        frame::write_performative(&mut wire.out, CHANNEL, &Performative::Begin(begin));
        wire.flush().await?;
        wire.reader.set_max_frame_size(MAX_FRAME_SIZE);
        match wire.reader.read_header().await.context("reading the AMQP header")? {
            ProtocolHeader::Amqp => {}
            other => bail!("the broker answered the AMQP header with {:?}", other.bytes()),
        }
        match wire.next_performative().await? {
            Performative::Open(open) => wire.peer_max_frame = open.max_frame_size.0,
            other => bail!("expected open, got {other:?}"),
        }
        match wire.next_performative().await? {
            Performative::Begin(begin) => {
                wire.next_incoming_id = begin.next_outgoing_id;
                wire.outgoing_limit = begin.incoming_window;
            }
            other => bail!("expected begin, got {other:?}"),
        }
        Ok(wire)
    }

    async fn authenticate(&mut self, login: &Login<'_>, host: &str) -> Result<()> {
        self.out.extend_from_slice(&ProtocolHeader::Sasl.bytes());
        self.flush().await?;
        match self.reader.read_header().await.context("reading the SASL header")? {
            ProtocolHeader::Sasl => {}
            other => bail!("the broker answered the SASL header with {:?}", other.bytes()),
        }
        let offered = match self.reader.read_frame().await.context("reading SASL mechanisms")? {
            InFrame::Sasl(sasl::Frame::Mechanisms(m)) => m.sasl_server_mechanisms,
            other => bail!("expected sasl-mechanisms, got {other:?}"),
        };
        let (mechanism, response) = match login {
            Login::Anonymous => ("ANONYMOUS", None),
            Login::Plain { username, password } => {
                let mut response = Vec::with_capacity(2 + username.len() + password.len());
                response.push(0);
                response.extend_from_slice(username.as_bytes());
                response.push(0);
                response.extend_from_slice(password.as_bytes());
                ("PLAIN", Some(Binary::from(response)))
            }
        };
        if !offered.iter().any(|m| m.as_str() == mechanism) {
            bail!("the broker does not offer SASL {mechanism} (it offers {offered:?})");
        }
        let init = SaslInit {
            mechanism: Symbol::from(mechanism),
            initial_response: response,
            hostname: Some(host.to_owned()),
        };
        frame::write_sasl(&mut self.out, &sasl::Frame::Init(init));
        self.flush().await?;
        match self.reader.read_frame().await.context("reading the SASL outcome")? {
            InFrame::Sasl(sasl::Frame::Outcome(outcome)) if outcome.code == SaslCode::Ok => Ok(()),
            InFrame::Sasl(sasl::Frame::Outcome(outcome)) => {
                bail!("SASL {mechanism} refused: {:?}", outcome.code)
            }
            other => bail!("expected sasl-outcome, got {other:?}"),
        }
    }

    /// Writes the queued frames.
    async fn flush(&mut self) -> Result<()> {
        if !self.out.is_empty() {
            self.writer.write_all(&self.out).await.context("writing to the broker")?;
            self.out.clear();
        }
        Ok(())
    }

    /// The next frame's performative (heartbeats skipped), with its payload. A `close` or an
    /// `end` from the broker is an error carrying the broker's reason.
    async fn next_frame(&mut self) -> Result<(Performative, bytes::Bytes)> {
        loop {
            match self
                .reader
                .read_frame()
                .await
                .with_context(|| format!("{}: reading", self.name))?
            {
                InFrame::Empty => continue,
                InFrame::Amqp { performative, payload, .. } => match *performative {
                    Performative::Close(Close { error }) => {
                        bail!("the broker closed the connection: {}", describe(error.as_ref()))
                    }
                    Performative::End(End { error }) => {
                        bail!("the broker ended the session: {}", describe(error.as_ref()))
                    }
                    performative => return Ok((performative, payload)),
                },
                InFrame::Sasl(frame) => bail!("unexpected SASL frame {frame:?}"),
            }
        }
    }

    async fn next_performative(&mut self) -> Result<Performative> {
        Ok(self.next_frame().await?.0)
    }

    /// Attaches the connection's one link and waits for the broker's answer; returns the
    /// broker's initial delivery count (what a receiver counts deliveries from).
    async fn attach(&mut self, link: Link) -> Result<u32> {
        let ours = link.role.clone();
        let attach = Attach {
            name: link.name,
            handle: Handle(HANDLE),
            role: link.role,
            snd_settle_mode: link.snd_settle_mode,
            rcv_settle_mode: ReceiverSettleMode::First,
            source: Some(Box::new(Source::builder().address(link.source).build())),
            target: Some(Box::new(Target::builder().address(link.target).build().into())),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: (ours == Role::Sender).then_some(0),
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        frame::write_performative(&mut self.out, CHANNEL, &Performative::Attach(attach));
        self.flush().await?;
        let theirs = match ours {
            Role::Sender => Role::Receiver,
            Role::Receiver => Role::Sender,
        };
        self.attached(theirs).await
    }

    /// The broker's answer to our attach, in the `role` opposite ours; returns its initial
    /// delivery count. A refusal (an attach without the broker's terminus — the source when it
    /// sends, the target when it receives — then a detach) is an error with the broker's reason.
    async fn attached(&mut self, role: Role) -> Result<u32> {
        loop {
            match self.next_performative().await? {
                Performative::Attach(attach) if attach.role == role => {
                    let terminus = match role {
                        Role::Sender => attach.source.is_some(),
                        Role::Receiver => attach.target.is_some(),
                    };
                    if terminus {
                        return Ok(attach.initial_delivery_count.unwrap_or(0));
                    }
                    let reason = match self.next_performative().await {
                        Ok(Performative::Detach(Detach { error, .. })) => describe(error.as_ref()),
                        Ok(other) => format!("then {other:?}"),
                        Err(err) => format!("{err:#}"),
                    };
                    bail!("the broker refused the link: {reason}");
                }
                Performative::Detach(Detach { error, .. }) => {
                    bail!("the broker detached the link: {}", describe(error.as_ref()))
                }
                // A flow may come before or after the attach; what it grants is read later.
                Performative::Flow(_) => continue,
                other => bail!("expected an attach as {role:?}, got {other:?}"),
            }
        }
    }

    /// Applies the session part of a flow from the broker.
    fn on_session_flow(&mut self, next_incoming_id: Option<u32>, incoming_window: u32) {
        // Without next-incoming-id the broker has seen none of our transfers yet.
        self.outgoing_limit = next_incoming_id.unwrap_or(0).wrapping_add(incoming_window);
    }

    /// Whether the broker's session window admits another transfer frame.
    fn window_open(&self) -> bool {
        (self.outgoing_limit.wrapping_sub(self.next_outgoing_id) as i32) > 0
    }

    /// Detaches the link, ends the session and closes the connection, waiting a little for the
    /// broker's `close`. Errors are reported, not returned: the run's figures are already in.
    async fn close(mut self) {
        let detach = Detach { handle: Handle(HANDLE), closed: true, error: None };
        frame::write_performative(&mut self.out, CHANNEL, &Performative::Detach(detach));
        frame::write_performative(&mut self.out, CHANNEL, &Performative::End(End { error: None }));
        frame::write_performative(&mut self.out, 0, &Performative::Close(Close { error: None }));
        if let Err(err) = self.flush().await {
            eprintln!("ironbus-bench: {}: closing: {err:#}", self.name);
            return;
        }
        let closed = async {
            loop {
                match self.reader.read_frame().await {
                    Ok(InFrame::Amqp { performative, .. })
                        if matches!(*performative, Performative::Close(_)) =>
                    {
                        return Ok(())
                    }
                    Ok(_) => continue,
                    Err(err) => return Err(anyhow!(err)),
                }
            }
        };
        match tokio::time::timeout(CLOSE_GRACE, closed).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => eprintln!("ironbus-bench: {}: closing: {err:#}", self.name),
            Err(_) => eprintln!("ironbus-bench: {}: no close from the broker", self.name),
        }
    }
}

/// `condition: description` of an error from the broker.
fn describe(error: Option<&definitions::Error>) -> String {
    let Some(error) = error else { return "no error given".to_owned() };
    let condition = match serde_amqp::to_value(&error.condition) {
        Ok(serde_amqp::Value::Symbol(symbol)) => symbol.0,
        _ => format!("{:?}", error.condition),
    };
    match &error.description {
        Some(description) => format!("{condition}: {description}"),
        None => condition,
    }
}

/// The body of the first data section of an encoded message, if it has one.
fn first_data(message: &[u8]) -> Option<&[u8]> {
    let mut at = 0;
    while at < message.len() {
        // Every section is a described value: 0x00, a descriptor, the value.
        if message[at] != 0x00 {
            return None;
        }
        let code = match *message.get(at + 1)? {
            0x53 => u64::from(*message.get(at + 2)?),
            0x80 => u64::from_be_bytes(message.get(at + 2..at + 10)?.try_into().ok()?),
            _ => u64::MAX, // a symbolic descriptor: not one of the standard sections
        };
        let value = skip_value(message, at + 1)?;
        if code == 0x75 {
            let (start, len) = match *message.get(value)? {
                0xa0 => (value + 2, usize::from(*message.get(value + 1)?)),
                0xb0 => {
                    let len =
                        u32::from_be_bytes(message.get(value + 1..value + 5)?.try_into().ok()?);
                    (value + 5, usize::try_from(len).ok()?)
                }
                _ => return None,
            };
            return message.get(start..start.checked_add(len)?);
        }
        at = skip_value(message, value)?;
    }
    None
}

/// Where the AMQP-encoded value starting at `at` ends, or `None` if it is malformed.
fn skip_value(bytes: &[u8], at: usize) -> Option<usize> {
    let code = *bytes.get(at)?;
    let at = at + 1;
    let sized = |width: usize| -> Option<usize> {
        let size = match width {
            1 => usize::from(*bytes.get(at)?),
            _ => {
                usize::try_from(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?)).ok()?
            }
        };
        (at + width).checked_add(size)
    };
    let end = match code {
        0x00 => {
            let value = skip_value(bytes, at)?;
            return skip_value(bytes, value);
        }
        0x40..=0x4f => at,
        0x50..=0x5f => at + 1,
        0x60..=0x6f => at + 2,
        0x70..=0x7f => at + 4,
        0x80..=0x8f => at + 8,
        0x90..=0x9f => at + 16,
        0xa0..=0xaf | 0xc0..=0xcf | 0xe0..=0xef => sized(1)?,
        0xb0..=0xbf | 0xd0..=0xdf | 0xf0..=0xff => sized(4)?,
        _ => return None,
    };
    (end <= bytes.len()).then_some(end)
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp_types::messaging::{
        message::__private::Serializable, AmqpValue, Data, Header, Message, MessageId, Properties,
        SerializableBody,
    };

    use super::*;

    fn encode<B: SerializableBody>(message: Message<B>) -> Vec<u8> {
        serde_amqp::to_vec(&Serializable(&message)).unwrap()
    }

    #[test]
    fn finds_the_data_section_behind_any_other_section() {
        let message = Message::builder()
            .header(Header { durable: true, ..Header::default() })
            .properties(Properties {
                message_id: Some(MessageId::String("id-1".to_owned())),
                ..Properties::default()
            })
            .application_properties(
                fe2o3_amqp_types::messaging::ApplicationProperties::builder()
                    .insert("k", 7i64)
                    .build(),
            )
            .body(Data(Binary::from(vec![7u8; 300])))
            .build();
        assert_eq!(first_data(&encode(message)), Some(&[7u8; 300][..]));
        let short = Message::builder().body(Data(Binary::from(vec![1u8, 2, 3]))).build();
        assert_eq!(first_data(&encode(short)), Some(&[1u8, 2, 3][..]));
    }

    #[test]
    fn a_message_without_data_or_cut_short_has_none() {
        let value = Message::builder().body(AmqpValue("text".to_owned())).build();
        assert_eq!(first_data(&encode(value)), None);
        let data = encode(Message::builder().body(Data(Binary::from(vec![1u8; 40]))).build());
        assert_eq!(first_data(&data[..data.len() - 1]), None);
        assert_eq!(first_data(&[0x00, 0x53]), None);
        assert_eq!(first_data(&[0x01]), None);
    }
}
