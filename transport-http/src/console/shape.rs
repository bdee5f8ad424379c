//! The console API's JSON shapes: entities, their properties (durations in seconds), counts,
//! messages (body in base64) and property values.

use std::time::Duration;

use base64::Engine;
use ironbus_core::description::TIME_SPAN_MAX;
use ironbus_core::{
    EntityDescription, EntityInfo, EntityStatus, PropertyValue, QueueRuntime, ReceivedMessage,
    Timestamp,
};
use serde_json::{json, Map, Value};

use super::ApiError;
use crate::timefmt::iso8601;

/// An entity's path, kind, status and shape.
pub(super) fn entity_summary(info: &EntityInfo) -> Value {
    let (status, requires_session, partitions, duplicates) = match &info.description {
        EntityDescription::Queue(d) => {
            (d.status, d.requires_session, d.partitions(), d.requires_duplicate_detection)
        }
        EntityDescription::Topic(d) => {
            (d.status, false, d.partitions(), d.requires_duplicate_detection)
        }
        EntityDescription::Subscription(d) => (d.status, d.requires_session, 0, false),
        EntityDescription::Rule(_) => (EntityStatus::Active, false, 0, false),
    };
    json!({
        "path": info.path.as_str(),
        "kind": info.kind().as_str(),
        "status": status.as_str(),
        "requiresSession": requires_session,
        "requiresDuplicateDetection": duplicates,
        "partitions": partitions,
    })
}

/// Runtime counts.
pub(super) fn counts(runtime: &QueueRuntime) -> Value {
    json!({
        "active": runtime.active_message_count,
        "deadLetter": runtime.dead_letter_message_count,
        "scheduled": runtime.scheduled_message_count,
        "deferred": runtime.deferred_message_count,
        "transfer": runtime.transfer_message_count,
        "transferDeadLetter": runtime.transfer_dead_letter_message_count,
        "total": runtime.total_message_count,
        "incoming": runtime.incoming_messages_total,
        "outgoing": runtime.outgoing_messages_total,
    })
}

/// A duration in seconds; `null` for Service Bus's "never" (`TimeSpan.MaxValue`).
fn seconds(d: Duration) -> Value {
    if d >= TIME_SPAN_MAX {
        Value::Null
    } else {
        json!(d.as_secs_f64())
    }
}

/// An entity's properties, by Service Bus's names (camelCase), durations in seconds. The
/// fields [`apply_properties`] accepts are the editable ones.
pub(super) fn properties(description: &EntityDescription) -> Value {
    match description {
        EntityDescription::Queue(d) => json!({
            "lockDuration": seconds(d.lock_duration),
            "maxDeliveryCount": d.max_delivery_count,
            "defaultMessageTimeToLive": seconds(d.default_message_time_to_live),
            "deadLetteringOnMessageExpiration": d.dead_lettering_on_message_expiration,
            "requiresDuplicateDetection": d.requires_duplicate_detection,
            "duplicateDetectionHistoryTimeWindow": seconds(d.duplicate_detection_history_time_window),
            "requiresSession": d.requires_session,
            "enablePartitioning": d.enable_partitioning,
            "maxSizeInMegabytes": d.max_size_in_megabytes,
            "maxMessageSizeInKilobytes": d.max_message_size_in_kilobytes,
            "forwardTo": d.forward_to,
            "forwardDeadLetteredMessagesTo": d.forward_dead_lettered_messages_to,
            "status": d.status.as_str(),
            "userMetadata": d.user_metadata,
            "autoDeleteOnIdle": seconds(d.auto_delete_on_idle),
        }),
        EntityDescription::Topic(d) => json!({
            "defaultMessageTimeToLive": seconds(d.default_message_time_to_live),
            "requiresDuplicateDetection": d.requires_duplicate_detection,
            "duplicateDetectionHistoryTimeWindow": seconds(d.duplicate_detection_history_time_window),
            "enablePartitioning": d.enable_partitioning,
            "maxSizeInMegabytes": d.max_size_in_megabytes,
            "maxMessageSizeInKilobytes": d.max_message_size_in_kilobytes,
            "status": d.status.as_str(),
            "userMetadata": d.user_metadata,
            "autoDeleteOnIdle": seconds(d.auto_delete_on_idle),
        }),
        EntityDescription::Subscription(d) => json!({
            "lockDuration": seconds(d.lock_duration),
            "maxDeliveryCount": d.max_delivery_count,
            "defaultMessageTimeToLive": seconds(d.default_message_time_to_live),
            "deadLetteringOnMessageExpiration": d.dead_lettering_on_message_expiration,
            "deadLetteringOnFilterEvaluationExceptions": d.dead_lettering_on_filter_evaluation_exceptions,
            "requiresSession": d.requires_session,
            "forwardTo": d.forward_to,
            "forwardDeadLetteredMessagesTo": d.forward_dead_lettered_messages_to,
            "status": d.status.as_str(),
            "userMetadata": d.user_metadata,
            "autoDeleteOnIdle": seconds(d.auto_delete_on_idle),
        }),
        EntityDescription::Rule(_) => json!({}),
    }
}

