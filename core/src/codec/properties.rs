//! Typed values and system properties as records hold them: application properties and rule
//! parameters (named [`PropertyValue`]s, in order) and a message's [`MessageProperties`].
//!
//! Invariants:
//! - A property type's code (0 to 18) is part of the stored format: a code is never reused or
//!   renumbered, and a new type takes a new code.
//! - A pair count read from a record reserves no more pairs than the bytes that remain can hold
//!   (at least 5 bytes a pair); every value is then read through the bounds-checked
//!   [`Reader`](super::primitives::Reader).

use std::time::Duration;

use uuid::Uuid;

use super::primitives::{DecodeResult, Reader, Writer};
use crate::message::{ApplicationProperties, MessageProperties, PropertyValue};
use crate::types::Timestamp;

pub(super) fn encode_properties(w: &mut Writer, props: &ApplicationProperties) {
    encode_pairs(w, props.iter(), props.len());
}

/// Named values, in the order given (application properties, rule parameters).
pub(super) fn encode_pairs<'a>(
    w: &mut Writer,
    pairs: impl Iterator<Item = (&'a String, &'a PropertyValue)>,
    len: usize,
) {
    w.u32(len as u32);
    for (name, value) in pairs {
        w.str(name);
        match value {
            PropertyValue::Null => w.u8(0),
            PropertyValue::Bool(v) => {
                w.u8(1);
                w.bool(*v)
            }
            PropertyValue::UByte(v) => {
                w.u8(2);
                w.u8(*v)
            }
            PropertyValue::UShort(v) => {
                w.u8(3);
                w.u16(*v)
            }
            PropertyValue::UInt(v) => {
                w.u8(4);
                w.u32(*v)
            }
            PropertyValue::ULong(v) => {
                w.u8(5);
                w.u64(*v)
            }
            PropertyValue::Byte(v) => {
                w.u8(6);
                w.u8(*v as u8)
            }
            PropertyValue::Short(v) => {
                w.u8(7);
                w.u16(*v as u16)
            }
            PropertyValue::Int(v) => {
                w.u8(8);
                w.u32(*v as u32)
            }
            PropertyValue::Long(v) => {
                w.u8(9);
                w.i64(*v)
            }
            PropertyValue::Float(v) => {
                w.u8(10);
                w.u32(v.to_bits())
            }
            PropertyValue::Double(v) => {
                w.u8(11);
                w.u64(v.to_bits())
            }
            PropertyValue::Char(v) => {
                w.u8(12);
                w.u32(*v as u32)
            }
            PropertyValue::Timestamp(v) => {
                w.u8(13);
                w.i64(v.as_millis())
            }
            PropertyValue::LocalTimestamp(v) => {
                w.u8(17);
                w.i64(v.as_millis())
            }
            PropertyValue::TimeSpan(v) => {
                w.u8(18);
                w.i64(*v)
            }
            PropertyValue::Uuid(v) => {
                w.u8(14);
                w.array(v.as_bytes())
            }
            PropertyValue::Binary(v) => {
                w.u8(15);
                w.bytes(v)
            }
            PropertyValue::String(v) => {
                w.u8(16);
                w.str(v)
            }
        }
    }
}

pub(super) fn decode_properties(r: &mut Reader<'_>) -> DecodeResult<ApplicationProperties> {
    Ok(decode_pairs(r)?.into_iter().collect())
}

pub(super) fn decode_pairs(r: &mut Reader<'_>) -> DecodeResult<Vec<(String, PropertyValue)>> {
    let n = r.u32()?;
    // Each pair takes at least 5 bytes: never reserve more than the record can hold.
    let mut props = Vec::with_capacity((n as usize).min(r.remaining() / 5));
    for _ in 0..n {
        let name = r.str()?;
        let value = match r.u8()? {
            0 => PropertyValue::Null,
            1 => PropertyValue::Bool(r.bool()?),
            2 => PropertyValue::UByte(r.u8()?),
            3 => PropertyValue::UShort(r.u16()?),
            4 => PropertyValue::UInt(r.u32()?),
            5 => PropertyValue::ULong(r.u64()?),
            6 => PropertyValue::Byte(r.u8()? as i8),
            7 => PropertyValue::Short(r.u16()? as i16),
            8 => PropertyValue::Int(r.u32()? as i32),
            9 => PropertyValue::Long(r.i64()?),
            10 => PropertyValue::Float(f32::from_bits(r.u32()?)),
            11 => PropertyValue::Double(f64::from_bits(r.u64()?)),
            12 => PropertyValue::Char(
                char::from_u32(r.u32()?).ok_or_else(|| r.corrupted("invalid char"))?,
            ),
            13 => PropertyValue::Timestamp(Timestamp::from_millis(r.i64()?)),
            14 => PropertyValue::Uuid(Uuid::from_bytes(r.array()?)),
            15 => PropertyValue::Binary(r.bytes()?),
            16 => PropertyValue::String(r.str()?),
            17 => PropertyValue::LocalTimestamp(Timestamp::from_millis(r.i64()?)),
            18 => PropertyValue::TimeSpan(r.i64()?),
            t => return Err(r.corrupted(&format!("unknown property type {t}"))),
        };
        props.push((name, value));
    }
    Ok(props)
}

/// The system properties a sender set, as body records (and version-2 meta records) hold them.
pub(super) fn encode_message_properties(w: &mut Writer, p: &MessageProperties) {
    for s in p.strings() {
        w.opt_str(s);
    }
    w.opt_i64(p.time_to_live.map(|d| d.as_millis().min(i64::MAX as u128) as i64));
    w.opt_i64(p.scheduled_enqueue_time.map(Timestamp::as_millis));
}

pub(super) fn decode_message_properties(r: &mut Reader<'_>) -> DecodeResult<MessageProperties> {
    let mut strings: [Option<String>; 9] = Default::default();
    for s in &mut strings {
        *s = r.opt(Reader::str)?;
    }
    let [message_id, session_id, partition_key, correlation_id, subject, to, reply_to, reply_to_session_id, content_type] =
        strings;
    Ok(MessageProperties {
        message_id,
        session_id,
        partition_key,
        correlation_id,
        subject,
        to,
        reply_to,
        reply_to_session_id,
        content_type,
        time_to_live: r.opt(Reader::i64)?.map(|ms| Duration::from_millis(ms.max(0) as u64)),
        scheduled_enqueue_time: r.opt(Reader::i64)?.map(Timestamp::from_millis),
    })
}
