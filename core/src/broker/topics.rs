//! Topics, subscriptions and rules: their management, and how their entities are started.
//!
//! A topic is an entity with partitions like a queue; a subscription is a *lane* in each of
//! its topic's partitions (see `partition/topic.rs`), reached through handles of its own; a
//! rule has no partitions: its record is read into its subscription's compiled [`RuleSet`],
//! which is handed to the lanes whenever a rule or the subscription changes, so a rule change
//! applies to messages published after it.
//!
//! A subscription is created with its first rule (the one given, else `$Default`, a true
//! filter) in one namespace write. Quotas per topic: 2,000 subscriptions, 2,000 SQL filters
//! (true and false filters count as SQL) and 100,000 correlation filters, all counted by one
//! function over the namespace's rule records.
//!
//! **Architecture Invariant:** a subscription's records live in its topic's partitions'
//! stores, under the subscription's own entity id; a topic's delete removes its
//! subscriptions and rules in the same namespace write as the topic's own record.

use std::sync::Arc;

use super::forwarding::has_send_via_queue;
use super::{entity_info, has_partitions, Broker, EntityHandle, QueueRuntime};
use crate::address::{EntityPath, PathShape};
use crate::codec::{self, EntityRecord};
use crate::description::{
    topic::validate_child_name, RuleDescription, SubscriptionDescription, TopicDescription,
    DEFAULT_RULE_NAME, MAX_CORRELATION_FILTERS_PER_TOPIC, MAX_SQL_FILTERS_PER_TOPIC,
    MAX_SUBSCRIPTIONS_PER_TOPIC,
};
use crate::entity::{EntityDescription, EntityInfo, EntityKind};
use crate::error::{BrokerError, Result};
use crate::keys::{self, EntityId};
use crate::partition::{Command, LaneConfig, PartitionShared};
use crate::rules::RuleSet;
use crate::store::WriteBatch;
use crate::types::Timestamp;

/// A subscription's lanes as its topic's partitions start with them.
#[derive(Debug)]
pub(super) struct SubscriptionStart {
    pub(super) id: EntityId,
    pub(super) config: Arc<LaneConfig>,
    /// One per partition of the topic.
    pub(super) shareds: Vec<Arc<PartitionShared>>,
}

/// A topic's runtime figures.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicRuntime {
    pub name: String,
    pub subscription_count: u64,
    /// The rules of all its subscriptions whose filter is SQL (true and false filters included).
    pub sql_filter_count: u64,
    /// The rules of all its subscriptions whose filter is a correlation filter.
    pub correlation_filter_count: u64,
    /// Messages sent to the topic and waiting for their scheduled time.
    pub scheduled_message_count: u64,
    /// What the topic's subscriptions hold, and its scheduled messages.
    pub size_in_bytes: u64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A topic's rules by filter kind (see [`TopicRuntime`]).
#[derive(Debug, Default)]
struct FilterCounts {
    sql: usize,
    correlation: usize,
}

