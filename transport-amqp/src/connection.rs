//! One client connection: protocol headers, SASL, then the AMQP connection / session / link
//! state machine, driven by one task.
//!
//! The task `select!`s over the frames the client sends, the arrival of messages for its
//! receiver links (one `Notify` shared by all of them), the answers of broker operations it
//! started (sends, settlements, management requests, drains), a heartbeat tick and shutdown.
//! Broker operations never block the loop: each is started (a send is queued on its partition
//! at once, which keeps a link's messages in order) and its answer handled when it arrives.
//! Writes go through a writer task, so a client that does not read cannot stall the loop.
//!
//! **Architecture Invariant:** the broker delivers to a link only against the credit the
//! client gave it (`Receiver::set_outstanding`), and this loop sends a delivery only while the
//! link has credit and the session's remote incoming window is open.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use fe2o3_amqp::frames::sasl;
use fe2o3_amqp_types::definitions::{
    ConnectionError, Error as AmqpErrorValue, ErrorCondition, Handle, Role, SenderSettleMode,
};
use fe2o3_amqp_types::messaging::{
    Accepted, DeliveryState, Modified, Rejected, Released, TargetArchetype,
};
use fe2o3_amqp_types::performatives::{
    Attach, Begin, Close, Detach, Disposition, End, Flow, Open, Performative, Transfer,
};
use fe2o3_amqp_types::primitives::{Array, Symbol, Value};
use fe2o3_amqp_types::sasl::{SaslCode, SaslMechanisms, SaslOutcome};
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use ironbus_core::auth::{Authorizer, Claim, Right};
use ironbus_core::{
    ApplicationProperties, Broker, Disposition as CoreDisposition, EntityAddress, LockToken,
    ReceiveMode, Receiver, Shutdown,
};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Notify};

use crate::codec;
use crate::error::WireError;
use crate::frame::{self, FrameError, FrameReader, InFrame, ProtocolHeader};
use crate::management;
use crate::request::{encode_error, encode_response, Dialect, Request};

/// Largest frame we accept and advertise.
pub const MAX_FRAME_SIZE: u32 = 1024 * 1024;
/// Our session incoming window, in transfer frames: large, so link credit does the limiting.
const INCOMING_WINDOW: u32 = 1 << 30;
/// Credit granted to each client sender link, and topped up as sends complete.
const SENDER_CREDIT: u32 = 1000;
/// The idle time-out we advertise (py pings at half of it).
const IDLE_TIME_OUT: Duration = Duration::from_secs(240);
/// The largest delivery we buffer; a larger one is refused once complete.
const MAX_DELIVERY_BYTES: usize = 100 * 1024 * 1024;
/// The message format of a batch: one data section per message.
const MSG_FORMAT_BATCH: u32 = 0x8001_3700;
/// At most this many buffered frames are handled before the loop answers and looks at its
/// other events.
const FRAMES_PER_TURN: usize = 256;

/// What a connection needs from the server.
#[derive(Debug)]
pub struct ConnectionContext {
    pub broker: Broker,
    pub authorizer: Arc<Authorizer>,
    pub container_id: String,
}

type Pending = Pin<Box<dyn Future<Output = Event> + Send>>;

/// The answer of a broker operation started by the loop.
enum Event {
    /// A client's transfer was stored (or refused).
    Sent {
        channel: u16,
        handle: u32,
        delivery_id: u32,
        settled: bool,
        result: Result<(), WireError>,
    },
    /// Clients' dispositions were applied (one outcome each).
    Settled(Vec<(SettleAnswer, Result<(), WireError>)>),
    /// A drain finished: every message that used credit is in the link's buffer.
    Drained { channel: u16, handle: u32 },
    /// A management response is ready.
    Response { channel: u16, node: String, reply_to: Option<String>, payload: Bytes },
}

/// A settlement read from a disposition, waiting for the end of the read to be handed over.
struct Settle {
    address: EntityAddress,
    token: LockToken,
    disposition: CoreDisposition,
    answer: SettleAnswer,
}

/// Where a settlement's outcome is echoed: `echo` carries the state to echo when asked.
struct SettleAnswer {
    channel: u16,
    delivery_id: u32,
    echo: Option<DeliveryState>,
}

/// Who may do what on this connection: the claims of tokens put on `$cbs`, and of the policy
/// a SASL PLAIN connection authenticated with.
#[derive(Debug, Default)]
struct Grants {
    claims: Vec<Claim>,
}

impl Grants {
    fn allows(&self, path: &str, right: Option<Right>, now: ironbus_core::Timestamp) -> bool {
        let rights = match right {
            Some(r) => vec![r],
            None => vec![Right::Send, Right::Listen, Right::Manage],
        };
        self.claims.iter().any(|c| rights.iter().any(|r| c.authorizes(path, *r, now)))
    }
}

