//! Messages as the broker sees them: what the sender set, and what the broker adds.
//!
//! A [`Message`] carries what a sender sets plus `raw`, the transport's own encoding of it,
//! kept so that a delivery need not re-encode it; [`BrokerProperties`] is what the broker
//! adds, [`ReceivedMessage`] what a receiver gets, [`Disposition`] how it is settled.
//! [`PropertyValue`] holds AMQP's property types, plus two that only rule values created over
//! ATOM carry: `LocalTimestamp` (a dateTime without a zone) and `TimeSpan`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use uuid::Uuid;

use crate::types::{LockToken, PartitionId, SequenceNumber, Timestamp};

/// A typed application-property value. Covers the AMQP primitive types Service Bus allows in
/// application properties, so a transport can round-trip them.
#[derive(Debug, Clone, PartialEq)]
pub enum PropertyValue {
    Null,
    Bool(bool),
    UByte(u8),
    UShort(u16),
    UInt(u32),
    ULong(u64),
    Byte(i8),
    Short(i16),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    Char(char),
    Timestamp(Timestamp),
    Uuid(Uuid),
    Binary(Bytes),
    String(String),
    /// A date and time without a zone (.NET's `DateTimeKind.Unspecified`), as a rule parameter
    /// or correlation-filter property created over ATOM can carry it: it compares and encodes as
    /// the UTC instant with the same digits, and is described again without a zone.
    LocalTimestamp(Timestamp),
    /// A .NET `TimeSpan` in milliseconds (negative allowed), as a rule parameter or
    /// correlation-filter property created over ATOM (`duration`) carries it. No message carries
    /// one: SQL actions refuse to store a TimeSpan in a property.
    TimeSpan(i64),
}

/// Application properties, by name.
pub type ApplicationProperties = BTreeMap<String, PropertyValue>;

/// The properties a sender sets (Service Bus's "system properties" on the way in).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MessageProperties {
    pub message_id: Option<String>,
    pub session_id: Option<String>,
    pub partition_key: Option<String>,
    pub correlation_id: Option<String>,
    pub subject: Option<String>,
    pub to: Option<String>,
    pub reply_to: Option<String>,
    pub reply_to_session_id: Option<String>,
    pub content_type: Option<String>,
    pub time_to_live: Option<Duration>,
    pub scheduled_enqueue_time: Option<Timestamp>,
}

impl MessageProperties {
    /// The string properties, in the order body records store them.
    pub(crate) fn strings(&self) -> [&Option<String>; 9] {
        [
            &self.message_id,
            &self.session_id,
            &self.partition_key,
            &self.correlation_id,
            &self.subject,
            &self.to,
            &self.reply_to,
            &self.reply_to_session_id,
            &self.content_type,
        ]
    }
}

/// A message as sent: properties, application properties and body.
///
/// `body` is the application payload (an AMQP data section's bytes, an HTTP request body).
/// `raw` lets a transport keep the message exactly as its client encoded it (for AMQP, the bare
/// message's bytes), so it can deliver it later without re-encoding; the core never reads it.
/// When the core changes the application properties (properties to modify, dead-letter reasons)
/// it sets `application_properties_modified`: the transport then encodes that section from
/// `application_properties` and the rest from `raw`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    pub properties: MessageProperties,
    pub application_properties: ApplicationProperties,
    pub body: Bytes,
    pub raw: Option<Bytes>,
    pub application_properties_modified: bool,
    /// Set by the broker on a message auto-forwarded into this entity (see [`Forwarded`]);
    /// `None` on everything a client sends.
    pub forwarded: Option<Box<Forwarded>>,
}

