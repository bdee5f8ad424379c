//! Topics through the public [`Broker`] API on a virtual clock: fan-out to subscriptions,
//! rules, scheduled publishing, duplicate detection at the topic, partitioned topics, restarts,
//! and that a publish is one atomic write.

#![cfg(feature = "testing")]

use std::sync::Arc;
use std::time::Duration;

use ironbus_core::testing::{partition_key_prefix, FaultyStore};
use ironbus_core::*;
use ironbus_store_memory::MemoryStore;

mod common;
use common::path;

struct Fixture {
    broker: Broker,
    store: Arc<FaultyStore>,
    clock: Arc<ManualClock>,
}

async fn fixture() -> Fixture {
    let store = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())));
    let clock = Arc::new(ManualClock::default());
    let broker =
        Broker::open(store.clone(), clock.clone(), NamespaceLimits::default()).await.unwrap();
    Fixture { broker, store, clock }
}

impl Fixture {
    async fn topic(&self, name: &str, description: TopicDescription) {
        self.broker
            .create_entity(&path(name), EntityDescription::Topic(description))
            .await
            .unwrap();
    }

    async fn subscription(&self, name: &str) {
        self.broker
            .create_entity(
                &path(name),
                EntityDescription::Subscription(SubscriptionDescription::default()),
            )
            .await
            .unwrap();
    }

    /// Every message the subscription (or its dead-letter queue) holds, peeked.
    async fn peek_all(&self, address: &str) -> Vec<ReceivedMessage> {
        let mut all = Vec::new();
        let mut from = SequenceNumber(0);
        loop {
            let page = self.broker.peek(address, from, 100).await.unwrap();
            let Some(last) = page.last() else { return all };
            from = SequenceNumber(last.sequence_number().0 + 1);
            all.extend(page);
        }
    }

    async fn count(&self, address: &str) -> usize {
        self.peek_all(address).await.len()
    }
}

#[tokio::test]
async fn every_subscription_gets_a_copy_that_it_settles_on_its_own() {
    let f = fixture().await;
    f.topic("t", TopicDescription::default()).await;
    f.subscription("t/Subscriptions/a").await;
    f.subscription("t/Subscriptions/b").await;
    let sent = f.broker.send("t", vec![Message::new("hello").with_message_id("m1")]).await.unwrap();
    let SendOutcome::Enqueued(seq) = sent[0] else { panic!("{sent:?}") };

    for sub in ["t/Subscriptions/a", "t/Subscriptions/b"] {
        let peeked = f.peek_all(sub).await;
        assert_eq!(peeked.len(), 1, "{sub}");
        assert_eq!(peeked[0].sequence_number(), seq);
        assert_eq!(peeked[0].message.body.as_ref(), b"hello");
    }
    // A topic holds nothing receivable, and cannot be received from.
    assert!(matches!(
        f.broker.open_receiver("t", ReceiveMode::PeekLock).await,
        Err(BrokerError::InvalidOperation(_))
    ));

    let receiver =
        f.broker.open_receiver("t/Subscriptions/a", ReceiveMode::PeekLock).await.unwrap();
    receiver.add_credit(1);
    let got = receiver.recv().await.unwrap();
    f.broker.complete("t/Subscriptions/a", got.lock_token().unwrap()).await.unwrap();
    assert_eq!(f.count("t/Subscriptions/a").await, 0);
    assert_eq!(f.count("t/Subscriptions/b").await, 1, "b's copy is untouched");

    // b's copy still reads its body after a's is gone (the body is shared, counted).
    let receiver =
        f.broker.open_receiver("t/Subscriptions/b", ReceiveMode::ReceiveAndDelete).await.unwrap();
    receiver.add_credit(1);
    assert_eq!(receiver.recv().await.unwrap().message.body.as_ref(), b"hello");
    assert_eq!(f.count("t/Subscriptions/b").await, 0);
}

