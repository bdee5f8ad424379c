//! Message sessions over AMQP, with fe2o3-amqp's client on a real socket (amqp.md §7, §6.3):
//! session receivers attached with `com.microsoft:session-filter` (a named session, or null for
//! the next available), deliveries of that session only and in order, the accept-next timeout,
//! a session held elsewhere, lock loss, and the session operations of `$management`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use fe2o3_amqp::link::{LinkStateError, ReceiverAttachError, RecvError};
use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition, Fields, SenderSettleMode};
use fe2o3_amqp::types::messaging::{
    AmqpValue, ApplicationProperties, Data, Message, MessageId, Properties, Source,
};
use fe2o3_amqp::types::primitives::{Binary, OrderedMap, SimpleValue, Symbol, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use ironbus_core::{
    Broker, ManualClock, NamespaceLimits, QueueDescription, ShutdownTrigger, Timestamp,
};
use ironbus_store_memory::MemoryStore;

type SessionHandle = fe2o3_amqp::session::SessionHandle<()>;

/// A broker (manual clock) with session queue `sq` (two partitions) behind an AMQP listener.
async fn start() -> (Broker, ManualClock, String, ShutdownTrigger) {
    let clock = ManualClock::new(Timestamp::from_millis(1_700_000_000_000));
    let broker = Broker::open(
        Arc::new(MemoryStore::new()),
        Arc::new(clock.clone()),
        NamespaceLimits::default(),
    )
    .await
    .unwrap();
    let description = QueueDescription {
        requires_session: true,
        enable_partitioning: true,
        partition_count: 2,
        ..Default::default()
    };
    broker.create_queue("sq", description).await.unwrap();
    let (addr, trigger) = common::serve(broker.clone()).await;
    let url = format!("amqp://RootManageSharedAccessKey:SAS_KEY_VALUE@{addr}");
    (broker, clock, url, trigger)
}

async fn guard<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), future).await.expect("hung")
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    let mut m = OrderedMap::new();
    for (k, v) in entries {
        m.insert(Value::String(k.to_owned()), v);
    }
    Value::Map(m)
}

fn field<'a>(body: &'a Value, name: &str) -> Option<&'a Value> {
    match body {
        Value::Map(m) => m.get(&Value::String(name.to_owned())),
        _ => None,
    }
}

/// Sends `body` in session `session` to `sq`.
async fn send(sender: &mut Sender, session: &str, body: &str) {
    let message = Message::builder()
        .properties(Properties::builder().group_id(session.to_owned()).build())
        .data(Data(body.as_bytes().to_vec().into()))
        .build();
    guard(sender.send(message)).await.unwrap().accepted_or_else(|o| o).unwrap();
}

/// Attaches a session receiver on `sq`: `session` names one, `None` asks for the next
/// available (waiting at most `timeout_ms`).
async fn attach(
    session: &mut SessionHandle,
    name: &str,
    id: Option<&str>,
    timeout_ms: Option<u32>,
) -> Result<Receiver, ReceiverAttachError> {
    let filter = id.map_or(Value::Null, |s| Value::String(s.to_owned()));
    let source = Source::builder()
        .address("sq")
        .add_to_filter_using_legacy_format(Symbol::from("com.microsoft:session-filter"), filter)
        .build();
    let mut builder = Receiver::builder().name(name).source(source);
    if let Some(ms) = timeout_ms {
        let mut properties = Fields::new();
        properties.insert(Symbol::from("com.microsoft:timeout"), Value::Uint(ms));
        builder = builder.properties(properties);
    }
    guard(builder.attach(session)).await
}

fn refused_with(result: Result<Receiver, ReceiverAttachError>, condition: &str) {
    match result {
        Err(ReceiverAttachError::RemoteClosedWithError(error)) => {
            let expected = match condition {
                "amqp:not-allowed" => ErrorCondition::AmqpError(AmqpError::NotAllowed),
                custom => ErrorCondition::Custom(Symbol::from(custom)),
            };
            assert_eq!(error.condition, expected);
        }
        other => panic!("expected a refusal with {condition}: {other:?}"),
    }
}

