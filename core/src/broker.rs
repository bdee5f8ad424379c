//! The broker: the handle transports call. It holds the namespace (entities and their
//! partitions), routes each operation to the partitions it concerns, and runs management.
//!
//! This file holds the handle ([`Broker`], `EntityHandle`), opening the namespace, starting
//! an entity's partitions, and the management calls generic over the kind, which send each
//! kind where it is handled with an exhaustive `match` on [`EntityKind`]. By concern:
//!
//! - `broker/queues.rs` — a queue's update and delete, the queue-named management calls,
//!   [`QueueInfo`] and [`QueueRuntime`].
//! - `broker/topics.rs` — topics, subscriptions and rules: their management, and how their
//!   entities are started.
//! - `broker/sending.rs` — send, schedule and cancel: the checks, the routing to a partition,
//!   the bytes a send holds against its entity's size.
//! - `broker/receiving.rs` — receivers, settlement, lock renewal, deferred receives, peeks.
//! - `broker/purge.rs` — batch delete: deleting messages without receiving them.
//! - `broker/sessions.rs` — accepting sessions and the [`SessionReceiver`] that holds one.
//! - `broker/cluster.rs` — a cluster node's side: acquiring and releasing partitions, routes to
//!   their owners, serving other nodes' requests.
//! - `broker/namespace.rs` — the namespace's version, and applying what other nodes changed.
//! - `broker/forwarding.rs` — auto-forwarding: its configuration rules and the forwarder.
//! - `broker/transactions.rs` — local transactions, committed as one write on their via
//!   partition.
//!
//! **Architecture Invariant:** the broker decides *where* (which entity, which partition);
//! partitions decide *what* (the Service Bus rules on their messages). An entity's record is the
//! commit point of create and delete: partitions exist in the store only under a live entity id.

mod cluster;
mod forwarding;
mod idle;
mod namespace;
mod purge;
mod queues;
mod receiving;
mod removal;
mod sending;
mod sessions;
mod topics;
pub(crate) mod transactions;

pub use crate::partition::Owner;
pub use cluster::{PartitionRef, Placement};
pub use forwarding::creation_order;
pub use idle::{IDLE_TICK, STORED_MARGIN};
pub use namespace::NamespaceListener;
pub use queues::{Availability, PartitionCountsView, PartitionRuntime, QueueInfo, QueueRuntime};
pub use sending::SendFuture;
pub use sessions::SessionReceiver;
pub use topics::TopicRuntime;
pub use transactions::Transaction;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use foldhash::{HashMap, HashMapExt};
use tokio::sync::oneshot;

use crate::address::EntityPath;
use crate::clock::Clock;
use crate::codec::{self, EntityRecord};
use crate::description::{validate_entity_name, NamespaceLimits, QueueDescription};
use crate::entity::{EntityDescription, EntityInfo, EntityKind};
use crate::error::{BrokerError, Result};
use crate::keys::{self, EntityId};
use crate::partition::{
    self, Command, Lane, PartitionHandle, PartitionShared, Route, StartSpec, Target,
};

use self::topics::SubscriptionStart;
use crate::router::RoundRobin;
use crate::store::{Store, WriteBatch};
use crate::types::{PartitionId, SequenceNumber};

/// An entity and its running partitions.
pub(crate) struct EntityHandle {
    pub(crate) id: EntityId,
    pub(crate) path: EntityPath,
    /// The entity's kind (it never changes).
    kind: EntityKind,
    record: RwLock<EntityRecord>,
    /// The description in `record`, shared cheaply with the hot path.
    description: RwLock<Arc<QueueDescription>>,
    pub(crate) partitions: Vec<PartitionHandle>,
    round_robin: RoundRobin,
    /// Bytes of sends started and not yet answered (see [`Broker::start_send`]).
    pending_bytes: AtomicU64,
    /// Whether the entity's forwarder runs (see `broker/forwarding.rs`).
    forwarder: AtomicBool,
    /// Whether the forwarder of its send-via transfer queue runs.
    send_via_forwarder: AtomicBool,
    /// Its use as this node sees it (AutoDeleteOnIdle, `broker/idle.rs`).
    pub(crate) activity: idle::Activity,
}

impl fmt::Debug for EntityHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntityHandle").field("id", &self.id).field("path", &self.path).finish()
    }
}

