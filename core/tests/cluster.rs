//! Three brokers in one process over one shared store with guards, joined by an in-process
//! link (`CLUSTER.md` §4, the part CI runs without PostgreSQL): each partition runs on one
//! broker under a fencing token, and the others reach it through the link.
//!
//! - Results through brokers that own nothing equal those of one broker on its own.
//! - A receiver never holds more than the credit it was given, served by three nodes.
//! - Moving partitions between brokers under load loses and duplicates nothing.
//! - A stale owner's write is refused and leaves nothing behind.
//! - Entities created, updated and deleted through one node reach the others, and two nodes
//!   never write the namespace from the same view.
//!
//! The brokers run on the system clock: a pull waits for messages on the owner's clock.
//! `guard` only bounds each operation against a hang.
#![cfg(feature = "testing")]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use ironbus_core::remote::{Peer, PeerError};
use ironbus_core::{
    Broker, BrokerError, BrokerOptions, Clock, EntityDescription, Message, PartitionRef,
    QueueDescription, ReceiveMode, Receiver, SendOutcome, SequenceNumber, Store,
    SubscriptionDescription, SystemClock, TopicDescription,
};
use ironbus_store_memory::MemoryStore;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

mod common;
use common::{guard, path};

const NODES: usize = 3;
const PARTITIONS: u16 = 16;
const QUEUE: &str = "orders";

/// The link between brokers of one process: a call is the other broker's `serve_link`; a cut
/// link fails retriably, as a lost connection does.
#[derive(Debug)]
struct InProcess {
    broker: Broker,
    cut: AtomicBool,
}

#[async_trait]
impl Peer for InProcess {
    async fn call(&self, request: Bytes) -> Result<Bytes, PeerError> {
        if self.cut.load(Ordering::SeqCst) {
            return Err(PeerError { retriable: true, message: "link cut".into() });
        }
        Ok(self.broker.serve_link(&request).await)
    }
}

struct Cluster {
    nodes: Vec<Broker>,
    peers: Vec<Arc<InProcess>>,
    /// Which node runs each partition, and the last token handed out.
    owner: BTreeMap<PartitionRef, usize>,
    token: u64,
}

impl Cluster {
    /// Three cluster brokers on `store`, with the queue `QUEUE` created through the first
    /// before the others open (they learn entities from the store at start), partitions dealt
    /// round the nodes.
    async fn start(store: Arc<dyn Store>, description: QueueDescription) -> Cluster {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let options = BrokerOptions { cluster: true, ..Default::default() };
        let first =
            guard(Broker::open_with(vec![store.clone()], clock.clone(), options)).await.unwrap();
        guard(first.create_queue(QUEUE, description)).await.expect("create the queue");
        let mut nodes = vec![first];
        for _ in 1..NODES {
            nodes.push(
                guard(Broker::open_with(vec![store.clone()], clock.clone(), options))
                    .await
                    .unwrap(),
            );
        }
        let peers: Vec<Arc<InProcess>> = nodes
            .iter()
            .map(|b| Arc::new(InProcess { broker: b.clone(), cut: AtomicBool::new(false) }))
            .collect();
        // Each node learns the others' partitions' shared views, as the server's loop does.
        let (polled, links): (Vec<Broker>, Vec<Arc<InProcess>>) = (nodes.clone(), peers.clone());
        tokio::spawn(async move {
            loop {
                for (i, node) in polled.iter().enumerate() {
                    for (j, peer) in links.iter().enumerate() {
                        if i != j {
                            let _ = node.poll_stats(peer.clone()).await;
                        }
                    }
                }
                pause(50).await;
            }
        });
        let mut cluster = Cluster { nodes, peers, owner: BTreeMap::new(), token: 0 };
        let refs = cluster.nodes[0].partition_refs();
        assert_eq!(refs.len(), usize::from(PARTITIONS));
        for (i, at) in refs.into_iter().enumerate() {
            cluster.move_to(at, i % NODES).await;
        }
        cluster
    }

    /// Runs `at` on node `to` under a fresh token; the old owner releases it first (a
    /// graceful hand-over), and every other node routes to the new one.
    async fn move_to(&mut self, at: PartitionRef, to: usize) {
        if let Some(&from) = self.owner.get(&at) {
            guard(self.nodes[from].release(at)).await.unwrap();
        }
        self.token += 1;
        guard(self.nodes[to].acquire(at, self.token)).await.expect("acquire");
        self.owner.insert(at, to);
        for (i, node) in self.nodes.iter().enumerate() {
            if i != to {
                guard(node.route_remote(at, self.peers[to].clone())).await.unwrap();
            }
        }
    }

