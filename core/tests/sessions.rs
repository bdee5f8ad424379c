//! Message sessions through the public [`Broker`] API on a virtual clock: the session/non-session
//! refusals, one holder per session, delivery in order within a session, the session lock (its
//! expiry counts a delivery, a release does not), accept-next (oldest first, waiting, timing
//! out on the clock), session state (size limit, durability), listing, partitioned entities and
//! session-enabled subscriptions.
//!
//! Time comes from a [`ManualClock`]; `tokio::time::timeout` only guards against hangs.
#![cfg(feature = "testing")]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ironbus_core::router::partition_for_key;
use ironbus_core::*;
use ironbus_store_memory::MemoryStore;

mod common;
use common::{guard, path};

const LOCK: Duration = Duration::from_secs(30);

struct Fixture {
    broker: Broker,
    store: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
}

async fn fixture() -> Fixture {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::default());
    let broker = guard(Broker::open(store.clone(), clock.clone(), NamespaceLimits::default()))
        .await
        .unwrap();
    Fixture { broker, store, clock }
}

fn session_queue() -> QueueDescription {
    QueueDescription { requires_session: true, lock_duration: LOCK, ..Default::default() }
}

impl Fixture {
    async fn queue(&self, name: &str, description: QueueDescription) {
        guard(self.broker.create_queue(name, description)).await.unwrap();
    }

    async fn send(&self, address: &str, session: &str, body: &str) -> SequenceNumber {
        let sent = guard(
            self.broker.send(address, vec![Message::new(body.to_owned()).with_session_id(session)]),
        )
        .await
        .unwrap();
        let SendOutcome::Enqueued(seq) = sent[0] else { panic!("{sent:?}") };
        seq
    }

    async fn accept(&self, address: &str, session: &str) -> SessionReceiver {
        guard(self.broker.accept_session(address, session, ReceiveMode::PeekLock)).await.unwrap()
    }

    async fn reopen(self) -> Fixture {
        self.broker.shutdown();
        let broker =
            guard(Broker::open(self.store.clone(), self.clock.clone(), NamespaceLimits::default()))
                .await
                .unwrap();
        Fixture { broker, store: self.store, clock: self.clock }
    }
}

async fn recv(receiver: &Receiver) -> ReceivedMessage {
    guard(receiver.recv()).await.expect("receiver closed")
}

fn body(m: &ReceivedMessage) -> &str {
    std::str::from_utf8(&m.message.body).unwrap()
}

#[tokio::test]
async fn session_and_plain_mismatches_are_refused_with_service_bus_wording() {
    let f = fixture().await;
    f.queue("s", session_queue()).await;
    f.queue("plain", QueueDescription::default()).await;

    let refused = f.broker.send("s", vec![Message::new("x")]).await.unwrap_err();
    let BrokerError::InvalidOperation(text) = refused else { panic!("{refused:?}") };
    assert!(text.starts_with("The SessionId was not set on a message"), "{text}");

    let refused = f.broker.open_receiver("s", ReceiveMode::PeekLock).await.unwrap_err();
    let BrokerError::InvalidOperation(text) = refused else { panic!("{refused:?}") };
    assert!(text.contains("create a non-sessionful message receiver"), "{text}");

    let refused = f.broker.accept_session("plain", "a", ReceiveMode::PeekLock).await.unwrap_err();
    let SessionError::Broker(BrokerError::InvalidOperation(text)) = refused else {
        panic!("{refused:?}")
    };
    assert!(text.starts_with("A sessionful message receiver cannot be created"), "{text}");

    // A SessionId on a plain queue is just a property; a session queue's dead-letter queue
    // is received without sessions.
    f.send("plain", "a", "kept").await;
    f.broker.open_receiver("s/$DeadLetterQueue", ReceiveMode::PeekLock).await.unwrap();
}

#[tokio::test]
async fn two_session_receivers_each_get_only_their_session_in_order() {
    let f = fixture().await;
    f.queue("q", session_queue()).await;
    for i in 0..4 {
        f.send("q", "a", &format!("a{i}")).await;
        f.send("q", "b", &format!("b{i}")).await;
    }
    let a = f.accept("q", "a").await;
    let b = f.accept("q", "b").await;
    a.add_credit(10);
    b.add_credit(10);
    for i in 0..4 {
        let m = recv(&a).await;
        assert_eq!(body(&m), format!("a{i}"));
        assert_eq!(m.message.properties.session_id.as_deref(), Some("a"));
        assert_eq!(body(&recv(&b).await), format!("b{i}"));
    }
}

