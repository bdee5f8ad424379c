//! Messages beyond memory and partitions over several stores, through the public [`Broker`]
//! API: bodies live in the store and the body cache is bounded (a backlog is delivered, peeked,
//! deferred and dead-lettered from the store), and an entity's partitions are spread over
//! several stores so that one store's outage limits only its own partitions.
//!
//! Time comes from a [`ManualClock`]; outages from [`FaultyStore`]s around memory stores.
#![cfg(feature = "testing")]

use std::sync::Arc;

use ironbus_core::testing::keys::{self, EntityId};
use ironbus_core::testing::{store_for, FaultyStore};
use ironbus_core::{
    Availability, Broker, BrokerOptions, Disposition, ManualClock, Message, PartitionId,
    PropertyValue, QueueDescription, ReceiveMode, ReceivedMessage, SendOutcome, SequenceNumber,
    Store,
};
use ironbus_store_memory::MemoryStore;

mod common;
use common::guard;

fn partitioned() -> QueueDescription {
    QueueDescription { enable_partitioning: true, ..Default::default() }
}

fn faulty() -> Arc<FaultyStore> {
    Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())))
}

async fn open(stores: &[Arc<FaultyStore>], body_cache_bytes: u64) -> Broker {
    let stores = stores.iter().map(|s| s.clone() as Arc<dyn Store>).collect();
    let options = BrokerOptions { body_cache_bytes, ..Default::default() };
    guard(Broker::open_with(stores, Arc::new(ManualClock::default()), options))
        .await
        .expect("open broker")
}

fn body(i: usize) -> String {
    format!("message {i:04} {}", "x".repeat(100))
}

async fn send_all(broker: &Broker, queue: &str, n: usize) -> Vec<SequenceNumber> {
    let mut seqs = Vec::new();
    for i in 0..n {
        let message = Message::new(body(i)).with_message_id(format!("m{i}"));
        match guard(broker.send(queue, vec![message])).await.expect("send")[..] {
            [SendOutcome::Enqueued(seq)] => seqs.push(seq),
            ref other => panic!("unexpected outcome {other:?}"),
        }
    }
    seqs
}

/// Receives up to `n` messages with one receiver, `batch` of credit at a time.
async fn receive(
    broker: &Broker,
    queue: &str,
    mode: ReceiveMode,
    n: usize,
) -> Vec<ReceivedMessage> {
    let receiver = guard(broker.open_receiver(queue, mode)).await.expect("receiver");
    let mut received = Vec::new();
    while received.len() < n {
        receiver.add_credit(10);
        guard(receiver.drain()).await;
        let before = received.len();
        while let Some(m) = receiver.try_recv() {
            received.push(m);
        }
        if received.len() == before {
            break;
        }
    }
    received
}

fn text(m: &ReceivedMessage) -> String {
    String::from_utf8(m.message.body.to_vec()).expect("utf-8 body")
}

#[tokio::test]
async fn a_backlog_larger_than_the_body_cache_is_delivered_from_the_store() {
    let store = faulty();
    let broker = open(std::slice::from_ref(&store), 2_000).await;
    guard(broker.create_queue("q", QueueDescription::default())).await.unwrap();
    send_all(&broker, "q", 100).await;
    assert!(broker.cached_body_bytes() <= 2_000, "the cache stays within its budget");
    let reads_before = store.gets() + store.scans();

    let received = receive(&broker, "q", ReceiveMode::PeekLock, 100).await;
    let bodies: Vec<String> = received.iter().map(text).collect();
    assert_eq!(bodies, (0..100).map(body).collect::<Vec<_>>(), "every body, in order");
    assert!(store.gets() + store.scans() > reads_before, "bodies were read back from the store");
    for m in &received {
        guard(broker.complete("q", m.lock_token().unwrap())).await.expect("complete");
    }
    assert_eq!(broker.cached_body_bytes(), 0, "a drained queue holds no bodies");
    let runtime = guard(broker.get_queue_runtime("q")).await.unwrap();
    assert_eq!(runtime.total_message_count, 0);
    assert_eq!(runtime.size_in_bytes, 0);
}

#[tokio::test]
async fn receive_and_delete_from_an_uncached_backlog_loses_nothing() {
    let broker = open(&[faulty()], 0).await;
    guard(broker.create_queue("q", partitioned())).await.unwrap();
    send_all(&broker, "q", 60).await;
    assert_eq!(broker.cached_body_bytes(), 0);
    let mut bodies: Vec<String> =
        receive(&broker, "q", ReceiveMode::ReceiveAndDelete, 60).await.iter().map(text).collect();
    bodies.sort();
    assert_eq!(bodies, (0..60).map(body).collect::<Vec<_>>());
    let runtime = guard(broker.get_queue_runtime("q")).await.unwrap();
    assert_eq!(runtime.total_message_count, 0);
}

