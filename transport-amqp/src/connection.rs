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
//! After a read the loop handles every frame already buffered (up to 256) before it answers.
//! The tick (every 5 s) sends an empty frame after half the client's idle time-out of silence,
//! and after 10 s at most, asked for or not: the Python SDK's keep-alive thread holds its
//! socket lock while it waits to read, so its sends wait for our next frame. The tick also
//! gives back empty read and output buffers, rolls back timed-out transactions, and closes a
//! connection that sent nothing for twice the idle time-out we advertise.
//!
//! What a connection has waiting to be written (bytes handed to the writer, the output buffer,
//! management responses held for their link) is bounded by `AmqpOptions::max_write_buffer`
//! (4 MiB): deliveries and responses pause at half of it and the writer wakes the loop when it
//! is under half again, so a slow reader with large credit is paused, not closed. Past the
//! limit (plus the largest single delivery or response) the connection is closed with
//! `amqp:resource-limit-exceeded` "the client is not reading": the writer finishes the chunk it
//! is in (the peer must see whole frames) and writes the Close instead of the rest. A socket
//! that takes no byte for `write_stall_timeout` (60 s) while bytes wait ends the connection
//! too. `AmqpStats` counts connections, refusals, buffered bytes
//! and these closes.
//!
//! **Architecture Invariant:** a connection's unwritten bytes stay under its write-buffer limit
//! plus one delivery or response, whatever the client does.
//!
//! **Architecture Invariant:** the broker delivers to a link only against the credit the
//! client gave it (`Receiver::set_outstanding`), and this loop sends a delivery only while the
//! link has credit and the session's remote incoming window is open.
//!
//! This file holds the loop, the frame dispatch and the broker's answers; each concern's
//! frames are handled in its own file: `sasl.rs` (the SASL exchange), `session.rs` (Begin, End,
//! flow frames and windows), `links.rs` (Attach, Detach, credit), `transfers.rs` (the client's
//! transfers and their outcomes), `deliveries.rs` (our deliveries and their settlement),
//! `cbs.rs` (put-token and the connection's grants), `requests.rs` (`$management` requests and
//! response routing), `transactions.rs` (coordinator links, declare/discharge, transactional
//! sends, settlements and requests, send-via), `address.rs` (what a terminus address names) and
//! `outbox.rs` (the writer task and what it shares with the loop).

mod address;
mod cbs;
mod deliveries;
mod links;
mod outbox;
mod requests;
mod sasl;
mod session;
mod transactions;
mod transfers;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::definitions::{ConnectionError, Error as AmqpErrorValue, ErrorCondition};
use fe2o3_amqp_types::messaging::{DeliveryState, Rejected};
use fe2o3_amqp_types::performatives::{Close, Open, Performative};
use foldhash::{HashMap, HashMapExt};
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use ironbus_core::auth::Authorizer;
use ironbus_core::{Broker, Namespaces, Shutdown};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use crate::error::WireError;
use crate::frame::{self, FrameError, FrameReader, InFrame, ProtocolHeader};
use crate::AmqpStats;

pub use self::address::node_path;
use self::address::{entity_url, resolve, Node};
use self::cbs::Grants;
use self::deliveries::{Settle, SettleAnswer, Unsettled};
use self::links::{LinkState, Outbound, OutboundLink};
use self::outbox::{write_loop, Outbox};
use self::requests::RequestDelivery;
use self::session::{no_session, Session};
use self::transactions::{Discharged, Transactions};
use self::transfers::Partial;

/// Largest frame we accept and advertise.
pub const MAX_FRAME_SIZE: u32 = 1024 * 1024;
/// A write of at least this many bytes marks a busy connection, which gets a
/// [`WRITE_BUFFER`]-byte output buffer; others grow theirs as needed.
const BUSY_WRITE: usize = 8 * 1024;
const WRITE_BUFFER: usize = 64 * 1024;
/// The idle time-out we advertise (py pings at half of it).
const IDLE_TIME_OUT: Duration = Duration::from_secs(240);
/// Silence after which we send an empty frame even when the client asked for none (or for a
/// longer time-out): the Python SDK's keep-alive thread holds its socket lock while it waits to
/// read a frame (up to `socket_timeout`), and a send on the same connection waits for it.
const HEARTBEAT_AT_LEAST_EVERY: Duration = Duration::from_secs(10);
/// How long an aborted writer tries to finish its frame and write the Close.
const ABORT_GRACE: Duration = Duration::from_secs(5);
/// At most this many buffered frames are handled before the loop answers and looks at its
/// other events.
const FRAMES_PER_TURN: usize = 256;