async fn bodies(receiver: &mut Receiver, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..n {
        let delivery = guard(receiver.recv::<Data>()).await.unwrap();
        out.push(String::from_utf8(delivery.body().0.to_vec()).unwrap());
        receiver.accept(&delivery).await.unwrap();
    }
    out
}

/// A management client on `sq/$management`.
struct Management {
    requests: Sender,
    responses: Receiver,
    next_id: u64,
}

impl Management {
    async fn attach(session: &mut SessionHandle, tag: &str) -> Self {
        let node = "sq/$management";
        let requests = guard(
            Sender::builder()
                .name(format!("requests-{tag}"))
                .target(node)
                .sender_settle_mode(SenderSettleMode::Unsettled)
                .attach(session),
        )
        .await
        .unwrap();
        let responses = guard(
            Receiver::builder()
                .name(format!("responses-{tag}"))
                .source(node)
                .target(format!("reply-to-{tag}"))
                .attach(session),
        )
        .await
        .unwrap();
        Management { requests, responses, next_id: 0 }
    }

    /// Status, error condition and body of the answer to `operation`.
    async fn request(&mut self, operation: &str, body: Value) -> (i32, Option<String>, Value) {
        self.next_id += 1;
        let reply_to = self.responses.target().as_ref().and_then(|t| t.address.clone());
        let message = Message::builder()
            .properties(
                Properties::builder()
                    .message_id(MessageId::Ulong(self.next_id))
                    .reply_to(reply_to.unwrap())
                    .build(),
            )
            .application_properties(
                ApplicationProperties::builder().insert("operation", operation).build(),
            )
            .value(body)
            .build();
        guard(self.requests.send(message)).await.unwrap().accepted_or_else(|o| o).unwrap();
        let delivery = guard(self.responses.recv::<AmqpValue<Value>>()).await.unwrap();
        self.responses.accept(&delivery).await.unwrap();
        let message = delivery.into_message();
        let props = message.application_properties.expect("status properties").0;
        let status = match props.get("statusCode") {
            Some(SimpleValue::Int(s)) => *s,
            other => panic!("statusCode {other:?}"),
        };
        let condition = match props.get("errorCondition") {
            Some(SimpleValue::Symbol(s)) => Some(s.0.clone()),
            Some(SimpleValue::String(s)) => Some(s.clone()),
            _ => None,
        };
        (status, condition, message.body.0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_receivers_get_their_session_only_in_order() {
    let (_broker, _clock, url, _trigger) = start().await;
    let mut connection = guard(Connection::open("sessions-test", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    let mut sender = guard(Sender::attach(&mut session, "sender", "sq")).await.unwrap();
    for i in 0..5 {
        send(&mut sender, "a", &format!("a{i}")).await;
        send(&mut sender, "b", &format!("b{i}")).await;
    }
    // A plain receiver on a session queue is refused.
    let mut other = guard(Session::begin(&mut connection)).await.unwrap();
    assert!(guard(Receiver::attach(&mut other, "plain", "sq")).await.is_err());

    // Session a by name: its messages only, in order.
    let mut a = attach(&mut session, "a", Some("a"), None).await.unwrap();
    assert_eq!(bodies(&mut a, 5).await, ["a0", "a1", "a2", "a3", "a4"]);
    // Held: another receiver cannot lock it.
    let mut other = guard(Session::begin(&mut connection)).await.unwrap();
    refused_with(
        attach(&mut other, "a-again", Some("a"), None).await,
        "com.microsoft:session-cannot-be-locked",
    );
    // Next available (null filter): b, the only unlocked session with messages.
    let mut next = attach(&mut session, "next", None, Some(5_000)).await.unwrap();
    assert_eq!(bodies(&mut next, 5).await, ["b0", "b1", "b2", "b3", "b4"]);
    guard(next.close()).await.unwrap();
    guard(a.close()).await.unwrap();
    // Released: session a can be locked again, by name (even without messages).
    let a = attach(&mut session, "a-later", Some("a"), None).await.unwrap();
    guard(a.close()).await.unwrap();
    connection.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_next_times_out_and_a_lost_lock_detaches_the_link() {
    let (_broker, clock, url, _trigger) = start().await;
    let mut connection = guard(Connection::open("sessions-timeout", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    let mut sender = guard(Sender::attach(&mut session, "sender", "sq")).await.unwrap();
    send(&mut sender, "only", "x").await;
    let mut held = attach(&mut session, "held", None, Some(5_000)).await.unwrap();
    // No other session is ready: accept-next waits its timeout on the broker's clock, then
    // refuses with com.microsoft:timeout.
    let ticking = {
        let clock = clock.clone();
        tokio::spawn(async move {
            for _ in 0..40 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                clock.advance(Duration::from_millis(500));
            }
        })
    };
    let mut other = guard(Session::begin(&mut connection)).await.unwrap();
    refused_with(attach(&mut other, "next", None, Some(2_000)).await, "com.microsoft:timeout");
    ticking.abort();
    // The held session's lock (60 s) expires: the link is detached with session-lock-lost.
    let delivery = guard(held.recv::<Data>()).await.unwrap();
    clock.advance(Duration::from_secs(61));
    let lost = guard(held.recv::<Data>()).await;
    match lost {
        Err(RecvError::LinkStateError(LinkStateError::RemoteClosedWithError(error))) => {
            assert_eq!(
                error.condition,
                ErrorCondition::Custom(Symbol::from("com.microsoft:session-lock-lost"))
            );
        }
        other => panic!("expected a session-lock-lost detach: {other:?}"),
    }
    // Settling its message over $management now fails with session-lock-lost.
    let token = ironbus_transport_amqp::codec::delivery_tag_to_lock_token(delivery.delivery_tag())
        .expect("a lock token tag");
    let mut mgmt_session = guard(Session::begin(&mut connection)).await.unwrap();
    let mut mgmt = Management::attach(&mut mgmt_session, "lost").await;
    let settle = map(vec![
        ("disposition-status", Value::String("completed".into())),
        ("lock-tokens", Value::Array(vec![Value::Uuid((*token.as_bytes()).into())].into())),
        ("session-id", Value::String("only".into())),
    ]);
    let (status, condition, _) = mgmt.request("com.microsoft:update-disposition", settle).await;
    assert_eq!((status, condition.as_deref()), (410, Some("com.microsoft:session-lock-lost")));
    let (status, condition, _) = mgmt
        .request(
            "com.microsoft:renew-session-lock",
            map(vec![("session-id", Value::String("only".into()))]),
        )
        .await;
    assert_eq!((status, condition.as_deref()), (410, Some("com.microsoft:session-lock-lost")));
    // The message's delivery counted; the session is free again.
    let mut again = guard(Session::begin(&mut connection)).await.unwrap();
    let mut retry = attach(&mut again, "retry", Some("only"), None).await.unwrap();
    assert_eq!(bodies(&mut retry, 1).await, ["x"]);
    connection.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_closes_its_link_as_the_lock_runs_out_gets_a_clean_close() {
    // The Python SDK stops receiving after a wait as long as the lock and closes the link: the
    // lock expires a few milliseconds before. Our detach comes a moment (1 s) after the loss,
    // so the client's own close is answered as a close, not as session-lock-lost.
    let (_broker, clock, url, _trigger) = start().await;
    let mut connection = guard(Connection::open("sessions-close", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    let mut sender = guard(Sender::attach(&mut session, "sender", "sq")).await.unwrap();
    send(&mut sender, "s1", "x").await;
    let mut held = attach(&mut session, "held", Some("s1"), None).await.unwrap();
    guard(held.recv::<Data>()).await.unwrap();
    clock.advance(Duration::from_secs(61));
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard(held.close()).await.expect("a clean close, not a session-lock-lost detach");
    // The session is free again, its unsettled message back in it.
    let mut again = attach(&mut session, "again", Some("s1"), None).await.unwrap();
    assert_eq!(bodies(&mut again, 1).await, ["x"]);
    connection.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_operations_on_the_management_node() {
    let (_broker, _clock, url, _trigger) = start().await;
    let mut connection = guard(Connection::open("sessions-mgmt", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    let mut sender = guard(Sender::attach(&mut session, "sender", "sq")).await.unwrap();
    for id in ["s1", "s2", "s3"] {
        send(&mut sender, id, id).await;
    }
    let mut mgmt = Management::attach(&mut session, "m").await;
    let sid = |id: &str| map(vec![("session-id", Value::String(id.to_owned()))]);

    // Sessions with messages, listed as py asks (last-updated-time = DateTime.MaxValue).
    let max = fe2o3_amqp::types::primitives::Timestamp::from_milliseconds(253_402_300_800_000);
    let list = map(vec![
        ("last-updated-time", Value::Timestamp(max)),
        ("skip", Value::Int(0)),
        ("top", Value::Int(100)),
    ]);
    let (status, _, body) = mgmt.request("com.microsoft:get-message-sessions", list).await;
    assert_eq!(status, 200);
    let ids: Vec<String> = match field(&body, "sessions-ids") {
        Some(Value::Array(a)) => {
            a.0.iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => panic!("{other:?}"),
                })
                .collect()
        }
        other => panic!("sessions-ids {other:?}"),
    };
    assert_eq!(ids, ["s1", "s2", "s3"]);

    // Renewing, reading or setting the state of a session not held here: session-lock-lost.
    let lost = (410, Some("com.microsoft:session-lock-lost"));
    let (status, condition, _) = mgmt.request("com.microsoft:renew-session-lock", sid("s1")).await;
    assert_eq!((status, condition.as_deref()), lost);
    let (status, condition, _) = mgmt.request("com.microsoft:get-session-state", sid("s1")).await;
    assert_eq!((status, condition.as_deref()), lost);
    let set = map(vec![
        ("session-id", Value::String("s1".into())),
        ("session-state", Value::Binary(Binary::from(b"not mine".to_vec()))),
    ]);
    let (status, condition, _) = mgmt.request("com.microsoft:set-session-state", set).await;
    assert_eq!((status, condition.as_deref()), lost);

    let s1 = attach(&mut session, "s1", Some("s1"), None).await.unwrap();
    let (status, _, body) = mgmt.request("com.microsoft:renew-session-lock", sid("s1")).await;
    assert_eq!(status, 200);
    assert!(matches!(field(&body, "expiration"), Some(Value::Timestamp(_))), "{body:?}");

    // State: none, then set, read back, cleared.
    let (status, _, body) = mgmt.request("com.microsoft:get-session-state", sid("s1")).await;
    assert_eq!(status, 200);
    assert_eq!(field(&body, "session-state"), Some(&Value::Null));
    let set = map(vec![
        ("session-id", Value::String("s1".into())),
        ("session-state", Value::Binary(Binary::from(b"state-1".to_vec()))),
    ]);
    let (status, _, _) = mgmt.request("com.microsoft:set-session-state", set).await;
    assert_eq!(status, 200);
    let (_, _, body) = mgmt.request("com.microsoft:get-session-state", sid("s1")).await;
    assert_eq!(
        field(&body, "session-state"),
        Some(&Value::Binary(Binary::from(b"state-1".to_vec())))
    );
    let clear =
        map(vec![("session-id", Value::String("s1".into())), ("session-state", Value::Null)]);
    let (status, _, _) = mgmt.request("com.microsoft:set-session-state", clear).await;
    assert_eq!(status, 200);
    let (_, _, body) = mgmt.request("com.microsoft:get-session-state", sid("s1")).await;
    assert_eq!(field(&body, "session-state"), Some(&Value::Null));

    // The session is held by a link of this connection: another connection's management
    // node cannot renew it, read or set its state.
    let mut elsewhere = guard(Connection::open("sessions-elsewhere", url.as_str())).await.unwrap();
    let mut elsewhere_session = guard(Session::begin(&mut elsewhere)).await.unwrap();
    let mut other = Management::attach(&mut elsewhere_session, "elsewhere").await;
    for operation in ["renew-session-lock", "get-session-state"] {
        let (status, condition, _) =
            other.request(&format!("com.microsoft:{operation}"), sid("s1")).await;
        assert_eq!((status, condition.as_deref()), lost, "{operation}");
    }
    let set = map(vec![
        ("session-id", Value::String("s1".into())),
        ("session-state", Value::Binary(Binary::from(b"not mine".to_vec()))),
    ]);
    let (status, condition, _) = other.request("com.microsoft:set-session-state", set).await;
    assert_eq!((status, condition.as_deref()), lost);
    elsewhere.close().await.unwrap();

    // Peek within a session: its message only.
    let peek = map(vec![
        ("from-sequence-number", Value::Long(0)),
        ("message-count", Value::Int(10)),
        ("session-id", Value::String("s2".into())),
    ]);
    let (status, _, body) = mgmt.request("com.microsoft:peek-message", peek).await;
    assert_eq!(status, 200);
    assert!(matches!(field(&body, "messages"), Some(Value::List(l)) if l.len() == 1), "{body:?}");
    guard(s1.close()).await.unwrap();
    connection.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_receiver_on_a_queue_without_sessions_is_refused() {
    let broker = common::memory_broker().await;
    broker.create_queue("sq", QueueDescription::default()).await.unwrap();
    let (addr, _trigger) = common::serve(broker).await;
    let url = format!("amqp://RootManageSharedAccessKey:SAS_KEY_VALUE@{addr}");
    let mut connection = guard(Connection::open("sessions-plain", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    refused_with(attach(&mut session, "named", Some("a"), None).await, "amqp:not-allowed");
    connection.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_filter_that_is_not_a_string_is_refused_not_taken_for_next_available() {
    let (_broker, _clock, url, _trigger) = start().await;
    let mut connection = guard(Connection::open("sessions-int", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    // The Python SDK sends `session_id=1` as an int. Taken for "next available", the attach
    // would wait for a session instead of failing.
    let source = Source::builder()
        .address("sq")
        .add_to_filter_using_legacy_format(
            Symbol::from("com.microsoft:session-filter"),
            Value::Long(1),
        )
        .build();
    let result = guard(Receiver::builder().name("int").source(source).attach(&mut session)).await;
    refused_with(result, "com.microsoft:argument-error");
    connection.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_accept_next_leaves_the_connection_working_and_takes_a_new_session() {
    let (_broker, _clock, url, _trigger) = start().await;
    let mut connection = guard(Connection::open("sessions-wait", url.as_str())).await.unwrap();
    let mut waiting_session = guard(Session::begin(&mut connection)).await.unwrap();
    // Nothing is ready: the accept-next waits (the broker's clock stands still).
    let waiting = tokio::spawn(async move {
        let receiver = attach(&mut waiting_session, "waiting", None, Some(60_000)).await;
        (receiver, waiting_session)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "no session to accept yet");
    // The same connection still sends meanwhile; the new session is what the wait takes.
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    let mut sender = guard(Sender::attach(&mut session, "sender", "sq")).await.unwrap();
    send(&mut sender, "late", "hello").await;
    let (receiver, _waiting_session) = guard(waiting).await.unwrap();
    let mut receiver = receiver.unwrap();
    assert_eq!(bodies(&mut receiver, 1).await, ["hello"]);
    guard(receiver.close()).await.unwrap();
    connection.close().await.unwrap();
}

/// A raw client holding session `id` of `sq` on link handle 0 with `credit`: the frames up to
/// the attach and flow, in one write.
fn raw_session_receiver(id: &str, credit: u32) -> Vec<u8> {
    raw_session_attach(Some(id), credit)
}

/// The frames up to a session receiver's attach (handle 0) on `sq` and its flow: for session
/// `id`, or (None) the next available one, waiting up to 60 s.
fn raw_session_attach(id: Option<&str>, credit: u32) -> Vec<u8> {
    use fe2o3_amqp::types::definitions::{Handle, ReceiverSettleMode, Role};
    use fe2o3_amqp::types::performatives::{Attach, Performative};
    let source = Source::builder()
        .address("sq")
        .add_to_filter_using_legacy_format(
            Symbol::from("com.microsoft:session-filter"),
            id.map_or(Value::Null, |id| Value::String(id.to_owned())),
        )
        .build();
    let properties = id.is_none().then(|| {
        let mut properties = Fields::new();
        properties.insert(Symbol::from("com.microsoft:timeout"), Value::Uint(60_000));
        properties
    });
    let attach = Attach {
        name: format!("raw-{}", id.unwrap_or("next")),
        handle: Handle(0),
        role: Role::Receiver,
        snd_settle_mode: SenderSettleMode::Unsettled,
        rcv_settle_mode: ReceiverSettleMode::First,
        source: Some(Box::new(source)),
        target: None,
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count: None,
        max_message_size: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties,
    };
    let mut out = common::raw::SASL_HEADER.to_vec();
    out.extend(common::raw::sasl_init());
    out.extend(common::raw::AMQP_HEADER);
    out.extend(common::raw::open());
    out.extend(common::raw::begin());
    out.extend(common::raw::performative(0, Performative::Attach(attach)));
    out.extend(common::raw::flow(Some(0), credit, false));
    out
}

/// An accept of deliveries `first..=last` (settled, or waiting for the broker's outcome).
fn raw_accept(first: u32, last: u32, settled: bool) -> Vec<u8> {
    use fe2o3_amqp::types::definitions::Role;
    use fe2o3_amqp::types::messaging::{Accepted, DeliveryState};
    use fe2o3_amqp::types::performatives::{Disposition, Performative};
    let disposition = Disposition {
        role: Role::Receiver,
        first,
        last: Some(last),
        settled,
        state: Some(DeliveryState::Accepted(Accepted {})),
        batchable: false,
    };
    common::raw::performative(0, Performative::Disposition(disposition))
}

fn raw_detach() -> Vec<u8> {
    use fe2o3_amqp::types::definitions::Handle;
    use fe2o3_amqp::types::performatives::{Detach, Performative};
    common::raw::performative(
        0,
        Performative::Detach(Detach { handle: Handle(0), closed: true, error: None }),
    )
}

type RawReader = ironbus_transport_amqp::frame::FrameReader<tokio::net::tcp::OwnedReadHalf>;

/// Reads frames until `done` says so of one; returns the performatives read.
async fn raw_read_until(
    reader: &mut RawReader,
    mut done: impl FnMut(&fe2o3_amqp::types::performatives::Performative) -> bool,
) -> Vec<fe2o3_amqp::types::performatives::Performative> {
    use ironbus_transport_amqp::frame::InFrame;
    let mut seen = Vec::new();
    loop {
        match guard(reader.read_frame()).await.expect("a frame") {
            InFrame::Amqp { performative, .. } => {
                let stop = done(&performative);
                seen.push(*performative);
                if stop {
                    return seen;
                }
            }
            InFrame::Sasl(fe2o3_amqp::frames::sasl::Frame::Outcome(_)) => {
                // The outcome is followed by the AMQP header.
                reader.read_header().await.unwrap();
            }
            InFrame::Sasl(_) => {}
            InFrame::Empty => {}
        }
    }
}

/// Connects a raw client holding session `id` and reads until `n` of its messages arrived.
async fn raw_receive(addr: &str, id: &str, n: u32) -> (tokio::net::tcp::OwnedWriteHalf, RawReader) {
    use fe2o3_amqp::types::performatives::Performative;
    use tokio::io::AsyncWriteExt;
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (read, mut write) = stream.into_split();
    write.write_all(&raw_session_receiver(id, n)).await.unwrap();
    let mut reader = ironbus_transport_amqp::frame::FrameReader::new(read);
    reader.set_max_frame_size(1 << 20);
    reader.read_header().await.unwrap();
    let mut transfers = 0;
    raw_read_until(&mut reader, |p| {
        transfers += u32::from(matches!(p, Performative::Transfer(_)));
        transfers == n
    })
    .await;
    (write, reader)
}

/// A broker serving session queue `sq` with `n` messages in session `id`; its address.
async fn start_with(id: &str, n: usize) -> (Broker, ManualClock, String, ShutdownTrigger) {
    let (broker, clock, url, trigger) = start().await;
    let messages =
        (0..n).map(|i| ironbus_core::Message::new(format!("m{i}")).with_session_id(id)).collect();
    broker.send("sq", messages).await.unwrap();
    let addr = url.rsplit('@').next().unwrap().to_owned();
    (broker, clock, addr, trigger)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_accepts_read_with_the_detach_complete_before_the_session_is_released() {
    use fe2o3_amqp::types::performatives::Performative;
    use tokio::io::AsyncWriteExt;
    let (broker, _clock, addr, _trigger) = start_with("s", 10).await;
    let (mut write, mut reader) = raw_receive(&addr, "s", 10).await;
    // The accepts (settled: no outcome comes back) and the detach in one write, so that the
    // broker reads them in one turn.
    let mut burst = raw_accept(0, 9, true);
    burst.extend(raw_detach());
    write.write_all(&burst).await.unwrap();
    raw_read_until(&mut reader, |p| matches!(p, Performative::Detach(_))).await;
    // Completed, not released with the session (and redelivered).
    let left = broker.peek("sq", ironbus_core::SequenceNumber(0), 100).await.unwrap();
    assert!(left.is_empty(), "{} messages left after their accepts", left.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disposition_after_the_session_link_detached_fails_with_session_lock_lost() {
    use fe2o3_amqp::types::messaging::DeliveryState;
    use fe2o3_amqp::types::performatives::Performative;
    use tokio::io::AsyncWriteExt;
    let (broker, _clock, addr, _trigger) = start_with("s", 3).await;
    let (mut write, mut reader) = raw_receive(&addr, "s", 3).await;
    write.write_all(&raw_detach()).await.unwrap();
    raw_read_until(&mut reader, |p| matches!(p, Performative::Detach(_))).await;
    // Too late: the session was released with the link. Each delivery's outcome says so.
    write.write_all(&raw_accept(0, 2, false)).await.unwrap();
    let mut refused = Vec::new();
    raw_read_until(&mut reader, |p| {
        if let Performative::Disposition(d) = p {
            match &d.state {
                Some(DeliveryState::Rejected(r)) => {
                    let condition = r.error.as_ref().map(|e| e.condition.clone());
                    assert_eq!(
                        condition,
                        Some(ErrorCondition::Custom(Symbol::from(
                            "com.microsoft:session-lock-lost"
                        )))
                    );
                    assert!(d.settled);
                    refused.push(d.first);
                }
                other => panic!("a late accept succeeded: {other:?}"),
            }
        }
        refused.len() == 3
    })
    .await;
    assert_eq!(refused, [0, 1, 2]);
    // The messages were released, not completed: the session has them, delivery count
    // unchanged.
    let left = broker.peek("sq", ironbus_core::SequenceNumber(0), 100).await.unwrap();
    assert_eq!(left.len(), 3);
    assert!(left.iter().all(|m| m.broker.delivery_count == 0), "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_accept_next_given_up_by_a_detach_leaves_nothing_locked() {
    use fe2o3_amqp::types::performatives::Performative;
    use tokio::io::AsyncWriteExt;
    let (broker, _clock, url, _trigger) = start().await;
    let addr = url.rsplit('@').next().unwrap().to_owned();
    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (read, mut write) = stream.into_split();
    let mut reader = ironbus_transport_amqp::frame::FrameReader::new(read);
    reader.set_max_frame_size(1 << 20);
    // Nothing to accept: the accept-next waits (the broker's clock stands still).
    write.write_all(&raw_session_attach(None, 10)).await.unwrap();
    reader.read_header().await.unwrap();
    raw_read_until(&mut reader, |p| matches!(p, Performative::Begin(_))).await;
    // The client gives up: the detach is answered at once, with no attach before it.
    write.write_all(&raw_detach()).await.unwrap();
    let seen = raw_read_until(&mut reader, |p| matches!(p, Performative::Detach(_))).await;
    assert!(!seen.iter().any(|p| matches!(p, Performative::Attach(_))), "{seen:?}");
    // A session that becomes available now is not taken by the abandoned wait.
    let message = ironbus_core::Message::new("m").with_session_id("s");
    broker.send("sq", vec![message]).await.unwrap();
    let held = guard(broker.accept_session("sq", "s", ironbus_core::ReceiveMode::PeekLock)).await;
    assert!(held.is_ok(), "{held:?}");
    let next = guard(broker.accept_next_session(
        "sq",
        ironbus_core::ReceiveMode::PeekLock,
        Duration::ZERO,
    ))
    .await;
    assert!(next.is_err(), "only session s exists, and it is held here");
}
