//! The `<entity>/$management` node: Service Bus's request/response operations on an entity
//! (amqp.md §6.3), carried out through the broker.

use fe2o3_amqp_types::primitives::{Array, Binary, OrderedMap, Timestamp as AmqpTimestamp, Value};
use ironbus_core::auth::Right;
use ironbus_core::{
    ApplicationProperties, Broker, Disposition, EntityAddress, LockToken, PropertyValue,
    ReceiveMode, SendOutcome, SequenceNumber, Timestamp,
};

use crate::codec;
use crate::error::WireError;
use crate::request::Request;

/// The result of an operation: status, description and body.
#[derive(Debug)]
pub struct Outcome {
    pub status: i32,
    pub description: &'static str,
    pub body: Option<Value>,
}

impl Outcome {
    fn ok(body: Option<Value>) -> Self {
        Outcome { status: 200, description: "OK", body }
    }

    fn no_content() -> Self {
        Outcome { status: 204, description: "No Content", body: None }
    }
}

/// The right an operation needs, or `None` for an unknown operation.
pub fn required_right(operation: &str) -> Option<Right> {
    Some(match operation {
        "com.microsoft:schedule-message" | "com.microsoft:cancel-scheduled-message" => Right::Send,
        "com.microsoft:renew-lock"
        | "com.microsoft:peek-message"
        | "com.microsoft:receive-by-sequence-number"
        | "com.microsoft:update-disposition"
        | "com.microsoft:renew-session-lock"
        | "com.microsoft:get-session-state"
        | "com.microsoft:set-session-state"
        | "com.microsoft:get-message-sessions" => Right::Listen,
        "com.microsoft:add-rule"
        | "com.microsoft:remove-rule"
        | "com.microsoft:enumerate-rules" => Right::Manage,
        _ => return None,
    })
}

