//! The bodies of ironbus's fuzz targets, one function per target.
//!
//! Each `fuzz_targets/<name>.rs` only hands libFuzzer's input to the function of the same name
//! here, so that the targets share helpers and a reproducer can be stepped through from a test.
//!
//! Invariants:
//! - A target function returns normally for every input. A panic is a finding: it means the
//!   code under test panicked on input from the wire, or that a property asserted here (what
//!   decodes re-encodes and decodes again to the same message, a token we sign verifies) broke.
//! - Only public API of the crates under test is used, so a target exercises what the broker
//!   exercises and no crate carries fuzzing-only entry points.

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use ironbus_core::auth::{
    generate_token, Authorizer, Right, DEVELOPMENT_KEY, DEVELOPMENT_POLICY_NAME,
};
use ironbus_core::{
    BrokerProperties, LockToken, Message, MessageLock, MessageState, PropertyValue,
    ReceivedMessage, SequenceNumber, Timestamp,
};
use ironbus_transport_amqp::codec::{self, DeliveryOptions};
use ironbus_transport_amqp::frame::FrameReader;
use ironbus_transport_amqp::request::{encode_error, encode_response, Dialect, Request};
use ironbus_transport_http::{atom, dataplane};

/// The largest frame the broker accepts (`connection::MAX_FRAME_SIZE`).
const MAX_FRAME_SIZE: u32 = 1024 * 1024;

/// The development authorizer (RootManageSharedAccessKey / SAS_KEY_VALUE), built once.
fn authorizer() -> &'static Authorizer {
    static AUTHORIZER: OnceLock<Authorizer> = OnceLock::new();
    AUTHORIZER.get_or_init(Authorizer::development)
}

/// Runs a future whose I/O never waits (a reader over a byte slice) to completion.
///
/// # Panics
/// If the future is pending: an in-memory reader never is, so that would be a bug here.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("a future over in-memory input was pending"),
    }
}

/// `amqp_frame`: the input is the byte stream a peer sends after a protocol header; every frame
/// is read (size, data offset, type, guarded performative or SASL frame decode) until the
/// first error, as the connection does.
pub fn amqp_frame(data: &[u8]) {
    block_on(async {
        let mut reader = FrameReader::new(data);
        reader.set_max_frame_size(MAX_FRAME_SIZE);
        while reader.read_frame().await.is_ok() {}
    });
}

/// `amqp_message`: the input is a transfer payload. Whatever decodes as a message (alone, or
/// inside a batch envelope) must encode as a delivery, and that delivery must decode to the
/// same message; a modified-properties delivery (defer / dead-letter with properties to modify)
/// must carry the modified properties.
pub fn amqp_message(data: &[u8]) {
    let payload = Bytes::copy_from_slice(data);
    if let Ok(message) = codec::decode_message(payload.clone()) {
        round_trip(message);
    }
    if let Ok(messages) = codec::decode_batch(payload) {
        for message in messages {
            round_trip(message);
        }
    }
}

fn round_trip(message: Message) {
    let received = delivery(message.clone());
    let encoded = codec::encode_delivery(&received, DeliveryOptions::default());
    let decoded = codec::decode_message(encoded.clone())
        .unwrap_or_else(|e| panic!("a delivery we encoded does not decode: {e}\n{encoded:02x?}"));
    assert_same_message(&message, &decoded);

    // Management peek with omit-message-body.
    let peeked = codec::encode_delivery(&received, DeliveryOptions { omit_body: true });
    codec::decode_message(peeked).expect("a body-less delivery we encoded decodes");

    // Properties modified by a settlement replace the client's application-properties section.
    let mut modified = message;
    modified
        .application_properties
        .insert("x-fuzz-modified".to_owned(), PropertyValue::String("yes".to_owned()));
    modified.application_properties_modified = true;
    let encoded = codec::encode_delivery(&delivery(modified.clone()), DeliveryOptions::default());
    let decoded = codec::decode_message(encoded)
        .expect("a delivery with modified properties we encoded decodes");
    assert_same_message(&modified, &decoded);
}

