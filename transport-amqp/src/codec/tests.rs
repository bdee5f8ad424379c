use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use fe2o3_amqp_types::messaging::annotations::OwnedKey;
use fe2o3_amqp_types::messaging::message::__private::{Deserializable, Serializable};
use fe2o3_amqp_types::messaging::{
    AmqpSequence, AmqpValue, ApplicationProperties as FeAppProps, Batch, Body, Data,
    DeliveryAnnotations, Header, Message as FeMessage, MessageAnnotations, MessageId, Properties,
};
use fe2o3_amqp_types::primitives::{Binary, SimpleValue, Symbol, Value};
use ironbus_core::{
    BrokerProperties, LockToken, Message, MessageLock, MessageProperties, MessageState,
    PropertyValue, ReceivedMessage, SequenceNumber, Timestamp,
};
use serde_amqp::primitives::Timestamp as FeTimestamp;

use super::sections::{is_body, RawMessage};
use super::*;

const TOKEN: &str = "00112233-4455-6677-8899-aabbccddeeff";

fn fe_uuid() -> fe2o3_amqp_types::primitives::Uuid {
    (*Uuid::parse_str(TOKEN).unwrap().as_bytes()).into()
}

fn encode_fe<B: fe2o3_amqp_types::messaging::SerializableBody>(msg: &FeMessage<B>) -> Bytes {
    Bytes::from(serde_amqp::to_vec(&Serializable(msg)).expect("serialize"))
}

fn decode_fe(bytes: &[u8]) -> FeMessage<Body<Value>> {
    let d: Deserializable<FeMessage<Body<Value>>> =
        serde_amqp::from_slice(bytes).expect("fe2o3 decodes our output");
    d.0
}

fn data_body(parts: &[&[u8]]) -> Body<Value> {
    Body::Data(Batch::new(parts.iter().map(|p| Data(Binary::from(p.to_vec()))).collect::<Vec<_>>()))
}

/// A client message with everything set: header, delivery and message annotations
/// (including broker-owned keys the broker must drop), properties, app properties.
fn full_client_message(body: Body<Value>) -> FeMessage<Body<Value>> {
    FeMessage {
        header: Some(Header {
            durable: true,
            priority: 7.into(),
            ttl: Some(30_000),
            first_acquirer: true,
            delivery_count: 9,
        }),
        delivery_annotations: Some(
            DeliveryAnnotations::builder().insert("x-client-da", 1i32).build(),
        ),
        message_annotations: Some(
            MessageAnnotations::builder()
                .insert("x-opt-partition-key", "pk-1")
                .insert(
                    "x-opt-scheduled-enqueue-time",
                    Value::Timestamp(FeTimestamp::from_milliseconds(1_700_000_000_000)),
                )
                .insert("x-opt-sequence-number", Value::Long(99))
                .insert("x-opt-enqueued-time", Value::Long(5))
                .insert("x-opt-locked-until", Value::Long(5))
                .insert("x-opt-message-state", Value::Int(1))
                .insert("x-opt-enqueue-sequence-number", Value::Long(99))
                .insert("x-opt-deadletter-source", "elsewhere")
                .insert("x-opt-via-partition-key", "via")
                .insert(OwnedKey::Ulong(42), Value::Bool(true))
                .build(),
        ),
        properties: Some(Properties {
            message_id: Some(MessageId::Uuid(fe_uuid())),
            user_id: Some(Binary::from(vec![1, 2])),
            to: Some("to-addr".into()),
            subject: Some("subj".into()),
            reply_to: Some("reply-addr".into()),
            correlation_id: Some(MessageId::Ulong(12345)),
            content_type: Some(Symbol::from("application/json")),
            content_encoding: None,
            absolute_expiry_time: Some(FeTimestamp::from_milliseconds(1_000)),
            creation_time: Some(FeTimestamp::from_milliseconds(500)),
            group_id: Some("session-1".into()),
            group_sequence: None,
            reply_to_group_id: Some("reply-session".into()),
        }),
        application_properties: Some(
            FeAppProps::builder()
                .insert("s", "str")
                .insert("i", SimpleValue::Int(-7))
                .insert("l", SimpleValue::Long(1 << 40))
                .insert("u", SimpleValue::Uint(7))
                .insert("ul", SimpleValue::Ulong(u64::MAX))
                .insert("b", SimpleValue::Bool(true))
                .insert("d", 2.5f64)
                .insert("f", 1.5f32)
                .insert("c", SimpleValue::Char('é'))
                .insert("t", SimpleValue::Timestamp(FeTimestamp::from_milliseconds(77)))
                .insert("g", SimpleValue::Uuid(fe_uuid()))
                .insert("bin", SimpleValue::Binary(Binary::from(vec![9, 8])))
                .insert("n", SimpleValue::Null)
                .insert("sym", SimpleValue::Symbol(Symbol::from("exotic")))
                .build(),
        ),
        body,
        footer: None,
    }
}

fn received(message: Message, locked: bool) -> ReceivedMessage {
    ReceivedMessage {
        message: Arc::new(message),
        broker: BrokerProperties {
            sequence_number: SequenceNumber(17),
            enqueued_sequence_number: SequenceNumber(17),
            enqueued_time: Timestamp::from_millis(1_700_000_000_500),
            delivery_count: 0,
            state: MessageState::Deferred,
            expires_at: Timestamp::MAX,
            dead_letter_source: Some("orig-queue".into()),
            ..BrokerProperties::default()
        },
        lock: locked.then(|| MessageLock {
            token: LockToken(Uuid::parse_str(TOKEN).unwrap()),
            locked_until: Timestamp::from_millis(1_700_000_060_000),
        }),
    }
}

fn annotation<'a>(anns: &'a MessageAnnotations, key: &str) -> Option<&'a Value> {
    anns.0.get(&OwnedKey::Symbol(Symbol::from(key)))
}

/// Every `00 <descriptor>` position that starts a top-level section.
fn section_descriptors(bytes: &[u8]) -> Vec<(u8, u8)> {
    let sections = split_sections(bytes).expect("our output splits");
    sections.iter().map(|s| (bytes[s.start + 1], s.code)).collect()
}

