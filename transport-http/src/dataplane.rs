//! The REST data plane (http.md A): send one message or a JSON batch, peek-lock and
//! receive-and-delete with a long-poll timeout, and unlock / complete / renew on the lock URI.
//!
//! Messages cross HTTP as a body plus headers: `BrokerProperties` (one-line, ASCII-only JSON) for
//! the system properties, one header per custom property (typed by the quoting rules of A.3),
//! and `Content-Type`.

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use ironbus_core::{
    ApplicationProperties, Broker, Disposition, EntityAddress, LockToken, Message,
    MessageProperties, MessageState, PropertyValue, ReceiveMode, ReceivedMessage, Timestamp,
};
use serde_json::{Map, Value};

use crate::error::{HttpError, Plane};
use crate::routes::LockOp;
use crate::timefmt::{parse_rfc1123, parse_time_span, rfc1123, TIME_SPAN_MAX_SECONDS};

/// The batch Content-Type (http.md A.4); the `.yml` spelling is a doc typo some copies carry.
const BATCH_TYPES: &[&str] =
    &["application/vnd.microsoft.servicebus.json", "application/vnd.microsoft.servicebus.yml"];
/// A receive without `timeout` waits this long.
pub const DEFAULT_RECEIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest long poll, kept below common proxy idle timeouts.
pub const MAX_RECEIVE_TIMEOUT: Duration = Duration::from_secs(55);

/// Request headers that are never custom properties.
const NOT_PROPERTIES: &[&str] = &[
    "authorization",
    "brokerproperties",
    "content-type",
    "content-length",
    "content-encoding",
    "host",
    "user-agent",
    "accept",
    "accept-encoding",
    "accept-language",
    "accept-charset",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "date",
    "cache-control",
    "pragma",
    "via",
    "origin",
    "referer",
    "cookie",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "proxy-authorization",
    "proxy-connection",
    "traceparent",
    "tracestate",
    "request-id",
    "location",
];
const NOT_PROPERTY_PREFIXES: &[&str] = &["x-ms-", "x-forwarded-", "servicebus", "sec-"];

/// Whether a request is a batch send, by its Content-Type (never by the body's looks).
pub fn is_batch(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .is_some_and(|media| BATCH_TYPES.contains(&media.as_str()))
}

/// The messages of a single send: the body, `BrokerProperties`, custom-property headers.
pub fn single_message(headers: &HeaderMap, body: Bytes) -> Result<Message, HttpError> {
    let mut message = Message::new(body);
    if let Some(value) = headers.get("brokerproperties") {
        let text = value
            .to_str()
            .map_err(|_| HttpError::bad_request("the BrokerProperties header is not ASCII text"))?;
        let json: Value = serde_json::from_str(text).map_err(|e| {
            HttpError::bad_request(format!("the BrokerProperties header is not valid JSON: {e}"))
        })?;
        let Value::Object(map) = json else {
            return Err(HttpError::bad_request(
                "the BrokerProperties header must be a JSON object",
            ));
        };
        apply_broker_properties(&map, &mut message.properties)?;
    }
    if let Some(value) = headers.get(header::CONTENT_TYPE) {
        let text = value
            .to_str()
            .map_err(|_| HttpError::bad_request("the Content-Type header is not ASCII text"))?;
        message.properties.content_type = Some(text.to_owned());
    }
    for (name, value) in headers {
        let name = name.as_str();
        if NOT_PROPERTIES.contains(&name)
            || NOT_PROPERTY_PREFIXES.iter().any(|p| name.starts_with(p))
        {
            continue;
        }
        let text = value.to_str().map_err(|_| {
            HttpError::bad_request(format!(
                "the value of custom property header {name} is not ASCII text"
            ))
        })?;
        message.application_properties.insert(name.to_owned(), typed_header(text));
    }
    finish(&mut message)?;
    Ok(message)
}

