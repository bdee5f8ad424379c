//! Entity records: a queue, topic, subscription or rule as stored ([`EntityRecord`]), with its
//! kind's description and, for queues and topics, its authorization rules.
//!
//! Invariants:
//! - A record is written with the lowest version that holds it (version 1 without rules,
//!   version 2 with rules, version 3 for a queue that sets auto-delete or express), so every
//!   other record keeps its earlier bytes; decoders read all three.
//! - The kind byte, status codes and rights bits are part of the stored format and never
//!   change meaning.
//! - A rule count read from a record is checked against the bytes that remain (13 bytes at
//!   least per rule) before anything is reserved.

use bytes::Bytes;

use super::primitives::{DecodeResult, Reader, Writer};
use super::properties::{decode_pairs, encode_pairs};
use super::V1;
use crate::auth::{AuthorizationRule, Right};
use crate::description::{
    CorrelationFilter, EntityStatus, QueueDescription, RuleAction, RuleDescription, RuleFilter,
    SubscriptionDescription, TopicDescription, TIME_SPAN_MAX,
};
use crate::entity::{EntityDescription, EntityKind};
use crate::types::Timestamp;

/// Entity records: version 1, or version 2 when a queue or topic has authorization rules (they
/// follow the kind's fields); a record without rules is still written as version 1.
const ENTITY_VERSION_2: u8 = 2;
/// Version 2 and, after the authorization rules, a queue's `AutoDeleteOnIdle` and
/// `EnableExpress`. Written only for a queue that sets either, so that every other record keeps
/// its earlier bytes.
const ENTITY_VERSION_3: u8 = 3;

/// An entity as stored, under the key of its path ([`crate::keys::entity`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EntityRecord {
    pub id: u64,
    /// The path as the user spelled it at creation.
    pub name: String,
    /// The entity's kind and its kind-specific description.
    pub description: EntityDescription,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// The kind byte of an entity record (queues since version 1; topics, subscriptions and rules
/// since those kinds were built).
fn entity_kind_code(kind: EntityKind) -> u8 {
    match kind {
        EntityKind::Queue => 1,
        EntityKind::Topic => 2,
        EntityKind::Subscription => 3,
        EntityKind::Rule => 4,
    }
}

/// The status byte of a queue, topic or subscription (read back by `Reader::status`).
fn status_code(status: EntityStatus) -> u8 {
    match status {
        EntityStatus::Active => 0,
        EntityStatus::Disabled => 1,
        EntityStatus::SendDisabled => 2,
        EntityStatus::ReceiveDisabled => 3,
    }
}

impl Reader<'_> {
    /// A status byte written by [`status_code`]; any other byte is corruption.
    fn status(&mut self) -> DecodeResult<EntityStatus> {
        Ok(match self.u8()? {
            0 => EntityStatus::Active,
            1 => EntityStatus::Disabled,
            2 => EntityStatus::SendDisabled,
            3 => EntityStatus::ReceiveDisabled,
            s => return Err(self.corrupted(&format!("unknown status {s}"))),
        })
    }
}

