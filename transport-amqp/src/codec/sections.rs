//! Message sections: splitting a message into them (descriptor, order and value type checked),
//! the decoders of the sections the core reads, and the raw envelope's layout.

use std::ops::Range;
use std::time::Duration;

use bytes::{BufMut, Bytes};
use ironbus_core::{ApplicationProperties, MessageProperties, PropertyValue, Timestamp};
use uuid::Uuid;

use super::encode::put_symbol;
use super::read::{utf8, Reader, Val};
use super::*;

/// One message section: `buf[start..value]` is `0x00` + descriptor, `buf[value..end]` the value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Section {
    pub(crate) code: u8,
    pub(crate) start: usize,
    pub(crate) value: usize,
    pub(crate) end: usize,
    /// Whether the descriptor was the small-ulong form `00 53 code`.
    pub(crate) small: bool,
}

impl Section {
    pub(super) fn len(&self) -> usize {
        // A normalized section's length (3-byte descriptor).
        3 + self.end - self.value
    }
}

pub(super) fn is_body(code: u8) -> bool {
    matches!(code, DATA | AMQP_SEQUENCE | AMQP_VALUE)
}

pub(super) fn section_name(code: u8) -> &'static str {
    match code {
        HEADER => "header",
        DELIVERY_ANNOTATIONS => "delivery-annotations",
        MESSAGE_ANNOTATIONS => "message-annotations",
        PROPERTIES => "properties",
        APPLICATION_PROPERTIES => "application-properties",
        DATA => "data",
        AMQP_SEQUENCE => "amqp-sequence",
        AMQP_VALUE => "amqp-value",
        _ => "footer",
    }
}

pub(super) fn section_code_by_name(name: &[u8]) -> Option<u8> {
    Some(match name {
        b"amqp:header:list" => HEADER,
        b"amqp:delivery-annotations:map" => DELIVERY_ANNOTATIONS,
        b"amqp:message-annotations:map" => MESSAGE_ANNOTATIONS,
        b"amqp:properties:list" => PROPERTIES,
        b"amqp:application-properties:map" => APPLICATION_PROPERTIES,
        b"amqp:data:binary" => DATA,
        b"amqp:amqp-sequence:list" => AMQP_SEQUENCE,
        b"amqp:amqp-value:*" => AMQP_VALUE,
        b"amqp:footer:map" => FOOTER,
        _ => return None,
    })
}

/// Splits a message into its sections, checking descriptors, order and value constructors.
pub(crate) fn split_sections(buf: &[u8]) -> Result<Vec<Section>> {
    let mut r = Reader::new(buf);
    let mut sections: Vec<Section> = Vec::new();
    while !r.is_empty() {
        let start = r.pos;
        if r.u8()? != 0x00 {
            return Err(CodecError::new(format!("expected a message section at byte {start}")));
        }
        let (code, small) = match r.u8()? {
            0x53 => (r.u8()?, true),
            0x80 => {
                let v = r.u64()?;
                (u8::try_from(v).unwrap_or(0), false)
            }
            0xa3 => (section_code_by_name(r.var8()?).unwrap_or(0), false),
            0xb3 => (section_code_by_name(r.var32()?).unwrap_or(0), false),
            other => {
                return Err(CodecError::new(format!(
                    "unsupported section descriptor constructor {other:#04x} at byte {}",
                    start + 1
                )))
            }
        };
        if !(HEADER..=FOOTER).contains(&code) {
            return Err(CodecError::new(format!("unknown message section at byte {start}")));
        }
        let value = r.pos;
        let constructor = *buf.get(value).ok_or_else(|| r.truncated())?;
        r.skip_value(MAX_DEPTH)?;
        let ok = match code {
            HEADER | PROPERTIES | AMQP_SEQUENCE => matches!(constructor, 0x45 | 0xc0 | 0xd0),
            DELIVERY_ANNOTATIONS | MESSAGE_ANNOTATIONS | APPLICATION_PROPERTIES | FOOTER => {
                matches!(constructor, 0xc1 | 0xd1)
            }
            DATA => matches!(constructor, 0xa0 | 0xb0),
            _ => true,
        };
        if !ok {
            return Err(CodecError::new(format!(
                "{} section has the wrong value type ({constructor:#04x})",
                section_name(code)
            )));
        }
        // Delivery annotations and the footer may come anywhere, once each: the python SDK
        // writes delivery annotations last, after the body and footer, rhea (the js SDK's AMQP
        // library) writes the footer before the body, and Service Bus accepts both. Every other
        // section keeps the specification's order.
        if matches!(code, DELIVERY_ANNOTATIONS | FOOTER) {
            if sections.iter().any(|s| s.code == code) {
                return Err(CodecError::new(format!("a second {} section", section_name(code))));
            }
        } else if let Some(prev) =
            sections.iter().rev().find(|s| !matches!(s.code, DELIVERY_ANNOTATIONS | FOOTER))
        {
            let rank = |c: u8| if is_body(c) { DATA } else { c };
            let in_order = if is_body(code) {
                rank(prev.code) < DATA || (prev.code == code && code != AMQP_VALUE)
            } else {
                rank(code) > rank(prev.code)
            };
            if !in_order {
                return Err(CodecError::new(format!(
                    "{} section after {} section",
                    section_name(code),
                    section_name(prev.code)
                )));
            }
        }
        sections.push(Section { code, start, value, end: r.pos, small });
    }
    Ok(sections)
}