#[tokio::test]
async fn a_topic_without_subscriptions_discards_unless_it_filters_before_publishing() {
    let f = fixture().await;
    f.topic("open", TopicDescription::default()).await;
    f.broker.send("open", vec![Message::new("x")]).await.unwrap();
    f.topic(
        "strict",
        TopicDescription { filtering_messages_before_publishing: true, ..Default::default() },
    )
    .await;
    assert!(matches!(
        f.broker.send("strict", vec![Message::new("x")]).await,
        Err(BrokerError::NoMatchingSubscription { .. })
    ));
    f.subscription("strict/Subscriptions/s").await;
    f.broker.send("strict", vec![Message::new("x")]).await.unwrap();
    assert_eq!(f.count("strict/Subscriptions/s").await, 1);
}

#[tokio::test]
async fn a_subscription_without_rules_takes_nothing_and_rules_apply_from_their_creation() {
    let f = fixture().await;
    f.topic("t", TopicDescription::default()).await;
    f.subscription("t/Subscriptions/s").await;
    f.broker.delete_entity(&path("t/Subscriptions/s/Rules/$Default")).await.unwrap();
    f.broker.send("t", vec![Message::new("before")]).await.unwrap();
    assert_eq!(f.count("t/Subscriptions/s").await, 0);
    f.broker
        .create_entity(
            &path("t/Subscriptions/s/Rules/all"),
            EntityDescription::Rule(RuleDescription::default()),
        )
        .await
        .unwrap();
    f.broker.send("t", vec![Message::new("after")]).await.unwrap();
    let peeked = f.peek_all("t/Subscriptions/s").await;
    assert_eq!(peeked.len(), 1);
    assert_eq!(peeked[0].message.body.as_ref(), b"after");
    // A False filter takes nothing; two matching rules without action still make one copy.
    f.broker
        .create_entity(
            &path("t/Subscriptions/s/Rules/none"),
            EntityDescription::Rule(RuleDescription { filter: RuleFilter::False, action: None }),
        )
        .await
        .unwrap();
    f.broker
        .create_entity(
            &path("t/Subscriptions/s/Rules/again"),
            EntityDescription::Rule(RuleDescription::default()),
        )
        .await
        .unwrap();
    f.broker.send("t", vec![Message::new("third")]).await.unwrap();
    assert_eq!(f.count("t/Subscriptions/s").await, 2);
}

#[tokio::test]
async fn duplicates_are_detected_at_the_topic_for_every_subscription() {
    let f = fixture().await;
    f.topic("t", TopicDescription { requires_duplicate_detection: true, ..Default::default() })
        .await;
    f.subscription("t/Subscriptions/a").await;
    f.subscription("t/Subscriptions/b").await;
    let first = f.broker.send("t", vec![Message::new("1").with_message_id("same")]).await.unwrap();
    let again = f.broker.send("t", vec![Message::new("2").with_message_id("same")]).await.unwrap();
    assert!(matches!(first[0], SendOutcome::Enqueued(_)));
    assert_eq!(again, [SendOutcome::Duplicate]);
    assert_eq!(f.count("t/Subscriptions/a").await, 1);
    assert_eq!(f.count("t/Subscriptions/b").await, 1);
}