/// What a connection needs from the server.
#[derive(Debug)]
pub struct ConnectionContext {
    /// The broker of the connection's namespace (the default one until the Open names another).
    pub broker: Broker,
    /// The namespaces served, when there are several: the Open's hostname selects one
    /// ([`Namespaces`]).
    pub namespaces: Option<Namespaces>,
    /// The namespace the connection is to (`None`: the default one).
    pub namespace: Option<String>,
    pub authorizer: Arc<Authorizer>,
    pub container_id: String,
    /// Bytes a connection may have waiting to be written ([`AmqpOptions::max_write_buffer`](crate::AmqpOptions::max_write_buffer)).
    pub max_write_buffer: usize,
    /// [`AmqpOptions::write_stall_timeout`](crate::AmqpOptions::write_stall_timeout).
    pub write_stall_timeout: Duration,
    pub stats: Arc<AmqpStats>,
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
        /// The transaction the send was added to (its outcome is a transactional state).
        txn: Option<fe2o3_amqp_types::primitives::Binary>,
    },
    /// Clients' dispositions were applied (one outcome each).
    Settled(Vec<(SettleAnswer, Result<(), WireError>)>),
    /// A drain finished: every message that used credit is in the link's buffer.
    Drained { channel: u16, handle: u32 },
    /// A management response is ready.
    Response { request: RequestDelivery, node: String, reply_to: Option<String>, payload: Bytes },
    /// An accept-next for a session receiver attach finished (`links.rs`).
    SessionAccepted(links::Accepted),
    /// A discharge (commit or rollback) finished (`transactions.rs`).
    Discharged(Discharged),
    /// Time to look again at session links whose lock expired (`links.rs`).
    LockLossDue,
}

/// Serves one connection, given as the two halves of its byte stream (a TCP socket's, a TLS
/// stream's, a WebSocket's), until it closes or the server shuts down.
pub async fn serve<R, W>(
    (read, write): (R, W),
    peer: Option<SocketAddr>,
    cx: Arc<ConnectionContext>,
    mut shutdown: Shutdown,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (mut connection, writer, mut reader, handshake) =
        start(read, write, cx, &mut shutdown).await;
    match handshake {
        Ok(()) => connection.run(&mut reader, &mut shutdown).await,
        Err(e) => tracing::debug!(?peer, error = %e, "handshake failed"),
    }
    let over = connection.over;
    drop(connection);
    if over {
        // The writer is finishing its frame and writing the Close. What the client still
        // sends is read and dropped until it closes its end (for a while): unread, it would
        // make closing the socket reset the connection, and the client would lose the Close.
        let drain = async { while reader.read_frame().await.is_ok() {} };
        let finish = async {
            let _ = tokio::join!(writer, drain);
        };
        let _ = tokio::time::timeout(ABORT_GRACE, finish).await;
        return;
    }
    let _ = writer.await;
}

/// Refuses a connection the listener's limits leave no room for, in the protocol's terms: the
/// handshake as usual (SASL included, so that clients read the refusal as one), then an Open
/// and at once a Close with `amqp:resource-limit-exceeded` and `description`.
pub async fn refuse<R, W>(
    (read, write): (R, W),
    cx: Arc<ConnectionContext>,
    mut shutdown: Shutdown,
    description: String,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (mut connection, writer, mut reader, handshake) =
        start(read, write, cx, &mut shutdown).await;
    if handshake.is_err() {
        drop(connection);
        let _ = writer.await;
        return;
    }
    connection.close_with_error(WireError::new("amqp:resource-limit-exceeded", 503, description));
    drop(connection);
    // The client answers with its Close: read it before the socket goes, or the client
    // writing it to a closed socket sees a broken pipe instead of our error.
    let answered = async {
        while let Ok(frame) = reader.read_frame().await {
            if let InFrame::Amqp { performative, .. } = frame {
                if matches!(*performative, Performative::Close(_)) {
                    break;
                }
            }
        }
    };
    let _ = tokio::join!(writer, tokio::time::timeout(ABORT_GRACE, answered));
}

/// A connection, its writer task and its frame reader over the stream's halves, and how the
/// connection's handshake went (cut short by shutdown).
async fn start<R, W>(
    read: R,
    write: W,
    cx: Arc<ConnectionContext>,
    shutdown: &mut Shutdown,
) -> (Connection, tokio::task::JoinHandle<()>, FrameReader<R>, Result<(), FrameError>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    let watcher = Arc::new(Notify::new());
    let outbox = Arc::new(Outbox {
        queued: AtomicUsize::new(0),
        close: Mutex::new(None),
        abort: Notify::new(),
        gone: Notify::new(),
        stalled: AtomicBool::new(false),
        paused: AtomicBool::new(false),
        stats: cx.stats.clone(),
    });
    let writer = tokio::spawn(write_loop(
        write,
        rx,
        outbox.clone(),
        watcher.clone(),
        cx.write_stall_timeout,
        cx.max_write_buffer / 2,
    ));
    let mut connection = Connection::new(cx, tx, outbox, watcher);
    let mut reader = FrameReader::new(read);
    let handshake = tokio::select! {
        r = connection.handshake(&mut reader) => r,
        () = shutdown.wait() => Err(FrameError::Closed),
    };
    (connection, writer, reader, handshake)
}

