//! Several namespaces behind one server (issue 28 item 14): each a broker of its own over the
//! same stores, selected by host name, created on first use when allowed, kept across a restart.
#![cfg(feature = "testing")]

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use ironbus_core::namespaces::OpenNamespace;
use ironbus_core::store::PrefixedStore;
use ironbus_core::*;
use ironbus_store_memory::MemoryStore;

mod common;
use common::guard;

/// The opener a server gives: the namespace's view of the shared store.
fn opener(shared: Arc<dyn Store>, clock: Arc<ManualClock>) -> OpenNamespace {
    Arc::new(move |name: String| {
        let (shared, clock) = (shared.clone(), clock.clone());
        Box::pin(async move {
            let store =
                Arc::new(PrefixedStore::new(shared, PrefixedStore::namespace_prefix(&name)));
            Broker::open(store, clock, NamespaceLimits::default()).await
        })
    })
}

async fn namespaces(shared: Arc<dyn Store>, on_demand: bool) -> Namespaces {
    let clock = Arc::new(ManualClock::default());
    let default = guard(Broker::open(shared.clone(), clock.clone(), NamespaceLimits::default()))
        .await
        .unwrap();
    let open = on_demand.then(|| opener(shared, clock));
    Namespaces::new("sbemulatorns", default, HashMap::new(), open)
}

async fn bodies(broker: &Broker, queue: &str) -> Vec<Bytes> {
    let page = guard(broker.peek(queue, SequenceNumber(0), 100)).await.unwrap();
    page.into_iter().map(|m| m.message.body.clone()).collect()
}

#[tokio::test]
async fn each_host_gets_its_own_namespace_and_a_restart_keeps_them() {
    let shared: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let ns = namespaces(shared.clone(), true).await;
    let (name, a) = guard(ns.resolve(Some("test-1.localhost:5672"))).await.unwrap();
    assert_eq!(name.as_deref(), Some("test-1"));
    let (_, b) = guard(ns.resolve(Some("TEST-2.localhost"))).await.unwrap();
    for (broker, body) in [(&a, "one"), (&b, "two"), (ns.default_broker(), "default")] {
        guard(broker.create_queue("q", QueueDescription::default())).await.unwrap();
        guard(broker.send("q", vec![Message::new(Bytes::from(body))])).await.unwrap();
    }
    // The same queue name in three namespaces: three queues.
    assert_eq!(bodies(&a, "q").await, ["one"]);
    assert_eq!(bodies(&b, "q").await, ["two"]);
    assert_eq!(bodies(ns.default_broker(), "q").await, ["default"]);
    // A host names the same namespace again; localhost, IPs and the default's name the default.
    let (_, again) = guard(ns.resolve(Some("test-1.example"))).await.unwrap();
    assert_eq!(bodies(&again, "q").await, ["one"]);
    for host in ["localhost", "127.0.0.1:5672", "sbemulatorns.localhost"] {
        let (name, broker) = guard(ns.resolve(Some(host))).await.unwrap();
        assert_eq!(name, None, "{host}");
        assert_eq!(bodies(&broker, "q").await, ["default"], "{host}");
    }
    assert_eq!(ns.names(), ["test-1", "test-2"]);
    // Deleting a namespace's queue leaves the others'.
    guard(a.delete_queue("q")).await.unwrap();
    assert_eq!(bodies(&b, "q").await, ["two"]);
    ns.shutdown();

    // Restarted over the same store: each namespace finds its own again.
    let ns = namespaces(shared, true).await;
    let (_, b) = guard(ns.resolve(Some("test-2.localhost"))).await.unwrap();
    assert_eq!(bodies(&b, "q").await, ["two"]);
    let (_, a) = guard(ns.resolve(Some("test-1.localhost"))).await.unwrap();
    assert!(guard(a.get_queue("q")).await.is_err(), "deleted before the restart");
    assert_eq!(bodies(ns.default_broker(), "q").await, ["default"]);
}

#[tokio::test]
async fn without_on_demand_an_unknown_host_is_the_default_namespace() {
    let ns = namespaces(Arc::new(MemoryStore::new()), false).await;
    let (name, _) = guard(ns.resolve(Some("test-1.localhost"))).await.unwrap();
    assert_eq!(name, None);
    assert_eq!(ns.name_for_host("test-1.localhost"), None);
    assert!(ns.names().is_empty());
    // An invalid name is never created, even on demand.
    let ns = namespaces(Arc::new(MemoryStore::new()), true).await;
    assert_eq!(ns.name_for_host("9lives.localhost"), None);
    assert_eq!(ns.name_for_host("under_score.localhost"), None);
}