#[tokio::test]
async fn scheduled_messages_fan_out_when_due_and_cancel_at_the_topic() {
    let f = fixture().await;
    f.topic("t", TopicDescription::default()).await;
    f.subscription("t/Subscriptions/a").await;
    f.subscription("t/Subscriptions/b").await;
    let at = f.clock.now().saturating_add(Duration::from_secs(60));
    let kept = f
        .broker
        .schedule("t", vec![Message::new("kept").with_scheduled_enqueue_time(at)])
        .await
        .unwrap();
    let dropped = f
        .broker
        .schedule("t", vec![Message::new("dropped").with_scheduled_enqueue_time(at)])
        .await
        .unwrap();
    let SendOutcome::Enqueued(dropped) = dropped[0] else { panic!() };
    let SendOutcome::Enqueued(kept) = kept[0] else { panic!() };
    assert_eq!(f.broker.get_topic_runtime(&path("t")).await.unwrap().scheduled_message_count, 2);
    assert_eq!(f.count("t/Subscriptions/a").await, 0);
    f.broker.cancel_scheduled("t", &[dropped]).await.unwrap();

    f.clock.advance(Duration::from_secs(61));
    // Any request makes the partition run its cycle; the due message fans out first.
    let mut peeked = Vec::new();
    for _ in 0..100 {
        peeked = f.peek_all("t/Subscriptions/a").await;
        if !peeked.is_empty() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(peeked.len(), 1);
    assert_eq!(peeked[0].sequence_number(), kept);
    assert_eq!(peeked[0].message.body.as_ref(), b"kept");
    assert_eq!(f.count("t/Subscriptions/b").await, 1);
    assert_eq!(f.broker.get_topic_runtime(&path("t")).await.unwrap().scheduled_message_count, 0);
}

#[tokio::test]
async fn copies_and_scheduled_messages_survive_a_restart() {
    let f = fixture().await;
    f.topic("t", TopicDescription::default()).await;
    f.subscription("t/Subscriptions/a").await;
    f.subscription("t/Subscriptions/b").await;
    f.broker.send("t", vec![Message::new("now")]).await.unwrap();
    let at = f.clock.now().saturating_add(Duration::from_secs(60));
    f.broker
        .schedule("t", vec![Message::new("later").with_scheduled_enqueue_time(at)])
        .await
        .unwrap();
    // a settles its copy: the body stays for b.
    let receiver =
        f.broker.open_receiver("t/Subscriptions/a", ReceiveMode::ReceiveAndDelete).await.unwrap();
    receiver.add_credit(1);
    receiver.recv().await.unwrap();
    drop(receiver);
    f.broker.shutdown();

    let reopened =
        Broker::open(f.store.clone(), f.clock.clone(), NamespaceLimits::default()).await.unwrap();
    let f = Fixture { broker: reopened, store: f.store, clock: f.clock };
    let names: Vec<String> = f
        .broker
        .list_children(&path("t"), 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|i| i.path.name().to_owned())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(f.count("t/Subscriptions/a").await, 0);
    let b = f.peek_all("t/Subscriptions/b").await;
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].message.body.as_ref(), b"now");
    f.clock.advance(Duration::from_secs(61));
    let mut a = Vec::new();
    for _ in 0..100 {
        a = f.peek_all("t/Subscriptions/a").await;
        if !a.is_empty() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].message.body.as_ref(), b"later");
    // Rules came back too: a new message still reaches both.
    f.broker.send("t", vec![Message::new("again")]).await.unwrap();
    assert_eq!(f.count("t/Subscriptions/b").await, 3);
}

#[tokio::test]
async fn a_failed_write_leaves_no_subscription_with_part_of_a_publish() {
    let f = fixture().await;
    f.topic("t", TopicDescription::default()).await;
    f.subscription("t/Subscriptions/a").await;
    f.subscription("t/Subscriptions/b").await;
    let writes = f.store.writes();
    f.store.fail_next_writes(1);
    assert!(f.broker.send("t", vec![Message::new("x")]).await.is_err());
    // The partition rebuilds from the store: neither subscription has the message.
    let mut counts = None;
    for _ in 0..100 {
        match (
            f.broker.peek("t/Subscriptions/a", SequenceNumber(0), 10).await,
            f.broker.peek("t/Subscriptions/b", SequenceNumber(0), 10).await,
        ) {
            (Ok(a), Ok(b)) => {
                counts = Some((a.len(), b.len()));
                break;
            }
            _ => tokio::task::yield_now().await,
        }
    }
    assert_eq!(counts, Some((0, 0)));
    let sent = f.broker.send("t", vec![Message::new("y")]).await.unwrap();
    assert!(matches!(sent[0], SendOutcome::Enqueued(_)));
    assert_eq!(f.count("t/Subscriptions/a").await, 1);
    assert_eq!(f.count("t/Subscriptions/b").await, 1);
    assert!(f.store.writes() > writes);
}

#[tokio::test]
async fn partitioned_topics_keep_the_partition_in_every_copys_sequence_number() {
    let f = fixture().await;
    f.topic(
        "t",
        TopicDescription { enable_partitioning: true, partition_count: 4, ..Default::default() },
    )
    .await;
    f.subscription("t/Subscriptions/a").await;
    f.subscription("t/Subscriptions/b").await;
    let mut sent = Vec::new();
    for key in ["k1", "k2", "k3", "k4", "k5", "k6"] {
        let outcome =
            f.broker.send("t", vec![Message::new(key).with_partition_key(key)]).await.unwrap();
        let SendOutcome::Enqueued(seq) = outcome[0] else { panic!() };
        sent.push((key, seq));
    }
    for sub in ["t/Subscriptions/a", "t/Subscriptions/b"] {
        let peeked = f.peek_all(sub).await;
        assert_eq!(peeked.len(), 6, "{sub}");
        for m in peeked {
            let key = std::str::from_utf8(&m.message.body).unwrap();
            let (_, seq) = sent.iter().find(|(k, _)| *k == key).unwrap();
            assert_eq!(m.sequence_number(), *seq);
            assert_eq!(m.broker.partition_id, seq.partition(true));
        }
    }
}