    /// Deals the partitions no node runs yet (an entity created since) round the nodes.
    async fn deal_new_partitions(&mut self) {
        for (i, at) in self.nodes[0].partition_refs().into_iter().enumerate() {
            if !self.owner.contains_key(&at) {
                self.move_to(at, i % NODES).await;
            }
        }
    }

    fn partitions_on(&self, node: usize) -> Vec<PartitionRef> {
        self.owner.iter().filter(|(_, n)| **n == node).map(|(at, _)| *at).collect()
    }
}

/// Lets the brokers' tasks run for `ms` milliseconds of the system clock they run on.
async fn pause(ms: u64) {
    SystemClock.sleep_until(SystemClock.now().saturating_add(Duration::from_millis(ms))).await;
}

fn queue() -> QueueDescription {
    QueueDescription {
        enable_partitioning: true,
        requires_duplicate_detection: true,
        ..Default::default()
    }
}

fn message(id: usize) -> Message {
    Message::new(format!("body {id}")).with_message_id(format!("m{id}"))
}

/// Sends `ids` one call each through `broker`, retrying what fails retriably (as the SDKs
/// do); returns the ids acknowledged.
async fn send_all(broker: &Broker, ids: impl IntoIterator<Item = usize>) -> Vec<usize> {
    let mut sent = Vec::new();
    for id in ids {
        for attempt in 0.. {
            match guard(broker.send(QUEUE, vec![message(id)])).await {
                Ok(outcomes) => {
                    assert_eq!(outcomes.len(), 1);
                    sent.push(id);
                    break;
                }
                Err(e) if e.is_retriable() && attempt < 200 => {
                    pause(5).await;
                }
                Err(e) => panic!("send m{id}: {e}"),
            }
        }
    }
    sent
}

/// Receives through `receiver` (peek-lock) and completes through `broker` until `expected`
/// bodies came or nothing comes for a while; returns the bodies received, with repeats.
async fn receive_all(broker: &Broker, receiver: &Receiver, expected: usize) -> Vec<String> {
    let mut bodies = Vec::new();
    receiver.add_credit(50);
    while bodies.len() < expected {
        let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(5), receiver.recv()).await
        else {
            break;
        };
        receiver.add_credit(1);
        bodies.push(String::from_utf8(m.message.body.to_vec()).unwrap());
        let token = m.lock_token().expect("peek-lock");
        guard(broker.complete(QUEUE, token)).await.expect("complete");
    }
    bodies
}

