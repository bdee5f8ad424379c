//! Record encodings: how entities and messages are laid out as store values.
//!
//! **Architecture Invariant:** every record starts with a version byte, and a decoder keeps
//! reading every version it ever wrote, so data written today is readable tomorrow. A change to a
//! layout adds a version; it never edits one.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use uuid::Uuid;

use crate::auth::{AuthorizationRule, Right};
use crate::description::{
    CorrelationFilterDescription, EntityStatus, QueueDescription, RuleAction, RuleDescription,
    RuleFilter, SubscriptionDescription, TopicDescription, TIME_SPAN_MAX,
};
use crate::entity::{EntityDescription, EntityKind};
use crate::message::{
    ApplicationProperties, Forwarded, Message, MessageProperties, MessageState, PropertyValue,
};
use crate::store::StoreError;
use crate::types::{SequenceNumber, Timestamp};

const V1: u8 = 1;

/// The version each message-side record is written with today. A record that grows (a session
/// id, a hop count, a transaction id) gets a new version here and a new arm in its decoder's
/// `match`; the arms of older versions stay, filling what they lack with defaults.
const BODY_VERSION: u8 = V1;
/// A body record of an auto-forwarded message: version 1's fields, then its [`Forwarded`].
const BODY_VERSION_2: u8 = 2;
/// A body record of a send-via transfer: version 2's fields, then its destination.
const BODY_VERSION_3: u8 = 3;
/// Meta records without the version-2 fields are still written as version 1 (byte for byte as
/// before); those with them as version 2.
const META_VERSION: u8 = V1;
const META_VERSION_2: u8 = 2;
/// Version 3 adds the session id (a message of a session-enabled entity); written only then.
const META_VERSION_3: u8 = 3;
const PARTITION_VERSION: u8 = V1;
const SESSION_VERSION: u8 = V1;
const DEDUP_VERSION: u8 = V1;
/// Entity records: version 1, or version 2 when a queue or topic has authorization rules (they
/// follow the kind's fields); a record without rules is still written as version 1.
const ENTITY_VERSION_2: u8 = 2;
/// Version 2 and, after the authorization rules, a queue's `AutoDeleteOnIdle` and
/// `EnableExpress`. Written only for a queue that sets either, so that every other record keeps
/// its earlier bytes.
const ENTITY_VERSION_3: u8 = 3;
const TRANSFER_RECORD_VERSION: u8 = V1;

/// An entity as stored, under the key of its path ([`crate::keys::entity`]).
#[derive(Debug, Clone, PartialEq)]
pub struct EntityRecord {
    pub id: u64,
    /// The path as the user spelled it at creation.
    pub name: String,
    /// The entity's kind and its kind-specific description.
    pub description: EntityDescription,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// The kind byte of an entity record. Queue records have been written since version 1; the
/// other codes are reserved, and no record of theirs has been written yet, so their
/// descriptions' encodings are defined when those kinds are built.
fn entity_kind_code(kind: EntityKind) -> u8 {
    match kind {
        EntityKind::Queue => 1,
        EntityKind::Topic => 2,
        EntityKind::Subscription => 3,
        EntityKind::Rule => 4,
    }
}

/// What the broker knows of a stored message, under its sub-queue key. The message itself (the
/// body record) is stored apart and written once, so that changing this small record never
/// needs the body in memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MessageMeta {
    /// The sequence number the message was first enqueued with (differs after forwarding).
    pub enqueued_sequence_number: SequenceNumber,
    pub enqueued_time: Timestamp,
    /// The size counted against the entity (see [`Message::size`]).
    pub size: u32,
    pub delivery_count: u32,
    pub state: MessageState,
    pub expires_at: Timestamp,
    pub dead_letter_source: Option<String>,
    pub dead_letter_reason: Option<String>,
    pub dead_letter_error_description: Option<String>,
    /// Application properties the broker added or changed after the send (properties to
    /// modify, dead-letter reasons, a rule action's SET), laid over the sender's on delivery.
    pub modified_properties: ApplicationProperties,
    /// Where the body is when it is not under this message's own sequence number: a topic
    /// subscription's copy changed by a rule action shares the body stored at the publish's
    /// number. (Version 2.)
    pub body_sequence_number: Option<SequenceNumber>,
    /// Application properties a rule action removed from the sender's. (Version 2.)
    pub removed_properties: Vec<String>,
    /// The system properties when a rule action changed any: they replace the sender's.
    /// (Version 2.)
    pub system_properties: Option<Box<MessageProperties>>,
    /// The session the message belongs to, on a session-enabled entity (so that rebuilding,
    /// which reads no bodies, can index sessions). (Version 3.)
    pub session_id: Option<String>,
}

impl MessageMeta {
    /// Whether the record needs version 2 (it has a field version 1 lacks).
    fn needs_v2(&self) -> bool {
        self.body_sequence_number.is_some()
            || !self.removed_properties.is_empty()
            || self.system_properties.is_some()
    }
}

struct Writer(BytesMut);

