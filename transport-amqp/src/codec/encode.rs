//! Encoding (broker → client): a delivery's transfer payload, hand-written so that every
//! descriptor is small-ulong, and the writers of the encoded values it is made of.

use bytes::{BufMut, Bytes, BytesMut};
use ironbus_core::{
    ApplicationProperties, Message, MessageState, PropertyValue, ReceivedMessage, Timestamp,
};

use super::sections::{app_property_entries, is_body, RawMessage, Section};
use super::*;

/// Encodes a message for a delivery transfer, or for embedding in a management response (peek,
/// receive-by-sequence-number). See the module docs.
pub fn encode_delivery(received: &ReceivedMessage, options: DeliveryOptions) -> Bytes {
    let message = &*received.message;
    let broker = &received.broker;
    let raw = message.raw.as_deref().and_then(RawMessage::parse);

    let mut out = BytesMut::with_capacity(
        160 + raw.as_ref().map_or(message.size(), |r| r.bare.len() + r.annotations_len()),
    );

    // Header: all five fields, always (serde_amqp would drop the defaults; py then reads
    // delivery-count as None, frame-level.md §2); durable and priority as the sender gave them,
    // null otherwise, and first-acquirer null, as Service Bus sends them.
    let (durable, priority) = raw.as_ref().map_or((None, None), |r| (r.durable, r.priority));
    put_header(&mut out, durable, priority, header_ttl(received), broker.delivery_count);

    // Delivery annotations, always (Service Bus sends an empty map when it has none): the lock
    // token in network order (rs reads it, amqp.md §4.3), then the sender's.
    let sender = raw.as_ref().and_then(|r| r.delivery_annotations);
    let mut entries = Vec::with_capacity(40 + sender.map_or(0, |(_, body)| body.len()));
    let mut count = 0;
    if let Some(lock) = &received.lock {
        put_symbol(&mut entries, LOCK_TOKEN.as_bytes());
        entries.put_u8(0x98);
        entries.put_slice(lock.token.0.as_bytes());
        count += 2;
    }
    if let Some((items, body)) = sender {
        entries.put_slice(body);
        count += items;
    }
    put_described_map(&mut out, DELIVERY_ANNOTATIONS, count, &entries);

    // Message annotations: the client's, then the broker's.
    let (mut count, mut entries) = match raw.as_ref().and_then(|r| r.annotations) {
        Some((count, body)) => (count, body.to_vec()),
        None => (0, Vec::with_capacity(256)),
    };
    let mut annotate = |key: &str, value: &dyn Fn(&mut Vec<u8>)| {
        put_symbol(&mut entries, key.as_bytes());
        value(&mut entries);
        count += 2;
    };
    annotate(SEQUENCE_NUMBER, &|o| put_long(o, broker.sequence_number.0));
    annotate(ENQUEUED_TIME, &|o| put_timestamp(o, broker.enqueued_time.as_millis()));
    if let Some(lock) = &received.lock {
        annotate(LOCKED_UNTIL, &|o| put_timestamp(o, lock.locked_until.as_millis()));
    }
    // Service Bus leaves the state out for an active message, and the original sequence number
    // out unless the message was forwarded (the SDKs' recorded expectations count annotations).
    if broker.state != MessageState::Active {
        annotate(MESSAGE_STATE, &|o| put_int(o, broker.state.code()));
    }
    let original = broker.enqueued_sequence_number;
    if message.forwarded.is_some() || (original.0 != 0 && original != broker.sequence_number) {
        annotate(ENQUEUE_SEQUENCE_NUMBER, &|o| put_long(o, original.0));
    }
    if let Some(key) = &message.properties.partition_key {
        annotate(PARTITION_KEY, &|o| put_string(o, key.as_bytes()));
    }
    if let Some(at) = message.properties.scheduled_enqueue_time {
        annotate(SCHEDULED_ENQUEUE_TIME, &|o| put_timestamp(o, at.as_millis()));
    }
    if let Some(source) = &broker.dead_letter_source {
        annotate(DEADLETTER_SOURCE, &|o| put_string(o, source.as_bytes()));
    }
    put_described_map(&mut out, MESSAGE_ANNOTATIONS, count, &entries);

    // The bare message.
    match &raw {
        Some(raw) => put_bare_from_raw(&mut out, raw, message, options),
        None => put_bare_from_core(&mut out, message, options),
    }
    out.freeze()
}

