//! Request/response messages of the `$cbs` and `$management` nodes: what a request carries,
//! and how a response is encoded (amqp.md §2.4, §6.1, §6.2).

use bytes::Bytes;
use fe2o3_amqp_types::messaging::message::__private::{Deserializable, Serializable};
use fe2o3_amqp_types::messaging::{
    AmqpValue, ApplicationProperties, Body, Message, MessageId, Properties,
};
use fe2o3_amqp_types::primitives::{OrderedMap, SimpleValue, Value};

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
    pub fn decode(payload: &[u8]) -> Result<Request, WireError> {
        guard::check_values(payload, Limits::message(payload.len())).map_err(|e| {
            WireError::new("amqp:decode-error", 400, format!("cannot decode request: {e}"))
        })?;
        let Deserializable(message): Deserializable<Message<Body<Value>>> =
            serde_amqp::from_slice(payload).map_err(|e| {
                WireError::new("amqp:decode-error", 400, format!("cannot decode request: {e}"))
            })?;
        let body = match message.body {
            Body::Value(AmqpValue(v)) => v,
            _ => Value::Null,
        };
        let properties = message.properties.unwrap_or_default();
        Ok(Request {
            message_id: properties.message_id,
            reply_to: properties.reply_to,
            application_properties: message.application_properties.map(|a| a.0).unwrap_or_default(),
            body,
        })
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
    let message = Message {
        header: None,
        delivery_annotations: None,
        message_annotations: None,
        properties: Some(Properties { correlation_id: request_message_id, ..Default::default() }),
        application_properties: Some(ApplicationProperties(props)),
        body: Body::Value(AmqpValue(body.unwrap_or(Value::Null))),
        footer: None,
    };
    Bytes::from(
        serde_amqp::to_vec(&Serializable(message)).expect("responses serialize into memory"),
    )
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
    use super::*;

    #[test]
    fn response_echoes_the_message_id_type_and_uses_the_dialects_spelling() {
        let id = MessageId::Uuid((*uuid::Uuid::new_v4().as_bytes()).into());
        let bytes = encode_response(Some(id.clone()), Dialect::Cbs, 202, "Accepted", None, None);
        let Deserializable(m): Deserializable<Message<Body<Value>>> =
            serde_amqp::from_slice(&bytes).unwrap();
        assert_eq!(m.properties.unwrap().correlation_id, Some(id));
        let props = m.application_properties.unwrap().0;
        assert_eq!(props.get("status-code"), Some(&SimpleValue::Int(202)));
        assert!(props.get("error-condition").is_none());

        let error = WireError::not_found("q");
        let bytes = encode_error(Some(MessageId::String("7".into())), Dialect::Management, &error);
        let Deserializable(m): Deserializable<Message<Body<Value>>> =
            serde_amqp::from_slice(&bytes).unwrap();
        let props = m.application_properties.unwrap().0;
        assert_eq!(props.get("statusCode"), Some(&SimpleValue::Int(404)));
        assert_eq!(
            props.get("errorCondition"),
            Some(&SimpleValue::Symbol("amqp:not-found".into()))
        );
    }
}
