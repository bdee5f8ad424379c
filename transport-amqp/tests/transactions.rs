//! Local transactions over AMQP on a real socket (amqp.md §8, topics-sessions-transactions.md
//! part C): with fe2o3-amqp's controller, and as .NET and Java wire them, replayed with raw
//! frames (two coordinator links on a cross-entity session, pre-settled `$management` requests
//! carrying a transactional state, txn-ids scoped to their connection).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::raw_client::{flow, link_attach, map, request, value, Raw};
use fe2o3_amqp::transaction::{
    Controller, Transaction, TransactionDischarge, TransactionPosting, TransactionRetirement,
};
use fe2o3_amqp::types::definitions::{
    ErrorCondition, Handle, ReceiverSettleMode, Role, SenderSettleMode,
};
use fe2o3_amqp::types::messaging::{
    Accepted, Data, DeliveryState, Message, MessageAnnotations, Outcome, Source, TargetArchetype,
};
use fe2o3_amqp::types::performatives::{Attach, Detach, Disposition, Performative};
use fe2o3_amqp::types::primitives::{Array, Binary, Symbol, Timestamp as AmqpTimestamp, Value};
use fe2o3_amqp::types::transaction::{
    Coordinator, Declare, Discharge, TransactionError, TransactionalState, TxnCapability,
};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use ironbus_core::{
    Broker, ManualClock, NamespaceLimits, QueueDescription, SequenceNumber, ShutdownTrigger,
    Timestamp,
};
use ironbus_store_memory::MemoryStore;

/// A broker (manual clock) with queues `q1` and `q2` behind an AMQP listener; its SASL PLAIN
/// URL and its address.
async fn start() -> (Broker, ManualClock, String, String, ShutdownTrigger) {
    let clock = ManualClock::new(Timestamp::from_millis(1_700_000_000_000));
    let broker = Broker::open(
        Arc::new(MemoryStore::new()),
        Arc::new(clock.clone()),
        NamespaceLimits::default(),
    )
    .await
    .unwrap();
    for q in ["q1", "q2"] {
        broker.create_queue(q, QueueDescription::default()).await.unwrap();
    }
    let (addr, trigger) = common::serve(broker.clone()).await;
    let url = format!("amqp://RootManageSharedAccessKey:SAS_KEY_VALUE@{addr}");
    (broker, clock, url, addr.to_string(), trigger)
}

async fn guard<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), future).await.expect("hung")
}

/// The bodies of the messages `queue` holds (peeked).
async fn peek(broker: &Broker, queue: &str) -> Vec<String> {
    let messages = broker.peek(queue, SequenceNumber(0), 100).await.unwrap();
    messages.iter().map(|m| String::from_utf8_lossy(&m.message.body).into_owned()).collect()
}

