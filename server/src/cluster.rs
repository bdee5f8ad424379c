//! A cluster node (`--cluster`): this node's part of partition ownership (`ironbus-cluster`)
//! and of the internal link (`ironbus-link`) around the broker (`CLUSTER.md`).
//!
//! [`ClusterNode`] is served like a transport: it binds the link at start-up, and while the
//! server runs it takes part in ownership rounds (the broker acquires, releases and routes
//! partitions as the rounds decide), re-reads the namespace every second (entities created
//! through other nodes) and polls the other nodes' partition views five times a second. On
//! shutdown it hands every partition it runs over before the broker stops.
//!
//! **Architecture Invariant:** route changes reach the broker in the order ownership made
//! them, and every one made before an acquire or a release is applied before it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use ironbus_cluster::{Config, Host, HostError, NodeId, Ownership, PartitionRef, Poke, Route};
use ironbus_core::remote::{Peer, PeerError};
use ironbus_core::transport::TransportError;
use ironbus_core::types::PartitionId;
use ironbus_core::{Broker, BrokerError, Shutdown, Store, StoreErrorKind, SystemClock, Transport};
use ironbus_link::{CallError, Handler, LinkClient, LinkConfig, LinkServer, PeerId, Secret};
use tokio::sync::{mpsc, oneshot};

use crate::ServerError;

/// The method every partition call of the link uses.
const PARTITION_CALL: &str = "partition";
/// The method by which a node that changed the namespace has the others re-read it.
const NAMESPACE_CALL: &str = "namespace";
/// How long a management operation waits for the other nodes to re-read the namespace.
const NAMESPACE_NOTICE_WAIT: Duration = Duration::from_secs(2);
/// How often a node re-reads the namespace for other nodes' changes.
const REFRESH_EVERY: Duration = Duration::from_secs(1);
/// How often a node asks the others for their partitions' shared views.
const STATS_EVERY: Duration = Duration::from_millis(200);
/// How long a node waits for another's report before counting it as not answering.
const STATS_WAIT: Duration = Duration::from_secs(1);
/// The secret of a cluster whose every link address is loopback, when none is given.
const LOOPBACK_SECRET: &str = "ironbus-loopback-cluster-secret";

/// The cluster's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArgs {
    /// Run as a node of a cluster on a shared PostgreSQL (`--store postgres`): partitions are
    /// shared out among the nodes, and every node serves every client.
    #[arg(long, env = "IRONBUS_CLUSTER")]
    pub cluster: bool,
    /// This node's id, unique in the cluster (letters, digits, `.`, `_`, `-`; at most 64).
    #[arg(long, env = "IRONBUS_NODE_ID")]
    pub node_id: Option<String>,
    /// Where the internal link listens for the other nodes.
    #[arg(long, env = "IRONBUS_LINK_ADDR", default_value = "127.0.0.1:5680")]
    pub link_addr: SocketAddr,
    /// Where the other nodes reach this one (host:port); default: --link-addr.
    #[arg(long, env = "IRONBUS_ADVERTISE_ADDR")]
    pub advertise_addr: Option<String>,
    /// The secret every node of the cluster shares (at least 16 bytes); calls not signed with
    /// it are refused. Required unless every link address is loopback.
    #[arg(long, env = "IRONBUS_CLUSTER_SECRET", hide_env_values = true)]
    pub cluster_secret: Option<String>,
    /// How long the others wait for a silent node before taking its partitions (milliseconds).
    #[arg(long, env = "IRONBUS_LEASE_MS", default_value_t = 5000)]
    pub lease_ms: u64,
}

impl ClusterArgs {
    /// The address the other nodes dial, the link being bound at `bound`.
    fn advertised(&self, bound: SocketAddr) -> String {
        self.advertise_addr.clone().unwrap_or_else(|| bound.to_string())
    }

    /// The ownership configuration: renewals at a fifth of the lease, demotion at 3/5.
    fn ownership(&self, node_id: &str, advertised: String) -> Result<Config, ServerError> {
        let lease = Duration::from_millis(self.lease_ms.max(500));
        let mut config = Config::new(NodeId::new(node_id), advertised);
        config.lease = lease;
        config.renew_interval = lease / 5;
        config.demote_after = lease * 3 / 5;
        config.settle = lease / 5;
        config.check().map_err(|e| ServerError::Cluster(format!("--lease-ms: {e}")))?;
        Ok(config)
    }