/// A node a link is attached to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Entity(EntityAddress),
    Cbs,
    Management(EntityAddress),
}

/// A delivery being received over several frames.
#[derive(Debug)]
struct Partial {
    delivery_id: u32,
    settled: bool,
    format: u32,
    bytes: BytesMut,
    oversize: bool,
}

#[derive(Debug)]
struct InboundLink {
    node: Node,
    /// The node's path (for response routing).
    path: String,
    delivery_count: u32,
    credit: u32,
    in_flight: u32,
    partial: Option<Partial>,
}

#[derive(Debug)]
enum Outbound {
    /// Deliveries from an entity.
    Entity { receiver: Arc<Receiver>, address: EntityAddress },
    /// Responses of a `$cbs` / `$management` node.
    Responses { pending: VecDeque<Bytes> },
}

#[derive(Debug)]
struct OutboundLink {
    kind: Outbound,
    /// The node path (source address, normalized).
    path: String,
    /// The client's terminus address (target), which requests name as reply-to.
    target_address: Option<String>,
    name: String,
    delivery_count: u32,
    credit: u32,
    draining: bool,
}

#[derive(Debug)]
enum LinkState {
    Inbound(InboundLink),
    Outbound(OutboundLink),
}

#[derive(Debug)]
struct Unsettled {
    handle: u32,
    token: LockToken,
    address: EntityAddress,
}

#[derive(Debug)]
struct Session {
    next_outgoing_id: u32,
    next_incoming_id: u32,
    remote_incoming_window: u32,
    next_delivery_id: u32,
    links: HashMap<u32, LinkState>,
    unsettled: HashMap<u32, Unsettled>,
}