/// What an auto-forwarded message carries from the entities it came through: how many
/// transfers it made, the sequence number it was first enqueued with, and, when a
/// `ForwardDeadLetteredMessagesTo` moved it, where and why it was dead-lettered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Forwarded {
    /// Transfers between entities so far (at most [`MAX_TRANSFER_HOPS`]).
    pub hops: u8,
    /// The sequence number the message had in the entity it was first sent to.
    pub enqueued_sequence_number: SequenceNumber,
    pub dead_letter_source: Option<String>,
    pub dead_letter_reason: Option<String>,
    pub dead_letter_error_description: Option<String>,
    /// A send-via transfer's destination (queue or topic path) while it waits in its via
    /// entity's send-via transfer queue; `None` once transferred, and for auto-forwarding
    /// (whose destination is the entity's rule).
    pub destination: Option<String>,
}

/// How many times a message may be auto-forwarded; the next transfer dead-letters it with
/// [`dead_letter_reason::MAX_TRANSFER_HOP_COUNT_EXCEEDED`].
pub const MAX_TRANSFER_HOPS: u8 = 4;

impl Message {
    /// A message with `body` and nothing else set.
    pub fn new(body: impl Into<Bytes>) -> Self {
        Self { body: body.into(), ..Self::default() }
    }

    pub fn with_message_id(mut self, id: impl Into<String>) -> Self {
        self.properties.message_id = Some(id.into());
        self
    }

    pub fn with_session_id(mut self, id: impl Into<String>) -> Self {
        self.properties.session_id = Some(id.into());
        self
    }

    pub fn with_partition_key(mut self, key: impl Into<String>) -> Self {
        self.properties.partition_key = Some(key.into());
        self
    }

    pub fn with_time_to_live(mut self, ttl: Duration) -> Self {
        self.properties.time_to_live = Some(ttl);
        self
    }

    pub fn with_scheduled_enqueue_time(mut self, at: Timestamp) -> Self {
        self.properties.scheduled_enqueue_time = Some(at);
        self
    }

    pub fn with_property(mut self, name: impl Into<String>, value: PropertyValue) -> Self {
        self.application_properties.insert(name.into(), value);
        self
    }

    /// The size Service Bus counts against the entity's limits: the encoded size when the
    /// transport kept it, else the body plus the properties.
    pub fn size(&self) -> usize {
        if let Some(raw) = &self.raw {
            return raw.len();
        }
        let props: usize =
            self.properties.strings().iter().filter_map(|s| s.as_ref()).map(|s| s.len()).sum();
        let app: usize =
            self.application_properties.iter().map(|(k, v)| k.len() + value_size(v)).sum();
        self.body.len() + props + app
    }
}

/// The size an application property value counts for in [`Message::size`].
pub(crate) fn value_size(value: &PropertyValue) -> usize {
    match value {
        PropertyValue::Null => 1,
        PropertyValue::Bool(_) | PropertyValue::UByte(_) | PropertyValue::Byte(_) => 2,
        PropertyValue::UShort(_) | PropertyValue::Short(_) => 3,
        PropertyValue::UInt(_)
        | PropertyValue::Int(_)
        | PropertyValue::Float(_)
        | PropertyValue::Char(_) => 5,
        PropertyValue::ULong(_)
        | PropertyValue::Long(_)
        | PropertyValue::Double(_)
        | PropertyValue::Timestamp(_)
        | PropertyValue::LocalTimestamp(_)
        | PropertyValue::TimeSpan(_) => 9,
        PropertyValue::Uuid(_) => 17,
        PropertyValue::Binary(b) => 5 + b.len(),
        PropertyValue::String(s) => 5 + s.len(),
    }
}

/// Where a message stands in its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MessageState {
    /// Deliverable (or locked by a receiver).
    #[default]
    Active,
    /// Set aside by a receiver; retrievable only by sequence number.
    Deferred,
    /// Waiting for its scheduled enqueue time.
    Scheduled,
}

impl MessageState {
    /// The number Service Bus uses on the wire (`x-opt-message-state`).
    pub fn code(self) -> i32 {
        match self {
            MessageState::Active => 0,
            MessageState::Deferred => 1,
            MessageState::Scheduled => 2,
        }
    }
}

