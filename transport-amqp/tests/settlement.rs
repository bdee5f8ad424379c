//! Dispositions that arrive together — single ones back to back and ranges — are applied one
//! by one with the right outcome, over a real socket from fe2o3-amqp's client.

mod common;

use std::time::Duration;

use fe2o3_amqp::link::delivery::DeliveryInfo;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::types::definitions::{
    AmqpError, ErrorCondition, ReceiverSettleMode, SenderSettleMode,
};
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::{Data, Message, MessageAnnotations, Outcome, Properties};
use fe2o3_amqp::types::primitives::Symbol;
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use ironbus_core::{Broker, QueueDescription, ShutdownTrigger};

const MESSAGES: usize = 60;

/// A broker with queue `q` (four partitions) behind an AMQP listener; returns the broker and
/// the URL a SASL PLAIN client connects with.
async fn start() -> (Broker, String, ShutdownTrigger) {
    let broker = common::memory_broker().await;
    let description =
        QueueDescription { enable_partitioning: true, partition_count: 4, ..Default::default() };
    broker.create_queue("q", description).await.unwrap();
    let (addr, trigger) = common::serve(broker.clone()).await;
    (broker, format!("amqp://RootManageSharedAccessKey:SAS_KEY_VALUE@{addr}"), trigger)
}

async fn guard<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), future).await.expect("hung")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispositions_read_together_are_each_applied() {
    let (broker, url, _trigger) = start().await;
    let mut connection = guard(Connection::open("settlement-test", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    let mut sender = guard(Sender::attach(&mut session, "sender", "q")).await.unwrap();
    for i in 0..MESSAGES {
        let message = Message::builder().data(Data(format!("m{i}").into_bytes().into())).build();
        guard(sender.send(message)).await.unwrap().accepted_or_else(|o| o).unwrap();
    }
    let mut receiver = guard(
        Receiver::builder()
            .name("receiver")
            .source("q")
            .sender_settle_mode(SenderSettleMode::Unsettled)
            .receiver_settle_mode(ReceiverSettleMode::First)
            .credit_mode(CreditMode::Manual)
            .attach(&mut session),
    )
    .await
    .unwrap();
    guard(receiver.set_credit(MESSAGES as u32)).await.unwrap();
    let (mut deliveries, mut order) = (Vec::new(), Vec::new());
    for _ in 0..MESSAGES {
        let delivery = guard(receiver.recv::<Data>()).await.unwrap();
        order.push(String::from_utf8(delivery.body().0.to_vec()).unwrap());
        deliveries.push(DeliveryInfo::from(&delivery));
    }
    // Nothing waits for the broker between these: 20 single accepts, a range of 20 accepts,
    // then 20 releases in one range. They reach the broker in a few reads at most.
    let mut deliveries = deliveries.into_iter();
    for delivery in deliveries.by_ref().take(20) {
        receiver.accept(delivery).await.unwrap();
    }
    receiver.accept_all(deliveries.by_ref().take(20).collect::<Vec<_>>()).await.unwrap();
    receiver.release_all(deliveries.collect::<Vec<_>>()).await.unwrap();
    // The detach is read after every disposition, and the runtime query queues behind the
    // settlements on each partition.
    guard(receiver.detach()).await.unwrap();
    let runtime = guard(broker.get_queue_runtime("q")).await.unwrap();
    assert_eq!(runtime.active_message_count, 20, "the 20 released are back, the 40 accepted gone");

    let mut again = guard(Receiver::attach(&mut session, "again", "q")).await.unwrap();
    let mut bodies = Vec::new();
    for _ in 0..20 {
        let delivery = guard(again.recv::<Data>()).await.unwrap();
        bodies.push(String::from_utf8(delivery.body().0.to_vec()).unwrap());
        again.accept(&delivery).await.unwrap();
    }
    bodies.sort();
    let mut released = order.split_off(40);
    released.sort();
    assert_eq!(bodies, released, "exactly the released ones come back");
    guard(again.detach()).await.unwrap();
    assert_eq!(guard(broker.get_queue_runtime("q")).await.unwrap().active_message_count, 0);
    session.end().await.unwrap();
    connection.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_of_pipelined_sends_each_arrive_and_a_refusal_keeps_its_error() {
    let (broker, url, _trigger) = start().await;
    let mut connection = guard(Connection::open("acks-test", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    let mut sender = guard(Sender::attach(&mut session, "sender", "q")).await.unwrap();
    // 80 sends in flight at once; the 41st names a session id and a different partition
    // key, which Service Bus refuses.
    let mut outcomes = Vec::new();
    for i in 0..80 {
        let body = Data(format!("m{i}").into_bytes().into());
        let message = if i == 40 {
            Message::builder()
                .properties(Properties::builder().group_id(String::from("session")).build())
                .message_annotations(
                    MessageAnnotations::builder()
                        .insert(OwnedKey::from(Symbol::from("x-opt-partition-key")), "other")
                        .build(),
                )
                .data(body)
                .build()
        } else {
            Message::builder().data(body).build()
        };
        outcomes.push(guard(sender.send_batchable(message)).await.unwrap());
    }
    let mut accepted = 0;
    for (i, outcome) in outcomes.into_iter().enumerate() {
        match guard(outcome).await.unwrap() {
            Outcome::Accepted(_) => accepted += 1,
            Outcome::Rejected(rejected) => {
                assert_eq!(i, 40, "only the oversized message is refused");
                let error = rejected.error.expect("a refusal says why");
                assert_eq!(
                    error.condition,
                    ErrorCondition::AmqpError(AmqpError::NotAllowed),
                    "{error:?}"
                );
                assert!(error.description.is_some_and(|d| d.contains("PartitionKey")));
            }
            other => panic!("send {i}: unexpected outcome {other:?}"),
        }
    }
    assert_eq!(accepted, 79);
    assert_eq!(guard(broker.get_queue_runtime("q")).await.unwrap().active_message_count, 79);
    guard(sender.detach()).await.unwrap();
    session.end().await.unwrap();
    connection.close().await.unwrap();
}