#[test]
fn decodes_every_field() {
    let payload = encode_fe(&full_client_message(data_body(&[b"hello"])));
    let m = decode_message(payload).unwrap();
    let p = &m.properties;
    assert_eq!(p.message_id.as_deref(), Some(TOKEN));
    assert_eq!(p.correlation_id.as_deref(), Some("12345"));
    assert_eq!(p.session_id.as_deref(), Some("session-1"));
    assert_eq!(p.reply_to_session_id.as_deref(), Some("reply-session"));
    assert_eq!(p.partition_key.as_deref(), Some("pk-1"));
    assert_eq!(p.to.as_deref(), Some("to-addr"));
    assert_eq!(p.subject.as_deref(), Some("subj"));
    assert_eq!(p.reply_to.as_deref(), Some("reply-addr"));
    assert_eq!(p.content_type.as_deref(), Some("application/json"));
    assert_eq!(p.time_to_live, Some(Duration::from_millis(30_000)));
    assert_eq!(p.scheduled_enqueue_time, Some(Timestamp::from_millis(1_700_000_000_000)));
    assert_eq!(&m.body[..], b"hello");
    assert!(!m.application_properties_modified);

    let a = &m.application_properties;
    assert_eq!(a["s"], PropertyValue::String("str".into()));
    assert_eq!(a["i"], PropertyValue::Int(-7));
    assert_eq!(a["l"], PropertyValue::Long(1 << 40));
    assert_eq!(a["u"], PropertyValue::UInt(7));
    assert_eq!(a["ul"], PropertyValue::ULong(u64::MAX));
    assert_eq!(a["b"], PropertyValue::Bool(true));
    assert_eq!(a["d"], PropertyValue::Double(2.5));
    assert_eq!(a["f"], PropertyValue::Float(1.5));
    assert_eq!(a["c"], PropertyValue::Char('é'));
    assert_eq!(a["t"], PropertyValue::Timestamp(Timestamp::from_millis(77)));
    assert_eq!(a["g"], PropertyValue::Uuid(Uuid::parse_str(TOKEN).unwrap()));
    assert_eq!(a["bin"], PropertyValue::Binary(Bytes::from_static(&[9, 8])));
    assert_eq!(a["n"], PropertyValue::Null);
    assert!(!a.contains_key("sym"), "symbol values are kept in raw only");
    assert_eq!(a.len(), 13);

    // The raw envelope: version, durable flag + both annotations flags, priority 7.
    let raw = m.raw.as_ref().unwrap();
    let flags = RAW_DURABLE
        | RAW_DURABLE_SET
        | RAW_PRIORITY_SET
        | RAW_ANNOTATIONS
        | RAW_DELIVERY_ANNOTATIONS;
    assert_eq!(&raw[..3], &[RAW_VERSION, flags, 7]);
    let parsed = RawMessage::parse(raw).unwrap();
    assert_eq!(parsed.annotations.unwrap().0, 4, "x-opt-via-partition-key and ulong 42");
    assert_eq!(parsed.delivery_annotations.unwrap().0, 2, "x-client-da");
    let codes: Vec<u8> = parsed.sections.iter().map(|s| s.code).collect();
    assert_eq!(codes, [PROPERTIES, APPLICATION_PROPERTIES, DATA]);
}

#[test]
fn canonical_id_strings() {
    let cases: [(MessageId, &str); 4] = [
        (MessageId::String("abc".into()), "abc"),
        (MessageId::Uuid(fe_uuid()), TOKEN),
        (MessageId::Ulong(18_446_744_073_709_551_615), "18446744073709551615"),
        (MessageId::Binary(Binary::from(vec![0x0a, 0xff, 0x00])), "0aff00"),
    ];
    for (id, expected) in cases {
        let msg = FeMessage {
            header: None,
            delivery_annotations: None,
            message_annotations: None,
            properties: Some(Properties {
                message_id: Some(id.clone()),
                correlation_id: Some(id),
                ..Properties::default()
            }),
            application_properties: None,
            body: data_body(&[b"x"]),
            footer: None,
        };
        let m = decode_message(encode_fe(&msg)).unwrap();
        assert_eq!(m.properties.message_id.as_deref(), Some(expected));
        assert_eq!(m.properties.correlation_id.as_deref(), Some(expected));
    }
}

#[test]
fn bodies() {
    let two =
        decode_message(encode_fe(&FeMessage::builder().body(data_body(&[b"ab", b"cd"])).build()))
            .unwrap();
    assert_eq!(&two.body[..], b"abcd");

    let value =
        FeMessage::builder().body(Body::Value(AmqpValue(Value::String("v".into())))).build();
    let value = decode_message(encode_fe(&value)).unwrap();
    assert!(value.body.is_empty());

    let seq = FeMessage::builder()
        .body(Body::<Value>::Sequence(Batch::new(vec![
            AmqpSequence(vec![Value::Int(1)]),
            AmqpSequence(vec![Value::Int(2)]),
        ])))
        .build();
    let seq = decode_message(encode_fe(&seq)).unwrap();
    assert!(seq.body.is_empty());
    // The two sequences, after the properties section that carries the assigned message-id.
    assert_eq!(RawMessage::parse(seq.raw.as_ref().unwrap()).unwrap().sections.len(), 3);

    // No header: defaults.
    let m =
        decode_message(encode_fe(&FeMessage::builder().body(data_body(&[b"x"])).build())).unwrap();
    assert_eq!(&m.raw.as_ref().unwrap()[..3], &[RAW_VERSION, 0, 4]);
    let assigned =
        MessageProperties { message_id: m.properties.message_id.clone(), ..Default::default() };
    assert_eq!(m.properties, assigned);
}