pub(super) fn len_u32(n: usize) -> u32 {
    // Payloads are far below 4 GiB (max-message-size); saturate rather than panic.
    u32::try_from(n).unwrap_or(u32::MAX)
}

pub(super) fn put_variable(out: &mut impl BufMut, code8: u8, code32: u8, bytes: &[u8]) {
    match u8::try_from(bytes.len()) {
        Ok(n) => {
            out.put_u8(code8);
            out.put_u8(n);
        }
        Err(_) => {
            out.put_u8(code32);
            out.put_u32(len_u32(bytes.len()));
        }
    }
    out.put_slice(bytes);
}

pub(super) fn put_symbol(out: &mut impl BufMut, s: &[u8]) {
    put_variable(out, 0xa3, 0xb3, s);
}

pub(super) fn put_string(out: &mut impl BufMut, s: &[u8]) {
    put_variable(out, 0xa1, 0xb1, s);
}

pub(super) fn put_binary(out: &mut impl BufMut, b: &[u8]) {
    put_variable(out, 0xa0, 0xb0, b);
}

pub(super) fn put_long(out: &mut impl BufMut, v: i64) {
    out.put_u8(0x81);
    out.put_i64(v);
}

pub(super) fn put_int(out: &mut impl BufMut, v: i32) {
    out.put_u8(0x71);
    out.put_i32(v);
}

pub(super) fn put_timestamp(out: &mut impl BufMut, ms: i64) {
    out.put_u8(0x83);
    out.put_i64(ms);
}

/// A map or list (`code8`/`code32` constructors) of `count` items encoded in `items`.
pub(super) fn put_compound(
    out: &mut impl BufMut,
    code8: u8,
    code32: u8,
    count: usize,
    items: &[u8],
) {
    match (u8::try_from(items.len() + 1), u8::try_from(count)) {
        (Ok(size), Ok(count)) => {
            out.put_u8(code8);
            out.put_u8(size);
            out.put_u8(count);
        }
        _ => {
            out.put_u8(code32);
            out.put_u32(len_u32(items.len() + 4));
            out.put_u32(len_u32(count));
        }
    }
    out.put_slice(items);
}

pub(super) fn put_map(out: &mut impl BufMut, count: usize, items: &[u8]) {
    put_compound(out, 0xc1, 0xd1, count, items);
}

pub(super) fn put_described_map(out: &mut impl BufMut, code: u8, count: usize, items: &[u8]) {
    out.put_slice(&[0x00, 0x53, code]);
    put_map(out, count, items);
}

/// A section with a small-ulong descriptor and its value bytes as they were.
/// Writes a properties section whose message-id (absent or null in `list`, the section's
/// encoded list) is `id`, a string; the other fields are copied unchanged.
pub(super) fn put_properties_with_id(out: &mut BytesMut, list: &[u8], id: &str) -> Result<()> {
    let (count, fields): (usize, &[u8]) = match list.first() {
        Some(0x45) => (0, &[]),
        Some(0xc0) if list.len() >= 3 => (usize::from(list[2]), &list[3..]),
        Some(0xd0) if list.len() >= 9 => {
            let count = u32::from_be_bytes([list[5], list[6], list[7], list[8]]) as usize;
            (count, &list[9..])
        }
        _ => return Err(CodecError::new("the properties section is not a list")),
    };
    // The message-id was absent (no fields) or null (`40`): drop that first field.
    let rest = match (count, fields.first()) {
        (0, _) => &[][..],
        (_, Some(0x40)) => &fields[1..],
        _ => {
            return Err(CodecError::new(
                "the properties section has a message-id of an unknown type",
            ))
        }
    };
    let rest_count = count.saturating_sub(1);
    let id_len = id.len().min(255);
    let size = 4 + 2 + id_len + rest.len();
    out.put_slice(&[0x00, 0x53, PROPERTIES, 0xd0]);
    out.put_u32(size as u32);
    out.put_u32((rest_count + 1) as u32);
    out.put_u8(0xa1);
    out.put_u8(id_len as u8);
    out.put_slice(&id.as_bytes()[..id_len]);
    out.put_slice(rest);
    Ok(())
}

