//! Reading request fields (integers of any width, lists, uuids, property values) and building
//! response maps.

use fe2o3_amqp_types::primitives::{Array, OrderedMap, Value};
use ironbus_core::{ApplicationProperties, PropertyValue, Timestamp};

use crate::error::WireError;
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