    /// The link's configuration: the secret given, or on loopback only a fixed one.
    fn link(&self, node_id: &str) -> Result<LinkConfig, ServerError> {
        let peer = PeerId::new(node_id)
            .map_err(|e| ServerError::Cluster(format!("--node-id {node_id:?}: {e}")))?;
        let secret = match &self.cluster_secret {
            Some(secret) => secret.clone(),
            None => {
                let advertised = self.advertised(self.link_addr).parse::<SocketAddr>().ok();
                let addrs: Vec<SocketAddr> =
                    std::iter::once(self.link_addr).chain(advertised).collect();
                if advertised.is_none() || !ironbus_link::loopback_only(&addrs) {
                    return Err(ServerError::Cluster(
                        "a cluster node needs --cluster-secret (or IRONBUS_CLUSTER_SECRET) unless \
                         its link and advertised addresses are loopback"
                            .into(),
                    ));
                }
                tracing::warn!("no --cluster-secret: using the loopback-only development secret");
                LOOPBACK_SECRET.to_owned()
            }
        };
        let secret = Secret::new(secret.into_bytes())
            .map_err(|e| ServerError::Cluster(format!("--cluster-secret: {e}")))?;
        Ok(LinkConfig::new(peer, secret))
    }
}

/// A cluster node around `broker`, its link bound: serve it with the server's transports.
pub struct ClusterNode {
    link: LinkServer,
    config: Config,
    store: Arc<dyn Store>,
    host: Arc<BrokerHost>,
}

impl std::fmt::Debug for ClusterNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterNode")
            .field("node", &self.config.node_id)
            .field("link", &self.link.local_addr())
            .finish()
    }
}

impl ClusterNode {
    /// Binds the link of a node of the cluster `args` describe, whose namespace store is
    /// `store` (the first of the broker's stores).
    pub async fn bind(
        args: &ClusterArgs,
        broker: Broker,
        store: Arc<dyn Store>,
    ) -> Result<ClusterNode, ServerError> {
        let node_id = args.node_id.as_deref().ok_or_else(|| {
            ServerError::Cluster("--cluster needs --node-id (or IRONBUS_NODE_ID)".into())
        })?;
        let link_config = args.link(node_id)?;
        let host = BrokerHost::start(broker.clone(), link_config.clone());
        let handler = Arc::new(ServeLink(broker.clone(), Arc::downgrade(&host)));
        let link = LinkServer::bind(args.link_addr, link_config.clone(), handler).await.map_err(
            |source| ServerError::Bind { listener: "cluster link", addr: args.link_addr, source },
        )?;
        let config = args.ownership(node_id, args.advertised(link.local_addr()))?;
        broker.set_namespace_listener(Arc::new(TellPeers(Arc::downgrade(&host))));
        tracing::info!(node = node_id, link = %link.local_addr(), advertised = %config.link_addr, "cluster node");
        Ok(ClusterNode { link, config, store, host })
    }

    /// Where the link listens.
    pub fn link_addr(&self) -> SocketAddr {
        self.link.local_addr()
    }
}

#[async_trait]
impl Transport for ClusterNode {
    fn name(&self) -> &'static str {
        "cluster"
    }

    async fn serve(
        self: Box<Self>,
        broker: Broker,
        mut shutdown: Shutdown,
    ) -> Result<(), TransportError> {
        let ClusterNode { link, config, store, host } = *self;
        let clock = Arc::new(SystemClock);
        let ownership = Ownership::start(config, store, clock, host.clone())
            .map_err(|e| TransportError::from(format!("cluster: {e}")))?;
        let _ = host.poke.set(ownership.poke());
        let background = tokio::spawn(keep_current(broker, host));
        shutdown.wait().await;
        background.abort();
        // Hand every partition over before the broker stops.
        if let Err(e) = ownership.leave().await {
            tracing::warn!(error = %e, "leaving the cluster");
        }
        link.shutdown().await;
        Ok(())
    }
}