impl EntityHandle {
    fn record(&self) -> EntityRecord {
        self.record.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn description(&self) -> Arc<QueueDescription> {
        self.description.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set_record(&self, record: EntityRecord, description: Arc<QueueDescription>) {
        self.activity.configure(&record);
        *self.record.write().unwrap_or_else(|e| e.into_inner()) = record;
        *self.description.write().unwrap_or_else(|e| e.into_inner()) = description;
    }

    fn partition(&self, id: PartitionId) -> Option<&PartitionHandle> {
        self.partitions.get(usize::from(id.0))
    }

    fn partitioned(&self) -> bool {
        self.description().enable_partitioning
    }

    fn close(&self) {
        for p in &self.partitions {
            p.send(Command::Close);
        }
    }
}

/// How a broker is set up, beyond its stores and clock (see [`Broker::open_with`]).
#[derive(Debug, Clone, Copy)]
pub struct BrokerOptions {
    pub limits: NamespaceLimits,
    /// Message-body bytes every partition together keeps in memory (the rest stay in the
    /// store and are read back when delivered). Default 64 MiB.
    pub body_cache_bytes: u64,
    /// Whether subscriptions' own metrics (`ironbus_broker_subscription_*`, labelled `entity`
    /// with the subscription's path) are recorded: one series per subscription, up to 2,000
    /// per topic. Default off: they are not recorded at all.
    pub metrics_entity_labels: bool,
    /// The cluster's hook (`CLUSTER.md` §2): when set, every partition this broker starts runs
    /// fenced with this token — it claims the partition's fence ([`crate::fence`]) before it
    /// loads, guards each write with it, and stops for good once another owner claims a
    /// greater token. Tokens must grow with each claim. Default `None`: unfenced (one node).
    pub fence_token: Option<u64>,
    /// A cluster node (`CLUSTER.md`): partitions start nowhere, and run here only once the
    /// cluster's ownership [acquires](Broker::acquire) them; the rest are reached through the
    /// link ([`Broker::route_remote`]). Default `false`: every partition runs here.
    pub cluster: bool,
}

impl Default for BrokerOptions {
    fn default() -> Self {
        Self {
            limits: NamespaceLimits::default(),
            body_cache_bytes: 64 << 20,
            metrics_entity_labels: false,
            fence_token: None,
            cluster: false,
        }
    }
}

struct Inner {
    /// The namespace's stores. The first holds the namespace (entity records); partitions are
    /// spread over all of them by [`Broker::store_for`].
    stores: Vec<Arc<dyn Store>>,
    cache: Arc<partition::BodyCache>,
    clock: Arc<dyn Clock>,
    limits: NamespaceLimits,
    metrics_entity_labels: bool,
    fence_token: Option<u64>,
    cluster: bool,
    entities: RwLock<HashMap<String, Arc<EntityHandle>>>,
    /// Serializes management operations (create, update, delete).
    management: tokio::sync::Mutex<()>,
    next_entity_id: AtomicU64,
    next_receiver_id: AtomicU64,
    /// Stand-in receivers holding sessions of partitions here for receivers on other nodes.
    remote_holders: crate::remote::RemoteHolders,
    /// The namespace version this node's view holds (`broker/namespace.rs`).
    namespace_version: AtomicU64,
    namespace_listener: RwLock<Option<Arc<dyn namespace::NamespaceListener>>>,
}

/// The broker engine. Cheap to clone; every clone is the same broker.
#[derive(Clone)]
pub struct Broker {
    inner: Arc<Inner>,
}

impl fmt::Debug for Broker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Broker").field("stores", &self.inner.stores).finish_non_exhaustive()
    }
}

impl Broker {
    /// Opens the broker on `store`: loads every entity and starts its partitions, which rebuild
    /// their state from the store. Must run inside a tokio runtime.
    pub async fn open(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        limits: NamespaceLimits,
    ) -> Result<Broker> {
        Self::open_with(vec![store], clock, BrokerOptions { limits, ..Default::default() }).await
    }