/// The content range of an encoded binary (a data section's value).
pub(super) fn binary_content(value: &[u8]) -> Result<Range<usize>> {
    let header = match value.first() {
        Some(0xa0) => 2,
        Some(0xb0) => 5,
        _ => return Err(CodecError::new("data section is not a binary")),
    };
    if value.len() < header {
        return Err(CodecError::new("truncated data section"));
    }
    Ok(header..value.len())
}

/// The header fields a sender gave (`None`: absent or null).
pub(super) struct HeaderFields {
    pub(super) durable: Option<bool>,
    pub(super) priority: Option<u8>,
    pub(super) ttl: Option<Duration>,
}

pub(super) fn decode_header(value: &[u8]) -> Result<HeaderFields> {
    let Val::List(list) = Reader::new(value).value()? else {
        return Err(CodecError::new("header is not a list"));
    };
    let mut h = HeaderFields { durable: None, priority: None, ttl: None };
    let mut r = list.reader();
    for i in 0..list.count {
        let v = r.value()?;
        match (i, v) {
            (_, Val::Null) => {}
            (0, Val::Bool(b)) => h.durable = Some(b),
            (0, _) => return Err(CodecError::new("header.durable is not a boolean")),
            (1, v) => {
                h.priority = Some(
                    v.as_u64()
                        .and_then(|p| u8::try_from(p).ok())
                        .ok_or_else(|| CodecError::new("header.priority is not a ubyte"))?,
                );
            }
            (2, v) => {
                let ms = v.as_u64().ok_or_else(|| CodecError::new("header.ttl is not a uint"))?;
                h.ttl = Some(Duration::from_millis(ms));
            }
            _ => {}
        }
    }
    Ok(h)
}

/// Takes the core's annotations out of the map and returns the kept client ones as
/// `(item count, encoded entries)`, or `None` when nothing is kept.
pub(super) fn decode_message_annotations(
    value: &[u8],
    properties: &mut MessageProperties,
) -> Result<Option<(usize, Vec<u8>)>> {
    kept_annotations(value, MESSAGE_ANNOTATIONS, |name, v| {
        if name == PARTITION_KEY {
            // A received message sent again by the python SDK carries it as binary (its
            // decoder turns strings into bytes, its encoder bytes into binary).
            properties.partition_key = match v {
                Val::Null => None,
                Val::String(s) | Val::Symbol(s) | Val::Binary(s) => {
                    Some(utf8(s, PARTITION_KEY)?.to_owned())
                }
                _ => return Err(CodecError::new("x-opt-partition-key is not a string")),
            };
            Ok(false)
        } else if name == SCHEDULED_ENQUEUE_TIME {
            properties.scheduled_enqueue_time = match v {
                Val::Null => None,
                v => Some(Timestamp::from_millis(v.as_i64().ok_or_else(|| {
                    CodecError::new("x-opt-scheduled-enqueue-time is not a timestamp")
                })?)),
            };
            Ok(false)
        } else {
            Ok(!BROKER_OWNED.contains(&name))
        }
    })
}

/// The sender's delivery annotations a stored message keeps, as `(item count, encoded
/// entries)`, or `None` when nothing is kept. Service Bus hands them to receivers; the broker's
/// own `x-opt-lock-token` is dropped (a received message sent again carries the token of its
/// old lock, and each delivery writes its own).
pub(super) fn decode_delivery_annotations(value: &[u8]) -> Result<Option<(usize, Vec<u8>)>> {
    kept_annotations(value, DELIVERY_ANNOTATIONS, |name, _| Ok(name != LOCK_TOKEN))
}