/// encode_delivery's output, decoded by fe2o3, for each body kind.
#[test]
fn delivery_round_trip_through_fe2o3() {
    let bodies: [Body<Value>; 3] = [
        data_body(&[b"part1", b"part2"]),
        Body::Value(AmqpValue(Value::List(vec![Value::Int(1), Value::String("x".into())]))),
        Body::Sequence(Batch::new(vec![
            AmqpSequence(vec![Value::Long(1)]),
            AmqpSequence(vec![Value::Bool(false)]),
        ])),
    ];
    for body in bodies {
        let client = full_client_message(body.clone());
        let m = decode_message(encode_fe(&client)).unwrap();
        let out = encode_delivery(&received(m, true), DeliveryOptions::default());

        // Header: all five fields, delivery-count 0 written out, first-acquirer null.
        let header = [
            0x00, 0x53, 0x70, 0xc0, 0x0f, 0x05, 0x41, 0x50, 0x07, 0x70, 0, 0, 0x75, 0x30, 0x40,
            0x70, 0, 0, 0, 0,
        ];
        assert_eq!(&out[..header.len()], &header);

        let fe = decode_fe(&out);
        let h = fe.header.as_ref().unwrap();
        assert!(h.durable);
        assert_eq!(h.priority.0, 7);
        assert_eq!(h.ttl, Some(30_000));
        assert!(!h.first_acquirer);
        assert_eq!(h.delivery_count, 0);

        let da = fe.delivery_annotations.as_ref().unwrap();
        assert_eq!(da.0.len(), 2);
        assert_eq!(
            da.0.get(&OwnedKey::Symbol(Symbol::from("x-opt-lock-token"))),
            Some(&Value::Uuid(fe_uuid()))
        );
        assert_eq!(
            da.0.get(&OwnedKey::Symbol(Symbol::from("x-client-da"))),
            Some(&Value::Int(1)),
            "the sender's delivery annotations are kept"
        );

        let ma = fe.message_annotations.as_ref().unwrap();
        assert_eq!(annotation(ma, "x-opt-sequence-number"), Some(&Value::Long(17)));
        assert_eq!(annotation(ma, "x-opt-enqueue-sequence-number"), None, "not forwarded");
        assert_eq!(
            annotation(ma, "x-opt-enqueued-time"),
            Some(&Value::Timestamp(FeTimestamp::from_milliseconds(1_700_000_000_500)))
        );
        assert_eq!(
            annotation(ma, "x-opt-locked-until"),
            Some(&Value::Timestamp(FeTimestamp::from_milliseconds(1_700_000_060_000)))
        );
        assert_eq!(annotation(ma, "x-opt-message-state"), Some(&Value::Int(1)));
        assert_eq!(annotation(ma, "x-opt-partition-key"), Some(&Value::String("pk-1".into())));
        assert_eq!(
            annotation(ma, "x-opt-scheduled-enqueue-time"),
            Some(&Value::Timestamp(FeTimestamp::from_milliseconds(1_700_000_000_000)))
        );
        assert_eq!(
            annotation(ma, "x-opt-deadletter-source"),
            Some(&Value::String("orig-queue".into()))
        );
        assert_eq!(annotation(ma, "x-opt-via-partition-key"), Some(&Value::String("via".into())));
        assert_eq!(ma.0.get(&OwnedKey::Ulong(42)), Some(&Value::Bool(true)));
        assert_eq!(ma.0.len(), 9, "no duplicate keys: {ma:?}");

        // The bare message is the client's, types included.
        assert_eq!(fe.properties, client.properties);
        assert!(matches!(fe.properties.as_ref().unwrap().message_id, Some(MessageId::Uuid(_))));
        assert_eq!(fe.application_properties, client.application_properties);
        assert_eq!(fe.body, body);

        for (descriptor, _) in section_descriptors(&out) {
            assert_eq!(descriptor, 0x53);
        }
    }
}

#[test]
fn unlocked_delivery_has_no_lock_annotations() {
    let m = decode_message(encode_fe(&full_client_message(data_body(&[b"x"])))).unwrap();
    let out = encode_delivery(&received(m, false), DeliveryOptions::default());
    let fe = decode_fe(&out);
    let da = fe.delivery_annotations.unwrap().0;
    assert_eq!(da.len(), 1, "only the sender's: {da:?}");
    assert!(da.get(&OwnedKey::Symbol(Symbol::from("x-opt-lock-token"))).is_none());
    let ma = fe.message_annotations.unwrap();
    assert!(annotation(&ma, "x-opt-locked-until").is_none());
    assert_eq!(annotation(&ma, "x-opt-sequence-number"), Some(&Value::Long(17)));
}

#[test]
fn header_without_ttl_writes_null() {
    let m =
        decode_message(encode_fe(&FeMessage::builder().body(data_body(&[b"x"])).build())).unwrap();
    let mut r = received(m, false);
    r.broker.delivery_count = 3;
    let out = encode_delivery(&r, DeliveryOptions::default());
    // Durable, priority and first-acquirer null, as Service Bus sends them to a sender that
    // gave none (the python suite's recorded header has them None).
    assert_eq!(
        &out[..15],
        &[0x00, 0x53, 0x70, 0xc0, 0x0a, 0x05, 0x40, 0x40, 0x40, 0x40, 0x70, 0, 0, 0, 3]
    );
    let h = decode_fe(&out).header.unwrap();
    assert_eq!((h.ttl, h.delivery_count, h.priority.0, h.durable), (None, 3, 4, false));
}

#[test]
fn ttl_capped_by_effective_expiry() {
    let m = Message::new("x").with_time_to_live(Duration::from_secs(3600));
    let mut r = received(m, false);
    r.broker.expires_at = r.broker.enqueued_time.saturating_add(Duration::from_secs(60));
    let h = decode_fe(&encode_delivery(&r, DeliveryOptions::default())).header.unwrap();
    assert_eq!(h.ttl, Some(60_000));
}

#[test]
fn modified_app_properties_replace_the_section() {
    let mut m = decode_message(encode_fe(&full_client_message(data_body(&[b"x"])))).unwrap();
    m.application_properties.insert("s".into(), PropertyValue::String("changed".into()));
    m.application_properties.insert("DeadLetterReason".into(), PropertyValue::String("why".into()));
    m.application_properties_modified = true;
    let out = encode_delivery(&received(m, true), DeliveryOptions::default());
    let fe = decode_fe(&out);
    let app = fe.application_properties.unwrap().0;
    assert_eq!(app.get("s"), Some(&SimpleValue::String("changed".into())));
    assert_eq!(app.get("DeadLetterReason"), Some(&SimpleValue::String("why".into())));
    assert_eq!(app.get("l"), Some(&SimpleValue::Long(1 << 40)));
    assert_eq!(app.get("c"), Some(&SimpleValue::Char('é')));
    assert_eq!(app.get("g"), Some(&SimpleValue::Uuid(fe_uuid())));
    assert_eq!(
        app.get("sym"),
        Some(&SimpleValue::Symbol(Symbol::from("exotic"))),
        "exotic values survive a re-encode"
    );
    assert_eq!(app.len(), 15);
    assert!(matches!(fe.properties.unwrap().message_id, Some(MessageId::Uuid(_))));
    assert_eq!(fe.body, data_body(&[b"x"]));
}