/// Re-reads the namespace and the other nodes' partition views, for ever.
async fn keep_current(broker: Broker, host: Arc<BrokerHost>) {
    let mut refresh = tokio::time::interval(REFRESH_EVERY);
    let mut stats = tokio::time::interval(STATS_EVERY);
    loop {
        tokio::select! {
            _ = refresh.tick() => {
                if let Err(e) = broker.refresh_namespace().await {
                    tracing::warn!(error = %e, "re-reading the namespace");
                }
            }
            _ = stats.tick() => {
                // Every node at once, each bounded: one that does not answer must not hold up
                // what the others report.
                let mut polls = tokio::task::JoinSet::new();
                for peer in host.peers() {
                    let broker = broker.clone();
                    polls.spawn(async move {
                        let node = peer.node().to_owned();
                        match tokio::time::timeout(STATS_WAIT, broker.poll_stats(peer)).await {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => tracing::debug!(node, error = %e, "polling a node's partitions"),
                            Err(_) => {
                                tracing::debug!(node, "polling a node's partitions: no answer");
                                broker.mark_unreachable(&node);
                            }
                        }
                    });
                }
                while polls.join_next().await.is_some() {}
            }
        }
    }
}

/// Serves other nodes' calls: partition calls, and namespace notices.
struct ServeLink(Broker, std::sync::Weak<BrokerHost>);

#[async_trait]
impl Handler for ServeLink {
    async fn call(&self, _from: &PeerId, method: &str, body: Bytes) -> Result<Bytes, CallError> {
        match method {
            PARTITION_CALL => Ok(self.0.serve_link(&body).await),
            NAMESPACE_CALL => {
                let refreshed = self.0.refresh_namespace_if_idle().await;
                // New entities' partitions are claimed in the next round: run it now.
                if let Some(host) = self.1.upgrade() {
                    host.poke_ownership();
                }
                match refreshed {
                    Ok(_) => Ok(Bytes::new()),
                    Err(e) => Err(CallError::new("namespace", e.to_string())),
                }
            }
            other => Err(CallError::new("unknown-method", format!("no link method {other:?}"))),
        }
    }
}

/// Another node, reached over the link: its id and client.
#[derive(Debug)]
struct LinkPeer(String, LinkClient);

#[async_trait]
impl Peer for LinkPeer {
    async fn call(&self, request: Bytes) -> Result<Bytes, PeerError> {
        self.1
            .call(PARTITION_CALL, request)
            .await
            .map_err(|e| PeerError { retriable: e.is_retriable(), message: e.to_string() })
    }

    fn node(&self) -> &str {
        &self.0
    }
}

/// Has the other nodes re-read the namespace after this node changed it, waiting for them a
/// little (a node that does not answer in time learns it within a second anyway).
struct TellPeers(std::sync::Weak<BrokerHost>);

#[async_trait]
impl ironbus_core::broker::NamespaceListener for TellPeers {
    async fn changed(&self, version: u64) {
        let Some(host) = self.0.upgrade() else { return };
        let mut told = tokio::task::JoinSet::new();
        for (_, peer) in host.peer_list() {
            told.spawn(async move {
                let call = peer.1.call(NAMESPACE_CALL, Bytes::new());
                match tokio::time::timeout(NAMESPACE_NOTICE_WAIT, call).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(node = %peer.0, version, error = %e, "namespace notice")
                    }
                    Err(_) => {
                        tracing::debug!(node = %peer.0, version, "namespace notice timed out")
                    }
                }
            });
        }
        while told.join_next().await.is_some() {}
        // This node's own round too, once the operation has started what it created (the
        // write this tells of is durable; the broker applies it right after).
        let host = Arc::downgrade(&host);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            if let Some(host) = host.upgrade() {
                host.poke_ownership();
            }
        });
    }
}

/// A route change, or a marker whose answer says every change before it is applied.
enum RouteChange {
    To(PartitionRef, Route),
    Flush(oneshot::Sender<()>),
}

/// The broker as the cluster's ownership sees it.
struct BrokerHost {
    broker: Broker,
    link: LinkConfig,
    /// The other nodes by id: their link address and client.
    peers: Mutex<HashMap<String, (String, Arc<LinkPeer>)>>,
    routes: mpsc::UnboundedSender<RouteChange>,
    /// Runs the next ownership round at once, once ownership runs.
    poke: std::sync::OnceLock<Poke>,
}

impl std::fmt::Debug for BrokerHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerHost").field("broker", &self.broker).finish_non_exhaustive()
    }
}