/// A peek-lock delivery of `message` with every broker annotation set.
fn delivery(message: Message) -> ReceivedMessage {
    ReceivedMessage {
        message: Arc::new(message),
        broker: BrokerProperties {
            sequence_number: SequenceNumber(42),
            enqueued_sequence_number: SequenceNumber(41),
            enqueued_time: Timestamp::from_millis(1_700_000_000_000),
            delivery_count: 3,
            state: MessageState::Deferred,
            expires_at: Timestamp::MAX,
            dead_letter_source: Some("source-queue".to_owned()),
            ..BrokerProperties::default()
        },
        lock: Some(MessageLock {
            token: LockToken(uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef)),
            locked_until: Timestamp::from_millis(1_700_000_060_000),
        }),
    }
}

/// What the sender set survives a delivery: properties, application properties (compared by
/// their debug text, so that a NaN equals itself) and body.
fn assert_same_message(sent: &Message, delivered: &Message) {
    assert_eq!(sent.properties, delivered.properties, "properties changed in a delivery");
    assert_eq!(
        format!("{:?}", sent.application_properties),
        format!("{:?}", delivered.application_properties),
        "application properties changed in a delivery"
    );
    assert_eq!(sent.body, delivered.body, "body changed in a delivery");
}

/// `amqp_request`: the input is the payload of a `$cbs` or `$management` request. It is decoded
/// as the connection does; its message-id is echoed in a response (which must encode), its
/// operation is looked up, a put-token body is verified, and the body's fields are read.
pub fn amqp_request(data: &[u8]) {
    let request = match Request::decode(data) {
        Ok(request) => request,
        Err(e) => {
            encode_error(None, Dialect::Management, &e);
            return;
        }
    };
    let operation = request.property("operation").unwrap_or_default();
    let _ = request.property("name");
    for name in ["lock-tokens", "from-sequence-number", "message-count", "messages", "name"] {
        let _ = request.field(name);
    }
    if let fe2o3_amqp_types::primitives::Value::String(token) = &request.body {
        let _ = authorizer().verify_token(token, Timestamp::from_millis(0));
    }
    for dialect in [Dialect::Cbs, Dialect::Management] {
        let status = if operation.is_empty() { 400 } else { 200 };
        encode_response(
            request.message_id.clone(),
            dialect,
            status,
            &operation,
            None,
            Some(request.body.clone()),
        );
    }
}

/// `atom_description`: the input is the body of an ATOM PUT (create or update an entity).
pub fn atom_description(data: &[u8]) {
    let _ = atom::parse_description(data);
}

/// `rest_properties`: the input is split at NUL bytes into a BrokerProperties header, then
/// `name:value` custom-property headers, then the body; a single send is built from them as
/// the REST endpoint does. The whole input is also tried as a batch-send body.
pub fn rest_properties(data: &[u8]) {
    let _ = dataplane::batch_messages(data);

    let mut parts = data.split(|&b| b == 0);
    let mut headers = HeaderMap::new();
    if let Some(value) = parts.next().and_then(|v| HeaderValue::from_bytes(v).ok()) {
        headers.insert("brokerproperties", value);
    }
    let mut body = Bytes::new();
    for part in parts {
        let Some(colon) = part.iter().position(|&b| b == b':') else {
            body = Bytes::copy_from_slice(part);
            continue;
        };
        let (name, value) = (&part[..colon], &part[colon + 1..]);
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        {
            headers.append(name, value);
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = dataplane::typed_header(text);
    }
    let _ = dataplane::is_batch(&headers);
    let _ = dataplane::single_message(&headers, body);
}

/// `sas_token`: the input is tried as a token (with the development key, at a fixed time) and
/// as the resource URI of a token we sign, which must then verify and cover that resource.
pub fn sas_token(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let authorizer = authorizer();
    let now = Timestamp::from_millis(1_700_000_000_000);
    if let Ok(claim) = authorizer.verify_token(text, now) {
        let _ = claim.check(text, Right::Send, now);
    }
    let _ = authorizer.verify_key(text, text);

    let expires = Timestamp::from_millis(1_800_000_000_000);
    let token = generate_token(text, DEVELOPMENT_POLICY_NAME, DEVELOPMENT_KEY, expires);
    let claim = authorizer
        .verify_token(&token, now)
        .unwrap_or_else(|e| panic!("a token we signed for {text:?} is refused: {e}\n{token}"));
    assert_eq!(claim.expires_at, expires, "the expiry of a token we signed changed");
    let _ = claim.check(text, Right::Listen, now);
}