/// The entries of an annotations map (`section`: message or delivery annotations) that are
/// kept, as `(item count, encoded entries)`, or `None` when none is. An entry with a symbol or
/// string key is kept when `keep(name, value)` says so, its key re-encoded as a symbol (a
/// string key would break rs's decoder); one with a ulong key is always kept.
fn kept_annotations<'a>(
    value: &'a [u8],
    section: u8,
    mut keep: impl FnMut(&str, Val<'a>) -> Result<bool>,
) -> Result<Option<(usize, Vec<u8>)>> {
    let [not_a_map, key_name, bad_key] = if section == MESSAGE_ANNOTATIONS {
        [
            "message-annotations is not a map",
            "a message-annotation key",
            "message-annotation key is not a symbol or ulong",
        ]
    } else {
        [
            "delivery-annotations is not a map",
            "a delivery-annotation key",
            "delivery-annotation key is not a symbol or ulong",
        ]
    };
    let Val::Map(map) = Reader::new(value).value()? else {
        return Err(CodecError::new(not_a_map));
    };
    let mut r = map.reader();
    let mut kept = Vec::new();
    let mut count = 0;
    for _ in 0..map.count / 2 {
        let (key, key_bytes) = r.value_with_bytes()?;
        let (v, value_bytes) = r.value_with_bytes()?;
        match key {
            Val::Symbol(name) | Val::String(name) => {
                let name = utf8(name, key_name)?;
                if keep(name, v)? {
                    put_symbol(&mut kept, name.as_bytes());
                    kept.put_slice(value_bytes);
                    count += 2;
                }
            }
            Val::ULong(_) => {
                kept.put_slice(key_bytes);
                kept.put_slice(value_bytes);
                count += 2;
            }
            _ => return Err(CodecError::new(bad_key)),
        }
    }
    Ok((count > 0).then_some((count, kept)))
}

pub(super) fn decode_properties(value: &[u8], p: &mut MessageProperties) -> Result<()> {
    let Val::List(list) = Reader::new(value).value()? else {
        return Err(CodecError::new("properties is not a list"));
    };
    let mut r = list.reader();
    for i in 0..list.count.min(13) {
        let v = r.value()?;
        match i {
            0 => p.message_id = id_string(v, "properties.message-id")?,
            2 => p.to = text(v, "properties.to")?,
            3 => p.subject = text(v, "properties.subject")?,
            4 => p.reply_to = text(v, "properties.reply-to")?,
            5 => p.correlation_id = id_string(v, "properties.correlation-id")?,
            6 => p.content_type = text(v, "properties.content-type")?,
            10 => p.session_id = text(v, "properties.group-id")?,
            12 => p.reply_to_session_id = text(v, "properties.reply-to-group-id")?,
            _ => {}
        }
    }
    Ok(())
}

/// A string (or symbol) field.
pub(super) fn text(v: Val<'_>, what: &str) -> Result<Option<String>> {
    match v {
        Val::Null => Ok(None),
        Val::String(s) | Val::Symbol(s) => Ok(Some(utf8(s, what)?.to_owned())),
        _ => Err(CodecError::new(format!("{what} is not a string"))),
    }
}

/// A message-id or correlation-id as the core's canonical string (module docs).
pub(super) fn id_string(v: Val<'_>, what: &str) -> Result<Option<String>> {
    Ok(Some(match v {
        Val::Null => return Ok(None),
        Val::String(s) | Val::Symbol(s) => utf8(s, what)?.to_owned(),
        Val::Uuid(b) => Uuid::from_bytes(b).hyphenated().to_string(),
        Val::Binary(b) => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            b.iter()
                .flat_map(|&x| [HEX[usize::from(x >> 4)] as char, HEX[usize::from(x & 15)] as char])
                .collect()
        }
        v => match (v.as_u64(), v.as_i64()) {
            (Some(u), _) => u.to_string(),
            (None, Some(i)) if !matches!(v, Val::Timestamp(_)) => i.to_string(),
            _ => {
                return Err(CodecError::new(format!(
                    "{what} is not a string, uuid, ulong or binary"
                )))
            }
        },
    }))
}

pub(super) fn decode_app_properties(value: &[u8]) -> Result<ApplicationProperties> {
    let mut out = ApplicationProperties::new();
    for entry in app_property_entries(value)? {
        let (key, value, _) = entry?;
        if let Some(value) = value {
            out.insert(key.to_owned(), value);
        }
    }
    Ok(out)
}