/// The messages of a batch send: a JSON array of `{Body, BrokerProperties, UserProperties}`.
pub fn batch_messages(body: &[u8]) -> Result<Vec<Message>, HttpError> {
    let json: Value = serde_json::from_slice(body)
        .map_err(|e| HttpError::bad_request(format!("the batch body is not valid JSON: {e}")))?;
    let Value::Array(items) = json else {
        return Err(HttpError::bad_request("the batch body must be a JSON array of messages"));
    };
    if items.is_empty() {
        return Err(HttpError::bad_request("the batch holds no messages"));
    }
    let mut messages = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let bad = |what: &str| HttpError::bad_request(format!("batch message {i}: {what}"));
        let Value::Object(mut item) = item else { return Err(bad("must be a JSON object")) };
        let body = match item.remove("Body") {
            Some(Value::String(s)) => Bytes::from(s),
            None | Some(Value::Null) => Bytes::new(),
            Some(_) => return Err(bad("Body must be a string")),
        };
        let mut message = Message::new(body);
        match item.remove("BrokerProperties") {
            Some(Value::Object(map)) => apply_broker_properties(&map, &mut message.properties)
                .map_err(|e| bad(&e.detail))?,
            None | Some(Value::Null) => {}
            Some(_) => return Err(bad("BrokerProperties must be an object")),
        }
        match item.remove("UserProperties") {
            Some(Value::Object(map)) => {
                for (name, value) in map {
                    let value = match value {
                        Value::Null => PropertyValue::Null,
                        Value::Bool(b) => PropertyValue::Bool(b),
                        Value::String(s) => PropertyValue::String(s),
                        Value::Number(n) => match n.as_i64() {
                            Some(i) => PropertyValue::Long(i),
                            None => PropertyValue::Double(n.as_f64().unwrap_or(f64::NAN)),
                        },
                        _ => {
                            return Err(bad(&format!(
                                "UserProperties.{name} must be a string, number, boolean or null"
                            )))
                        }
                    };
                    message.application_properties.insert(name, value);
                }
            }
            None | Some(Value::Null) => {}
            Some(_) => return Err(bad("UserProperties must be an object")),
        }
        finish(&mut message).map_err(|e| bad(&e.detail))?;
        messages.push(message);
    }
    Ok(messages)
}

/// Checks the rules that span properties and fills in a MessageId (32 hex digits, as Service
/// Bus does) when the sender gave none.
fn finish(message: &mut Message) -> Result<(), HttpError> {
    let p = &mut message.properties;
    if let (Some(session), Some(key)) = (&p.session_id, &p.partition_key) {
        if session != key {
            return Err(HttpError::bad_request(format!(
                "SessionId {session:?} and PartitionKey {key:?} must be equal when both are set"
            )));
        }
    }
    if p.message_id.is_none() {
        p.message_id = Some(uuid::Uuid::new_v4().simple().to_string());
    }
    Ok(())
}

fn apply_broker_properties(
    map: &Map<String, Value>,
    p: &mut MessageProperties,
) -> Result<(), HttpError> {
    for (key, value) in map {
        let string = || match value {
            Value::String(s) => Ok(Some(s.clone())),
            Value::Null => Ok(None),
            _ => Err(HttpError::bad_request(format!("BrokerProperties.{key} must be a string"))),
        };
        match key.as_str() {
            "CorrelationId" => p.correlation_id = string()?,
            "SessionId" => p.session_id = string()?,
            "MessageId" => p.message_id = string()?,
            "Label" => p.subject = string()?,
            "ReplyTo" => p.reply_to = string()?,
            "ReplyToSessionId" => p.reply_to_session_id = string()?,
            "To" => p.to = string()?,
            "PartitionKey" => p.partition_key = string()?,
            "TimeToLive" => {
                let seconds =
                    value.as_f64().filter(|s| s.is_finite() && *s >= 0.0).ok_or_else(|| {
                        HttpError::bad_request(
                            "BrokerProperties.TimeToLive must be a non-negative number of seconds",
                        )
                    })?;
                if seconds < TIME_SPAN_MAX_SECONDS {
                    p.time_to_live = Some(Duration::from_secs_f64(seconds));
                }
            }
            "TimeToLiveTimeSpan" => {
                let text = string()?.unwrap_or_default();
                p.time_to_live = Some(parse_time_span(&text).ok_or_else(|| {
                    HttpError::bad_request(format!(
                        "BrokerProperties.TimeToLiveTimeSpan {text:?} is not a d.hh:mm:ss time span"
                    ))
                })?);
            }
            "ScheduledEnqueueTimeUtc" => {
                let text = string()?.unwrap_or_default();
                p.scheduled_enqueue_time = Some(parse_rfc1123(&text).ok_or_else(|| {
                    HttpError::bad_request(format!(
                        "BrokerProperties.ScheduledEnqueueTimeUtc {text:?} is not an RFC 1123 date"
                    ))
                })?);
            }
            // ViaPartitionKey, ForcePersistence, read-only and unknown keys are ignored (doc).
            _ => {}
        }
    }
    Ok(())
}

