//! Messages as the CLI builds and shows them: an outgoing message from `send`'s flags
//! ([`Outgoing`]), the view of a received or peeked one ([`MessageView`], `schema/message.json`),
//! and the copy `dead-letter resubmit` sends ([`resubmission`]).

use base64::Engine;
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::message::__private::Deserializable;
use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Batch, Body, Data, Message, MessageAnnotations, MessageId, Properties,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Timestamp, Value};
use serde_json::{json, Map, Value as Json};

use crate::amqp::{value_integer, AmqpMessage};
use crate::error::{CliError, Result};
use crate::output::Table;
use crate::time::format_rfc3339;

/// What `send` sets on a message.
#[derive(Debug, Clone, Default)]
pub struct Outgoing {
    /// The body.
    pub body: Vec<u8>,
    /// Content type.
    pub content_type: Option<String>,
    /// Subject (label).
    pub subject: Option<String>,
    /// MessageId (none: a fresh one).
    pub message_id: Option<String>,
    /// CorrelationId.
    pub correlation_id: Option<String>,
    /// SessionId.
    pub session_id: Option<String>,
    /// PartitionKey.
    pub partition_key: Option<String>,
    /// Application properties.
    pub properties: Vec<(String, SimpleValue)>,
    /// Scheduled enqueue time (ms since the epoch).
    pub schedule: Option<i64>,
}

impl Outgoing {
    /// The AMQP message: body as one data section.
    pub fn message(&self) -> AmqpMessage {
        let id =
            self.message_id.clone().unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
        let properties = Properties {
            message_id: Some(MessageId::String(id)),
            subject: self.subject.clone(),
            correlation_id: self.correlation_id.clone().map(MessageId::String),
            content_type: self.content_type.as_deref().map(Symbol::from),
            group_id: self.session_id.clone(),
            ..Properties::default()
        };
        let mut annotations = MessageAnnotations::builder();
        if let Some(key) = &self.partition_key {
            annotations = annotations
                .insert(OwnedKey::Symbol("x-opt-partition-key".into()), Value::String(key.clone()));
        }
        if let Some(at) = self.schedule {
            annotations = annotations.insert(
                OwnedKey::Symbol("x-opt-scheduled-enqueue-time".into()),
                Value::Timestamp(Timestamp::from_milliseconds(at)),
            );
        }
        let mut application = ApplicationProperties::builder();
        for (k, v) in &self.properties {
            application = application.insert(k.clone(), v.clone());
        }
        let annotations = annotations.build();
        let application = application.build();
        Message {
            header: None,
            delivery_annotations: None,
            message_annotations: (!annotations.0.is_empty()).then_some(annotations),
            properties: Some(properties),
            application_properties: (!application.0.is_empty()).then_some(application),
            body: Body::Data(Batch::from(vec![Data(Binary::from(self.body.clone()))])),
            footer: None,
        }
    }
}

/// Parses `key=value`: integers and `true`/`false` typed, `"text"` a string without quotes.
pub fn parse_property(text: &str) -> Result<(String, SimpleValue)> {
    let (key, value) = text
        .split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| CliError::usage(format!("--property `{text}`: expected KEY=VALUE")))?;
    let value = if let Some(quoted) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        SimpleValue::String(quoted.to_owned())
    } else if let Ok(n) = value.parse::<i64>() {
        SimpleValue::Long(n)
    } else if value == "true" || value == "false" {
        SimpleValue::Bool(value == "true")
    } else {
        SimpleValue::String(value.to_owned())
    };
    Ok((key.to_owned(), value))
}

/// Encodes a whole message (for `com.microsoft:schedule-message`).
pub fn encode(message: &AmqpMessage) -> Result<Vec<u8>> {
    use fe2o3_amqp::types::messaging::message::__private::Serializable;
    serde_amqp::to_vec(&Serializable(message))
        .map_err(|e| CliError::protocol("encoding a message").with_source(e))
}