impl Broker {
    /// Starts every entity read from the store: queues, then each topic with the lanes of its
    /// subscriptions (rules compiled), then the subscriptions' and rules' handles.
    pub(super) fn start_all(&self, records: Vec<EntityRecord>) -> Result<()> {
        let path_of = |r: &EntityRecord| {
            EntityPath::parse(&r.name).unwrap_or_else(|_| EntityPath::verbatim(&r.name))
        };
        let parent_key = |r: &EntityRecord| path_of(r).parent().map(|p| p.key().to_owned());
        let (mut top, mut subscriptions, mut rules) = (Vec::new(), Vec::new(), Vec::new());
        for record in records {
            match record.description.kind() {
                EntityKind::Queue | EntityKind::Topic => top.push(record),
                EntityKind::Subscription => subscriptions.push(record),
                EntityKind::Rule => rules.push(record),
            }
        }
        for record in top {
            let EntityDescription::Topic(topic) = &record.description else {
                let handle = self.start_entity(record, &[])?;
                self.entities_mut().insert(handle.path.key().to_owned(), handle);
                continue;
            };
            let topic_key = path_of(&record).key().to_owned();
            let partitions = usize::from(topic.partitions());
            let mut starts = Vec::new();
            let mut subs = Vec::new();
            for sub in subscriptions.iter().filter(|s| parent_key(s).as_deref() == Some(&topic_key))
            {
                let EntityDescription::Subscription(description) = &sub.description else {
                    continue;
                };
                let sub_key = path_of(sub).key().to_owned();
                let sub_rules: Vec<(String, RuleDescription)> = rules
                    .iter()
                    .filter(|r| parent_key(r).as_deref() == Some(&sub_key))
                    .filter_map(|r| match &r.description {
                        EntityDescription::Rule(rule) => {
                            Some((path_of(r).name().to_owned(), rule.clone()))
                        }
                        _ => None,
                    })
                    .collect();
                let config =
                    lane_config(&path_of(sub), topic, description, RuleSet::compile(&sub_rules)?);
                let shareds = (0..partitions).map(|_| PartitionShared::new()).collect();
                starts.push(SubscriptionStart { id: sub.id, config, shareds });
                subs.push(sub.clone());
            }
            let handle = self.start_entity(record, &starts)?;
            self.entities_mut().insert(handle.path.key().to_owned(), handle.clone());
            for (sub, start) in subs.into_iter().zip(starts) {
                let sub = self.subscription_handle(sub, &handle, start.shareds, &start.config);
                self.entities_mut().insert(sub.path.key().to_owned(), sub);
            }
        }
        for record in rules {
            let handle = self.start_entity(record, &[])?;
            self.entities_mut().insert(handle.path.key().to_owned(), handle);
        }
        // Forwarders last: what they forward to is started.
        let all: Vec<Arc<EntityHandle>> = self.entities().values().cloned().collect();
        for entity in &all {
            self.ensure_forwarder(entity);
        }
        // Send-via transfers left from before the start get their forwarder once their
        // partitions have loaded.
        let broker = self.clone();
        tokio::spawn(async move {
            for entity in all {
                if has_send_via_queue(entity.kind) {
                    let counts = super::ask_all(&entity, |reply| Command::Counts { reply }).await;
                    if counts.into_iter().flatten().any(|c| c.send_via > 0) {
                        broker.ensure_send_via_forwarder(&entity);
                    }
                }
            }
        });
        Ok(())
    }

