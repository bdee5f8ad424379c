//! Session state on RocksDB: set through a session receiver, it survives closing and reopening
//! the database (not just a new broker on the same open store), still counts in the entity's
//! size, keeps the session listed without messages, and a cleared state stays cleared.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ironbus_core::testing::TempDir;
use ironbus_core::{
    Broker, ManualClock, Message, NamespaceLimits, QueueDescription, ReceiveMode, Timestamp,
};
use ironbus_store_rocksdb::{RocksOptions, RocksStore};

async fn guard<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), future).await.expect("hung")
}

/// A broker on the RocksDB database in `dir`, with the manual clock.
async fn open(dir: &TempDir, clock: &Arc<ManualClock>) -> (Broker, Arc<RocksStore>) {
    let store = Arc::new(RocksStore::open(dir.path(), RocksOptions::default()).unwrap());
    let broker = guard(Broker::open(store.clone(), clock.clone(), NamespaceLimits::default()))
        .await
        .unwrap();
    (broker, store)
}

/// Stops the broker and closes the database (once its partitions let go of it).
async fn close(broker: Broker, store: Arc<RocksStore>) {
    broker.shutdown();
    drop(broker);
    guard(async {
        while Arc::strong_count(&store) > 1 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    drop(store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_state_survives_reopening_the_database() {
    let dir = TempDir::new("rocks-sessions");
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_700_000_000_000)));
    let (broker, store) = open(&dir, &clock).await;
    let description = QueueDescription {
        requires_session: true,
        enable_partitioning: true,
        partition_count: 4,
        max_message_size_in_kilobytes: 1,
        ..Default::default()
    };
    guard(broker.create_queue("q", description)).await.unwrap();
    let message = Message::new("m").with_session_id("a");
    guard(broker.send("q", vec![message])).await.unwrap();
    let receiver = guard(broker.accept_session("q", "a", ReceiveMode::PeekLock)).await.unwrap();
    // Over the limit (the entity's maximum message size): refused, nothing stored.
    assert!(receiver.set_state(Some(Bytes::from(vec![0u8; 1025]))).await.is_err());
    guard(receiver.set_state(Some(Bytes::from_static(b"step 1")))).await.unwrap();
    receiver.add_credit(1);
    let m = guard(receiver.recv()).await.unwrap();
    guard(broker.complete("q", m.lock_token().unwrap())).await.unwrap();
    drop(receiver);
    close(broker, store).await;

    let (broker, store) = open(&dir, &clock).await;
    let state = guard(broker.session_state("q", "a")).await.unwrap();
    assert_eq!(state.as_deref(), Some(&b"step 1"[..]));
    assert_eq!(guard(broker.get_queue_runtime("q")).await.unwrap().size_in_bytes, 6);
    let listed = guard(broker.list_sessions("q", None, None, 0, 100)).await.unwrap();
    assert_eq!(listed, ["a".to_string()]);
    let receiver = guard(broker.accept_session("q", "a", ReceiveMode::PeekLock)).await.unwrap();
    guard(receiver.set_state(None)).await.unwrap();
    drop(receiver);
    close(broker, store).await;

    let (broker, store) = open(&dir, &clock).await;
    assert_eq!(guard(broker.session_state("q", "a")).await.unwrap(), None);
    assert!(guard(broker.list_sessions("q", None, None, 0, 100)).await.unwrap().is_empty());
    assert_eq!(guard(broker.get_queue_runtime("q")).await.unwrap().size_in_bytes, 0);
    close(broker, store).await;
}