impl BrokerHost {
    fn start(broker: Broker, link: LinkConfig) -> Arc<BrokerHost> {
        let (routes, changes) = mpsc::unbounded_channel();
        let peers = Mutex::new(HashMap::new());
        let poke = std::sync::OnceLock::new();
        let host = Arc::new(BrokerHost { broker, link, peers, routes, poke });
        tokio::spawn(apply_routes(Arc::downgrade(&host), changes));
        host
    }

    fn peers(&self) -> Vec<Arc<dyn Peer>> {
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers.values().map(|(_, peer)| peer.clone() as Arc<dyn Peer>).collect()
    }

    /// The client of node `node_id` at `addr` (a new one when the node moved).
    fn peer(&self, node_id: &str, addr: &str) -> Arc<LinkPeer> {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        match peers.get(node_id) {
            Some((known, peer)) if known == addr => peer.clone(),
            _ => {
                let client = LinkClient::new(addr, self.link.clone());
                let peer = Arc::new(LinkPeer(node_id.to_owned(), client));
                peers.insert(node_id.to_owned(), (addr.to_owned(), peer.clone()));
                peer
            }
        }
    }

    /// Every other node known, by id.
    fn peer_list(&self) -> Vec<(String, Arc<LinkPeer>)> {
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers.iter().map(|(node, (_, peer))| (node.clone(), peer.clone())).collect()
    }

    fn poke_ownership(&self) {
        if let Some(poke) = self.poke.get() {
            poke.poke();
        }
    }

    /// Waits until every route change made so far is applied.
    async fn flush(&self) {
        let (done, applied) = oneshot::channel();
        if self.routes.send(RouteChange::Flush(done)).is_ok() {
            let _ = applied.await;
        }
    }
}

/// Applies route changes in order (the broker's switch waits for a local actor to stop).
async fn apply_routes(
    host: std::sync::Weak<BrokerHost>,
    mut changes: mpsc::UnboundedReceiver<RouteChange>,
) {
    while let Some(change) = changes.recv().await {
        let Some(host) = host.upgrade() else { return };
        match change {
            RouteChange::Flush(done) => drop(done.send(())),
            RouteChange::To(_, Route::Local) => {}
            RouteChange::To(p, Route::Remote { node_id, link_addr }) => {
                let peer = host.peer(node_id.as_str(), &link_addr);
                if let Err(e) = host.broker.route_remote(core_ref(p), peer).await {
                    tracing::debug!(partition = %p, error = %e, "routing to its owner");
                }
            }
            RouteChange::To(p, Route::Unknown) => {
                if let Err(e) = host.broker.release(core_ref(p)).await {
                    tracing::debug!(partition = %p, error = %e, "routing nowhere");
                }
            }
        }
    }
}

fn core_ref(p: PartitionRef) -> ironbus_core::PartitionRef {
    ironbus_core::PartitionRef { entity: p.entity, partition: p.partition.0 }
}

#[async_trait]
impl Host for BrokerHost {
    fn partitions(&self) -> Vec<PartitionRef> {
        self.broker
            .partition_refs()
            .into_iter()
            .map(|p| PartitionRef::new(p.entity, PartitionId(p.partition)))
            .collect()
    }

    async fn acquire(&self, p: PartitionRef, token: u64) -> Result<(), HostError> {
        self.flush().await;
        self.broker.acquire(core_ref(p), token).await.map_err(|e| match e {
            BrokerError::Store(s) if s.kind == StoreErrorKind::Conflict => HostError::Fenced,
            e => HostError::Unavailable(e.to_string()),
        })?;
        // The others learn the new owner in their next round: run it now (what they have
        // for this partition waits on its route meanwhile).
        for (node, peer) in self.peer_list() {
            tokio::spawn(async move {
                if let Err(e) = peer.1.call(NAMESPACE_CALL, Bytes::new()).await {
                    tracing::debug!(node, error = %e, "ownership notice");
                }
            });
        }
        Ok(())
    }

    async fn release(&self, p: PartitionRef) {
        self.flush().await;
        if let Err(e) = self.broker.release(core_ref(p)).await {
            tracing::debug!(partition = %p, error = %e, "releasing");
        }
    }

    fn route(&self, p: PartitionRef, route: Route) {
        let _ = self.routes.send(RouteChange::To(p, route));
    }

    fn members(&self, others: &[(NodeId, String)]) {
        for (node, addr) in others {
            self.peer(node.as_str(), addr);
        }
    }
}