pub(crate) fn encode_entity(record: &EntityRecord) -> Bytes {
    let rules = entity_rules(&record.description);
    let queue_v3 = match &record.description {
        EntityDescription::Queue(d)
            if d.auto_delete_on_idle != TIME_SPAN_MAX || d.enable_express =>
        {
            Some((d.auto_delete_on_idle, d.enable_express))
        }
        _ => None,
    };
    let version = match (queue_v3, rules.is_empty()) {
        (Some(_), _) => ENTITY_VERSION_3,
        (None, false) => ENTITY_VERSION_2,
        (None, true) => V1,
    };
    let mut w = Writer::versioned(version, 128);
    w.u64(record.id);
    w.str(&record.name);
    w.i64(record.created_at.as_millis());
    w.i64(record.updated_at.as_millis());
    w.u8(entity_kind_code(record.description.kind()));
    match &record.description {
        EntityDescription::Queue(d) => {
            w.duration(d.lock_duration);
            w.u32(d.max_delivery_count);
            w.duration(d.default_message_time_to_live);
            w.bool(d.dead_lettering_on_message_expiration);
            w.bool(d.requires_duplicate_detection);
            w.duration(d.duplicate_detection_history_time_window);
            w.bool(d.requires_session);
            w.bool(d.enable_partitioning);
            w.u16(d.partition_count);
            w.u64(d.max_size_in_megabytes);
            w.u64(d.max_message_size_in_kilobytes);
            w.opt_str(&d.forward_to);
            w.opt_str(&d.forward_dead_lettered_messages_to);
            w.bool(d.enable_batched_operations);
            w.u8(status_code(d.status));
            w.opt_str(&d.user_metadata);
        }
        EntityDescription::Topic(d) => {
            w.duration(d.default_message_time_to_live);
            w.u64(d.max_size_in_megabytes);
            w.bool(d.requires_duplicate_detection);
            w.duration(d.duplicate_detection_history_time_window);
            w.bool(d.enable_batched_operations);
            w.bool(d.filtering_messages_before_publishing);
            w.u8(status_code(d.status));
            w.opt_str(&d.user_metadata);
            w.bool(d.support_ordering);
            w.duration(d.auto_delete_on_idle);
            w.bool(d.enable_partitioning);
            w.u16(d.partition_count);
            w.u64(d.max_message_size_in_kilobytes);
            w.bool(d.enable_subscription_partitioning);
            w.bool(d.enable_express);
        }
        EntityDescription::Subscription(d) => {
            w.duration(d.lock_duration);
            w.bool(d.requires_session);
            w.duration(d.default_message_time_to_live);
            w.bool(d.dead_lettering_on_message_expiration);
            w.bool(d.dead_lettering_on_filter_evaluation_exceptions);
            w.u32(d.max_delivery_count);
            w.bool(d.enable_batched_operations);
            w.u8(status_code(d.status));
            w.opt_str(&d.forward_to);
            w.opt_str(&d.forward_dead_lettered_messages_to);
            w.opt_str(&d.user_metadata);
            w.duration(d.auto_delete_on_idle);
        }
        EntityDescription::Rule(d) => {
            match &d.filter {
                RuleFilter::True => w.u8(0),
                RuleFilter::False => w.u8(1),
                RuleFilter::Sql { expression, parameters } => {
                    w.u8(2);
                    w.str(expression);
                    encode_pairs(&mut w, parameters.iter().map(|(k, v)| (k, v)), parameters.len());
                }
                RuleFilter::Correlation(c) => {
                    w.u8(3);
                    for field in [
                        &c.correlation_id,
                        &c.message_id,
                        &c.to,
                        &c.reply_to,
                        &c.subject,
                        &c.session_id,
                        &c.reply_to_session_id,
                        &c.content_type,
                    ] {
                        w.opt_str(field);
                    }
                    encode_pairs(
                        &mut w,
                        c.properties.iter().map(|(k, v)| (k, v)),
                        c.properties.len(),
                    );
                }
            }
            match &d.action {
                None => w.u8(0),
                Some(action) => {
                    w.u8(1);
                    w.str(&action.expression);
                    encode_pairs(
                        &mut w,
                        action.parameters.iter().map(|(k, v)| (k, v)),
                        action.parameters.len(),
                    );
                }
            }
        }
    }
    if version >= ENTITY_VERSION_2 {
        w.u32(rules.len() as u32);
        for rule in rules {
            w.str(&rule.key_name);
            w.str(&rule.primary_key);
            w.str(&rule.secondary_key);
            let bits = [Right::Manage, Right::Send, Right::Listen]
                .iter()
                .enumerate()
                .filter(|(_, &right)| rule.rights.allows(right))
                .fold(0u8, |bits, (i, _)| bits | 1 << i);
            w.u8(bits);
        }
    }
    if let Some((auto_delete, express)) = queue_v3 {
        w.duration(auto_delete);
        w.bool(express);
    }
    w.finish()
}

/// The authorization rules a description holds (only queues and topics have them).
fn entity_rules(description: &EntityDescription) -> &[AuthorizationRule] {
    match description {
        EntityDescription::Queue(d) => &d.authorization_rules,
        EntityDescription::Topic(d) => &d.authorization_rules,
        EntityDescription::Subscription(_) | EntityDescription::Rule(_) => &[],
    }
}

/// Version 2's trailer: the rules of a queue or topic.
fn decode_entity_rules(r: &mut Reader<'_>) -> DecodeResult<Vec<AuthorizationRule>> {
    /// Three empty strings and the rights byte.
    const SMALLEST_RULE: usize = 13;
    let count = r.u32()? as usize;
    if count > r.remaining() / SMALLEST_RULE {
        return Err(r.corrupted(&format!("{count} authorization rules do not fit the record")));
    }
    let mut rules = Vec::with_capacity(count);
    for _ in 0..count {
        let (key_name, primary_key, secondary_key) = (r.str()?, r.str()?, r.str()?);
        let bits = r.u8()?;
        let rights = [Right::Manage, Right::Send, Right::Listen]
            .into_iter()
            .enumerate()
            .filter(|(i, _)| bits & (1 << i) != 0)
            .map(|(_, right)| right)
            .collect();
        rules.push(AuthorizationRule { key_name, primary_key, secondary_key, rights });
    }
    Ok(rules)
}