/// Decodes one message of a `$management` answer (the AMQP encoding of a whole message).
pub fn decode(bytes: &[u8]) -> Result<AmqpMessage> {
    let decoded: Deserializable<AmqpMessage> = serde_amqp::from_slice(bytes).map_err(|e| {
        CliError::protocol("a message in the broker's answer does not decode").with_source(e)
    })?;
    Ok(decoded.0)
}

/// A message as the CLI shows it.
#[derive(Debug, Clone)]
pub struct MessageView {
    /// As JSON (`schema/message.json`).
    pub json: Json,
}

fn annotation<'a>(message: &'a AmqpMessage, key: &str) -> Option<&'a Value> {
    message.message_annotations.as_ref()?.0.get(&OwnedKey::Symbol(key.into()))
}

fn time(value: Option<&Value>) -> Json {
    match value {
        Some(Value::Timestamp(t)) => Json::String(format_rfc3339(t.milliseconds())),
        _ => Json::Null,
    }
}

fn id_text(id: &MessageId) -> String {
    match id {
        MessageId::String(s) => s.clone(),
        MessageId::Ulong(n) => n.to_string(),
        MessageId::Uuid(u) => format!("{u:?}"),
        MessageId::Binary(b) => base64::engine::general_purpose::STANDARD.encode(b.as_slice()),
    }
}

/// An AMQP simple value as JSON.
pub fn simple_json(value: &SimpleValue) -> Json {
    match value {
        SimpleValue::Null => Json::Null,
        SimpleValue::Bool(b) => Json::Bool(*b),
        SimpleValue::String(s) => Json::String(s.clone()),
        SimpleValue::Symbol(s) => Json::String(s.as_str().to_owned()),
        SimpleValue::Double(d) => json!(d.into_inner()),
        SimpleValue::Float(f) => json!(f.into_inner()),
        SimpleValue::Timestamp(t) => Json::String(format_rfc3339(t.milliseconds())),
        other => match crate::amqp::integer(other) {
            Some(n) => json!(n),
            None => Json::String(format!("{other:?}")),
        },
    }
}

/// An AMQP value as JSON (maps with string keys, lists, scalars; others as debug text).
fn value_json(value: &Value) -> Json {
    match value {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::String(s) => Json::String(s.clone()),
        Value::Symbol(s) => Json::String(s.as_str().to_owned()),
        Value::Binary(b) => {
            Json::String(base64::engine::general_purpose::STANDARD.encode(b.as_slice()))
        }
        Value::Timestamp(t) => Json::String(format_rfc3339(t.milliseconds())),
        Value::List(items) => Json::Array(items.iter().map(value_json).collect()),
        Value::Map(map) => Json::Object(
            map.iter()
                .map(|(k, v)| {
                    let key = match k {
                        Value::String(s) => s.clone(),
                        Value::Symbol(s) => s.as_str().to_owned(),
                        other => format!("{other:?}"),
                    };
                    (key, value_json(v))
                })
                .collect(),
        ),
        other => match value_integer(other) {
            Some(n) => json!(n),
            None => Json::String(format!("{other:?}")),
        },
    }
}

/// The body's bytes (data sections joined), if it is data.
pub fn body_bytes(message: &AmqpMessage) -> Option<Vec<u8>> {
    match &message.body {
        Body::Data(batch) => {
            Some(batch.iter().flat_map(|d| d.0.as_slice().iter().copied()).collect())
        }
        Body::Empty => Some(Vec::new()),
        _ => None,
    }
}

