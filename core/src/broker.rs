//! The broker: the handle transports call. It holds the namespace (entities and their
//! partitions), routes each operation to the partitions it concerns, and runs management.
//!
//! **Architecture Invariant:** the broker decides *where* (which entity, which partition);
//! partitions decide *what* (the Service Bus rules on their messages). An entity's record is the
//! commit point of create and delete: partitions exist in the store only under a live entity id.

mod forwarding;
mod sessions;
mod topics;
pub(crate) mod transactions;

pub use forwarding::creation_order;
pub use sessions::SessionReceiver;
pub use topics::TopicRuntime;
pub use transactions::Transaction;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use tokio::sync::oneshot;

use crate::address::{EntityAddress, EntityPath};
use crate::clock::Clock;
use crate::codec::{self, EntityRecord};
use crate::description::{validate_entity_name, NamespaceLimits, QueueDescription};
use crate::entity::{EntityDescription, EntityInfo, EntityKind};
use crate::error::{BrokerError, Result};
use crate::keys::{self, EntityId};
use crate::message::{Disposition, Message, ReceivedMessage};
use crate::partition::{
    self, Command, Lane, PartitionContext, PartitionCounts, PartitionHandle, SendOutcome,
};

use self::topics::SubscriptionStart;
use crate::receiver::Receiver;
use crate::router::{self, RoundRobin};
use crate::store::{Store, WriteBatch};
use crate::types::{LockToken, PartitionId, ReceiveMode, SequenceNumber, SubQueue, Timestamp};

/// The answer to a send started with [`Broker::start_send`].
pub type SendFuture = Pin<Box<dyn Future<Output = Result<Vec<SendOutcome>>> + Send>>;

/// A queue's description and bookkeeping, as management returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueInfo {
    pub name: String,
    pub description: QueueDescription,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl QueueInfo {
    /// The queue an entity is; an entity of another kind is not found (as a queue).
    pub fn from_entity(info: &EntityInfo) -> Result<QueueInfo> {
        match &info.description {
            EntityDescription::Queue(description) => Ok(QueueInfo {
                name: info.path.to_string(),
                description: description.clone(),
                created_at: info.created_at,
                updated_at: info.updated_at,
            }),
            EntityDescription::Topic(_)
            | EntityDescription::Subscription(_)
            | EntityDescription::Rule(_) => {
                Err(BrokerError::EntityNotFound { entity: info.path.to_string() })
            }
        }
    }
}

/// Whether every partition of an entity can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    Available,
    /// At least one partition is unavailable; operations pinned to it fail, the rest go on.
    Limited,
}

/// A queue's runtime counts, summed over its partitions.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueRuntime {
    pub name: String,
    pub active_message_count: u64,
    pub dead_letter_message_count: u64,
    pub scheduled_message_count: u64,
    pub deferred_message_count: u64,
    pub transfer_message_count: u64,
    pub transfer_dead_letter_message_count: u64,
    /// Total messages (active, deferred, scheduled, dead-lettered).
    pub total_message_count: u64,
    pub size_in_bytes: u64,
    pub availability: Availability,
    /// Partitions that could not answer (their counts are missing from the sums).
    pub unavailable_partitions: Vec<PartitionId>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

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
}

