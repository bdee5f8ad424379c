//! Management generic over the entity kind, through the public [`Broker`] API: entities are
//! addressed by [`EntityPath`], subscriptions and rules live under their parents, and a path
//! only holds an entity of a kind that fits its shape.

use std::sync::Arc;

use ironbus_core::*;
use ironbus_store_memory::MemoryStore;

mod common;
use common::path;

async fn broker() -> (Broker, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::default());
    let broker = Broker::open(store.clone(), clock, NamespaceLimits::default()).await.unwrap();
    (broker, store)
}

#[tokio::test]
async fn queues_are_managed_by_path_whatever_the_casing() {
    let (broker, _) = broker().await;
    let queue = EntityDescription::Queue(QueueDescription::default());
    let created = broker.create_entity(&path("Orders/EU"), queue.clone()).await.unwrap();
    assert_eq!(created.path.as_str(), "Orders/EU");
    assert_eq!(created.kind(), EntityKind::Queue);

    let got = broker.get_entity(&path("/orders/eu/")).await.unwrap();
    assert_eq!(got.path.as_str(), "Orders/EU", "the name displays as created");
    assert_eq!(got.description, queue);
    assert!(matches!(
        broker.create_entity(&path("ORDERS/eu"), queue.clone()).await,
        Err(BrokerError::EntityAlreadyExists { .. })
    ));

    let listed = broker.list_entities(EntityKind::Queue, 0, 10).await.unwrap();
    assert_eq!(listed.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(), ["Orders/EU"]);
    assert!(broker.list_entities(EntityKind::Topic, 0, 10).await.unwrap().is_empty());

    let longer = QueueDescription { max_delivery_count: 3, ..QueueDescription::default() };
    let updated = broker
        .update_entity(&path("orders/EU"), EntityDescription::Queue(longer.clone()))
        .await
        .unwrap();
    assert_eq!(updated.description, EntityDescription::Queue(longer.clone()));
    assert_eq!(broker.get_queue("ORDERS/EU").await.unwrap().description, longer);

    broker.delete_entity(&path("Orders/eu")).await.unwrap();
    assert!(matches!(
        broker.get_entity(&path("Orders/EU")).await,
        Err(BrokerError::EntityNotFound { .. })
    ));
}

#[tokio::test]
async fn subscriptions_and_rules_need_their_parents() {
    let (broker, _) = broker().await;
    let sub = EntityDescription::Subscription(SubscriptionDescription::default());
    let rule = EntityDescription::Rule(RuleDescription::default());
    assert!(matches!(
        broker.create_entity(&path("t/Subscriptions/s"), sub.clone()).await,
        Err(BrokerError::EntityNotFound { .. })
    ));
    broker.create_queue("q", QueueDescription::default()).await.unwrap();
    assert!(matches!(
        broker.create_entity(&path("q/Subscriptions/s"), sub.clone()).await,
        Err(BrokerError::EntityNotFound { .. })
    ));
    broker
        .create_entity(&path("t"), EntityDescription::Topic(TopicDescription::default()))
        .await
        .unwrap();
    assert!(matches!(
        broker.create_entity(&path("t/Subscriptions/s/Rules/r"), rule.clone()).await,
        Err(BrokerError::EntityNotFound { .. })
    ));
    broker.create_entity(&path("t/Subscriptions/s"), sub).await.unwrap();
    broker.create_entity(&path("t/Subscriptions/s/Rules/r"), rule).await.unwrap();
    let names =
        |infos: Vec<EntityInfo>| infos.iter().map(|i| i.path.name().to_owned()).collect::<Vec<_>>();
    assert_eq!(
        names(broker.list_children(&path("t/subscriptions/S"), 0, 10).await.unwrap()),
        ["$Default", "r"]
    );
    assert_eq!(names(broker.list_children(&path("t"), 0, 10).await.unwrap()), ["s"]);
    assert_eq!(broker.list_entities(EntityKind::Topic, 0, 10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn an_update_cannot_change_the_kind() {
    let (broker, _) = broker().await;
    broker.create_queue("q", QueueDescription::default()).await.unwrap();
    assert!(matches!(
        broker
            .update_entity(&path("q"), EntityDescription::Topic(TopicDescription::default()))
            .await,
        Err(BrokerError::InvalidOperation(_))
    ));
    assert_eq!(broker.get_entity(&path("q")).await.unwrap().kind(), EntityKind::Queue);
}

#[tokio::test]
async fn data_operations_take_parsed_addresses() {
    let (broker, _) = broker().await;
    broker.create_queue("a/b", QueueDescription::default()).await.unwrap();
    let address: EntityAddress = "sb://ns.servicebus.windows.net/A/B/".parse().unwrap();
    broker.send(address, vec![Message::new("x")]).await.unwrap();
    let dlq: EntityAddress = "a/b/$deadletterqueue".parse().unwrap();
    assert!(matches!(
        broker.send(dlq, vec![Message::new("y")]).await,
        Err(BrokerError::InvalidOperation(_))
    ));
    let peeked = broker.peek("A/b", SequenceNumber(0), 10).await.unwrap();
    assert_eq!(peeked.len(), 1);
}

#[tokio::test]
async fn entities_survive_a_restart_under_their_path() {
    let (broker, store) = broker().await;
    broker.create_queue("Orders", QueueDescription::default()).await.unwrap();
    broker.shutdown();
    let clock = Arc::new(ManualClock::default());
    let reopened = Broker::open(store, clock, NamespaceLimits::default()).await.unwrap();
    let info = reopened.get_entity(&path("ORDERS")).await.unwrap();
    assert_eq!((info.path.as_str(), info.kind()), ("Orders", EntityKind::Queue));
}

#[tokio::test]
async fn a_queue_cannot_take_the_path_of_a_subscription() {
    let (broker, _) = broker().await;
    for name in ["t/Subscriptions/s", "t/subscriptions/s/rules/r"] {
        assert!(
            matches!(
                broker.create_queue(name, QueueDescription::default()).await,
                Err(BrokerError::InvalidArgument { field: "EntityName", .. })
            ),
            "{name}"
        );
    }
    // `Subscriptions` as the first segment is an ordinary name.
    broker.create_queue("Subscriptions/x", QueueDescription::default()).await.unwrap();
}
