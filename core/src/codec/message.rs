//! A stored message's two records: the body record (everything the sender sent, written once
//! at enqueue) and the meta record ([`MessageMeta`]: what the broker knows of it, rewritten as
//! the message is delivered, deferred or dead-lettered).
//!
//! Invariants:
//! - A record is written with the lowest version that holds its fields, so a message that uses
//!   no newer field keeps version 1's bytes; decoders read every version ever written.
//! - A body that is a slice of the raw AMQP message is stored as its place in `raw`, never
//!   twice; on decoding, that place is checked to lie within `raw` before it is sliced.
//! - Counts read from a record reserve no more than the bytes that remain can hold.

use bytes::Bytes;

use super::primitives::{DecodeResult, Reader, Writer};
use super::properties::{
    decode_message_properties, decode_properties, encode_message_properties, encode_properties,
};
use super::V1;
use crate::message::{ApplicationProperties, Forwarded, Message, MessageProperties, MessageState};
use crate::types::{SequenceNumber, Timestamp};

/// The version each message-side record is written with today. A record that grows (a session
/// id, a hop count, a transaction id) gets a new version here and a new arm in its decoder's
/// `match`; the arms of older versions stay, filling what they lack with defaults.
const BODY_VERSION: u8 = V1;
/// A body record of an auto-forwarded message: version 1's fields, then its [`Forwarded`].
const BODY_VERSION_2: u8 = 2;
/// A body record of a send-via transfer: version 2's fields, then its destination.
const BODY_VERSION_3: u8 = 3;
/// Meta records without the version-2 fields are still written as version 1 (byte for byte as
/// before); those with them as version 2.
const META_VERSION: u8 = V1;
const META_VERSION_2: u8 = 2;
/// Version 3 adds the session id (a message of a session-enabled entity); written only then.
const META_VERSION_3: u8 = 3;

/// What the broker knows of a stored message, under its sub-queue key. The message itself (the
/// body record) is stored apart and written once, so that changing this small record never
/// needs the body in memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct MessageMeta {
    /// The sequence number the message was first enqueued with (differs after forwarding).
    pub enqueued_sequence_number: SequenceNumber,
    pub enqueued_time: Timestamp,
    /// The size counted against the entity (see [`Message::size`]).
    pub size: u32,
    pub delivery_count: u32,
    pub state: MessageState,
    pub expires_at: Timestamp,
    pub dead_letter_source: Option<String>,
    pub dead_letter_reason: Option<String>,
    pub dead_letter_error_description: Option<String>,
    /// Application properties the broker added or changed after the send (properties to
    /// modify, dead-letter reasons, a rule action's SET), laid over the sender's on delivery.
    pub modified_properties: ApplicationProperties,
    /// Where the body is when it is not under this message's own sequence number: a topic
    /// subscription's copy changed by a rule action shares the body stored at the publish's
    /// number. (Version 2.)
    pub body_sequence_number: Option<SequenceNumber>,
    /// Application properties a rule action removed from the sender's. (Version 2.)
    pub removed_properties: Vec<String>,
    /// The system properties when a rule action changed any: they replace the sender's.
    /// (Version 2.)
    pub system_properties: Option<Box<MessageProperties>>,
    /// The session the message belongs to, on a session-enabled entity (so that rebuilding,
    /// which reads no bodies, can index sessions). (Version 3.)
    pub session_id: Option<String>,
}

impl MessageMeta {
    /// Whether the record needs version 2 (it has a field version 1 lacks).
    fn needs_v2(&self) -> bool {
        self.body_sequence_number.is_some()
            || !self.removed_properties.is_empty()
            || self.system_properties.is_some()
    }
}

