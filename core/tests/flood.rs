//! A producer flood on a queue nobody reads: sends are refused with `QuotaExceeded` once the
//! queue's `max_size_in_megabytes` is used, the queue never holds more than its limit (plus
//! one message), and sending works again once messages are completed. Sequential sends,
//! batches, and sends pipelined without waiting (as the AMQP transport starts them).

use std::sync::Arc;
use std::time::Duration;

use ironbus_core::*;
use ironbus_store_memory::MemoryStore;

const LIMIT: u64 = 1024 * 1024;
const BODY: usize = 1024;

async fn full_queue_broker() -> Broker {
    let broker = Broker::open(
        Arc::new(MemoryStore::new()),
        Arc::new(ManualClock::default()),
        NamespaceLimits::default(),
    )
    .await
    .unwrap();
    let description = QueueDescription { max_size_in_megabytes: 1, ..Default::default() };
    broker.create_queue("q", description).await.unwrap();
    broker
}

fn message(i: usize) -> Message {
    Message::new(vec![(i % 251) as u8; BODY]).with_message_id(format!("m{i}"))
}

async fn size(broker: &Broker) -> u64 {
    broker.get_queue_runtime("q").await.unwrap().size_in_bytes
}

/// What one of our messages counts against the quota (its size as stored, which is a little
/// more than `Message::size`: the broker's own properties count too), measured on a scratch
/// queue.
async fn stored_size(broker: &Broker) -> u64 {
    broker.create_queue("scratch", QueueDescription::default()).await.unwrap();
    broker.send("scratch", vec![message(0)]).await.unwrap();
    let one = broker.get_queue_runtime("scratch").await.unwrap().size_in_bytes;
    broker.delete_queue("scratch").await.unwrap();
    assert!(one >= BODY as u64);
    one
}

/// Completes `n` messages, then checks that a send is accepted again.
async fn drain_some_and_send_again(broker: &Broker, n: u32) {
    let before = size(broker).await;
    let receiver = broker.open_receiver("q", ReceiveMode::PeekLock).await.unwrap();
    receiver.add_credit(n);
    for _ in 0..n {
        let m = tokio::time::timeout(Duration::from_secs(5), receiver.recv())
            .await
            .expect("a stored message arrives")
            .unwrap();
        broker.complete("q", m.lock_token().unwrap()).await.unwrap();
    }
    let after = size(broker).await;
    assert!(after < before, "completing frees room: {before} -> {after}");
    broker.send("q", vec![message(usize::MAX / 2)]).await.expect("room again after completes");
    assert!(size(broker).await <= LIMIT);
}

