use std::sync::Arc;
use std::time::Duration;

use ironbus_core::*;
use ironbus_store_memory::MemoryStore;

#[tokio::test]
async fn send_receive_complete_and_redeliver_after_lock_expiry() {
    let clock = Arc::new(ManualClock::default());
    let broker =
        Broker::open(Arc::new(MemoryStore::new()), clock.clone(), NamespaceLimits::default())
            .await
            .unwrap();
    broker
        .create_queue("q", QueueDescription { enable_partitioning: true, ..Default::default() })
        .await
        .unwrap();
    let outcomes = broker
        .send("q", vec![Message::new("a"), Message::new("b").with_partition_key("k")])
        .await
        .unwrap();
    assert_eq!(outcomes.len(), 2);
    let r = broker.open_receiver("q", ReceiveMode::PeekLock).await.unwrap();
    r.add_credit(5);
    let m1 = r.recv().await.unwrap();
    let m2 = r.recv().await.unwrap();
    broker.complete("q", m1.lock_token().unwrap()).await.unwrap();
    clock.advance(Duration::from_secs(61));
    let m3 = r.recv().await.unwrap();
    assert_eq!(m3.broker.sequence_number, m2.broker.sequence_number);
    assert_eq!(m3.broker.delivery_count, 1);
    let rt = broker.get_queue_runtime("q").await.unwrap();
    assert_eq!(rt.active_message_count, 1);
    assert_eq!(r.drain().await, 2);
}
