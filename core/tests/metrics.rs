//! The core reports what it does through the `metrics` facade, under the catalogue's names.

use std::sync::Arc;
use std::time::Duration;

use ::metrics::{SharedString, Unit};
use ironbus_core::metrics as m;
use ironbus_core::*;
use ironbus_store_memory::MemoryStore;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::{CompositeKey, MetricKind};

type Snapshot = Vec<(CompositeKey, Option<Unit>, Option<SharedString>, DebugValue)>;

/// Runs `body` on a one-thread runtime under a recorder of its own (the broker's tasks record
/// under it too): what was recorded, and what `body` returned.
fn recorded<T>(body: impl std::future::Future<Output = T>) -> (Snapshot, T) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let out = ::metrics::with_local_recorder(&recorder, || {
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(body)
    });
    (snapshotter.snapshot().into_vec(), out)
}

/// The value of a counter with the given labels, 0 if it was never touched.
fn counter(snapshot: &Snapshot, name: &str, labels: &[(&str, &str)]) -> u64 {
    snapshot
        .iter()
        .filter(|(key, _, _, _)| key.kind() == MetricKind::Counter && key.key().name() == name)
        .filter(|(key, _, _, _)| {
            labels.iter().all(|(k, v)| key.key().labels().any(|l| l.key() == *k && l.value() == *v))
        })
        .map(|(_, _, _, value)| match value {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum()
}

#[test]
fn broker_reports_traffic_settlements_dead_letters_duplicates_and_lock_expiry() {
    let (snapshot, ()) = recorded(async {
        let clock = Arc::new(ManualClock::default());
        let broker =
            Broker::open(Arc::new(MemoryStore::new()), clock.clone(), NamespaceLimits::default())
                .await
                .unwrap();
        let description = QueueDescription {
            requires_duplicate_detection: true,
            max_delivery_count: 1,
            ..Default::default()
        };
        broker.create_queue("q", description).await.unwrap();
        let sent = (0..4).map(|i| Message::new("x").with_message_id(format!("m{i}"))).collect();
        broker.send("q", sent).await.unwrap();
        let duplicate = broker.send("q", vec![Message::new("x").with_message_id("m0")]).await;
        assert_eq!(duplicate.unwrap(), vec![SendOutcome::Duplicate]);

        let receiver = broker.open_receiver("q", ReceiveMode::PeekLock).await.unwrap();
        receiver.add_credit(4);
        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(receiver.recv().await.unwrap());
        }
        let token = |i: usize| got[i].lock_token().unwrap();
        broker.complete("q", token(0)).await.unwrap();
        broker
            .settle(
                "q",
                token(1),
                Disposition::DeadLetter {
                    reason: Some("bad".into()),
                    description: None,
                    properties: Default::default(),
                },
            )
            .await
            .unwrap();
        broker
            .settle("q", token(2), Disposition::Abandon { properties: Default::default() })
            .await
            .unwrap();
        // The fourth lock expires; with MaxDeliveryCount 1 the message is dead-lettered.
        clock.advance(Duration::from_secs(61));
        let runtime = broker.get_queue_runtime("q").await.unwrap();
        assert_eq!(runtime.dead_letter_message_count, 3);
    });

    let kind = [("entity_kind", "queue")];
    assert_eq!(counter(&snapshot, m::MESSAGES_INCOMING_TOTAL, &kind), 4);
    assert_eq!(counter(&snapshot, m::MESSAGES_OUTGOING_TOTAL, &kind), 4);
    assert_eq!(counter(&snapshot, m::DUPLICATES_DROPPED_TOTAL, &[]), 1);
    assert_eq!(counter(&snapshot, m::SETTLEMENTS_TOTAL, &[("outcome", "complete")]), 1);
    assert_eq!(counter(&snapshot, m::SETTLEMENTS_TOTAL, &[("outcome", "dead_letter")]), 1);
    assert_eq!(counter(&snapshot, m::SETTLEMENTS_TOTAL, &[("outcome", "abandon")]), 1);
    assert_eq!(counter(&snapshot, m::LOCK_EXPIRATIONS_TOTAL, &[]), 1);
    assert_eq!(counter(&snapshot, m::DEAD_LETTERED_TOTAL, &[("reason", "client")]), 1);
    assert_eq!(
        counter(&snapshot, m::DEAD_LETTERED_TOTAL, &[("reason", "MaxDeliveryCountExceeded")]),
        2
    );
}

/// Three subscriptions of topic `t` (`all` takes everything, `none` has no rule, `broken`'s
/// rule fails to evaluate), three messages published, two received from `all`: what the
/// broker recorded, with subscriptions' own metrics on or off.
fn publish_to_three_subscriptions(metrics_entity_labels: bool) -> Snapshot {
    let (snapshot, ()) = recorded(async {
        let options = BrokerOptions { metrics_entity_labels, ..Default::default() };
        let broker = Broker::open_with(
            vec![Arc::new(MemoryStore::new())],
            Arc::new(ManualClock::default()),
            options,
        )
        .await
        .unwrap();
        let path = |p: &str| EntityPath::parse(p).unwrap();
        let create = |p: &str, d: EntityDescription| {
            let broker = broker.clone();
            let p = path(p);
            async move { broker.create_entity(&p, d).await.unwrap() }
        };
        create("t", EntityDescription::Topic(TopicDescription::default())).await;
        for s in ["all", "none", "broken"] {
            let sub = SubscriptionDescription::default();
            create(&format!("t/Subscriptions/{s}"), EntityDescription::Subscription(sub)).await;
        }
        broker.delete_entity(&path("t/Subscriptions/none/Rules/$Default")).await.unwrap();
        broker.delete_entity(&path("t/Subscriptions/broken/Rules/$Default")).await.unwrap();
        let failing = RuleDescription {
            filter: RuleFilter::Sql { expression: "n / 0 = 1".into(), parameters: vec![] },
            action: None,
        };
        create("t/Subscriptions/broken/Rules/r", EntityDescription::Rule(failing)).await;
        let messages = (0..3).map(|_| Message::new("x").with_property("n", PropertyValue::Int(1)));
        broker.send("t", messages.collect()).await.unwrap();
        let receiver = broker
            .open_receiver("t/Subscriptions/all", ReceiveMode::ReceiveAndDelete)
            .await
            .unwrap();
        receiver.add_credit(2);
        receiver.recv().await.unwrap();
        receiver.recv().await.unwrap();
    });
    snapshot
}

#[test]
fn subscriptions_report_their_own_traffic_filtered_out_and_dead_letters() {
    let snapshot = publish_to_three_subscriptions(true);
    let all = [("entity", "t/Subscriptions/all")];
    assert_eq!(counter(&snapshot, m::SUBSCRIPTION_MESSAGES_INCOMING_TOTAL, &all), 3);
    assert_eq!(counter(&snapshot, m::SUBSCRIPTION_MESSAGES_OUTGOING_TOTAL, &all), 2);
    assert_eq!(counter(&snapshot, m::SUBSCRIPTION_MESSAGES_FILTERED_OUT_TOTAL, &all), 0);
    let none = [("entity", "t/Subscriptions/none")];
    assert_eq!(counter(&snapshot, m::SUBSCRIPTION_MESSAGES_FILTERED_OUT_TOTAL, &none), 3);
    assert_eq!(counter(&snapshot, m::SUBSCRIPTION_MESSAGES_INCOMING_TOTAL, &none), 0);
    let broken = [("entity", "t/Subscriptions/broken"), ("reason", "filter")];
    assert_eq!(counter(&snapshot, m::SUBSCRIPTION_DEAD_LETTERED_TOTAL, &broken), 3);
    assert_eq!(counter(&snapshot, m::MESSAGES_FILTERED_OUT_TOTAL, &[]), 3);
}

#[test]
fn subscriptions_record_no_series_of_their_own_unless_asked() {
    let snapshot = publish_to_three_subscriptions(false);
    let per_subscription: Vec<_> = snapshot
        .iter()
        .map(|(key, _, _, _)| key.key())
        .filter(|key| {
            key.name().starts_with("ironbus_broker_subscription_")
                || key.labels().any(|l| l.key() == "entity")
        })
        .collect();
    assert!(per_subscription.is_empty(), "{per_subscription:?}");
    // The namespace-wide counters still count every subscription's traffic: the copies `all`
    // took and those `broken` dead-lettered.
    let kind = [("entity_kind", "subscription")];
    assert_eq!(counter(&snapshot, m::MESSAGES_INCOMING_TOTAL, &kind), 6);
    assert_eq!(counter(&snapshot, m::MESSAGES_OUTGOING_TOTAL, &kind), 2);
    assert_eq!(counter(&snapshot, m::MESSAGES_FILTERED_OUT_TOTAL, &[]), 3);
    assert_eq!(counter(&snapshot, m::DEAD_LETTERED_TOTAL, &[("reason", "filter")]), 3);
}

#[test]
fn sessions_report_locks_taken_held_and_lost() {
    let lock = Duration::from_secs(30);
    let (snapshot, ()) = recorded(async {
        let clock = Arc::new(ManualClock::default());
        let broker =
            Broker::open(Arc::new(MemoryStore::new()), clock.clone(), NamespaceLimits::default())
                .await
                .unwrap();
        let description =
            QueueDescription { requires_session: true, lock_duration: lock, ..Default::default() };
        broker.create_queue("q", description).await.unwrap();
        let mut message = Message::new("x");
        message.properties.session_id = Some("s".into());
        broker.send("q", vec![message]).await.unwrap();
        // Taken and released (dropped), then taken and lost (expired).
        let first = broker.accept_session("q", "s", ReceiveMode::PeekLock).await.unwrap();
        drop(first);
        let second = broker.accept_session("q", "s", ReceiveMode::PeekLock).await.unwrap();
        second.add_credit(1);
        second.recv().await.unwrap();
        clock.advance(lock + Duration::from_millis(1));
        let ended = tokio::time::timeout(Duration::from_secs(10), second.recv()).await;
        assert!(ended.expect("the lost session closes its receiver").is_none());
    });
    assert_eq!(counter(&snapshot, m::SESSIONS_ACCEPTED_TOTAL, &[]), 2);
    assert_eq!(counter(&snapshot, m::SESSION_LOCK_LOSSES_TOTAL, &[]), 1);
    let held: f64 = snapshot
        .iter()
        .filter(|(key, _, _, _)| key.key().name() == m::SESSIONS_LOCKED)
        .map(|(_, _, _, value)| match value {
            DebugValue::Gauge(g) => g.into_inner(),
            _ => 0.0,
        })
        .sum();
    assert_eq!(held, 0.0, "no session is held at the end");
}

/// The value of a gauge, 0 if it was never set.
fn gauge(snapshot: &Snapshot, name: &str) -> f64 {
    snapshot
        .iter()
        .filter(|(key, _, _, _)| key.key().name() == name)
        .map(|(_, _, _, value)| match value {
            DebugValue::Gauge(g) => g.into_inner(),
            _ => 0.0,
        })
        .sum()
}

#[test]
fn forwarding_reports_transfers_failures_and_the_transfer_queue() {
    let (snapshot, waiting) = recorded(async {
        let clock = Arc::new(ManualClock::default());
        let store = Arc::new(MemoryStore::new());
        let broker = Broker::open(store, clock.clone(), NamespaceLimits::default()).await.unwrap();
        let forward = |to: &str| QueueDescription {
            forward_to: Some(to.into()),
            ..QueueDescription::default()
        };
        broker.create_queue("dest", QueueDescription::default()).await.unwrap();
        broker.create_queue("src", forward("dest")).await.unwrap();
        broker.create_queue("loop", forward("loop")).await.unwrap();
        broker.send("src", vec![Message::new("a"), Message::new("b")]).await.unwrap();
        broker.send("loop", vec![Message::new("round")]).await.unwrap();
        let until = |name: &'static str, check: fn(&QueueRuntime) -> bool| {
            let broker = broker.clone();
            async move {
                for _ in 0..100_000 {
                    if check(&broker.get_queue_runtime(name).await.unwrap()) {
                        return;
                    }
                    tokio::task::yield_now().await;
                }
                panic!("{name} never got there");
            }
        };
        until("dest", |r| r.active_message_count == 2).await;
        until("loop", |r| r.dead_letter_message_count == 1).await;
        // A deleted destination: the message waits in the transfer queue.
        broker.delete_queue("dest").await.unwrap();
        broker.send("src", vec![Message::new("c")]).await.unwrap();
        until("src", |r| r.transfer_message_count == 1).await;
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        broker.get_queue_runtime("src").await.unwrap().transfer_message_count
    });
    assert_eq!(waiting, 1);
    // Two from src, four hops of the loop.
    assert_eq!(counter(&snapshot, m::FORWARD_MESSAGES_TOTAL, &[]), 6);
    assert_eq!(counter(&snapshot, m::FORWARD_FAILURES_TOTAL, &[("reason", "hop_limit")]), 1);
    assert!(
        counter(&snapshot, m::FORWARD_FAILURES_TOTAL, &[("reason", "destination_missing")]) >= 1
    );
    assert_eq!(gauge(&snapshot, m::FORWARD_TRANSFER_QUEUE_MESSAGES), 1.0);
}