/// A message's body record: everything the sender sent, written once at enqueue.
pub(crate) fn encode_body(m: &Message) -> Bytes {
    let capacity = 64 + m.body.len() + m.raw.as_ref().map_or(0, |r| r.len());
    let version = match &m.forwarded {
        Some(f) if f.destination.is_some() => BODY_VERSION_3,
        Some(_) => BODY_VERSION_2,
        None => BODY_VERSION,
    };
    let mut w = Writer::versioned(version, capacity);
    encode_message_properties(&mut w, &m.properties);
    encode_properties(&mut w, &m.application_properties);
    w.opt_bytes(&m.raw);
    // A body that is a slice of `raw` (an AMQP data section) is stored as its place in `raw`.
    match m.raw.as_ref().and_then(|raw| slice_offset(raw, &m.body)) {
        Some(offset) => {
            w.u8(1);
            w.u32(offset as u32);
            w.u32(m.body.len() as u32);
        }
        None => {
            w.u8(0);
            w.bytes(&m.body);
        }
    }
    w.bool(m.application_properties_modified);
    if let Some(f) = &m.forwarded {
        w.u8(f.hops);
        w.i64(f.enqueued_sequence_number.0);
        w.opt_str(&f.dead_letter_source);
        w.opt_str(&f.dead_letter_reason);
        w.opt_str(&f.dead_letter_error_description);
        if f.destination.is_some() {
            w.opt_str(&f.destination);
        }
    }
    w.finish()
}

/// Where `part` starts within `whole`, if it is a non-empty slice of it.
fn slice_offset(whole: &[u8], part: &[u8]) -> Option<usize> {
    let (start, at) = (whole.as_ptr() as usize, part.as_ptr() as usize);
    let inside = !part.is_empty() && at >= start && at + part.len() <= start + whole.len();
    (inside && u32::try_from(whole.len()).is_ok()).then(|| at - start)
}

/// A message's meta record (see [`MessageMeta`]).
pub(crate) fn encode_meta(meta: &MessageMeta) -> Bytes {
    let version = if meta.session_id.is_some() {
        META_VERSION_3
    } else if meta.needs_v2() {
        META_VERSION_2
    } else {
        META_VERSION
    };
    let mut w = Writer::versioned(version, 48);
    w.i64(meta.enqueued_sequence_number.0);
    w.i64(meta.enqueued_time.as_millis());
    w.u32(meta.size);
    w.u32(meta.delivery_count);
    w.u8(meta.state.code() as u8);
    w.i64(meta.expires_at.as_millis());
    w.opt_str(&meta.dead_letter_source);
    w.opt_str(&meta.dead_letter_reason);
    w.opt_str(&meta.dead_letter_error_description);
    encode_properties(&mut w, &meta.modified_properties);
    if version >= META_VERSION_2 {
        w.opt_i64(meta.body_sequence_number.map(|s| s.0));
        w.u32(meta.removed_properties.len() as u32);
        for name in &meta.removed_properties {
            w.str(name);
        }
        match &meta.system_properties {
            None => w.u8(0),
            Some(p) => {
                w.u8(1);
                encode_message_properties(&mut w, p);
            }
        }
    }
    if version == META_VERSION_3 {
        w.opt_str(&meta.session_id);
    }
    w.finish()
}

pub(crate) fn decode_meta(value: &[u8]) -> DecodeResult<MessageMeta> {
    let (mut r, version) = Reader::versioned(value, "message meta record")?;
    match version {
        V1 => decode_meta_v1(&mut r),
        META_VERSION_2 | META_VERSION_3 => {
            let mut meta = decode_meta_v1(&mut r)?;
            meta.body_sequence_number = r.opt(Reader::i64)?.map(SequenceNumber);
            let n = r.u32()?;
            let mut removed = Vec::with_capacity((n as usize).min(r.remaining() / 4));
            for _ in 0..n {
                removed.push(r.str()?);
            }
            meta.removed_properties = removed;
            meta.system_properties = r.opt(decode_message_properties)?.map(Box::new);
            if version == META_VERSION_3 {
                meta.session_id = r.opt(Reader::str)?;
            }
            Ok(meta)
        }
        v => Err(r.unknown_version(v)),
    }
}