/// The entries of an application-properties map: `(key, value if the core can represent it,
/// the entry's encoded bytes)`.
#[allow(clippy::type_complexity)]
pub(super) fn app_property_entries(
    value: &[u8],
) -> Result<impl Iterator<Item = Result<(&str, Option<PropertyValue>, &[u8])>>> {
    let Val::Map(map) = Reader::new(value).value()? else {
        return Err(CodecError::new("application-properties is not a map"));
    };
    let mut r = map.reader();
    Ok((0..map.count / 2).map(move |_| {
        let start = r.pos;
        let key = match r.value()? {
            Val::String(k) | Val::Symbol(k) => utf8(k, "an application-property key")?,
            _ => return Err(CodecError::new("application-property key is not a string")),
        };
        let v = property_value(r.value()?, key)?;
        Ok((key, v, &map.items[start..r.pos]))
    }))
}

/// An application-property value; `None` for types the core cannot represent.
pub(super) fn property_value(v: Val<'_>, key: &str) -> Result<Option<PropertyValue>> {
    Ok(Some(match v {
        Val::Null => PropertyValue::Null,
        Val::Bool(b) => PropertyValue::Bool(b),
        Val::UByte(v) => PropertyValue::UByte(v),
        Val::UShort(v) => PropertyValue::UShort(v),
        Val::UInt(v) => PropertyValue::UInt(v),
        Val::ULong(v) => PropertyValue::ULong(v),
        Val::Byte(v) => PropertyValue::Byte(v),
        Val::Short(v) => PropertyValue::Short(v),
        Val::Int(v) => PropertyValue::Int(v),
        Val::Long(v) => PropertyValue::Long(v),
        Val::Float(v) => PropertyValue::Float(v),
        Val::Double(v) => PropertyValue::Double(v),
        Val::Char(c) => PropertyValue::Char(char::from_u32(c).ok_or_else(|| {
            CodecError::new(format!("application property {key:?} is an invalid char"))
        })?),
        Val::Timestamp(ms) => PropertyValue::Timestamp(Timestamp::from_millis(ms)),
        Val::Uuid(b) => PropertyValue::Uuid(Uuid::from_bytes(b)),
        Val::Binary(b) => PropertyValue::Binary(Bytes::copy_from_slice(b)),
        Val::String(s) => PropertyValue::String(utf8(s, "an application property")?.to_owned()),
        Val::Symbol(_) | Val::List(_) | Val::Map(_) | Val::Other => return Ok(None),
    }))
}

pub(super) struct RawMessage<'a> {
    /// The sender's header.durable; `None` when it gave none.
    pub(super) durable: Option<bool>,
    /// The sender's header.priority; `None` when it gave none.
    pub(super) priority: Option<u8>,
    /// `(item count, encoded entries)` of the kept client message annotations.
    pub(super) annotations: Option<(usize, &'a [u8])>,
    /// `(item count, encoded entries)` of the kept client delivery annotations.
    pub(super) delivery_annotations: Option<(usize, &'a [u8])>,
    pub(super) bare: &'a [u8],
    pub(super) sections: Vec<Section>,
}

impl<'a> RawMessage<'a> {
    /// `None` if `raw` is not an envelope this codec wrote (the caller falls back to the core
    /// fields).
    pub(super) fn parse(raw: &'a [u8]) -> Option<Self> {
        let mut r = Reader::new(raw);
        if r.u8().ok()? != RAW_VERSION {
            return None;
        }
        let flags = r.u8().ok()?;
        let priority = r.u8().ok()?;
        let mut map = |flag: u8| -> Option<Option<(usize, &'a [u8])>> {
            if flags & flag == 0 {
                return Some(None);
            }
            match r.value().ok()? {
                Val::Map(m) => Some(Some((m.count, m.items))),
                _ => None,
            }
        };
        let annotations = map(RAW_ANNOTATIONS)?;
        let delivery_annotations = map(RAW_DELIVERY_ANNOTATIONS)?;
        let bare = &raw[r.pos..];
        let sections = split_sections(bare).ok()?;
        // Envelopes written before the `…_SET` flags: a non-default value was given.
        let durable = flags & RAW_DURABLE != 0;
        let durable_set = flags & RAW_DURABLE_SET != 0 || durable;
        let priority_set = flags & RAW_PRIORITY_SET != 0 || priority != DEFAULT_PRIORITY;
        Some(Self {
            durable: durable_set.then_some(durable),
            priority: priority_set.then_some(priority),
            annotations,
            delivery_annotations,
            bare,
            sections,
        })
    }

    pub(super) fn annotations_len(&self) -> usize {
        self.annotations.map_or(0, |(_, a)| a.len())
            + self.delivery_annotations.map_or(0, |(_, a)| a.len())
    }
}