struct Connection {
    cx: Arc<ConnectionContext>,
    out: BytesMut,
    writer: mpsc::UnboundedSender<Bytes>,
    outbox: Arc<Outbox>,
    /// The largest single delivery or response payload this connection was handed: a write
    /// may overshoot the buffer limit by one of them.
    largest_payload: usize,
    /// The write buffer overflowed or the writer stopped: the connection is over.
    over: bool,
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
    /// The transactions this connection declared and has not discharged.
    txns: Transactions,
    /// Session links whose lock expired, and since when (detached a moment later: `links.rs`).
    lost_since: HashMap<(u16, u32), Instant>,
    /// The host the client's Open named (the namespace host it connected to), if a sane one:
    /// Service Bus names a missing entity `sb://<host>/<path>`.
    hostname: Option<String>,
}

impl Connection {
    fn new(
        cx: Arc<ConnectionContext>,
        writer: mpsc::UnboundedSender<Bytes>,
        outbox: Arc<Outbox>,
        watcher: Arc<Notify>,
    ) -> Self {
        Connection {
            out: BytesMut::new(),
            writer,
            outbox,
            largest_payload: 0,
            over: false,
            remote_max_frame: frame::MIN_MAX_FRAME_SIZE,
            remote_idle: None,
            last_write: Instant::now(),
            sessions: HashMap::new(),
            grants: Grants::default(),
            pending: FuturesUnordered::new(),
            settles: Vec::new(),
            acks: Vec::new(),
            txns: Transactions::new(cx.broker.clone()),
            lost_since: HashMap::new(),
            hostname: None,
            watcher,
            cx,
        }
    }

    fn flush(&mut self) {
        if self.over {
            self.out.clear();
            return;
        }
        if !self.out.is_empty() {
            let chunk = self.out.split().freeze();
            // A busy connection writes into one roomy buffer rather than growing small ones.
            if chunk.len() >= BUSY_WRITE && self.out.capacity() < BUSY_WRITE {
                self.out.reserve(WRITE_BUFFER);
            }
            let len = chunk.len();
            let queued = self.outbox.queued.fetch_add(len, Ordering::AcqRel) + len;
            let stats = &self.cx.stats;
            stats.write_buffered.fetch_add(len, Ordering::Relaxed);
            let _ = self.writer.send(chunk);
            self.last_write = Instant::now();
            let buffered = queued + self.held_responses();
            stats.peak_write_buffered.fetch_max(buffered, Ordering::Relaxed);
            if buffered > self.cx.max_write_buffer.saturating_add(self.largest_payload) {
                self.overflow(buffered);
            }
        }
    }

    /// Whether deliveries (and responses) wait for the writer: they go on when the backlog is
    /// under half the limit, so that a slow reader is paused, not closed.
    pub(super) fn writes_paused(&self) -> bool {
        self.outbox.must_wait(self.out.len(), self.cx.max_write_buffer / 2)
    }

    /// Bytes of management responses held for response links.
    fn held_responses(&self) -> usize {
        self.sessions
            .values()
            .flat_map(|s| s.links.values())
            .map(|l| match l {
                LinkState::Outbound(OutboundLink {
                    kind: Outbound::Responses { pending }, ..
                }) => pending.iter().map(Bytes::len).sum(),
                _ => 0,
            })
            .sum()
    }

