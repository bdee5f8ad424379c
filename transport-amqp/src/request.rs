//! Request/response messages of the `$cbs` and `$management` nodes: what a request carries,
//! and how a response is encoded (amqp.md §2.4, §6.1, §6.2).

use bytes::Bytes;
use fe2o3_amqp_types::messaging::{AmqpValue, ApplicationProperties, MessageId, Properties};
use fe2o3_amqp_types::primitives::{OrderedMap, SimpleValue, Value};
use serde::Serialize;
use serde_amqp::ser::Serializer;

use crate::codec;
use crate::error::WireError;
use crate::guard::{self, Limits};

/// A decoded request.
#[derive(Debug, Clone)]
pub struct Request {
    pub message_id: Option<MessageId>,
    pub reply_to: Option<String>,
    pub application_properties: OrderedMap<String, SimpleValue>,
    pub body: Value,
}

impl Request {
    /// Decodes a request message. The bounds check runs first; then our own walk splits the
    /// message into its sections (descriptors, order and value types checked), and only the
    /// sections a request uses are decoded: properties (message-id, reply-to),
    /// application-properties and an amqp-value body (any other body is null).
    pub fn decode(payload: &[u8]) -> Result<Request, WireError> {
        let malformed = |e: &dyn std::fmt::Display| {
            WireError::new("amqp:decode-error", 400, format!("cannot decode request: {e}"))
        };
        guard::check_values(payload, Limits::message(payload.len())).map_err(|e| malformed(&e))?;
        let sections = codec::split_sections(payload).map_err(|e| malformed(&e))?;
        if sections.is_empty() {
            return Err(malformed(&"the message has no sections"));
        }
        let mut request = Request {
            message_id: None,
            reply_to: None,
            application_properties: OrderedMap::new(),
            body: Value::Null,
        };
        for section in &sections {
            let bytes = &payload[section.start..section.end];
            match section.code {
                codec::PROPERTIES => {
                    let properties: Properties =
                        serde_amqp::from_slice(bytes).map_err(|e| malformed(&e))?;
                    request.message_id = properties.message_id;
                    request.reply_to = properties.reply_to;
                }
                codec::APPLICATION_PROPERTIES => {
                    let ApplicationProperties(map) =
                        serde_amqp::from_slice(bytes).map_err(|e| malformed(&e))?;
                    request.application_properties = map;
                }
                codec::AMQP_VALUE => {
                    let AmqpValue(body) =
                        serde_amqp::from_slice(bytes).map_err(|e| malformed(&e))?;
                    request.body = body;
                }
                // Header, annotations, data or sequence bodies, footer: no request reads them.
                _ => {}
            }
        }
        Ok(request)
    }

    /// An application property as a string (string or symbol on the wire).
    pub fn property(&self, name: &str) -> Option<String> {
        match self.application_properties.get(name)? {
            SimpleValue::String(s) => Some(s.clone()),
            SimpleValue::Symbol(s) => Some(s.0.clone()),
            _ => None,
        }
    }

    /// A field of the request body's map (string keys).
    pub fn field(&self, name: &str) -> Option<&Value> {
        match &self.body {
            Value::Map(map) => map
                .get(&Value::String(name.to_owned()))
                .or_else(|| map.get(&Value::Symbol(name.into()))),
            _ => None,
        }
    }
}

/// Which spelling of the status properties a node's clients read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `$cbs`: `status-code`, `status-description`; never `error-condition` on success.
    Cbs,
    /// `$management`: `statusCode`, `statusDescription`, `errorCondition`.
    Management,
}

/// Encodes a response to `request`: correlation-id = the request's message-id (same AMQP
/// type), the status properties, and the body (an amqp-value) if any.
pub fn encode_response(
    request_message_id: Option<MessageId>,
    dialect: Dialect,
    status: i32,
    description: &str,
    error_condition: Option<&str>,
    body: Option<Value>,
) -> Bytes {
    let mut props = OrderedMap::new();
    let (code, text, condition) = match dialect {
        Dialect::Cbs => ("status-code", "status-description", "error-condition"),
        Dialect::Management => ("statusCode", "statusDescription", "errorCondition"),
    };
    props.insert(code.to_owned(), SimpleValue::Int(status));
    props.insert(text.to_owned(), SimpleValue::String(description.to_owned()));
    if let Some(c) = error_condition {
        props.insert(condition.to_owned(), SimpleValue::Symbol(c.into()));
    }
    let properties = Properties { correlation_id: request_message_id, ..Default::default() };
    let mut out = Vec::with_capacity(128);
    put_section(&mut out, &properties);
    put_section(&mut out, &ApplicationProperties(props));
    put_section(&mut out, &AmqpValue(body.unwrap_or(Value::Null)));
    Bytes::from(out)
}

