//! AutoDeleteOnIdle: a queue, topic or subscription unused for its AutoDeleteOnIdle is deleted.
//!
//! **What counts as use** (Service Bus's idleness table): for a queue, sends (scheduling and
//! cancelling included), receives (an open receiver counts all the time it is open, as a
//! pending receive), settlements, lock renewals, deferred receives, peeks, session operations
//! and updates; for a subscription the same but sends (a publish to its topic is not a use of
//! the subscription), plus its rules' creation, update and deletion; for a topic, sends,
//! updates, the creation and deletion of its subscriptions, and every use of any of its
//! subscriptions. An entity holding scheduled messages is not idle. An entity with ForwardTo
//! set is never idle, nor is a topic one of whose subscriptions has it: Service Bus treats
//! auto-forwarding as a receiver always receiving. (ForwardDeadLetteredMessagesTo alone does
//! not count: it moves only what is dead-lettered.)
//!
//! **The clock.** Activity is time read from the broker's [`Clock`]; a sweep runs every
//! [`IDLE_TICK`] and deletes, through the same path as a management delete (the management
//! lock, the namespace write), each entity idle for at least its AutoDeleteOnIdle, logging
//! (`info`) its name, kind and how long it was idle, and counting
//! `ironbus_broker_entities_auto_deleted_total` by `entity_kind`.
//!
//! **Restarts and other nodes.** Each node keeps what it sees in memory ([`Activity`]) and
//! writes it through to the namespace store (`keys::activity`, a max that only grows, guarded
//! so it never outlives the entity) whenever what is stored is an [`IDLE_TICK`] behind, so the
//! stored value is never more than a tick behind any node's last activity (an open receiver's
//! entity is marked used every tick). The basis of the idle timer is the latest of: this
//! node's own activity, the entity's last update (its record), and the stored activity — taken
//! as [`STORED_MARGIN`] later than written when another node or a previous run wrote it, since
//! what came after was not yet written. A restart therefore neither resets the timer (the basis
//! is persisted, not the start time) nor shortens it (the margin covers what was not written),
//! at the price of deleting up to [`STORED_MARGIN`] late after one.
//!
//! **One deleter.** In a cluster only the node running partition 0 of the entity (of its
//! topic, for a subscription) deletes it; the namespace version makes a second delete of the
//! same entity find it gone.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{ask_all, Broker, EntityHandle, Inner};
use crate::address::EntityPath;
use crate::clock::Clock;
use crate::codec::EntityRecord;
use crate::description::TIME_SPAN_MAX;
use crate::entity::{EntityDescription, EntityKind};
use crate::error::Result;
use crate::keys;
use crate::metrics as m;
use crate::partition::Command;
use crate::store::WriteBatch;
use crate::types::Timestamp;

/// How often a node sweeps for idle entities and marks entities with open receivers used.
pub const IDLE_TICK: Duration = Duration::from_secs(30);
/// How much later than written a stored activity written elsewhere (another node, a previous
/// run) is taken to be: what a node saw after it last wrote is less than a tick later.
pub const STORED_MARGIN: Duration = Duration::from_secs(60);
/// Conflicting writers of one activity record: tries before giving up until the next use.
const PERSIST_TRIES: usize = 3;

/// What this node knows of one entity's use.
pub(crate) struct Activity {
    clock: Arc<dyn Clock>,
    /// The last use seen here (ms).
    last: AtomicI64,
    /// The latest use this node knows stored (ms; `i64::MIN`: none).
    persisted: AtomicI64,
    /// Receivers open here, each a use all the time it is open.
    receivers: AtomicUsize,
    /// A write of the activity record is under way.
    writing: AtomicBool,
    /// Whether the entity (or a subscription's topic) has an AutoDeleteOnIdle: only then is its
    /// activity stored and swept.
    enabled: AtomicBool,
}

impl std::fmt::Debug for Activity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activity").field("last", &self.last).finish_non_exhaustive()
    }
}

impl Activity {
    /// An entity last used, as far as this node knows yet, at its record's last update.
    pub(crate) fn new(clock: Arc<dyn Clock>, record: &EntityRecord) -> Self {
        Activity {
            clock,
            last: AtomicI64::new(record.updated_at.as_millis()),
            persisted: AtomicI64::new(i64::MIN),
            receivers: AtomicUsize::new(0),
            writing: AtomicBool::new(false),
            enabled: AtomicBool::new(auto_delete_on_idle(record).is_some()),
        }
    }

    /// The entity's description changed to `record`'s.
    pub(crate) fn configure(&self, record: &EntityRecord) {
        self.enabled.store(auto_delete_on_idle(record).is_some(), Ordering::Release);
    }

    /// A subscription's use is its topic's too: it is stored when its topic has an
    /// AutoDeleteOnIdle, so that every node sees it.
    pub(crate) fn also_for_topic(&self, topic: &EntityRecord) {
        if auto_delete_on_idle(topic).is_some() {
            self.enabled.store(true, Ordering::Release);
        }
    }