    /// The handle of a subscription: its topic's partitions, reached at its lanes.
    pub(super) fn subscription_handle(
        &self,
        record: EntityRecord,
        topic: &EntityHandle,
        shareds: Vec<Arc<PartitionShared>>,
        config: &LaneConfig,
    ) -> Arc<EntityHandle> {
        let path =
            EntityPath::parse(&record.name).unwrap_or_else(|_| EntityPath::verbatim(&record.name));
        let partitions =
            topic.partitions.iter().zip(shareds).map(|(p, s)| p.for_lane(record.id, s)).collect();
        Arc::new(EntityHandle {
            id: record.id,
            path,
            kind: EntityKind::Subscription,
            activity: {
                let activity = super::idle::Activity::new(self.inner.clock.clone(), &record);
                activity.also_for_topic(&topic.record());
                activity
            },
            record: std::sync::RwLock::new(record),
            description: std::sync::RwLock::new(config.description.clone()),
            partitions,
            round_robin: crate::router::RoundRobin::default(),
            pending_bytes: std::sync::atomic::AtomicU64::new(0),
            forwarder: std::sync::atomic::AtomicBool::new(false),
            send_via_forwarder: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Creates a subscription with its first rule: `default_rule` (a name and a rule) if
    /// given, else `$Default` (a True filter without action) — both in one namespace write.
    pub async fn create_subscription(
        &self,
        path: &EntityPath,
        description: SubscriptionDescription,
        default_rule: Option<(String, RuleDescription)>,
    ) -> Result<EntityInfo> {
        if path.shape() != PathShape::Subscription {
            return Err(BrokerError::invalid(
                "EntityName",
                format!("{path:?} is not the path of a subscription"),
            ));
        }
        validate_child_name("SubscriptionName", path.name())?;
        description.validate()?;
        let (rule_name, rule) = default_rule
            .unwrap_or_else(|| (DEFAULT_RULE_NAME.to_owned(), RuleDescription::default()));
        validate_child_name("RuleName", &rule_name)?;
        let rule_path = EntityPath::parse(&format!("{}/Rules/{rule_name}", path.as_str()))
            .map_err(|e| BrokerError::invalid("RuleName", e.to_string()))?;
        let rules = RuleSet::compile(&[(rule_name.clone(), rule.clone())])?;

        let _guard = self.manage().await;
        let topic = self.parent_of(path, EntityKind::Topic)?;
        if self.entities().contains_key(path.key()) {
            return Err(BrokerError::EntityAlreadyExists { entity: path.to_string() });
        }
        if self.children(&topic.path, EntityKind::Subscription).len() >= MAX_SUBSCRIPTIONS_PER_TOPIC
        {
            return Err(BrokerError::QuotaExceeded(format!(
                "topic {} already has the maximum of {MAX_SUBSCRIPTIONS_PER_TOPIC} subscriptions",
                topic.path
            )));
        }
        self.check_filter_quota(&topic.path, &rule, None)?;
        self.check_forwarding(&description, path)?;
        let topic_description = topic_description(&topic)?;
        let now = self.inner.clock.now();
        let id = self.inner.next_entity_id.load(std::sync::atomic::Ordering::Acquire);
        let record = EntityRecord {
            id,
            name: path.as_str().to_owned(),
            description: EntityDescription::Subscription(description.clone()),
            created_at: now,
            updated_at: now,
        };
        let rule_record = EntityRecord {
            id: id + 1,
            name: rule_path.as_str().to_owned(),
            description: EntityDescription::Rule(rule),
            created_at: now,
            updated_at: now,
        };
        let mut batch = WriteBatch::new();
        batch.put(keys::next_entity_id(), codec::encode_partition(id + 2));
        batch.put(keys::entity(path.key()), codec::encode_entity(&record));
        batch.put(keys::entity(rule_path.key()), codec::encode_entity(&rule_record));
        self.write_namespace(batch).await?;
        self.inner.next_entity_id.store(id + 2, std::sync::atomic::Ordering::Release);

        let config = lane_config(path, &topic_description, &description, rules);
        let shareds: Vec<Arc<PartitionShared>> =
            topic.partitions.iter().map(|_| PartitionShared::new()).collect();
        for (partition, shared) in topic.partitions.iter().zip(&shareds) {
            partition.send(Command::AddLane(Box::new(crate::partition::Lane {
                id,
                shared: shared.clone(),
                config: config.clone(),
            })));
        }
        let handle = self.subscription_handle(record.clone(), &topic, shareds, &config);
        let rule_handle = self.start_entity(rule_record, &[])?;
        let mut entities = self.entities_mut();
        entities.insert(path.key().to_owned(), handle.clone());
        entities.insert(rule_path.key().to_owned(), rule_handle);
        drop(entities);
        self.ensure_forwarder(&handle);
        tracing::info!(entity = %path, rule = %rule_name, "subscription created");
        Ok(entity_info(&record))
    }

    /// Adds a rule to a subscription; it applies to messages published from now on.
    pub(super) async fn create_rule(
        &self,
        path: &EntityPath,
        rule: RuleDescription,
    ) -> Result<EntityInfo> {
        validate_child_name("RuleName", path.name())?;
        crate::rules::compile_rule(path.name(), &rule)?;
        let _guard = self.manage().await;
        let subscription = self.parent_of(path, EntityKind::Subscription)?;
        if self.entities().contains_key(path.key()) {
            return Err(BrokerError::EntityAlreadyExists { entity: path.to_string() });
        }
        let topic_path = subscription.path.parent().expect("a subscription has a topic");
        self.check_filter_quota(&topic_path, &rule, None)?;
        let now = self.inner.clock.now();
        let id = self.inner.next_entity_id.load(std::sync::atomic::Ordering::Acquire);
        let record = EntityRecord {
            id,
            name: path.as_str().to_owned(),
            description: EntityDescription::Rule(rule),
            created_at: now,
            updated_at: now,
        };
        let mut batch = WriteBatch::new();
        batch.put(keys::next_entity_id(), codec::encode_partition(id + 1));
        batch.put(keys::entity(path.key()), codec::encode_entity(&record));
        self.write_namespace(batch).await?;
        self.inner.next_entity_id.store(id + 1, std::sync::atomic::Ordering::Release);
        let handle = self.start_entity(record.clone(), &[])?;
        self.entities_mut().insert(path.key().to_owned(), handle);
        self.reconfigure(&subscription)?;
        Ok(entity_info(&record))
    }

    /// Updates a topic, subscription or rule (the caller holds the management lock and has
    /// checked that the kinds agree).
    pub(super) async fn update_topic_entity(
        &self,
        entity: Arc<EntityHandle>,
        mut record: EntityRecord,
        description: EntityDescription,
    ) -> Result<EntityInfo> {
        match (&record.description, &description) {
            (EntityDescription::Topic(current), EntityDescription::Topic(new)) => {
                current.validate_update(new)?;
            }
            (EntityDescription::Subscription(current), EntityDescription::Subscription(new)) => {
                current.validate_update(new)?;
                self.check_forwarding(new, &entity.path)?;
            }
            (EntityDescription::Rule(_), EntityDescription::Rule(new)) => {
                crate::rules::compile_rule(entity.path.name(), new)?;
                let topic = entity.path.parent().and_then(|s| s.parent());
                if let Some(topic) = topic {
                    self.check_filter_quota(&topic, new, Some(&entity.path))?;
                }
            }
            _ => {
                return Err(BrokerError::InvalidOperation(format!(
                    "{} cannot be updated with a {} description",
                    entity.path,
                    description.kind().as_str()
                )))
            }
        }
        if has_partitions(entity.kind) {
            self.require_all_partitions(&entity).await?;
        }
        self.write_update(&entity.path, &mut record, description).await?;
        self.apply_update(&entity, record.clone())?;
        Ok(entity_info(&record))
    }

    /// Deletes a topic (with its subscriptions and rules), a subscription (with its rules and
    /// messages) or a rule. The caller holds the management lock.
    pub(super) async fn delete_topic_entity(&self, entity: Arc<EntityHandle>) -> Result<()> {
        let mut batch = WriteBatch::new();
        // What goes: the entity and everything under its path (a topic's subscriptions and
        // their rules, a subscription's rules).
        let mut gone = vec![entity.clone()];
        let mut halted = super::removal::Halted::default();
        match entity.kind {
            EntityKind::Topic => {
                self.require_all_partitions(&entity).await?;
                // Its partitions (its subscriptions' lanes with them) stop before the delete.
                halted = self.halt(&entity).await;
                for sub in self.children(&entity.path, EntityKind::Subscription) {
                    gone.extend(self.children(&sub.path, EntityKind::Rule));
                    gone.push(sub);
                }
            }
            EntityKind::Subscription => {
                self.require_all_partitions(&entity).await?;
                for partition in &entity.partitions {
                    partition.ask(Command::RemoveLane).await?;
                }
                gone.extend(self.children(&entity.path, EntityKind::Rule));
            }
            EntityKind::Rule | EntityKind::Queue => {}
        }
        for e in &gone {
            batch.delete(keys::entity(e.path.key()));
            batch.delete(keys::activity(e.id));
            if has_partitions(e.kind) {
                let prefix = keys::entity_prefix(e.id);
                let end = crate::store::prefix_end(&prefix);
                batch.delete_range(prefix, end);
            }
        }
        if let Err(e) = self.write_namespace(batch).await {
            self.resume(&entity, halted);
            return Err(e);
        }
        {
            let mut entities = self.entities_mut();
            for e in &gone {
                entities.remove(e.path.key());
            }
        }
        match entity.kind {
            EntityKind::Queue | EntityKind::Topic => entity.close(),
            // A subscription's lanes went with `RemoveLane`; a rule has no partitions.
            EntityKind::Subscription | EntityKind::Rule => {}
        }
        let ids: Vec<EntityId> =
            gone.iter().filter(|e| has_partitions(e.kind)).map(|e| e.id).collect();
        self.reclaim(&entity, &ids).await;
        match entity.kind {
            EntityKind::Rule => {
                let subscription = entity.path.parent().and_then(|p| self.entity(&p).ok());
                if let Some(subscription) = subscription {
                    self.reconfigure(&subscription)?;
                }
            }
            EntityKind::Queue | EntityKind::Topic | EntityKind::Subscription => {}
        }
        tracing::info!(entity = %entity.path, kind = entity.kind.as_str(), "entity deleted");
        Ok(())
    }

    /// The subscriptions of a topic, or the rules of a subscription, ordered by name (rules
    /// as `enumerate-rules` pages them), from `skip`, at most `top`.
    pub async fn list_children(
        &self,
        parent: &EntityPath,
        skip: usize,
        top: usize,
    ) -> Result<Vec<EntityInfo>> {
        let parent_entity = self.entity(parent)?;
        let kind = match parent_entity.kind {
            EntityKind::Topic => EntityKind::Subscription,
            EntityKind::Subscription => EntityKind::Rule,
            EntityKind::Queue | EntityKind::Rule => {
                return Err(BrokerError::EntityNotFound { entity: parent.to_string() })
            }
        };
        let children = self.children(parent, kind);
        Ok(children.iter().skip(skip).take(top).map(|e| entity_info(&e.record())).collect())
    }

    /// A topic's runtime figures.
    pub async fn get_topic_runtime(&self, path: &EntityPath) -> Result<TopicRuntime> {
        let topic = self.entity(path)?;
        match topic.kind {
            EntityKind::Topic => {}
            EntityKind::Queue | EntityKind::Subscription | EntityKind::Rule => {
                return Err(BrokerError::EntityNotFound { entity: path.to_string() })
            }
        }
        let record = topic.record();
        let counts: QueueRuntime = self.get_queue_runtime(path.as_str()).await?;
        let filters = self.filter_counts(path, None);
        Ok(TopicRuntime {
            name: record.name.clone(),
            subscription_count: self.children(path, EntityKind::Subscription).len() as u64,
            sql_filter_count: filters.sql as u64,
            correlation_filter_count: filters.correlation as u64,
            scheduled_message_count: counts.scheduled_message_count,
            size_in_bytes: topic.partitions.iter().map(|p| p.shared.size_bytes()).sum(),
            created_at: record.created_at,
            updated_at: record.updated_at,
        })
    }

    /// The entity a subscription or rule path's parent names, which must be of `kind`.
    pub(super) fn parent_of(
        &self,
        path: &EntityPath,
        kind: EntityKind,
    ) -> Result<Arc<EntityHandle>> {
        let parent = path
            .parent()
            .ok_or_else(|| BrokerError::EntityNotFound { entity: path.to_string() })?;
        match self.entity(&parent) {
            Ok(e) if e.kind == kind => Ok(e),
            _ => Err(BrokerError::EntityNotFound { entity: parent.to_string() }),
        }
    }

    /// The entities of `kind` directly under `parent`, ordered by key.
    pub(super) fn children(&self, parent: &EntityPath, kind: EntityKind) -> Vec<Arc<EntityHandle>> {
        let mut children: Vec<Arc<EntityHandle>> = self
            .entities()
            .values()
            .filter(|e| e.kind == kind)
            .filter(|e| e.path.parent().is_some_and(|p| p.key() == parent.key()))
            .cloned()
            .collect();
        children.sort_by(|a, b| a.path.key().cmp(b.path.key()));
        children
    }

    /// How many rules of a topic's subscriptions filter with SQL and with correlation filters
    /// (`except`: a rule being replaced, left out).
    fn filter_counts(&self, topic: &EntityPath, except: Option<&EntityPath>) -> FilterCounts {
        let mut counts = FilterCounts::default();
        for sub in self.children(topic, EntityKind::Subscription) {
            for r in self.children(&sub.path, EntityKind::Rule) {
                if except.is_some_and(|p| p.key() == r.path.key()) {
                    continue;
                }
                if let EntityDescription::Rule(d) = r.record().description {
                    if d.filter.is_sql() {
                        counts.sql += 1;
                    } else {
                        counts.correlation += 1;
                    }
                }
            }
        }
        counts
    }

    /// Refuses a rule that would take the topic past its SQL or correlation filter quota
    /// (`replacing`: a rule being updated, not counted twice).
    fn check_filter_quota(
        &self,
        topic: &EntityPath,
        rule: &RuleDescription,
        replacing: Option<&EntityPath>,
    ) -> Result<()> {
        let counts = self.filter_counts(topic, replacing);
        let (count, max, what) = if rule.filter.is_sql() {
            (counts.sql, MAX_SQL_FILTERS_PER_TOPIC, "SQL")
        } else {
            (counts.correlation, MAX_CORRELATION_FILTERS_PER_TOPIC, "correlation")
        };
        if count >= max {
            return Err(BrokerError::QuotaExceeded(format!(
                "topic {topic} already has the maximum of {max} {what} filters"
            )));
        }
        Ok(())
    }

    /// Compiles a subscription's rules and hands them, with its settings, to its lanes.
    pub(super) fn reconfigure(&self, subscription: &EntityHandle) -> Result<()> {
        let topic = self.parent_of(&subscription.path, EntityKind::Topic)?;
        let EntityDescription::Subscription(description) = subscription.record().description else {
            return Ok(());
        };
        let rules: Vec<(String, RuleDescription)> = self
            .children(&subscription.path, EntityKind::Rule)
            .iter()
            .filter_map(|r| match r.record().description {
                EntityDescription::Rule(rule) => Some((r.path.name().to_owned(), rule)),
                _ => None,
            })
            .collect();
        let config = lane_config(
            &subscription.path,
            &topic_description(&topic)?,
            &description,
            RuleSet::compile(&rules)?,
        );
        subscription.set_record(subscription.record(), config.description.clone());
        subscription.activity.also_for_topic(&topic.record());
        for partition in &subscription.partitions {
            partition.send(Command::Configure(config.clone()));
        }
        Ok(())
    }
}

fn topic_description(topic: &EntityHandle) -> Result<TopicDescription> {
    match topic.record().description {
        EntityDescription::Topic(d) => Ok(d),
        _ => Err(BrokerError::EntityNotFound { entity: topic.path.to_string() }),
    }
}

pub(super) fn lane_config(
    path: &EntityPath,
    topic: &TopicDescription,
    subscription: &SubscriptionDescription,
    rules: Arc<RuleSet>,
) -> Arc<LaneConfig> {
    Arc::new(LaneConfig {
        name: Arc::from(path.as_str()),
        description: Arc::new(subscription.effective(topic)),
        rules,
        takes_messages: subscription.takes_messages(),
        dead_letter_filter_errors: subscription.dead_lettering_on_filter_evaluation_exceptions,
    })
}