/// Appends one section (a described type) to a message being encoded.
fn put_section(out: &mut Vec<u8>, section: &impl Serialize) {
    section.serialize(&mut Serializer::new(out)).expect("responses serialize into memory");
}

/// Encodes a failed response.
pub fn encode_error(
    request_message_id: Option<MessageId>,
    dialect: Dialect,
    error: &WireError,
) -> Bytes {
    encode_response(
        request_message_id,
        dialect,
        error.status,
        &error.description,
        Some(error.condition),
        None,
    )
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_amqp::de::Deserializer;
    use serde_amqp::read::SliceReader;

    use super::*;

    /// The sections of a response, read one after the other with serde_amqp alone.
    fn sections(bytes: &[u8]) -> (Properties, OrderedMap<String, SimpleValue>, Value) {
        let mut de = Deserializer::new(SliceReader::new(bytes));
        let properties = Properties::deserialize(&mut de).unwrap();
        let ApplicationProperties(props) = ApplicationProperties::deserialize(&mut de).unwrap();
        let AmqpValue(body) = AmqpValue::<Value>::deserialize(&mut de).unwrap();
        (properties, props, body)
    }

    #[test]
    fn response_echoes_the_message_id_type_and_uses_the_dialects_spelling() {
        let id = MessageId::Uuid((*uuid::Uuid::new_v4().as_bytes()).into());
        let bytes = encode_response(Some(id.clone()), Dialect::Cbs, 202, "Accepted", None, None);
        let (properties, props, body) = sections(&bytes);
        assert_eq!(properties.correlation_id, Some(id));
        assert_eq!(props.get("status-code"), Some(&SimpleValue::Int(202)));
        assert!(props.get("error-condition").is_none());
        assert_eq!(body, Value::Null);

        let error = WireError::not_found("q");
        let bytes = encode_error(Some(MessageId::String("7".into())), Dialect::Management, &error);
        let (_, props, _) = sections(&bytes);
        assert_eq!(props.get("statusCode"), Some(&SimpleValue::Int(404)));
        assert_eq!(
            props.get("errorCondition"),
            Some(&SimpleValue::Symbol("amqp:not-found".into()))
        );
    }

    /// A request as the SDKs encode one: properties, application-properties, amqp-value.
    fn request(body: Value) -> Vec<u8> {
        let properties = Properties {
            message_id: Some(MessageId::Ulong(9)),
            reply_to: Some("reply".into()),
            ..Default::default()
        };
        let mut props = OrderedMap::new();
        props.insert("operation".to_owned(), SimpleValue::Symbol("put-token".into()));
        let mut out = Vec::new();
        put_section(&mut out, &properties);
        put_section(&mut out, &ApplicationProperties(props));
        put_section(&mut out, &AmqpValue(body));
        out
    }

    #[test]
    fn request_gives_its_id_reply_to_properties_and_value_body() {
        let mut map = OrderedMap::new();
        map.insert(Value::String("lock-tokens".into()), Value::Long(3));
        let request = Request::decode(&request(Value::Map(map))).unwrap();
        assert_eq!(request.message_id, Some(MessageId::Ulong(9)));
        assert_eq!(request.reply_to.as_deref(), Some("reply"));
        assert_eq!(request.property("operation").as_deref(), Some("put-token"));
        assert_eq!(request.field("lock-tokens"), Some(&Value::Long(3)));
        assert_eq!(request.field("absent"), None);
    }

    #[test]
    fn request_that_is_not_a_message_is_a_decode_error() {
        let bytes = request(Value::String("token".into()));
        for bad in [&[][..], &[0x40][..], &bytes[..bytes.len() - 1]] {
            let error = Request::decode(bad).unwrap_err();
            assert_eq!(error.condition, "amqp:decode-error", "{bad:?}");
        }
    }
}