    /// Marks the entity used now; returns now.
    pub(crate) fn touch(&self) -> Timestamp {
        let now = self.clock.now();
        self.last.fetch_max(now.as_millis(), Ordering::AcqRel);
        now
    }

    pub(crate) fn receiver_opened(&self) {
        self.receivers.fetch_add(1, Ordering::AcqRel);
        self.touch();
    }

    pub(crate) fn receiver_closed(&self) {
        let _ =
            self.receivers.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        self.touch();
    }

    fn last(&self) -> Timestamp {
        Timestamp::from_millis(self.last.load(Ordering::Acquire))
    }

    /// Whether what is stored is far enough behind `now` to write again.
    fn stale(&self, now: Timestamp) -> bool {
        let persisted = self.persisted.load(Ordering::Acquire);
        persisted == i64::MIN
            || now.saturating_since(Timestamp::from_millis(persisted)) >= IDLE_TICK
    }
}

/// An entity's AutoDeleteOnIdle, if it has one (a rule has none; the maximum means none).
fn auto_delete_on_idle(record: &EntityRecord) -> Option<Duration> {
    let idle = match &record.description {
        EntityDescription::Queue(q) => q.auto_delete_on_idle,
        EntityDescription::Topic(t) => t.auto_delete_on_idle,
        EntityDescription::Subscription(s) => s.auto_delete_on_idle,
        EntityDescription::Rule(_) => return None,
    };
    (idle < TIME_SPAN_MAX).then_some(idle)
}

/// Whether an entity auto-forwards (ForwardTo), which Service Bus counts as always in use.
fn forwards(record: &EntityRecord) -> bool {
    match &record.description {
        EntityDescription::Queue(q) => q.forward_to.is_some(),
        EntityDescription::Subscription(s) => s.forward_to.is_some(),
        EntityDescription::Topic(_) | EntityDescription::Rule(_) => false,
    }
}

impl Broker {
    /// Marks `entity` used now, writing it through to the store when what is stored is a tick
    /// behind (in the background: the caller does not wait).
    pub(crate) fn note_activity(&self, entity: &Arc<EntityHandle>) {
        let activity = &entity.activity;
        let now = activity.touch();
        if activity.enabled.load(Ordering::Acquire)
            && activity.stale(now)
            && !activity.writing.swap(true, Ordering::AcqRel)
        {
            let (broker, entity) = (self.clone(), entity.clone());
            tokio::spawn(async move {
                broker.persist_activity(&entity, now).await;
                entity.activity.writing.store(false, Ordering::Release);
            });
        }
    }

    /// A management operation on `path` (create, update, delete) uses the entity there and
    /// those above it: a rule's subscription, a subscription's topic.
    pub(super) fn note_management(&self, path: &EntityPath) {
        let mut at = Some(path.clone());
        while let Some(path) = at {
            if let Ok(entity) = self.entity(&path) {
                self.note_activity(&entity);
            }
            at = path.parent();
        }
    }

    /// Stores `at` as the entity's activity unless what is stored is later, and only while
    /// the entity's record is the one read (so the record never outlives a delete).
    async fn persist_activity(&self, entity: &EntityHandle, at: Timestamp) {
        let store = self.namespace_store();
        let key = keys::activity(entity.id);
        let record_key = keys::entity(entity.path.key());
        for _ in 0..PERSIST_TRIES {
            let read = async {
                Ok::<_, crate::store::StoreError>((
                    store.get(&key).await?,
                    store.get(&record_key).await?,
                ))
            };
            let (stored, record) = match read.await {
                Ok(read) => read,
                Err(e) => {
                    tracing::debug!(entity = %entity.path, error = %e, "could not store activity");
                    return;
                }
            };
            // The record is this entity's (not a new one under the same path), or it is gone.
            let ours = record
                .as_deref()
                .and_then(|r| crate::codec::decode_entity(r).ok())
                .is_some_and(|r| r.id == entity.id);
            if !ours {
                return;
            }
            if decode(stored.as_deref()).is_some_and(|s| s >= at) {
                entity.activity.persisted.fetch_max(at.as_millis(), Ordering::AcqRel);
                return;
            }
            let mut batch = WriteBatch::new();
            batch.require(record_key.clone(), record);
            batch.require(key.clone(), stored);
            batch.put(key.clone(), bytes::Bytes::copy_from_slice(&at.as_millis().to_be_bytes()));
            match store.write(batch).await {
                Ok(()) => {
                    entity.activity.persisted.fetch_max(at.as_millis(), Ordering::AcqRel);
                    return;
                }
                Err(e) if e.kind == crate::store::StoreErrorKind::Conflict => continue,
                Err(e) => {
                    tracing::debug!(entity = %entity.path, error = %e, "could not store activity");
                    return;
                }
            }
        }
    }

    /// Starts the sweep for idle entities: every [`IDLE_TICK`] on the broker's clock, until
    /// the broker is dropped.
    pub(super) fn start_idle_sweep(&self) {
        let inner: Weak<Inner> = Arc::downgrade(&self.inner);
        let clock = self.inner.clock.clone();
        tokio::spawn(async move {
            loop {
                clock.sleep_until(clock.now().saturating_add(IDLE_TICK)).await;
                let Some(inner) = inner.upgrade() else { return };
                Broker { inner }.sweep_idle().await;
            }
        });
    }

