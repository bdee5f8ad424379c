//! Auto-forwarding through the public [`Broker`] API: the configuration rules, messages moved
//! exactly once (also across a failed write and a restart), what travels with them, the hop
//! limit, forwarding of dead letters, topic and session destinations, failures at the
//! destination, and the counts.
//!
//! Time comes from a [`ManualClock`]; outages from a [`FaultyStore`] around the memory store.
//! The forwarder runs on its own task: [`Fixture::until`] yields to it until what a test waits
//! for is there (`tokio::time::timeout` only guards against hangs: no test sleeps).
#![cfg(feature = "testing")]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ironbus_core::message::dead_letter_reason;
use ironbus_core::router::partition_for_key;
use ironbus_core::testing::keys;
use ironbus_core::testing::FaultyStore;
use ironbus_core::*;
use ironbus_store_memory::MemoryStore;

mod common;
use common::{guard, path, HANG_GUARD};

/// Longer than a partition's rebuild interval and the forwarder's first retry (1 s each).
const PAST_RETRY: Duration = Duration::from_secs(2);

fn forwarding_to(target: &str) -> QueueDescription {
    QueueDescription { forward_to: Some(target.into()), ..QueueDescription::default() }
}

struct Fixture {
    broker: Broker,
    clock: Arc<ManualClock>,
    store: Arc<FaultyStore>,
    memory: Arc<dyn Store>,
}

impl Fixture {
    async fn new() -> Self {
        let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
        Self::over(memory).await
    }

    /// A broker over an existing store (a restart when the store was another broker's).
    async fn over(memory: Arc<dyn Store>) -> Self {
        let clock = Arc::new(ManualClock::default());
        let store = Arc::new(FaultyStore::new(memory.clone()));
        let broker = guard(Broker::open(store.clone(), clock.clone(), NamespaceLimits::default()))
            .await
            .expect("open broker");
        Fixture { broker, clock, store, memory }
    }

    async fn queue(&self, name: &str, description: QueueDescription) {
        guard(self.broker.create_queue(name, description)).await.expect("create queue");
    }

    async fn send(&self, address: &str, message: Message) -> SequenceNumber {
        match guard(self.broker.send(address, vec![message])).await.expect("send")[..] {
            [SendOutcome::Enqueued(seq)] => seq,
            ref other => panic!("expected the message to be stored, got {other:?}"),
        }
    }

    async fn runtime(&self, name: &str) -> QueueRuntime {
        guard(self.broker.get_queue_runtime(name)).await.expect("runtime")
    }

