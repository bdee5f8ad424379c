//! The namespace in the store, shared by every node that opens it (`CLUSTER.md` §2).
//!
//! Every management write moves the namespace **version** (`keys::namespace_version`) by
//! compare-and-set in the same batch, so two nodes never write the namespace from the same
//! view: the second one's write meets `Conflict`, which the caller sees as a retriable
//! error after this node has re-read the namespace. A node learns what others changed by
//! [refreshing](Broker::refresh_namespace): when the version moved, it reads every entity
//! record and applies the difference to what it runs — entities started or closed, lanes
//! added, removed or reconfigured, descriptions updated — exactly as if the change had been
//! made through it. A cluster node refreshes before each management operation and whenever
//! its ownership round asks it to.
//!
//! **Architecture Invariant:** the namespace version only grows, by one per management
//! write; a node's view of the namespace is the store's at the version it holds.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::topics::lane_config;
use super::{Broker, EntityHandle};
use crate::address::EntityPath;
use crate::codec::{self, EntityRecord};
use crate::description::RuleDescription;
use crate::entity::{EntityDescription, EntityKind};
use crate::error::{BrokerError, Result};
use crate::keys;
use crate::partition::{Command, Lane, PartitionShared};
use crate::rules::RuleSet;
use crate::store::{StoreError, StoreErrorKind, WriteBatch};