#[test]
fn modified_app_properties_inserted_when_absent() {
    for with_properties in [true, false] {
        let msg = FeMessage {
            header: None,
            delivery_annotations: None,
            message_annotations: None,
            properties: with_properties.then(|| Properties {
                message_id: Some(MessageId::Ulong(5)),
                ..Default::default()
            }),
            application_properties: None,
            body: data_body(&[b"body"]),
            footer: None,
        };
        let mut m = decode_message(encode_fe(&msg)).unwrap();
        m.application_properties.insert("k".into(), PropertyValue::Long(1));
        m.application_properties_modified = true;
        let out = encode_delivery(&received(m, false), DeliveryOptions::default());
        let codes: Vec<u8> = section_descriptors(&out).into_iter().map(|(_, c)| c).collect();
        // A message without properties gets a properties section for its assigned id.
        let expected = vec![
            HEADER,
            DELIVERY_ANNOTATIONS,
            MESSAGE_ANNOTATIONS,
            PROPERTIES,
            APPLICATION_PROPERTIES,
            DATA,
        ];
        assert_eq!(codes, expected);
        let fe = decode_fe(&out);
        assert_eq!(fe.application_properties.unwrap().0.get("k"), Some(&SimpleValue::Long(1)));
        if with_properties {
            assert_eq!(fe.properties.unwrap().message_id, Some(MessageId::Ulong(5)));
        }
    }
}

/// Rewrites every `00 53 <code>` section descriptor of a serde_amqp-encoded message.
fn with_descriptors(bytes: &[u8], long_form: bool) -> Vec<u8> {
    let sections = split_sections(bytes).unwrap();
    let mut out = Vec::new();
    for s in sections {
        out.push(0x00);
        if long_form {
            out.push(0x80);
            out.extend_from_slice(&u64::from(s.code).to_be_bytes());
        } else {
            let name = match s.code {
                HEADER => "amqp:header:list",
                MESSAGE_ANNOTATIONS => "amqp:message-annotations:map",
                PROPERTIES => "amqp:properties:list",
                APPLICATION_PROPERTIES => "amqp:application-properties:map",
                DATA => "amqp:data:binary",
                _ => "amqp:amqp-value:*",
            };
            out.push(0xa3);
            out.push(name.len() as u8);
            out.extend_from_slice(name.as_bytes());
        }
        out.extend_from_slice(&bytes[s.value..s.end]);
    }
    out
}

#[test]
fn long_and_symbolic_descriptors_are_normalized() {
    let mut client = full_client_message(data_body(&[b"a", b"b"]));
    client.delivery_annotations = None;
    let original = encode_fe(&client);
    for long_form in [true, false] {
        let rewritten = with_descriptors(&original, long_form);
        assert_ne!(&rewritten[..], &original[..]);
        let m = decode_message(Bytes::from(rewritten)).unwrap();
        assert_eq!(m.properties.message_id.as_deref(), Some(TOKEN));
        assert_eq!(&m.body[..], b"ab");
        let out = encode_delivery(&received(m, true), DeliveryOptions::default());
        let descriptors = section_descriptors(&out);
        assert_eq!(descriptors.len(), 7);
        assert!(descriptors.iter().all(|(d, _)| *d == 0x53), "{descriptors:?}");
        let fe = decode_fe(&out);
        assert_eq!(fe.properties, client.properties);
        assert_eq!(fe.body, client.body);
    }
}

#[test]
fn core_message_without_raw() {
    let m = Message::new("payload")
        .with_message_id("mid")
        .with_session_id("sess")
        .with_partition_key("sess")
        .with_time_to_live(Duration::from_secs(10))
        .with_property("n", PropertyValue::Int(3))
        .with_property("when", PropertyValue::Timestamp(Timestamp::from_millis(9)));
    let mut m = m;
    m.properties.content_type = Some("text/plain".into());
    m.properties.reply_to_session_id = Some("rs".into());
    let out = encode_delivery(&received(m, true), DeliveryOptions::default());
    assert!(section_descriptors(&out).iter().all(|(d, _)| *d == 0x53));
    let fe = decode_fe(&out);
    let p = fe.properties.unwrap();
    assert_eq!(p.message_id, Some(MessageId::String("mid".into())));
    assert_eq!(p.group_id.as_deref(), Some("sess"));
    assert_eq!(p.reply_to_group_id.as_deref(), Some("rs"));
    assert_eq!(p.content_type, Some(Symbol::from("text/plain")));
    let app = fe.application_properties.unwrap().0;
    assert_eq!(app.get("n"), Some(&SimpleValue::Int(3)));
    assert_eq!(app.get("when"), Some(&SimpleValue::Timestamp(FeTimestamp::from_milliseconds(9))));
    assert_eq!(fe.body, data_body(&[b"payload"]));
    assert_eq!(fe.header.unwrap().ttl, Some(10_000));
    let ma = fe.message_annotations.unwrap();
    assert_eq!(annotation(&ma, "x-opt-partition-key"), Some(&Value::String("sess".into())));

    // And our own decoder reads it back.
    let back = decode_message(out).unwrap();
    assert_eq!(back.properties.message_id.as_deref(), Some("mid"));
    assert_eq!(back.properties.session_id.as_deref(), Some("sess"));
    assert_eq!(&back.body[..], b"payload");
    assert_eq!(back.application_properties.len(), 2);
}

#[test]
fn omit_body() {
    let m = decode_message(encode_fe(&full_client_message(data_body(&[b"x"])))).unwrap();
    let out = encode_delivery(&received(m, false), DeliveryOptions { omit_body: true });
    let codes: Vec<u8> = section_descriptors(&out).into_iter().map(|(_, c)| c).collect();
    let expected =
        [HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES];
    assert_eq!(codes, expected);
    let out =
        encode_delivery(&received(Message::new("x"), false), DeliveryOptions { omit_body: true });
    assert!(!section_descriptors(&out).iter().any(|(_, c)| is_body(*c)));
}

#[test]
fn redelivered_message_drops_broker_annotations() {
    // A client re-sending a received message (py does) must not carry our annotations.
    let m = decode_message(encode_fe(&full_client_message(data_body(&[b"x"])))).unwrap();
    let out = encode_delivery(&received(m.clone(), true), DeliveryOptions::default());
    let again = decode_message(out).unwrap();
    assert_eq!(again.properties, m.properties);
    assert_eq!(again.application_properties, m.application_properties);
    assert_eq!(again.body, m.body);
    let raw = RawMessage::parse(again.raw.as_ref().unwrap()).unwrap();
    assert_eq!(raw.annotations.unwrap().0, 4);
    assert_eq!(raw.bare, RawMessage::parse(m.raw.as_ref().unwrap()).unwrap().bare);
}

