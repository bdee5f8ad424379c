//! Queues: the queue-named management calls (`create_queue`, `get_queue`, `list_queues`,
//! `get_queue_runtime`, `update_queue`, `delete_queue`) over the management generic over the
//! kind in `broker.rs`, a queue's own update and delete (where `update_entity` and
//! `delete_entity` send a queue), and what management returns of a queue: [`QueueInfo`] and
//! [`QueueRuntime`] (and per partition [`PartitionRuntime`]). A queue is created like a topic, by `create_top_level` in `broker.rs`.
//!
//! Invariants kept here: a queue's update and delete run under the management lock and only
//! when every partition is available; the entity record is the commit point of both (one
//! namespace write), and what other stores hold of a deleted queue is reclaimed after it,
//! only logged if a store cannot; runtime counts leave out a partition that cannot answer and
//! name it, rather than failing.

use std::sync::Arc;

use super::{ask_all, entity_info, Broker, EntityHandle};
use crate::address::EntityPath;
use crate::codec::EntityRecord;
use crate::description::{validate_entity_name, QueueDescription};
use crate::entity::{EntityDescription, EntityInfo, EntityKind};
use crate::error::{BrokerError, Result};
use crate::keys;
use crate::partition::{Command, PartitionCounts};
use crate::store::WriteBatch;
use crate::types::{PartitionId, Timestamp};

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

/// One partition's runtime: its counts, or `None` when it could not answer (unavailable).
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionRuntime {
    pub partition: PartitionId,
    pub counts: Option<PartitionCountsView>,
}

/// One partition's counts, as [`QueueRuntime`] names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionCountsView {
    pub active_message_count: u64,
    pub dead_letter_message_count: u64,
    pub scheduled_message_count: u64,
    pub deferred_message_count: u64,
    pub transfer_message_count: u64,
    pub size_in_bytes: u64,
    /// Messages accepted and handed to receivers since the partitions last started (a
    /// restart starts again from zero): message rates are the change of these over time.
    pub incoming_messages_total: u64,
    pub outgoing_messages_total: u64,
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
    /// Messages accepted and handed to receivers since the partitions last started (a
    /// restart starts again from zero): message rates are the change of these over time.
    pub incoming_messages_total: u64,
    pub outgoing_messages_total: u64,
    pub availability: Availability,
    /// Partitions that could not answer (their counts are missing from the sums).
    pub unavailable_partitions: Vec<PartitionId>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl Broker {
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

    /// A queue's description.
    pub async fn get_queue(&self, name: &str) -> Result<QueueInfo> {
        QueueInfo::from_entity(&entity_info(&self.entity_named(name)?.record()))
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
                    total.incoming_total += c.incoming_total;
                    total.outgoing_total += c.outgoing_total;
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
            incoming_messages_total: total.incoming_total,
            outgoing_messages_total: total.outgoing_total,
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

    /// Each partition's counts of a queue, topic or subscription, in partition order; a
    /// partition that cannot answer is listed without counts (`None`), never an error.
    pub async fn get_partition_runtimes(&self, name: &str) -> Result<Vec<PartitionRuntime>> {
        let entity = self.entity_named(name)?;
        let answers = ask_all(&entity, |reply| Command::Counts { reply }).await;
        Ok(entity
            .partitions
            .iter()
            .zip(answers)
            .map(|(partition, answer)| PartitionRuntime {
                partition: partition.id,
                counts: answer.ok().map(|c| PartitionCountsView {
                    active_message_count: c.active,
                    dead_letter_message_count: c.dead_lettered,
                    scheduled_message_count: c.scheduled,
                    deferred_message_count: c.deferred,
                    transfer_message_count: c.transfer,
                    size_in_bytes: c.size_bytes,
                    incoming_messages_total: c.incoming_total,
                    outgoing_messages_total: c.outgoing_total,
                }),
            })
            .collect())
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

    /// Deletes a queue and every message in it (see [`Broker::delete_entity`]).
    pub async fn delete_queue(&self, name: &str) -> Result<()> {
        let path = self.entity_named(name)?.path.clone();
        self.delete_entity(&path).await
    }

    /// Updates a queue (the caller holds the management lock and has checked that the kinds
    /// agree): the properties fixed at creation must not change, the forwarding rules must name
    /// existing entities, and every partition must be available.
    pub(super) async fn update_queue_entity(
        &self,
        entity: Arc<EntityHandle>,
        mut record: EntityRecord,
        description: EntityDescription,
    ) -> Result<EntityInfo> {
        let (EntityDescription::Queue(current), EntityDescription::Queue(new)) =
            (&record.description, &description)
        else {
            return Err(BrokerError::InvalidOperation(format!(
                "{} cannot be updated with a {} description",
                entity.path,
                description.kind().as_str()
            )));
        };
        current.validate_update(new)?;
        self.check_forwarding(new, &entity.path)?;
        self.require_all_partitions(&entity).await?;
        self.write_update(&entity.path, &mut record, description).await?;
        self.apply_update(&entity, record.clone())?;
        Ok(entity_info(&record))
    }

    /// Deletes a queue and every message in it (the caller holds the management lock): its
    /// partitions stop first (see `broker/removal.rs`), then one namespace write removes its
    /// record and its messages; what other stores hold of it is reclaimed afterwards.
    pub(super) async fn delete_queue_entity(&self, entity: Arc<EntityHandle>) -> Result<()> {
        self.require_all_partitions(&entity).await?;
        let halted = self.halt(&entity).await;
        let mut batch = WriteBatch::new();
        batch.delete(keys::entity(entity.path.key()));
        batch.delete(keys::activity(entity.id));
        let prefix = keys::entity_prefix(entity.id);
        let end = crate::store::prefix_end(&prefix);
        batch.delete_range(prefix, end);
        if let Err(e) = self.write_namespace(batch).await {
            self.resume(&entity, halted);
            return Err(e);
        }
        self.entities_mut().remove(entity.path.key());
        entity.close();
        self.reclaim(&entity, &[entity.id]).await;
        tracing::info!(entity = %entity.path, kind = entity.kind.as_str(), "entity deleted");
        Ok(())
    }
}