pub(super) fn put_section_normalized(out: &mut impl BufMut, buf: &[u8], s: &Section) {
    if s.small {
        out.put_slice(&buf[s.start..s.end]);
    } else {
        out.put_slice(&[0x00, 0x53, s.code]);
        out.put_slice(&buf[s.value..s.end]);
    }
}

/// `00 53 70 [durable|null, priority|null, ttl|null, first-acquirer=null, delivery-count]`, all
/// five.
pub(super) fn put_header(
    out: &mut impl BufMut,
    durable: Option<bool>,
    priority: Option<u8>,
    ttl: Option<u32>,
    count: u32,
) {
    let size = 1
        + 1
        + (if priority.is_some() { 2 } else { 1 })
        + (if ttl.is_some() { 5 } else { 1 })
        + 1
        + 5;
    out.put_slice(&[0x00, 0x53, HEADER, 0xc0, size, 0x05]);
    out.put_u8(match durable {
        Some(true) => 0x41,
        Some(false) => 0x42,
        None => 0x40,
    });
    match priority {
        Some(priority) => out.put_slice(&[0x50, priority]),
        None => out.put_u8(0x40),
    }
    match ttl {
        Some(ms) => {
            out.put_u8(0x70);
            out.put_u32(ms);
        }
        None => out.put_u8(0x40),
    }
    out.put_u8(0x40);
    out.put_u8(0x70);
    out.put_u32(count);
}

/// The header's ttl: the sender's TTL, capped by the effective one (`expires_at` −
/// `enqueued_time`, which includes the entity's default), in uint milliseconds.
pub(super) fn header_ttl(received: &ReceivedMessage) -> Option<u32> {
    let ttl = received.message.properties.time_to_live?;
    let mut ms = ttl.as_millis();
    let b = &received.broker;
    if b.expires_at < Timestamp::MAX && b.expires_at > b.enqueued_time {
        ms = ms.min(b.expires_at.saturating_since(b.enqueued_time).as_millis());
    }
    Some(u32::try_from(ms).unwrap_or(u32::MAX))
}

pub(super) fn put_property_value(out: &mut impl BufMut, v: &PropertyValue) {
    match v {
        PropertyValue::Null => out.put_u8(0x40),
        PropertyValue::Bool(b) => out.put_u8(if *b { 0x41 } else { 0x42 }),
        PropertyValue::UByte(v) => out.put_slice(&[0x50, *v]),
        PropertyValue::UShort(v) => {
            out.put_u8(0x60);
            out.put_u16(*v);
        }
        PropertyValue::UInt(v) => {
            out.put_u8(0x70);
            out.put_u32(*v);
        }
        PropertyValue::ULong(v) => {
            out.put_u8(0x80);
            out.put_u64(*v);
        }
        PropertyValue::Byte(v) => {
            out.put_u8(0x51);
            out.put_i8(*v);
        }
        PropertyValue::Short(v) => {
            out.put_u8(0x61);
            out.put_i16(*v);
        }
        PropertyValue::Int(v) => put_int(out, *v),
        PropertyValue::Long(v) => put_long(out, *v),
        PropertyValue::Float(v) => {
            out.put_u8(0x72);
            out.put_f32(*v);
        }
        PropertyValue::Double(v) => {
            out.put_u8(0x82);
            out.put_f64(*v);
        }
        PropertyValue::Char(c) => {
            out.put_u8(0x73);
            out.put_u32(u32::from(*c));
        }
        PropertyValue::Timestamp(t) | PropertyValue::LocalTimestamp(t) => {
            put_timestamp(out, t.as_millis())
        }
        // Only rule descriptions hold TimeSpans (SQL actions do not store them in messages).
        PropertyValue::TimeSpan(ms) => put_long(out, *ms),
        PropertyValue::Uuid(u) => {
            out.put_u8(0x98);
            out.put_slice(u.as_bytes());
        }
        PropertyValue::Binary(b) => put_binary(out, b),
        PropertyValue::String(s) => put_string(out, s.as_bytes()),
    }
}

