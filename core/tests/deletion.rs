//! Deleting an entity while sends and settlements are queued on its partitions: nothing of it
//! may be written after the delete that removes its records (such keys would sit under a dead
//! entity id for ever, never read nor reclaimed).

#![cfg(feature = "testing")]

use std::sync::Arc;

use bytes::Bytes;
use ironbus_core::testing::{partition_key_prefix, FaultyStore, RecordingStore};
use ironbus_core::types::PartitionId;
use ironbus_core::*;
use ironbus_store_memory::MemoryStore;

mod common;
use common::{guard, path};

async fn broker() -> (Broker, Arc<RecordingStore>) {
    let store = Arc::new(RecordingStore::new(Arc::new(MemoryStore::new())));
    let clock = Arc::new(ManualClock::default());
    let broker = Broker::open(store.clone(), clock, NamespaceLimits::default()).await.unwrap();
    (broker, store)
}

/// The prefix of every key of the entity whose partition 0 has `partition_prefix`.
fn entity_prefix(partition_prefix: Bytes) -> Bytes {
    partition_prefix.slice(..9)
}

/// Sends to `entity` one message after another, each waiting for the last, until a send fails.
fn keep_sending(broker: &Broker, entity: &str) -> tokio::task::JoinHandle<usize> {
    let (broker, entity) = (broker.clone(), entity.to_owned());
    tokio::spawn(async move {
        let mut sent = 0;
        while broker.send(entity.as_str(), vec![Message::new("late")]).await.is_ok() {
            sent += 1;
        }
        sent
    })
}

fn abandon() -> Disposition {
    Disposition::Abandon { properties: Default::default() }
}

/// Checks that no write under `prefix` came after the delete of everything under it, and
/// that the store holds nothing under it.
async fn assert_nothing_left(store: &RecordingStore, prefix: &[u8]) {
    let late = store.written_after_range_delete(prefix);
    assert!(late.is_empty(), "{} keys written after the delete, first {:?}", late.len(), late[0]);
    let end = ironbus_core::store::prefix_end(prefix);
    let left: Vec<Bytes> =
        store.scan(prefix, &end, 100).await.unwrap().into_iter().map(|(k, _)| k).collect();
    assert!(left.is_empty(), "{} keys left under the deleted entity: {left:?}", left.len());
}

#[tokio::test]
async fn a_deleted_queue_leaves_no_key_behind_its_delete() {
    let (broker, store) = broker().await;
    broker.create_queue("q", QueueDescription::default()).await.unwrap();
    let prefix = entity_prefix(partition_key_prefix(&broker, "q", PartitionId(0)).unwrap());
    let messages = (0..20).map(|i| Message::new(format!("m{i}"))).collect();
    broker.send("q", messages).await.unwrap();
    let receiver = broker.open_receiver("q", ReceiveMode::PeekLock).await.unwrap();
    receiver.add_credit(10);
    let mut locked = Vec::new();
    for _ in 0..10 {
        locked.push(guard(receiver.recv()).await.unwrap().lock_token().unwrap());
    }

    // Sends and settlements (an abandon rewrites a message's record) keep coming while the
    // queue is deleted.
    let senders: Vec<_> = (0..4).map(|_| keep_sending(&broker, "q")).collect();
    let settler = {
        let broker = broker.clone();
        tokio::spawn(async move {
            for (i, token) in locked.into_iter().enumerate() {
                let disposition = if i % 2 == 0 { abandon() } else { Disposition::Complete };
                let _ = broker.settle("q", token, disposition).await;
            }
        })
    };
    tokio::task::yield_now().await;
    guard(broker.delete_queue("q")).await.unwrap();
    for sender in senders {
        guard(sender).await.unwrap();
    }
    guard(settler).await.unwrap();
    while guard(receiver.recv()).await.is_some() {}

    assert_nothing_left(&store, &prefix).await;
}

#[tokio::test]
async fn a_deleted_topic_leaves_no_key_of_it_or_its_subscriptions() {
    let (broker, store) = broker().await;
    let topic = EntityDescription::Topic(TopicDescription::default());
    broker.create_entity(&path("t"), topic).await.unwrap();
    let sub = EntityDescription::Subscription(SubscriptionDescription::default());
    broker.create_entity(&path("t/Subscriptions/s"), sub).await.unwrap();
    let topic_prefix = entity_prefix(partition_key_prefix(&broker, "t", PartitionId(0)).unwrap());
    let sub_prefix =
        entity_prefix(partition_key_prefix(&broker, "t/Subscriptions/s", PartitionId(0)).unwrap());
    assert_ne!(topic_prefix, sub_prefix);
    broker.send("t", (0..10).map(|i| Message::new(format!("m{i}"))).collect()).await.unwrap();
    let receiver = broker
        .open_receiver(common::addr("t/Subscriptions/s"), ReceiveMode::PeekLock)
        .await
        .unwrap();
    receiver.add_credit(4);
    let mut locked = Vec::new();
    for _ in 0..4 {
        locked.push(guard(receiver.recv()).await.unwrap().lock_token().unwrap());
    }

    let senders: Vec<_> = (0..4).map(|_| keep_sending(&broker, "t")).collect();
    let settler = {
        let broker = broker.clone();
        tokio::spawn(async move {
            for token in locked {
                let address = common::addr("t/Subscriptions/s");
                let _ = broker.settle(address, token, abandon()).await;
            }
        })
    };
    tokio::task::yield_now().await;
    guard(broker.delete_entity(&path("t"))).await.unwrap();
    for sender in senders {
        guard(sender).await.unwrap();
    }
    guard(settler).await.unwrap();
    while guard(receiver.recv()).await.is_some() {}

    for prefix in [&topic_prefix, &sub_prefix] {
        assert_nothing_left(&store, prefix).await;
    }
    assert!(broker.list_entities(EntityKind::Subscription, 0, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_delete_whose_write_fails_leaves_the_queue_serving() {
    // The partitions stopped for a delete run again when the delete does not commit, and serve
    // what came meanwhile.
    let store = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())));
    let clock = Arc::new(ManualClock::default());
    let broker = Broker::open(store.clone(), clock, NamespaceLimits::default()).await.unwrap();
    broker.create_queue("q", QueueDescription::default()).await.unwrap();
    broker.send("q", vec![Message::new("a")]).await.unwrap();
    let receiver = broker.open_receiver("q", ReceiveMode::PeekLock).await.unwrap();
    store.fail_next_writes(1);
    assert!(broker.delete_queue("q").await.is_err());
    broker.send("q", vec![Message::new("b")]).await.unwrap();
    receiver.add_credit(2);
    assert!(guard(receiver.recv()).await.is_some());
    assert!(guard(receiver.recv()).await.is_some());
    assert_eq!(broker.get_queue_runtime("q").await.unwrap().active_message_count, 2);
}