/// Types a custom-property header value: `"quoted"` is a string (or a date if it is one),
/// `true`/`false` a bool, an integer an Int64, a decimal a Double; anything else a string (the
/// docs would reject it, but real clients send unquoted strings).
pub fn typed_header(text: &str) -> PropertyValue {
    let text = text.trim();
    if text.len() >= 2 && text.starts_with('"') && text.ends_with('"') {
        let inner = &text[1..text.len() - 1];
        return match parse_rfc1123(inner) {
            Some(t) => PropertyValue::Timestamp(t),
            None => PropertyValue::String(inner.to_owned()),
        };
    }
    match text {
        "true" => return PropertyValue::Bool(true),
        "false" => return PropertyValue::Bool(false),
        _ => {}
    }
    if let Ok(i) = text.parse::<i64>() {
        return PropertyValue::Long(i);
    }
    let numeric = !text.is_empty()
        && text.chars().all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E'))
        && text.chars().any(|c| c.is_ascii_digit());
    if numeric {
        if let Ok(f) = text.parse::<f64>() {
            return PropertyValue::Double(f);
        }
    }
    PropertyValue::String(text.to_owned())
}

/// A custom property as a header value; `None` when it cannot travel in a header.
fn header_value(value: &PropertyValue) -> Option<HeaderValue> {
    let text = match value {
        PropertyValue::Null | PropertyValue::Binary(_) => return None,
        PropertyValue::Bool(b) => b.to_string(),
        PropertyValue::UByte(v) => v.to_string(),
        PropertyValue::UShort(v) => v.to_string(),
        PropertyValue::UInt(v) => v.to_string(),
        PropertyValue::ULong(v) => v.to_string(),
        PropertyValue::Byte(v) => v.to_string(),
        PropertyValue::Short(v) => v.to_string(),
        PropertyValue::Int(v) => v.to_string(),
        PropertyValue::Long(v) => v.to_string(),
        PropertyValue::Float(v) if v.is_finite() => format!("{v:?}"),
        PropertyValue::Double(v) if v.is_finite() => format!("{v:?}"),
        PropertyValue::Float(_) | PropertyValue::Double(_) => return None,
        PropertyValue::Char(c) => format!("\"{c}\""),
        PropertyValue::Timestamp(t) | PropertyValue::LocalTimestamp(t) => {
            format!("\"{}\"", rfc1123(*t))
        }
        PropertyValue::TimeSpan(ms) => ms.to_string(),
        PropertyValue::Uuid(u) => format!("\"{u}\""),
        PropertyValue::String(s) => format!("\"{s}\""),
    };
    HeaderValue::from_str(&text).ok()
}