/// Serves one TCP connection until it closes or the server shuts down.
pub async fn serve(stream: TcpStream, cx: Arc<ConnectionContext>, mut shutdown: Shutdown) {
    let peer = stream.peer_addr().ok();
    let _ = stream.set_nodelay(true);
    let (read, mut write) = stream.into_split();
    let mut reader = FrameReader::new(read);
    let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
    let writer = tokio::spawn(async move {
        while let Some(chunk) = rx.recv().await {
            if write.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = write.shutdown().await;
    });
    let mut connection = Connection::new(cx, tx);
    let outcome = tokio::select! {
        r = connection.handshake(&mut reader) => r,
        () = shutdown.wait() => Err(FrameError::Closed),
    };
    match outcome {
        Ok(()) => connection.run(&mut reader, &mut shutdown).await,
        Err(e) => tracing::debug!(?peer, error = %e, "handshake failed"),
    }
    drop(connection);
    let _ = writer.await;
}

struct Connection {
    cx: Arc<ConnectionContext>,
    out: BytesMut,
    writer: mpsc::UnboundedSender<Bytes>,
    remote_max_frame: u32,
    remote_idle: Option<Duration>,
    last_write: Instant,
    sessions: HashMap<u16, Session>,
    grants: Grants,
    pending: FuturesUnordered<Pending>,
    /// Settlements of the frames being read, handed to the broker together (`start_settles`).
    settles: Vec<Settle>,
    /// Outcomes of the client's unsettled transfers (channel, delivery id, refusal) waiting to
    /// be answered together (`write_acks`).
    acks: Vec<(u16, u32, Option<WireError>)>,
    watcher: Arc<Notify>,
}

impl Connection {
    fn new(cx: Arc<ConnectionContext>, writer: mpsc::UnboundedSender<Bytes>) -> Self {
        Connection {
            cx,
            out: BytesMut::with_capacity(64 * 1024),
            writer,
            remote_max_frame: frame::MIN_MAX_FRAME_SIZE,
            remote_idle: None,
            last_write: Instant::now(),
            sessions: HashMap::new(),
            grants: Grants::default(),
            pending: FuturesUnordered::new(),
            settles: Vec::new(),
            acks: Vec::new(),
            watcher: Arc::new(Notify::new()),
        }
    }

    fn flush(&mut self) {
        if !self.out.is_empty() {
            let _ = self.writer.send(self.out.split().freeze());
            self.last_write = Instant::now();
        }
    }

    fn now(&self) -> ironbus_core::Timestamp {
        self.cx.broker.clock().now()
    }

    /// Protocol headers, SASL (or none), then the Open exchange.
    async fn handshake<R: tokio::io::AsyncRead + Unpin>(
        &mut self,
        reader: &mut FrameReader<R>,
    ) -> Result<(), FrameError> {
        let mut header = reader.read_header().await?;
        if header == ProtocolHeader::Sasl {
            self.out.extend_from_slice(&ProtocolHeader::Sasl.bytes());
            let mechanisms = SaslMechanisms {
                sasl_server_mechanisms: Array(vec![
                    Symbol::from("MSSBCBS"),
                    Symbol::from("PLAIN"),
                    Symbol::from("ANONYMOUS"),
                ]),
            };
            frame::write_sasl(&mut self.out, &sasl::Frame::Mechanisms(mechanisms));
            self.flush();
            let init = match reader.read_frame().await? {
                InFrame::Sasl(sasl::Frame::Init(init))
                    if tracing::enabled!(tracing::Level::TRACE) =>
                {
                    tracing::trace!(mechanism = %init.mechanism.0, "sasl init");
                    init
                }
                InFrame::Sasl(sasl::Frame::Init(init)) => init,
                other => {
                    return Err(FrameError::Malformed(format!("expected sasl-init, got {other:?}")))
                }
            };
            let code = match init.mechanism.0.as_str() {
                "ANONYMOUS" | "MSSBCBS" | "EXTERNAL" => SaslCode::Ok,
                "PLAIN" => {
                    let response = init.initial_response.map(|b| b.to_vec()).unwrap_or_default();
                    let mut parts = response.split(|b| *b == 0).skip(1);
                    let user =
                        String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
                    let pass =
                        String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
                    match self.cx.authorizer.verify_key(&user, &pass) {
                        Ok(claim) => {
                            self.grants.claims.push(claim);
                            SaslCode::Ok
                        }
                        Err(e) => {
                            tracing::info!(user = %user, error = %e, "sasl plain refused");
                            SaslCode::Auth
                        }
                    }
                }
                _ => SaslCode::Auth,
            };
            let ok = code == SaslCode::Ok;
            frame::write_sasl(
                &mut self.out,
                &sasl::Frame::Outcome(SaslOutcome { code, additional_data: None }),
            );
            self.flush();
            if !ok {
                return Err(FrameError::Closed);
            }
            header = reader.read_header().await?;
        }
        if header != ProtocolHeader::Amqp {
            // Answer with the header we speak, then close (AMQP 1.0 §2.2).
            self.out.extend_from_slice(&ProtocolHeader::Amqp.bytes());
            self.flush();
            return Err(FrameError::Malformed(format!("unsupported protocol header {header:?}")));
        }
        // Some clients (fe2o3) wait for our header before they send their Open.
        self.out.extend_from_slice(&ProtocolHeader::Amqp.bytes());
        self.flush();
        reader.set_max_frame_size(MAX_FRAME_SIZE);
        let open = match reader.read_frame().await? {
            InFrame::Amqp { performative, .. }
                if matches!(*performative, Performative::Open(_)) =>
            {
                match *performative {
                    Performative::Open(open) => open,
                    _ => unreachable!("matched open"),
                }
            }
            other => return Err(FrameError::Malformed(format!("expected open, got {other:?}"))),
        };
        self.remote_max_frame =
            open.max_frame_size.0.clamp(frame::MIN_MAX_FRAME_SIZE, MAX_FRAME_SIZE);
        self.remote_idle =
            open.idle_time_out.filter(|ms| *ms > 0).map(|ms| Duration::from_millis(u64::from(ms)));
        let reply = Open {
            container_id: self.cx.container_id.clone(),
            hostname: None,
            max_frame_size: MAX_FRAME_SIZE.into(),
            channel_max: 65535.into(),
            idle_time_out: Some(IDLE_TIME_OUT.as_millis() as u32),
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        frame::write_performative(&mut self.out, 0, &Performative::Open(reply));
        self.flush();
        Ok(())
    }

    async fn run<R: tokio::io::AsyncRead + Unpin>(
        &mut self,
        reader: &mut FrameReader<R>,
        shutdown: &mut Shutdown,
    ) {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        let mut last_read = Instant::now();
        loop {
            let watcher = self.watcher.clone();
            tokio::select! {
                frame = reader.read_frame() => {
                    last_read = Instant::now();
                    // Take every frame that is already buffered before answering, so that a
                    // burst of transfers or dispositions costs one write and their settlements
                    // go to each partition together.
                    let mut frame = frame;
                    for _ in 0..FRAMES_PER_TURN {
                        if !self.on_read(frame).await {
                            // Settlements read before the end are still applied.
                            self.start_settles();
                            return;
                        }
                        if !reader.has_frame() {
                            break;
                        }
                        match reader.read_frame().now_or_never() {
                            Some(next) => frame = next,
                            None => break,
                        }
                    }
                    self.start_settles();
                }
                () = watcher.notified() => {}
                Some(event) = self.pending.next(), if !self.pending.is_empty() => self.on_event(event),
                _ = tick.tick() => {
                    if last_read.elapsed() > IDLE_TIME_OUT * 2 {
                        return self.close_with_error(WireError::new("amqp:resource-limit-exceeded", 408, "idle time-out expired"));
                    }
                    if let Some(idle) = self.remote_idle {
                        if self.last_write.elapsed() >= idle / 2 {
                            frame::write_empty(&mut self.out);
                        }
                    }
                }
                () = shutdown.wait() => {
                    return self.close_with_error(WireError::new("amqp:connection:forced", 503, "the server is shutting down"));
                }
            }
            // Handle every answer that is already there before writing.
            while let Some(Some(event)) = self.pending.next().now_or_never() {
                self.on_event(event);
            }
            self.write_acks();
            self.pump();
            self.flush();
        }
    }

    /// Handles one read frame; false when the connection is over (closed, with an error if
    /// there was one).
    async fn on_read(&mut self, frame: Result<InFrame, FrameError>) -> bool {
        match frame {
            Ok(InFrame::Empty) => true,
            Ok(InFrame::Amqp { channel, performative, payload }) => {
                tracing::trace!(channel, ?performative, payload = payload.len(), "received");
                match self.on_frame(channel, *performative, payload).await {
                    Ok(true) => true,
                    Ok(false) => {
                        self.flush();
                        false
                    }
                    Err(e) => {
                        self.close_with_error(e);
                        false
                    }
                }
            }
            Ok(InFrame::Sasl(_)) => {
                self.close_with_error(WireError::new(
                    "amqp:connection:framing-error",
                    400,
                    "sasl frame after sasl",
                ));
                false
            }
            Err(FrameError::Closed) | Err(FrameError::Io(_)) => false,
            Err(e @ FrameError::TooLarge { .. }) => {
                self.close_with_error(WireError::new(
                    "amqp:connection:framing-error",
                    400,
                    e.to_string(),
                ));
                false
            }
            Err(e) => {
                self.close_with_error(WireError::new("amqp:decode-error", 400, e.to_string()));
                false
            }
        }
    }

    fn close_with_error(&mut self, error: WireError) {
        tracing::debug!(condition = error.condition, description = %error.description, "closing the connection");
        let condition = match error.condition {
            "amqp:connection:forced" => {
                ErrorCondition::ConnectionError(ConnectionError::ConnectionForced)
            }
            "amqp:connection:framing-error" => {
                ErrorCondition::ConnectionError(ConnectionError::FramingError)
            }
            _ => crate::error::condition(error.condition),
        };
        let close = Close {
            error: Some(AmqpErrorValue {
                condition,
                description: Some(error.description),
                info: None,
            }),
        };
        frame::write_performative(&mut self.out, 0, &Performative::Close(close));
        self.flush();
    }

    /// Handles one frame; `Ok(false)` ends the connection (after a Close).
    async fn on_frame(
        &mut self,
        channel: u16,
        performative: Performative,
        payload: Bytes,
    ) -> Result<bool, WireError> {
        match performative {
            Performative::Open(_) => {
                return Err(WireError::new("amqp:illegal-state", 400, "open received twice"))
            }
            Performative::Close(_) => {
                frame::write_performative(
                    &mut self.out,
                    0,
                    &Performative::Close(Close { error: None }),
                );
                return Ok(false);
            }
            Performative::Begin(begin) => self.on_begin(channel, begin)?,
            Performative::End(_) => {
                self.sessions.remove(&channel);
                frame::write_performative(
                    &mut self.out,
                    channel,
                    &Performative::End(End { error: None }),
                );
            }
            Performative::Attach(attach) => self.on_attach(channel, attach).await?,
            Performative::Detach(detach) => self.on_detach(channel, detach)?,
            Performative::Flow(flow) => self.on_flow(channel, flow)?,
            Performative::Transfer(transfer) => self.on_transfer(channel, transfer, payload)?,
            Performative::Disposition(disposition) => self.on_disposition(channel, disposition)?,
        }
        Ok(true)
    }

    fn session(&mut self, channel: u16) -> Result<&mut Session, WireError> {
        self.sessions.get_mut(&channel).ok_or_else(|| no_session(channel))
    }

    fn on_begin(&mut self, channel: u16, begin: Begin) -> Result<(), WireError> {
        if self.sessions.contains_key(&channel) {
            return Err(WireError::new(
                "amqp:illegal-state",
                400,
                format!("channel {channel} already has a session"),
            ));
        }
        self.sessions.insert(
            channel,
            Session {
                next_outgoing_id: 0,
                next_incoming_id: begin.next_outgoing_id,
                remote_incoming_window: begin.incoming_window,
                next_delivery_id: 0,
                links: HashMap::new(),
                unsettled: HashMap::new(),
            },
        );
        let reply = Begin {
            remote_channel: Some(channel),
            next_outgoing_id: 0,
            incoming_window: INCOMING_WINDOW,
            outgoing_window: INCOMING_WINDOW,
            handle_max: Handle(u32::MAX),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        frame::write_performative(&mut self.out, channel, &Performative::Begin(reply));
        Ok(())
    }

    /// Answers an attach: accepts it as a link, or refuses it (a null terminus, then a
    /// closing detach with the error).
    async fn on_attach(&mut self, channel: u16, attach: Attach) -> Result<(), WireError> {
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
                if let Err(e) = self.cx.broker.get_queue(&entity.entity).await {
                    return self.refuse(channel, attach, WireError::from(e));
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
                Node::Entity(e) => self
                    .cx
                    .broker
                    .get_queue(&e.entity)
                    .await
                    .ok()
                    .map(|q| q.description.max_message_size() as u64),
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

    fn refuse(&mut self, channel: u16, attach: Attach, error: WireError) -> Result<(), WireError> {
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

    fn on_detach(&mut self, channel: u16, detach: Detach) -> Result<(), WireError> {
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

    fn on_flow(&mut self, channel: u16, flow: Flow) -> Result<(), WireError> {
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

    fn on_transfer(
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
            },
        };
        let mut partial = partial;
        if transfer.more {
            if partial.bytes.len() + payload.len() > MAX_DELIVERY_BYTES {
                partial.oversize = true;
                partial.bytes = BytesMut::new();
            } else if !partial.oversize {
                partial.bytes.extend_from_slice(&payload);
            }
            link.partial = Some(partial);
            return Ok(());
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
        match node {
            Node::Entity(address) => {
                link.in_flight += 1;
                let result = if oversize {
                    Err(WireError::new(
                        "amqp:link:message-size-exceeded",
                        413,
                        "the message exceeds the largest delivery ironbus accepts",
                    ))
                } else {
                    decode_send(&body, partial.format).and_then(|messages| {
                        self.cx.broker.start_send(address, messages).map_err(WireError::from)
                    })
                };
                match result {
                    Ok(future) => self.pending.push(Box::pin(async move {
                        let result = future.await.map(|_| ()).map_err(WireError::from);
                        Event::Sent { channel, handle, delivery_id, settled, result }
                    })),
                    Err(e) => self.pending.push(Box::pin(async move {
                        Event::Sent { channel, handle, delivery_id, settled, result: Err(e) }
                    })),
                }
            }
            Node::Cbs => {
                self.settle_request(channel, delivery_id, settled);
                self.on_cbs_request(channel, &path, &body);
                self.top_up(channel, handle);
            }
            Node::Management(address) => {
                self.settle_request(channel, delivery_id, settled);
                self.on_management_request(channel, path, address, &body);
                self.top_up(channel, handle);
            }
        }
        Ok(())
    }

    /// Accepts a request delivery (`$cbs`, `$management`).
    fn settle_request(&mut self, channel: u16, delivery_id: u32, settled: bool) {
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

    fn on_cbs_request(&mut self, channel: u16, path: &str, body: &[u8]) {
        let request = match Request::decode(body) {
            Ok(r) => r,
            Err(e) => {
                let payload = encode_error(None, Dialect::Cbs, &e);
                return self.respond(channel, path.to_owned(), None, payload);
            }
        };
        let operation = request.property("operation").unwrap_or_default();
        let payload = if operation != "put-token" {
            encode_error(
                request.message_id.clone(),
                Dialect::Cbs,
                &WireError::bad_request(format!("unknown $cbs operation {operation:?}")),
            )
        } else {
            let token = match &request.body {
                Value::String(s) => s.clone(),
                _ => String::new(),
            };
            match self.cx.authorizer.verify_token(&token, self.now()) {
                Ok(claim) => {
                    self.grants.claims.retain(|c| c.audience != claim.audience);
                    self.grants.claims.push(claim);
                    encode_response(
                        request.message_id.clone(),
                        Dialect::Cbs,
                        202,
                        "Accepted",
                        None,
                        None,
                    )
                }
                Err(e) => {
                    tracing::info!(error = %e, "put-token refused");
                    let status = if e.kind == ironbus_core::auth::AuthErrorKind::Malformed {
                        400
                    } else {
                        401
                    };
                    encode_response(
                        request.message_id.clone(),
                        Dialect::Cbs,
                        status,
                        &e.to_string(),
                        None,
                        None,
                    )
                }
            }
        };
        self.respond(channel, path.to_owned(), request.reply_to, payload);
    }

    fn on_management_request(
        &mut self,
        channel: u16,
        path: String,
        address: EntityAddress,
        body: &[u8],
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
        let right = management::required_right(&operation);
        if right.is_some() && !self.grants.allows(&path, right, self.now()) {
            let e =
                WireError::unauthorized(format!("unauthorized access to {path} for {operation}"));
            let payload = encode_error(message_id, Dialect::Management, &e);
            return self.respond(channel, path, reply_to, payload);
        }
        let broker = self.cx.broker.clone();
        self.pending.push(Box::pin(async move {
            let payload = match management::execute(broker, address, request).await {
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
        }));
    }

    /// Queues a response on the client's response link for `node`: the link whose target is
    /// the reply-to address, else whose name is, else the one attached to the node in the same
    /// session.
    fn respond(&mut self, channel: u16, node: String, reply_to: Option<String>, payload: Bytes) {
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

    fn on_disposition(&mut self, channel: u16, disposition: Disposition) -> Result<(), WireError> {
        if disposition.role != Role::Receiver {
            // Settlements of our own dispositions of client transfers: nothing to do.
            return Ok(());
        }
        let Some(session) = self.sessions.get_mut(&channel) else {
            return Err(no_session(channel));
        };
        let first = disposition.first;
        let last = disposition.last.unwrap_or(first);
        let span = last.wrapping_sub(first);
        // Visit only deliveries we hold, however wide the range (a hostile range costs nothing).
        let ids: Vec<u32> = if (span as usize) < session.unsettled.len() {
            (0..=span)
                .map(|i| first.wrapping_add(i))
                .filter(|id| session.unsettled.contains_key(id))
                .collect()
        } else {
            session.unsettled.keys().copied().filter(|id| id.wrapping_sub(first) <= span).collect()
        };
        for id in ids {
            let Some(unsettled) = session.unsettled.remove(&id) else { continue };
            let (core, echo) = match &disposition.state {
                Some(DeliveryState::Accepted(_)) => {
                    (CoreDisposition::Complete, DeliveryState::Accepted(Accepted {}))
                }
                Some(DeliveryState::Released(_)) => {
                    (CoreDisposition::Release, DeliveryState::Released(Released {}))
                }
                Some(DeliveryState::Modified(m)) => {
                    let properties = m
                        .message_annotations
                        .as_ref()
                        .map(|f| {
                            f.iter()
                                .filter_map(|(k, v)| {
                                    Some((k.0.clone(), management::property_value(v)?))
                                })
                                .collect::<ApplicationProperties>()
                        })
                        .unwrap_or_default();
                    let core = if m.undeliverable_here == Some(true) {
                        CoreDisposition::Defer { properties }
                    } else {
                        CoreDisposition::Abandon { properties }
                    };
                    (
                        core,
                        DeliveryState::Modified(Modified {
                            delivery_failed: None,
                            undeliverable_here: None,
                            message_annotations: None,
                        }),
                    )
                }
                Some(DeliveryState::Rejected(r)) => {
                    (dead_letter(r), DeliveryState::Rejected(Rejected { error: None }))
                }
                // Received or transactional states: not outcomes we act on.
                _ => continue,
            };
            let echo = (!disposition.settled).then_some(echo);
            self.settles.push(Settle {
                address: unsettled.address,
                token: unsettled.token,
                disposition: core,
                answer: SettleAnswer { channel, delivery_id: id, echo },
            });
        }
        Ok(())
    }

    /// Hands the settlements of the frames just read to the broker: one request per entity
    /// and partition.
    fn start_settles(&mut self) {
        while !self.settles.is_empty() {
            let address = self.settles[0].address.clone();
            let (same, rest): (Vec<Settle>, Vec<Settle>) =
                self.settles.drain(..).partition(|s| s.address == address);
            self.settles = rest;
            let (items, answers): (Vec<_>, Vec<_>) =
                same.into_iter().map(|s| ((s.token, s.disposition), s.answer)).unzip();
            let outcomes = self.cx.broker.start_settle_many(address, items);
            self.pending.push(Box::pin(async move {
                let outcomes = outcomes.await;
                Event::Settled(
                    answers
                        .into_iter()
                        .zip(outcomes)
                        .map(|(answer, outcome)| (answer, outcome.map_err(WireError::from)))
                        .collect(),
                )
            }));
        }
    }

    fn on_event(&mut self, event: Event) {
        match event {
            Event::Sent { channel, handle, delivery_id, settled, result } => {
                if let Err(e) = &result {
                    tracing::debug!(condition = e.condition, description = %e.description, "send refused");
                }
                if !settled {
                    self.acks.push((channel, delivery_id, result.err()));
                }
                if let Some(LinkState::Inbound(link)) =
                    self.sessions.get_mut(&channel).and_then(|s| s.links.get_mut(&handle))
                {
                    link.in_flight = link.in_flight.saturating_sub(1);
                }
                self.top_up(channel, handle);
            }
            Event::Settled(answers) => {
                for (SettleAnswer { channel, delivery_id, echo }, result) in answers {
                    let Some(echo) = echo else { continue };
                    let state = match result {
                        Ok(()) => echo,
                        Err(e) => DeliveryState::Rejected(Rejected { error: Some(e.to_amqp()) }),
                    };
                    if self.sessions.contains_key(&channel) {
                        let disposition = Disposition {
                            role: Role::Sender,
                            first: delivery_id,
                            last: None,
                            settled: true,
                            state: Some(state),
                            batchable: false,
                        };
                        frame::write_performative(
                            &mut self.out,
                            channel,
                            &Performative::Disposition(disposition),
                        );
                    }
                }
            }
            Event::Drained { channel, handle } => {
                self.pump_link(channel, handle);
                let Some(LinkState::Outbound(link)) =
                    self.sessions.get_mut(&channel).and_then(|s| s.links.get_mut(&handle))
                else {
                    return;
                };
                link.draining = false;
                link.delivery_count = link.delivery_count.wrapping_add(link.credit);
                link.credit = 0;
                if let Outbound::Entity { receiver, .. } = &link.kind {
                    receiver.set_outstanding(0);
                }
                let count = link.delivery_count;
                self.write_link_flow(channel, handle, count, 0, true);
            }
            Event::Response { channel, node, reply_to, payload } => {
                self.respond(channel, node, reply_to, payload)
            }
        }
    }

    /// Gives a client sender more credit once it has used half, keeping what is in flight to
    /// the store within [`SENDER_CREDIT`].
    /// Answers the client's stored (or refused) transfers: consecutive accepted deliveries of a
    /// session in one disposition range, each refusal on its own with its error.
    fn write_acks(&mut self) {
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

    fn write_ack(&mut self, channel: u16, first: u32, last: u32, state: DeliveryState) {
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

    fn top_up(&mut self, channel: u16, handle: u32) {
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

    fn write_session_flow(&mut self, channel: u16) {
        self.write_flow(channel, None);
    }

    fn write_link_flow(
        &mut self,
        channel: u16,
        handle: u32,
        delivery_count: u32,
        credit: u32,
        drain: bool,
    ) {
        self.write_flow(channel, Some((handle, delivery_count, credit, drain)));
    }

    /// A flow with the session's state, and the link's when given (handle, delivery count,
    /// credit, drain).
    fn write_flow(&mut self, channel: u16, link: Option<(u32, u32, u32, bool)>) {
        let Some(session) = self.sessions.get(&channel) else { return };
        let flow = Flow {
            next_incoming_id: Some(session.next_incoming_id),
            incoming_window: INCOMING_WINDOW,
            next_outgoing_id: session.next_outgoing_id,
            outgoing_window: INCOMING_WINDOW,
            handle: link.map(|(handle, ..)| Handle(handle)),
            delivery_count: link.map(|(_, count, ..)| count),
            link_credit: link.map(|(_, _, credit, _)| credit),
            available: None,
            drain: link.is_some_and(|(.., drain)| drain),
            echo: false,
            properties: None,
        };
        frame::write_performative(&mut self.out, channel, &Performative::Flow(flow));
    }

    /// Sends what links may send now.
    fn pump(&mut self) {
        let targets: Vec<(u16, u32)> = self
            .sessions
            .iter()
            .flat_map(|(ch, s)| {
                s.links.iter().filter_map(move |(h, l)| {
                    matches!(l, LinkState::Outbound(_)).then_some((*ch, *h))
                })
            })
            .collect();
        for (channel, handle) in targets {
            self.pump_link(channel, handle);
        }
    }

    fn pump_link(&mut self, channel: u16, handle: u32) {
        let max_frame = self.remote_max_frame;
        let Some(session) = self.sessions.get_mut(&channel) else { return };
        let Some(LinkState::Outbound(link)) = session.links.get_mut(&handle) else { return };
        loop {
            if session.remote_incoming_window == 0 {
                return;
            }
            let (payload, tag, settled, lock) = match &mut link.kind {
                Outbound::Responses { pending } => {
                    if link.credit == 0 {
                        return;
                    }
                    let Some(payload) = pending.pop_front() else { return };
                    (payload, session.next_delivery_id.to_be_bytes().to_vec(), true, None)
                }
                Outbound::Entity { receiver, address } => {
                    if link.credit == 0 {
                        // Credit taken back: hand back what arrived beyond it.
                        if !link.draining {
                            while let Some(m) = receiver.try_recv() {
                                if let Some(lock) = m.lock {
                                    let broker = self.cx.broker.clone();
                                    let address = address.clone();
                                    tokio::spawn(async move {
                                        let _ = broker
                                            .settle(address, lock.token, CoreDisposition::Release)
                                            .await;
                                    });
                                }
                            }
                        }
                        return;
                    }
                    let Some(m) = receiver.try_recv() else { return };
                    let payload = codec::encode_delivery(&m, codec::DeliveryOptions::default());
                    match m.lock {
                        Some(lock) => (
                            payload,
                            codec::lock_token_to_delivery_tag(&lock.token.0).to_vec(),
                            false,
                            Some((lock.token, address.clone())),
                        ),
                        None => {
                            (payload, session.next_delivery_id.to_be_bytes().to_vec(), true, None)
                        }
                    }
                }
            };
            let delivery_id = session.next_delivery_id;
            session.next_delivery_id = delivery_id.wrapping_add(1);
            let transfer = Transfer {
                handle: Handle(handle),
                delivery_id: Some(delivery_id),
                delivery_tag: Some(tag.into()),
                message_format: Some(0),
                settled: Some(settled),
                more: false,
                rcv_settle_mode: None,
                state: None,
                resume: false,
                aborted: false,
                batchable: false,
            };
            let frames =
                frame::write_transfer(&mut self.out, channel, transfer, payload, max_frame);
            session.next_outgoing_id = session.next_outgoing_id.wrapping_add(frames);
            session.remote_incoming_window = session.remote_incoming_window.saturating_sub(frames);
            link.delivery_count = link.delivery_count.wrapping_add(1);
            link.credit -= 1;
            if let Some((token, address)) = lock {
                session.unsettled.insert(delivery_id, Unsettled { handle, token, address });
            }
        }
    }
}

fn no_session(channel: u16) -> WireError {
    WireError::new(
        "amqp:session:unattached-handle",
        400,
        format!("no session on channel {channel}"),
    )
}

/// Decodes what a client sent: one message, or a batch (format 0x80013700).
fn decode_send(body: &Bytes, format: u32) -> Result<Vec<ironbus_core::Message>, WireError> {
    let decoded = if format == MSG_FORMAT_BATCH {
        codec::decode_batch(body.clone())
    } else {
        codec::decode_message(body.clone()).map(|m| vec![m])
    };
    decoded.map_err(|e| WireError::new("amqp:decode-error", 400, e.to_string()))
}

/// A rejected outcome as a dead-letter request: reason and description from the error's info
/// (or its description), other info entries as properties to modify.
fn dead_letter(rejected: &Rejected) -> CoreDisposition {
    let mut reason = None;
    let mut description = None;
    let mut properties = ApplicationProperties::new();
    if let Some(error) = &rejected.error {
        description = error.description.clone();
        if let Some(info) = &error.info {
            for (k, v) in info.iter() {
                match (k.0.as_str(), v) {
                    ("DeadLetterReason", Value::String(s)) => reason = Some(s.clone()),
                    ("DeadLetterErrorDescription", Value::String(s)) => {
                        description = Some(s.clone())
                    }
                    ("DeadLetterReason" | "DeadLetterErrorDescription", _) => {}
                    (key, value) => {
                        if let Some(p) = management::property_value(value) {
                            properties.insert(key.to_owned(), p);
                        }
                    }
                }
            }
        }
    }
    CoreDisposition::DeadLetter { reason, description, properties }
}

/// The node path of a terminus address: scheme and host stripped, no surrounding slashes.
pub fn node_path(address: &str) -> String {
    let rest = match address.find("://") {
        Some(i) => {
            let after = &address[i + 3..];
            after.find('/').map_or("", |j| &after[j..])
        }
        None => address,
    };
    rest.trim_matches('/').to_owned()
}

/// What a node path names.
fn resolve(path: &str) -> Result<Node, WireError> {
    if path.eq_ignore_ascii_case("$cbs") {
        return Ok(Node::Cbs);
    }
    if let Some(entity) = strip_suffix_ignore_case(path, "/$management") {
        return Ok(Node::Management(EntityAddress::parse(entity)));
    }
    if path.to_ascii_lowercase().contains("/$transfer/")
        || path.to_ascii_lowercase().contains("/subscriptions/")
    {
        return Err(WireError::not_implemented(format!(
            "{path}: topics, subscriptions and transfer queues are not implemented by ironbus yet"
        )));
    }
    if path.is_empty() {
        return Err(WireError::bad_request("empty address"));
    }
    Ok(Node::Entity(EntityAddress::parse(path)))
}

fn strip_suffix_ignore_case<'a>(s: &'a str, suffix: &str) -> Option<&'a str> {
    let cut = s.len().checked_sub(suffix.len())?;
    (s.is_char_boundary(cut) && s[cut..].eq_ignore_ascii_case(suffix)).then(|| &s[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_paths_strip_scheme_and_host() {
        let cases = [
            ("amqps://localhost:5672/q", "q"),
            ("amqps://ns.servicebus.windows.net/Q/$DeadLetterQueue", "Q/$DeadLetterQueue"),
            ("q", "q"),
            ("/q/", "q"),
            ("q/$management", "q/$management"),
            ("$cbs", "$cbs"),
            ("sb://host", ""),
        ];
        for (address, path) in cases {
            assert_eq!(node_path(address), path, "{address}");
        }
    }

    #[test]
    fn nodes_resolve_by_path() {
        assert_eq!(resolve("$cbs").unwrap(), Node::Cbs);
        assert_eq!(resolve("q/$management").unwrap(), Node::Management(EntityAddress::parse("q")));
        assert_eq!(
            resolve("q/$DeadLetterQueue/$Management").unwrap(),
            Node::Management(EntityAddress::parse("q/$DeadLetterQueue"))
        );
        assert_eq!(resolve("q").unwrap(), Node::Entity(EntityAddress::parse("q")));
        assert!(resolve("t/Subscriptions/s").is_err());
    }
}