#[tokio::test]
async fn deleting_a_subscription_or_topic_removes_what_is_under_it() {
    let f = fixture().await;
    f.topic("t", TopicDescription::default()).await;
    f.subscription("t/Subscriptions/a").await;
    f.subscription("t/Subscriptions/b").await;
    f.broker.send("t", vec![Message::new("x")]).await.unwrap();
    f.broker.delete_entity(&path("t/Subscriptions/a")).await.unwrap();
    assert!(matches!(
        f.broker.get_entity(&path("t/Subscriptions/a/Rules/$Default")).await,
        Err(BrokerError::EntityNotFound { .. })
    ));
    assert_eq!(f.count("t/Subscriptions/b").await, 1);
    f.subscription("t/Subscriptions/a").await;
    assert_eq!(f.count("t/Subscriptions/a").await, 0, "a new subscription starts empty");
    f.broker.delete_entity(&path("t")).await.unwrap();
    for p in ["t", "t/Subscriptions/a", "t/Subscriptions/b/Rules/$Default"] {
        assert!(
            matches!(f.broker.get_entity(&path(p)).await, Err(BrokerError::EntityNotFound { .. })),
            "{p}"
        );
    }
}

async fn add_rule(f: &Fixture, p: &str, filter: RuleFilter, action: Option<&str>) {
    let action = action.map(|a| RuleAction { expression: a.into(), parameters: vec![] });
    f.broker
        .create_entity(&path(p), EntityDescription::Rule(RuleDescription { filter, action }))
        .await
        .unwrap();
}

fn sql(expression: &str) -> RuleFilter {
    RuleFilter::Sql { expression: expression.into(), parameters: vec![] }
}

#[tokio::test]
async fn sql_filters_and_actions_decide_the_copies_of_each_subscription() {
    let f = fixture().await;
    f.topic("t", TopicDescription::default()).await;
    // all: $Default. labelled: only Label 'x'. actions: two action rules and a plain one.
    f.subscription("t/Subscriptions/all").await;
    f.subscription("t/Subscriptions/labelled").await;
    f.broker.delete_entity(&path("t/Subscriptions/labelled/Rules/$Default")).await.unwrap();
    add_rule(&f, "t/Subscriptions/labelled/Rules/x", sql("sys.Label = 'x'"), None).await;
    f.subscription("t/Subscriptions/actions").await;
    add_rule(&f, "t/Subscriptions/actions/Rules/a1", RuleFilter::True, Some("SET tag = 'one'"))
        .await;
    add_rule(&f, "t/Subscriptions/actions/Rules/a2", sql("1=1"), Some("SET tag = 'two'")).await;

    let mut x = Message::new("x");
    x.properties.subject = Some("x".into());
    let mut y = Message::new("y");
    y.properties.subject = Some("y".into());
    let sent = f.broker.send("t", vec![x, y]).await.unwrap();
    assert_eq!(sent.len(), 2);

    assert_eq!(f.count("t/Subscriptions/all").await, 2);
    let labelled = f.peek_all("t/Subscriptions/labelled").await;
    assert_eq!(labelled.len(), 1);
    assert_eq!(labelled[0].message.body.as_ref(), b"x");
    // $Default + a1 + a2: three copies of each message, each action copy its own number.
    let copies = f.peek_all("t/Subscriptions/actions").await;
    assert_eq!(copies.len(), 6);
    let mut numbers: Vec<_> = copies.iter().map(ReceivedMessage::sequence_number).collect();
    numbers.dedup();
    assert_eq!(numbers.len(), 6, "every copy has its own sequence number");
    let tags: Vec<Option<&PropertyValue>> =
        copies.iter().map(|c| c.message.application_properties.get("tag")).collect();
    let one = PropertyValue::String("one".into());
    let two = PropertyValue::String("two".into());
    assert_eq!(tags.iter().filter(|t| **t == Some(&one)).count(), 2);
    assert_eq!(tags.iter().filter(|t| **t == Some(&two)).count(), 2);
    assert_eq!(tags.iter().filter(|t| t.is_none()).count(), 2);
    for c in &copies {
        let rule = c.message.application_properties.get("RuleName");
        match c.message.application_properties.get("tag") {
            Some(PropertyValue::String(t)) if t == "one" => {
                assert_eq!(rule, Some(&PropertyValue::String("a1".into())))
            }
            Some(_) => assert_eq!(rule, Some(&PropertyValue::String("a2".into()))),
            None => assert_eq!(rule, None),
        }
    }
}