#[test]
fn batch_of_three() {
    let inner: Vec<Bytes> = (0..3)
        .map(|i| {
            encode_fe(
                &FeMessage::builder()
                    .properties(Properties {
                        message_id: Some(MessageId::String(format!("m{i}"))),
                        ..Default::default()
                    })
                    .application_properties(FeAppProps::builder().insert("i", i).build())
                    .body(data_body(&[format!("body{i}").as_bytes()]))
                    .build(),
            )
        })
        .collect();
    let parts: Vec<&[u8]> = inner.iter().map(|b| &b[..]).collect();
    let envelope = FeMessage {
        header: None,
        delivery_annotations: None,
        message_annotations: Some(
            MessageAnnotations::builder().insert("x-opt-partition-key", "p").build(),
        ),
        properties: Some(Properties {
            message_id: Some(MessageId::String("m0".into())),
            ..Default::default()
        }),
        application_properties: None,
        body: data_body(&parts),
        footer: None,
    };
    let messages = decode_transfer(BATCH_MESSAGE_FORMAT, encode_fe(&envelope)).unwrap();
    assert_eq!(messages.len(), 3);
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(m.properties.message_id, Some(format!("m{i}")));
        assert_eq!(m.body, Bytes::from(format!("body{i}")));
        assert_eq!(m.application_properties["i"], PropertyValue::Int(i as i32));
        assert_eq!(m.properties.partition_key, None);
    }

    let bad = FeMessage::builder().body(Body::Value(AmqpValue(Value::Int(1)))).build();
    assert!(decode_batch(encode_fe(&bad)).is_err());
    let broken = data_body(&[&inner[0][..], b"\x00\x53\x75\xa0\x05ab"]);
    let err = decode_batch(encode_fe(&FeMessage::builder().body(broken).build())).unwrap_err();
    assert!(err.message().starts_with("batch message 1:"), "{err}");
    assert!(decode_transfer(7, Bytes::new()).is_err());
}

#[test]
fn lock_token_layout() {
    let token = Uuid::parse_str(TOKEN).unwrap();
    let tag = lock_token_to_delivery_tag(&token);
    assert_eq!(
        tag,
        [
            0x33, 0x22, 0x11, 0x00, 0x55, 0x44, 0x77, 0x66, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
            0xee, 0xff
        ]
    );
    assert_eq!(tag, token.to_bytes_le());
    assert_eq!(delivery_tag_to_lock_token(&tag), Some(token));
    assert_eq!(delivery_tag_to_lock_token(&tag[..4]), None);
    let random = Uuid::new_v4();
    assert_eq!(delivery_tag_to_lock_token(&lock_token_to_delivery_tag(&random)), Some(random));
}