/// Service Bus takes an empty SessionId on send and on accept (Microsoft's own suite receives
/// with `session_id=""`): it names a session like any other.
#[tokio::test]
async fn the_empty_session_id_is_a_session_like_any_other() {
    let f = fixture().await;
    f.queue("q", session_queue()).await;
    f.send("q", "", "empty").await;
    f.send("q", "a", "a").await;
    let receiver = f.accept("q", "").await;
    assert_eq!(receiver.session_id(), "");
    receiver.add_credit(10);
    let m = recv(&receiver).await;
    assert_eq!(body(&m), "empty");
    assert_eq!(m.message.properties.session_id.as_deref(), Some(""));
}

#[tokio::test]
async fn a_session_has_one_holder_until_it_is_released() {
    let f = fixture().await;
    f.queue("q", session_queue()).await;
    // A session with no messages can be accepted (request-response: lock the reply session).
    let first = f.accept("q", "reply-1").await;
    assert_eq!(first.session_id(), "reply-1");
    assert_eq!(first.locked_until(), f.clock.now().saturating_add(LOCK));
    let refused = f.broker.accept_session("q", "reply-1", ReceiveMode::PeekLock).await;
    assert!(matches!(refused, Err(SessionError::CannotBeLocked { .. })), "{refused:?}");
    // Nothing is ready for accept-next: the only session is locked and empty.
    let next = f.broker.accept_next_session("q", ReceiveMode::PeekLock, Duration::ZERO).await;
    assert!(matches!(next, Err(SessionError::Timeout(_))), "{next:?}");

    drop(first);
    let again = f.accept("q", "reply-1").await;
    f.send("q", "reply-1", "answer").await;
    again.add_credit(1);
    assert_eq!(body(&recv(&again).await), "answer");
}

#[tokio::test]
async fn session_lock_expiry_counts_a_delivery_and_a_release_does_not() {
    let f = fixture().await;
    f.queue("q", session_queue()).await;
    f.send("q", "a", "1").await;
    f.send("q", "a", "2").await;

    // Released (the receiver is dropped): delivered again with the count unchanged.
    let r = f.accept("q", "a").await;
    r.add_credit(2);
    let m = recv(&r).await;
    assert_eq!(m.broker.delivery_count, 0);
    // The message lock is the session lock.
    assert_eq!(m.lock.unwrap().locked_until, r.locked_until());
    recv(&r).await;
    drop(r);
    let r = f.accept("q", "a").await;
    r.add_credit(2);
    let (m1, m2) = (recv(&r).await, recv(&r).await);
    assert_eq!((body(&m1), m1.broker.delivery_count), ("1", 0));
    assert_eq!((body(&m2), m2.broker.delivery_count), ("2", 0));

    // Expired: the receiver loses the session, its messages count a delivery.
    f.clock.advance(LOCK + Duration::from_millis(1));
    assert!(guard(r.recv()).await.is_none(), "the receiver closes when its lock expires");
    assert!(r.is_lock_lost());
    assert!(matches!(r.renew_lock().await, Err(SessionError::LockLost)));
    let settled = f.broker.complete("q", m1.lock_token().unwrap()).await;
    assert!(matches!(settled, Err(BrokerError::MessageLockLost)), "{settled:?}");

    let r = f.accept("q", "a").await;
    r.add_credit(2);
    let (m1, m2) = (recv(&r).await, recv(&r).await);
    assert_eq!((body(&m1), m1.broker.delivery_count), ("1", 1));
    assert_eq!((body(&m2), m2.broker.delivery_count), ("2", 1));
}