    /// Opens the broker on several stores: the first holds the namespace, and the partitions
    /// of every entity are spread over all of them, so that one store's outage makes only its
    /// partitions unavailable. The number of stores is recorded at the first start and must
    /// not change afterwards (a partition's store follows from it).
    pub async fn open_with(
        stores: Vec<Arc<dyn Store>>,
        clock: Arc<dyn Clock>,
        options: BrokerOptions,
    ) -> Result<Broker> {
        let Some(store) = stores.first().cloned() else {
            return Err(BrokerError::InvalidOperation("a broker needs at least one store".into()));
        };
        match store.get(&keys::store_count()).await? {
            Some(v) => {
                let written = codec::decode_partition(&v)?;
                if written != stores.len() as u64 {
                    return Err(BrokerError::InvalidOperation(format!(
                        "the data was written with {written} stores; open it with the same \
                         number (got {})",
                        stores.len()
                    )));
                }
            }
            None => {
                let mut batch = WriteBatch::new();
                batch.put(keys::store_count(), codec::encode_partition(stores.len() as u64));
                store.write(batch).await?;
            }
        }
        let next_entity_id = match store.get(&keys::next_entity_id()).await? {
            Some(v) => codec::decode_partition(&v)?,
            None => 1,
        };
        let inner = Arc::new(Inner {
            stores,
            cache: Arc::new(partition::BodyCache::new(options.body_cache_bytes)),
            clock,
            limits: options.limits,
            metrics_entity_labels: options.metrics_entity_labels,
            fence_token: options.fence_token,
            cluster: options.cluster,
            entities: RwLock::new(HashMap::new()),
            management: tokio::sync::Mutex::new(()),
            next_entity_id: AtomicU64::new(next_entity_id),
            next_receiver_id: AtomicU64::new(1),
            remote_holders: Default::default(),
            namespace_version: AtomicU64::new(0),
            namespace_listener: RwLock::new(None),
        });
        let broker = Broker { inner };
        let version = broker.stored_namespace_version().await?;
        broker.inner.namespace_version.store(version, Ordering::Release);
        let records = broker.read_records().await?;
        broker.start_all(records)?;
        broker.start_idle_sweep();
        Ok(broker)
    }

    /// Waits until every partition running here has loaded its state from the store (they
    /// start loading when the broker opens) and returns how many messages they hold. Partitions that cannot
    /// load (an unavailable store) are not counted.
    pub async fn recovered(&self) -> u64 {
        let entities: Vec<Arc<EntityHandle>> = self.entities().values().cloned().collect();
        let mut total = 0;
        for entity in entities {
            // A cluster node counts the partitions it runs (at its start: none).
            let pending: Vec<_> = entity
                .partitions
                .iter()
                .filter(|p| p.route.is_local())
                .map(|p| p.ask(|reply| Command::Counts { reply }))
                .collect();
            for counts in futures_join(pending).await.into_iter().flatten() {
                total += counts.active
                    + counts.deferred
                    + counts.scheduled
                    + counts.dead_lettered
                    + counts.transfer
                    + counts.transfer_dead_lettered;
            }
        }
        total
    }

    /// The store holding the namespace (entity records).
    fn namespace_store(&self) -> &Arc<dyn Store> {
        &self.inner.stores[0]
    }

    /// The store of one partition of an entity: partitions are dealt round the stores,
    /// starting at a place that depends on the entity, so single-partition queues spread too.
    pub(crate) fn store_for(&self, entity: EntityId, partition: PartitionId) -> &Arc<dyn Store> {
        &self.inner.stores[self.store_index(entity, partition)]
    }

    fn store_index(&self, entity: EntityId, partition: PartitionId) -> usize {
        ((entity + u64::from(partition.0)) % self.inner.stores.len() as u64) as usize
    }

    /// Body bytes the partitions hold in memory now (bounded by
    /// [`BrokerOptions::body_cache_bytes`]).
    pub fn cached_body_bytes(&self) -> u64 {
        self.inner.cache.used()
    }

    /// The broker's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// Stops every partition. Receivers see the end of their stream.
    pub fn shutdown(&self) {
        for entity in self.entities().values() {
            entity.close();
        }
    }