/// Carries out one management request on `address`.
pub async fn execute(
    broker: Broker,
    address: EntityAddress,
    request: Request,
) -> Result<Outcome, WireError> {
    let operation = request.property("operation").unwrap_or_default();
    match operation.as_str() {
        "com.microsoft:renew-lock" => {
            let mut expirations = Vec::new();
            for token in uuid_list(&request, "lock-tokens")? {
                let until = broker.renew_lock(address.clone(), LockToken(token)).await?;
                expirations
                    .push(Value::Timestamp(AmqpTimestamp::from_milliseconds(until.as_millis())));
            }
            Ok(Outcome::ok(Some(map([("expirations", Value::Array(Array(expirations)))]))))
        }
        "com.microsoft:peek-message" => {
            let from = int(&request, "from-sequence-number")?;
            let count = int(&request, "message-count")?.clamp(0, 1000) as usize;
            let peeked = broker.peek(address, SequenceNumber(from), count.max(1)).await?;
            if peeked.is_empty() {
                return Ok(Outcome::no_content());
            }
            let messages = peeked
                .iter()
                .map(|m| {
                    map([(
                        "message",
                        Value::Binary(Binary::from(
                            codec::encode_delivery(m, codec::DeliveryOptions::default()).to_vec(),
                        )),
                    )])
                })
                .collect();
            Ok(Outcome::ok(Some(map([("messages", Value::List(messages))]))))
        }
        "com.microsoft:schedule-message" => {
            let (Some(Value::List(entries)) | Some(Value::Array(Array(entries)))) =
                request.field("messages").cloned()
            else {
                return Err(WireError::bad_request("schedule-message needs a list of messages"));
            };
            let mut messages = Vec::with_capacity(entries.len());
            for entry in &entries {
                let Value::Map(fields) = entry else {
                    return Err(WireError::bad_request("each scheduled message must be a map"));
                };
                let Some(Value::Binary(bytes)) = fields.get(&Value::String("message".into()))
                else {
                    return Err(WireError::bad_request(
                        "a scheduled message needs its encoded message",
                    ));
                };
                let message = codec::decode_message(bytes::Bytes::copy_from_slice(bytes))
                    .map_err(|e| WireError::new("amqp:decode-error", 400, e.to_string()))?;
                if message.properties.scheduled_enqueue_time.is_none() {
                    return Err(WireError::bad_request(
                        "a scheduled message needs x-opt-scheduled-enqueue-time",
                    ));
                }
                messages.push(message);
            }
            let outcomes = broker.schedule(address, messages).await?;
            let numbers = outcomes
                .into_iter()
                .map(|o| match o {
                    SendOutcome::Enqueued(seq) => Value::Long(seq.0),
                    // A duplicate was dropped; Service Bus answers with no usable number.
                    SendOutcome::Duplicate => Value::Long(0),
                })
                .collect();
            Ok(Outcome::ok(Some(map([("sequence-numbers", Value::Array(Array(numbers)))]))))
        }
        "com.microsoft:cancel-scheduled-message" => {
            let numbers = long_list(&request, "sequence-numbers")?;
            let seqs: Vec<SequenceNumber> = numbers.into_iter().map(SequenceNumber).collect();
            broker.cancel_scheduled(address, &seqs).await?;
            Ok(Outcome::ok(None))
        }
        "com.microsoft:receive-by-sequence-number" => {
            let seqs: Vec<SequenceNumber> =
                long_list(&request, "sequence-numbers")?.into_iter().map(SequenceNumber).collect();
            let mode = match request.field("receiver-settle-mode").and_then(as_i64) {
                Some(0) => ReceiveMode::ReceiveAndDelete,
                _ => ReceiveMode::PeekLock,
            };
            let received = broker.receive_deferred(address, &seqs, mode).await?;
            let messages = received
                .iter()
                .map(|m| {
                    let token = m.lock_token().map(|t| t.0).unwrap_or_else(uuid::Uuid::nil);
                    map([
                        ("lock-token", Value::Uuid((*token.as_bytes()).into())),
                        (
                            "message",
                            Value::Binary(Binary::from(
                                codec::encode_delivery(m, codec::DeliveryOptions::default())
                                    .to_vec(),
                            )),
                        ),
                    ])
                })
                .collect();
            Ok(Outcome::ok(Some(map([("messages", Value::List(messages))]))))
        }
        "com.microsoft:update-disposition" => {
            let status = match request.field("disposition-status") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Symbol(s)) => s.0.clone(),
                _ => {
                    return Err(WireError::bad_request(
                        "update-disposition needs disposition-status",
                    ))
                }
            };
            let properties = match request.field("properties-to-modify") {
                Some(Value::Map(m)) => properties_to_modify(m),
                _ => ApplicationProperties::new(),
            };
            let text = |name: &str| match request.field(name) {
                Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
                _ => None,
            };
            let disposition = match status.as_str() {
                "completed" => Disposition::Complete,
                "abandoned" => Disposition::Abandon { properties },
                "defered" | "deferred" => Disposition::Defer { properties },
                "suspended" => Disposition::DeadLetter {
                    reason: text("deadletter-reason"),
                    description: text("deadletter-description"),
                    properties,
                },
                other => {
                    return Err(WireError::bad_request(format!(
                        "unknown disposition-status {other:?}"
                    )))
                }
            };
            for token in uuid_list(&request, "lock-tokens")? {
                broker.settle(address.clone(), LockToken(token), disposition.clone()).await?;
            }
            Ok(Outcome::ok(None))
        }
        "com.microsoft:renew-session-lock"
        | "com.microsoft:get-session-state"
        | "com.microsoft:set-session-state"
        | "com.microsoft:get-message-sessions" => {
            Err(WireError::not_implemented("sessions are not implemented by ironbus yet"))
        }
        "com.microsoft:add-rule"
        | "com.microsoft:remove-rule"
        | "com.microsoft:enumerate-rules" => Err(WireError::not_implemented(
            "topics, subscriptions and rules are not implemented by ironbus yet",
        )),
        other => Err(WireError::not_implemented(format!("unknown management operation {other:?}"))),
    }
}

fn map<const N: usize>(entries: [(&str, Value); N]) -> Value {
    let mut m = OrderedMap::new();
    for (k, v) in entries {
        m.insert(Value::String(k.to_owned()), v);
    }
    Value::Map(m)
}