#[tokio::test]
async fn renewing_the_session_lock_keeps_its_messages_locked() {
    let f = fixture().await;
    f.queue("q", session_queue()).await;
    f.send("q", "a", "1").await;
    let r = f.accept("q", "a").await;
    r.add_credit(1);
    let m = recv(&r).await;
    // A session message has no lock of its own to renew.
    assert!(matches!(
        f.broker.renew_lock("q", m.lock_token().unwrap()).await,
        Err(BrokerError::InvalidOperation(_))
    ));
    f.clock.advance(LOCK - Duration::from_secs(1));
    let until = guard(r.renew_lock()).await.unwrap();
    assert_eq!(until, f.clock.now().saturating_add(LOCK));
    assert_eq!(r.locked_until(), until);
    f.clock.advance(Duration::from_secs(2));
    // Past the first lock's end: the message is still locked, under the renewed session lock.
    guard(f.broker.complete("q", m.lock_token().unwrap())).await.unwrap();
    assert!(!r.is_lock_lost());
}

#[tokio::test]
async fn an_abandoned_session_message_is_delivered_next_again() {
    let f = fixture().await;
    f.queue("q", session_queue()).await;
    for i in 0..3 {
        f.send("q", "a", &i.to_string()).await;
    }
    let r = f.accept("q", "a").await;
    r.add_credit(2);
    let (m0, m1) = (recv(&r).await, recv(&r).await);
    assert_eq!((body(&m0), body(&m1)), ("0", "1"));
    guard(f.broker.settle(
        "q",
        m0.lock_token().unwrap(),
        Disposition::Abandon { properties: Default::default() },
    ))
    .await
    .unwrap();
    r.add_credit(1);
    let again = recv(&r).await;
    assert_eq!((body(&again), again.broker.delivery_count), ("0", 1));
    f.broker.complete("q", again.lock_token().unwrap()).await.unwrap();
    f.broker.complete("q", m1.lock_token().unwrap()).await.unwrap();
    r.add_credit(1);
    assert_eq!(body(&recv(&r).await), "2");
}

#[tokio::test]
async fn deferred_session_messages_are_received_by_sequence_number_in_their_session() {
    let f = fixture().await;
    f.queue("q", session_queue()).await;
    let seq = f.send("q", "a", "deferred").await;
    f.send("q", "a", "next").await;
    let r = f.accept("q", "a").await;
    r.add_credit(1);
    let m = recv(&r).await;
    guard(f.broker.settle(
        "q",
        m.lock_token().unwrap(),
        Disposition::Defer { properties: Default::default() },
    ))
    .await
    .unwrap();
    r.add_credit(1);
    assert_eq!(body(&recv(&r).await), "next");
    // Not through the entity, only through the session.
    assert!(f.broker.receive_deferred("q", &[seq], ReceiveMode::PeekLock).await.is_err());
    let got = guard(r.receive_deferred(&[seq], ReceiveMode::PeekLock)).await.unwrap();
    assert_eq!(body(&got[0]), "deferred");
    assert_eq!(got[0].lock.unwrap().locked_until, r.locked_until());
    let peeked = guard(r.peek(SequenceNumber(0), 10)).await.unwrap();
    assert_eq!(peeked.len(), 2);
    let other = f.accept("q", "b").await;
    assert!(matches!(
        other.receive_deferred(&[seq], ReceiveMode::PeekLock).await,
        Err(SessionError::Broker(BrokerError::MessageNotFound(_)))
    ));
}

#[tokio::test]
async fn accept_next_takes_the_oldest_unlocked_session_with_a_message() {
    let f = fixture().await;
    f.queue("q", session_queue()).await;
    f.accept("q", "empty").await; // locked, no messages: never offered
    f.send("q", "b", "b").await;
    f.send("q", "a", "a").await;
    f.send("q", "b", "b2").await;
    let next = |f: &Fixture| {
        let broker = f.broker.clone();
        async move {
            guard(broker.accept_next_session("q", ReceiveMode::PeekLock, Duration::ZERO)).await
        }
    };
    let first = next(&f).await.unwrap();
    assert_eq!(first.session_id(), "b");
    let second = next(&f).await.unwrap();
    assert_eq!(second.session_id(), "a");
    assert!(matches!(next(&f).await, Err(SessionError::Timeout(_))));
    // A session whose only message is deferred is not offered.
    second.add_credit(1);
    let m = recv(&second).await;
    f.broker
        .settle("q", m.lock_token().unwrap(), Disposition::Defer { properties: Default::default() })
        .await
        .unwrap();
    drop(second);
    assert!(matches!(next(&f).await, Err(SessionError::Timeout(_))));
}