impl Broker {
    /// Writes a management batch to the namespace store, moving the namespace version by
    /// compare-and-set (the caller holds the management lock).
    pub(super) async fn write_namespace(&self, mut batch: WriteBatch) -> Result<()> {
        let version = self.inner.namespace_version.load(Ordering::Acquire);
        let key = keys::namespace_version();
        batch.require(key.clone(), (version > 0).then(|| codec::encode_partition(version)));
        batch.put(key, codec::encode_partition(version + 1));
        match self.namespace_store().write(batch).await {
            Ok(()) => {
                self.inner.namespace_version.store(version + 1, Ordering::Release);
                let listener =
                    self.inner.namespace_listener.read().unwrap_or_else(|e| e.into_inner()).clone();
                if let Some(listener) = listener {
                    listener.changed(version + 1).await;
                }
                Ok(())
            }
            Err(e) if e.kind == StoreErrorKind::Conflict => {
                // Another node wrote first: learn what it did, and let the caller try again.
                if let Err(e) = self.refresh_locked().await {
                    tracing::warn!(error = %e, "could not re-read the namespace");
                }
                Err(BrokerError::Store(StoreError::unavailable(
                    "the namespace changed on another node meanwhile; retry",
                )))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Takes the management lock; a cluster node first brings its view of the namespace up
    /// to date, so that it checks an operation against what every node did.
    pub(super) async fn manage(&self) -> tokio::sync::MutexGuard<'_, ()> {
        let guard = self.inner.management.lock().await;
        if self.inner.cluster {
            if let Err(e) = self.refresh_locked().await {
                tracing::warn!(error = %e, "could not re-read the namespace");
            }
        }
        guard
    }

    /// Applies what other nodes changed in the namespace since this node last looked: returns
    /// whether anything had. One read when nothing changed.
    pub async fn refresh_namespace(&self) -> Result<bool> {
        let _guard = self.inner.management.lock().await;
        self.refresh_locked().await
    }

    /// Re-reads the namespace unless a management operation holds it now (which re-reads it
    /// itself); for another node's notice that it changed the namespace.
    pub async fn refresh_namespace_if_idle(&self) -> Result<bool> {
        match self.inner.management.try_lock() {
            Ok(_guard) => self.refresh_locked().await,
            Err(_) => Ok(false),
        }
    }

    /// Tells `listener` of every management write this node makes, once it is durable and
    /// before the operation answers: a cluster node has the other nodes re-read the
    /// namespace then, so that what a client created through one node is there on every node
    /// by the time the client hears back.
    pub fn set_namespace_listener(&self, listener: Arc<dyn NamespaceListener>) {
        *self.inner.namespace_listener.write().unwrap_or_else(|e| e.into_inner()) = Some(listener);
    }

    /// The namespace version in the store (0 before the first management write).
    pub(super) async fn stored_namespace_version(&self) -> Result<u64> {
        match self.namespace_store().get(&keys::namespace_version()).await? {
            Some(v) => Ok(codec::decode_partition(&v)?),
            None => Ok(0),
        }
    }

    async fn refresh_locked(&self) -> Result<bool> {
        let version = self.stored_namespace_version().await?;
        if version == self.inner.namespace_version.load(Ordering::Acquire) {
            return Ok(false);
        }
        let records = self.read_records().await?;
        if let Some(v) = self.namespace_store().get(&keys::next_entity_id()).await? {
            self.inner.next_entity_id.store(codec::decode_partition(&v)?, Ordering::Release);
        }
        self.apply_records(records)?;
        self.inner.namespace_version.store(version, Ordering::Release);
        tracing::debug!(version, "namespace refreshed");
        Ok(true)
    }

    /// Every entity record in the namespace store.
    pub(super) async fn read_records(&self) -> Result<Vec<EntityRecord>> {
        let prefix = keys::entities_prefix();
        let end = crate::store::prefix_end(&prefix);
        let mut start = prefix.to_vec();
        let mut records = Vec::new();
        loop {
            let page = self.namespace_store().scan(&start, &end, 256).await?;
            for (_, value) in &page {
                records.push(codec::decode_entity(value)?);
            }
            match page.last() {
                Some((last, _)) if page.len() == 256 => {
                    start = last.to_vec();
                    start.push(0);
                }
                _ => return Ok(records),
            }
        }
    }

    /// Makes the running entities what `records` describe.
    fn apply_records(&self, records: Vec<EntityRecord>) -> Result<()> {
        let stored: HashMap<String, EntityRecord> =
            records.into_iter().map(|r| (path_of(&r).key().to_owned(), r)).collect();
        let running: Vec<Arc<EntityHandle>> = self.entities().values().cloned().collect();
        let mut reconfigure: Vec<EntityPath> = Vec::new();

        // Gone (or deleted and created again: a new id): rules, subscriptions, then the rest.
        let mut gone: Vec<&Arc<EntityHandle>> = running
            .iter()
            .filter(|e| stored.get(e.path.key()).map(|r| r.id) != Some(e.id))
            .collect();
        gone.sort_by_key(|e| std::cmp::Reverse(depth(e.kind)));
        for entity in gone {
            self.entities_mut().remove(entity.path.key());
            match entity.kind {
                EntityKind::Queue | EntityKind::Topic => entity.close(),
                EntityKind::Subscription => {
                    for partition in &entity.partitions {
                        drop(partition.ask(Command::RemoveLane));
                    }
                }
                EntityKind::Rule => reconfigure.extend(entity.path.parent()),
            }
        }

        // New: queues and topics, then subscriptions, then rules.
        let mut new: Vec<&EntityRecord> = stored
            .iter()
            .filter(|(key, r)| self.entities().get(*key).map(|e| e.id) != Some(r.id))
            .map(|(_, r)| r)
            .collect();
        new.sort_by_key(|r| depth(r.description.kind()));
        for record in new {
            let path = path_of(record);
            match record.description.kind() {
                EntityKind::Queue | EntityKind::Topic | EntityKind::Rule => {
                    let handle = self.start_entity(record.clone(), &[])?;
                    self.entities_mut().insert(path.key().to_owned(), handle.clone());
                    self.ensure_forwarder(&handle);
                    if record.description.kind() == EntityKind::Rule {
                        reconfigure.extend(path.parent());
                    }
                }
                EntityKind::Subscription => self.start_subscription(record, &stored)?,
            }
        }

        // Changed in place.
        for (key, record) in &stored {
            let Some(entity) = self.entities().get(key).cloned() else { continue };
            if entity.id != record.id || entity.record() == *record {
                continue;
            }
            self.apply_update(&entity, record.clone())?;
        }
        reconfigure.sort_by(|a, b| a.key().cmp(b.key()));
        reconfigure.dedup_by(|a, b| a.key() == b.key());
        for path in reconfigure {
            if let Ok(subscription) = self.entity(&path) {
                self.reconfigure(&subscription)?;
            }
        }
        Ok(())
    }

    /// Takes an entity's updated record (written by this node or another): its description
    /// and, by kind, its partitions', its lanes' rules and its forwarder.
    pub(super) fn apply_update(
        &self,
        entity: &Arc<EntityHandle>,
        record: EntityRecord,
    ) -> Result<()> {
        match &record.description {
            EntityDescription::Queue(queue) => {
                let description = Arc::new(queue.clone());
                entity.set_record(record, description.clone());
                for p in &entity.partitions {
                    p.send(Command::Update(description.clone()));
                }
                self.ensure_forwarder(entity);
            }
            EntityDescription::Topic(topic) => {
                let effective = Arc::new(topic.effective());
                let filtering = topic.filtering_messages_before_publishing;
                entity.set_record(record, effective.clone());
                for p in &entity.partitions {
                    p.send(Command::Update(effective.clone()));
                    p.send(Command::Filtering(filtering));
                }
                for subscription in self.children(&entity.path, EntityKind::Subscription) {
                    self.reconfigure(&subscription)?;
                }
            }
            EntityDescription::Subscription(_) => {
                entity.set_record(record, entity.description());
                self.reconfigure(entity)?;
                self.ensure_forwarder(entity);
            }
            EntityDescription::Rule(_) => {
                entity.set_record(record, entity.description());
                if let Some(subscription) = entity.path.parent().and_then(|p| self.entity(&p).ok())
                {
                    self.reconfigure(&subscription)?;
                }
            }
        }
        Ok(())
    }

    /// Starts a subscription another node created: a lane in each of its topic's partitions,
    /// with the rules `stored` holds for it.
    fn start_subscription(
        &self,
        record: &EntityRecord,
        stored: &HashMap<String, EntityRecord>,
    ) -> Result<()> {
        let path = path_of(record);
        let EntityDescription::Subscription(description) = &record.description else {
            return Ok(());
        };
        let topic = self.parent_of(&path, EntityKind::Topic)?;
        let EntityDescription::Topic(topic_description) = topic.record().description else {
            return Ok(());
        };
        let rules: Vec<(String, RuleDescription)> = stored
            .values()
            .filter(|r| path_of(r).parent().is_some_and(|p| p.key() == path.key()))
            .filter_map(|r| match &r.description {
                EntityDescription::Rule(rule) => Some((path_of(r).name().to_owned(), rule.clone())),
                _ => None,
            })
            .collect();
        let config = lane_config(&path, &topic_description, description, RuleSet::compile(&rules)?);
        let shareds: Vec<Arc<PartitionShared>> =
            topic.partitions.iter().map(|_| PartitionShared::new()).collect();
        for (partition, shared) in topic.partitions.iter().zip(&shareds) {
            partition.send(Command::AddLane(Box::new(Lane {
                id: record.id,
                shared: shared.clone(),
                config: config.clone(),
            })));
        }
        let handle = self.subscription_handle(record.clone(), &topic, shareds, &config);
        self.entities_mut().insert(path.key().to_owned(), handle.clone());
        self.ensure_forwarder(&handle);
        Ok(())
    }
}

/// What hears of this node's management writes (see [`Broker::set_namespace_listener`]).
#[async_trait::async_trait]
pub trait NamespaceListener: Send + Sync + 'static {
    /// The namespace is at `version` now. Bounded in time by the implementation: the
    /// management operation waits for it.
    async fn changed(&self, version: u64);
}

fn path_of(record: &EntityRecord) -> EntityPath {
    EntityPath::parse(&record.name).unwrap_or_else(|_| EntityPath::verbatim(&record.name))
}

/// How deep an entity of this kind sits: what must exist before it starts.
fn depth(kind: EntityKind) -> u8 {
    match kind {
        EntityKind::Queue | EntityKind::Topic => 0,
        EntityKind::Subscription => 1,
        EntityKind::Rule => 2,
    }
}