/// JSON with every non-ASCII character escaped, so it can travel in a header.
fn ascii_json(value: &Value) -> String {
    let text = value.to_string();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// The `BrokerProperties` of a received message (A.8): the keys the strictest client requires
/// are always present.
pub fn broker_properties_json(received: &ReceivedMessage) -> String {
    let p = &received.message.properties;
    let b = &received.broker;
    let mut map = Map::new();
    map.insert("DeliveryCount".into(), b.delivery_count.saturating_add(1).into());
    map.insert("EnqueuedTimeUtc".into(), rfc1123(b.enqueued_time).into());
    map.insert("MessageId".into(), p.message_id.clone().unwrap_or_default().into());
    map.insert("SequenceNumber".into(), b.sequence_number.0.into());
    let state = match b.state {
        MessageState::Active => "Active",
        MessageState::Deferred => "Deferred",
        MessageState::Scheduled => "Scheduled",
    };
    map.insert("State".into(), state.into());
    let ttl = match p.time_to_live {
        Some(ttl) => ttl.as_secs_f64().min(TIME_SPAN_MAX_SECONDS),
        None if b.expires_at == Timestamp::MAX => TIME_SPAN_MAX_SECONDS,
        None => b.expires_at.saturating_since(b.enqueued_time).as_secs_f64(),
    };
    map.insert("TimeToLive".into(), ttl.into());
    if let Some(lock) = received.lock {
        map.insert("LockToken".into(), lock.token.to_string().into());
        map.insert("LockedUntilUtc".into(), rfc1123(lock.locked_until).into());
    }
    for (key, value) in [
        ("Label", &p.subject),
        ("CorrelationId", &p.correlation_id),
        ("SessionId", &p.session_id),
        ("PartitionKey", &p.partition_key),
        ("ReplyTo", &p.reply_to),
        ("ReplyToSessionId", &p.reply_to_session_id),
        ("To", &p.to),
    ] {
        if let Some(value) = value {
            map.insert(key.into(), value.clone().into());
        }
    }
    if let Some(at) = p.scheduled_enqueue_time {
        map.insert("ScheduledEnqueueTimeUtc".into(), rfc1123(at).into());
    }
    if let Some(reason) = &b.dead_letter_reason {
        map.insert("DeadLetterReason".into(), reason.clone().into());
    }
    ascii_json(&Value::Object(map))
}

/// The response carrying a received message: body, `BrokerProperties`, `Content-Type`, custom
/// properties, and for a lock the absolute `Location` of its lock URI.
pub fn message_response(
    status: StatusCode,
    received: &ReceivedMessage,
    location: Option<String>,
) -> Response {
    let mut response = Response::new(Body::from(received.message.body.clone()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&broker_properties_json(received)) {
        headers.insert("brokerproperties", v);
    }
    if let Some(content_type) = &received.message.properties.content_type {
        if let Ok(v) = HeaderValue::from_str(content_type) {
            headers.insert(header::CONTENT_TYPE, v);
        }
    }
    if let Some(location) = location.and_then(|l| HeaderValue::from_str(&l).ok()) {
        headers.insert(header::LOCATION, location);
    }
    for (name, value) in &received.message.application_properties {
        let lower = name.to_ascii_lowercase();
        if NOT_PROPERTIES.contains(&lower.as_str()) {
            continue;
        }
        if let (Ok(name), Some(value)) =
            (HeaderName::from_bytes(lower.as_bytes()), header_value(value))
        {
            headers.insert(name, value);
        }
    }
    response
}

/// The `timeout` query parameter in seconds (a decimal number), capped.
pub fn receive_timeout(params: &[(String, String)]) -> Result<Duration, HttpError> {
    let Some((_, value)) = params.iter().find(|(k, _)| k.eq_ignore_ascii_case("timeout")) else {
        return Ok(DEFAULT_RECEIVE_TIMEOUT);
    };
    let seconds: f64 =
        value.parse().ok().filter(|s: &f64| s.is_finite() && *s >= 0.0).ok_or_else(|| {
            HttpError::bad_request(format!(
                "timeout {value:?} is not a non-negative number of seconds"
            ))
        })?;
    Ok(Duration::from_secs_f64(seconds.min(MAX_RECEIVE_TIMEOUT.as_secs_f64())))
}

/// Receives one message, waiting up to `timeout`. The receive runs on its own task, so a client
/// that hangs up mid-poll cannot leave a delivery half done; after the timeout the receiver is
/// drained, so a message that was on its way is still returned rather than lost.
pub async fn receive_one(
    broker: &Broker,
    entity: &EntityAddress,
    mode: ReceiveMode,
    timeout: Duration,
) -> Result<Option<ReceivedMessage>, HttpError> {
    let receiver = broker
        .open_receiver(entity.clone(), mode)
        .await
        .map_err(|e| HttpError::from_broker(e, Plane::Data))?;
    let entity = entity.to_string();
    let task = tokio::spawn(async move {
        receiver.add_credit(1);
        match tokio::time::timeout(timeout, receiver.recv()).await {
            Ok(Some(message)) => Ok(Some(message)),
            Ok(None) => Err(HttpError::new(
                StatusCode::GONE,
                format!("entity {entity} was deleted while receiving"),
            )),
            Err(_) => {
                receiver.drain().await;
                Ok(receiver.try_recv())
            }
        }
    });
    task.await.map_err(|e| {
        HttpError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("receive task failed: {e}"))
    })?
}

/// Parses the lock token segment of a lock URI.
pub fn lock_token(text: &str) -> Result<LockToken, HttpError> {
    uuid::Uuid::parse_str(text)
        .map(LockToken)
        .map_err(|_| HttpError::bad_request(format!("lock token {text:?} is not a GUID")))
}

/// Runs a lock operation.
pub async fn lock_op(
    broker: &Broker,
    entity: &EntityAddress,
    op: LockOp,
    token: LockToken,
) -> Result<(), HttpError> {
    let result = match op {
        LockOp::Complete => broker.complete(entity.clone(), token).await,
        LockOp::Unlock => {
            broker
                .settle(
                    entity.clone(),
                    token,
                    Disposition::Abandon { properties: ApplicationProperties::new() },
                )
                .await
        }
        LockOp::Renew => broker.renew_lock(entity.clone(), token).await.map(|_| ()),
    };
    result.map_err(|e| HttpError::from_broker(e, Plane::Data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_property_headers_are_typed_by_quoting() {
        assert_eq!(typed_header("\"High\""), PropertyValue::String("High".into()));
        assert_eq!(typed_header("High"), PropertyValue::String("High".into()));
        assert_eq!(typed_header("12345,ABC"), PropertyValue::String("12345,ABC".into()));
        assert_eq!(typed_header("true"), PropertyValue::Bool(true));
        assert_eq!(typed_header("True"), PropertyValue::String("True".into()));
        assert_eq!(typed_header("42"), PropertyValue::Long(42));
        assert_eq!(typed_header("-1.5"), PropertyValue::Double(-1.5));
        assert_eq!(typed_header("inf"), PropertyValue::String("inf".into()));
        assert_eq!(
            typed_header("\"Sun, 06 Nov 1994 08:49:37 GMT\""),
            PropertyValue::Timestamp(Timestamp::from_millis(784_111_777_000))
        );
    }

    #[test]
    fn broker_properties_header_is_validated() {
        let send = |bp: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("brokerproperties", HeaderValue::from_str(bp).unwrap());
            single_message(&headers, Bytes::new())
        };
        let m = send(r#"{"Label":"L","TimeToLive":4.5,"MessageId":"m1","Unknown":1,"ScheduledEnqueueTimeUtc":"Wed, 18 Oct 2023 10:00:00 +0000"}"#).unwrap();
        assert_eq!(m.properties.subject.as_deref(), Some("L"));
        assert_eq!(m.properties.time_to_live, Some(Duration::from_millis(4500)));
        assert!(m.properties.scheduled_enqueue_time.is_some());
        for bad in [
            "{",
            "[1]",
            r#"{"Label":5}"#,
            r#"{"TimeToLive":-1}"#,
            r#"{"TimeToLiveTimeSpan":"99999999999999999.00:00:00"}"#,
            r#"{"ScheduledEnqueueTimeUtc":"tomorrow"}"#,
            r#"{"SessionId":"a","PartitionKey":"b"}"#,
        ] {
            assert_eq!(send(bad).unwrap_err().status, StatusCode::BAD_REQUEST, "{bad}");
        }
        let generated = send("{}").unwrap().properties.message_id.unwrap();
        assert_eq!(generated.len(), 32);
    }

    #[test]
    fn batches_are_validated() {
        let ok = batch_messages(
            br#"[{"Body":"a","BrokerProperties":{"Label":"x","TimeToLiveTimeSpan":"0.00:05:00"},"UserProperties":{"n":1,"f":1.5,"s":"t"}}]"#,
        )
        .unwrap();
        assert_eq!(ok[0].body, Bytes::from("a"));
        assert_eq!(ok[0].application_properties["n"], PropertyValue::Long(1));
        assert_eq!(ok[0].properties.time_to_live, Some(Duration::from_secs(300)));
        for bad in [
            &b"not json"[..],
            b"{}",
            b"[]",
            b"[1]",
            br#"[{"Body":5}]"#,
            br#"[{"UserProperties":{"x":[1]}}]"#,
            br#"[{"BrokerProperties":"x"}]"#,
        ] {
            let e = batch_messages(bad).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn json_in_headers_is_ascii() {
        assert_eq!(ascii_json(&Value::from("é😀")), r#""\u00e9\ud83d\ude00""#);
    }
}
