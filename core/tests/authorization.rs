//! Entity authorization rules through the broker: stored with the description, kept across a
//! restart, and found for any path below their queue or topic.

use std::sync::Arc;

use ironbus_core::auth::{AuthorizationRule, Rights};
use ironbus_core::transport::authorization::{entity_rules, named_entity};
use ironbus_core::*;
use ironbus_store_memory::MemoryStore;

mod common;
use common::path;

async fn open(store: Arc<MemoryStore>) -> Broker {
    Broker::open(store, Arc::new(ManualClock::default()), NamespaceLimits::default()).await.unwrap()
}

#[tokio::test]
async fn rules_come_from_the_queue_or_topic_above_the_path_and_survive_a_restart() {
    let store = Arc::new(MemoryStore::new());
    let broker = open(store.clone()).await;
    let rule = AuthorizationRule::new("r", "primary", "secondary", Rights::SEND);
    let queue = QueueDescription { authorization_rules: vec![rule.clone()], ..Default::default() };
    broker.create_queue("q", queue).await.unwrap();
    let topic = TopicDescription { authorization_rules: vec![rule.clone()], ..Default::default() };
    broker.create_entity(&path("t"), EntityDescription::Topic(topic)).await.unwrap();
    let subscription = EntityDescription::Subscription(SubscriptionDescription::default());
    broker.create_entity(&path("t/Subscriptions/s"), subscription).await.unwrap();
    broker.create_queue("plain", QueueDescription::default()).await.unwrap();
    broker.shutdown();

    let broker = open(store).await;
    for (p, top) in [("q", "q"), ("T", "t"), ("t/Subscriptions/S", "t")] {
        let (found, rules) = entity_rules(&broker, &path(p)).await.unwrap();
        assert_eq!(found.key(), top, "{p}");
        assert_eq!(rules, vec![rule.clone()], "{p}");
    }
    assert!(entity_rules(&broker, &path("plain")).await.unwrap().1.is_empty());
    for missing in ["q2", "t/Subscriptions/nope"] {
        let error = entity_rules(&broker, &path(missing)).await.unwrap_err();
        assert!(matches!(error, BrokerError::EntityNotFound { .. }), "{missing}: {error}");
    }
}

#[tokio::test]
async fn invalid_rules_are_refused_on_create_and_update() {
    let broker = open(Arc::new(MemoryStore::new())).await;
    let rule = |name: &str, key: &str| AuthorizationRule::new(name, key, "", Rights::LISTEN);
    let bad = [
        vec![rule("", "k")],
        vec![rule("a", "")],
        vec![rule("a", "k"), rule("A", "k2")],
        vec![AuthorizationRule::new("a", "k", "", Rights::NONE)],
    ];
    broker.create_queue("q", QueueDescription::default()).await.unwrap();
    for rules in bad {
        let description =
            QueueDescription { authorization_rules: rules.clone(), ..Default::default() };
        let error = broker.create_queue("new", description.clone()).await.unwrap_err();
        assert!(error.to_string().contains("AuthorizationRules"), "{rules:?}: {error}");
        assert!(broker.update_queue("q", description).await.is_err(), "{rules:?}");
        let topic = TopicDescription { authorization_rules: rules.clone(), ..Default::default() };
        assert!(broker.create_entity(&path("t"), EntityDescription::Topic(topic)).await.is_err());
    }
}

#[test]
fn audiences_name_the_entity_they_are_in() {
    let cases = [
        ("sb://h/q", Some("q")),
        ("amqps://h:5671/q/$DeadLetterQueue/$management", Some("q")),
        ("t/Subscriptions/s/$management", Some("t/Subscriptions/s")),
        ("sb://h/", None),
        ("", None),
        ("amqps://h/$cbs", None),
        ("sb://h/$management", None),
        ("https://h/$Resources/queues", None),
    ];
    for (audience, expected) in cases {
        assert_eq!(named_entity(audience).as_ref().map(EntityPath::as_str), expected, "{audience}");
    }
}