impl Writer {
    /// A record that starts with `version`.
    fn versioned(version: u8, capacity: usize) -> Self {
        let mut b = BytesMut::with_capacity(capacity + 1);
        b.put_u8(version);
        Writer(b)
    }
    fn u8(&mut self, v: u8) {
        self.0.put_u8(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.put_u16_le(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.put_u32_le(v);
    }
    fn u64(&mut self, v: u64) {
        self.0.put_u64_le(v);
    }
    fn i64(&mut self, v: i64) {
        self.0.put_i64_le(v);
    }
    fn bool(&mut self, v: bool) {
        self.u8(v as u8);
    }
    fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.0.put_slice(v);
    }
    fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
    fn opt_str(&mut self, v: &Option<String>) {
        match v {
            Some(s) => {
                self.u8(1);
                self.str(s);
            }
            None => self.u8(0),
        }
    }
    fn opt_bytes(&mut self, v: &Option<Bytes>) {
        match v {
            Some(b) => {
                self.u8(1);
                self.bytes(b);
            }
            None => self.u8(0),
        }
    }
    fn opt_i64(&mut self, v: Option<i64>) {
        match v {
            Some(x) => {
                self.u8(1);
                self.i64(x);
            }
            None => self.u8(0),
        }
    }
    fn duration(&mut self, d: Duration) {
        self.u64(d.as_millis().min(u64::MAX as u128) as u64);
    }
    fn finish(self) -> Bytes {
        self.0.freeze()
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

type DecodeResult<T> = Result<T, StoreError>;

impl<'a> Reader<'a> {
    /// A reader past the version byte, and that version, for a decoder that dispatches on it.
    fn versioned(buf: &'a [u8], what: &'static str) -> DecodeResult<(Self, u8)> {
        let mut r = Reader { buf, what };
        let version = r.u8()?;
        Ok((r, version))
    }
    fn unknown_version(&self, version: u8) -> StoreError {
        StoreError::corrupted(format!("{}: unknown record version {version}", self.what))
    }
    fn take(&mut self, n: usize) -> DecodeResult<&'a [u8]> {
        if self.buf.len() < n {
            return Err(StoreError::corrupted(format!("{}: record truncated", self.what)));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> DecodeResult<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("length checked"))
    }
    fn u8(&mut self) -> DecodeResult<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> DecodeResult<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> DecodeResult<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> DecodeResult<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn i64(&mut self) -> DecodeResult<i64> {
        Ok(i64::from_le_bytes(self.array()?))
    }
    fn bool(&mut self) -> DecodeResult<bool> {
        Ok(self.u8()? != 0)
    }
    fn bytes(&mut self) -> DecodeResult<Bytes> {
        let n = self.u32()? as usize;
        Ok(Bytes::copy_from_slice(self.take(n)?))
    }
    fn str(&mut self) -> DecodeResult<String> {
        let n = self.u32()? as usize;
        let raw = self.take(n)?;
        String::from_utf8(raw.to_vec())
            .map_err(|_| StoreError::corrupted(format!("{}: invalid utf-8", self.what)))
    }
    fn opt<T>(&mut self, f: impl FnOnce(&mut Self) -> DecodeResult<T>) -> DecodeResult<Option<T>> {
        match self.u8()? {
            0 => Ok(None),
            _ => f(self).map(Some),
        }
    }
    fn duration(&mut self) -> DecodeResult<Duration> {
        Ok(Duration::from_millis(self.u64()?))
    }
    fn corrupted(&self, detail: &str) -> StoreError {
        StoreError::corrupted(format!("{}: {detail}", self.what))
    }
    fn remaining(&self) -> usize {
        self.buf.len()
    }
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

pub fn encode_entity(record: &EntityRecord) -> Bytes {
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

pub fn decode_entity(value: &[u8]) -> DecodeResult<EntityRecord> {
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
                3 => RuleFilter::Correlation(CorrelationFilterDescription {
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

/// A message's body record: everything the sender sent, written once at enqueue.
pub fn encode_body(m: &Message) -> Bytes {
    let capacity = 64 + m.body.len() + m.raw.as_ref().map_or(0, |r| r.len());
    let version = match &m.forwarded {
        Some(f) if f.destination.is_some() => BODY_VERSION_3,
        Some(_) => BODY_VERSION_2,
        None => BODY_VERSION,
    };
    let mut w = Writer::versioned(version, capacity);
    encode_message_properties(&mut w, &m.properties);
    encode_properties(&mut w, &m.application_properties);
    w.opt_bytes(&m.raw);
    // A body that is a slice of `raw` (an AMQP data section) is stored as its place in `raw`.
    match m.raw.as_ref().and_then(|raw| slice_offset(raw, &m.body)) {
        Some(offset) => {
            w.u8(1);
            w.u32(offset as u32);
            w.u32(m.body.len() as u32);
        }
        None => {
            w.u8(0);
            w.bytes(&m.body);
        }
    }
    w.bool(m.application_properties_modified);
    if let Some(f) = &m.forwarded {
        w.u8(f.hops);
        w.i64(f.enqueued_sequence_number.0);
        w.opt_str(&f.dead_letter_source);
        w.opt_str(&f.dead_letter_reason);
        w.opt_str(&f.dead_letter_error_description);
        if f.destination.is_some() {
            w.opt_str(&f.destination);
        }
    }
    w.finish()
}

/// Where `part` starts within `whole`, if it is a non-empty slice of it.
fn slice_offset(whole: &[u8], part: &[u8]) -> Option<usize> {
    let (start, at) = (whole.as_ptr() as usize, part.as_ptr() as usize);
    let inside = !part.is_empty() && at >= start && at + part.len() <= start + whole.len();
    (inside && u32::try_from(whole.len()).is_ok()).then(|| at - start)
}

/// A message's meta record (see [`MessageMeta`]).
pub fn encode_meta(meta: &MessageMeta) -> Bytes {
    let version = if meta.session_id.is_some() {
        META_VERSION_3
    } else if meta.needs_v2() {
        META_VERSION_2
    } else {
        META_VERSION
    };
    let mut w = Writer::versioned(version, 48);
    w.i64(meta.enqueued_sequence_number.0);
    w.i64(meta.enqueued_time.as_millis());
    w.u32(meta.size);
    w.u32(meta.delivery_count);
    w.u8(meta.state.code() as u8);
    w.i64(meta.expires_at.as_millis());
    w.opt_str(&meta.dead_letter_source);
    w.opt_str(&meta.dead_letter_reason);
    w.opt_str(&meta.dead_letter_error_description);
    encode_properties(&mut w, &meta.modified_properties);
    if version >= META_VERSION_2 {
        w.opt_i64(meta.body_sequence_number.map(|s| s.0));
        w.u32(meta.removed_properties.len() as u32);
        for name in &meta.removed_properties {
            w.str(name);
        }
        match &meta.system_properties {
            None => w.u8(0),
            Some(p) => {
                w.u8(1);
                encode_message_properties(&mut w, p);
            }
        }
    }
    if version == META_VERSION_3 {
        w.opt_str(&meta.session_id);
    }
    w.finish()
}

fn encode_properties(w: &mut Writer, props: &ApplicationProperties) {
    encode_pairs(w, props.iter(), props.len());
}

fn status_code(status: EntityStatus) -> u8 {
    match status {
        EntityStatus::Active => 0,
        EntityStatus::Disabled => 1,
        EntityStatus::SendDisabled => 2,
        EntityStatus::ReceiveDisabled => 3,
    }
}

/// Named values, in the order given (application properties, rule parameters).
fn encode_pairs<'a>(
    w: &mut Writer,
    pairs: impl Iterator<Item = (&'a String, &'a PropertyValue)>,
    len: usize,
) {
    w.u32(len as u32);
    for (name, value) in pairs {
        w.str(name);
        match value {
            PropertyValue::Null => w.u8(0),
            PropertyValue::Bool(v) => {
                w.u8(1);
                w.bool(*v)
            }
            PropertyValue::UByte(v) => {
                w.u8(2);
                w.u8(*v)
            }
            PropertyValue::UShort(v) => {
                w.u8(3);
                w.u16(*v)
            }
            PropertyValue::UInt(v) => {
                w.u8(4);
                w.u32(*v)
            }
            PropertyValue::ULong(v) => {
                w.u8(5);
                w.u64(*v)
            }
            PropertyValue::Byte(v) => {
                w.u8(6);
                w.u8(*v as u8)
            }
            PropertyValue::Short(v) => {
                w.u8(7);
                w.u16(*v as u16)
            }
            PropertyValue::Int(v) => {
                w.u8(8);
                w.u32(*v as u32)
            }
            PropertyValue::Long(v) => {
                w.u8(9);
                w.i64(*v)
            }
            PropertyValue::Float(v) => {
                w.u8(10);
                w.u32(v.to_bits())
            }
            PropertyValue::Double(v) => {
                w.u8(11);
                w.u64(v.to_bits())
            }
            PropertyValue::Char(v) => {
                w.u8(12);
                w.u32(*v as u32)
            }
            PropertyValue::Timestamp(v) => {
                w.u8(13);
                w.i64(v.as_millis())
            }
            PropertyValue::LocalTimestamp(v) => {
                w.u8(17);
                w.i64(v.as_millis())
            }
            PropertyValue::TimeSpan(v) => {
                w.u8(18);
                w.i64(*v)
            }
            PropertyValue::Uuid(v) => {
                w.u8(14);
                w.0.put_slice(v.as_bytes())
            }
            PropertyValue::Binary(v) => {
                w.u8(15);
                w.bytes(v)
            }
            PropertyValue::String(v) => {
                w.u8(16);
                w.str(v)
            }
        }
    }
}

fn decode_properties(r: &mut Reader<'_>) -> DecodeResult<ApplicationProperties> {
    Ok(decode_pairs(r)?.into_iter().collect())
}

fn decode_pairs(r: &mut Reader<'_>) -> DecodeResult<Vec<(String, PropertyValue)>> {
    let n = r.u32()?;
    // Each pair takes at least 5 bytes: never reserve more than the record can hold.
    let mut props = Vec::with_capacity((n as usize).min(r.remaining() / 5));
    for _ in 0..n {
        let name = r.str()?;
        let value = match r.u8()? {
            0 => PropertyValue::Null,
            1 => PropertyValue::Bool(r.bool()?),
            2 => PropertyValue::UByte(r.u8()?),
            3 => PropertyValue::UShort(r.u16()?),
            4 => PropertyValue::UInt(r.u32()?),
            5 => PropertyValue::ULong(r.u64()?),
            6 => PropertyValue::Byte(r.u8()? as i8),
            7 => PropertyValue::Short(r.u16()? as i16),
            8 => PropertyValue::Int(r.u32()? as i32),
            9 => PropertyValue::Long(r.i64()?),
            10 => PropertyValue::Float(f32::from_bits(r.u32()?)),
            11 => PropertyValue::Double(f64::from_bits(r.u64()?)),
            12 => PropertyValue::Char(
                char::from_u32(r.u32()?).ok_or_else(|| r.corrupted("invalid char"))?,
            ),
            13 => PropertyValue::Timestamp(Timestamp::from_millis(r.i64()?)),
            14 => PropertyValue::Uuid(Uuid::from_bytes(r.array()?)),
            15 => PropertyValue::Binary(r.bytes()?),
            16 => PropertyValue::String(r.str()?),
            17 => PropertyValue::LocalTimestamp(Timestamp::from_millis(r.i64()?)),
            18 => PropertyValue::TimeSpan(r.i64()?),
            t => return Err(r.corrupted(&format!("unknown property type {t}"))),
        };
        props.push((name, value));
    }
    Ok(props)
}

pub fn decode_meta(value: &[u8]) -> DecodeResult<MessageMeta> {
    let (mut r, version) = Reader::versioned(value, "message meta record")?;
    match version {
        V1 => decode_meta_v1(&mut r),
        META_VERSION_2 | META_VERSION_3 => {
            let mut meta = decode_meta_v1(&mut r)?;
            meta.body_sequence_number = r.opt(Reader::i64)?.map(SequenceNumber);
            let n = r.u32()?;
            let mut removed = Vec::with_capacity((n as usize).min(r.remaining() / 4));
            for _ in 0..n {
                removed.push(r.str()?);
            }
            meta.removed_properties = removed;
            meta.system_properties = r.opt(decode_message_properties)?.map(Box::new);
            if version == META_VERSION_3 {
                meta.session_id = r.opt(Reader::str)?;
            }
            Ok(meta)
        }
        v => Err(r.unknown_version(v)),
    }
}

fn decode_meta_v1(r: &mut Reader<'_>) -> DecodeResult<MessageMeta> {
    Ok(MessageMeta {
        enqueued_sequence_number: SequenceNumber(r.i64()?),
        enqueued_time: Timestamp::from_millis(r.i64()?),
        size: r.u32()?,
        delivery_count: r.u32()?,
        state: match r.u8()? {
            0 => MessageState::Active,
            1 => MessageState::Deferred,
            2 => MessageState::Scheduled,
            s => return Err(r.corrupted(&format!("unknown message state {s}"))),
        },
        expires_at: Timestamp::from_millis(r.i64()?),
        dead_letter_source: r.opt(Reader::str)?,
        dead_letter_reason: r.opt(Reader::str)?,
        dead_letter_error_description: r.opt(Reader::str)?,
        modified_properties: decode_properties(r)?,
        body_sequence_number: None,
        removed_properties: Vec::new(),
        system_properties: None,
        session_id: None,
    })
}

/// A destination's record of a transfer it stored: the key says everything, the value is
/// its version.
pub fn encode_transfer_record() -> Bytes {
    Writer::versioned(TRANSFER_RECORD_VERSION, 0).finish()
}

pub fn decode_transfer_record(value: &[u8]) -> DecodeResult<()> {
    let (r, version) = Reader::versioned(value, "transfer record")?;
    match version {
        V1 => Ok(()),
        v => Err(r.unknown_version(v)),
    }
}

pub fn decode_body(value: &[u8]) -> DecodeResult<Message> {
    let (mut r, version) = Reader::versioned(value, "message body record")?;
    match version {
        V1 => decode_body_v1(&mut r),
        BODY_VERSION_2 | BODY_VERSION_3 => {
            let mut message = decode_body_v1(&mut r)?;
            message.forwarded = Some(Box::new(Forwarded {
                hops: r.u8()?,
                enqueued_sequence_number: SequenceNumber(r.i64()?),
                dead_letter_source: r.opt(Reader::str)?,
                dead_letter_reason: r.opt(Reader::str)?,
                dead_letter_error_description: r.opt(Reader::str)?,
                destination: if version == BODY_VERSION_3 { r.opt(Reader::str)? } else { None },
            }));
            Ok(message)
        }
        v => Err(r.unknown_version(v)),
    }
}

/// The system properties a sender set, as body records (and version-2 meta records) hold them.
fn encode_message_properties(w: &mut Writer, p: &MessageProperties) {
    for s in [
        &p.message_id,
        &p.session_id,
        &p.partition_key,
        &p.correlation_id,
        &p.subject,
        &p.to,
        &p.reply_to,
        &p.reply_to_session_id,
        &p.content_type,
    ] {
        w.opt_str(s);
    }
    w.opt_i64(p.time_to_live.map(|d| d.as_millis().min(i64::MAX as u128) as i64));
    w.opt_i64(p.scheduled_enqueue_time.map(Timestamp::as_millis));
}

fn decode_message_properties(r: &mut Reader<'_>) -> DecodeResult<MessageProperties> {
    let mut strings: [Option<String>; 9] = Default::default();
    for s in &mut strings {
        *s = r.opt(Reader::str)?;
    }
    let [message_id, session_id, partition_key, correlation_id, subject, to, reply_to, reply_to_session_id, content_type] =
        strings;
    Ok(MessageProperties {
        message_id,
        session_id,
        partition_key,
        correlation_id,
        subject,
        to,
        reply_to,
        reply_to_session_id,
        content_type,
        time_to_live: r.opt(Reader::i64)?.map(|ms| Duration::from_millis(ms.max(0) as u64)),
        scheduled_enqueue_time: r.opt(Reader::i64)?.map(Timestamp::from_millis),
    })
}

fn decode_body_v1(r: &mut Reader<'_>) -> DecodeResult<Message> {
    let properties = decode_message_properties(r)?;
    let application_properties = decode_properties(r)?;
    let raw = r.opt(Reader::bytes)?;
    let body = match (r.u8()?, &raw) {
        (0, _) => r.bytes()?,
        (1, Some(raw)) => {
            let (offset, len) = (r.u32()? as usize, r.u32()? as usize);
            if offset.checked_add(len).is_none_or(|end| end > raw.len()) {
                return Err(r.corrupted("body outside the raw message"));
            }
            raw.slice(offset..offset + len)
        }
        _ => return Err(r.corrupted("invalid body kind")),
    };
    let application_properties_modified = r.bool()?;
    Ok(Message {
        properties,
        application_properties,
        body,
        raw,
        application_properties_modified,
        forwarded: None,
    })
}

/// A session's state record: when it was last set, and the state (never empty: a cleared
/// state has no record).
pub fn encode_session_state(updated_at: Timestamp, state: &[u8]) -> Bytes {
    let mut w = Writer::versioned(SESSION_VERSION, 12 + state.len());
    w.i64(updated_at.as_millis());
    w.bytes(state);
    w.finish()
}

pub fn decode_session_state(value: &[u8]) -> DecodeResult<(Timestamp, Bytes)> {
    let (mut r, version) = Reader::versioned(value, "session state record")?;
    match version {
        V1 => Ok((Timestamp::from_millis(r.i64()?), r.bytes()?)),
        v => Err(r.unknown_version(v)),
    }
}

/// A partition's own record: the last sequence counter it issued.
pub fn encode_partition(last_counter: u64) -> Bytes {
    let mut w = Writer::versioned(PARTITION_VERSION, 8);
    w.u64(last_counter);
    w.finish()
}

pub fn decode_partition(value: &[u8]) -> DecodeResult<u64> {
    let (mut r, version) = Reader::versioned(value, "partition record")?;
    match version {
        V1 => r.u64(),
        v => Err(r.unknown_version(v)),
    }
}

/// A duplicate-detection entry: until when the id counts as seen.
pub fn encode_dedup(until: Timestamp) -> Bytes {
    let mut w = Writer::versioned(DEDUP_VERSION, 8);
    w.i64(until.as_millis());
    w.finish()
}

pub fn decode_dedup(value: &[u8]) -> DecodeResult<Timestamp> {
    let (mut r, version) = Reader::versioned(value, "dedup entry")?;
    match version {
        V1 => Ok(Timestamp::from_millis(r.i64()?)),
        v => Err(r.unknown_version(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_and_meta_records_round_trip_every_field() {
        let mut props = ApplicationProperties::new();
        for (i, v) in [
            PropertyValue::Null,
            PropertyValue::Bool(true),
            PropertyValue::UByte(7),
            PropertyValue::UShort(700),
            PropertyValue::UInt(70_000),
            PropertyValue::ULong(u64::MAX),
            PropertyValue::Byte(-7),
            PropertyValue::Short(-700),
            PropertyValue::Int(-70_000),
            PropertyValue::Long(i64::MIN),
            PropertyValue::Float(1.5),
            PropertyValue::Double(-2.25),
            PropertyValue::Char('ß'),
            PropertyValue::Timestamp(Timestamp::from_millis(123)),
            PropertyValue::Uuid(Uuid::new_v4()),
            PropertyValue::Binary(Bytes::from_static(b"\x00\x01")),
            PropertyValue::String("héllo".into()),
        ]
        .into_iter()
        .enumerate()
        {
            props.insert(format!("p{i}"), v);
        }
        let message = Message {
            properties: MessageProperties {
                message_id: Some("m".into()),
                session_id: Some("s".into()),
                partition_key: Some("s".into()),
                correlation_id: Some("c".into()),
                subject: Some("sub".into()),
                to: Some("to".into()),
                reply_to: Some("rt".into()),
                reply_to_session_id: Some("rts".into()),
                content_type: Some("text/plain".into()),
                time_to_live: Some(Duration::from_secs(30)),
                scheduled_enqueue_time: Some(Timestamp::from_millis(99)),
            },
            application_properties: props,
            body: Bytes::from_static(b"body"),
            raw: Some(Bytes::from_static(b"raw")),
            application_properties_modified: true,
            forwarded: None,
        };
        assert_eq!(decode_body(&encode_body(&message)).unwrap(), message);
        assert_eq!(encode_body(&message)[0], BODY_VERSION, "a plain body stays version 1");
        // An auto-forwarded message's body carries its journey (version 2).
        let forwarded = Message {
            forwarded: Some(Box::new(Forwarded {
                hops: 3,
                enqueued_sequence_number: SequenceNumber(42),
                dead_letter_source: Some("q1".into()),
                dead_letter_reason: Some("why".into()),
                dead_letter_error_description: None,
                destination: None,
            })),
            ..message.clone()
        };
        let encoded = encode_body(&forwarded);
        assert_eq!(encoded[0], BODY_VERSION_2);
        assert_eq!(decode_body(&encoded).unwrap(), forwarded);
        // A send-via transfer also names its destination (version 3).
        let mut via = forwarded.clone();
        via.forwarded.as_mut().unwrap().destination = Some("Orders".into());
        let encoded = encode_body(&via);
        assert_eq!(encoded[0], BODY_VERSION_3);
        assert_eq!(decode_body(&encoded).unwrap(), via);
        // A body inside `raw` is stored once, as its place in `raw`.
        let raw = Bytes::from_static(b"header:the body:trailer");
        let sliced =
            Message { body: raw.slice(7..15), raw: Some(raw.clone()), ..Message::default() };
        let encoded = encode_body(&sliced);
        let copied = Message { body: Bytes::copy_from_slice(b"the body"), ..sliced.clone() };
        assert!(encoded.len() < encode_body(&copied).len(), "the body is not stored twice");
        let decoded = decode_body(&encoded).unwrap();
        assert_eq!(&decoded.body[..], b"the body");
        assert_eq!(decoded, sliced);
        let meta = MessageMeta {
            enqueued_sequence_number: SequenceNumber(5),
            enqueued_time: Timestamp::from_millis(1000),
            size: 77,
            delivery_count: 4,
            state: MessageState::Deferred,
            expires_at: Timestamp::MAX,
            dead_letter_source: Some("q".into()),
            dead_letter_reason: Some("r".into()),
            dead_letter_error_description: None,
            modified_properties: [("k".to_owned(), PropertyValue::Int(1))].into(),
            ..Default::default()
        };
        assert_eq!(decode_meta(&encode_meta(&meta)).unwrap(), meta);
        assert_eq!(encode_meta(&meta)[0], V1, "without version-2 fields, version 1 is written");

        // A topic copy changed by a rule action: version 2.
        let changed = MessageMeta {
            body_sequence_number: Some(SequenceNumber(3)),
            removed_properties: vec!["gone".into(), "also".into()],
            system_properties: Some(Box::new(MessageProperties {
                subject: Some("relabelled".into()),
                time_to_live: Some(Duration::from_secs(9)),
                ..Default::default()
            })),
            ..meta
        };
        let bytes = encode_meta(&changed);
        assert_eq!(bytes[0], 2);
        assert_eq!(decode_meta(&bytes).unwrap(), changed);
        for cut in 1..bytes.len() {
            assert!(decode_meta(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn session_meta_records_are_version_3_and_session_state_round_trips() {
        let plain = MessageMeta { size: 3, ..Default::default() };
        assert_eq!(encode_meta(&plain)[0], 1, "no session: as before");
        let session = MessageMeta { session_id: Some("s-1".into()), ..plain.clone() };
        let bytes = encode_meta(&session);
        assert_eq!(bytes[0], 3);
        assert_eq!(decode_meta(&bytes).unwrap(), session);
        for cut in 1..bytes.len() {
            assert!(decode_meta(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let at = Timestamp::from_millis(1_767_225_600_000);
        let state = encode_session_state(at, b"state");
        assert_eq!(state[0], 1);
        assert_eq!(decode_session_state(&state).unwrap(), (at, Bytes::from_static(b"state")));
        assert!(decode_session_state(&state[..state.len() - 1]).is_err());
    }

    /// Records as version 1 wrote them, byte for byte. A store holds such records for ever: a
    /// new version of a layout must leave these decoding to the same values.
    const META_V1: &[u8] = b"\
        \x01\x05\x00\x00\x00\x00\x00\x00\x00\x00\xa8\xda\x76\x9b\x01\x00\x00\x4d\x00\x00\x00\x02\
        \x00\x00\x00\x01\x80\x96\x11\x77\x9b\x01\x00\x00\x00\x01\x18\x00\x00\x00\x4d\x61\x78\x44\
        \x65\x6c\x69\x76\x65\x72\x79\x43\x6f\x75\x6e\x74\x45\x78\x63\x65\x65\x64\x65\x64\x01\x04\
        \x00\x00\x00\x67\x6f\x6e\x65\x01\x00\x00\x00\x01\x00\x00\x00\x6b\x08\xff\xff\xff\xff";
    const BODY_V1: &[u8] = b"\
        \x01\x01\x02\x00\x00\x00\x6d\x31\x00\x00\x01\x01\x00\x00\x00\x63\x00\x00\x00\x00\x00\x01\
        \x30\x75\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x6e\x09\x07\x00\x00\
        \x00\x00\x00\x00\x00\x01\x08\x00\x00\x00\x52\x41\x57\x3a\x62\x6f\x64\x79\x01\x04\x00\x00\
        \x00\x04\x00\x00\x00\x00";
    const PARTITION_V1: &[u8] = b"\x01\x2a\x00\x00\x00\x00\x00\x00\x00";
    const DEDUP_V1: &[u8] = b"\x01\x60\x92\xdb\x76\x9b\x01\x00\x00";

    #[test]
    fn records_written_by_version_1_stay_readable() {
        let meta = MessageMeta {
            enqueued_sequence_number: SequenceNumber(5),
            enqueued_time: Timestamp::from_millis(1_767_225_600_000),
            size: 77,
            delivery_count: 2,
            state: MessageState::Deferred,
            expires_at: Timestamp::from_millis(1_767_229_200_000),
            dead_letter_source: None,
            dead_letter_reason: Some("MaxDeliveryCountExceeded".into()),
            dead_letter_error_description: Some("gone".into()),
            modified_properties: [("k".to_owned(), PropertyValue::Int(-1))].into(),
            ..Default::default()
        };
        assert_eq!(decode_meta(META_V1).unwrap(), meta);

        let raw = Bytes::from_static(b"RAW:body");
        let body = Message {
            properties: MessageProperties {
                message_id: Some("m1".into()),
                correlation_id: Some("c".into()),
                time_to_live: Some(Duration::from_secs(30)),
                ..MessageProperties::default()
            },
            application_properties: [("n".to_owned(), PropertyValue::Long(7))].into(),
            body: raw.slice(4..),
            raw: Some(raw),
            application_properties_modified: false,
            forwarded: None,
        };
        assert_eq!(decode_body(BODY_V1).unwrap(), body);
        assert_eq!(decode_partition(PARTITION_V1).unwrap(), 42);
        assert_eq!(decode_dedup(DEDUP_V1).unwrap(), Timestamp::from_millis(1_767_225_660_000));

        // Today's encoders still write version 1; when one moves on, its line goes, not the
        // decoding above.
        assert_eq!(&encode_meta(&meta)[..], META_V1);
        assert_eq!(&encode_body(&body)[..], BODY_V1);
        assert_eq!(&encode_partition(42)[..], PARTITION_V1);
        assert_eq!(&encode_dedup(Timestamp::from_millis(1_767_225_660_000))[..], DEDUP_V1);
    }

    #[test]
    fn message_records_of_an_unknown_version_are_corruption() {
        for golden in [META_V1, BODY_V1, PARTITION_V1, DEDUP_V1] {
            let mut future = golden.to_vec();
            future[0] = 0xfe;
            assert!(decode_meta(&future).is_err());
            assert!(decode_body(&future).is_err());
            assert!(decode_partition(&future).is_err());
            assert!(decode_dedup(&future).is_err());
        }
        assert!(decode_meta(&[]).is_err());
        assert!(decode_body(&[]).is_err());
    }

    #[test]
    fn entity_record_round_trips() {
        let record = EntityRecord {
            id: 42,
            name: "Orders".into(),
            description: EntityDescription::Queue(QueueDescription {
                enable_partitioning: true,
                forward_to: Some("other".into()),
                status: EntityStatus::SendDisabled,
                ..Default::default()
            }),
            created_at: Timestamp::from_millis(1),
            updated_at: Timestamp::from_millis(2),
        };
        assert_eq!(decode_entity(&encode_entity(&record)).unwrap(), record);
    }

    #[test]
    fn a_queue_that_sets_auto_delete_or_express_is_version_3_and_others_keep_their_bytes() {
        use crate::auth::{AuthorizationRule, Rights};
        let plain = EntityRecord {
            id: 9,
            name: "q".into(),
            description: EntityDescription::Queue(QueueDescription::default()),
            created_at: Timestamp::from_millis(1),
            updated_at: Timestamp::from_millis(2),
        };
        for rules in [vec![], vec![AuthorizationRule::new("send", "p", "s", Rights::SEND)]] {
            let mut record = plain.clone();
            let EntityDescription::Queue(d) = &mut record.description else { unreachable!() };
            d.authorization_rules = rules;
            d.auto_delete_on_idle = Duration::from_secs(600);
            d.enable_express = true;
            let bytes = encode_entity(&record);
            assert_eq!(bytes[0], ENTITY_VERSION_3);
            assert_eq!(decode_entity(&bytes).unwrap(), record);
            // Version 1's fields come first, byte for byte, then the rules and the duration.
            let v1 = encode_entity(&plain);
            assert_eq!(bytes[1..v1.len()], v1[1..]);
            for len in 0..bytes.len() {
                assert!(decode_entity(&bytes[..len]).is_err(), "truncated to {len}");
            }
        }
        // Only queues carry it.
        let mut topic = encode_entity(&EntityRecord {
            description: EntityDescription::Topic(TopicDescription::default()),
            ..plain.clone()
        })
        .to_vec();
        topic[0] = ENTITY_VERSION_3;
        topic.extend_from_slice(&0u32.to_le_bytes());
        topic.extend_from_slice(&600_000u64.to_le_bytes());
        topic.push(1);
        assert!(decode_entity(&topic).is_err());
    }

    #[test]
    fn entity_records_with_authorization_rules_are_version_2_and_without_stay_version_1() {
        use crate::auth::{AuthorizationRule, Rights};
        let plain = EntityRecord {
            id: 7,
            name: "q".into(),
            description: EntityDescription::Queue(QueueDescription::default()),
            created_at: Timestamp::from_millis(1),
            updated_at: Timestamp::from_millis(2),
        };
        let v1 = encode_entity(&plain);
        assert_eq!(v1[0], V1, "no rules: written as before");
        assert_eq!(decode_entity(&v1).unwrap(), plain);

        let rules = vec![
            AuthorizationRule::new("send", "p1", "s1", Rights::SEND),
            AuthorizationRule::new("all", "p2", "", Rights::MANAGE),
            AuthorizationRule::new("listen", "p3", "s3", Rights::LISTEN.with(Right::Send)),
        ];
        let queue = EntityRecord {
            description: EntityDescription::Queue(QueueDescription {
                authorization_rules: rules.clone(),
                ..Default::default()
            }),
            ..plain.clone()
        };
        let topic = EntityRecord {
            description: EntityDescription::Topic(TopicDescription {
                authorization_rules: rules,
                ..Default::default()
            }),
            ..plain.clone()
        };
        for record in [queue, topic] {
            let bytes = encode_entity(&record);
            assert_eq!(bytes[0], ENTITY_VERSION_2);
            assert_eq!(decode_entity(&bytes).unwrap(), record);
            // The version-1 part is byte for byte the record without rules.
            let mut without = record.clone();
            match &mut without.description {
                EntityDescription::Queue(d) => d.authorization_rules.clear(),
                EntityDescription::Topic(d) => d.authorization_rules.clear(),
                _ => unreachable!(),
            }
            assert_eq!(bytes[1..encode_entity(&without).len()], encode_entity(&without)[1..]);
            // Every truncation is corruption, never a panic.
            for len in 0..bytes.len() {
                assert!(decode_entity(&bytes[..len]).is_err(), "truncated to {len}");
            }
        }
        // A rule count larger than the record can hold is refused before allocating.
        let mut huge = encode_entity(&plain).to_vec();
        huge[0] = ENTITY_VERSION_2;
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        let error = decode_entity(&huge).unwrap_err();
        assert!(error.to_string().contains("do not fit"), "{error}");
        let mut unknown = encode_entity(&plain).to_vec();
        unknown[0] = 4;
        assert!(decode_entity(&unknown).is_err());
    }

    #[test]
    fn topic_subscription_and_rule_records_round_trip() {
        let descriptions = [
            EntityDescription::Topic(TopicDescription {
                requires_duplicate_detection: true,
                enable_partitioning: true,
                partition_count: 4,
                filtering_messages_before_publishing: true,
                user_metadata: Some("m".into()),
                status: EntityStatus::ReceiveDisabled,
                ..Default::default()
            }),
            EntityDescription::Subscription(SubscriptionDescription {
                requires_session: true,
                forward_to: Some("q".into()),
                dead_lettering_on_filter_evaluation_exceptions: false,
                status: EntityStatus::Disabled,
                ..Default::default()
            }),
            EntityDescription::Rule(RuleDescription::default()),
            EntityDescription::Rule(RuleDescription { filter: RuleFilter::False, action: None }),
            EntityDescription::Rule(RuleDescription {
                filter: RuleFilter::Sql {
                    expression: "color = @c".into(),
                    parameters: vec![("@c".into(), PropertyValue::String("red".into()))],
                },
                action: Some(RuleAction {
                    expression: "SET n = @n".into(),
                    parameters: vec![
                        ("@n".into(), PropertyValue::Long(7)),
                        // ATOM's naive dateTime and duration (property types 17 and 18).
                        ("@at".into(), PropertyValue::LocalTimestamp(Timestamp::from_millis(9))),
                        ("@span".into(), PropertyValue::TimeSpan(-60_000)),
                    ],
                }),
            }),
            EntityDescription::Rule(RuleDescription {
                filter: RuleFilter::Correlation(CorrelationFilterDescription {
                    correlation_id: Some("c".into()),
                    subject: Some("l".into()),
                    properties: vec![
                        ("b".into(), PropertyValue::Int(1)),
                        ("a".into(), PropertyValue::Bool(true)),
                    ],
                    ..Default::default()
                }),
                action: None,
            }),
        ];
        for description in descriptions {
            let record = EntityRecord {
                id: 7,
                name: "t/Subscriptions/s".into(),
                description,
                created_at: Timestamp::from_millis(1),
                updated_at: Timestamp::from_millis(2),
            };
            let bytes = encode_entity(&record);
            assert_eq!(decode_entity(&bytes).unwrap(), record);
            // A truncated record is corruption, never a panic.
            for cut in 0..bytes.len() {
                assert!(decode_entity(&bytes[..cut]).is_err());
            }
        }
    }

    #[test]
    fn every_entity_kind_round_trips_with_its_kind() {
        let kinds = [
            EntityDescription::Queue(QueueDescription::default()),
            EntityDescription::Topic(TopicDescription::default()),
            EntityDescription::Subscription(SubscriptionDescription::default()),
            EntityDescription::Rule(RuleDescription::default()),
        ];
        for description in kinds {
            let record = EntityRecord {
                id: 3,
                name: "t/Subscriptions/s".into(),
                description,
                created_at: Timestamp::from_millis(5),
                updated_at: Timestamp::from_millis(6),
            };
            assert_eq!(decode_entity(&encode_entity(&record)).unwrap(), record);
        }
    }

    /// A queue record exactly as the encoder before entity kinds wrote it (version 1, kind 1):
    /// it still loads, and a queue is still written with the same bytes.
    #[test]
    fn queue_records_written_before_entity_kinds_still_load() {
        let written = "010700000000000000060000004f7264657273e80300000000000\
                       0d0070000000000000130750000000000000500000080ee3600000000000101c0d40100\
                       00000000000104000008000000000000000400000000000001040000004465737400000\
                       201010000006d";
        let written: Vec<u8> = (0..written.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&written[i..i + 2], 16).unwrap())
            .collect();
        let record = EntityRecord {
            id: 7,
            name: "Orders".into(),
            description: EntityDescription::Queue(QueueDescription {
                lock_duration: Duration::from_secs(30),
                max_delivery_count: 5,
                default_message_time_to_live: Duration::from_secs(3600),
                dead_lettering_on_message_expiration: true,
                requires_duplicate_detection: true,
                duplicate_detection_history_time_window: Duration::from_secs(120),
                requires_session: false,
                enable_partitioning: true,
                partition_count: 4,
                max_size_in_megabytes: 2048,
                max_message_size_in_kilobytes: 1024,
                forward_to: Some("Dest".into()),
                forward_dead_lettered_messages_to: None,
                enable_batched_operations: false,
                status: EntityStatus::SendDisabled,
                user_metadata: Some("m".into()),
                authorization_rules: Vec::new(),
                auto_delete_on_idle: crate::description::TIME_SPAN_MAX,
                enable_express: false,
            }),
            created_at: Timestamp::from_millis(1000),
            updated_at: Timestamp::from_millis(2000),
        };
        assert_eq!(decode_entity(&written).unwrap(), record);
        assert_eq!(encode_entity(&record).as_ref(), written.as_slice());
    }

    #[test]
    fn truncated_or_unknown_records_are_corruption_not_panics() {
        let body = encode_body(&Message::new("x"));
        for cut in 0..body.len() {
            assert!(decode_body(&body[..cut]).is_err(), "cut at {cut}");
        }
        let meta = encode_meta(&MessageMeta::default());
        for cut in 0..meta.len() {
            assert!(decode_meta(&meta[..cut]).is_err(), "cut at {cut}");
        }
        assert!(decode_body(&[9, 0, 0]).is_err());
        assert!(decode_meta(&[9, 0, 0]).is_err());
        assert!(decode_entity(&[]).is_err());
    }
}
