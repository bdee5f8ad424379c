//! A cluster of members and fake hosts, and the invariants checked after every round.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use ironbus_core::fence::Fence;
use ironbus_core::store::StoreErrorKind;
use ironbus_core::testing::FaultyStore;
use ironbus_core::{Clock, ManualClock, PartitionId, Store, Timestamp};
use ironbus_store_memory::MemoryStore;

use crate::rows::OwnerRow;
use crate::{desired_owner, Config, Host, HostError, Member, NodeId, PartitionRef, Route};

/// Something a fake host was asked to do, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Call {
    Acquire { p: PartitionRef, token: u64, ok: bool },
    Release { p: PartitionRef },
}

/// A broker stand-in: serves what it acquired (after moving the core's fence, as the broker
/// does) until released, and records every call.
#[derive(Debug)]
pub(crate) struct FakeHost {
    store: Arc<dyn Store>,
    clock: ManualClock,
    partitions: Arc<Mutex<BTreeSet<PartitionRef>>>,
    state: Mutex<HostState>,
    /// Every acquire of every host of the cluster, in order: (partition, token).
    claims: Arc<Mutex<Vec<(PartitionRef, u64)>>>,
}

#[derive(Debug, Default)]
pub(crate) struct HostState {
    pub(crate) served: BTreeMap<PartitionRef, u64>,
    pub(crate) routes: BTreeMap<PartitionRef, Route>,
    pub(crate) calls: Vec<(Timestamp, Call)>,
}

impl FakeHost {
    /// A host of a single-node test, claiming fences in `store`.
    pub(crate) fn alone(
        store: Arc<dyn Store>,
        clock: ManualClock,
        partitions: Vec<PartitionRef>,
    ) -> FakeHost {
        FakeHost {
            store,
            clock,
            partitions: Arc::new(Mutex::new(partitions.into_iter().collect())),
            state: Mutex::default(),
            claims: Arc::default(),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, HostState> {
        self.state.lock().unwrap()
    }
}

#[async_trait]
impl Host for FakeHost {
    fn partitions(&self) -> Vec<PartitionRef> {
        self.partitions.lock().unwrap().iter().copied().collect()
    }

    async fn acquire(&self, p: PartitionRef, token: u64) -> Result<(), HostError> {
        let result = Fence::new(p.entity, p.partition).claim(&*self.store, token).await;
        let mut state = self.state();
        state.calls.push((self.clock.now(), Call::Acquire { p, token, ok: result.is_ok() }));
        self.claims.lock().unwrap().push((p, token));
        match result {
            Ok(()) => {
                state.served.insert(p, token);
                Ok(())
            }
            Err(e) if e.kind == StoreErrorKind::Conflict => Err(HostError::Fenced),
            Err(e) => Err(HostError::Unavailable(e.to_string())),
        }
    }

    async fn release(&self, p: PartitionRef) {
        let mut state = self.state();
        state.calls.push((self.clock.now(), Call::Release { p }));
        state.served.remove(&p);
    }

    fn route(&self, p: PartitionRef, route: Route) {
        self.state().routes.insert(p, route);
    }
}

/// One node: its member (`None` once it left), its host and its view of the store.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) id: NodeId,
    pub(crate) member: Option<Member>,
    pub(crate) host: Arc<FakeHost>,
    pub(crate) store: Arc<FaultyStore>,
    /// Killed: no longer driven (its host goes on serving what it served, as a zombie would).
    pub(crate) killed: bool,
}

impl Node {
    /// Driven: neither killed nor gone.
    pub(crate) fn driven(&self) -> bool {
        !self.killed && self.member.is_some()
    }

    pub(crate) fn served(&self) -> BTreeMap<PartitionRef, u64> {
        self.host.state().served.clone()
    }
}

/// Nodes over one memory store and one manual clock.
#[derive(Debug)]
pub(crate) struct Cluster {
    pub(crate) clock: ManualClock,
    pub(crate) store: Arc<MemoryStore>,
    pub(crate) partitions: Arc<Mutex<BTreeSet<PartitionRef>>>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) claims: Arc<Mutex<Vec<(PartitionRef, u64)>>>,
}