impl MessageView {
    /// The view of `message`.
    pub fn new(message: &AmqpMessage) -> Self {
        let props = message.properties.clone().unwrap_or_default();
        let app: Map<String, Json> = message
            .application_properties
            .as_ref()
            .map(|a| a.0.iter().map(|(k, v)| (k.clone(), simple_json(v))).collect())
            .unwrap_or_default();
        let (body, encoding) = match body_bytes(message) {
            Some(bytes) => match String::from_utf8(bytes) {
                Ok(text) => (Json::String(text), "utf-8"),
                Err(e) => (
                    Json::String(base64::engine::general_purpose::STANDARD.encode(e.as_bytes())),
                    "base64",
                ),
            },
            None => match &message.body {
                Body::Value(v) => (value_json(&v.0), "amqp-value"),
                _ => (Json::String(format!("{:?}", message.body)), "amqp-sequence"),
            },
        };
        let text = |key: &str| match app.get(key) {
            Some(Json::String(s)) => Json::String(s.clone()),
            _ => Json::Null,
        };
        let state = match annotation(message, "x-opt-message-state").and_then(value_integer) {
            Some(1) => "deferred",
            Some(2) => "scheduled",
            _ => "active",
        };
        let json = json!({
            "sequence_number": annotation(message, "x-opt-sequence-number").and_then(value_integer),
            "message_id": props.message_id.as_ref().map(id_text),
            "correlation_id": props.correlation_id.as_ref().map(id_text),
            "session_id": props.group_id,
            "partition_key": match annotation(message, "x-opt-partition-key") { Some(Value::String(s)) => Json::String(s.clone()), _ => Json::Null },
            "subject": props.subject,
            "content_type": props.content_type.as_ref().map(|s| s.as_str().to_owned()),
            "enqueued_time": time(annotation(message, "x-opt-enqueued-time")),
            "scheduled_enqueue_time": time(annotation(message, "x-opt-scheduled-enqueue-time")),
            "state": state,
            "delivery_count": message.header.as_ref().map_or(0, |h| h.delivery_count),
            "dead_letter_reason": text("DeadLetterReason"),
            "dead_letter_description": text("DeadLetterErrorDescription"),
            "application_properties": app,
            "body": body,
            "body_encoding": encoding,
        });
        MessageView { json }
    }

    /// A field as table text (`-` when null).
    pub fn cell(&self, key: &str) -> String {
        match &self.json[key] {
            Json::Null => "-".to_owned(),
            Json::String(s) => s.clone(),
            other => other.to_string(),
        }
    }

    /// The body for the table: text (shortened to 60 characters unless `full`).
    pub fn body_cell(&self, full: bool) -> String {
        let body = match &self.json["body"] {
            Json::String(s) => s.clone(),
            other => other.to_string(),
        };
        let body =
            if self.json["body_encoding"] == "base64" { format!("base64:{body}") } else { body };
        if full {
            return body;
        }
        match body.char_indices().nth(60) {
            Some((at, _)) => format!("{}…", &body[..at]),
            None => body,
        }
    }
}

/// The table of messages: sequence number, ids, times, state and body (and, for dead
/// letters, the reason and description).
pub fn table(views: &[MessageView], dead_letters: bool, full: bool) -> String {
    if views.is_empty() {
        return "no messages\n".to_owned();
    }
    let mut headers =
        vec![">SEQ", "MESSAGE ID", "ENQUEUED", "STATE", ">DELIVERIES", "SUBJECT", "SESSION"];
    if dead_letters {
        headers.extend(["REASON", "DESCRIPTION"]);
    }
    headers.push("BODY");
    let mut table = Table::new(&headers);
    for v in views {
        let mut row = vec![
            v.cell("sequence_number"),
            v.cell("message_id"),
            v.cell("enqueued_time"),
            v.cell("state"),
            v.cell("delivery_count"),
            v.cell("subject"),
            v.cell("session_id"),
        ];
        if dead_letters {
            row.push(v.cell("dead_letter_reason"));
            row.push(v.cell("dead_letter_description"));
        }
        row.push(v.body_cell(full));
        table.row(row);
    }
    table.render()
}