/// Waits (at most 10 s) until `queue` holds exactly `expected`.
async fn eventually(broker: &Broker, queue: &str, expected: &[&str]) {
    for _ in 0..200 {
        if peek(broker, queue).await == expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{queue} holds {:?}, expected {expected:?}", peek(broker, queue).await);
}

fn data(body: &str) -> Message<Data> {
    Message::builder().data(Data(body.as_bytes().to_vec().into())).build()
}

fn is_unknown_id(condition: &ErrorCondition) -> bool {
    match condition {
        ErrorCondition::TransactionError(TransactionError::UnknownId) => true,
        ErrorCondition::Custom(s) => s.as_str() == "amqp:transaction:unknown-id",
        _ => false,
    }
}

// ---- fe2o3-amqp's controller ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_in_a_transaction_appears_at_commit_and_never_after_a_rollback() {
    let (broker, _clock, url, _addr, _trigger) = start().await;
    let mut connection = guard(Connection::open("txn-send", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    let controller = guard(Controller::attach(&mut session, "controller")).await.unwrap();
    let mut sender = guard(Sender::attach(&mut session, "sender", "q1")).await.unwrap();

    let txn = guard(Transaction::declare(&controller, None)).await.unwrap();
    let outcome = guard(txn.post(&mut sender, data("committed"))).await.unwrap();
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    assert!(peek(&broker, "q1").await.is_empty(), "invisible before the commit");
    guard(txn.commit()).await.unwrap();
    assert_eq!(peek(&broker, "q1").await, ["committed"]);

    let txn = guard(Transaction::declare(&controller, None)).await.unwrap();
    let outcome = guard(txn.post(&mut sender, data("rolled back"))).await.unwrap();
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    guard(txn.rollback()).await.unwrap();
    // A plain send afterwards is stored after nothing of the rolled-back one.
    guard(sender.send(data("plain"))).await.unwrap().accepted_or_else(|o| o).unwrap();
    assert_eq!(peek(&broker, "q1").await, ["committed", "plain"]);

    // Two transactions open at once on one controller commit independently; a declare with a
    // global-id works (it is ignored).
    let one = guard(Transaction::declare(&controller, None)).await.unwrap();
    let two =
        guard(Transaction::declare(&controller, Binary::from(b"global".to_vec()))).await.unwrap();
    assert_ne!(
        fe2o3_amqp::transaction::TransactionBase::txn_id(&one),
        fe2o3_amqp::transaction::TransactionBase::txn_id(&two)
    );
    guard(one.post(&mut sender, data("one"))).await.unwrap();
    guard(two.post(&mut sender, data("two"))).await.unwrap();
    guard(two.rollback()).await.unwrap();
    guard(one.commit()).await.unwrap();
    assert_eq!(peek(&broker, "q1").await, ["committed", "plain", "one"]);

    guard(sender.close()).await.unwrap();
    guard(controller.close()).await.unwrap();
    session.end().await.unwrap();
    connection.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_accept_rolled_back_leaves_the_lock_and_a_committed_one_completes() {
    let (broker, _clock, url, _addr, _trigger) = start().await;
    broker.send("q1", vec![ironbus_core::Message::new("m")]).await.unwrap();
    let mut connection = guard(Connection::open("txn-settle", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    let controller = guard(Controller::attach(&mut session, "controller")).await.unwrap();
    let mut receiver = guard(
        Receiver::builder()
            .name("receiver")
            .source("q1")
            .sender_settle_mode(SenderSettleMode::Unsettled)
            .receiver_settle_mode(ReceiverSettleMode::First)
            .attach(&mut session),
    )
    .await
    .unwrap();
    let delivery = guard(receiver.recv::<Data>()).await.unwrap();
    assert_eq!(delivery.body().0.as_slice(), b"m");

    // Accepted in a transaction that is rolled back: the message stays locked by this link,
    // and its lock token completes it afterwards.
    let txn = guard(Transaction::declare(&controller, None)).await.unwrap();
    guard(txn.accept(&mut receiver, &delivery)).await.unwrap();
    guard(txn.rollback()).await.unwrap();
    assert_eq!(peek(&broker, "q1").await, ["m"], "not completed by the rolled-back accept");
    let tag = delivery.delivery_tag().as_ref();
    let token = ironbus_transport_amqp::codec::delivery_tag_to_lock_token(tag).unwrap();
    guard(broker.complete("q1", ironbus_core::LockToken(token))).await.unwrap();
    assert!(peek(&broker, "q1").await.is_empty());

    // Accepted in a transaction that commits: gone at the commit.
    broker.send("q1", vec![ironbus_core::Message::new("n")]).await.unwrap();
    let delivery = guard(receiver.recv::<Data>()).await.unwrap();
    let txn = guard(Transaction::declare(&controller, None)).await.unwrap();
    guard(txn.accept(&mut receiver, &delivery)).await.unwrap();
    assert_eq!(peek(&broker, "q1").await, ["n"], "still there before the commit");
    guard(txn.commit()).await.unwrap();
    assert!(peek(&broker, "q1").await.is_empty(), "completed at the commit");
    guard(receiver.close()).await.unwrap();

    guard(controller.close()).await.unwrap();
    session.end().await.unwrap();
    connection.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_transaction_refuses_work_and_its_discharge_is_unknown() {
    let (broker, clock, url, _addr, _trigger) = start().await;
    let mut connection = guard(Connection::open("txn-timeout", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    let controller = guard(Controller::attach(&mut session, "controller")).await.unwrap();
    let mut sender = guard(Sender::attach(&mut session, "sender", "q1")).await.unwrap();
    let txn = guard(Transaction::declare(&controller, None)).await.unwrap();
    guard(txn.post(&mut sender, data("late"))).await.unwrap();
    clock.advance(ironbus_core::transaction::TIMEOUT + Duration::from_secs(1));
    // Refused (a bare rejected outcome, which fe2o3 reports as an illegal state).
    assert!(guard(txn.post(&mut sender, data("later"))).await.is_err());
    match guard(txn.commit()).await {
        Err(fe2o3_amqp::transaction::ControllerSendError::Rejected(rejected)) => {
            let error = rejected.error.expect("a reason");
            assert!(is_unknown_id(&error.condition), "{error:?}");
        }
        other => panic!("the commit of a timed-out transaction succeeded: {other:?}"),
    }
    assert!(peek(&broker, "q1").await.is_empty());
    guard(sender.close()).await.unwrap();
    guard(controller.close()).await.unwrap();
    session.end().await.unwrap();
    connection.close().await.unwrap();
}

// ---- raw frames, as .NET and Java send them ----

impl Raw {
    async fn coordinator(&mut self, channel: u16, handle: u32, capabilities: Vec<TxnCapability>) {
        let reply = self.attach(channel, coordinator_attach(handle, capabilities)).await;
        match reply.target.as_deref() {
            Some(TargetArchetype::Coordinator(c)) => {
                let offered = c.capabilities.as_ref().map(|a| a.0.clone()).unwrap_or_default();
                assert_eq!(offered, [TxnCapability::LocalTransactions]);
            }
            other => panic!("the coordinator attach was refused: {other:?}"),
        }
    }

    /// Declares on coordinator link `handle` (delivery `id`); returns the txn-id.
    async fn declare(&mut self, channel: u16, handle: u32, id: u32) -> Binary {
        self.transfer(channel, handle, id, false, None, value(Declare { global_id: None })).await;
        match self.outcome(channel, id).await {
            DeliveryState::Declared(declared) => declared.txn_id,
            other => panic!("a declare must be answered with declared: {other:?}"),
        }
    }

    async fn discharge(
        &mut self,
        channel: u16,
        handle: u32,
        id: u32,
        txn_id: &Binary,
        fail: bool,
    ) -> DeliveryState {
        self.write_discharge(channel, handle, id, txn_id, fail).await;
        self.outcome(channel, id).await
    }

    /// Sends a discharge without waiting for its outcome.
    async fn write_discharge(
        &mut self,
        channel: u16,
        handle: u32,
        id: u32,
        txn_id: &Binary,
        fail: bool,
    ) {
        let discharge = Discharge { txn_id: txn_id.clone(), fail: Some(fail) };
        self.transfer(channel, handle, id, false, None, value(discharge)).await;
    }
}

fn transactional(txn_id: &Binary, outcome: Option<Outcome>) -> Option<DeliveryState> {
    Some(DeliveryState::TransactionalState(TransactionalState { txn_id: txn_id.clone(), outcome }))
}

fn coordinator_attach(handle: u32, capabilities: Vec<TxnCapability>) -> Attach {
    let coordinator = Coordinator::new((!capabilities.is_empty()).then_some(Array(capabilities)));
    Attach {
        name: format!("coordinator-{handle}"),
        handle: Handle(handle),
        role: Role::Sender,
        snd_settle_mode: SenderSettleMode::Unsettled,
        rcv_settle_mode: ReceiverSettleMode::First,
        source: Some(Box::new(Source::builder().address(format!("controller-{handle}")).build())),
        target: Some(Box::new(TargetArchetype::Coordinator(coordinator))),
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count: Some(0),
        max_message_size: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

/// An encoded message with a data body `body`.
fn message(body: &str) -> Vec<u8> {
    serde_amqp::to_vec(&Data(body.as_bytes().to_vec().into())).unwrap()
}

/// An error condition's symbol.
fn condition(condition: &ErrorCondition) -> String {
    let symbol: Symbol = match condition {
        ErrorCondition::TransactionError(e) => Symbol::from(e),
        ErrorCondition::Custom(s) => s.clone(),
        ErrorCondition::AmqpError(e) => Symbol::from(e),
        other => panic!("{other:?}"),
    };
    symbol.0
}

fn rejected_with(state: &DeliveryState, condition: &str) {
    match state {
        DeliveryState::Rejected(r) => {
            let error = r.error.as_ref().expect("a reason");
            assert_eq!(self::condition(&error.condition), condition, "{error:?}");
        }
        other => panic!("expected a rejection with {condition}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_entity_session_completes_on_q1_and_sends_to_q2_in_one_transaction() {
    let (broker, _clock, _url, addr, _trigger) = start().await;
    broker.send("q1", vec![ironbus_core::Message::new("in")]).await.unwrap();
    let mut raw = Raw::connect(&addr).await;
    raw.begin(0).await;
    // .NET's cross-entity session: a coordinator first, then the TransactionController's
    // own, then the entity links (the receiver's entity is the via entity).
    raw.coordinator(0, 0, vec![]).await;
    raw.coordinator(0, 1, vec![]).await;
    raw.attach(0, link_attach(2, Role::Receiver, "q1", Some("receiver-2"))).await;
    raw.write(flow(0, 2, 1)).await;
    raw.attach(0, link_attach(3, Role::Sender, "q2", None)).await;

    let txn = raw.declare(0, 1, 0).await;
    assert!(txn.len() <= 32, "{txn:?}");
    let (_, transfer, _) =
        raw.expect(|_, p| matches!(p, Performative::Transfer(t) if t.handle.0 == 2)).await;
    let Performative::Transfer(transfer) = transfer else { unreachable!() };
    let received = transfer.delivery_id.unwrap();
    let accept = Disposition {
        role: Role::Receiver,
        first: received,
        last: None,
        settled: false,
        state: transactional(&txn, Some(Outcome::Accepted(Accepted {}))),
        batchable: false,
    };
    raw.frame(0, Performative::Disposition(accept)).await;
    raw.transfer(0, 3, 1, false, transactional(&txn, None), message("out")).await;

    // The settlement's and the send's outcomes: the transactional state, accepted.
    let (_, settled, _) = raw
        .expect(|_, p| matches!(p, Performative::Disposition(d) if d.role == Role::Sender))
        .await;
    let Performative::Disposition(settled) = settled else { unreachable!() };
    assert_eq!(settled.first, received);
    assert_eq!(settled.state, transactional(&txn, Some(Outcome::Accepted(Accepted {}))));
    let sent = raw.outcome(0, 1).await;
    assert_eq!(Some(sent), transactional(&txn, Some(Outcome::Accepted(Accepted {}))));
    assert_eq!(peek(&broker, "q1").await, ["in"], "locked, not completed before the commit");
    assert!(peek(&broker, "q2").await.is_empty(), "nothing sent before the commit");

    let discharged = raw.discharge(0, 1, 2, &txn, false).await;
    assert!(matches!(discharged, DeliveryState::Accepted(_)), "{discharged:?}");
    assert!(peek(&broker, "q1").await.is_empty(), "completed at the commit");
    // Through q1's transfer queue, then forwarded.
    eventually(&broker, "q2", &["out"]).await;

    // A discharged txn-id is unknown from then on.
    let again = raw.discharge(0, 0, 3, &txn, false).await;
    rejected_with(&again, "amqp:transaction:unknown-id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_settled_management_requests_in_a_transaction_take_effect_at_commit_only() {
    let (broker, clock, _url, addr, _trigger) = start().await;
    let mut raw = Raw::connect(&addr).await;
    raw.begin(0).await;
    raw.coordinator(0, 0, vec![]).await;
    // Management links on their own session, as .NET opens them.
    raw.begin(1).await;
    raw.attach(1, link_attach(0, Role::Sender, "q1/$management", None)).await;
    raw.attach(1, link_attach(1, Role::Receiver, "q1/$management", Some("reply"))).await;
    raw.write(flow(1, 1, 10)).await;

    let at = ironbus_core::Clock::now(&clock).as_millis() + 3_600_000;
    let scheduled = |body: &str| {
        let annotations = MessageAnnotations::builder()
            .insert(
                Symbol::from("x-opt-scheduled-enqueue-time"),
                Value::Timestamp(AmqpTimestamp::from_milliseconds(at)),
            )
            .build();
        let mut encoded = serde_amqp::to_vec(&annotations).unwrap();
        encoded.extend(message(body));
        map(vec![(
            "messages",
            Value::List(vec![map(vec![
                ("message", Value::Binary(Binary::from(encoded))),
                ("message-id", Value::String(body.to_owned())),
            ])]),
        )])
    };
    // Rolled back: nothing scheduled.
    let txn = raw.declare(0, 0, 0).await;
    let body = request("com.microsoft:schedule-message", 1, "reply", scheduled("rolled-back"));
    raw.transfer(1, 0, 0, true, transactional(&txn, None), body).await;
    assert_eq!(raw.response().await, (200, None));
    let discharged = raw.discharge(0, 0, 1, &txn, true).await;
    assert!(matches!(discharged, DeliveryState::Accepted(_)), "{discharged:?}");
    assert!(peek(&broker, "q1").await.is_empty(), "nothing scheduled after the rollback");
    // A pre-settled request gets no disposition.
    assert!(
        !raw.seen.iter().any(|(ch, p, _)| *ch == 1 && matches!(p, Performative::Disposition(_))),
        "{:?}",
        raw.seen
    );

    // Committed: scheduled.
    let txn = raw.declare(0, 0, 2).await;
    let body = request("com.microsoft:schedule-message", 2, "reply", scheduled("committed"));
    raw.transfer(1, 0, 1, true, transactional(&txn, None), body).await;
    assert_eq!(raw.response().await, (200, None));
    assert!(peek(&broker, "q1").await.is_empty(), "nothing scheduled before the commit");
    let discharged = raw.discharge(0, 0, 3, &txn, false).await;
    assert!(matches!(discharged, DeliveryState::Accepted(_)), "{discharged:?}");
    assert_eq!(peek(&broker, "q1").await, ["committed"]);

    // A txn-id this connection never declared.
    let unknown = Binary::from(b"txn:nobody:1".to_vec());
    let body = request("com.microsoft:schedule-message", 3, "reply", scheduled("unknown"));
    raw.transfer(1, 0, 2, true, transactional(&unknown, None), body).await;
    let (code, condition) = raw.response().await;
    assert_eq!(code, 400);
    assert_eq!(condition.as_deref(), Some("amqp:transaction:unknown-id"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_asking_for_distributed_transactions_is_refused() {
    let (_broker, _clock, _url, addr, _trigger) = start().await;
    let mut raw = Raw::connect(&addr).await;
    raw.begin(0).await;
    let attach = coordinator_attach(
        0,
        vec![TxnCapability::LocalTransactions, TxnCapability::DistributedTransactions],
    );
    let reply = raw.attach(0, attach).await;
    assert!(reply.target.is_none(), "{reply:?}");
    let (_, detach, _) = raw.expect(|_, p| matches!(p, Performative::Detach(_))).await;
    let Performative::Detach(detach) = detach else { unreachable!() };
    let error = detach.error.expect("a reason");
    assert_eq!(condition(&error.condition), "amqp:precondition-failed");
    assert_eq!(
        error.description.as_deref(),
        Some(
            "Transaction coordinator did not support all desired capabilities: \
             amqp:distributed-transactions"
        )
    );
    // Local transactions only: accepted.
    raw.coordinator(0, 1, vec![TxnCapability::LocalTransactions]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_txn_id_is_unknown_on_another_connection() {
    let (broker, _clock, _url, addr, _trigger) = start().await;
    let mut a = Raw::connect(&addr).await;
    a.begin(0).await;
    a.coordinator(0, 0, vec![]).await;
    let txn = a.declare(0, 0, 0).await;

    let mut b = Raw::connect(&addr).await;
    b.begin(0).await;
    b.coordinator(0, 0, vec![]).await;
    b.attach(0, link_attach(1, Role::Sender, "q1", None)).await;
    b.transfer(0, 1, 0, false, transactional(&txn, None), message("foreign")).await;
    rejected_with(&b.outcome(0, 0).await, "amqp:transaction:unknown-id");
    rejected_with(&b.discharge(0, 0, 1, &txn, false).await, "amqp:transaction:unknown-id");

    // On its own connection it works, from another session too.
    a.begin(1).await;
    a.attach(1, link_attach(0, Role::Sender, "q1", None)).await;
    a.transfer(1, 0, 0, false, transactional(&txn, None), message("own")).await;
    let sent = a.outcome(1, 0).await;
    assert_eq!(Some(sent), transactional(&txn, Some(Outcome::Accepted(Accepted {}))));
    let discharged = a.discharge(0, 0, 1, &txn, false).await;
    assert!(matches!(discharged, DeliveryState::Accepted(_)), "{discharged:?}");
    assert_eq!(peek(&broker, "q1").await, ["own"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detaching_the_coordinator_rolls_its_transactions_back() {
    let (broker, _clock, _url, addr, _trigger) = start().await;
    let mut raw = Raw::connect(&addr).await;
    raw.begin(0).await;
    raw.coordinator(0, 0, vec![]).await;
    raw.coordinator(0, 1, vec![]).await;
    raw.attach(0, link_attach(2, Role::Sender, "q1", None)).await;
    let txn = raw.declare(0, 0, 0).await;
    raw.transfer(0, 2, 1, false, transactional(&txn, None), message("never")).await;
    let sent = raw.outcome(0, 1).await;
    assert_eq!(Some(sent), transactional(&txn, Some(Outcome::Accepted(Accepted {}))));
    raw.frame(0, Performative::Detach(Detach { handle: Handle(0), closed: true, error: None }))
        .await;
    raw.expect(|_, p| matches!(p, Performative::Detach(d) if d.handle.0 == 0)).await;
    // Rolled back: gone, and the message never appears.
    rejected_with(&raw.discharge(0, 1, 2, &txn, false).await, "amqp:transaction:unknown-id");
    raw.transfer(0, 2, 3, false, transactional(&txn, None), message("after")).await;
    rejected_with(&raw.outcome(0, 3).await, "amqp:transaction:unknown-id");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(peek(&broker, "q1").await.is_empty());

    // Closing the connection rolls back what it left open, too.
    let txn = raw.declare(0, 1, 4).await;
    raw.transfer(0, 2, 5, false, transactional(&txn, None), message("never either")).await;
    raw.outcome(0, 5).await;
    drop(raw);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(peek(&broker, "q1").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_via_link_sends_through_its_target_to_the_destination() {
    let (broker, _clock, _url, addr, _trigger) = start().await;
    let mut raw = Raw::connect(&addr).await;
    raw.begin(0).await;
    raw.coordinator(0, 0, vec![]).await;
    let mut attach = link_attach(1, Role::Sender, "q1", None);
    let mut properties = fe2o3_amqp::types::definitions::Fields::new();
    properties.insert(
        Symbol::from("com.microsoft:transfer-destination-address"),
        Value::String("q2".to_owned()),
    );
    attach.properties = Some(properties);
    let reply = raw.attach(0, attach).await;
    assert!(reply.target.is_some(), "{reply:?}");
    // Outside a transaction.
    raw.transfer(0, 1, 0, false, None, message("plain")).await;
    assert!(matches!(raw.outcome(0, 0).await, DeliveryState::Accepted(_)));
    eventually(&broker, "q2", &["plain"]).await;
    // In one.
    let txn = raw.declare(0, 0, 1).await;
    raw.transfer(0, 1, 2, false, transactional(&txn, None), message("in txn")).await;
    raw.outcome(0, 2).await;
    assert!(matches!(raw.discharge(0, 0, 3, &txn, false).await, DeliveryState::Accepted(_)));
    eventually(&broker, "q2", &["plain", "in txn"]).await;
    assert!(peek(&broker, "q1").await.is_empty(), "nothing stays in the via entity");

    // A destination that does not exist: refused.
    let mut attach = link_attach(2, Role::Sender, "q1", None);
    let mut properties = fe2o3_amqp::types::definitions::Fields::new();
    properties.insert(
        Symbol::from("com.microsoft:transfer-destination-address"),
        Value::String("missing".to_owned()),
    );
    attach.properties = Some(properties);
    let reply = raw.attach(0, attach).await;
    assert!(reply.target.is_none(), "{reply:?}");
}

/// A connection with a coordinator (handle 0) and a receiver on q1 (handle 1) that got one
/// message, "m", sent to q1 first; and that delivery's id.
async fn receive_one(broker: &Broker, addr: &str) -> (Raw, u32) {
    broker.send("q1", vec![ironbus_core::Message::new("m")]).await.unwrap();
    let mut raw = Raw::connect(addr).await;
    raw.begin(0).await;
    raw.coordinator(0, 0, vec![]).await;
    raw.attach(0, link_attach(1, Role::Receiver, "q1", Some("receiver"))).await;
    raw.write(flow(0, 1, 1)).await;
    let (_, transfer, _) =
        raw.expect(|_, p| matches!(p, Performative::Transfer(t) if t.handle.0 == 1)).await;
    let Performative::Transfer(transfer) = transfer else { unreachable!() };
    (raw, transfer.delivery_id.unwrap())
}

/// The client's unsettled disposition of our delivery `first`.
fn unsettled_disposition(first: u32, state: Option<DeliveryState>) -> Performative {
    Performative::Disposition(Disposition {
        role: Role::Receiver,
        first,
        last: None,
        settled: false,
        state,
        batchable: false,
    })
}

/// Completes delivery `received` in a transaction (declared with delivery id 0 on the
/// coordinator, handle 0) that is then rolled back (delivery id 1); checks that our answer to
/// the transactional disposition echoes it and leaves the delivery unsettled.
async fn completed_and_rolled_back(raw: &mut Raw, received: u32) {
    let txn = raw.declare(0, 0, 0).await;
    let completed = transactional(&txn, Some(Outcome::Accepted(Accepted {})));
    raw.frame(0, unsettled_disposition(received, completed.clone())).await;
    let rolled_back = raw.discharge(0, 0, 1, &txn, true).await;
    assert!(matches!(rolled_back, DeliveryState::Accepted(_)), "{rolled_back:?}");
    let (_, echo, _) = raw
        .expect(|_, p| matches!(p, Performative::Disposition(d) if d.role == Role::Sender))
        .await;
    let Performative::Disposition(echo) = echo else { unreachable!() };
    assert_eq!(echo.state, completed);
    assert!(!echo.settled, "the answer leaves the delivery open until the commit: {echo:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_settled_in_a_rolled_back_transaction_settles_again_on_its_link() {
    let (broker, _clock, _url, addr, _trigger) = start().await;
    let (mut raw, received) = receive_one(&broker, &addr).await;
    let dispose = |state| unsettled_disposition(received, state);

    completed_and_rolled_back(&mut raw, received).await;
    assert_eq!(peek(&broker, "q1").await, ["m"]);

    // Again in a transaction that commits: the commit settles the delivery.
    let txn = raw.declare(0, 0, 2).await;
    raw.frame(0, dispose(transactional(&txn, Some(Outcome::Accepted(Accepted {}))))).await;
    let (_, echo, _) = raw
        .expect(|_, p| matches!(p, Performative::Disposition(d) if d.role == Role::Sender))
        .await;
    let Performative::Disposition(echo) = echo else { unreachable!() };
    assert!(!echo.settled, "{echo:?}");
    raw.write_discharge(0, 0, 3, &txn, false).await;
    let (_, settled, _) = raw
        .expect(|_, p| {
            matches!(p, Performative::Disposition(d)
                if d.role == Role::Sender && d.first == received && d.settled)
        })
        .await;
    assert!(matches!(settled, Performative::Disposition(_)));
    assert!(matches!(raw.outcome(0, 3).await, DeliveryState::Accepted(_)));
    assert!(peek(&broker, "q1").await.is_empty(), "completed by the commit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_settled_in_a_rolled_back_transaction_settles_again_outside_one() {
    let (broker, _clock, _url, addr, _trigger) = start().await;
    let (mut raw, received) = receive_one(&broker, &addr).await;
    let dispose = |state| unsettled_disposition(received, state);
    completed_and_rolled_back(&mut raw, received).await;
    assert_eq!(peek(&broker, "q1").await, ["m"]);

    // The same delivery, settled again on the link outside any transaction.
    raw.frame(0, dispose(Some(DeliveryState::Accepted(Accepted {})))).await;
    let (_, echo, _) = raw
        .expect(|_, p| matches!(p, Performative::Disposition(d) if d.role == Role::Sender))
        .await;
    let Performative::Disposition(echo) = echo else { unreachable!() };
    assert!(matches!(echo.state, Some(DeliveryState::Accepted(_))), "{echo:?}");
    assert!(peek(&broker, "q1").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_sent_in_a_transaction_is_stored_whole_at_commit() {
    let (broker, _clock, _url, addr, _trigger) = start().await;
    let mut raw = Raw::connect(&addr).await;
    raw.begin(0).await;
    raw.coordinator(0, 0, vec![]).await;
    raw.attach(0, link_attach(1, Role::Sender, "q1", None)).await;
    let txn = raw.declare(0, 0, 0).await;
    // Service Bus's batch format: one data section per encoded message.
    let mut batch = Vec::new();
    for body in ["b1", "b2", "b3"] {
        batch.extend(serde_amqp::to_vec(&Data(message(body).into())).unwrap());
    }
    raw.transfer_format(0, (1, 1), false, transactional(&txn, None), 0x8001_3700, batch).await;
    let sent = raw.outcome(0, 1).await;
    assert_eq!(Some(sent), transactional(&txn, Some(Outcome::Accepted(Accepted {}))));
    assert!(peek(&broker, "q1").await.is_empty());
    assert!(matches!(raw.discharge(0, 0, 2, &txn, false).await, DeliveryState::Accepted(_)));
    assert_eq!(peek(&broker, "q1").await, ["b1", "b2", "b3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthenticated_connection_attaches_a_coordinator_and_declares() {
    let (_broker, _clock, _url, addr, _trigger) = start().await;
    let mut raw = Raw::anonymous(&addr).await;
    raw.begin(0).await;
    // The Rust SDK's controller, before any CBS put-token.
    raw.coordinator(0, 0, vec![]).await;
    let txn = raw.declare(0, 0, 0).await;
    // Declaring needs no right; an empty transaction commits.
    assert!(matches!(raw.discharge(0, 0, 1, &txn, false).await, DeliveryState::Accepted(_)));
    // The entity links are authorized as usual.
    let reply = raw.attach(0, link_attach(1, Role::Sender, "q1", None)).await;
    assert!(reply.target.is_none(), "an unauthorized sender was attached: {reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_entity_transaction_refuses_a_settlement_off_its_via_entity_and_is_doomed() {
    let (broker, _clock, _url, addr, _trigger) = start().await;
    broker.create_queue("q3", QueueDescription::default()).await.unwrap();
    broker.send("q3", vec![ironbus_core::Message::new("elsewhere")]).await.unwrap();
    let mut raw = Raw::connect(&addr).await;
    raw.begin(0).await;
    raw.coordinator(0, 0, vec![]).await;
    // q1 is the via entity: its link came first.
    raw.attach(0, link_attach(1, Role::Receiver, "q1", Some("r1"))).await;
    raw.attach(0, link_attach(2, Role::Receiver, "q3", Some("r3"))).await;
    raw.write(flow(0, 2, 1)).await;
    let (_, transfer, _) =
        raw.expect(|_, p| matches!(p, Performative::Transfer(t) if t.handle.0 == 2)).await;
    let Performative::Transfer(transfer) = transfer else { unreachable!() };
    let received = transfer.delivery_id.unwrap();
    let txn = raw.declare(0, 0, 0).await;
    let accept = Disposition {
        role: Role::Receiver,
        first: received,
        last: None,
        settled: false,
        state: transactional(&txn, Some(Outcome::Accepted(Accepted {}))),
        batchable: false,
    };
    raw.frame(0, Performative::Disposition(accept)).await;
    let (_, refused, _) = raw
        .expect(|_, p| matches!(p, Performative::Disposition(d) if d.role == Role::Sender))
        .await;
    let Performative::Disposition(refused) = refused else { unreachable!() };
    rejected_with(refused.state.as_ref().unwrap(), "amqp:not-allowed");
    // The failed operation doomed the transaction.
    rejected_with(&raw.discharge(0, 0, 1, &txn, false).await, "amqp:transaction:rollback");
    assert_eq!(peek(&broker, "q3").await, ["elsewhere"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_acquisition_is_refused_loudly() {
    let (broker, _clock, _url, addr, _trigger) = start().await;
    broker.send("q1", vec![ironbus_core::Message::new("m")]).await.unwrap();
    let mut raw = Raw::connect(&addr).await;
    raw.begin(0).await;
    raw.coordinator(0, 0, vec![]).await;
    raw.attach(0, link_attach(1, Role::Receiver, "q1", Some("r1"))).await;
    let txn = raw.declare(0, 0, 0).await;
    let mut properties = fe2o3_amqp::types::definitions::Fields::new();
    properties.insert(Symbol::from("txn-id"), Value::Binary(txn));
    let acquire = fe2o3_amqp::types::performatives::Flow {
        next_incoming_id: Some(0),
        incoming_window: u32::MAX,
        next_outgoing_id: 1,
        outgoing_window: u32::MAX,
        handle: Some(Handle(1)),
        delivery_count: Some(0),
        link_credit: Some(1),
        available: None,
        drain: false,
        echo: false,
        properties: Some(properties),
    };
    raw.frame(0, Performative::Flow(acquire)).await;
    let (_, detach, _) =
        raw.expect(|_, p| matches!(p, Performative::Detach(d) if d.handle.0 == 1)).await;
    let Performative::Detach(detach) = detach else { unreachable!() };
    let error = detach.error.expect("a reason");
    assert_eq!(condition(&error.condition), "amqp:not-implemented");
    assert_eq!(peek(&broker, "q1").await, ["m"], "nothing delivered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_disposition_and_cancel_in_a_transaction_apply_at_commit_only() {
    let (broker, clock, _url, addr, _trigger) = start().await;
    broker.send("q1", vec![ironbus_core::Message::new("locked")]).await.unwrap();
    let at = Timestamp::from_millis(ironbus_core::Clock::now(&clock).as_millis() + 3_600_000);
    let scheduled = ironbus_core::Message::new("scheduled").with_scheduled_enqueue_time(at);
    let outcomes = broker.schedule("q1", vec![scheduled]).await.unwrap();
    let ironbus_core::SendOutcome::Enqueued(seq) = outcomes[0] else { panic!("{outcomes:?}") };

    let mut raw = Raw::connect(&addr).await;
    raw.begin(0).await;
    raw.coordinator(0, 0, vec![]).await;
    raw.attach(0, link_attach(1, Role::Receiver, "q1", Some("r1"))).await;
    raw.write(flow(0, 1, 1)).await;
    let (_, transfer, _) =
        raw.expect(|_, p| matches!(p, Performative::Transfer(t) if t.handle.0 == 1)).await;
    let Performative::Transfer(transfer) = transfer else { unreachable!() };
    let tag = transfer.delivery_tag.unwrap();
    let token = ironbus_transport_amqp::codec::delivery_tag_to_lock_token(tag.as_ref()).unwrap();
    raw.begin(1).await;
    raw.attach(1, link_attach(0, Role::Sender, "q1/$management", None)).await;
    raw.attach(1, link_attach(1, Role::Receiver, "q1/$management", Some("reply"))).await;
    raw.write(flow(1, 1, 10)).await;
    let complete = || {
        map(vec![
            ("disposition-status", Value::String("completed".into())),
            ("lock-tokens", Value::List(vec![Value::String(token.to_string())])),
        ])
    };
    let cancel = || map(vec![("sequence-numbers", Value::List(vec![Value::Long(seq.0)]))]);
    let both = ["locked", "scheduled"];

    // Rolled back: still locked (and scheduled).
    let txn = raw.declare(0, 0, 0).await;
    let body = request("com.microsoft:update-disposition", 1, "reply", complete());
    raw.transfer(1, 0, 0, true, transactional(&txn, None), body).await;
    assert_eq!(raw.response().await, (200, None));
    let body = request("com.microsoft:cancel-scheduled-message", 2, "reply", cancel());
    raw.transfer(1, 0, 1, true, transactional(&txn, None), body).await;
    assert_eq!(raw.response().await, (200, None));
    assert_eq!(peek(&broker, "q1").await, both, "nothing applied before the discharge");
    assert!(matches!(raw.discharge(0, 0, 1, &txn, true).await, DeliveryState::Accepted(_)));
    assert_eq!(peek(&broker, "q1").await, both, "nothing applied by the rollback");

    // Committed: completed and cancelled.
    let txn = raw.declare(0, 0, 2).await;
    let body = request("com.microsoft:update-disposition", 3, "reply", complete());
    raw.transfer(1, 0, 2, true, transactional(&txn, None), body).await;
    assert_eq!(raw.response().await, (200, None));
    let body = request("com.microsoft:cancel-scheduled-message", 4, "reply", cancel());
    raw.transfer(1, 0, 3, true, transactional(&txn, None), body).await;
    assert_eq!(raw.response().await, (200, None));
    assert_eq!(peek(&broker, "q1").await, both);
    assert!(matches!(raw.discharge(0, 0, 3, &txn, false).await, DeliveryState::Accepted(_)));
    assert!(peek(&broker, "q1").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_session_state_in_a_transaction_applies_at_commit_only() {
    let (broker, _clock, _url, addr, _trigger) = start().await;
    let description = QueueDescription { requires_session: true, ..Default::default() };
    broker.create_queue("sq", description).await.unwrap();
    let message = ironbus_core::Message::new("m").with_session_id("s");
    broker.send("sq", vec![message]).await.unwrap();
    let mut raw = Raw::connect(&addr).await;
    raw.begin(0).await;
    raw.coordinator(0, 0, vec![]).await;
    let mut attach = link_attach(1, Role::Receiver, "sq", Some("r1"));
    attach.source = Some(Box::new(
        Source::builder()
            .address("sq")
            .add_to_filter_using_legacy_format(
                Symbol::from("com.microsoft:session-filter"),
                Value::String("s".to_owned()),
            )
            .build(),
    ));
    let reply = raw.attach(0, attach).await;
    assert!(reply.source.is_some(), "{reply:?}");
    raw.begin(1).await;
    raw.attach(1, link_attach(0, Role::Sender, "sq/$management", None)).await;
    raw.attach(1, link_attach(1, Role::Receiver, "sq/$management", Some("reply"))).await;
    raw.write(flow(1, 1, 10)).await;
    let set = |state: &str| {
        map(vec![
            ("session-id", Value::String("s".into())),
            ("session-state", Value::Binary(Binary::from(state.as_bytes().to_vec()))),
        ])
    };
    let mut next = 0;
    let mut state = async |raw: &mut Raw| {
        next += 1;
        let get = map(vec![("session-id", Value::String("s".into()))]);
        let body = request("com.microsoft:get-session-state", 100 + next, "reply", get);
        raw.transfer(1, 0, 100 + next as u32, true, None, body).await;
        let (_, _, payload) = raw
            .expect(|ch, p| ch == 1 && matches!(p, Performative::Transfer(t) if t.handle.0 == 1))
            .await;
        let response = ironbus_transport_amqp::request::Request::decode(&payload).unwrap();
        match response.field("session-state") {
            Some(Value::Binary(b)) => Some(String::from_utf8(b.to_vec()).unwrap()),
            _ => None,
        }
    };

    let txn = raw.declare(0, 0, 0).await;
    let body = request("com.microsoft:set-session-state", 1, "reply", set("rolled back"));
    raw.transfer(1, 0, 0, true, transactional(&txn, None), body).await;
    assert_eq!(raw.response().await, (200, None));
    assert!(matches!(raw.discharge(0, 0, 1, &txn, true).await, DeliveryState::Accepted(_)));
    assert_eq!(state(&mut raw).await, None);

    let txn = raw.declare(0, 0, 2).await;
    let body = request("com.microsoft:set-session-state", 2, "reply", set("committed"));
    raw.transfer(1, 0, 1, true, transactional(&txn, None), body).await;
    assert_eq!(raw.response().await, (200, None));
    assert_eq!(state(&mut raw).await, None, "not set before the commit");
    assert!(matches!(raw.discharge(0, 0, 3, &txn, false).await, DeliveryState::Accepted(_)));
    assert_eq!(state(&mut raw).await.as_deref(), Some("committed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_may_hold_a_thousand_open_transactions() {
    let (_broker, _clock, _url, addr, _trigger) = start().await;
    let mut raw = Raw::connect(&addr).await;
    raw.begin(0).await;
    raw.coordinator(0, 0, vec![]).await;
    let mut ids = std::collections::HashSet::new();
    for id in 0..1000 {
        ids.insert(raw.declare(0, 0, id).await);
    }
    assert_eq!(ids.len(), 1000, "every txn-id is new");
    raw.transfer(0, 0, 1000, false, None, value(Declare { global_id: None })).await;
    rejected_with(&raw.outcome(0, 1000).await, "amqp:resource-limit-exceeded");
    // One discharged makes room for one more.
    let first = ids.iter().next().unwrap().clone();
    assert!(matches!(raw.discharge(0, 0, 1001, &first, true).await, DeliveryState::Accepted(_)));
    raw.declare(0, 0, 1002).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_in_a_timed_out_transaction_is_refused_in_service_bus_words() {
    let (broker, clock, _url, addr, _trigger) = start().await;
    let mut raw = Raw::connect(&addr).await;
    raw.begin(0).await;
    raw.coordinator(0, 0, vec![]).await;
    raw.attach(0, link_attach(1, Role::Sender, "q1", None)).await;
    let txn = raw.declare(0, 0, 0).await;
    raw.transfer(0, 1, 1, false, transactional(&txn, None), message("first")).await;
    raw.outcome(0, 1).await;
    clock.advance(ironbus_core::transaction::TIMEOUT);
    raw.transfer(0, 1, 2, false, transactional(&txn, None), message("late")).await;
    let refused = raw.outcome(0, 2).await;
    rejected_with(&refused, "amqp:not-allowed");
    let DeliveryState::Rejected(rejected) = refused else { unreachable!() };
    let expected = format!(
        "No active Transaction was found for ID '{}'. The Transaction may have timed out or \
         attempted to span multiple top-level entities such as Queue or Topic. The server \
         Transaction timeout is: 00:02:00.",
        String::from_utf8_lossy(&txn)
    );
    assert_eq!(rejected.error.unwrap().description, Some(expected));
    rejected_with(&raw.discharge(0, 0, 3, &txn, false).await, "amqp:transaction:unknown-id");
    assert!(peek(&broker, "q1").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_tick_rolls_back_a_timed_out_transaction() {
    let (broker, clock, _url, addr, _trigger) = start().await;
    let mut raw = Raw::connect(&addr).await;
    raw.begin(0).await;
    raw.coordinator(0, 0, vec![]).await;
    raw.attach(0, link_attach(1, Role::Sender, "q1", None)).await;
    let txn = raw.declare(0, 0, 0).await;
    raw.transfer(0, 1, 1, false, transactional(&txn, None), message("first")).await;
    raw.outcome(0, 1).await;
    clock.advance(ironbus_core::transaction::TIMEOUT);
    // The tick comes every 5 s: after it, the transaction is gone altogether.
    tokio::time::sleep(Duration::from_millis(5500)).await;
    raw.transfer(0, 1, 2, false, transactional(&txn, None), message("late")).await;
    rejected_with(&raw.outcome(0, 2).await, "amqp:transaction:unknown-id");
    rejected_with(&raw.discharge(0, 0, 3, &txn, false).await, "amqp:transaction:unknown-id");
    assert!(peek(&broker, "q1").await.is_empty());
}