/// An application-properties section from the core map, plus the entries of `original` (the
/// client's section value) the core could not represent and did not override.
pub(super) fn put_app_properties(
    out: &mut impl BufMut,
    map: &ApplicationProperties,
    original: Option<&[u8]>,
) {
    let mut items = Vec::with_capacity(64 * map.len());
    let mut count = 0;
    for (key, value) in map {
        put_string(&mut items, key.as_bytes());
        put_property_value(&mut items, value);
        count += 2;
    }
    if let Some(entries) = original.and_then(|o| app_property_entries(o).ok()) {
        for (key, value, bytes) in entries.flatten() {
            if value.is_none() && !map.contains_key(key) {
                items.put_slice(bytes);
                count += 2;
            }
        }
    }
    if count == 0 {
        return;
    }
    out.put_slice(&[0x00, 0x53, APPLICATION_PROPERTIES]);
    put_map(out, count, &items);
}

pub(super) fn put_bare_from_raw(
    out: &mut BytesMut,
    raw: &RawMessage<'_>,
    message: &Message,
    options: DeliveryOptions,
) {
    // Modified properties replace the client's section where it was, or go in front of the
    // body when it had none. The footer may come anywhere (even before the properties), so it
    // is never where they go.
    let modified = message.application_properties_modified;
    let mut replaced = false;
    for s in &raw.sections {
        if s.code < PROPERTIES || (options.omit_body && is_body(s.code)) {
            continue;
        }
        if modified && s.code == APPLICATION_PROPERTIES {
            let original = &raw.bare[s.value..s.end];
            put_app_properties(out, &message.application_properties, Some(original));
            replaced = true;
            continue;
        }
        if modified && !replaced && is_body(s.code) {
            put_app_properties(out, &message.application_properties, None);
            replaced = true;
        }
        put_section_normalized(out, raw.bare, s);
    }
    if modified && !replaced {
        put_app_properties(out, &message.application_properties, None);
    }
}

pub(super) fn put_bare_from_core(out: &mut BytesMut, message: &Message, options: DeliveryOptions) {
    let p = &message.properties;
    // properties: message-id, user-id, to, subject, reply-to, correlation-id, content-type,
    // content-encoding, absolute-expiry-time, creation-time, group-id, group-sequence,
    // reply-to-group-id.
    let fields: [(Option<&String>, bool); 13] = [
        (p.message_id.as_ref(), false),
        (None, false),
        (p.to.as_ref(), false),
        (p.subject.as_ref(), false),
        (p.reply_to.as_ref(), false),
        (p.correlation_id.as_ref(), false),
        (p.content_type.as_ref(), true),
        (None, false),
        (None, false),
        (None, false),
        (p.session_id.as_ref(), false),
        (None, false),
        (p.reply_to_session_id.as_ref(), false),
    ];
    let used = fields.iter().rposition(|(f, _)| f.is_some()).map_or(0, |i| i + 1);
    if used > 0 {
        let mut items = Vec::with_capacity(128);
        for (field, symbol) in &fields[..used] {
            match (field, symbol) {
                (None, _) => items.put_u8(0x40),
                (Some(s), true) => put_symbol(&mut items, s.as_bytes()),
                (Some(s), false) => put_string(&mut items, s.as_bytes()),
            }
        }
        out.put_slice(&[0x00, 0x53, PROPERTIES]);
        put_compound(out, 0xc0, 0xd0, used, &items);
    }
    put_app_properties(out, &message.application_properties, None);
    if !options.omit_body {
        out.put_slice(&[0x00, 0x53, DATA]);
        put_binary(out, &message.body);
    }
}