#[tokio::test]
async fn one_by_one_sends_are_refused_at_the_quota_and_resume_after_completes() {
    let broker = full_queue_broker().await;
    let one = stored_size(&broker).await;
    let mut accepted = 0usize;
    let refusal = loop {
        assert!(accepted < 4 * (LIMIT as usize / BODY), "no refusal after {accepted} sends");
        match broker.send("q", vec![message(accepted)]).await {
            Ok(_) => accepted += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(refusal, BrokerError::QuotaExceeded(_)), "{refusal:?}");
    let used = size(&broker).await;
    assert!(used <= LIMIT + one, "the queue holds {used} bytes, limit {LIMIT}");
    // Refused only when the next message would not fit.
    assert!(used + one > LIMIT, "refused with {used} of {LIMIT} bytes used");
    assert!(used >= accepted as u64 * BODY as u64, "every accepted message is stored");
    assert_eq!(broker.get_queue_runtime("q").await.unwrap().active_message_count, accepted as u64);
    // It stays refused while nobody receives.
    for i in 0..10 {
        let again = broker.send("q", vec![message(accepted + i)]).await;
        assert!(matches!(again, Err(BrokerError::QuotaExceeded(_))), "{again:?}");
    }
    assert_eq!(size(&broker).await, used);
    drain_some_and_send_again(&broker, 10).await;
}

#[tokio::test]
async fn batches_are_refused_whole_within_one_batch_of_the_quota() {
    let broker = full_queue_broker().await;
    let one = stored_size(&broker).await;
    const BATCH: usize = 25;
    let mut accepted = 0usize;
    let refusal = loop {
        assert!(accepted < 4 * (LIMIT as usize / BODY), "no refusal after {accepted} sends");
        let batch = (accepted..accepted + BATCH).map(message).collect();
        match broker.send("q", batch).await {
            Ok(outcomes) => {
                assert_eq!(outcomes.len(), BATCH);
                accepted += BATCH;
            }
            Err(e) => break e,
        }
    };
    assert!(matches!(refusal, BrokerError::QuotaExceeded(_)), "{refusal:?}");
    let used = size(&broker).await;
    assert!(used <= LIMIT, "the queue holds {used} bytes, limit {LIMIT}");
    assert!(used + BATCH as u64 * one > LIMIT, "refused with {used} of {LIMIT} used");
    // A refused batch stores nothing of itself; a single message still fits.
    assert_eq!(broker.get_queue_runtime("q").await.unwrap().active_message_count, accepted as u64);
    if used + one <= LIMIT {
        broker.send("q", vec![message(accepted)]).await.expect("one message still fits");
    }
    drain_some_and_send_again(&broker, BATCH as u32).await;
}

#[tokio::test]
async fn pipelined_sends_stop_at_the_quota() {
    let broker = full_queue_broker().await;
    let one = stored_size(&broker).await;
    // Started without waiting for the store, as the AMQP transport pipelines a link's sends:
    // twice what fits.
    let mut started = Vec::new();
    let mut refused_at_start = 0usize;
    for i in 0..2 * (LIMIT as usize / BODY) {
        match broker.start_send("q", vec![message(i)]) {
            Ok(future) => started.push(future),
            Err(BrokerError::QuotaExceeded(_)) => refused_at_start += 1,
            Err(e) => panic!("send {i}: {e:?}"),
        }
    }
    let mut stored = 0usize;
    let mut refused = refused_at_start;
    for future in started {
        match future.await {
            Ok(_) => stored += 1,
            Err(BrokerError::QuotaExceeded(_)) => refused += 1,
            Err(e) => panic!("{e:?}"),
        }
    }
    let used = size(&broker).await;
    assert!(
        refused > 0,
        "a flood twice the quota is refused in part: {stored} stored, {used} bytes, limit {LIMIT}"
    );
    assert!(
        used <= LIMIT + one,
        "pipelined sends overshot the quota: {used} bytes stored ({stored} messages), limit {LIMIT}"
    );
    drain_some_and_send_again(&broker, 10).await;
}

/// Service Bus gives each partition of a partitioned entity MaxSizeInMegabytes (and reports
/// the product): a queue of 1 MiB and 4 partitions holds 4 MiB, and no more.
#[tokio::test]
async fn a_partitioned_queue_holds_max_size_per_partition() {
    let broker = full_queue_broker().await;
    let one = stored_size(&broker).await;
    let description = QueueDescription {
        max_size_in_megabytes: 1,
        enable_partitioning: true,
        partition_count: 4,
        ..Default::default()
    };
    assert_eq!(description.total_max_size_in_megabytes(), 4);
    broker.create_queue("p", description).await.unwrap();
    let mut accepted = 0usize;
    let refusal = loop {
        assert!(accepted < 8 * (LIMIT as usize / BODY), "no refusal after {accepted} sends");
        match broker.send("p", vec![message(accepted)]).await {
            Ok(_) => accepted += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(refusal, BrokerError::QuotaExceeded(_)), "{refusal:?}");
    let used = broker.get_queue_runtime("p").await.unwrap().size_in_bytes;
    assert!(used > 3 * LIMIT, "four partitions of 1 MiB hold more than 3 MiB: {used}");
    assert!(used <= 4 * LIMIT + one, "and at most 4 MiB: {used}");
}