pub(crate) fn decode_entity(value: &[u8]) -> DecodeResult<EntityRecord> {
    let (mut r, version) = Reader::versioned(value, "entity record")?;
    if ![V1, ENTITY_VERSION_2, ENTITY_VERSION_3].contains(&version) {
        return Err(r.unknown_version(version));
    }
    let id = r.u64()?;
    let name = r.str()?;
    let created_at = Timestamp::from_millis(r.i64()?);
    let updated_at = Timestamp::from_millis(r.i64()?);
    let description = match r.u8()? {
        1 => EntityDescription::Queue(QueueDescription {
            lock_duration: r.duration()?,
            max_delivery_count: r.u32()?,
            default_message_time_to_live: r.duration()?,
            dead_lettering_on_message_expiration: r.bool()?,
            requires_duplicate_detection: r.bool()?,
            duplicate_detection_history_time_window: r.duration()?,
            requires_session: r.bool()?,
            enable_partitioning: r.bool()?,
            partition_count: r.u16()?,
            max_size_in_megabytes: r.u64()?,
            max_message_size_in_kilobytes: r.u64()?,
            forward_to: r.opt(Reader::str)?,
            forward_dead_lettered_messages_to: r.opt(Reader::str)?,
            enable_batched_operations: r.bool()?,
            status: r.status()?,
            user_metadata: r.opt(Reader::str)?,
            authorization_rules: Vec::new(),
            auto_delete_on_idle: TIME_SPAN_MAX,
            enable_express: false,
        }),
        2 => EntityDescription::Topic(TopicDescription {
            default_message_time_to_live: r.duration()?,
            max_size_in_megabytes: r.u64()?,
            requires_duplicate_detection: r.bool()?,
            duplicate_detection_history_time_window: r.duration()?,
            enable_batched_operations: r.bool()?,
            filtering_messages_before_publishing: r.bool()?,
            status: r.status()?,
            user_metadata: r.opt(Reader::str)?,
            support_ordering: r.bool()?,
            auto_delete_on_idle: r.duration()?,
            enable_partitioning: r.bool()?,
            partition_count: r.u16()?,
            max_message_size_in_kilobytes: r.u64()?,
            enable_subscription_partitioning: r.bool()?,
            enable_express: r.bool()?,
            authorization_rules: Vec::new(),
        }),
        3 => EntityDescription::Subscription(SubscriptionDescription {
            lock_duration: r.duration()?,
            requires_session: r.bool()?,
            default_message_time_to_live: r.duration()?,
            dead_lettering_on_message_expiration: r.bool()?,
            dead_lettering_on_filter_evaluation_exceptions: r.bool()?,
            max_delivery_count: r.u32()?,
            enable_batched_operations: r.bool()?,
            status: r.status()?,
            forward_to: r.opt(Reader::str)?,
            forward_dead_lettered_messages_to: r.opt(Reader::str)?,
            user_metadata: r.opt(Reader::str)?,
            auto_delete_on_idle: r.duration()?,
        }),
        4 => {
            let filter = match r.u8()? {
                0 => RuleFilter::True,
                1 => RuleFilter::False,
                2 => RuleFilter::Sql { expression: r.str()?, parameters: decode_pairs(&mut r)? },
                3 => RuleFilter::Correlation(CorrelationFilter {
                    correlation_id: r.opt(Reader::str)?,
                    message_id: r.opt(Reader::str)?,
                    to: r.opt(Reader::str)?,
                    reply_to: r.opt(Reader::str)?,
                    subject: r.opt(Reader::str)?,
                    session_id: r.opt(Reader::str)?,
                    reply_to_session_id: r.opt(Reader::str)?,
                    content_type: r.opt(Reader::str)?,
                    properties: decode_pairs(&mut r)?,
                }),
                f => return Err(r.corrupted(&format!("unknown filter kind {f}"))),
            };
            let action = match r.u8()? {
                0 => None,
                1 => Some(RuleAction { expression: r.str()?, parameters: decode_pairs(&mut r)? }),
                a => return Err(r.corrupted(&format!("unknown action kind {a}"))),
            };
            EntityDescription::Rule(RuleDescription { filter, action })
        }
        k => return Err(r.corrupted(&format!("unknown entity kind {k}"))),
    };
    let mut description = description;
    if version >= ENTITY_VERSION_2 {
        let rules = decode_entity_rules(&mut r)?;
        match &mut description {
            EntityDescription::Queue(d) => d.authorization_rules = rules,
            EntityDescription::Topic(d) => d.authorization_rules = rules,
            EntityDescription::Subscription(_) | EntityDescription::Rule(_) => {
                if !rules.is_empty() {
                    return Err(r.corrupted("authorization rules on a subscription or rule"));
                }
            }
        }
    }
    if version == ENTITY_VERSION_3 {
        match &mut description {
            EntityDescription::Queue(d) => {
                d.auto_delete_on_idle = r.duration()?;
                d.enable_express = r.bool()?;
            }
            _ => return Err(r.corrupted("a version-3 entity record that is not a queue")),
        }
    }
    Ok(EntityRecord { id, name, description, created_at, updated_at })
}

#[cfg(test)]
mod tests;