#[test]
fn rejects_malformed_input() {
    let cases: [(&[u8], &str); 10] = [
        (b"\x01", "expected a message section"),
        (b"\x00\x53\x75\xa0\x05ab", "truncated"),
        (b"\x00\x53\x69\x40", "unknown message section"),
        (b"\x00\x53\x75\x40", "wrong value type"),
        (b"\x00\x53\x77\x40\x00\x53\x73\x45", "properties section after amqp-value"),
        (b"\x00\x53\x77\x40\x00\x53\x77\x40", "amqp-value section after amqp-value"),
        (b"\x00\x53\x71\xc1\x01\x00\x00\x53\x71\xc1\x01\x00", "a second delivery-annotations"),
        (b"\x00\x53\x78\xc1\x01\x00\x00\x53\x78\xc1\x01\x00", "a second footer"),
        (b"\x00\x53\x73\xc0\x02\x01\xa1", "truncated"),
        (b"\x00\x53\x73\xc0\x05\x03\x40\x40\x54\x05", "properties.to is not a string"),
    ];
    for (bytes, expected) in cases {
        let err = decode_message(Bytes::from_static(bytes)).unwrap_err();
        assert!(err.message().contains(expected), "{bytes:02x?}: {err}");
    }
    let mut deep = vec![0x00, 0x53, 0x77];
    deep.resize(10_003, 0x00);
    assert!(decode_message(Bytes::from(deep)).is_err());
    assert!(decode_message(Bytes::new()).is_ok(), "an empty payload is a body-less message");
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Decodes `bytes` both ways; whatever decodes must encode, and the encoding must decode.
/// Returns whether `bytes` decoded as a message.
fn exercise(bytes: &[u8]) -> bool {
    let payload = Bytes::copy_from_slice(bytes);
    let _ = decode_batch(payload.clone());
    let Ok(m) = decode_message(payload) else { return false };
    for modified in [false, true] {
        let mut m = m.clone();
        m.application_properties_modified = modified;
        let out = encode_delivery(&received(m, true), DeliveryOptions::default());
        decode_message(out).expect("our own output decodes");
    }
    true
}

#[test]
fn garbage_never_panics() {
    let mut client = full_client_message(data_body(&[b"one", b"two"]));
    client.footer =
        Some(fe2o3_amqp_types::messaging::Footer::builder().insert("x-f", 1i32).build());
    let valid = encode_fe(&client);
    let long_form = with_descriptors(&encode_fe(&full_client_message(data_body(&[b"x"]))), true);

    let mut decoded = 0;
    for base in [&valid[..], &long_form[..]] {
        // Every prefix (the ones ending on a section boundary are valid messages).
        for i in 0..=base.len() {
            decoded += usize::from(exercise(&base[..i]));
        }
        // Every single-byte mutation, with a few values.
        let mut copy = base.to_vec();
        for i in 0..base.len() {
            for v in [0x00, 0x01, 0x40, 0x53, 0x7f, 0x80, 0xa1, 0xc0, 0xd1, 0xff] {
                copy[i] = v;
                decoded += usize::from(exercise(&copy));
            }
            copy[i] = base[i];
        }
    }
    // Enough inputs got through to exercise encode_delivery on odd messages too.
    assert!(decoded > 500, "{decoded}");

    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let prefixes: [&[u8]; 5] =
        [&[], &[0x00, 0x53, 0x70], &[0x00, 0x53, 0x72], &[0x00, 0x53, 0x73], &[0x00, 0x53, 0x74]];
    for n in 0..5000 {
        let len = (rng.next() % 96) as usize;
        let mut bytes = prefixes[n % prefixes.len()].to_vec();
        bytes.extend((0..len).map(|_| rng.next() as u8));
        exercise(&bytes);
    }
}

#[test]
fn a_message_without_id_gets_one_and_keeps_its_other_properties() {
    let cases = [
        ("no properties section", FeMessage::builder().body(data_body(&[b"x"])).build()),
        (
            "properties without id",
            FeMessage::builder()
                .properties(Properties { subject: Some("s".into()), ..Default::default() })
                .body(data_body(&[b"x"]))
                .build(),
        ),
    ];
    for (name, fe) in cases {
        let m = decode_message(encode_fe(&fe)).unwrap();
        let id = m.properties.message_id.clone().expect(name);
        assert_eq!(id.len(), 32, "{name}");
        let out = encode_delivery(&received(m, false), DeliveryOptions::default());
        let back = decode_fe(&out);
        let props = back.properties.expect(name);
        assert_eq!(props.message_id, Some(MessageId::String(id)), "{name}");
        if name == "properties without id" {
            assert_eq!(props.subject.as_deref(), Some("s"));
        }
    }
    // An id the client set is kept as it was.
    let fe = FeMessage::builder()
        .properties(Properties { message_id: Some(MessageId::Ulong(7)), ..Default::default() })
        .body(data_body(&[b"x"]))
        .build();
    let m = decode_message(encode_fe(&fe)).unwrap();
    assert_eq!(m.properties.message_id.as_deref(), Some("7"));
}

/// `00 53 71` + a map of symbol keys to the encoded values given.
fn delivery_annotations_section(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut items = Vec::new();
    for (key, value) in entries {
        items.push(0xa3);
        items.push(key.len() as u8);
        items.extend_from_slice(key.as_bytes());
        items.extend_from_slice(value);
    }
    let mut out = vec![0x00, 0x53, DELIVERY_ANNOTATIONS, 0xc1, (items.len() + 1) as u8];
    out.push((entries.len() * 2) as u8);
    out.extend_from_slice(&items);
    out
}

/// What the python SDK sends for an `AmqpAnnotatedMessage` with delivery annotations, or for a
/// received message sent again: the delivery-annotations section last, after body and footer.
fn python_style(da: &[(&str, &[u8])]) -> Bytes {
    let mut client = full_client_message(data_body(&[b"py"]));
    client.delivery_annotations = None;
    client.footer = Some(fe2o3_amqp_types::messaging::Footer(
        fe2o3_amqp_types::messaging::Annotations::from_iter([(
            OwnedKey::Symbol(Symbol::from("footer")),
            Value::Int(6),
        )]),
    ));
    let mut bytes = encode_fe(&client).to_vec();
    bytes.extend_from_slice(&delivery_annotations_section(da));
    Bytes::from(bytes)
}

#[test]
fn delivery_annotations_after_body_and_footer_are_accepted_and_handed_to_receivers() {
    let m = decode_message(python_style(&[("delivery_annotations", &[0x54, 3])])).unwrap();
    assert_eq!(&m.body[..], b"py");
    let raw = RawMessage::parse(m.raw.as_ref().unwrap()).unwrap();
    assert_eq!(raw.delivery_annotations.unwrap().0, 2);
    let codes: Vec<u8> = raw.sections.iter().map(|s| s.code).collect();
    assert_eq!(codes, [PROPERTIES, APPLICATION_PROPERTIES, DATA, FOOTER], "the bare message");

    for locked in [true, false] {
        let out = encode_delivery(&received(m.clone(), locked), DeliveryOptions::default());
        let codes: Vec<u8> = section_descriptors(&out).into_iter().map(|(_, c)| c).collect();
        assert_eq!(codes[..3], [HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS]);
        let fe = decode_fe(&out);
        let da = fe.delivery_annotations.unwrap().0;
        let key = |k: &str| OwnedKey::Symbol(Symbol::from(k));
        assert_eq!(da.get(&key("delivery_annotations")), Some(&Value::Int(3)));
        assert_eq!(da.get(&key("x-opt-lock-token")).is_some(), locked);
        assert_eq!(da.len(), 1 + usize::from(locked));
        let footer = fe.footer.unwrap().0;
        assert_eq!(footer.get(&key("footer")), Some(&Value::Int(6)));
    }
}

#[test]
fn a_resent_messages_old_lock_token_is_dropped() {
    // A received message sent again carries the lock token of its old delivery.
    let old = Uuid::from_u128(0xdead_beef);
    let mut token = vec![0x98];
    token.extend_from_slice(old.as_bytes());
    let m = decode_message(python_style(&[("x-opt-lock-token", &token), ("k", &[0x41])])).unwrap();
    let raw = RawMessage::parse(m.raw.as_ref().unwrap()).unwrap();
    assert_eq!(raw.delivery_annotations.unwrap().0, 2, "only `k` is kept");

    let out = encode_delivery(&received(m.clone(), true), DeliveryOptions::default());
    let da = decode_fe(&out).delivery_annotations.unwrap().0;
    assert_eq!(da.len(), 2);
    assert_eq!(
        da.get(&OwnedKey::Symbol(Symbol::from("x-opt-lock-token"))),
        Some(&Value::Uuid(fe_uuid())),
        "the new lock's token, once"
    );
    let unlocked = decode_fe(&encode_delivery(&received(m, false), DeliveryOptions::default()));
    let da = unlocked.delivery_annotations.unwrap().0;
    assert!(da.get(&OwnedKey::Symbol(Symbol::from("x-opt-lock-token"))).is_none());

    // Only the token: nothing is kept, and the envelope has no delivery-annotations map.
    let m = decode_message(python_style(&[("x-opt-lock-token", &token)])).unwrap();
    assert_eq!(m.raw.as_ref().unwrap()[1] & RAW_DELIVERY_ANNOTATIONS, 0);
}

/// Service Bus's shape (the python SDK's recorded expectations in test_message.py): a
/// receive-and-delete delivery has an empty delivery-annotations map and three message
/// annotations (enqueued time, sequence number, partition key); a peek-lock delivery adds the
/// lock token and `x-opt-locked-until`, nothing else.
#[test]
fn an_active_messages_delivery_has_service_bus_shape() {
    let msg = FeMessage {
        header: Some(Header { ttl: Some(30_000), ..Header::default() }),
        delivery_annotations: None,
        message_annotations: Some(
            MessageAnnotations::builder().insert("x-opt-partition-key", "id_session").build(),
        ),
        properties: Some(Properties {
            message_id: Some(MessageId::String("id_message".into())),
            group_id: Some("id_session".into()),
            ..Properties::default()
        }),
        application_properties: Some(FeAppProps::builder().insert("prop", "test").build()),
        body: data_body(&[b"hello"]),
        footer: None,
    };
    let m = decode_message(encode_fe(&msg)).unwrap();
    let mut r = received(m, false);
    r.broker.state = MessageState::Active;
    r.broker.dead_letter_source = None;
    let fe = decode_fe(&encode_delivery(&r, DeliveryOptions::default()));
    assert_eq!(fe.delivery_annotations.map(|da| da.0.len()), Some(0), "present and empty");
    let ma = fe.message_annotations.unwrap();
    let mut keys: Vec<String> = ma.0.keys().map(|k| format!("{k:?}")).collect();
    keys.sort();
    assert_eq!(ma.0.len(), 3, "{keys:?}");
    assert!(annotation(&ma, "x-opt-enqueued-time").is_some());
    assert!(annotation(&ma, "x-opt-sequence-number").is_some());
    assert!(annotation(&ma, "x-opt-partition-key").is_some());

    let mut locked = r.clone();
    locked.lock = received(Message::new("x"), true).lock;
    let fe = decode_fe(&encode_delivery(&locked, DeliveryOptions::default()));
    assert_eq!(fe.delivery_annotations.unwrap().0.len(), 1);
    let ma = fe.message_annotations.unwrap();
    assert_eq!(ma.0.len(), 4);
    assert!(annotation(&ma, "x-opt-locked-until").is_some());
}

#[test]
fn state_and_original_sequence_number_are_annotated_when_they_say_something() {
    let m = Message::new("x");
    let mut r = received(m, false);
    for (state, code) in [(MessageState::Deferred, 1), (MessageState::Scheduled, 2)] {
        r.broker.state = state;
        let ma = decode_fe(&encode_delivery(&r, DeliveryOptions::default()))
            .message_annotations
            .unwrap();
        assert_eq!(annotation(&ma, "x-opt-message-state"), Some(&Value::Int(code)));
    }
    // A forwarded message keeps the sequence number it had where it was first enqueued.
    r.broker.enqueued_sequence_number = SequenceNumber(5);
    let ma =
        decode_fe(&encode_delivery(&r, DeliveryOptions::default())).message_annotations.unwrap();
    assert_eq!(annotation(&ma, "x-opt-enqueue-sequence-number"), Some(&Value::Long(5)));
    assert_eq!(annotation(&ma, "x-opt-sequence-number"), Some(&Value::Long(17)));
}

/// An application-properties section holding one entry `key` → the encoded `value`.
fn message_with_property(key: &str, value: &[u8]) -> Bytes {
    let mut items = vec![0xa1, key.len() as u8];
    items.extend_from_slice(key.as_bytes());
    items.extend_from_slice(value);
    let mut out = vec![0x00, 0x53, APPLICATION_PROPERTIES, 0xc1, (items.len() + 1) as u8, 2];
    out.extend_from_slice(&items);
    out.extend_from_slice(&[0x00, 0x53, DATA, 0xa0, 0x02, b'h', b'i']);
    Bytes::from(out)
}

#[test]
fn a_decimal_property_is_delivered_as_service_bus_writes_it() {
    // Decimal("1.2345") as azure-servicebus 7.15.0 encodes it (IEEE 754 decimal128).
    let mut sent = vec![0x94, 0x30, 0x38];
    sent.extend_from_slice(&[0; 12]);
    sent.extend_from_slice(&[0x30, 0x39]);
    let m = decode_message(message_with_property("decimalprop", &sent)).unwrap();
    assert!(!m.application_properties.contains_key("decimalprop"));
    assert_eq!(&m.body[..], b"hi");
    let out = encode_delivery(&received(m.clone(), false), DeliveryOptions::default());
    // The layout the SDK's decoder reads back as Decimal("1.2345") (decimal.rs).
    let mut expected = vec![0x94, 0x0c, 0x38, 0, 0];
    expected.extend_from_slice(&[0; 10]);
    expected.extend_from_slice(&[0x30, 0x39]);
    let at = out.windows(expected.len()).position(|w| w == expected);
    assert!(at.is_some(), "{out:02x?}");
    assert!(!out.windows(3).any(|w| w == [0x94, 0x30, 0x38]), "the sender's bytes are gone");

    // The other entries are untouched, and a changed section keeps the rewritten decimal.
    let mut changed = m;
    changed.application_properties.insert("DeadLetterReason".into(), PropertyValue::Null);
    changed.application_properties_modified = true;
    let out = encode_delivery(&received(changed, false), DeliveryOptions::default());
    assert!(out.windows(expected.len()).any(|w| w == expected));
    // Sent again as delivered (a client that passes the bytes through): Service Bus's .NET
    // reader takes its own layout too, and so does ironbus; the bytes stay the same.
    let again = decode_message(out).unwrap();
    assert_eq!(again.application_properties.len(), 1);
    let out = encode_delivery(&received(again, false), DeliveryOptions::default());
    assert!(out.windows(expected.len()).any(|w| w == expected));
}

#[test]
fn a_decimal_no_service_bus_message_can_hold_is_refused_at_send() {
    // 1E-40: 40 decimal places, more than a .NET decimal's 28.
    let bits: u128 = ((6176u128 - 40) << 113) | 1;
    let mut sent = vec![0x94];
    sent.extend_from_slice(&bits.to_be_bytes());
    let err = decode_message(message_with_property("tiny", &sent)).unwrap_err();
    assert!(err.message().contains("\"tiny\" is a decimal Service Bus cannot carry"), "{err}");
    // A NaN decimal32.
    let err = decode_message(message_with_property("nan", &[0x74, 0x7c, 0, 0, 0])).unwrap_err();
    assert!(err.message().contains("not a finite value"), "{err}");
    // A decimal64 in range is taken, and comes back as a decimal128.
    let bits: u64 = (397 << 53) | 15; // 1.5
    let mut sent = vec![0x84];
    sent.extend_from_slice(&bits.to_be_bytes());
    let m = decode_message(message_with_property("d64", &sent)).unwrap();
    let out = encode_delivery(&received(m, false), DeliveryOptions::default());
    let mut expected = vec![0x94, 0x0c, 0x3e, 0, 0];
    expected.extend_from_slice(&[0; 11]);
    expected.push(15);
    assert!(out.windows(expected.len()).any(|w| w == expected), "{out:02x?}");
}

#[test]
fn header_fields_are_echoed_as_the_sender_gave_them() {
    let delivered = |header: &[u8]| {
        let mut payload = vec![0x00, 0x53, 0x70, 0xc0, header.len() as u8 + 1, 2];
        payload.extend_from_slice(header);
        payload.extend_from_slice(&[0x00, 0x53, 0x75, 0xa0, 0x01, b'x']);
        let m = decode_message(Bytes::from(payload)).unwrap();
        let out = encode_delivery(&received(m, false), DeliveryOptions::default());
        out[6..].iter().take(3).copied().collect::<Vec<u8>>()
    };
    // An explicit default is echoed as given; a null stays null.
    assert_eq!(delivered(&[0x42, 0x50, 0x04]), [0x42, 0x50, 0x04]);
    assert_eq!(delivered(&[0x41, 0x50, 0x09]), [0x41, 0x50, 0x09]);
    assert_eq!(delivered(&[0x40, 0x40]), [0x40, 0x40, 0x40]);
    assert_eq!(delivered(&[0x40, 0x50, 0x02]), [0x40, 0x50, 0x02]);

    // An envelope written before the `…_SET` flags: a non-default value still counts as given.
    let old =
        Bytes::from_static(&[RAW_VERSION, RAW_DURABLE, 6, 0x00, 0x53, 0x75, 0xa0, 0x01, b'x']);
    let raw = RawMessage::parse(&old).unwrap();
    assert_eq!((raw.durable, raw.priority), (Some(true), Some(6)));
    let old = Bytes::from_static(&[RAW_VERSION, 0, 4, 0x00, 0x53, 0x75, 0xa0, 0x01, b'x']);
    let raw = RawMessage::parse(&old).unwrap();
    assert_eq!((raw.durable, raw.priority), (None, None));
}

#[test]
fn a_partition_key_sent_back_as_binary_is_read_as_text() {
    // The python SDK re-sends a received message's `x-opt-partition-key` as binary.
    let msg = FeMessage {
        header: None,
        delivery_annotations: None,
        message_annotations: Some(
            MessageAnnotations::builder()
                .insert("x-opt-partition-key", Value::Binary(Binary::from(b"session-1".to_vec())))
                .build(),
        ),
        properties: None,
        application_properties: None,
        body: data_body(&[b"x"]),
        footer: None,
    };
    let m = decode_message(encode_fe(&msg)).unwrap();
    assert_eq!(m.properties.partition_key.as_deref(), Some("session-1"));
    let ma = decode_fe(&encode_delivery(&received(m, false), DeliveryOptions::default()))
        .message_annotations
        .unwrap();
    assert_eq!(annotation(&ma, "x-opt-partition-key"), Some(&Value::String("session-1".into())));
    // Not UTF-8: refused.
    let mut bad = msg;
    bad.message_annotations = Some(
        MessageAnnotations::builder()
            .insert("x-opt-partition-key", Value::Binary(Binary::from(vec![0xff])))
            .build(),
    );
    assert!(decode_message(encode_fe(&bad)).is_err());
}

/// What rhea (the js SDK's AMQP library) sends for a message with a footer: the footer section
/// before the body. Service Bus accepts it; the body and the footer arrive intact.
#[test]
fn a_footer_before_the_body_is_accepted_and_kept_as_sent() {
    let mut client = full_client_message(data_body(&[b"x"]));
    client.footer = Some(fe2o3_amqp_types::messaging::Footer::builder().insert("f", 9i32).build());
    let bytes = encode_fe(&client);
    let sections = section_descriptors(&bytes);
    let (footer_at, body_at) = (
        sections.iter().position(|s| s.1 == FOOTER).unwrap(),
        sections.iter().position(|s| s.1 == DATA).unwrap(),
    );
    // Move the footer in front of the body, as rhea writes it.
    let parts = split_sections(&bytes).unwrap();
    let mut rhea = Vec::new();
    for (i, s) in parts.iter().enumerate() {
        if i == body_at {
            let f = &parts[footer_at];
            rhea.extend_from_slice(&bytes[f.start..f.end]);
        }
        if i != footer_at {
            rhea.extend_from_slice(&bytes[s.start..s.end]);
        }
    }
    let m = decode_message(Bytes::from(rhea)).unwrap();
    assert_eq!(&m.body[..], b"x");
    let raw = RawMessage::parse(m.raw.as_ref().unwrap()).unwrap();
    let codes: Vec<u8> = raw.sections.iter().map(|s| s.code).collect();
    assert_eq!(codes, [PROPERTIES, APPLICATION_PROPERTIES, FOOTER, DATA], "kept as sent");

    let out = encode_delivery(&received(m, true), DeliveryOptions::default());
    let fe = decode_fe(&out);
    let body = match fe.body {
        Body::Data(batch) => batch.into_iter().flat_map(|d| d.0.into_vec()).collect::<Vec<u8>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(body, b"x");
    let footer = fe.footer.unwrap().0;
    assert_eq!(footer.get(&OwnedKey::Symbol(Symbol::from("f"))), Some(&Value::Int(9)));
}

/// A footer may come first, even before the properties. Properties a settlement modified then
/// replace the client's application-properties section where it was, once (found by the
/// `amqp_message` fuzz target: they were written at the footer and again at the original).
#[test]
fn modified_properties_replace_their_section_when_the_footer_comes_first() {
    for with_app_properties in [true, false] {
        let mut client = full_client_message(data_body(&[b"x"]));
        if !with_app_properties {
            client.application_properties = None;
        }
        client.footer =
            Some(fe2o3_amqp_types::messaging::Footer::builder().insert("f", 9i32).build());
        let bytes = encode_fe(&client);
        let parts = split_sections(&bytes).unwrap();
        let footer = parts.iter().find(|s| s.code == FOOTER).unwrap();
        let mut first = bytes[footer.start..footer.end].to_vec();
        for s in parts.iter().filter(|s| s.code != FOOTER) {
            first.extend_from_slice(&bytes[s.start..s.end]);
        }
        let mut m = decode_message(Bytes::from(first)).unwrap();
        m.application_properties.insert("added".to_owned(), PropertyValue::Int(7));
        m.application_properties_modified = true;

        let out = encode_delivery(&received(m.clone(), true), DeliveryOptions::default());
        let again = decode_message(out).expect("the delivery decodes");
        assert_eq!(again.application_properties, m.application_properties);
        assert_eq!(&again.body[..], b"x");
        let raw = RawMessage::parse(again.raw.as_ref().unwrap()).unwrap();
        let codes: Vec<u8> = raw.sections.iter().map(|s| s.code).collect();
        assert_eq!(
            codes,
            [FOOTER, PROPERTIES, APPLICATION_PROPERTIES, DATA],
            "{with_app_properties}"
        );
    }
}