fn decode_meta_v1(r: &mut Reader<'_>) -> DecodeResult<MessageMeta> {
    Ok(MessageMeta {
        enqueued_sequence_number: SequenceNumber(r.i64()?),
        enqueued_time: Timestamp::from_millis(r.i64()?),
        size: r.u32()?,
        delivery_count: r.u32()?,
        state: match r.u8()? {
            0 => MessageState::Active,
            1 => MessageState::Deferred,
            2 => MessageState::Scheduled,
            s => return Err(r.corrupted(&format!("unknown message state {s}"))),
        },
        expires_at: Timestamp::from_millis(r.i64()?),
        dead_letter_source: r.opt(Reader::str)?,
        dead_letter_reason: r.opt(Reader::str)?,
        dead_letter_error_description: r.opt(Reader::str)?,
        modified_properties: decode_properties(r)?,
        body_sequence_number: None,
        removed_properties: Vec::new(),
        system_properties: None,
        session_id: None,
    })
}

pub(crate) fn decode_body(value: &[u8]) -> DecodeResult<Message> {
    let (mut r, version) = Reader::versioned(value, "message body record")?;
    match version {
        V1 => decode_body_v1(&mut r),
        BODY_VERSION_2 | BODY_VERSION_3 => {
            let mut message = decode_body_v1(&mut r)?;
            message.forwarded = Some(Box::new(Forwarded {
                hops: r.u8()?,
                enqueued_sequence_number: SequenceNumber(r.i64()?),
                dead_letter_source: r.opt(Reader::str)?,
                dead_letter_reason: r.opt(Reader::str)?,
                dead_letter_error_description: r.opt(Reader::str)?,
                destination: if version == BODY_VERSION_3 { r.opt(Reader::str)? } else { None },
            }));
            Ok(message)
        }
        v => Err(r.unknown_version(v)),
    }
}