#[tokio::test]
async fn a_rule_that_fails_dead_letters_that_subscriptions_copy_or_drops_it() {
    let f = fixture().await;
    f.topic("t", TopicDescription::default()).await;
    f.subscription("t/Subscriptions/dlq").await;
    add_rule(&f, "t/Subscriptions/dlq/Rules/bad", sql("n / 0 = 1"), None).await;
    f.broker
        .create_entity(
            &path("t/Subscriptions/drop"),
            EntityDescription::Subscription(SubscriptionDescription {
                dead_lettering_on_filter_evaluation_exceptions: false,
                ..Default::default()
            }),
        )
        .await
        .unwrap();
    add_rule(&f, "t/Subscriptions/drop/Rules/bad", sql("n / 0 = 1"), None).await;
    f.subscription("t/Subscriptions/fine").await;

    f.broker
        .send("t", vec![Message::new("m").with_property("n", PropertyValue::Long(3))])
        .await
        .unwrap();
    assert_eq!(f.count("t/Subscriptions/dlq").await, 0);
    let dead = f.peek_all("t/Subscriptions/dlq/$DeadLetterQueue").await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].broker.dead_letter_reason.as_deref(), Some("DivideByZeroException"));
    assert_eq!(f.count("t/Subscriptions/drop").await, 0);
    assert_eq!(f.count("t/Subscriptions/drop/$DeadLetterQueue").await, 0);
    assert_eq!(f.count("t/Subscriptions/fine").await, 1, "other subscriptions are unaffected");
}

#[tokio::test]
async fn invalid_rules_are_refused_when_created() {
    let f = fixture().await;
    f.topic("t", TopicDescription::default()).await;
    f.subscription("t/Subscriptions/s").await;
    let bad = RuleDescription { filter: sql("color ="), action: None };
    assert!(matches!(
        f.broker
            .create_entity(&path("t/Subscriptions/s/Rules/bad"), EntityDescription::Rule(bad))
            .await,
        Err(BrokerError::InvalidArgument { field: "SqlExpression", .. })
    ));
    assert!(matches!(
        f.broker
            .create_entity(
                &path("t/Subscriptions/s/Rules/$default"),
                EntityDescription::Rule(RuleDescription::default())
            )
            .await,
        Err(BrokerError::EntityAlreadyExists { .. })
    ));
}

#[tokio::test]
async fn disabled_subscriptions_take_nothing_and_ttl_is_the_smallest_default() {
    let f = fixture().await;
    let hour = Duration::from_secs(3600);
    f.topic("t", TopicDescription { default_message_time_to_live: hour * 2, ..Default::default() })
        .await;
    f.broker
        .create_entity(
            &path("t/Subscriptions/off"),
            EntityDescription::Subscription(SubscriptionDescription {
                status: EntityStatus::Disabled,
                ..Default::default()
            }),
        )
        .await
        .unwrap();
    f.broker
        .create_entity(
            &path("t/Subscriptions/short"),
            EntityDescription::Subscription(SubscriptionDescription {
                default_message_time_to_live: hour,
                ..Default::default()
            }),
        )
        .await
        .unwrap();
    f.subscription("t/Subscriptions/plain").await;
    let now = f.clock.now();
    f.broker.send("t", vec![Message::new("m").with_time_to_live(hour * 3)]).await.unwrap();
    assert_eq!(f.count("t/Subscriptions/off").await, 0);
    let short = f.peek_all("t/Subscriptions/short").await;
    assert_eq!(short[0].broker.expires_at, now.saturating_add(hour));
    let plain = f.peek_all("t/Subscriptions/plain").await;
    assert_eq!(plain[0].broker.expires_at, now.saturating_add(hour * 2));
}