/// A cycle whose store write fails answers its commands with errors, and the client sends
/// again (a delivery's credit is given back, and the message delivered again): what the failed
/// cycle counted must not reach the metrics, or those messages would count twice.
#[cfg(feature = "testing")]
#[test]
fn a_failed_write_counts_nothing_so_what_is_retried_counts_once() {
    use ironbus_core::testing::FaultyStore;

    let (snapshot, ()) = recorded(async {
        let store = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())));
        let broker =
            Broker::open(store.clone(), Arc::new(ManualClock::default()), Default::default())
                .await
                .unwrap();
        broker.create_queue("q", QueueDescription::default()).await.unwrap();

        store.fail_next_writes(1);
        let failed = broker.send("q", vec![Message::new("x")]).await;
        assert!(failed.is_err(), "the write failed: {failed:?}");
        // The partition rebuilds itself from the store at its next cycle.
        let mut sent = false;
        for _ in 0..1_000 {
            if broker.send("q", vec![Message::new("x")]).await.is_ok() {
                sent = true;
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(sent, "the send succeeds once the partition is rebuilt");

        store.fail_next_writes(1);
        let receiver = broker.open_receiver("q", ReceiveMode::ReceiveAndDelete).await.unwrap();
        receiver.add_credit(1);
        let mut received = None;
        for _ in 0..1_000 {
            // Counts ask the partition for a cycle, which rebuilds it after the failure.
            let _ = broker.get_queue_runtime("q").await;
            let next = tokio::time::timeout(Duration::from_millis(10), receiver.recv()).await;
            if let Ok(message) = next {
                received = message;
                break;
            }
        }
        assert!(received.is_some(), "the message is delivered once the partition is rebuilt");
        assert_eq!(store.injected_failures(), 2, "both failures were injected");
    });
    let kind = [("entity_kind", "queue")];
    assert_eq!(counter(&snapshot, m::MESSAGES_INCOMING_TOTAL, &kind), 1);
    assert_eq!(counter(&snapshot, m::MESSAGES_OUTGOING_TOTAL, &kind), 1);
}

#[test]
fn entities_deleted_for_idleness_are_counted_by_kind() {
    let (snapshot, ()) = recorded(async {
        let clock = Arc::new(ManualClock::default());
        let broker =
            Broker::open(Arc::new(MemoryStore::new()), clock.clone(), NamespaceLimits::default())
                .await
                .unwrap();
        let idle = Duration::from_secs(300);
        let queue = QueueDescription { auto_delete_on_idle: idle, ..Default::default() };
        broker.create_queue("q", queue).await.unwrap();
        let topic = TopicDescription { auto_delete_on_idle: idle, ..Default::default() };
        let path = EntityPath::parse("t").unwrap();
        broker.create_entity(&path, EntityDescription::Topic(topic)).await.unwrap();
        clock.advance(idle);
        broker.sweep_idle().await;
    });
    let name = m::ENTITIES_AUTO_DELETED_TOTAL;
    assert_eq!(counter(&snapshot, name, &[("entity_kind", "queue")]), 1);
    assert_eq!(counter(&snapshot, name, &[("entity_kind", "topic")]), 1);
}