#[tokio::test]
async fn peek_defer_abandon_and_dead_letter_work_without_cached_bodies() {
    let broker = open(&[faulty()], 0).await;
    guard(broker.create_queue("q", QueueDescription::default())).await.unwrap();
    let seqs = send_all(&broker, "q", 3).await;

    let peeked = guard(broker.peek("q", SequenceNumber(0), 10)).await.unwrap();
    assert_eq!(peeked.iter().map(text).collect::<Vec<_>>(), (0..3).map(body).collect::<Vec<_>>());

    let received = receive(&broker, "q", ReceiveMode::PeekLock, 3).await;
    assert_eq!(received.len(), 3);
    let token = |i: usize| received[i].lock_token().unwrap();
    let props = |k: &str| [(k.to_owned(), PropertyValue::Int(7))].into();
    guard(broker.settle("q", token(0), Disposition::Defer { properties: props("deferred") }))
        .await
        .unwrap();
    guard(broker.settle("q", token(1), Disposition::Abandon { properties: props("abandoned") }))
        .await
        .unwrap();
    let dead_letter = Disposition::DeadLetter {
        reason: Some("bad".into()),
        description: Some("very bad".into()),
        properties: props("dead"),
    };
    guard(broker.settle("q", token(2), dead_letter)).await.unwrap();

    let deferred = guard(broker.receive_deferred("q", &[seqs[0]], ReceiveMode::PeekLock))
        .await
        .expect("receive deferred");
    assert_eq!(text(&deferred[0]), body(0));
    assert_eq!(deferred[0].message.application_properties["deferred"], PropertyValue::Int(7));

    let again = receive(&broker, "q", ReceiveMode::PeekLock, 1).await;
    assert_eq!(again.len(), 1);
    assert_eq!(text(&again[0]), body(1));
    assert_eq!(again[0].broker.delivery_count, 1);
    assert!(again[0].message.application_properties_modified);
    assert_eq!(again[0].message.application_properties["abandoned"], PropertyValue::Int(7));

    let dead = receive(&broker, "q/$DeadLetterQueue", ReceiveMode::PeekLock, 1).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(text(&dead[0]), body(2));
    assert_eq!(dead[0].broker.dead_letter_reason.as_deref(), Some("bad"));
    let p = &dead[0].message.application_properties;
    assert_eq!(p["DeadLetterReason"], PropertyValue::String("bad".into()));
    assert_eq!(p["DeadLetterErrorDescription"], PropertyValue::String("very bad".into()));
    assert_eq!(p["dead"], PropertyValue::Int(7));
}