#[tokio::test]
async fn every_receiver_of_a_subscription_is_served_not_only_the_first() {
    let f = fixture().await;
    f.topic("t", TopicDescription::default()).await;
    f.subscription("t/Subscriptions/s").await;
    f.broker.send("t", vec![Message::new("1"), Message::new("2")]).await.unwrap();
    let first = f.broker.open_receiver("t/Subscriptions/s", ReceiveMode::PeekLock).await.unwrap();
    first.add_credit(1);
    let got = first.recv().await.unwrap();
    f.broker
        .settle(
            "t/Subscriptions/s",
            got.lock_token().unwrap(),
            Disposition::DeadLetter {
                reason: Some("r".into()),
                description: None,
                properties: Default::default(),
            },
        )
        .await
        .unwrap();
    // A second receiver and a dead-letter receiver each get theirs on their own nudge.
    let second = f.broker.open_receiver("t/Subscriptions/s", ReceiveMode::PeekLock).await.unwrap();
    // Credit comes after the partition has taken the attach (a peek is answered after it).
    f.count("t/Subscriptions/s").await;
    second.add_credit(1);
    assert!(guard(second.recv()).await.expect("the second receiver is served").is_some());
    let dlq = f
        .broker
        .open_receiver("t/Subscriptions/s/$DeadLetterQueue", ReceiveMode::PeekLock)
        .await
        .unwrap();
    f.count("t/Subscriptions/s").await;
    dlq.add_credit(1);
    let dead = guard(dlq.recv()).await.expect("the dead-letter receiver is served").unwrap();
    assert_eq!(dead.broker.dead_letter_reason.as_deref(), Some("r"));
}

/// Fails a test that would otherwise hang (real time: a guard, not a measurement).
async fn guard<T>(
    f: impl std::future::Future<Output = T>,
) -> Result<T, tokio::time::error::Elapsed> {
    tokio::time::timeout(Duration::from_secs(10), f).await
}

#[tokio::test]
async fn a_publish_stores_its_body_once_whatever_the_copies() {
    let f = fixture().await;
    f.topic("t", TopicDescription::default()).await;
    for s in ["a", "b", "c"] {
        f.subscription(&format!("t/Subscriptions/{s}")).await;
    }
    add_rule(&f, "t/Subscriptions/c/Rules/tag", RuleFilter::True, Some("SET tag = 1; REMOVE gone"))
        .await;
    add_rule(
        &f,
        "t/Subscriptions/c/Rules/relabel",
        RuleFilter::True,
        Some("SET sys.Label = 'new'"),
    )
    .await;
    let message = Message::new("payload").with_property("gone", PropertyValue::Int(7));
    f.broker.send("t", vec![message]).await.unwrap();

    // One body record in the topic's partition; five copies (a, b, and three in c).
    let mut prefix = partition_key_prefix(&f.broker, "t", PartitionId(0)).unwrap().to_vec();
    prefix.push(b'b');
    let mut end = prefix.clone();
    *end.last_mut().unwrap() += 1;
    let bodies = f.store.inner().scan(&prefix, &end, 100).await.unwrap();
    assert_eq!(bodies.len(), 1, "the body is stored once");
    assert_eq!(f.count("t/Subscriptions/a").await + f.count("t/Subscriptions/b").await, 2);
    let c = f.peek_all("t/Subscriptions/c").await;
    assert_eq!(c.len(), 3);
    let tagged = c.iter().find(|m| m.message.application_properties.contains_key("tag")).unwrap();
    assert!(!tagged.message.application_properties.contains_key("gone"), "REMOVE applies");
    let relabelled =
        c.iter().find(|m| m.message.properties.subject.as_deref() == Some("new")).unwrap();
    assert_eq!(relabelled.message.body.as_ref(), b"payload");
    assert!(relabelled.message.raw.is_none(), "a changed system property is encoded afresh");
    let plain =
        c.iter().find(|m| !m.message.application_properties.contains_key("RuleName")).unwrap();
    assert_eq!(plain.message.application_properties.get("gone"), Some(&PropertyValue::Int(7)));

    // The body goes when the last copy does, not before — also after a restart, which
    // counts the copies using it again from their records.
    f.broker.shutdown();
    let broker =
        Broker::open(f.store.clone(), f.clock.clone(), NamespaceLimits::default()).await.unwrap();
    let f = Fixture { broker, store: f.store, clock: f.clock };
    assert_eq!(f.count("t/Subscriptions/c").await, 3);
    for s in ["a", "b", "c"] {
        let receiver = f
            .broker
            .open_receiver(format!("t/Subscriptions/{s}").as_str(), ReceiveMode::ReceiveAndDelete)
            .await
            .unwrap();
        let n = if s == "c" { 3 } else { 1 };
        receiver.add_credit(n);
        for _ in 0..n {
            guard(receiver.recv()).await.unwrap().unwrap();
        }
        let left = f.store.inner().scan(&prefix, &end, 100).await.unwrap().len();
        assert_eq!(left, usize::from(s != "c"), "after {s}");
    }
}