#[tokio::test]
async fn accept_next_waits_on_the_clock_then_times_out() {
    let f = fixture().await;
    f.queue("q", session_queue()).await;
    let broker = f.broker.clone();
    let waiter = tokio::spawn(async move {
        broker.accept_next_session("q", ReceiveMode::PeekLock, Duration::from_secs(5)).await
    });
    tokio::task::yield_now().await;
    f.clock.advance(Duration::from_secs(4));
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished(), "the wait is measured on the clock");
    f.clock.advance(Duration::from_secs(1));
    let outcome = guard(waiter).await.unwrap();
    assert!(matches!(outcome, Err(SessionError::Timeout(_))), "{outcome:?}");

    // A waiter is woken by a session that becomes available.
    let broker = f.broker.clone();
    let waiter = tokio::spawn(async move {
        broker.accept_next_session("q", ReceiveMode::PeekLock, Duration::from_secs(60)).await
    });
    tokio::task::yield_now().await;
    f.send("q", "late", "x").await;
    let r = guard(waiter).await.unwrap().unwrap();
    assert_eq!(r.session_id(), "late");
}

#[tokio::test]
async fn a_dropped_accept_next_waiter_leaves_nothing_locked() {
    let f = fixture().await;
    f.queue("q", session_queue()).await;
    let broker = f.broker.clone();
    let waiter = tokio::spawn(async move {
        broker.accept_next_session("q", ReceiveMode::PeekLock, Duration::from_secs(60)).await
    });
    tokio::task::yield_now().await;
    waiter.abort();
    let _ = waiter.await;
    f.send("q", "s", "x").await;
    // The session is free for the next taker.
    let r = f.accept("q", "s").await;
    r.add_credit(1);
    assert_eq!(body(&recv(&r).await), "x");
    drop(r);

    // Given up while its accept is under way: granted or not, the session is not kept.
    for _ in 0..10 {
        let broker = f.broker.clone();
        let waiter = tokio::spawn(async move {
            broker.accept_next_session("q", ReceiveMode::PeekLock, Duration::from_secs(60)).await
        });
        tokio::task::yield_now().await;
        waiter.abort();
        let _ = waiter.await;
        drop(f.accept("q", "s").await);
    }
}

#[tokio::test]
async fn session_state_is_bounded_counted_and_survives_a_restart() {
    let f = fixture().await;
    let description = QueueDescription { max_message_size_in_kilobytes: 1, ..session_queue() };
    f.queue("q", description).await;
    f.send("q", "a", "m").await;
    let r = f.accept("q", "a").await;
    assert_eq!(guard(r.state()).await.unwrap(), None);
    let too_big = Bytes::from(vec![0u8; 1025]);
    assert!(matches!(
        r.set_state(Some(too_big)).await,
        Err(SessionError::Broker(BrokerError::MessageSizeExceeded { .. }))
    ));
    guard(r.set_state(Some(Bytes::from_static(b"step 1")))).await.unwrap();
    assert_eq!(guard(r.state()).await.unwrap().as_deref(), Some(&b"step 1"[..]));
    let size = guard(f.broker.get_queue_runtime("q")).await.unwrap().size_in_bytes;

    // Consume every message: the session lives on with its state.
    r.add_credit(1);
    let m = recv(&r).await;
    f.broker.complete("q", m.lock_token().unwrap()).await.unwrap();
    let runtime = guard(f.broker.get_queue_runtime("q")).await.unwrap();
    assert!(runtime.size_in_bytes >= 6 && runtime.size_in_bytes < size, "{runtime:?}");
    drop(r);
    let listed = guard(f.broker.list_sessions("q", None, None, 0, 10)).await.unwrap();
    assert_eq!(listed, vec!["a".to_string()]);

    let f = f.reopen().await;
    let state = guard(f.broker.session_state("q", "a")).await.unwrap();
    assert_eq!(state.as_deref(), Some(&b"step 1"[..]));
    assert_eq!(guard(f.broker.get_queue_runtime("q")).await.unwrap().size_in_bytes, 6);
    let r = f.accept("q", "a").await;
    guard(r.set_state(None)).await.unwrap();
    drop(r);
    assert!(guard(f.broker.list_sessions("q", None, None, 0, 10)).await.unwrap().is_empty());
    let f = f.reopen().await;
    assert_eq!(guard(f.broker.session_state("q", "a")).await.unwrap(), None);
}