    /// One sweep for idle entities, as the broker runs every [`IDLE_TICK`] on its clock: marks
    /// entities with open receivers used, stores activity not yet stored, and deletes the
    /// entities idle for their AutoDeleteOnIdle that this node is the deleter of.
    pub async fn sweep_idle(&self) {
        let entities: Vec<Arc<EntityHandle>> = self
            .entities()
            .values()
            .filter(|e| e.activity.enabled.load(Ordering::Acquire))
            .cloned()
            .collect();
        for entity in &entities {
            let activity = &entity.activity;
            if activity.receivers.load(Ordering::Acquire) > 0 {
                self.note_activity(entity);
            } else if activity.last.load(Ordering::Acquire)
                > activity.persisted.load(Ordering::Acquire)
                && !activity.writing.swap(true, Ordering::AcqRel)
            {
                self.persist_activity(entity, activity.last()).await;
                activity.writing.store(false, Ordering::Release);
            }
        }
        for entity in entities {
            let deleter = entity.partitions.first().is_some_and(|p| p.route.is_local());
            if !deleter {
                continue;
            }
            if let Err(e) = self.delete_if_idle(&entity).await {
                tracing::warn!(entity = %entity.path, error = %e, "could not delete an idle entity");
            }
        }
    }

    /// Deletes `entity` if it is idle, checking again under the management lock.
    async fn delete_if_idle(&self, entity: &Arc<EntityHandle>) -> Result<()> {
        // Gone already (with its topic, earlier in this sweep, say).
        if !self.entity(&entity.path).is_ok_and(|e| e.id == entity.id) {
            return Ok(());
        }
        if self.idle_for(entity).await?.is_none() {
            return Ok(());
        }
        let _guard = self.manage().await;
        let current = match self.entity(&entity.path) {
            Ok(current) if current.id == entity.id => current,
            _ => return Ok(()),
        };
        let Some((idle, limit)) = self.idle_for(&current).await? else { return Ok(()) };
        match current.kind {
            EntityKind::Queue => self.delete_queue_entity(current.clone()).await?,
            EntityKind::Topic | EntityKind::Subscription => {
                self.delete_topic_entity(current.clone()).await?
            }
            EntityKind::Rule => return Ok(()),
        }
        let kind = current.kind.as_str();
        metrics::counter!(m::ENTITIES_AUTO_DELETED_TOTAL, "entity_kind" => kind).increment(1);
        tracing::info!(
            entity = %current.path,
            kind,
            idle_seconds = idle.as_secs(),
            auto_delete_on_idle_seconds = limit.as_secs(),
            "entity deleted: idle for its AutoDeleteOnIdle"
        );
        Ok(())
    }

    /// How long `entity` has been idle and its AutoDeleteOnIdle, if at least that (else `None`).
    async fn idle_for(&self, entity: &EntityHandle) -> Result<Option<(Duration, Duration)>> {
        let record = entity.record();
        let Some(limit) = auto_delete_on_idle(&record) else { return Ok(None) };
        if forwards(&record) {
            return Ok(None);
        }
        let mut basis = self.activity_basis(entity, &record).await?;
        if entity.kind == EntityKind::Topic {
            for sub in self.children(&entity.path, EntityKind::Subscription) {
                let sub_record = sub.record();
                if forwards(&sub_record) {
                    return Ok(None);
                }
                basis = basis.max(self.activity_basis(&sub, &sub_record).await?);
            }
        }
        let idle = self.inner.clock.now().saturating_since(basis);
        if idle < limit {
            return Ok(None);
        }
        // Scheduled messages keep an entity in use (every partition must answer anyway for
        // the delete).
        for counts in ask_all(entity, |reply| Command::Counts { reply }).await {
            if counts?.scheduled > 0 {
                entity.activity.touch();
                return Ok(None);
            }
        }
        Ok(Some((idle, limit)))
    }

    /// The latest use of `entity` known: here, by its record, and as stored.
    async fn activity_basis(
        &self,
        entity: &EntityHandle,
        record: &EntityRecord,
    ) -> Result<Timestamp> {
        let stored = self.namespace_store().get(&keys::activity(entity.id)).await?;
        let mut basis = entity.activity.last().max(record.updated_at);
        if entity.activity.receivers.load(Ordering::Acquire) > 0 {
            // A receiver open here is a receive under way.
            basis = basis.max(self.inner.clock.now());
        }
        if let Some(stored) = decode(stored.as_deref()) {
            let ours = entity.activity.persisted.load(Ordering::Acquire);
            basis = basis.max(if stored.as_millis() > ours {
                stored.saturating_add(STORED_MARGIN)
            } else {
                stored
            });
        }
        Ok(basis)
    }
}

fn decode(value: Option<&[u8]>) -> Option<Timestamp> {
    let bytes: [u8; 8] = value?.try_into().ok()?;
    Some(Timestamp::from_millis(i64::from_be_bytes(bytes)))
}