#[tokio::test]
async fn a_missing_body_is_an_error_not_a_panic_and_the_partition_recovers() {
    let store = faulty();
    let broker = open(std::slice::from_ref(&store), 0).await;
    guard(broker.create_queue("q", QueueDescription::default())).await.unwrap();
    send_all(&broker, "q", 2).await;
    store.set_unavailable(true);
    let peeked = guard(broker.peek("q", SequenceNumber(0), 10)).await;
    assert!(peeked.is_err(), "a body that cannot be read fails the peek: {peeked:?}");
    store.set_unavailable(false);
    // The partition rebuilds itself at its next cycle; the messages are all there.
    let mut peeked = Vec::new();
    for _ in 0..100 {
        if let Ok(p) = guard(broker.peek("q", SequenceNumber(0), 10)).await {
            peeked = p;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(peeked.iter().map(text).collect::<Vec<_>>(), vec![body(0), body(1)]);
}

#[tokio::test]
async fn partitions_are_spread_over_stores_and_one_store_down_limits_only_its_partitions() {
    let stores = [faulty(), faulty()];
    let broker = open(&stores, 1 << 20).await;
    guard(broker.create_queue("q", partitioned())).await.unwrap();
    let id = 1;
    let on_second: Vec<PartitionId> = (0..16)
        .map(PartitionId)
        .filter(|&p| {
            let store = store_for(&broker, id, p);
            Arc::ptr_eq(&store, &(stores[1].clone() as Arc<dyn Store>))
        })
        .collect();
    assert_eq!(on_second.len(), 8, "16 partitions dealt over 2 stores");

    stores[1].set_unavailable(true);
    let runtime = guard(broker.get_queue_runtime("q")).await.unwrap();
    assert_eq!(runtime.availability, Availability::Limited);
    assert_eq!(runtime.unavailable_partitions, on_second);
    // Sends without a key go round the partitions that are still there.
    let seqs = send_all(&broker, "q", 20).await;
    assert!(seqs.iter().all(|s| !on_second.contains(&s.partition(true))), "{seqs:?}");

    stores[1].set_unavailable(false);
    let received = receive(&broker, "q", ReceiveMode::ReceiveAndDelete, 20).await;
    assert_eq!(received.len(), 20);
}

#[tokio::test]
async fn messages_survive_a_restart_on_several_stores() {
    let stores = [faulty(), faulty(), faulty()];
    let broker = open(&stores, 0).await;
    guard(broker.create_queue("q", partitioned())).await.unwrap();
    send_all(&broker, "q", 48).await;
    broker.shutdown();
    drop(broker);

    let broker = open(&stores, 1 << 20).await;
    let mut bodies: Vec<String> =
        receive(&broker, "q", ReceiveMode::ReceiveAndDelete, 48).await.iter().map(text).collect();
    bodies.sort();
    assert_eq!(bodies, (0..48).map(body).collect::<Vec<_>>());
}

#[tokio::test]
async fn the_number_of_stores_cannot_change_after_the_first_start() {
    let stores = [faulty(), faulty()];
    drop(open(&stores, 0).await);
    let fewer = vec![stores[0].clone() as Arc<dyn Store>];
    let reopened =
        guard(Broker::open_with(fewer, Arc::new(ManualClock::default()), BrokerOptions::default()))
            .await;
    let error = reopened.expect_err("a different number of stores is refused");
    assert!(error.to_string().contains("2 stores"), "{error}");
}

/// Body records of partition 0 of entity `id` in the store under `store`.
async fn bodies_in(store: &FaultyStore, id: EntityId) -> usize {
    let start = keys::body_prefix(id, PartitionId(0));
    let mut end = start.to_vec();
    *end.last_mut().expect("a prefix is never empty") += 1;
    guard(store.inner().scan(&start, &end, usize::MAX)).await.expect("scan").len()
}

#[tokio::test]
async fn settled_bodies_are_swept_in_ranges_even_after_a_restart() {
    let store = faulty();
    let broker = open(std::slice::from_ref(&store), 1 << 20).await;
    // The first entity created gets id 1.
    guard(broker.create_queue("q", QueueDescription::default())).await.unwrap();
    send_all(&broker, "q", 3000).await;
    assert_eq!(bodies_in(&store, 1).await, 3000);
    let received = receive(&broker, "q", ReceiveMode::ReceiveAndDelete, 3000).await;
    assert_eq!(received.len(), 3000);
    // Settled in order, each body was the lowest: left for a sweep, swept per 1,024.
    // (Some are left: the last sweep's range ended at the lowest message of its cycle.)
    let left = bodies_in(&store, 1).await;
    assert!(left > 0 && left < 1024, "{left} bodies of settled messages left");

    // A restart forgets what was swept; the first write sweeps everything below.
    broker.shutdown();
    drop(broker);
    let broker = open(std::slice::from_ref(&store), 1 << 20).await;
    send_all(&broker, "q", 1).await;
    assert_eq!(bodies_in(&store, 1).await, 1, "only the new message's body is left");
    let received = receive(&broker, "q", ReceiveMode::ReceiveAndDelete, 1).await;
    assert_eq!(received.len(), 1);
}

#[tokio::test]
async fn bodies_settled_above_a_message_that_stays_wait_for_the_sweep_up_to_a_bound() {
    // What `PartitionState` keeps for the sweep before deleting one by one (DEFERRED_BODIES).
    const DEFERRED: usize = 8 * 1024;
    let store = faulty();
    let broker = open(std::slice::from_ref(&store), 1 << 20).await;
    guard(broker.create_queue("q", QueueDescription::default())).await.unwrap();
    send_all(&broker, "q", 1).await;
    // The oldest message stays, locked, then deferred: every later one is settled above it.
    let held = receive(&broker, "q", ReceiveMode::PeekLock, 1).await;
    let token = held[0].lock_token().unwrap();
    let above = DEFERRED + 300;
    send_all(&broker, "q", above).await;
    let received = receive(&broker, "q", ReceiveMode::ReceiveAndDelete, above).await;
    assert_eq!(received.len(), above);
    // The first ones wait for the sweep; beyond the bound they were deleted one by one.
    assert_eq!(bodies_in(&store, 1).await, 1 + DEFERRED, "held + deferred bodies");
    let defer = Disposition::Defer { properties: Default::default() };
    guard(broker.settle("q", token, defer)).await.unwrap();
    let deferred = guard(broker.receive_deferred(
        "q",
        &[held[0].broker.sequence_number],
        ReceiveMode::ReceiveAndDelete,
    ))
    .await
    .expect("receive deferred");
    assert_eq!(text(&deferred[0]), text(&held[0]));
    // The lowest message is gone: one range delete takes every body left.
    assert_eq!(bodies_in(&store, 1).await, 0, "swept");
}
