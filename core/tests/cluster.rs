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
//! - A session accepted through a node that does not run its partition is served, locked,
//!   renewed and released as on one node; its lock is lost (its messages not) when the
//!   partition moves or the lock expires on the owner.
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
    name: String,
}

#[async_trait]
impl Peer for InProcess {
    async fn call(&self, request: Bytes) -> Result<Bytes, PeerError> {
        if self.cut.load(Ordering::SeqCst) {
            return Err(PeerError { retriable: true, message: "link cut".into() });
        }
        Ok(self.broker.serve_link(&request).await)
    }

    fn node(&self) -> &str {
        &self.name
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
            .enumerate()
            .map(|(i, b)| {
                let (broker, cut, name) = (b.clone(), AtomicBool::new(false), format!("n{i}"));
                Arc::new(InProcess { broker, cut, name })
            })
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

// ---- sessions on partitions another node runs ----

fn session_queue() -> QueueDescription {
    QueueDescription { enable_partitioning: true, requires_session: true, ..Default::default() }
}

/// Session ids (after skipping `skip` of them) whose partition node `node` runs.
fn session_on(cluster: &Cluster, node: usize, skip: usize) -> (String, PartitionRef) {
    let on = cluster.partitions_on(node);
    (0..)
        .map(|i| format!("session{i}"))
        .filter_map(|s| {
            let p = ironbus_core::router::partition_for_key(&s, PARTITIONS).0;
            on.iter().find(|at| at.partition == p).map(|at| (s, *at))
        })
        .nth(skip)
        .unwrap()
}

/// Sends one message per id to `session` through `broker`, in order.
async fn send_session(broker: &Broker, session: &str, ids: impl IntoIterator<Item = usize>) {
    for id in ids {
        let m = message(id).with_session_id(session);
        guard(broker.send(QUEUE, vec![m])).await.expect("send to a session");
    }
}

fn body(m: &ironbus_core::ReceivedMessage) -> String {
    String::from_utf8(m.message.body.to_vec()).unwrap()
}

/// Accepts `session` through `broker`, retrying what fails retriably for a while (a route
/// that just moved).
async fn accept(broker: &Broker, session: &str) -> ironbus_core::SessionReceiver {
    for _ in 0..100 {
        match guard(broker.accept_session(QUEUE, session, ReceiveMode::PeekLock)).await {
            Ok(receiver) => return receiver,
            Err(e) if e.is_retriable() => pause(20).await,
            Err(e) => panic!("accept {session}: {e}"),
        }
    }
    panic!("{session} could not be accepted")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_accepted_through_a_non_owner_is_served_in_order() {
    let cluster = Cluster::start(Arc::new(MemoryStore::new()), session_queue()).await;
    let (session, at) = session_on(&cluster, 2, 0);
    let node = &cluster.nodes[0];
    send_session(&cluster.nodes[1], &session, 0..5).await;
    let receiver = accept(node, &session).await;
    assert_eq!(receiver.session_id(), session);
    assert_eq!(receiver.partition().0, at.partition, "held on the owner's partition");
    // Messages sent after the accept reach the holder too.
    send_session(&cluster.nodes[2], &session, 5..10).await;

    // Less credit than messages: the pull loop borrows it a little at a time.
    receiver.add_credit(3);
    let mut bodies = Vec::new();
    let mut last = None;
    while bodies.len() < 10 {
        let m = guard(receiver.recv()).await.expect("a message of the session");
        assert!(last < Some(m.sequence_number()), "in sequence order");
        last = Some(m.sequence_number());
        assert!(receiver.outstanding() <= 3, "never more than the credit given");
        bodies.push(body(&m));
        if bodies.len() == 4 {
            // One deferred, then received by its sequence number through the holder.
            let deferred = m.sequence_number();
            let defer = ironbus_core::Disposition::Defer { properties: Default::default() };
            guard(node.settle(QUEUE, m.lock_token().unwrap(), defer)).await.expect("defer");
            let again = guard(receiver.receive_deferred(&[deferred], ReceiveMode::PeekLock))
                .await
                .expect("a deferred receive through the holder");
            assert_eq!(again.len(), 1);
            assert_eq!(again[0].sequence_number(), deferred);
            guard(node.complete(QUEUE, again[0].lock_token().unwrap())).await.unwrap();
        } else {
            guard(node.complete(QUEUE, m.lock_token().unwrap())).await.expect("complete");
        }
        receiver.add_credit(1);
    }
    let expected: Vec<String> = (0..10).map(|id| format!("body {id}")).collect();
    assert_eq!(bodies, expected);
    assert_eq!(counts(&cluster.nodes[1]).await, 0, "every completion reached the owner");

    // Session state through the holder, seen by a plain read through another node.
    guard(receiver.set_state(Some(Bytes::from("step 10")))).await.expect("set state");
    assert_eq!(guard(receiver.state()).await.unwrap(), Some(Bytes::from("step 10")));
    let seen = guard(cluster.nodes[1].session_state(QUEUE, &session)).await.unwrap();
    assert_eq!(seen, Some(Bytes::from("step 10")));
    let listed =
        guard(cluster.nodes[1].list_sessions(QUEUE, None, None, 0, 100)).await.expect("list");
    assert_eq!(listed, vec![session.clone()], "listed through another node by its state");
    send_session(&cluster.nodes[1], &session, 10..11).await;
    let peeked =
        guard(cluster.nodes[1].peek_session(QUEUE, &session, SequenceNumber(0), 10)).await.unwrap();
    assert_eq!(peeked.iter().map(body).collect::<Vec<_>>(), vec!["body 10".to_string()]);

    // The session lock is renewed on the owner.
    let before = receiver.locked_until();
    pause(20).await;
    let renewed = guard(receiver.renew_lock()).await.expect("renew");
    assert!(renewed > before, "{renewed:?} after {before:?}");
    assert_eq!(receiver.locked_until(), renewed);
    assert!(!receiver.is_lock_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_next_through_a_non_owner_finds_sessions_on_other_nodes() {
    let cluster = Cluster::start(Arc::new(MemoryStore::new()), session_queue()).await;
    let (first, _) = session_on(&cluster, 1, 0);
    let (second, _) = session_on(&cluster, 2, 0);
    send_session(&cluster.nodes[1], &first, [1]).await;
    send_session(&cluster.nodes[2], &second, [2]).await;

    // Node 0 runs neither partition: it learns of the ready sessions through `poll_stats`.
    let node = &cluster.nodes[0];
    let mut accepted = BTreeSet::new();
    let mut held = Vec::new();
    for _ in 0..2 {
        let receiver =
            guard(node.accept_next_session(QUEUE, ReceiveMode::PeekLock, Duration::from_secs(5)))
                .await
                .expect("a ready session on another node");
        receiver.add_credit(1);
        let m = guard(receiver.recv()).await.expect("its message");
        assert_eq!(m.message.properties.session_id.as_deref(), Some(receiver.session_id()));
        accepted.insert(receiver.session_id().to_owned());
        held.push(receiver);
    }
    assert_eq!(accepted, BTreeSet::from([first, second]));
    let none =
        node.accept_next_session(QUEUE, ReceiveMode::PeekLock, Duration::from_millis(300)).await;
    assert!(matches!(none, Err(ironbus_core::SessionError::Timeout(_))), "{none:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_held_through_one_node_is_refused_through_another_until_released() {
    let cluster = Cluster::start(Arc::new(MemoryStore::new()), session_queue()).await;
    let (session, _) = session_on(&cluster, 2, 0);
    send_session(&cluster.nodes[2], &session, 0..2).await;
    let first = accept(&cluster.nodes[0], &session).await;
    first.add_credit(1);
    let m = guard(first.recv()).await.unwrap();
    assert_eq!(body(&m), "body 0");

    let refused = guard(cluster.nodes[1].accept_session(QUEUE, &session, ReceiveMode::PeekLock))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, ironbus_core::SessionError::CannotBeLocked { session: s } if *s == session),
        "{refused:?}"
    );
    let owner = guard(cluster.nodes[2].accept_session(QUEUE, &session, ReceiveMode::PeekLock))
        .await
        .unwrap_err();
    assert!(matches!(owner, ironbus_core::SessionError::CannotBeLocked { .. }), "{owner:?}");

    // Dropping the holder releases the session on its owner (the detach travels the link),
    // and its uncompleted message with it.
    drop(first);
    let mut second = None;
    for _ in 0..100 {
        match guard(cluster.nodes[1].accept_session(QUEUE, &session, ReceiveMode::PeekLock)).await {
            Ok(receiver) => {
                second = Some(receiver);
                break;
            }
            Err(ironbus_core::SessionError::CannotBeLocked { .. }) => pause(10).await,
            Err(e) => panic!("{e}"),
        }
    }
    let second = second.expect("accepted through another node once released");
    second.add_credit(2);
    let again = guard(second.recv()).await.unwrap();
    assert_eq!(body(&again), "body 0", "the released message comes again, first");
    assert_eq!(body(&guard(second.recv()).await.unwrap()), "body 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_a_sessions_partition_loses_its_remote_holder_and_no_message() {
    let mut cluster = Cluster::start(Arc::new(MemoryStore::new()), session_queue()).await;
    let (session, at) = session_on(&cluster, 2, 0);
    send_session(&cluster.nodes[1], &session, 0..6).await;
    let node = cluster.nodes[0].clone();
    let receiver = accept(&node, &session).await;
    receiver.add_credit(3);
    let mut held = Vec::new();
    for expected in 0..3 {
        let m = guard(receiver.recv()).await.unwrap();
        assert_eq!(body(&m), format!("body {expected}"));
        held.push(m);
    }
    guard(node.complete(QUEUE, held[0].lock_token().unwrap())).await.expect("complete");

    // The partition moves to node 1: the session lock stayed with node 2.
    cluster.move_to(at, 1).await;
    assert!(receiver.is_lock_lost(), "the remote holder lost its session");
    assert!(guard(receiver.recv()).await.is_none(), "and receives no more");
    let stale = guard(node.complete(QUEUE, held[1].lock_token().unwrap())).await;
    assert!(stale.is_err(), "a lost session's message lock is gone: {stale:?}");
    drop(receiver);

    // A new accept gets every message not completed, in order: nothing lost.
    let again = accept(&node, &session).await;
    again.add_credit(10);
    let mut bodies = Vec::new();
    while bodies.len() < 5 {
        let m = guard(again.recv()).await.unwrap();
        bodies.push(body(&m));
        guard(node.complete(QUEUE, m.lock_token().unwrap())).await.expect("complete");
    }
    let expected: Vec<String> = (1..6).map(|id| format!("body {id}")).collect();
    assert_eq!(bodies, expected);
    assert_eq!(counts(&cluster.nodes[2]).await, 0);

    // Moving it to the holder's own node loses the remote holder as well.
    cluster.move_to(at, 0).await;
    assert!(again.is_lock_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_lock_expiring_on_the_owner_is_lost_through_the_link() {
    // The shortest lock Service Bus allows.
    let lock = Duration::from_secs(5);
    let description = QueueDescription { lock_duration: lock, ..session_queue() };
    let cluster = Cluster::start(Arc::new(MemoryStore::new()), description).await;
    let (session, _) = session_on(&cluster, 1, 0);
    send_session(&cluster.nodes[1], &session, [0]).await;
    let receiver = accept(&cluster.nodes[0], &session).await;
    // No credit: the pull loop only probes, and learns of the expiry all the same.
    assert!(!receiver.is_lock_lost());
    let lost_within = lock + ironbus_core::remote::SESSION_PROBE * 3;
    let deadline = SystemClock.now().saturating_add(lost_within);
    while !receiver.is_lock_lost() && SystemClock.now() < deadline {
        pause(50).await;
    }
    assert!(receiver.is_lock_lost(), "the lock expired on the owner");
    let renewed = guard(receiver.renew_lock()).await;
    assert!(matches!(renewed, Err(ironbus_core::SessionError::LockLost)), "{renewed:?}");
    let next = accept(&cluster.nodes[2], &session).await;
    next.add_credit(1);
    assert_eq!(body(&guard(next.recv()).await.unwrap()), "body 0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_forwarding_across_nodes_moves_each_message_once() {
    let mut cluster = Cluster::start(Arc::new(MemoryStore::new()), queue()).await;
    let partitioned = QueueDescription { enable_partitioning: true, ..Default::default() };
    guard(cluster.nodes[1].create_queue("dest", partitioned.clone())).await.unwrap();
    let source = QueueDescription { forward_to: Some("dest".into()), ..partitioned };
    guard(cluster.nodes[1].create_queue("source", source)).await.unwrap();
    for node in &cluster.nodes {
        guard(node.refresh_namespace()).await.unwrap();
    }
    cluster.deal_new_partitions().await;

    // Sent through node 0 to partitions all over; every node forwards what it runs.
    for id in 0..60 {
        guard(cluster.nodes[0].send("source", vec![message(id)])).await.expect("send");
    }
    let receiver =
        cluster.nodes[2].open_receiver("dest", ReceiveMode::ReceiveAndDelete).await.unwrap();
    receiver.add_credit(100);
    let mut got = Vec::new();
    while got.len() < 60 {
        let m = guard(receiver.recv()).await.expect("a forwarded message");
        got.push(String::from_utf8(m.message.body.to_vec()).unwrap());
    }
    let unique: BTreeSet<&String> = got.iter().collect();
    assert_eq!(unique.len(), 60, "each forwarded once");
    // Nothing more comes: no node forwarded a message twice.
    pause(300).await;
    assert!(receiver.try_recv().is_none(), "a second copy arrived");
    let left = guard(cluster.nodes[1].get_queue_runtime("source")).await.unwrap();
    assert_eq!(left.transfer_message_count, 0, "the transfer queues are empty");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_without_a_key_go_round_the_partitions_of_an_unreachable_node() {
    let mut cluster = Cluster::start(Arc::new(MemoryStore::new()), queue()).await;
    let partitioned = QueueDescription { enable_partitioning: true, ..Default::default() };
    guard(cluster.nodes[0].create_queue("rr", partitioned)).await.unwrap();
    for node in &cluster.nodes {
        guard(node.refresh_namespace()).await.unwrap();
    }
    cluster.deal_new_partitions().await;
    // Node 2 becomes unreachable from the others: the next poll marks its partitions
    // unavailable there, and sends without a partition key go to the rest.
    cluster.peers[2].cut.store(true, Ordering::SeqCst);
    pause(300).await;
    let placement = cluster.nodes[0].placement();
    let away: Vec<_> = placement
        .iter()
        .filter(|p| p.entity == "rr" && p.owner == ironbus_core::broker::Owner::Node("n2".into()))
        .collect();
    assert!(!away.is_empty() && away.iter().all(|p| !p.available), "{away:?}");
    for i in 0..40 {
        let sent = guard(cluster.nodes[0].send("rr", vec![Message::new(format!("{i}"))])).await;
        assert!(sent.is_ok(), "send {i} while node 2 is unreachable: {sent:?}");
    }
    cluster.peers[2].cut.store(false, Ordering::SeqCst);
    pause(300).await;
    assert!(cluster.nodes[0].placement().iter().all(|p| p.available), "reachable again");
}