/// The copy of a dead-lettered message to send again: body, properties and application
/// properties as they were (but the dead-letter reason and description), the partition key;
/// a fresh MessageId when `fresh_id`.
pub fn resubmission(message: &AmqpMessage, fresh_id: bool) -> AmqpMessage {
    let mut properties = message.properties.clone().unwrap_or_default();
    if fresh_id || properties.message_id.is_none() {
        properties.message_id = Some(MessageId::String(uuid::Uuid::new_v4().simple().to_string()));
    }
    let application = message.application_properties.as_ref().map(|a| {
        let mut kept = a.clone();
        kept.0.shift_remove("DeadLetterReason");
        kept.0.shift_remove("DeadLetterErrorDescription");
        kept
    });
    let annotations = annotation(message, "x-opt-partition-key").map(|key| {
        MessageAnnotations::builder()
            .insert(OwnedKey::Symbol("x-opt-partition-key".into()), key.clone())
            .build()
    });
    Message {
        header: None,
        delivery_annotations: None,
        message_annotations: annotations,
        properties: Some(properties),
        application_properties: application,
        body: message.body.clone(),
        footer: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_are_typed_as_they_look() {
        assert_eq!(parse_property("n=42").unwrap(), ("n".into(), SimpleValue::Long(42)));
        assert_eq!(parse_property("ok=true").unwrap(), ("ok".into(), SimpleValue::Bool(true)));
        assert_eq!(
            parse_property("s=\"42\"").unwrap(),
            ("s".into(), SimpleValue::String("42".into()))
        );
        assert_eq!(
            parse_property("r=a=b").unwrap(),
            ("r".into(), SimpleValue::String("a=b".into()))
        );
        assert!(parse_property("=x").is_err());
        assert!(parse_property("x").is_err());
    }

    #[test]
    fn an_outgoing_message_shows_what_was_set() {
        let outgoing = Outgoing {
            body: b"hello".to_vec(),
            subject: Some("greeting".into()),
            message_id: Some("m1".into()),
            partition_key: Some("p".into()),
            properties: vec![("n".into(), SimpleValue::Long(1))],
            ..Outgoing::default()
        };
        let view = MessageView::new(&outgoing.message());
        assert_eq!(view.json["body"], "hello");
        assert_eq!(view.json["message_id"], "m1");
        assert_eq!(view.json["partition_key"], "p");
        assert_eq!(view.json["application_properties"]["n"], 1);
        assert_eq!(view.body_cell(false), "hello");
    }

    #[test]
    fn a_body_that_is_not_utf8_shows_as_base64() {
        let message = Outgoing { body: vec![0xff, 0x00, 0x41], ..Outgoing::default() }.message();
        let view = MessageView::new(&message);
        assert_eq!(view.json["body"], "/wBB");
        assert_eq!(view.json["body_encoding"], "base64");
        assert_eq!(view.body_cell(false), "base64:/wBB");
        let long = Outgoing { body: vec![b'x'; 100], ..Outgoing::default() }.message();
        assert_eq!(
            MessageView::new(&long).body_cell(false).chars().count(),
            61,
            "60 and an ellipsis"
        );
    }

    #[test]
    fn a_resubmission_drops_the_dead_letter_reason_and_can_take_a_fresh_id() {
        let mut message =
            Outgoing { body: b"x".to_vec(), message_id: Some("m1".into()), ..Outgoing::default() }
                .message();
        message.application_properties = Some(
            ApplicationProperties::builder()
                .insert("DeadLetterReason", SimpleValue::String("bad".into()))
                .insert("keep", SimpleValue::Long(1))
                .build(),
        );
        let same = MessageView::new(&resubmission(&message, false));
        assert_eq!(same.json["message_id"], "m1");
        assert_eq!(same.json["dead_letter_reason"], Json::Null);
        assert_eq!(same.json["application_properties"]["keep"], 1);
        let fresh = MessageView::new(&resubmission(&message, true));
        assert_ne!(fresh.json["message_id"], "m1");
    }
}
