//! Reading request fields (integers of any width, lists, uuids, property values) and building
//! response maps.

use fe2o3_amqp_types::primitives::{Array, OrderedMap, Value};
use ironbus_core::MAX_SEQUENCE_NUMBERS;
use ironbus_core::{ApplicationProperties, PropertyValue, SequenceNumber, Timestamp};

use crate::error::{WireError, ARGUMENT_OUT_OF_RANGE};
use crate::request::Request;

pub(super) fn map<const N: usize>(entries: [(&str, Value); N]) -> Value {
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

pub(super) fn int(request: &Request, name: &str) -> Result<i64, WireError> {
    request
        .field(name)
        .and_then(as_i64)
        .ok_or_else(|| WireError::bad_request(format!("the request needs an integer {name}")))
}

pub(super) fn items(value: Option<&Value>) -> Option<&[Value]> {
    match value? {
        Value::Array(Array(v)) | Value::List(v) => Some(v),
        _ => None,
    }
}

/// The request's `sequence-numbers`: at most [`MAX_SEQUENCE_NUMBERS`] of them (more is
/// refused as out of range before anything is converted or asked of the broker).
pub(super) fn sequence_numbers(request: &Request) -> Result<Vec<SequenceNumber>, WireError> {
    const NAME: &str = "sequence-numbers";
    let count = items(request.field(NAME)).map_or(0, <[Value]>::len);
    if count > MAX_SEQUENCE_NUMBERS {
        return Err(WireError::new(
            ARGUMENT_OUT_OF_RANGE,
            400,
            format!(
                "{NAME} holds {count} numbers; one request may name at most \
                 {MAX_SEQUENCE_NUMBERS}"
            ),
        ));
    }
    Ok(long_list(request, NAME)?.into_iter().map(SequenceNumber).collect())
}

pub(super) fn long_list(request: &Request, name: &str) -> Result<Vec<i64>, WireError> {
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

pub(super) fn uuid_list(request: &Request, name: &str) -> Result<Vec<uuid::Uuid>, WireError> {
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