fn decode_body_v1(r: &mut Reader<'_>) -> DecodeResult<Message> {
    let properties = decode_message_properties(r)?;
    let application_properties = decode_properties(r)?;
    let raw = r.opt(Reader::bytes)?;
    let body = match (r.u8()?, &raw) {
        (0, _) => r.bytes()?,
        (1, Some(raw)) => {
            let (offset, len) = (r.u32()? as usize, r.u32()? as usize);
            if offset.checked_add(len).is_none_or(|end| end > raw.len()) {
                return Err(r.corrupted("body outside the raw message"));
            }
            raw.slice(offset..offset + len)
        }
        _ => return Err(r.corrupted("invalid body kind")),
    };
    let application_properties_modified = r.bool()?;
    Ok(Message {
        properties,
        application_properties,
        body,
        raw,
        application_properties_modified,
        forwarded: None,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use uuid::Uuid;

    use super::*;
    use crate::codec::{decode_session_state, encode_session_state};
    use crate::message::PropertyValue;

    #[test]
    fn body_and_meta_records_round_trip_every_field() {
        let mut props = ApplicationProperties::new();
        for (i, v) in [
            PropertyValue::Null,
            PropertyValue::Bool(true),
            PropertyValue::UByte(7),
            PropertyValue::UShort(700),
            PropertyValue::UInt(70_000),
            PropertyValue::ULong(u64::MAX),
            PropertyValue::Byte(-7),
            PropertyValue::Short(-700),
            PropertyValue::Int(-70_000),
            PropertyValue::Long(i64::MIN),
            PropertyValue::Float(1.5),
            PropertyValue::Double(-2.25),
            PropertyValue::Char('ß'),
            PropertyValue::Timestamp(Timestamp::from_millis(123)),
            PropertyValue::Uuid(Uuid::new_v4()),
            PropertyValue::Binary(Bytes::from_static(b"\x00\x01")),
            PropertyValue::String("héllo".into()),
        ]
        .into_iter()
        .enumerate()
        {
            props.insert(format!("p{i}"), v);
        }
        let message = Message {
            properties: MessageProperties {
                message_id: Some("m".into()),
                session_id: Some("s".into()),
                partition_key: Some("s".into()),
                correlation_id: Some("c".into()),
                subject: Some("sub".into()),
                to: Some("to".into()),
                reply_to: Some("rt".into()),
                reply_to_session_id: Some("rts".into()),
                content_type: Some("text/plain".into()),
                time_to_live: Some(Duration::from_secs(30)),
                scheduled_enqueue_time: Some(Timestamp::from_millis(99)),
            },
            application_properties: props,
            body: Bytes::from_static(b"body"),
            raw: Some(Bytes::from_static(b"raw")),
            application_properties_modified: true,
            forwarded: None,
        };
        assert_eq!(decode_body(&encode_body(&message)).unwrap(), message);
        assert_eq!(encode_body(&message)[0], BODY_VERSION, "a plain body stays version 1");
        // An auto-forwarded message's body carries its journey (version 2).
        let forwarded = Message {
            forwarded: Some(Box::new(Forwarded {
                hops: 3,
                enqueued_sequence_number: SequenceNumber(42),
                dead_letter_source: Some("q1".into()),
                dead_letter_reason: Some("why".into()),
                dead_letter_error_description: None,
                destination: None,
            })),
            ..message.clone()
        };
        let encoded = encode_body(&forwarded);
        assert_eq!(encoded[0], BODY_VERSION_2);
        assert_eq!(decode_body(&encoded).unwrap(), forwarded);
        // A send-via transfer also names its destination (version 3).
        let mut via = forwarded.clone();
        via.forwarded.as_mut().unwrap().destination = Some("Orders".into());
        let encoded = encode_body(&via);
        assert_eq!(encoded[0], BODY_VERSION_3);
        assert_eq!(decode_body(&encoded).unwrap(), via);
        // A body inside `raw` is stored once, as its place in `raw`.
        let raw = Bytes::from_static(b"header:the body:trailer");
        let sliced =
            Message { body: raw.slice(7..15), raw: Some(raw.clone()), ..Message::default() };
        let encoded = encode_body(&sliced);
        let copied = Message { body: Bytes::copy_from_slice(b"the body"), ..sliced.clone() };
        assert!(encoded.len() < encode_body(&copied).len(), "the body is not stored twice");
        let decoded = decode_body(&encoded).unwrap();
        assert_eq!(&decoded.body[..], b"the body");
        assert_eq!(decoded, sliced);
        let meta = MessageMeta {
            enqueued_sequence_number: SequenceNumber(5),
            enqueued_time: Timestamp::from_millis(1000),
            size: 77,
            delivery_count: 4,
            state: MessageState::Deferred,
            expires_at: Timestamp::MAX,
            dead_letter_source: Some("q".into()),
            dead_letter_reason: Some("r".into()),
            dead_letter_error_description: None,
            modified_properties: [("k".to_owned(), PropertyValue::Int(1))].into(),
            ..Default::default()
        };
        assert_eq!(decode_meta(&encode_meta(&meta)).unwrap(), meta);
        assert_eq!(encode_meta(&meta)[0], V1, "without version-2 fields, version 1 is written");

        // A topic copy changed by a rule action: version 2.
        let changed = MessageMeta {
            body_sequence_number: Some(SequenceNumber(3)),
            removed_properties: vec!["gone".into(), "also".into()],
            system_properties: Some(Box::new(MessageProperties {
                subject: Some("relabelled".into()),
                time_to_live: Some(Duration::from_secs(9)),
                ..Default::default()
            })),
            ..meta
        };
        let bytes = encode_meta(&changed);
        assert_eq!(bytes[0], 2);
        assert_eq!(decode_meta(&bytes).unwrap(), changed);
        for cut in 1..bytes.len() {
            assert!(decode_meta(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn session_meta_records_are_version_3_and_session_state_round_trips() {
        let plain = MessageMeta { size: 3, ..Default::default() };
        assert_eq!(encode_meta(&plain)[0], 1, "no session: as before");
        let session = MessageMeta { session_id: Some("s-1".into()), ..plain.clone() };
        let bytes = encode_meta(&session);
        assert_eq!(bytes[0], 3);
        assert_eq!(decode_meta(&bytes).unwrap(), session);
        for cut in 1..bytes.len() {
            assert!(decode_meta(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let at = Timestamp::from_millis(1_767_225_600_000);
        let state = encode_session_state(at, b"state");
        assert_eq!(state[0], 1);
        assert_eq!(decode_session_state(&state).unwrap(), (at, Bytes::from_static(b"state")));
        assert!(decode_session_state(&state[..state.len() - 1]).is_err());
    }
}