#[tokio::test]
async fn the_topic_runtime_counts_its_subscriptions_rules_by_filter_kind() {
    let f = fixture().await;
    f.topic("t", TopicDescription::default()).await;
    f.subscription("t/Subscriptions/a").await;
    f.subscription("t/Subscriptions/b").await;
    // Two $Default rules (true filters count as SQL), one SQL rule, two correlation rules.
    add_rule(&f, "t/Subscriptions/a/Rules/sql", sql("1=1"), None).await;
    let correlation = || {
        RuleFilter::Correlation(CorrelationFilter {
            correlation_id: Some("abc".into()),
            ..Default::default()
        })
    };
    add_rule(&f, "t/Subscriptions/a/Rules/c", correlation(), None).await;
    add_rule(&f, "t/Subscriptions/b/Rules/c", correlation(), None).await;
    let runtime = f.broker.get_topic_runtime(&path("t")).await.unwrap();
    assert_eq!((runtime.sql_filter_count, runtime.correlation_filter_count), (3, 2));

    f.broker.delete_entity(&path("t/Subscriptions/b")).await.unwrap();
    let runtime = f.broker.get_topic_runtime(&path("t")).await.unwrap();
    assert_eq!((runtime.sql_filter_count, runtime.correlation_filter_count), (2, 1));
}

/// The totals message rates are computed from: a topic counts each message sent to it once
/// (published at once or scheduled, not again when a scheduled one comes due), each
/// subscription the copies it took and handed out.
#[tokio::test]
async fn a_topic_and_its_subscriptions_count_messages_in_and_out() {
    let f = fixture().await;
    f.topic("t", TopicDescription::default()).await;
    f.subscription("t/Subscriptions/a").await;
    f.subscription("t/Subscriptions/b").await;
    let batch = (0..3).map(|i| Message::new("m").with_message_id(format!("m{i}"))).collect();
    f.broker.send("t", batch).await.unwrap();
    let at = f.clock.now().saturating_add(Duration::from_secs(60));
    f.broker
        .schedule("t", vec![Message::new("later").with_scheduled_enqueue_time(at)])
        .await
        .unwrap();
    f.clock.advance(Duration::from_secs(61));
    let mut copies = 0;
    for _ in 0..100 {
        copies = f.count("t/Subscriptions/a").await;
        if copies == 4 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(copies, 4, "the scheduled message came due");

    let receiver =
        f.broker.open_receiver("t/Subscriptions/a", ReceiveMode::ReceiveAndDelete).await.unwrap();
    receiver.add_credit(2);
    for _ in 0..2 {
        receiver.recv().await.unwrap();
    }
    let totals = |r: QueueRuntime| (r.incoming_messages_total, r.outgoing_messages_total);
    assert_eq!(totals(f.broker.get_queue_runtime("t").await.unwrap()), (4, 0));
    assert_eq!(totals(f.broker.get_queue_runtime("t/Subscriptions/a").await.unwrap()), (4, 2));
    assert_eq!(totals(f.broker.get_queue_runtime("t/Subscriptions/b").await.unwrap()), (4, 0));
}