    /// Waits, yielding to the forwarders and partitions, until `check` holds.
    async fn until<F, Fut>(&self, what: &str, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let waited = tokio::time::timeout(HANG_GUARD, async {
            while !check().await {
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(waited.is_ok(), "timed out waiting until {what}");
    }

    /// Waits until `name` holds `active` active messages.
    async fn until_active(&self, name: &str, active: u64) {
        self.until(&format!("{name} holds {active} active messages"), || async {
            self.runtime(name).await.active_message_count == active
        })
        .await;
    }

    /// Waits until the transfer queue of `name` is empty.
    async fn until_forwarded(&self, name: &str) {
        self.until(&format!("{name} has forwarded everything"), || async {
            let r = self.runtime(name).await;
            r.transfer_message_count == 0 && r.unavailable_partitions.is_empty()
        })
        .await;
    }

    /// Every message of an address, by peeking.
    async fn peek_all(&self, address: &str) -> Vec<ReceivedMessage> {
        let mut all = Vec::new();
        let mut from = SequenceNumber(0);
        loop {
            let page = guard(self.broker.peek(address, from, 100)).await.expect("peek");
            let Some(last) = page.last() else { return all };
            from = SequenceNumber(last.sequence_number().0 + 1);
            all.extend(page);
        }
    }

    /// Lets a few rounds of every task run (for asserting that nothing more happens).
    async fn settle_down(&self) {
        for _ in 0..200 {
            tokio::task::yield_now().await;
        }
    }
}

fn body(m: &ReceivedMessage) -> &[u8] {
    &m.message.body
}

// ---- configuration ----

#[tokio::test]
async fn a_destination_must_exist_at_create_and_update() {
    let f = Fixture::new().await;
    let e = f.broker.create_queue("q1", forwarding_to("missing")).await.unwrap_err();
    assert!(
        matches!(&e, BrokerError::InvalidArgument { field: "ForwardTo", reason }
            if reason == "SubCode=40400. The auto forwarding destination entity does not exist."),
        "{e:?}"
    );
    let dlq = QueueDescription {
        forward_dead_lettered_messages_to: Some("missing".into()),
        ..QueueDescription::default()
    };
    let e = f.broker.create_queue("q1", dlq).await.unwrap_err();
    assert!(
        matches!(e, BrokerError::InvalidArgument { field: "ForwardDeadLetteredMessagesTo", .. }),
        "{e:?}"
    );
    f.queue("q1", QueueDescription::default()).await;
    let e = f.broker.update_queue("q1", forwarding_to("missing")).await.unwrap_err();
    assert!(matches!(e, BrokerError::InvalidArgument { field: "ForwardTo", .. }), "{e:?}");

    // A queue or a topic, by name or by absolute URI; an entity may name itself.
    f.queue("q2", QueueDescription::default()).await;
    guard(f.broker.create_entity(&path("t"), EntityDescription::Topic(Default::default())))
        .await
        .unwrap();
    f.broker.update_queue("q1", forwarding_to("sb://localhost/Q2")).await.unwrap();
    f.broker.update_queue("q1", forwarding_to("t")).await.unwrap();
    f.queue("self", forwarding_to("self")).await;
    // A subscription is no destination.
    guard(f.broker.create_entity(
        &path("t/Subscriptions/s"),
        EntityDescription::Subscription(Default::default()),
    ))
    .await
    .unwrap();
    let e = f.broker.create_queue("q3", forwarding_to("t/Subscriptions/s")).await.unwrap_err();
    assert!(matches!(e, BrokerError::InvalidArgument { field: "ForwardTo", .. }), "{e:?}");
    // Subscriptions are checked too.
    let sub = SubscriptionDescription {
        forward_to: Some("missing".into()),
        ..SubscriptionDescription::default()
    };
    let e = guard(
        f.broker.create_entity(&path("t/Subscriptions/s2"), EntityDescription::Subscription(sub)),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, BrokerError::InvalidArgument { field: "ForwardTo", .. }), "{e:?}");
}

/// From a session-enabled queue to a queue Service Bus refuses ForwardTo (SubCode 40000); to a
/// topic it creates it (Microsoft's recording of azure-servicebus's
/// test_mgmt_queue_create_with_queue_description), and the messages move with their sessions.
#[tokio::test]
async fn a_session_enabled_entity_forwards_to_a_topic_and_not_to_a_queue() {
    let f = Fixture::new().await;
    let session = || QueueDescription { requires_session: true, ..QueueDescription::default() };
    f.queue("sessions", session()).await;
    f.queue("dest", QueueDescription::default()).await;
    guard(f.broker.create_entity(&path("t"), EntityDescription::Topic(Default::default())))
        .await
        .unwrap();
    let all = EntityDescription::Subscription(Default::default());
    guard(f.broker.create_entity(&path("t/Subscriptions/all"), all)).await.unwrap();
    for refused in ["sessions", "dest", "s0"] {
        let to_queue = QueueDescription { forward_to: Some(refused.into()), ..session() };
        let e = f.broker.create_queue("s0", to_queue).await.unwrap_err();
        assert!(
            matches!(&e, BrokerError::InvalidArgument { field: "ForwardTo", reason }
                if reason.starts_with("SubCode=40000")),
            "{refused}: {e:?}"
        );
    }
    f.queue("to-topic", QueueDescription { forward_to: Some("t".into()), ..session() }).await;
    f.send("to-topic", Message::new("in a session").with_session_id("a")).await;
    f.until_forwarded("to-topic").await;
    f.until("the topic's subscription has the message", || async {
        f.peek_all("t/Subscriptions/all").await.len() == 1
    })
    .await;
    let [m] = &f.peek_all("t/Subscriptions/all").await[..] else { panic!("one message") };
    assert_eq!(m.message.properties.session_id.as_deref(), Some("a"));
    // Dead letters may go to a queue, session-enabled or not.
    let dead_letters = QueueDescription {
        forward_dead_lettered_messages_to: Some("sessions".into()),
        ..session()
    };
    f.queue("s2", dead_letters).await;
}

// ---- moving ----

#[tokio::test]
async fn a_message_moves_to_the_destination_with_what_the_sender_set() {
    let f = Fixture::new().await;
    f.queue("q2", QueueDescription::default()).await;
    f.queue("q1", forwarding_to("q2")).await;
    let mut message = Message::new("hello")
        .with_message_id("m1")
        .with_partition_key("pk")
        .with_time_to_live(Duration::from_secs(300))
        .with_property("n", PropertyValue::Long(7));
    message.properties.correlation_id = Some("c".into());
    message.properties.subject = Some("sub".into());
    message.properties.content_type = Some("text/plain".into());
    let sent_at = f.clock.now();
    let seq = f.send("q1", message.clone()).await;
    f.until_active("q2", 1).await;
    f.until_forwarded("q1").await;

    let [m] = &f.peek_all("q2").await[..] else { panic!("one message in q2") };
    assert_eq!(body(m), b"hello");
    assert_eq!(m.message.properties, message.properties);
    assert_eq!(m.message.application_properties.get("n"), Some(&PropertyValue::Long(7)));
    assert_eq!(m.broker.enqueued_sequence_number, seq, "the original sequence number");
    assert_eq!(m.broker.expires_at, sent_at.saturating_add(Duration::from_secs(300)));
    let q1 = f.runtime("q1").await;
    assert_eq!(
        (q1.active_message_count, q1.transfer_message_count, q1.total_message_count),
        (0, 0, 0)
    );
    // Sending straight to the destination still works.
    f.send("q2", Message::new("direct")).await;
    f.until_active("q2", 2).await;
}

#[tokio::test]
async fn a_forwarding_source_refuses_receivers_and_peeks() {
    let f = Fixture::new().await;
    f.queue("q2", QueueDescription::default()).await;
    f.queue("q1", forwarding_to("q2")).await;
    let text = "Cannot create a message receiver on an entity with auto-forwarding enabled.";
    let e = f.broker.open_receiver("q1", ReceiveMode::PeekLock).await.unwrap_err();
    assert_eq!(e, BrokerError::InvalidOperation(text.into()));
    let e = f.broker.peek("q1", SequenceNumber(0), 10).await.unwrap_err();
    assert_eq!(e, BrokerError::InvalidOperation(text.into()));
    // Its dead-letter queue and transfer dead-letter queue can be received from.
    f.broker.open_receiver("q1/$DeadLetterQueue", ReceiveMode::PeekLock).await.unwrap();
    f.broker.open_receiver("q1/$Transfer/$DeadLetterQueue", ReceiveMode::PeekLock).await.unwrap();
    assert!(f.peek_all("q1/$Transfer/$DeadLetterQueue").await.is_empty());
    f.broker.open_receiver("q2", ReceiveMode::PeekLock).await.unwrap();
}

#[tokio::test]
async fn a_scheduled_message_waits_in_the_source_until_due() {
    let f = Fixture::new().await;
    f.queue("q2", QueueDescription::default()).await;
    f.queue("q1", forwarding_to("q2")).await;
    let at = f.clock.now().saturating_add(Duration::from_secs(60));
    let seqs =
        guard(f.broker.schedule("q1", vec![Message::new("later").with_scheduled_enqueue_time(at)]))
            .await
            .unwrap();
    let cancelled =
        guard(f.broker.schedule("q1", vec![Message::new("never").with_scheduled_enqueue_time(at)]))
            .await
            .unwrap();
    let SendOutcome::Enqueued(cancel) = cancelled[0] else { panic!("{cancelled:?}") };
    guard(f.broker.cancel_scheduled("q1", &[cancel])).await.unwrap();
    f.settle_down().await;
    let q1 = f.runtime("q1").await;
    assert_eq!((q1.scheduled_message_count, q1.transfer_message_count), (1, 0));
    assert_eq!(f.runtime("q2").await.active_message_count, 0);

    f.clock.advance(Duration::from_secs(61));
    f.until_active("q2", 1).await;
    let [m] = &f.peek_all("q2").await[..] else { panic!("one message") };
    assert_eq!(body(m), b"later");
    let SendOutcome::Enqueued(seq) = seqs[0] else { panic!("{seqs:?}") };
    assert_eq!(m.broker.enqueued_sequence_number, seq);
    f.until_forwarded("q1").await;
    assert_eq!(f.runtime("q1").await.total_message_count, 0);
}

#[tokio::test]
async fn a_chain_of_three_delivers_at_its_end_with_the_first_sequence_number() {
    let f = Fixture::new().await;
    f.queue("c3", QueueDescription::default()).await;
    f.queue("c2", forwarding_to("c3")).await;
    f.queue("c1", forwarding_to("c2")).await;
    // Raise c1's counter so that its sequence numbers differ from the others'.
    f.queue("plain", QueueDescription::default()).await;
    f.broker.update_queue("c1", QueueDescription::default()).await.unwrap();
    for _ in 0..5 {
        f.send("c1", Message::new("filler")).await;
    }
    let r = f.broker.open_receiver("c1", ReceiveMode::ReceiveAndDelete).await.unwrap();
    r.add_credit(5);
    guard(r.drain()).await;
    drop(r);
    f.broker.update_queue("c1", forwarding_to("c2")).await.unwrap();

    let seq = f.send("c1", Message::new("travel").with_message_id("t")).await;
    f.until_active("c3", 1).await;
    let [m] = &f.peek_all("c3").await[..] else { panic!("one message") };
    assert_eq!((body(m), m.broker.enqueued_sequence_number), (&b"travel"[..], seq));
    assert!(seq.0 > 5, "{seq:?}");
    for q in ["c1", "c2"] {
        f.until_forwarded(q).await;
        assert_eq!(f.runtime(q).await.total_message_count, 0, "{q}");
    }
}

#[tokio::test]
async fn the_fifth_transfer_dead_letters_the_message_where_it_is() {
    let f = Fixture::new().await;
    f.queue("h6", QueueDescription::default()).await;
    for (q, next) in [("h5", "h6"), ("h4", "h5"), ("h3", "h4"), ("h2", "h3"), ("h1", "h2")] {
        f.queue(q, forwarding_to(next)).await;
    }
    f.send("h1", Message::new("far").with_message_id("far")).await;
    f.until("the message is dead-lettered in h5", || async {
        f.runtime("h5").await.dead_letter_message_count == 1
    })
    .await;
    let [m] = &f.peek_all("h5/$DeadLetterQueue").await[..] else { panic!("one dead letter") };
    assert_eq!(body(m), b"far");
    assert_eq!(
        m.broker.dead_letter_reason.as_deref(),
        Some(dead_letter_reason::MAX_TRANSFER_HOP_COUNT_EXCEEDED)
    );
    assert_eq!(
        m.broker.dead_letter_error_description.as_deref(),
        Some(dead_letter_reason::MAX_TRANSFER_HOP_COUNT_EXCEEDED_DESCRIPTION)
    );
    f.settle_down().await;
    assert_eq!(f.runtime("h6").await.total_message_count, 0);
}

#[tokio::test]
async fn an_entity_forwarding_to_itself_dead_letters_after_four_hops() {
    let f = Fixture::new().await;
    f.queue("loop", forwarding_to("loop")).await;
    f.send("loop", Message::new("round")).await;
    f.until("the loop ends in the dead-letter queue", || async {
        f.runtime("loop").await.dead_letter_message_count == 1
    })
    .await;
    let r = f.runtime("loop").await;
    assert_eq!((r.active_message_count, r.transfer_message_count), (0, 0));
}

#[tokio::test]
async fn dead_letters_are_forwarded_with_their_source_and_reason() {
    let f = Fixture::new().await;
    f.queue("dlq-dest", QueueDescription::default()).await;
    let q1 = QueueDescription {
        forward_dead_lettered_messages_to: Some("dlq-dest".into()),
        ..QueueDescription::default()
    };
    f.queue("q1", q1).await;
    let e = f.broker.open_receiver("q1/$DeadLetterQueue", ReceiveMode::PeekLock).await;
    assert!(matches!(e, Err(BrokerError::InvalidOperation(_))), "{e:?}");
    f.send("q1", Message::new("poison").with_message_id("p")).await;
    let r = f.broker.open_receiver("q1", ReceiveMode::PeekLock).await.unwrap();
    r.add_credit(1);
    let m = guard(r.recv()).await.unwrap();
    let disposition = Disposition::DeadLetter {
        reason: Some("Bad".into()),
        description: Some("cannot parse".into()),
        properties: Default::default(),
    };
    guard(f.broker.settle("q1", m.lock_token().unwrap(), disposition)).await.unwrap();
    f.until_active("dlq-dest", 1).await;
    let [d] = &f.peek_all("dlq-dest").await[..] else { panic!("one message") };
    assert_eq!(body(d), b"poison");
    assert_eq!(d.broker.dead_letter_source.as_deref(), Some("q1"));
    assert_eq!(d.broker.dead_letter_reason.as_deref(), Some("Bad"));
    assert_eq!(d.broker.dead_letter_error_description.as_deref(), Some("cannot parse"));
    assert_eq!(d.broker.enqueued_sequence_number, m.sequence_number());
    f.until_forwarded("q1").await;
    assert_eq!(f.runtime("q1").await.dead_letter_message_count, 0);
}

#[tokio::test]
async fn a_topic_destination_fans_out_and_a_subscription_forwards_its_copy() {
    let f = Fixture::new().await;
    f.queue("sink", QueueDescription::default()).await;
    guard(f.broker.create_entity(&path("t"), EntityDescription::Topic(Default::default())))
        .await
        .unwrap();
    guard(f.broker.create_entity(
        &path("t/Subscriptions/plain"),
        EntityDescription::Subscription(Default::default()),
    ))
    .await
    .unwrap();
    let forwarding = SubscriptionDescription {
        forward_to: Some("sink".into()),
        ..SubscriptionDescription::default()
    };
    guard(
        f.broker.create_entity(
            &path("t/Subscriptions/fwd"),
            EntityDescription::Subscription(forwarding),
        ),
    )
    .await
    .unwrap();
    f.queue("q1", forwarding_to("t")).await;

    f.send("q1", Message::new("news").with_message_id("n1")).await;
    f.until_active("t/Subscriptions/plain", 1).await;
    f.until_active("sink", 1).await;
    let [m] = &f.peek_all("sink").await[..] else { panic!("one message in sink") };
    assert_eq!(body(m), b"news");
    let e = f.broker.open_receiver("t/Subscriptions/fwd", ReceiveMode::PeekLock).await;
    assert!(matches!(e, Err(BrokerError::InvalidOperation(_))), "{e:?}");
    f.until_forwarded("t/Subscriptions/fwd").await;
}

#[tokio::test]
async fn a_session_destination_takes_session_messages_and_the_others_are_dead_lettered() {
    let f = Fixture::new().await;
    f.queue("sessions", QueueDescription { requires_session: true, ..Default::default() }).await;
    f.queue("q1", forwarding_to("sessions")).await;
    f.send("q1", Message::new("in a session").with_session_id("s1")).await;
    f.send("q1", Message::new("no session")).await;
    f.until("the message without a session is dead-lettered at the source", || async {
        f.runtime("q1").await.dead_letter_message_count == 1
    })
    .await;
    f.until_active("sessions", 1).await;
    let session =
        guard(f.broker.accept_session("sessions", "s1", ReceiveMode::PeekLock)).await.unwrap();
    session.add_credit(1);
    let m = guard(session.recv()).await.unwrap();
    assert_eq!(body(&m), b"in a session");
    let [d] = &f.peek_all("q1/$DeadLetterQueue").await[..] else { panic!("one dead letter") };
    assert_eq!(body(d), b"no session");
    assert_eq!(
        d.broker.dead_letter_reason.as_deref(),
        Some(dead_letter_reason::FORWARD_DESTINATION_REFUSED)
    );
}

#[tokio::test]
async fn a_subscription_forwarding_to_a_session_queue_dead_letters_copies_without_a_session() {
    let f = Fixture::new().await;
    f.queue("sessions", QueueDescription { requires_session: true, ..Default::default() }).await;
    guard(f.broker.create_entity(&path("t"), EntityDescription::Topic(Default::default())))
        .await
        .unwrap();
    let sub = SubscriptionDescription {
        forward_to: Some("sessions".into()),
        ..SubscriptionDescription::default()
    };
    guard(f.broker.create_entity(&path("t/Subscriptions/s"), EntityDescription::Subscription(sub)))
        .await
        .unwrap();
    f.send("t", Message::new("with").with_session_id("s1")).await;
    f.send("t", Message::new("without")).await;
    f.until_active("sessions", 1).await;
    f.until("the copy without a session is dead-lettered in the subscription", || async {
        f.runtime("t/Subscriptions/s").await.dead_letter_message_count == 1
    })
    .await;
    let [d] = &f.peek_all("t/Subscriptions/s/$DeadLetterQueue").await[..] else { panic!("one") };
    assert_eq!(body(d), b"without");
}

#[tokio::test]
async fn a_disabled_or_full_destination_dead_letters_at_the_source() {
    let f = Fixture::new().await;
    let disabled = QueueDescription { status: EntityStatus::SendDisabled, ..Default::default() };
    f.queue("off", disabled).await;
    f.queue("small", QueueDescription { max_size_in_megabytes: 1, ..Default::default() }).await;
    f.queue("to-off", forwarding_to("off")).await;
    f.queue("to-small", forwarding_to("small")).await;

    f.send("to-off", Message::new("x")).await;
    f.until("dead-lettered at to-off", || async {
        f.runtime("to-off").await.dead_letter_message_count == 1
    })
    .await;
    let [d] = &f.peek_all("to-off/$DeadLetterQueue").await[..] else { panic!("one") };
    assert_eq!(
        d.broker.dead_letter_reason.as_deref(),
        Some(dead_letter_reason::FORWARD_DESTINATION_DISABLED)
    );

    // Fill `small` to just under its megabyte, then forward one message too many.
    let big = vec![b'x'; 200 * 1024];
    for _ in 0..5 {
        f.send("small", Message::new(big.clone())).await;
    }
    f.send("to-small", Message::new(big.clone()).with_message_id("over")).await;
    f.until("dead-lettered at to-small", || async {
        f.runtime("to-small").await.dead_letter_message_count == 1
    })
    .await;
    let [d] = &f.peek_all("to-small/$DeadLetterQueue").await[..] else { panic!("one") };
    assert_eq!(
        d.broker.dead_letter_reason.as_deref(),
        Some(dead_letter_reason::FORWARD_DESTINATION_FULL)
    );
    assert_eq!(f.runtime("small").await.active_message_count, 5);
}

#[tokio::test]
async fn a_deleted_destination_keeps_messages_in_the_source_until_it_exists_again() {
    let f = Fixture::new().await;
    f.queue("q2", QueueDescription::default()).await;
    f.queue("q1", forwarding_to("q2")).await;
    guard(f.broker.delete_queue("q2")).await.unwrap();
    f.send("q1", Message::new("patient")).await;
    f.until("the message waits in q1's transfer queue", || async {
        f.runtime("q1").await.transfer_message_count == 1
    })
    .await;
    f.settle_down().await;
    let q1 = f.runtime("q1").await;
    assert_eq!((q1.transfer_message_count, q1.dead_letter_message_count), (1, 0));

    f.queue("q2", QueueDescription::default()).await;
    f.clock.advance(PAST_RETRY);
    f.until_active("q2", 1).await;
    f.until_forwarded("q1").await;
}

#[tokio::test]
async fn removing_the_rule_gives_waiting_messages_back_and_setting_it_forwards_them() {
    let f = Fixture::new().await;
    f.queue("q2", QueueDescription::default()).await;
    f.queue("q1", QueueDescription::default()).await;
    f.send("q1", Message::new("before")).await;
    f.broker.update_queue("q1", forwarding_to("q2")).await.unwrap();
    f.until_active("q2", 1).await;

    guard(f.broker.delete_queue("q2")).await.unwrap();
    f.send("q1", Message::new("stuck")).await;
    f.until("the message waits", || async { f.runtime("q1").await.transfer_message_count == 1 })
        .await;
    f.broker.update_queue("q1", QueueDescription::default()).await.unwrap();
    f.until_active("q1", 1).await;
    let r = f.broker.open_receiver("q1", ReceiveMode::ReceiveAndDelete).await.unwrap();
    r.add_credit(1);
    assert_eq!(body(&guard(r.recv()).await.unwrap()), b"stuck");
}

#[tokio::test]
async fn the_destination_detects_duplicates_among_forwarded_messages() {
    let f = Fixture::new().await;
    let dedup = QueueDescription { requires_duplicate_detection: true, ..Default::default() };
    f.queue("q2", dedup).await;
    f.queue("q1", forwarding_to("q2")).await;
    f.send("q1", Message::new("one").with_message_id("same")).await;
    f.send("q1", Message::new("two").with_message_id("same")).await;
    f.until_forwarded("q1").await;
    f.settle_down().await;
    assert_eq!(f.runtime("q2").await.active_message_count, 1);
}

#[tokio::test]
async fn partitioned_source_and_destination_keep_the_partition_key() {
    let f = Fixture::new().await;
    let partitioned = |forward: Option<&str>| QueueDescription {
        enable_partitioning: true,
        partition_count: 4,
        forward_to: forward.map(str::to_owned),
        ..Default::default()
    };
    f.queue("p2", partitioned(None)).await;
    f.queue("p1", partitioned(Some("p2"))).await;
    let keys = ["alpha", "beta", "gamma", "delta", "epsilon"];
    for key in keys {
        f.send("p1", Message::new(key).with_partition_key(key)).await;
    }
    f.until_active("p2", keys.len() as u64).await;
    for m in f.peek_all("p2").await {
        let key = m.message.properties.partition_key.clone().unwrap();
        assert_eq!(body(&m), key.as_bytes());
        assert_eq!(m.broker.partition_id, partition_for_key(&key, 4), "{key}");
        assert_eq!(m.sequence_number().partition(true), partition_for_key(&key, 4), "{key}");
    }
}

// ---- exactly once across failures ----

#[tokio::test]
async fn a_failed_destination_write_is_retried_without_a_second_copy() {
    let f = Fixture::new().await;
    f.queue("q2", QueueDescription::default()).await;
    f.queue("q1", forwarding_to("q2")).await;
    // q2 is the first entity: id 1, one partition.
    let q2 = keys::partition_prefix(1, PartitionId(0)).to_vec();
    f.store.fail_prefix(q2.clone());
    f.send("q1", Message::new("retry me")).await;
    f.until("the transfer waits", || async { f.runtime("q1").await.transfer_message_count == 1 })
        .await;
    f.settle_down().await;
    f.store.heal_prefix(&q2);
    f.clock.advance(PAST_RETRY);
    f.until_active("q2", 1).await;
    f.until_forwarded("q1").await;
    f.settle_down().await;
    assert_eq!(f.runtime("q2").await.active_message_count, 1);
}

/// Brings `q1` (forwarding to `q2`) to the window between the destination's write and the
/// source's completion: q2 stored the message and its record of the transfer, and q1's write
/// completing the transfer failed. Returns the message's sequence number in q1 and the key of
/// q2's record of the transfer.
async fn into_the_window(f: &Fixture, body: &'static str) -> (SequenceNumber, Vec<u8>) {
    // q2 is entity 1, q1 entity 2; q2 again (after its deletion) is entity 3.
    f.queue("q2", QueueDescription::default()).await;
    f.queue("q1", forwarding_to("q2")).await;
    guard(f.broker.delete_queue("q2")).await.unwrap();
    let seq = f.send("q1", Message::new(body).with_message_id(body)).await;
    f.until("the transfer waits", || async { f.runtime("q1").await.transfer_message_count == 1 })
        .await;
    f.settle_down().await;
    f.queue("q2", QueueDescription::default()).await;
    // Handing the transfer to the forwarder writes nothing (locks are memory only); completing
    // it does, and fails.
    f.store.fail_prefix(keys::partition_prefix(2, PartitionId(0)).to_vec());
    f.clock.advance(PAST_RETRY);
    f.until_active("q2", 1).await;
    f.settle_down().await;
    let transfer = keys::message(2, PartitionId(0), SubQueue::Transfer, seq);
    let ledger = keys::transfer_record(3, PartitionId(0), 2, seq);
    assert!(guard(f.memory.get(&transfer)).await.unwrap().is_some(), "the transfer is left in q1");
    assert!(guard(f.memory.get(&ledger)).await.unwrap().is_some(), "q2 recorded the transfer");
    (seq, ledger.to_vec())
}

#[tokio::test]
async fn a_source_failure_after_the_destination_stored_it_leaves_one_copy() {
    let f = Fixture::new().await;
    let (_, ledger) = into_the_window(&f, "once").await;
    f.store.heal_prefix(keys::partition_prefix(2, PartitionId(0)));
    // q1 rebuilds and hands the transfer out again; q2 knows it.
    f.clock.advance(PAST_RETRY);
    f.until_forwarded("q1").await;
    f.settle_down().await;
    assert_eq!(f.runtime("q2").await.active_message_count, 1);
    assert_eq!(f.runtime("q1").await.total_message_count, 0);
    f.until("q2 forgets the transfer", || async {
        guard(f.memory.get(&ledger)).await.unwrap().is_none()
    })
    .await;
}

#[tokio::test]
async fn a_restart_between_the_destination_write_and_the_completion_leaves_one_copy() {
    let first = Fixture::new().await;
    let (seq, ledger) = into_the_window(&first, "survivor").await;
    first.broker.shutdown();
    let memory = first.memory.clone();
    drop(first);

    // The restarted broker finds the transfer still in q1, and q2's record of it.
    let second = Fixture::over(memory).await;
    second.until_forwarded("q1").await;
    second.settle_down().await;
    let q2 = second.peek_all("q2").await;
    assert_eq!(q2.len(), 1, "exactly one copy: {q2:?}");
    assert_eq!(body(&q2[0]), b"survivor");
    assert_eq!(second.runtime("q1").await.total_message_count, 0);
    // Completed at the source, forgotten at the destination.
    let transfer = keys::message(2, PartitionId(0), SubQueue::Transfer, seq);
    assert!(guard(second.memory.get(&transfer)).await.unwrap().is_none());
    second
        .until("q2 forgets the transfer", || async {
            guard(second.memory.get(&ledger)).await.unwrap().is_none()
        })
        .await;
}