/// Partitions `0..per` of entities `first..first + entities`.
pub(crate) fn partitions(first: u64, entities: u64, per: u16) -> Vec<PartitionRef> {
    (first..first + entities)
        .flat_map(|e| (0..per).map(move |i| PartitionRef::new(e, PartitionId(i))))
        .collect()
}

pub(crate) const RENEW: Duration = Duration::from_secs(1);
pub(crate) const LEASE: Duration = Duration::from_secs(5);

impl Cluster {
    /// `nodes` nodes (`n0`, `n1`, …) that have not run a round yet.
    pub(crate) fn new(nodes: usize, partitions: Vec<PartitionRef>) -> Cluster {
        let mut cluster = Cluster {
            clock: ManualClock::default(),
            store: Arc::new(MemoryStore::new()),
            partitions: Arc::new(Mutex::new(partitions.into_iter().collect())),
            nodes: Vec::new(),
            claims: Arc::default(),
        };
        for _ in 0..nodes {
            cluster.join();
        }
        cluster
    }

    /// A new node, `n<index>`; returns its index.
    pub(crate) fn join(&mut self) -> usize {
        let index = self.nodes.len();
        self.join_as(NodeId::new(format!("n{index}")))
    }

    /// A new node with id `id` (a restart when a node of that id ran before).
    pub(crate) fn join_as(&mut self, id: NodeId) -> usize {
        let inner: Arc<dyn Store> = self.store.clone();
        let store = Arc::new(FaultyStore::new(inner));
        let host = Arc::new(FakeHost {
            store: store.clone(),
            clock: self.clock.clone(),
            partitions: self.partitions.clone(),
            state: Mutex::default(),
            claims: self.claims.clone(),
        });
        let config = Config::new(id.clone(), format!("{id}.link:5700"));
        let clock: Arc<dyn Clock> = Arc::new(self.clock.clone());
        let member = Member::new(config, store.clone(), clock, host.clone()).unwrap();
        self.nodes.push(Node { id, member: Some(member), host, store, killed: false });
        self.nodes.len() - 1
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// One round of node `i`, then the safety checks.
    pub(crate) async fn round_of(&mut self, i: usize) {
        if self.nodes[i].driven() {
            self.nodes[i].member.as_mut().unwrap().round().await;
        }
        self.check_safety().await;
    }

    /// A round of every driven node, in index order.
    pub(crate) async fn round(&mut self) {
        for i in 0..self.nodes.len() {
            self.round_of(i).await;
        }
    }

    /// The clock moves one renew interval, then every driven node runs a round.
    pub(crate) async fn step(&mut self) {
        self.clock.advance(RENEW);
        self.round().await;
    }

    /// Steps until every partition is served by exactly one driven node (at most `steps`).
    pub(crate) async fn settle(&mut self, steps: usize) -> bool {
        for _ in 0..steps {
            if self.converged().await {
                return true;
            }
            self.step().await;
        }
        self.converged().await
    }

    pub(crate) fn kill(&mut self, i: usize) {
        self.nodes[i].killed = true;
    }

    /// Node `i` leaves; what failed (its store may be failing) is returned.
    pub(crate) async fn leave(&mut self, i: usize) -> Result<(), ironbus_core::StoreError> {
        let member = self.nodes[i].member.take().unwrap();
        let left = member.leave().await;
        self.check_safety().await;
        left
    }

    /// The driven node serving each partition, with its token (the last one found when several
    /// do, which [`Cluster::converged`] rules out).
    pub(crate) fn owners(&self) -> BTreeMap<PartitionRef, (usize, u64)> {
        let mut owners = BTreeMap::new();
        for (i, node) in self.nodes.iter().enumerate().filter(|(_, n)| n.driven()) {
            for (p, token) in node.served() {
                owners.insert(p, (i, token));
            }
        }
        owners
    }

    /// How many partitions each node serves.
    pub(crate) fn counts(&self) -> Vec<usize> {
        self.nodes.iter().map(|n| if n.driven() { n.served().len() } else { 0 }).collect()
    }

    /// Every partition served by exactly one driven node, its desired owner among the active
    /// ones, with the token its fence holds, and every active node's routes saying so.
    pub(crate) async fn converged(&self) -> bool {
        let partitions = self.partitions.lock().unwrap().clone();
        let active: Vec<usize> = (0..self.nodes.len())
            .filter(|i| self.nodes[*i].member.as_ref().is_some_and(|m| m.is_active()))
            .filter(|i| !self.nodes[*i].killed)
            .collect();
        let ids: Vec<NodeId> = active.iter().map(|i| self.nodes[*i].id.clone()).collect();
        let mut owner = BTreeMap::new();
        for (i, node) in self.nodes.iter().enumerate().filter(|(_, n)| n.driven()) {
            for (p, token) in node.served() {
                if owner.insert(p, (i, token)).is_some() || !partitions.contains(&p) {
                    return false;
                }
            }
        }
        for p in &partitions {
            let Some(&(i, token)) = owner.get(p) else { return false };
            if self.fence(*p).await != Some(token)
                || desired_owner(*p, &ids) != Some(&self.nodes[i].id)
            {
                return false;
            }
            for (j, node) in active.iter().map(|j| (*j, &self.nodes[*j])) {
                let expected = match i == j {
                    true => Route::Local,
                    false => Route::Remote {
                        node_id: self.nodes[i].id.clone(),
                        link_addr: format!("{}.link:5700", self.nodes[i].id),
                    },
                };
                if node.host.state().routes.get(p) != Some(&expected) {
                    return false;
                }
            }
        }
        true
    }

    pub(crate) async fn fence(&self, p: PartitionRef) -> Option<u64> {
        Fence::new(p.entity, p.partition).token(&*self.store).await.unwrap()
    }

    /// What must hold after every round, whatever was killed, cut off or paused:
    /// - no two hosts serve a partition with the same token, and none with a token beyond
    ///   the fence's (so at most one host serves with the highest token);
    /// - each member believes it serves exactly what its host serves;
    /// - a partition's claims were acquired with tokens that only grow.
    pub(crate) async fn check_safety(&self) {
        let mut servers: BTreeMap<PartitionRef, Vec<(NodeId, u64)>> = BTreeMap::new();
        for node in &self.nodes {
            let served = node.served();
            if let Some(member) = &node.member {
                assert_eq!(member.serving(), &served, "{} believes otherwise", node.id);
            }
            for (p, token) in served {
                servers.entry(p).or_default().push((node.id.clone(), token));
            }
        }
        for (p, servers) in &servers {
            let tokens: BTreeSet<u64> = servers.iter().map(|(_, t)| *t).collect();
            assert_eq!(tokens.len(), servers.len(), "{p} served twice with one token: {servers:?}");
            let fence = self.fence(*p).await.expect("served without a fence");
            assert!(
                tokens.iter().all(|t| *t <= fence),
                "{p}: {servers:?} beyond the fence {fence}"
            );
        }
        // One token per claim: no two owner rows share one, and the counter is past them all.
        let rows = self.store.scan(b"co", b"cp", usize::MAX).await.unwrap();
        let tokens: Vec<u64> =
            rows.iter().map(|(_, v)| OwnerRow::decode(v).unwrap().token).collect();
        let distinct: BTreeSet<u64> = tokens.iter().copied().collect();
        assert_eq!(distinct.len(), tokens.len(), "owner rows share a token: {tokens:?}");
        let counter = self.store.get(b"ct").await.unwrap();
        let counter = counter.map_or(0, |v| u64::from_be_bytes(v[..].try_into().unwrap()));
        assert!(distinct.last().is_none_or(|t| *t <= counter), "the counter went back");
        let mut last: BTreeMap<PartitionRef, u64> = BTreeMap::new();
        for (p, token) in self.claims.lock().unwrap().iter() {
            let before = last.insert(*p, *token);
            assert!(before < Some(*token), "{p}: token {token} after {before:?}");
        }
    }

    /// The calls node `i`'s host received.
    pub(crate) fn calls(&self, i: usize) -> Vec<(Timestamp, Call)> {
        self.nodes[i].host.state().calls.clone()
    }
}