    pub(crate) fn entities(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<EntityHandle>>> {
        self.inner.entities.read().unwrap_or_else(|e| e.into_inner())
    }

    fn entities_mut(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<EntityHandle>>> {
        self.inner.entities.write().unwrap_or_else(|e| e.into_inner())
    }

    fn entity(&self, path: &EntityPath) -> Result<Arc<EntityHandle>> {
        self.entities()
            .get(path.key())
            .cloned()
            .ok_or_else(|| BrokerError::EntityNotFound { entity: path.to_string() })
    }

    /// The entity a name given by a caller names; a name that is no entity path (a sub-queue,
    /// a management node) names none.
    fn entity_named(&self, name: &str) -> Result<Arc<EntityHandle>> {
        let path = EntityPath::parse(name).unwrap_or_else(|_| EntityPath::verbatim(name));
        self.entity(&path)
    }

    /// Starts an entity's partitions: a queue's, a topic's (with the lanes of the
    /// subscriptions given, whose records the partitions recover with the topic's), none for a
    /// rule. Subscriptions are started by [`Broker::subscription_handle`].
    fn start_entity(
        &self,
        record: EntityRecord,
        subscriptions: &[SubscriptionStart],
    ) -> Result<Arc<EntityHandle>> {
        // Records are keyed by their path; a name that does not parse (written before names
        // were parsed) is kept as it is, which keeps its key.
        let path =
            EntityPath::parse(&record.name).unwrap_or_else(|_| EntityPath::verbatim(&record.name));
        let kind = record.description.kind();
        let (description, topic) = match &record.description {
            EntityDescription::Queue(description) => (Arc::new(description.clone()), None),
            EntityDescription::Topic(topic) => {
                (Arc::new(topic.effective()), Some(topic.filtering_messages_before_publishing))
            }
            EntityDescription::Rule(_) => (Arc::new(QueueDescription::default()), None),
            EntityDescription::Subscription(_) => {
                return Err(BrokerError::InvalidOperation(format!(
                    "{} is started with its topic",
                    record.name
                )))
            }
        };
        let partitions = if !has_partitions(kind) {
            Vec::new()
        } else {
            (0..description.partitions())
                .map(|p| {
                    let topic = topic.map(|filtering| {
                        let lanes = subscriptions
                            .iter()
                            .map(|s| Lane {
                                id: s.id,
                                shared: s.shareds[usize::from(p)].clone(),
                                config: s.config.clone(),
                            })
                            .collect();
                        (lanes, filtering)
                    });
                    let shared = PartitionShared::new();
                    let spec = StartSpec {
                        description: description.clone(),
                        topic,
                        receivers: Vec::new(),
                        shared: shared.clone(),
                    };
                    let id = PartitionId(p);
                    let clock = self.inner.clock.clone();
                    let name = record.name.clone();
                    let route = Route::new(record.id, name, id, spec, Target::Elsewhere, clock);
                    if self.inner.cluster {
                        shared.mark_available(false);
                    } else {
                        let fence = self.inner.fence_token;
                        route.switch(|spec| {
                            self.start_local(record.id, &record.name, id, spec, fence)
                        })?;
                    }
                    Ok(PartitionHandle { id, lane: record.id, route, shared })
                })
                .collect::<Result<_>>()?
        };
        let activity = idle::Activity::new(self.inner.clock.clone(), &record);
        Ok(Arc::new(EntityHandle {
            id: record.id,
            path,
            kind,
            activity,
            record: RwLock::new(record),
            description: RwLock::new(description),
            partitions,
            round_robin: RoundRobin::default(),
            pending_bytes: AtomicU64::new(0),
            forwarder: AtomicBool::new(false),
            send_via_forwarder: AtomicBool::new(false),
        }))
    }

    // ---- management ----

    /// Creates an entity of the description's kind at `path`. Validates the path and every
    /// field, enforces the namespace and topic quotas, and commits the entity with one write of
    /// its record. A subscription is created with the rule `$Default` (see
    /// [`Broker::create_subscription`] to name another).
    pub async fn create_entity(
        &self,
        path: &EntityPath,
        description: EntityDescription,
    ) -> Result<EntityInfo> {
        let kind = description.kind();
        if !kind.fits(path.shape()) {
            return Err(BrokerError::invalid(
                "EntityName",
                format!("{path:?} is not the path of a {}", kind.as_str()),
            ));
        }
        let created = match description {
            EntityDescription::Queue(_) | EntityDescription::Topic(_) => {
                self.create_top_level(path, description).await
            }
            EntityDescription::Subscription(subscription) => {
                self.create_subscription(path, subscription, None).await
            }
            EntityDescription::Rule(rule) => self.create_rule(path, rule).await,
        };
        self.note_management(path);
        created
    }

    /// Creates a queue or a topic.
    async fn create_top_level(
        &self,
        path: &EntityPath,
        entity: EntityDescription,
    ) -> Result<EntityInfo> {
        let name = path.as_str();
        validate_entity_name(name)?;
        let description = match &entity {
            EntityDescription::Queue(queue) => {
                queue.validate()?;
                queue.clone()
            }
            EntityDescription::Topic(topic) => {
                topic.validate()?;
                topic.effective()
            }
            EntityDescription::Subscription(_) | EntityDescription::Rule(_) => {
                return Err(BrokerError::InvalidOperation(format!(
                    "{name} is not the path of a queue or topic"
                )))
            }
        };
        let _guard = self.manage().await;
        {
            let entities = self.entities();
            if entities.contains_key(path.key()) {
                return Err(BrokerError::EntityAlreadyExists { entity: name.to_owned() });
            }
            let limits = self.inner.limits;
            let counted =
                entities.values().filter(|e| e.kind.counts_toward_namespace_quota()).count();
            if counted >= limits.max_entities {
                return Err(BrokerError::QuotaExceeded(format!(
                    "the namespace already has the maximum of {} entities",
                    limits.max_entities
                )));
            }
            let partitioned = entities
                .values()
                .filter(|e| e.kind.counts_toward_namespace_quota() && e.partitioned())
                .count();
            if description.enable_partitioning && partitioned >= limits.max_partitioned_entities {
                return Err(BrokerError::QuotaExceeded(format!(
                    "the namespace already has the maximum of {} partitioned entities",
                    limits.max_partitioned_entities
                )));
            }
        }
        self.check_forwarding(&description, path)?;
        let now = self.inner.clock.now();
        let id = self.inner.next_entity_id.load(Ordering::Acquire);
        let partitions = description.partitions();
        let kind = entity.kind();
        let record = EntityRecord {
            id,
            name: name.to_owned(),
            description: entity,
            created_at: now,
            updated_at: now,
        };
        // Partition records first, each in its partition's store; the entity record, written
        // last to the namespace store, commits the creation.
        let mut batches: Vec<WriteBatch> = vec![WriteBatch::new(); self.inner.stores.len()];
        for p in 0..partitions {
            let index = self.store_index(id, PartitionId(p));
            batches[index]
                .put(keys::partition_record(id, PartitionId(p)), codec::encode_partition(0));
        }
        let mut batch = std::mem::take(&mut batches[0]);
        for (index, other) in batches.into_iter().enumerate().skip(1) {
            if !other.is_empty() {
                self.inner.stores[index].write(other).await?;
            }
        }
        batch.put(keys::next_entity_id(), codec::encode_partition(id + 1));
        batch.put(keys::entity(path.key()), codec::encode_entity(&record));
        self.write_namespace(batch).await?;
        self.inner.next_entity_id.store(id + 1, Ordering::Release);
        let handle = self.start_entity(record.clone(), &[])?;
        self.entities_mut().insert(path.key().to_owned(), handle.clone());
        self.ensure_forwarder(&handle);
        tracing::info!(entity = %name, kind = kind.as_str(), partitions, "entity created");
        self.wait_placed(&handle).await;
        Ok(entity_info(&record))
    }

    /// An entity's description, whatever its kind.
    pub async fn get_entity(&self, path: &EntityPath) -> Result<EntityInfo> {
        Ok(entity_info(&self.entity(path)?.record()))
    }

    /// The store key prefix under which one partition of a queue keeps all its records, for
    /// tests ([`testing::partition_key_prefix`](crate::testing::partition_key_prefix)).
    #[cfg(feature = "testing")]
    pub(crate) fn partition_key_prefix(
        &self,
        name: &str,
        partition: PartitionId,
    ) -> Result<bytes::Bytes> {
        let entity = self.entity_named(name)?;
        if entity.partition(partition).is_none() {
            return Err(BrokerError::InvalidArgument {
                field: "PartitionId",
                reason: format!(
                    "{name} has {} partitions, not {partition}",
                    entity.partitions.len()
                ),
            });
        }
        Ok(keys::partition_prefix(entity.id, partition))
    }

    /// Every entity of one kind, ordered by path, from `skip`, at most `top`.
    pub async fn list_entities(
        &self,
        kind: EntityKind,
        skip: usize,
        top: usize,
    ) -> Result<Vec<EntityInfo>> {
        let mut entities: Vec<(EntityPath, EntityRecord)> = self
            .entities()
            .values()
            .filter(|e| e.kind == kind)
            .map(|e| (e.path.clone(), e.record()))
            .collect();
        entities.sort_by(|a, b| a.0.key().cmp(b.0.key()));
        Ok(entities.iter().skip(skip).take(top).map(|(_, record)| entity_info(record)).collect())
    }

    /// Fails with the first unavailable partition's error unless every partition answers.
    async fn require_all_partitions(&self, entity: &EntityHandle) -> Result<()> {
        for answer in ask_all(entity, |reply| Command::Counts { reply }).await {
            answer?;
        }
        Ok(())
    }

    /// Stores `description` as the entity's new description, updated now (the caller holds the
    /// management lock and has checked the update).
    async fn write_update(
        &self,
        path: &EntityPath,
        record: &mut EntityRecord,
        description: EntityDescription,
    ) -> Result<()> {
        record.description = description;
        record.updated_at = self.inner.clock.now();
        let mut batch = WriteBatch::new();
        batch.put(keys::entity(path.key()), codec::encode_entity(record));
        self.write_namespace(batch).await
    }

    /// Replaces an entity's description with one of the same kind. The properties fixed at
    /// creation must not change; every partition must be available.
    pub async fn update_entity(
        &self,
        path: &EntityPath,
        description: EntityDescription,
    ) -> Result<EntityInfo> {
        let _guard = self.manage().await;
        let entity = self.entity(path)?;
        let record = entity.record();
        if record.description.kind() != description.kind() {
            return Err(BrokerError::InvalidOperation(format!(
                "{} is a {}, not a {}",
                entity.path,
                record.description.kind().as_str(),
                description.kind().as_str()
            )));
        }
        let updated = match entity.kind {
            EntityKind::Queue => self.update_queue_entity(entity, record, description).await,
            EntityKind::Topic | EntityKind::Subscription | EntityKind::Rule => {
                self.update_topic_entity(entity, record, description).await
            }
        };
        self.note_management(path);
        updated
    }

    /// Deletes an entity and every message in it. Every partition must be available.
    pub async fn delete_entity(&self, path: &EntityPath) -> Result<()> {
        let _guard = self.manage().await;
        let entity = self.entity(path)?;
        let deleted = match entity.kind {
            EntityKind::Queue => self.delete_queue_entity(entity).await,
            EntityKind::Topic | EntityKind::Subscription | EntityKind::Rule => {
                self.delete_topic_entity(entity).await
            }
        };
        self.note_management(path);
        deleted
    }
}

fn entity_info(record: &EntityRecord) -> EntityInfo {
    EntityInfo {
        path: EntityPath::parse(&record.name)
            .unwrap_or_else(|_| EntityPath::verbatim(&record.name)),
        description: record.description.clone(),
        created_at: record.created_at,
        updated_at: record.updated_at,
    }
}

/// Whether an entity of this kind is reached through partitions and keeps records under its
/// entity id (a subscription's are lanes of its topic's partitions); a rule is only its record
/// in the namespace.
fn has_partitions(kind: EntityKind) -> bool {
    match kind {
        EntityKind::Queue | EntityKind::Topic | EntityKind::Subscription => true,
        EntityKind::Rule => false,
    }
}

/// Whether messages can be sent to an entity of this kind: a queue or a topic (a
/// subscription takes its topic's messages, a rule none).
fn takes_sends(kind: EntityKind) -> bool {
    match kind {
        EntityKind::Queue | EntityKind::Topic => true,
        EntityKind::Subscription | EntityKind::Rule => false,
    }
}

/// Groups sequence numbers by the partition that issued them, dropping those of no partition.
fn by_partition<'a>(
    entity: &'a EntityHandle,
    sequence_numbers: &[SequenceNumber],
) -> Vec<(&'a PartitionHandle, Vec<SequenceNumber>)> {
    let partitioned = entity.partitioned();
    let mut groups: Vec<(&PartitionHandle, Vec<SequenceNumber>)> = Vec::new();
    for &seq in sequence_numbers {
        let Some(handle) = entity.partition(seq.partition(partitioned)) else { continue };
        match groups.iter_mut().find(|(h, _)| h.id == handle.id) {
            Some((_, seqs)) => seqs.push(seq),
            None => groups.push((handle, vec![seq])),
        }
    }
    groups
}

/// Asks every partition of an entity at once; answers in partition order.
/// Awaits every future, in order.
async fn futures_join<T>(pending: Vec<impl std::future::Future<Output = T>>) -> Vec<T> {
    let mut answers = Vec::with_capacity(pending.len());
    for answer in pending {
        answers.push(answer.await);
    }
    answers
}

pub(crate) async fn ask_all<T: Send + 'static>(
    entity: &EntityHandle,
    make: impl Fn(oneshot::Sender<Result<T>>) -> Command,
) -> Vec<Result<T>> {
    futures_join(entity.partitions.iter().map(|p| p.ask(&make)).collect()).await
}