#[tokio::test]
async fn session_operations_need_the_lock() {
    let f = fixture().await;
    f.queue("q", session_queue()).await;
    let r = f.accept("q", "a").await;
    f.clock.advance(LOCK);
    // The expiry is processed before the next command.
    let other = f.accept("q", "a").await;
    assert!(matches!(r.state().await, Err(SessionError::LockLost)));
    assert!(matches!(r.set_state(None).await, Err(SessionError::LockLost)));
    guard(other.set_state(Some(Bytes::from_static(b"x")))).await.unwrap();
}

#[tokio::test]
async fn sessions_are_listed_in_pages_in_id_order() {
    let f = fixture().await;
    f.queue(
        "q",
        QueueDescription { enable_partitioning: true, partition_count: 4, ..session_queue() },
    )
    .await;
    let mut ids: Vec<String> = (0..250).map(|i| format!("session-{i:03}")).collect();
    for id in &ids {
        f.send("q", id, "m").await;
    }
    ids.sort();
    let mut listed = Vec::new();
    for (skip, expected) in [(0, 100), (100, 100), (200, 50), (250, 0)] {
        let page = guard(f.broker.list_sessions("q", None, None, skip, 100)).await.unwrap();
        assert_eq!(page.len(), expected, "skip {skip}");
        listed.extend(page);
    }
    assert_eq!(listed, ids);
    // The cursor form: after the last id of a page.
    let page = guard(f.broker.list_sessions("q", None, Some(&ids[99]), 0, 100)).await.unwrap();
    assert_eq!(page[..], ids[100..200]);

    // By state update time: only sessions whose state was set after it.
    let before = f.clock.now();
    f.clock.advance(Duration::from_secs(1));
    for id in ["session-007", "session-123"] {
        guard(f.broker.set_session_state("q", id, Some(Bytes::from_static(b"s")))).await.unwrap();
    }
    let updated = guard(f.broker.list_sessions("q", Some(before), None, 0, 100)).await.unwrap();
    assert_eq!(updated, vec!["session-007".to_string(), "session-123".to_string()]);
    let later = f.clock.now();
    assert!(guard(f.broker.list_sessions("q", Some(later), None, 0, 100))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_partitioned_entity_keeps_a_session_in_one_partition_and_accept_next_finds_any() {
    let f = fixture().await;
    let partitions = 4u16;
    f.queue(
        "q",
        QueueDescription {
            enable_partitioning: true,
            partition_count: partitions,
            ..session_queue()
        },
    )
    .await;
    let sessions: Vec<String> = (0..12).map(|i| format!("s{i}")).collect();
    for round in 0..3 {
        for s in &sessions {
            f.send("q", s, &format!("{s}-{round}")).await;
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..sessions.len() {
        let r = guard(f.broker.accept_next_session("q", ReceiveMode::ReceiveAndDelete, LOCK))
            .await
            .unwrap();
        let id = r.session_id().to_owned();
        assert_eq!(r.partition(), partition_for_key(&id, partitions));
        r.add_credit(3);
        for round in 0..3 {
            let m = recv(&r).await;
            assert_eq!(body(&m), format!("{id}-{round}"));
            assert_eq!(m.broker.partition_id, r.partition());
        }
        assert!(seen.insert(id));
    }
    assert_eq!(seen.len(), sessions.len());
    let none = f.broker.accept_next_session("q", ReceiveMode::PeekLock, Duration::ZERO).await;
    assert!(matches!(none, Err(SessionError::Timeout(_))));
}

#[tokio::test]
async fn a_session_enabled_subscription_serves_sessions_and_dead_letters_copies_without_one() {
    let f = fixture().await;
    f.broker
        .create_entity(&path("t"), EntityDescription::Topic(TopicDescription::default()))
        .await
        .unwrap();
    f.broker
        .create_entity(
            &path("t/Subscriptions/s"),
            EntityDescription::Subscription(SubscriptionDescription {
                requires_session: true,
                ..Default::default()
            }),
        )
        .await
        .unwrap();
    f.broker
        .create_entity(
            &path("t/Subscriptions/plain"),
            EntityDescription::Subscription(SubscriptionDescription::default()),
        )
        .await
        .unwrap();
    // A topic takes messages without a SessionId: the session subscription dead-letters its copy.
    f.broker.send("t", vec![Message::new("none")]).await.unwrap();
    f.send("t", "a", "a1").await;
    f.send("t", "b", "b1").await;

    let sub = "t/Subscriptions/s";
    assert!(f.broker.open_receiver(sub, ReceiveMode::PeekLock).await.is_err());
    let dlq = f.broker.peek("t/Subscriptions/s/$DeadLetterQueue", SequenceNumber(0), 10).await;
    let dlq = dlq.unwrap();
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].broker.dead_letter_reason.as_deref(), Some("Session id is null."));
    assert_eq!(
        f.broker.peek("t/Subscriptions/plain", SequenceNumber(0), 10).await.unwrap().len(),
        3
    );

    let r = guard(f.broker.accept_next_session(sub, ReceiveMode::PeekLock, LOCK)).await.unwrap();
    assert_eq!(r.session_id(), "a");
    r.add_credit(5);
    let m = recv(&r).await;
    assert_eq!(body(&m), "a1");
    f.broker.complete(sub, m.lock_token().unwrap()).await.unwrap();
    let b = f.accept(sub, "b").await;
    b.add_credit(1);
    assert_eq!(body(&recv(&b).await), "b1");
    assert_eq!(
        guard(f.broker.list_sessions(sub, None, None, 0, 10)).await.unwrap(),
        vec!["b".to_string()]
    );
}

#[tokio::test]
async fn accept_next_is_fair_partitions_take_turns_and_waiters_get_distinct_sessions() {
    let f = fixture().await;
    let partitions = 4u16;
    f.queue(
        "q",
        QueueDescription {
            enable_partitioning: true,
            partition_count: partitions,
            ..session_queue()
        },
    )
    .await;
    // Two sessions per partition, the older one sent first in each.
    let mut per_partition: Vec<Vec<String>> = vec![Vec::new(); usize::from(partitions)];
    for i in 0.. {
        let id = format!("s{i}");
        let p = usize::from(partition_for_key(&id, partitions).0);
        if per_partition[p].len() < 2 {
            per_partition[p].push(id);
        }
        if per_partition.iter().all(|ids| ids.len() == 2) {
            break;
        }
    }
    for round in 0..2 {
        for ids in &per_partition {
            f.send("q", &ids[round], "m").await;
        }
    }
    let (mut taken, mut locked) = (Vec::new(), Vec::new());
    for _ in 0..2 * partitions {
        let r = guard(f.broker.accept_next_session("q", ReceiveMode::PeekLock, Duration::ZERO))
            .await
            .unwrap();
        taken.push((r.partition().0, r.session_id().to_owned()));
        locked.push(r); // kept: the session stays locked
    }
    // Each partition once before any twice; within a partition the oldest session first.
    let first_turn: std::collections::BTreeSet<u16> = taken[..4].iter().map(|t| t.0).collect();
    assert_eq!(first_turn.len(), usize::from(partitions), "{taken:?}");
    for (p, ids) in per_partition.iter().enumerate() {
        let order: Vec<&String> =
            taken.iter().filter(|t| usize::from(t.0) == p).map(|t| &t.1).collect();
        assert_eq!(order, [&ids[0], &ids[1]], "partition {p}");
    }

    // Waiters with nothing to take: each session that arrives goes to one of them.
    let g = fixture().await;
    g.queue("q", session_queue()).await;
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let broker = g.broker.clone();
            tokio::spawn(async move {
                broker
                    .accept_next_session("q", ReceiveMode::PeekLock, Duration::from_secs(60))
                    .await
            })
        })
        .collect();
    tokio::task::yield_now().await;
    for id in ["x", "y", "z"] {
        g.send("q", id, "m").await;
    }
    let mut got = Vec::new();
    let mut held = Vec::new();
    for w in waiters {
        let r = guard(w).await.unwrap().unwrap();
        got.push(r.session_id().to_owned());
        held.push(r);
    }
    got.sort();
    assert_eq!(got, ["x", "y", "z"]);
}
