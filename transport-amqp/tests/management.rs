//! `$management` message operations over AMQP, with fe2o3-amqp's client on a real socket: what
//! peeks of scheduled messages show on every entity kind, and the bounds of the operations that
//! take lists of sequence numbers (receive-by-sequence-number, cancel-scheduled-message), and
//! batch delete (batch-delete-messages) on a queue, a dead-letter queue, a partitioned queue
//! and a session.

mod common;

use std::sync::Arc;
use std::time::Duration;

use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::{
    AmqpValue, ApplicationProperties, Body, Data, Message, MessageAnnotations, MessageId,
    Properties,
};
use fe2o3_amqp::types::primitives::{
    Array, Binary, OrderedMap, SimpleValue, Symbol, Timestamp as AmqpTimestamp, Value,
};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use fe2o3_amqp_types::messaging::annotations::OwnedKey;
use fe2o3_amqp_types::messaging::message::__private::{Deserializable, Serializable};
use ironbus_core::{
    Broker, EntityDescription, EntityPath, ManualClock, NamespaceLimits, QueueDescription,
    ShutdownTrigger, SubscriptionDescription, Timestamp, TopicDescription, MAX_SEQUENCE_NUMBERS,
};
use ironbus_store_memory::MemoryStore;

const START: i64 = 1_700_000_000_000;