/// Reads the editable fields of `changes` into a copy of `current`; a field that is fixed at
/// creation, unknown or of the wrong type is a 400 naming it.
pub(super) fn apply_properties(
    current: &EntityDescription,
    changes: &Map<String, Value>,
) -> Result<EntityDescription, ApiError> {
    let mut updated = current.clone();
    for (name, value) in changes {
        let bad = |what: &str| ApiError::bad_request(format!("{name}: {what}"));
        let duration = || -> Result<Duration, ApiError> {
            match value {
                Value::Null => Ok(TIME_SPAN_MAX),
                v => v
                    .as_f64()
                    .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e13)
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| bad("a number of seconds, or null for never")),
            }
        };
        let count = || value.as_u64().ok_or_else(|| bad("a whole number"));
        let flag = || value.as_bool().ok_or_else(|| bad("true or false"));
        let text = || -> Result<Option<String>, ApiError> {
            match value {
                Value::Null => Ok(None),
                Value::String(s) if s.is_empty() => Ok(None),
                Value::String(s) => Ok(Some(s.clone())),
                _ => Err(bad("text")),
            }
        };
        let status = || -> Result<EntityStatus, ApiError> {
            match value.as_str() {
                Some("Active") => Ok(EntityStatus::Active),
                Some("Disabled") => Ok(EntityStatus::Disabled),
                Some("SendDisabled") => Ok(EntityStatus::SendDisabled),
                Some("ReceiveDisabled") => Ok(EntityStatus::ReceiveDisabled),
                _ => Err(bad("Active, Disabled, SendDisabled or ReceiveDisabled")),
            }
        };
        let fixed = || Err(bad("not editable here (fixed at creation, or unknown)"));
        match &mut updated {
            EntityDescription::Queue(d) => match name.as_str() {
                "lockDuration" => d.lock_duration = duration()?,
                "maxDeliveryCount" => {
                    d.max_delivery_count = count()?.try_into().map_err(|_| bad("too large"))?
                }
                "defaultMessageTimeToLive" => d.default_message_time_to_live = duration()?,
                "deadLetteringOnMessageExpiration" => {
                    d.dead_lettering_on_message_expiration = flag()?
                }
                "duplicateDetectionHistoryTimeWindow" => {
                    d.duplicate_detection_history_time_window = duration()?
                }
                "maxSizeInMegabytes" => d.max_size_in_megabytes = count()?,
                "forwardTo" => d.forward_to = text()?,
                "forwardDeadLetteredMessagesTo" => d.forward_dead_lettered_messages_to = text()?,
                "status" => d.status = status()?,
                "userMetadata" => d.user_metadata = text()?,
                "autoDeleteOnIdle" => d.auto_delete_on_idle = duration()?,
                _ => return fixed(),
            },
            EntityDescription::Topic(d) => match name.as_str() {
                "defaultMessageTimeToLive" => d.default_message_time_to_live = duration()?,
                "duplicateDetectionHistoryTimeWindow" => {
                    d.duplicate_detection_history_time_window = duration()?
                }
                "maxSizeInMegabytes" => d.max_size_in_megabytes = count()?,
                "status" => d.status = status()?,
                "userMetadata" => d.user_metadata = text()?,
                "autoDeleteOnIdle" => d.auto_delete_on_idle = duration()?,
                _ => return fixed(),
            },
            EntityDescription::Subscription(d) => match name.as_str() {
                "lockDuration" => d.lock_duration = duration()?,
                "maxDeliveryCount" => {
                    d.max_delivery_count = count()?.try_into().map_err(|_| bad("too large"))?
                }
                "defaultMessageTimeToLive" => d.default_message_time_to_live = duration()?,
                "deadLetteringOnMessageExpiration" => {
                    d.dead_lettering_on_message_expiration = flag()?
                }
                "deadLetteringOnFilterEvaluationExceptions" => {
                    d.dead_lettering_on_filter_evaluation_exceptions = flag()?
                }
                "forwardTo" => d.forward_to = text()?,
                "forwardDeadLetteredMessagesTo" => d.forward_dead_lettered_messages_to = text()?,
                "status" => d.status = status()?,
                "userMetadata" => d.user_metadata = text()?,
                "autoDeleteOnIdle" => d.auto_delete_on_idle = duration()?,
                _ => return fixed(),
            },
            EntityDescription::Rule(_) => return Err(bad("rules are edited with the rules API")),
        }
    }
    Ok(updated)
}