async fn counts(broker: &Broker) -> u64 {
    let runtime = guard(broker.get_queue_runtime(QUEUE)).await.expect("queue runtime");
    runtime.active_message_count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_owner_serves_like_one_broker() {
    // One broker on its own: the reference.
    let alone = guard(Broker::open_with(
        vec![Arc::new(MemoryStore::new())],
        Arc::new(SystemClock),
        BrokerOptions::default(),
    ))
    .await
    .unwrap();
    guard(alone.create_queue(QUEUE, queue())).await.unwrap();
    let reference_sent = send_all(&alone, (0..200).chain(0..20)).await;
    let reference = alone.open_receiver(QUEUE, ReceiveMode::PeekLock).await.unwrap();
    let mut expected = receive_all(&alone, &reference, 200).await;
    expected.sort();

    // The cluster: everything through node 0 and node 1, a third of the partitions each.
    let cluster = Cluster::start(Arc::new(MemoryStore::new()), queue()).await;
    assert_eq!(cluster.partitions_on(2).len(), 5);
    let sent = send_all(&cluster.nodes[0], (0..200).chain(0..20)).await;
    assert_eq!(sent, reference_sent, "every send is acknowledged, duplicates too");
    assert_eq!(counts(&cluster.nodes[2]).await, 200, "the duplicates were dropped");
    let peeked = guard(cluster.nodes[1].peek(QUEUE, SequenceNumber(0), 1000)).await.unwrap();
    assert!(!peeked.is_empty(), "a peek through a node reaches partitions elsewhere");

    let receiver = cluster.nodes[1].open_receiver(QUEUE, ReceiveMode::PeekLock).await.unwrap();
    let mut got = receive_all(&cluster.nodes[1], &receiver, 200).await;
    got.sort();
    assert_eq!(got, expected, "the same messages, each once");
    assert_eq!(counts(&cluster.nodes[0]).await, 0, "every completion reached its owner");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_never_holds_more_than_its_credit() {
    let cluster = Cluster::start(Arc::new(MemoryStore::new()), queue()).await;
    send_all(&cluster.nodes[0], 0..300).await;
    for seed in 0..4u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let node = &cluster.nodes[rng.gen_range(0..NODES)];
        let receiver = node.open_receiver(QUEUE, ReceiveMode::PeekLock).await.unwrap();
        let (mut granted, mut taken) = (0u32, 0u32);
        for _ in 0..20 {
            let n = rng.gen_range(0..8);
            receiver.add_credit(n);
            granted += n;
            pause(rng.gen_range(0..30)).await;
            let outstanding = receiver.outstanding();
            assert!(
                taken + outstanding <= granted,
                "seed {seed}: {taken} taken + {outstanding} outstanding > {granted} granted"
            );
            while rng.gen_bool(0.7) {
                let Some(m) = receiver.try_recv() else { break };
                taken += 1;
                let token = m.lock_token().unwrap();
                guard(node.settle(
                    QUEUE,
                    token,
                    ironbus_core::Disposition::Abandon { properties: Default::default() },
                ))
                .await
                .unwrap();
            }
        }
        let given_up = guard(receiver.drain()).await;
        let buffered = receiver.buffered() as u32;
        assert_eq!(taken + buffered + given_up, granted, "seed {seed}: credit accounted for");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_partitions_under_load_loses_and_duplicates_nothing() {
    let mut cluster = Cluster::start(Arc::new(MemoryStore::new()), queue()).await;
    let sender = cluster.nodes[2].clone();
    let load = tokio::spawn(async move {
        // Half the ids sent twice: a retried send after a hand-over must stay one message.
        send_all(&sender, (0..400).chain(0..200)).await
    });
    // Every partition moves once to the next node while the load runs, and node 0's moves
    // back again.
    let refs: Vec<PartitionRef> = cluster.owner.keys().copied().collect();
    for at in &refs {
        let to = (cluster.owner[at] + 1) % NODES;
        cluster.move_to(*at, to).await;
        pause(3).await;
    }
    for at in cluster.partitions_on(1).into_iter().take(3) {
        cluster.move_to(at, 0).await;
    }
    let sent = guard(load).await.unwrap();
    assert_eq!(sent.len(), 600);

    let receiver = cluster.nodes[0].open_receiver(QUEUE, ReceiveMode::PeekLock).await.unwrap();
    let got = receive_all(&cluster.nodes[0], &receiver, 400).await;
    let unique: BTreeSet<&String> = got.iter().collect();
    assert_eq!(unique.len(), 400, "every acknowledged message arrived");
    assert_eq!(got.len(), 400, "and none twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owners_write_is_refused() {
    let mut cluster = Cluster::start(Arc::new(MemoryStore::new()), queue()).await;
    let at = cluster.partitions_on(0)[0];
    // Node 1 takes the partition without node 0 letting go (node 0 was cut off): a greater
    // token moves the fence.
    cluster.token += 1;
    guard(cluster.nodes[1].acquire(at, cluster.token)).await.unwrap();
    assert!(cluster.nodes[0].runs_here(at), "the stale owner still believes it owns it");

    // Node 0 sends to that partition (a session id pins it): refused, retriably.
    let key = (0..)
        .map(|i| format!("key{i}"))
        .find(|k| ironbus_core::router::partition_for_key(k, PARTITIONS).0 == at.partition)
        .unwrap();
    let mut m = message(1);
    m.properties.partition_key = Some(key.clone());
    let refused = guard(cluster.nodes[0].send(QUEUE, vec![m])).await;
    assert!(
        matches!(refused, Err(BrokerError::PartitionUnavailable { .. })),
        "a stale owner's send: {refused:?}"
    );
    // Nothing of it reached the store: the new owner counts no message.
    let mut m = message(2);
    m.properties.partition_key = Some(key);
    let sent = guard(cluster.nodes[1].send(QUEUE, vec![m])).await.unwrap();
    assert!(matches!(sent[0], SendOutcome::Enqueued(_)));
    assert_eq!(counts(&cluster.nodes[1]).await, 1, "only the new owner's message");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_changes_through_one_node_reach_the_others() {
    let mut cluster = Cluster::start(Arc::new(MemoryStore::new()), queue()).await;
    // A topic through node 2; its subscription through node 1, which learns of the topic
    // first (a cluster node re-reads the namespace before each management operation).
    let topic = TopicDescription { enable_partitioning: true, ..Default::default() };
    guard(cluster.nodes[2].create_entity(&path("events"), EntityDescription::Topic(topic)))
        .await
        .expect("create the topic");
    let subscription = EntityDescription::Subscription(SubscriptionDescription::default());
    guard(cluster.nodes[1].create_entity(&path("events/Subscriptions/all"), subscription))
        .await
        .expect("create the subscription through another node");
    assert!(guard(cluster.nodes[0].refresh_namespace()).await.unwrap(), "node 0 saw a change");
    assert!(!guard(cluster.nodes[0].refresh_namespace()).await.unwrap(), "and nothing since");
    guard(cluster.nodes[2].refresh_namespace()).await.unwrap();
    cluster.deal_new_partitions().await;

    // Published through node 0, received from the subscription through node 2.
    for id in 0..40 {
        guard(cluster.nodes[0].send("events", vec![message(id)])).await.expect("publish");
    }
    let receiver = cluster.nodes[2]
        .open_receiver("events/Subscriptions/all", ReceiveMode::ReceiveAndDelete)
        .await
        .unwrap();
    receiver.add_credit(100);
    let mut got = BTreeSet::new();
    while got.len() < 40 {
        let m = guard(receiver.recv()).await.expect("a copy");
        got.insert(String::from_utf8(m.message.body.to_vec()).unwrap());
    }
    assert_eq!(got.len(), 40);

    // An update through node 0 reaches node 2; a delete through node 1 reaches node 0.
    let updated = QueueDescription { max_delivery_count: 3, ..queue() };
    guard(cluster.nodes[0].update_queue(QUEUE, updated)).await.expect("update");
    guard(cluster.nodes[2].refresh_namespace()).await.unwrap();
    let seen = guard(cluster.nodes[2].get_queue(QUEUE)).await.unwrap();
    assert_eq!(seen.description.max_delivery_count, 3);
    guard(cluster.nodes[1].delete_queue(QUEUE)).await.expect("delete");
    guard(cluster.nodes[0].refresh_namespace()).await.unwrap();
    assert!(matches!(
        guard(cluster.nodes[0].get_queue(QUEUE)).await,
        Err(BrokerError::EntityNotFound { .. })
    ));
    assert_eq!(
        cluster.nodes[0].partition_refs().len(),
        usize::from(PARTITIONS),
        "only the topic's partitions are left to share out"
    );
}

#[tokio::test]
async fn two_nodes_never_write_the_namespace_from_the_same_view() {
    // Two brokers that do not re-read the namespace before their operations (not cluster
    // nodes): the second write from a stale view is refused, retriably, and succeeds when
    // retried, the node having learnt the first.
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let a = guard(Broker::open_with(vec![store.clone()], clock.clone(), BrokerOptions::default()))
        .await
        .unwrap();
    let b = guard(Broker::open_with(vec![store], clock, BrokerOptions::default())).await.unwrap();
    guard(a.create_queue("first", QueueDescription::default())).await.unwrap();
    let stale = guard(b.create_queue("second", QueueDescription::default())).await;
    assert!(matches!(&stale, Err(e) if e.is_retriable()), "a write from a stale view: {stale:?}");
    guard(b.create_queue("second", QueueDescription::default())).await.expect("the retry");
    guard(b.get_queue("first")).await.expect("b learnt of the first queue");
    assert!(guard(a.get_queue("second")).await.is_err(), "a has not re-read yet");
    guard(a.refresh_namespace()).await.unwrap();
    let second = guard(a.get_queue("second")).await.expect("a learnt of the second queue");
    assert_eq!(second.name, "second");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_through_a_non_owner_commits_whole() {
    let cluster = Cluster::start(Arc::new(MemoryStore::new()), queue()).await;
    let node = &cluster.nodes[1];
    // A received message completed and two sent, in one transaction pinned by a partition
    // key to a partition node 1 does not run.
    let at = cluster.partitions_on(2)[0];
    let key = (0..)
        .map(|i| format!("key{i}"))
        .find(|k| ironbus_core::router::partition_for_key(k, PARTITIONS).0 == at.partition)
        .unwrap();
    let keyed = |id| {
        let mut m = message(id);
        m.properties.partition_key = Some(key.clone());
        m
    };
    guard(node.send(QUEUE, vec![keyed(1)])).await.unwrap();
    let receiver = node.open_receiver(QUEUE, ReceiveMode::PeekLock).await.unwrap();
    receiver.add_credit(1);
    let first = guard(receiver.recv()).await.unwrap();
    drop(receiver);
    let address = ironbus_core::EntityAddress::from(path(QUEUE));
    let txn = ironbus_core::Transaction::new();
    node.settle_in_transaction(
        &txn,
        &address,
        None,
        first.lock_token().unwrap(),
        ironbus_core::Disposition::Complete,
    )
    .unwrap();
    node.send_in_transaction(&txn, &address, None, vec![keyed(2), keyed(3)]).unwrap();
    let mut scheduled = keyed(4);
    scheduled.properties.scheduled_enqueue_time =
        Some(SystemClock.now().saturating_add(Duration::from_secs(3600)));
    guard(node.schedule_in_transaction(&txn, &address, vec![scheduled]))
        .await
        .expect("a reservation through the link");
    guard(node.commit(&txn)).await.expect("commit through the link");
    let runtime = guard(cluster.nodes[0].get_queue_runtime(QUEUE)).await.unwrap();
    assert_eq!(runtime.active_message_count, 2, "the first completed, two sent");
    assert_eq!(runtime.scheduled_message_count, 1);
}