/// What the broker knows about a stored message beyond what the sender set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BrokerProperties {
    pub sequence_number: SequenceNumber,
    /// The sequence number the message was first enqueued with (differs after forwarding).
    pub enqueued_sequence_number: SequenceNumber,
    pub enqueued_time: Timestamp,
    pub partition_id: PartitionId,
    /// Number of earlier deliveries that ended without completion (abandon, lock expiry,
    /// deferral; none in a dead-letter queue). A delivery reports this plus one, as Service
    /// Bus's `DeliveryCount` does.
    pub delivery_count: u32,
    pub state: MessageState,
    /// When the message expires; `Timestamp::MAX` for never. Not applied in the dead-letter queue.
    pub expires_at: Timestamp,
    pub dead_letter_source: Option<String>,
    pub dead_letter_reason: Option<String>,
    pub dead_letter_error_description: Option<String>,
}

/// A message handed to a receiver (or returned by peek).
#[derive(Debug, Clone)]
pub struct ReceivedMessage {
    pub message: Arc<Message>,
    pub broker: BrokerProperties,
    /// The lock, for peek-lock deliveries; `None` for receive-and-delete and peek.
    pub lock: Option<MessageLock>,
}

impl ReceivedMessage {
    pub fn sequence_number(&self) -> SequenceNumber {
        self.broker.sequence_number
    }

    pub fn lock_token(&self) -> Option<LockToken> {
        self.lock.map(|l| l.token)
    }
}

/// A lock held on a delivered message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageLock {
    pub token: LockToken,
    pub locked_until: Timestamp,
}

/// The outcome a receiver settles a locked message with.
#[derive(Debug, Clone, PartialEq)]
pub enum Disposition {
    /// Delete the message.
    Complete,
    /// Unlock it for redelivery, counting a failed delivery; merge `properties` into its
    /// application properties.
    Abandon { properties: ApplicationProperties },
    /// Unlock it without counting a delivery (the client never processed it).
    Release,
    /// Set it aside, retrievable only by sequence number.
    Defer { properties: ApplicationProperties },
    /// Move it to the dead-letter queue.
    DeadLetter {
        reason: Option<String>,
        description: Option<String>,
        properties: ApplicationProperties,
    },
}

impl Disposition {
    /// A bounded label for metrics.
    pub fn outcome(&self) -> &'static str {
        match self {
            Disposition::Complete => "complete",
            Disposition::Abandon { .. } => "abandon",
            Disposition::Release => "release",
            Disposition::Defer { .. } => "defer",
            Disposition::DeadLetter { .. } => "dead_letter",
        }
    }
}

/// Dead-letter reasons the broker itself uses (Service Bus's names).
pub mod dead_letter_reason {
    pub const MAX_DELIVERY_COUNT_EXCEEDED: &str = "MaxDeliveryCountExceeded";
    pub const TTL_EXPIRED: &str = "TTLExpiredException";
    /// A forwarded message that would have made its fifth transfer.
    pub const MAX_TRANSFER_HOP_COUNT_EXCEEDED: &str = "MaxTransferHopCountExceeded";
    /// The description that goes with [`MAX_TRANSFER_HOP_COUNT_EXCEEDED`] (Service Bus's).
    pub const MAX_TRANSFER_HOP_COUNT_EXCEEDED_DESCRIPTION: &str = "The maximum number of allowed \
        hops when forwarding between queues has been exceeded. This value is set to 4.";
    /// Auto-forwarding could not deliver the message: the destination is full.
    pub const FORWARD_DESTINATION_FULL: &str = "ForwardingDestinationQuotaExceeded";
    /// Auto-forwarding could not deliver the message: the destination does not take sends.
    pub const FORWARD_DESTINATION_DISABLED: &str = "ForwardingDestinationDisabled";
    /// Auto-forwarding could not deliver the message: the destination refused it (a session
    /// destination and no SessionId, a message too large for it, no subscription took it).
    pub const FORWARD_DESTINATION_REFUSED: &str = "ForwardingDestinationRefused";
}