/// Any integer width, as clients send them (amqp.md §0.4).
pub fn as_i64(value: &Value) -> Option<i64> {
    Some(match value {
        Value::Long(v) => *v,
        Value::Int(v) => i64::from(*v),
        Value::Short(v) => i64::from(*v),
        Value::Byte(v) => i64::from(*v),
        Value::Ulong(v) => i64::try_from(*v).ok()?,
        Value::Uint(v) => i64::from(*v),
        Value::Ushort(v) => i64::from(*v),
        Value::Ubyte(v) => i64::from(*v),
        _ => return None,
    })
}

fn int(request: &Request, name: &str) -> Result<i64, WireError> {
    request
        .field(name)
        .and_then(as_i64)
        .ok_or_else(|| WireError::bad_request(format!("the request needs an integer {name}")))
}

fn items(value: Option<&Value>) -> Option<&[Value]> {
    match value? {
        Value::Array(Array(v)) | Value::List(v) => Some(v),
        _ => None,
    }
}

fn long_list(request: &Request, name: &str) -> Result<Vec<i64>, WireError> {
    let list = items(request.field(name))
        .ok_or_else(|| WireError::bad_request(format!("the request needs a list {name}")))?;
    list.iter()
        .map(|v| match v {
            // js may send 8-byte big-endian buffers.
            Value::Binary(b) if b.len() == 8 => {
                Some(i64::from_be_bytes(b.as_slice().try_into().expect("length checked")))
            }
            other => as_i64(other),
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| WireError::bad_request(format!("{name} must hold integers")))
}

fn uuid_list(request: &Request, name: &str) -> Result<Vec<uuid::Uuid>, WireError> {
    let list = items(request.field(name))
        .ok_or_else(|| WireError::bad_request(format!("the request needs a list {name}")))?;
    list.iter()
        .map(|v| match v {
            Value::Uuid(u) => Some(uuid::Uuid::from_bytes(u.clone().into_inner())),
            Value::String(s) => uuid::Uuid::parse_str(s).ok(),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| WireError::bad_request(format!("{name} must hold uuids")))
}

/// Properties to modify, as a core map; values the core cannot hold are skipped.
pub fn properties_to_modify(fields: &OrderedMap<Value, Value>) -> ApplicationProperties {
    fields
        .iter()
        .filter_map(|(k, v)| {
            let key = match k {
                Value::String(s) => s.clone(),
                Value::Symbol(s) => s.0.clone(),
                _ => return None,
            };
            Some((key, property_value(v)?))
        })
        .collect()
}

/// An AMQP value as a core property value, if it is a simple one.
pub fn property_value(value: &Value) -> Option<PropertyValue> {
    Some(match value {
        Value::Null => PropertyValue::Null,
        Value::Bool(v) => PropertyValue::Bool(*v),
        Value::Ubyte(v) => PropertyValue::UByte(*v),
        Value::Ushort(v) => PropertyValue::UShort(*v),
        Value::Uint(v) => PropertyValue::UInt(*v),
        Value::Ulong(v) => PropertyValue::ULong(*v),
        Value::Byte(v) => PropertyValue::Byte(*v),
        Value::Short(v) => PropertyValue::Short(*v),
        Value::Int(v) => PropertyValue::Int(*v),
        Value::Long(v) => PropertyValue::Long(*v),
        Value::Float(v) => PropertyValue::Float(v.into_inner()),
        Value::Double(v) => PropertyValue::Double(v.into_inner()),
        Value::Char(v) => PropertyValue::Char(*v),
        Value::Timestamp(t) => PropertyValue::Timestamp(Timestamp::from_millis(t.milliseconds())),
        Value::Uuid(u) => PropertyValue::Uuid(uuid::Uuid::from_bytes(u.clone().into_inner())),
        Value::Binary(b) => PropertyValue::Binary(bytes::Bytes::copy_from_slice(b)),
        Value::String(s) => PropertyValue::String(s.clone()),
        Value::Symbol(s) => PropertyValue::String(s.0.clone()),
        _ => return None,
    })
}