/// The last instant Service Bus writes (9999-12-31T23:59:59Z): later is "never".
const NEVER_MS: i64 = 253_402_300_799_000;

fn time(t: Timestamp) -> Value {
    if t.as_millis() >= NEVER_MS {
        Value::Null
    } else {
        json!(iso8601(t))
    }
}

/// A property value as `{"type": …, "value": …}` (binary in base64, times in ISO 8601).
pub(super) fn property_value(value: &PropertyValue) -> Value {
    let (kind, v) = match value {
        PropertyValue::Null => ("null", Value::Null),
        PropertyValue::Bool(b) => ("boolean", json!(b)),
        PropertyValue::UByte(n) => ("ubyte", json!(n)),
        PropertyValue::UShort(n) => ("ushort", json!(n)),
        PropertyValue::UInt(n) => ("uint", json!(n)),
        PropertyValue::ULong(n) => ("ulong", json!(n)),
        PropertyValue::Byte(n) => ("byte", json!(n)),
        PropertyValue::Short(n) => ("short", json!(n)),
        PropertyValue::Int(n) => ("int", json!(n)),
        PropertyValue::Long(n) => ("long", json!(n)),
        PropertyValue::Float(n) => ("float", json!(n)),
        PropertyValue::Double(n) => ("double", json!(n)),
        PropertyValue::Char(c) => ("char", json!(c.to_string())),
        PropertyValue::Timestamp(t) => ("timestamp", time(*t)),
        PropertyValue::Uuid(u) => ("uuid", json!(u.to_string())),
        PropertyValue::Binary(b) => {
            ("binary", json!(base64::engine::general_purpose::STANDARD.encode(b)))
        }
        PropertyValue::String(s) => ("string", json!(s)),
        PropertyValue::LocalTimestamp(t) => ("localTimestamp", time(*t)),
        PropertyValue::TimeSpan(ms) => ("timeSpan", json!(ms)),
    };
    json!({ "type": kind, "value": v })
}

/// A JSON value of the send form as a property value: text, a whole number (long), another
/// number (double), true/false or null.
pub(super) fn to_property(name: &str, value: &Value) -> Result<PropertyValue, ApiError> {
    Ok(match value {
        Value::Null => PropertyValue::Null,
        Value::Bool(b) => PropertyValue::Bool(*b),
        Value::String(s) => PropertyValue::String(s.clone()),
        Value::Number(n) => match n.as_i64() {
            Some(i) => PropertyValue::Long(i),
            None => PropertyValue::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        _ => {
            return Err(ApiError::bad_request(format!(
                "property {name}: text, number, true/false or null"
            )))
        }
    })
}

/// A peeked message: what the broker knows, what the sender set, and the body in base64.
pub(super) fn message(m: &ReceivedMessage) -> Value {
    let b = &m.broker;
    let p = &m.message.properties;
    let application: Map<String, Value> = m
        .message
        .application_properties
        .iter()
        .map(|(k, v)| (k.clone(), property_value(v)))
        .collect();
    json!({
        "sequenceNumber": b.sequence_number.0,
        "enqueuedSequenceNumber": b.enqueued_sequence_number.0,
        "enqueuedTime": time(b.enqueued_time),
        "partition": b.partition_id.0,
        "deliveryCount": b.delivery_count,
        "state": match b.state {
            ironbus_core::MessageState::Active => "Active",
            ironbus_core::MessageState::Deferred => "Deferred",
            ironbus_core::MessageState::Scheduled => "Scheduled",
        },
        "expiresAt": time(b.expires_at),
        "deadLetterSource": b.dead_letter_source,
        "deadLetterReason": b.dead_letter_reason,
        "deadLetterErrorDescription": b.dead_letter_error_description,
        "properties": {
            "messageId": p.message_id,
            "sessionId": p.session_id,
            "partitionKey": p.partition_key,
            "correlationId": p.correlation_id,
            "subject": p.subject,
            "to": p.to,
            "replyTo": p.reply_to,
            "replyToSessionId": p.reply_to_session_id,
            "contentType": p.content_type,
            "timeToLive": p.time_to_live.map(seconds),
            "scheduledEnqueueTime": p.scheduled_enqueue_time.map(time),
        },
        "applicationProperties": application,
        "bodySize": m.message.body.len(),
        "body": base64::engine::general_purpose::STANDARD.encode(&m.message.body),
    })
}