    /// The client does not read what it asks for: the connection ends with
    /// `amqp:resource-limit-exceeded`, written in place of what is still queued if the client
    /// reads again soon.
    fn overflow(&mut self, buffered: usize) {
        self.over = true;
        self.cx.stats.slow_reader_closes.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            buffered,
            limit = self.cx.max_write_buffer,
            "closing a connection whose client is not reading"
        );
        let close = Close {
            error: Some(AmqpErrorValue {
                condition: crate::error::condition("amqp:resource-limit-exceeded"),
                description: Some("the client is not reading".to_owned()),
                info: None,
            }),
        };
        let mut frame = BytesMut::new();
        frame::write_performative(&mut frame, 0, &Performative::Close(close));
        *self.outbox.close.lock().unwrap_or_else(PoisonError::into_inner) = Some(frame.freeze());
        self.outbox.abort.notify_one();
    }

    /// Notes the size of a delivery or response handed over.
    pub(super) fn note_payload(&mut self, len: usize) {
        self.largest_payload = self.largest_payload.max(len);
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
            self.sasl(reader).await?;
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
        // The namespace the client addresses, by the Open's hostname.
        let namespace = match (&self.cx.namespaces, open.hostname.as_deref()) {
            (Some(namespaces), Some(host)) => Some(namespaces.resolve(Some(host)).await),
            _ => None,
        };
        let refused = match namespace {
            Some(Ok((Some(name), broker))) => {
                self.enter_namespace(name, broker);
                None
            }
            Some(Err(e)) => Some(WireError::from(e)),
            Some(Ok((None, _))) | None => None,
        };
        self.remote_max_frame =
            open.max_frame_size.0.clamp(frame::MIN_MAX_FRAME_SIZE, MAX_FRAME_SIZE);
        self.remote_idle =
            open.idle_time_out.filter(|ms| *ms > 0).map(|ms| Duration::from_millis(u64::from(ms)));
        self.hostname = open.hostname.filter(|h| {
            !h.is_empty() && h.len() <= 255 && h.chars().all(|c| c.is_ascii_graphic() && c != '/')
        });
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
        if let Some(error) = refused {
            let description = error.description.clone();
            self.close_with_error(error);
            return Err(FrameError::Malformed(format!("namespace refused: {description}")));
        }
        Ok(())
    }

    /// Serves the namespace `name` from now on: its broker, and transactions declared on it.
    fn enter_namespace(&mut self, name: String, broker: Broker) {
        let cx = &self.cx;
        self.cx = Arc::new(ConnectionContext {
            broker: broker.clone(),
            namespaces: cx.namespaces.clone(),
            namespace: Some(name),
            authorizer: cx.authorizer.clone(),
            container_id: cx.container_id.clone(),
            max_write_buffer: cx.max_write_buffer,
            write_stall_timeout: cx.write_stall_timeout,
            stats: cx.stats.clone(),
        });
        self.txns = Transactions::new(broker);
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
            let outbox = self.outbox.clone();
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
                () = outbox.gone.notified() => {
                    if self.outbox.stalled.load(Ordering::Acquire) {
                        self.cx.stats.slow_reader_closes.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(
                            stall = ?self.cx.write_stall_timeout,
                            "closing a connection whose client is not reading (its socket took no byte)"
                        );
                    }
                    return;
                }
                Some(event) = self.pending.next(), if !self.pending.is_empty() => self.on_event(event),
                _ = tick.tick() => {
                    // An idle connection holds no buffer memory (20,000 of them fit in
                    // 400 MB: `cargo xtask bench connections`).
                    reader.release_idle_buffer();
                    self.expire_transactions();
                    if self.out.is_empty() && self.out.capacity() > 0 {
                        self.out = BytesMut::new();
                    }
                    if last_read.elapsed() > IDLE_TIME_OUT * 2 {
                        return self.close_with_error(WireError::new("amqp:resource-limit-exceeded", 408, "idle time-out expired"));
                    }
                    let heartbeat = self
                        .remote_idle
                        .map_or(HEARTBEAT_AT_LEAST_EVERY, |idle| (idle / 2).min(HEARTBEAT_AT_LEAST_EVERY));
                    if self.last_write.elapsed() >= heartbeat {
                        frame::write_empty(&mut self.out);
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
            if self.over {
                return;
            }
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
            Performative::End(_) => self.on_end(channel),
            Performative::Attach(attach) => self.on_attach(channel, attach).await?,
            Performative::Detach(detach) => self.on_detach(channel, detach)?,
            Performative::Flow(flow) => self.on_flow(channel, flow)?,
            Performative::Transfer(transfer) => {
                self.on_transfer(channel, transfer, payload).await?
            }
            Performative::Disposition(disposition) => self.on_disposition(channel, disposition)?,
        }
        Ok(true)
    }

    fn on_event(&mut self, event: Event) {
        match event {
            Event::Sent { channel, handle, delivery_id, settled, result, txn } => {
                if let Err(e) = &result {
                    tracing::debug!(condition = e.condition, description = %e.description, "send refused");
                }
                match (settled, txn, result) {
                    (true, ..) => {}
                    (false, Some(txn), Ok(())) => self.ack_transactional(channel, delivery_id, txn),
                    (false, _, result) => self.acks.push((channel, delivery_id, result.err())),
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
                        self.write_delivery_state(channel, delivery_id, true, Some(state));
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
            Event::Response { request, node, reply_to, payload } => {
                self.respond(request, node, reply_to, payload)
            }
            Event::SessionAccepted(accepted) => self.on_session_accepted(accepted),
            Event::Discharged(discharged) => self.on_discharged(discharged),
            // The loop's pump detaches what is due.
            Event::LockLossDue => {}
        }
    }
}