impl Default for BrokerOptions {
    fn default() -> Self {
        Self {
            limits: NamespaceLimits::default(),
            body_cache_bytes: 64 << 20,
            metrics_entity_labels: false,
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
    entities: RwLock<HashMap<String, Arc<EntityHandle>>>,
    /// Serializes management operations (create, update, delete).
    management: tokio::sync::Mutex<()>,
    next_entity_id: AtomicU64,
    next_receiver_id: AtomicU64,
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
            entities: RwLock::new(HashMap::new()),
            management: tokio::sync::Mutex::new(()),
            next_entity_id: AtomicU64::new(next_entity_id),
            next_receiver_id: AtomicU64::new(1),
        });
        let broker = Broker { inner };
        let prefix = keys::entities_prefix();
        let end = crate::store::prefix_end(&prefix);
        let mut start = prefix.to_vec();
        let mut records = Vec::new();
        loop {
            let page = broker.namespace_store().scan(&start, &end, 256).await?;
            for (_, value) in &page {
                records.push(codec::decode_entity(value)?);
            }
            match page.last() {
                Some((last, _)) if page.len() == 256 => {
                    start = last.to_vec();
                    start.push(0);
                }
                _ => break,
            }
        }
        broker.start_all(records)?;
        Ok(broker)
    }

    /// Waits until every partition has loaded its state from the store (they start loading
    /// when the broker opens) and returns how many messages they hold. Partitions that cannot
    /// load (an unavailable store) are not counted.
    pub async fn recovered(&self) -> u64 {
        let entities: Vec<Arc<EntityHandle>> = self.entities().values().cloned().collect();
        let mut total = 0;
        for entity in entities {
            for counts in
                ask_all(&entity, |reply| Command::Counts { reply }).await.into_iter().flatten()
            {
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

    fn entities(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<EntityHandle>>> {
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
        let partitions = if kind == EntityKind::Rule {
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
                    partition::spawn(PartitionContext {
                        entity_id: record.id,
                        entity_name: record.name.clone(),
                        partition: PartitionId(p),
                        description: description.clone(),
                        store: self.store_for(record.id, PartitionId(p)).clone(),
                        clock: self.inner.clock.clone(),
                        cache: self.inner.cache.clone(),
                        metrics_entity_labels: self.inner.metrics_entity_labels,
                        topic,
                    })
                })
                .collect()
        };
        Ok(Arc::new(EntityHandle {
            id: record.id,
            path,
            kind,
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
        match description {
            EntityDescription::Queue(_) | EntityDescription::Topic(_) => {
                self.create_top_level(path, description).await
            }
            EntityDescription::Subscription(subscription) => {
                self.create_subscription(path, subscription, None).await
            }
            EntityDescription::Rule(rule) => self.create_rule(path, rule).await,
        }
    }

    /// Creates a queue (see [`Broker::create_entity`]).
    pub async fn create_queue(
        &self,
        name: &str,
        description: QueueDescription,
    ) -> Result<QueueInfo> {
        validate_entity_name(name)?;
        let path = EntityPath::parse(name)
            .map_err(|e| BrokerError::invalid("EntityName", e.to_string()))?;
        QueueInfo::from_entity(
            &self.create_entity(&path, EntityDescription::Queue(description)).await?,
        )
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
        let _guard = self.inner.management.lock().await;
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
        self.check_forwarding(
            &description.forward_to,
            &description.forward_dead_lettered_messages_to,
            description.requires_session,
            path,
        )?;
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
        self.namespace_store().write(batch).await?;
        self.inner.next_entity_id.store(id + 1, Ordering::Release);
        let handle = self.start_entity(record.clone(), &[])?;
        self.entities_mut().insert(path.key().to_owned(), handle.clone());
        self.ensure_forwarder(&handle);
        tracing::info!(entity = %name, kind = kind.as_str(), partitions, "entity created");
        Ok(entity_info(&record))
    }

    /// An entity's description, whatever its kind.
    pub async fn get_entity(&self, path: &EntityPath) -> Result<EntityInfo> {
        Ok(entity_info(&self.entity(path)?.record()))
    }

    /// A queue's description.
    pub async fn get_queue(&self, name: &str) -> Result<QueueInfo> {
        QueueInfo::from_entity(&entity_info(&self.entity_named(name)?.record()))
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

    /// Every queue, ordered by name, from `skip`, at most `top`.
    pub async fn list_queues(&self, skip: usize, top: usize) -> Result<Vec<QueueInfo>> {
        self.list_entities(EntityKind::Queue, skip, top)
            .await?
            .iter()
            .map(QueueInfo::from_entity)
            .collect()
    }

    /// A queue's counts summed over its partitions, and whether all of them can serve.
    pub async fn get_queue_runtime(&self, name: &str) -> Result<QueueRuntime> {
        let entity = self.entity_named(name)?;
        let record = entity.record();
        let mut total = PartitionCounts::default();
        let mut unavailable = Vec::new();
        let answers = ask_all(&entity, |reply| Command::Counts { reply }).await;
        for (partition, answer) in entity.partitions.iter().zip(answers) {
            match answer {
                Ok(c) => {
                    total.active += c.active;
                    total.deferred += c.deferred;
                    total.scheduled += c.scheduled;
                    total.dead_lettered += c.dead_lettered;
                    total.transfer += c.transfer;
                    total.transfer_dead_lettered += c.transfer_dead_lettered;
                    total.size_bytes += c.size_bytes;
                }
                Err(_) => unavailable.push(partition.id),
            }
        }
        Ok(QueueRuntime {
            name: record.name.clone(),
            active_message_count: total.active,
            dead_letter_message_count: total.dead_lettered,
            scheduled_message_count: total.scheduled,
            deferred_message_count: total.deferred,
            transfer_message_count: total.transfer,
            transfer_dead_letter_message_count: total.transfer_dead_lettered,
            total_message_count: total.active
                + total.deferred
                + total.scheduled
                + total.dead_lettered
                + total.transfer
                + total.transfer_dead_lettered,
            size_in_bytes: total.size_bytes,
            availability: if unavailable.is_empty() {
                Availability::Available
            } else {
                Availability::Limited
            },
            unavailable_partitions: unavailable,
            created_at: record.created_at,
            updated_at: record.updated_at,
        })
    }

    /// Fails with the first unavailable partition's error unless every partition answers.
    async fn require_all_partitions(&self, entity: &EntityHandle) -> Result<()> {
        for answer in ask_all(entity, |reply| Command::Counts { reply }).await {
            answer?;
        }
        Ok(())
    }

    /// Replaces an entity's description with one of the same kind. The properties fixed at
    /// creation must not change; every partition must be available.
    pub async fn update_entity(
        &self,
        path: &EntityPath,
        description: EntityDescription,
    ) -> Result<EntityInfo> {
        let _guard = self.inner.management.lock().await;
        let entity = self.entity(path)?;
        let mut record = entity.record();
        if record.description.kind() != description.kind() {
            return Err(BrokerError::InvalidOperation(format!(
                "{} is a {}, not a {}",
                entity.path,
                record.description.kind().as_str(),
                description.kind().as_str()
            )));
        }
        let shared = match (&record.description, &description) {
            (EntityDescription::Queue(current), EntityDescription::Queue(new)) => {
                current.validate_update(new)?;
                self.check_forwarding(
                    &new.forward_to,
                    &new.forward_dead_lettered_messages_to,
                    new.requires_session,
                    &entity.path,
                )?;
                Arc::new(new.clone())
            }
            _ => return self.update_topic_entity(entity, record, description).await,
        };
        self.require_all_partitions(&entity).await?;
        record.description = description;
        record.updated_at = self.inner.clock.now();
        let mut batch = WriteBatch::new();
        batch.put(keys::entity(entity.path.key()), codec::encode_entity(&record));
        self.namespace_store().write(batch).await?;
        entity.set_record(record.clone(), shared.clone());
        for p in &entity.partitions {
            p.send(Command::Update(shared.clone()));
        }
        self.ensure_forwarder(&entity);
        Ok(entity_info(&record))
    }

    /// Replaces a queue's description (see [`Broker::update_entity`]).
    pub async fn update_queue(
        &self,
        name: &str,
        description: QueueDescription,
    ) -> Result<QueueInfo> {
        let path = self.entity_named(name)?.path.clone();
        QueueInfo::from_entity(
            &self.update_entity(&path, EntityDescription::Queue(description)).await?,
        )
    }

    /// Deletes an entity and every message in it. Every partition must be available.
    pub async fn delete_entity(&self, path: &EntityPath) -> Result<()> {
        let _guard = self.inner.management.lock().await;
        let entity = self.entity(path)?;
        if entity.kind != EntityKind::Queue {
            return self.delete_topic_entity(entity).await;
        }
        self.require_all_partitions(&entity).await?;
        let mut batch = WriteBatch::new();
        batch.delete(keys::entity(entity.path.key()));
        let prefix = keys::entity_prefix(entity.id);
        let end = crate::store::prefix_end(&prefix);
        batch.delete_range(prefix.clone(), end.clone());
        self.namespace_store().write(batch).await?;
        self.entities_mut().remove(entity.path.key());
        entity.close();
        // The entity record is gone, so what other stores hold of it is unreachable (ids are
        // never reused); reclaim it now, and only log if a store cannot.
        for store in self.inner.stores.iter().skip(1) {
            let mut batch = WriteBatch::new();
            batch.delete_range(prefix.clone(), end.clone());
            if let Err(e) = store.write(batch).await {
                tracing::warn!(entity = %entity.path, error = %e, "could not delete a deleted entity's messages from a store");
            }
        }
        tracing::info!(entity = %entity.path, kind = entity.kind.as_str(), "entity deleted");
        Ok(())
    }

    /// Deletes a queue and every message in it (see [`Broker::delete_entity`]).
    pub async fn delete_queue(&self, name: &str) -> Result<()> {
        let path = self.entity_named(name)?.path.clone();
        self.delete_entity(&path).await
    }

    // ---- sending ----

    /// Sends messages to a queue, atomically: all are stored or none. On a partitioned entity
    /// the router picks the partition from the messages' partition key, which all keyed messages
    /// of one call must share; a call without any key goes to the next available partition in
    /// turn.
    ///
    /// Returns, per message, its sequence number or that it was dropped as a duplicate.
    pub async fn send(
        &self,
        address: impl Into<EntityAddress>,
        messages: Vec<Message>,
    ) -> Result<Vec<SendOutcome>> {
        self.start_send(address, messages)?.await
    }

    /// [`Broker::send`] in two steps: the messages are checked, routed and queued on their
    /// partition before this returns; the future then waits for them to be stored. Sends
    /// started one after another on the same partition are stored in that order, so a
    /// transport can pipeline a link's sends and keep their order.
    pub fn start_send(
        &self,
        address: impl Into<EntityAddress>,
        messages: Vec<Message>,
    ) -> Result<SendFuture> {
        let address = address.into();
        let (entity, incoming) = self.check_send(&address, &messages)?;
        let description = entity.description();
        let reservation = Reservation::take(&entity, incoming)?;

        // One call is one atomic write to one partition. On a partitioned entity every message
        // that names a partition key (SessionId or PartitionKey) must name the same one, as in a
        // Service Bus transaction; messages without one travel with them. A batch without an
        // explicit key is routed like Service Bus routes a batch envelope: by the first
        // message's MessageId when duplicate detection is on, else to the next partition in turn.
        let partition = if description.enable_partitioning {
            let mut batch_key: Option<&str> = None;
            for message in &messages {
                let Some(key) = router::partition_key(&message.properties, false)? else {
                    continue;
                };
                match batch_key {
                    Some(first) if first != key => {
                        return Err(BrokerError::InvalidOperation(format!(
                            "the messages of one batch sent to partitioned entity {} must share \
                             one partition key; found {first:?} and {key:?}",
                            entity.path
                        )))
                    }
                    _ => batch_key = Some(key),
                }
            }
            let key = match (batch_key, messages.first()) {
                (Some(key), _) => Some(key),
                (None, Some(first)) => router::partition_key(
                    &first.properties,
                    description.requires_duplicate_detection,
                )?,
                (None, None) => None,
            };
            key.map(|key| router::partition_for_key(key, description.partitions()))
        } else {
            Some(PartitionId(0))
        };
        let messages: Vec<Arc<Message>> = messages.into_iter().map(Arc::new).collect();
        let sent = match partition {
            Some(partition) => {
                let handle = entity.partition(partition).expect("router stays within the entity");
                Box::pin(handle.ask(|reply| Command::Send { messages, reply })) as SendFuture
            }
            None => send_round_robin(entity, messages),
        };
        Ok(Box::pin(async move {
            let outcome = sent.await;
            drop(reservation);
            outcome
        }))
    }

    /// What every send is checked for before it is routed: the entity takes messages (a queue
    /// or topic, sendable, the main queue), the session rule, each message's size. Returns the
    /// entity and the bytes the messages add.
    pub(crate) fn check_send(
        &self,
        address: &EntityAddress,
        messages: &[Message],
    ) -> Result<(Arc<EntityHandle>, u64)> {
        let entity = self.entity(&address.entity)?;
        if !matches!(entity.kind, EntityKind::Queue | EntityKind::Topic) {
            return Err(BrokerError::InvalidOperation(format!(
                "messages cannot be sent to {} {}: send to its topic",
                entity.kind.as_str(),
                entity.path
            )));
        }
        let description = entity.description();
        if address.queue != SubQueue::Main {
            return Err(BrokerError::InvalidOperation(
                "messages cannot be sent to a dead-letter queue".into(),
            ));
        }
        if !description.status.can_send() {
            return Err(BrokerError::EntityDisabled {
                entity: entity.path.to_string(),
                status: description.status.as_str(),
            });
        }
        if description.requires_session
            && entity.kind == EntityKind::Queue
            && messages.iter().any(|m| m.properties.session_id.is_none())
        {
            return Err(BrokerError::InvalidOperation(sessions::SESSION_ID_NOT_SET.into()));
        }
        let max = description.max_message_size();
        let mut incoming = 0u64;
        for m in messages {
            let size = m.size();
            if size > max {
                return Err(BrokerError::MessageSizeExceeded { size, max });
            }
            incoming += size as u64;
        }
        Ok((entity, incoming))
    }

    /// Schedules messages for later: each must carry a scheduled enqueue time. Returns their
    /// sequence numbers (for cancellation); a duplicate is reported as such.
    pub async fn schedule(
        &self,
        address: impl Into<EntityAddress>,
        messages: Vec<Message>,
    ) -> Result<Vec<SendOutcome>> {
        if messages.iter().any(|m| m.properties.scheduled_enqueue_time.is_none()) {
            return Err(BrokerError::invalid(
                "ScheduledEnqueueTime",
                "every scheduled message needs a scheduled enqueue time",
            ));
        }
        self.send(address, messages).await
    }

    /// Cancels scheduled messages. Numbers that name no scheduled message are ignored.
    pub async fn cancel_scheduled(
        &self,
        address: impl Into<EntityAddress>,
        sequence_numbers: &[SequenceNumber],
    ) -> Result<()> {
        let address = address.into();
        let entity = self.entity(&address.entity)?;
        for (partition, seqs) in by_partition(&entity, sequence_numbers) {
            partition.ask(|reply| Command::Cancel { sequence_numbers: seqs, reply }).await?;
        }
        Ok(())
    }

    // ---- receiving ----

    /// Opens a receiver on a queue or its dead-letter queue.
    pub async fn open_receiver(
        &self,
        address: impl Into<EntityAddress>,
        mode: ReceiveMode,
    ) -> Result<Receiver> {
        let address = address.into();
        let entity = self.entity(&address.entity)?;
        self.check_receive(&entity)?;
        self.check_not_forwarded(&entity, address.queue)?;
        if address.queue == SubQueue::Main && entity.description().requires_session {
            return Err(BrokerError::InvalidOperation(sessions::SESSION_REQUIRED.into()));
        }
        let id = self.inner.next_receiver_id.fetch_add(1, Ordering::Relaxed);
        // Receivers on partitions of a queue or a subscription.
        Ok(Receiver::attach(entity, id, mode, address.queue))
    }

    fn check_receive(&self, entity: &EntityHandle) -> Result<()> {
        match entity.kind {
            EntityKind::Queue | EntityKind::Subscription => {}
            EntityKind::Topic => {
                return Err(BrokerError::InvalidOperation(format!(
                    "topic {} cannot be received from: receive from one of its subscriptions",
                    entity.path
                )))
            }
            EntityKind::Rule => {
                return Err(BrokerError::EntityNotFound { entity: entity.path.to_string() })
            }
        }
        let status = entity.description().status;
        if status.can_receive() {
            Ok(())
        } else {
            Err(BrokerError::EntityDisabled {
                entity: entity.path.to_string(),
                status: status.as_str(),
            })
        }
    }

    /// Settles a locked message.
    pub async fn settle(
        &self,
        address: impl Into<EntityAddress>,
        token: LockToken,
        disposition: Disposition,
    ) -> Result<()> {
        let mut outcomes = self.start_settle_many(address, vec![(token, disposition)]).await;
        outcomes.pop().unwrap_or(Err(BrokerError::MessageLockLost))
    }

    /// Settles several locked messages of one entity: one request per partition they are
    /// locked on, queued before this returns (like [`Broker::start_send`]); the future yields
    /// one outcome per item, in the order given.
    pub fn start_settle_many(
        &self,
        address: impl Into<EntityAddress>,
        items: Vec<(LockToken, Disposition)>,
    ) -> impl Future<Output = Vec<Result<()>>> + Send + 'static {
        let address = address.into();
        let count = items.len();
        let mut outcomes: Vec<Result<()>> = Vec::with_capacity(count);
        // Per partition: the items' places in `items`, and the request's answer.
        let mut asked = Vec::new();
        match self.entity(&address.entity) {
            Err(error) => outcomes.extend(std::iter::repeat_n(Err(error), count)),
            Ok(entity) => {
                outcomes.extend(std::iter::repeat_n(Err(BrokerError::MessageLockLost), count));
                let mut groups: Vec<SettleGroup> = Vec::new();
                for (place, (token, disposition)) in items.into_iter().enumerate() {
                    let partition = token.partition();
                    match groups.iter_mut().find(|group| group.0 == partition) {
                        Some(group) => {
                            group.1.push(place);
                            group.2.push((token, disposition));
                        }
                        None => groups.push((partition, vec![place], vec![(token, disposition)])),
                    }
                }
                let queue = address.queue;
                for (partition, places, items) in groups {
                    // A token naming a partition the entity does not have stays "lock lost".
                    if let Some(handle) = entity.partition(partition) {
                        let answer =
                            handle.ask(move |reply| Command::Settle { queue, items, reply });
                        asked.push((places, answer));
                    }
                }
            }
        }
        async move {
            for (places, answer) in asked {
                match answer.await {
                    Ok(answers) => {
                        for (place, outcome) in places.into_iter().zip(answers) {
                            outcomes[place] = outcome;
                        }
                    }
                    Err(error) => {
                        for place in places {
                            outcomes[place] = Err(error.clone());
                        }
                    }
                }
            }
            outcomes
        }
    }

    /// Completes a locked message.
    pub async fn complete(
        &self,
        address: impl Into<EntityAddress>,
        token: LockToken,
    ) -> Result<()> {
        self.settle(address, token, Disposition::Complete).await
    }

    /// Extends a message's lock by the entity's lock duration from now. Returns the new expiry.
    pub async fn renew_lock(
        &self,
        address: impl Into<EntityAddress>,
        token: LockToken,
    ) -> Result<Timestamp> {
        let address = address.into();
        let entity = self.entity(&address.entity)?;
        let partition = entity.partition(token.partition()).ok_or(BrokerError::MessageLockLost)?;
        let queue = address.queue;
        partition.ask(|reply| Command::RenewLock { queue, token, reply }).await
    }

    /// Receives deferred messages by sequence number, in the order asked. Fails with
    /// [`BrokerError::MessageNotFound`] if one is not deferred (or is locked).
    pub async fn receive_deferred(
        &self,
        address: impl Into<EntityAddress>,
        sequence_numbers: &[SequenceNumber],
        mode: ReceiveMode,
    ) -> Result<Vec<ReceivedMessage>> {
        let address = address.into();
        let entity = self.entity(&address.entity)?;
        self.check_receive(&entity)?;
        self.check_not_forwarded(&entity, address.queue)?;
        let partitioned = entity.partitioned();
        if let Some(&seq) =
            sequence_numbers.iter().find(|s| entity.partition(s.partition(partitioned)).is_none())
        {
            return Err(BrokerError::MessageNotFound(seq));
        }
        let mut received = Vec::with_capacity(sequence_numbers.len());
        for (partition, seqs) in by_partition(&entity, sequence_numbers) {
            let queue = address.queue;
            received.extend(
                partition
                    .ask(|reply| Command::ReceiveDeferred {
                        queue,
                        sequence_numbers: seqs,
                        mode,
                        reply,
                    })
                    .await?,
            );
        }
        let order: HashMap<SequenceNumber, usize> =
            sequence_numbers.iter().enumerate().map(|(i, s)| (*s, i)).collect();
        received.sort_by_key(|m| order[&m.broker.sequence_number]);
        Ok(received)
    }

    /// Up to `max` messages from sequence number `from` on, without locking them. On a
    /// partitioned entity the answer comes from one partition: the one `from` names, or the
    /// next one that has messages; asking again from the last number plus one enumerates every
    /// message exactly once.
    pub async fn peek(
        &self,
        address: impl Into<EntityAddress>,
        from: SequenceNumber,
        max: usize,
    ) -> Result<Vec<ReceivedMessage>> {
        let address = address.into();
        let entity = self.entity(&address.entity)?;
        self.check_not_forwarded(&entity, address.queue)?;
        let partitioned = entity.partitioned();
        let mut partition = from.partition(partitioned);
        let mut start = from;
        while let Some(handle) = entity.partition(partition) {
            let queue = address.queue;
            let found =
                handle.ask(|reply| Command::Peek { queue, from: start, max, reply }).await?;
            if !found.is_empty() || !partitioned {
                return Ok(found);
            }
            partition = PartitionId(partition.0 + 1);
            start = SequenceNumber::new(true, partition, 0);
        }
        Ok(Vec::new())
    }
}

/// Bytes a started send counts against its entity's size until it is answered (or dropped).
struct Reservation {
    entity: Arc<EntityHandle>,
    bytes: u64,
}

impl Reservation {
    /// Reserves `incoming` bytes of `entity`'s size, or refuses them with QuotaExceeded: what
    /// is stored, plus what earlier sends have queued and not yet stored (a transport pipelines
    /// a link's sends), must leave room. The bytes stay reserved until the reservation drops.
    fn take(entity: &Arc<EntityHandle>, incoming: u64) -> Result<Reservation> {
        let stored: u64 = entity.partitions.iter().map(|p| p.shared.size_bytes()).sum();
        let limit = entity.description().max_size_in_megabytes.saturating_mul(1024 * 1024);
        let pending = entity.pending_bytes.fetch_add(incoming, Ordering::AcqRel);
        let reservation = Reservation { entity: entity.clone(), bytes: incoming };
        if stored + pending + incoming > limit {
            let used = stored + pending;
            return Err(BrokerError::QuotaExceeded(format!(
                "{} is full: {used} of {limit} bytes used",
                entity.path
            )));
        }
        Ok(reservation)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.entity.pending_bytes.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Stores keyless messages in the next partition in turn, skipping unavailable ones: those
/// known to be unavailable last, and those that turn out to be so on the way. The first
/// attempt is queued before this returns.
fn send_round_robin(entity: Arc<EntityHandle>, messages: Vec<Arc<Message>>) -> SendFuture {
    let order: Vec<PartitionId> =
        entity.round_robin.order(entity.partitions.len() as u16).collect();
    let (up, down): (Vec<_>, Vec<_>) = order
        .into_iter()
        .partition(|p| entity.partition(*p).is_some_and(|h| h.shared.is_available()));
    let mut order = up.into_iter().chain(down);
    let first = order.next().expect("an entity has at least one partition");
    let first_try = entity
        .partition(first)
        .expect("order stays within the entity")
        .ask(|reply| Command::Send { messages: messages.clone(), reply });
    Box::pin(async move {
        let mut outcome = first_try.await;
        for partition in order {
            if !matches!(outcome, Err(BrokerError::PartitionUnavailable { .. })) {
                break;
            }
            let handle = entity.partition(partition).expect("order stays within the entity");
            outcome = handle.ask(|reply| Command::Send { messages: messages.clone(), reply }).await;
        }
        outcome
    })
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
/// Settlements bound for one partition: the partition, the items' places in the caller's
/// list, and the items.
type SettleGroup = (PartitionId, Vec<usize>, Vec<(LockToken, Disposition)>);

pub(crate) async fn ask_all<T>(
    entity: &EntityHandle,
    make: impl Fn(oneshot::Sender<Result<T>>) -> Command,
) -> Vec<Result<T>> {
    let mut pending = Vec::with_capacity(entity.partitions.len());
    for p in &entity.partitions {
        let (tx, rx) = oneshot::channel();
        p.send(make(tx));
        pending.push(rx);
    }
    let mut answers = Vec::with_capacity(pending.len());
    for rx in pending {
        answers.push(rx.await.unwrap_or(Err(BrokerError::ShuttingDown)));
    }
    answers
}