/// A broker (manual clock) behind an AMQP listener with every kind of entity that holds
/// messages: queue `q`, partitioned queue `pq`, partitioned session queue `sq`, topic `t` with
/// subscription `s`, partitioned topic `pt` with subscription `s`.
async fn start() -> (Broker, String, ShutdownTrigger) {
    let clock = ManualClock::new(Timestamp::from_millis(START));
    let broker = Broker::open(
        Arc::new(MemoryStore::new()),
        Arc::new(clock.clone()),
        NamespaceLimits::default(),
    )
    .await
    .unwrap();
    let partitioned =
        QueueDescription { enable_partitioning: true, partition_count: 2, ..Default::default() };
    let sessions = QueueDescription { requires_session: true, ..partitioned.clone() };
    let topic =
        TopicDescription { enable_partitioning: true, partition_count: 2, ..Default::default() };
    let entities = [
        ("q", EntityDescription::Queue(QueueDescription::default())),
        ("pq", EntityDescription::Queue(partitioned)),
        ("sq", EntityDescription::Queue(sessions)),
        ("t", EntityDescription::Topic(TopicDescription::default())),
        ("t/Subscriptions/s", EntityDescription::Subscription(SubscriptionDescription::default())),
        ("pt", EntityDescription::Topic(topic)),
        ("pt/Subscriptions/s", EntityDescription::Subscription(SubscriptionDescription::default())),
    ];
    for (path, description) in entities {
        broker.create_entity(&EntityPath::parse(path).unwrap(), description).await.unwrap();
    }
    let (addr, trigger) = common::serve(broker.clone()).await;
    (broker, format!("amqp://RootManageSharedAccessKey:SAS_KEY_VALUE@{addr}"), trigger)
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

fn longs(numbers: &[i64]) -> Value {
    Value::Array(Array(numbers.iter().map(|n| Value::Long(*n)).collect()))
}

/// A management client on one node.
struct Management {
    requests: Sender,
    responses: Receiver,
    next_id: u64,
}

/// A response: status code, error condition, body.
#[derive(Debug)]
struct Response {
    status: i32,
    condition: Option<String>,
    body: Value,
}

impl Management {
    async fn attach(session: &mut fe2o3_amqp::session::SessionHandle<()>, entity: &str) -> Self {
        let node = format!("{entity}/$management");
        let requests = guard(
            Sender::builder()
                .name(format!("{entity}-requests"))
                .target(node.clone())
                .sender_settle_mode(SenderSettleMode::Unsettled)
                .attach(session),
        )
        .await
        .unwrap();
        let responses = guard(
            Receiver::builder()
                .name(format!("{entity}-responses"))
                .source(node)
                .target(format!("reply-to-{entity}"))
                .attach(session),
        )
        .await
        .unwrap();
        Management { requests, responses, next_id: 0 }
    }

    async fn request(&mut self, operation: &str, body: Value) -> Response {
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
        Response { status, condition, body: message.body.0 }
    }

    /// Schedules one message (in `session`, if given) an hour ahead; its sequence number.
    async fn schedule(&mut self, body: &str, session: Option<&str>) -> i64 {
        let at = AmqpTimestamp::from_milliseconds(START + 3_600_000);
        let mut annotations = MessageAnnotations::default();
        annotations.0.insert(
            OwnedKey::Symbol(Symbol::from("x-opt-scheduled-enqueue-time")),
            Value::Timestamp(at),
        );
        let mut properties = Properties::builder().message_id(MessageId::String(body.into()));
        if let Some(id) = session {
            properties = properties.group_id(id.to_owned());
        }
        let message = Message::builder()
            .message_annotations(annotations)
            .properties(properties.build())
            .data(Data(Binary::from(body.as_bytes().to_vec())))
            .build();
        let encoded = serde_amqp::to_vec(&Serializable(message)).unwrap();
        let mut entry = vec![
            ("message-id", Value::String(body.into())),
            ("message", Value::Binary(Binary::from(encoded))),
        ];
        if let Some(id) = session {
            entry.push(("session-id", Value::String(id.into())));
        }
        let request = map(vec![("messages", Value::List(vec![map(entry)]))]);
        let response = self.request("com.microsoft:schedule-message", request).await;
        assert_eq!(response.status, 200, "{response:?}");
        match field(&response.body, "sequence-numbers") {
            Some(Value::Array(Array(numbers))) => match numbers.as_slice() {
                [Value::Long(seq)] => *seq,
                other => panic!("{other:?}"),
            },
            other => panic!("sequence-numbers {other:?}"),
        }
    }

    /// The messages a peek from the start shows (in `session`, if given), decoded.
    async fn peek(&mut self, session: Option<&str>) -> Vec<Message<Body<Value>>> {
        let mut request =
            vec![("from-sequence-number", Value::Long(0)), ("message-count", Value::Int(100))];
        if let Some(id) = session {
            request.push(("session-id", Value::String(id.into())));
        }
        let response = self.request("com.microsoft:peek-message", map(request)).await;
        assert_eq!(response.status, 200, "{response:?}");
        let Some(Value::List(entries)) = field(&response.body, "messages") else {
            panic!("messages {:?}", response.body)
        };
        entries
            .iter()
            .map(|entry| {
                let Some(Value::Binary(bytes)) = field(entry, "message") else {
                    panic!("message {entry:?}")
                };
                let d: Deserializable<Message<Body<Value>>> =
                    serde_amqp::from_slice(bytes).expect("a message");
                d.0
            })
            .collect()
    }
}

fn annotation<'a>(message: &'a Message<Body<Value>>, key: &str) -> Option<&'a Value> {
    message.message_annotations.as_ref()?.0.get(&OwnedKey::Symbol(Symbol::from(key)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_messages_peek_with_state_scheduled_on_every_entity_kind() {
    let (_broker, url, _trigger) = start().await;
    let mut connection = guard(Connection::open("scheduled-peek", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    // A topic's scheduled messages wait in the topic (Service Bus: peeked there, not in its
    // subscriptions).
    for (entity, session_id) in
        [("q", None), ("pq", None), ("sq", Some("s1")), ("t", None), ("pt", None)]
    {
        let mut mgmt = Management::attach(&mut session, entity).await;
        let seq = mgmt.schedule(&format!("{entity}-later"), session_id).await;
        let mut peeks = vec![mgmt.peek(None).await];
        if session_id.is_some() {
            peeks.push(mgmt.peek(session_id).await);
        }
        for peeked in peeks {
            assert_eq!(peeked.len(), 1, "{entity}: {peeked:?}");
            let m = &peeked[0];
            assert_eq!(annotation(m, "x-opt-sequence-number"), Some(&Value::Long(seq)), "{entity}");
            let state = annotation(m, "x-opt-message-state");
            assert!(
                matches!(state, Some(Value::Int(2)) | Some(Value::Long(2))),
                "{entity}: a scheduled message peeks with state 2, got {state:?}"
            );
        }
    }
    let _ = connection.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_sequence_numbers_are_served_once_and_too_many_are_refused() {
    let (_broker, url, _trigger) = start().await;
    let mut connection = guard(Connection::open("many-numbers", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    let mut mgmt = Management::attach(&mut session, "pq").await;
    let a = mgmt.schedule("a", None).await;
    let b = mgmt.schedule("b", None).await;

    // Cancelling with the cap's worth of numbers, nearly all repeats: both go, once each.
    let mut numbers: Vec<i64> = (0..MAX_SEQUENCE_NUMBERS - 2).map(|i| [a, b][i % 2]).collect();
    numbers.extend([b, a]);
    let response = mgmt
        .request(
            "com.microsoft:cancel-scheduled-message",
            map(vec![("sequence-numbers", longs(&numbers))]),
        )
        .await;
    assert_eq!(response.status, 200, "{response:?}");
    let response = mgmt
        .request(
            "com.microsoft:peek-message",
            map(vec![("from-sequence-number", Value::Long(0)), ("message-count", Value::Int(10))]),
        )
        .await;
    assert_eq!(response.status, 204, "nothing left scheduled: {response:?}");

    // A deferred receive naming nothing but unknown numbers, up to the cap: not found.
    let unknown: Vec<i64> = vec![a; MAX_SEQUENCE_NUMBERS];
    let receive = |numbers: &[i64]| {
        map(vec![("sequence-numbers", longs(numbers)), ("receiver-settle-mode", Value::Uint(1))])
    };
    let response =
        mgmt.request("com.microsoft:receive-by-sequence-number", receive(&unknown)).await;
    assert_eq!(
        (response.status, response.condition.as_deref()),
        (404, Some("com.microsoft:message-not-found"))
    );

    // One more than the cap: refused before anything is looked up, whatever the operation.
    let over = vec![a; MAX_SEQUENCE_NUMBERS + 1];
    let refused = (400, Some("com.microsoft:argument-out-of-range"));
    let response = mgmt.request("com.microsoft:receive-by-sequence-number", receive(&over)).await;
    assert_eq!((response.status, response.condition.as_deref()), refused, "{response:?}");
    let response = mgmt
        .request(
            "com.microsoft:cancel-scheduled-message",
            map(vec![("sequence-numbers", longs(&over))]),
        )
        .await;
    assert_eq!((response.status, response.condition.as_deref()), refused, "{response:?}");
    let _ = connection.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_message_named_many_times_is_received_once() {
    let (broker, url, _trigger) = start().await;
    let mut connection = guard(Connection::open("deferred-repeats", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    let mut sender = guard(Sender::attach(&mut session, "sender", "q")).await.unwrap();
    for body in ["a", "b"] {
        let message = Message::builder().data(Data(Binary::from(body.as_bytes().to_vec()))).build();
        guard(sender.send(message)).await.unwrap().accepted_or_else(|o| o).unwrap();
    }
    // Both received and deferred (through the core: the AMQP defer is settlement's business).
    let receiver = broker.open_receiver("q", ironbus_core::ReceiveMode::PeekLock).await.unwrap();
    receiver.add_credit(2);
    let mut seqs = Vec::new();
    for _ in 0..2 {
        let m = guard(receiver.recv()).await.expect("a message");
        seqs.push(m.sequence_number().0);
        let token = m.lock.expect("locked").token;
        let defer = ironbus_core::Disposition::Defer { properties: Default::default() };
        broker.settle("q", token, defer).await.unwrap();
    }
    let (a, b) = (seqs[0], seqs[1]);
    let mut mgmt = Management::attach(&mut session, "q").await;
    // b first, then the cap's worth of repeats of both.
    let mut numbers = vec![b];
    numbers.extend((1..MAX_SEQUENCE_NUMBERS).map(|i| [a, b][i % 2]));
    let request =
        map(vec![("sequence-numbers", longs(&numbers)), ("receiver-settle-mode", Value::Uint(1))]);
    let response = mgmt.request("com.microsoft:receive-by-sequence-number", request).await;
    assert_eq!(response.status, 200, "{response:?}");
    let Some(Value::List(messages)) = field(&response.body, "messages") else {
        panic!("messages {:?}", response.body)
    };
    let got: Vec<i64> = messages
        .iter()
        .map(|entry| {
            let Some(Value::Binary(bytes)) = field(entry, "message") else { panic!("{entry:?}") };
            let d: Deserializable<Message<Body<Value>>> = serde_amqp::from_slice(bytes).unwrap();
            match annotation(&d.0, "x-opt-sequence-number") {
                Some(Value::Long(seq)) => *seq,
                other => panic!("{other:?}"),
            }
        })
        .collect();
    assert_eq!(got, vec![b, a], "each once, in the order first named");
    let _ = connection.close().await;
}

/// A batch-delete request: `count` messages enqueued before `before` (in `session`).
fn delete_request(count: Value, before: i64, session: Option<&str>) -> Value {
    let mut entries = vec![
        ("message-count", count),
        ("enqueued-time-utc", Value::Timestamp(AmqpTimestamp::from_milliseconds(before))),
    ];
    if let Some(id) = session {
        entries.push(("session-id", Value::String(id.into())));
    }
    map(entries)
}

impl Management {
    /// A batch delete that must succeed; how many it deleted.
    async fn delete(&mut self, count: i32, before: i64, session: Option<&str>) -> i32 {
        let request = delete_request(Value::Int(count), before, session);
        let response = self.request("com.microsoft:batch-delete-messages", request).await;
        assert_eq!(response.status, 200, "{response:?}");
        match field(&response.body, "message-count") {
            Some(Value::Int(n)) => *n,
            other => panic!("message-count {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_delete_deletes_unlocked_messages_before_the_cutoff_and_answers_how_many() {
    use ironbus_core::{Disposition, Message as CoreMessage, ReceiveMode};
    let (broker, url, _trigger) = start().await;
    let mut connection = guard(Connection::open("batch-delete", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    let four = (0..4).map(|i| CoreMessage::new(format!("m{i}"))).collect();
    broker.send("q", four).await.unwrap();
    // The first is locked by a receiver, the second dead-lettered.
    let receiver = broker.open_receiver("q", ReceiveMode::PeekLock).await.unwrap();
    receiver.add_credit(2);
    let locked = guard(receiver.recv()).await.expect("a message");
    let dead = guard(receiver.recv()).await.expect("a message");
    let dead_letter =
        Disposition::DeadLetter { reason: None, description: None, properties: Default::default() };
    broker.settle("q", dead.lock.unwrap().token, dead_letter).await.unwrap();
    let mut mgmt = Management::attach(&mut session, "q").await;

    // Out of range: refused, nothing deleted.
    for count in [Value::Int(0), Value::Int(-1), Value::Int(4001), Value::Long(i64::MAX)] {
        let request = delete_request(count, START + 1, None);
        let response = mgmt.request("com.microsoft:batch-delete-messages", request).await;
        let refused = (400, Some("com.microsoft:argument-out-of-range"));
        assert_eq!((response.status, response.condition.as_deref()), refused, "{response:?}");
    }
    let response = mgmt
        .request("com.microsoft:batch-delete-messages", map(vec![("message-count", Value::Int(1))]))
        .await;
    assert_eq!(response.status, 200, "no cutoff: everything so far is old enough");
    assert_eq!(field(&response.body, "message-count"), Some(&Value::Int(1)));

    assert_eq!(mgmt.delete(10, START, None).await, 0, "enqueued at the cutoff: kept");
    assert_eq!(mgmt.delete(10, START + 1, None).await, 1, "the locked message stays");
    let peeked = mgmt.peek(None).await;
    assert_eq!(peeked.len(), 1);
    let seq = annotation(&peeked[0], "x-opt-sequence-number");
    assert_eq!(seq, Some(&Value::Long(locked.sequence_number().0)));
    broker.complete("q", locked.lock.unwrap().token).await.expect("still locked");

    let mut dlq = Management::attach(&mut session, "q/$DeadLetterQueue").await;
    assert_eq!(dlq.delete(10, START + 1, None).await, 1, "the dead letter");
    let _ = connection.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_delete_spans_partitions_and_keeps_to_a_session() {
    use ironbus_core::Message as CoreMessage;
    let (broker, url, _trigger) = start().await;
    let mut connection = guard(Connection::open("batch-delete-2", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    for i in 0..6 {
        let message = CoreMessage::new("x").with_partition_key(format!("k{i}"));
        broker.send("pq", vec![message]).await.unwrap();
    }
    for id in ["s1", "s1", "s2"] {
        broker.send("sq", vec![CoreMessage::new("x").with_session_id(id)]).await.unwrap();
    }

    let mut pq = Management::attach(&mut session, "pq").await;
    assert_eq!(pq.delete(4, START + 1, None).await, 4, "no more than asked, in all");
    assert_eq!(pq.delete(4000, START + 1, None).await, 2);
    assert_eq!(pq.delete(4000, START + 1, None).await, 0);

    let mut sq = Management::attach(&mut session, "sq").await;
    assert_eq!(sq.delete(4000, START + 1, Some("s1")).await, 2);
    assert_eq!(sq.peek(Some("s2")).await.len(), 1, "another session's message stays");
    let request = delete_request(Value::Int(1), START + 1, Some("s1"));
    let mut q = Management::attach(&mut session, "q").await;
    let response = q.request("com.microsoft:batch-delete-messages", request).await;
    assert_eq!(response.status / 100, 4, "a session on a queue without sessions: {response:?}");
    let _ = connection.close().await;
}
