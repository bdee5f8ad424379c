//! Decoding (client → broker): a transfer payload into core messages, keeping the client's
//! bare message bytes in the raw envelope.

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};
use ironbus_core::{ApplicationProperties, Message, MessageProperties};
use uuid::Uuid;

use super::decimal;
use super::encode::{put_map, put_properties_with_id, put_section_normalized};
use super::sections::{
    binary_content, decode_app_properties, decode_delivery_annotations, decode_header,
    decode_message_annotations, decode_properties, split_sections,
};
use super::*;

/// Decodes the payload of a complete message-format-0 transfer. See the module docs for what
/// is kept where. Never panics: malformed input gives a [`CodecError`].
pub fn decode_message(payload: Bytes) -> Result<Message> {
    let buf: &[u8] = &payload;
    let sections = split_sections(buf)?;

    let mut properties = MessageProperties::default();
    let mut durable = None;
    let mut priority = None;
    let mut kept_annotations: Option<(usize, Vec<u8>)> = None;
    let mut kept_delivery_annotations: Option<(usize, Vec<u8>)> = None;
    let mut application_properties = ApplicationProperties::new();

    for s in &sections {
        let value = &buf[s.value..s.end];
        match s.code {
            HEADER => {
                let h = decode_header(value)?;
                durable = h.durable;
                priority = h.priority;
                properties.time_to_live = h.ttl;
            }
            DELIVERY_ANNOTATIONS => {
                kept_delivery_annotations = decode_delivery_annotations(value)?;
            }
            MESSAGE_ANNOTATIONS => {
                kept_annotations = decode_message_annotations(value, &mut properties)?;
            }
            PROPERTIES => decode_properties(value, &mut properties)?,
            APPLICATION_PROPERTIES => application_properties = decode_app_properties(value)?,
            _ => {}
        }
    }

    // Service Bus gives every message a MessageId; a client that set none gets a new one (the
    // js SDK, for one, cannot settle a message without it).
    let assigned_id = match properties.message_id {
        Some(_) => None,
        None => {
            let id = Uuid::new_v4().simple().to_string();
            properties.message_id = Some(id.clone());
            Some(id)
        }
    };

    // The raw envelope.
    let bare_len: usize = sections.iter().filter(|s| s.code >= PROPERTIES).map(|s| s.len()).sum();
    let annotations_len = [&kept_annotations, &kept_delivery_annotations]
        .iter()
        .map(|kept| kept.as_ref().map_or(0, |(_, body)| body.len() + 9))
        .sum::<usize>();
    // An assigned message-id makes the properties section a list32 with the id in front: at
    // most its header (3), sizes (8) and the id's string header (2) more than the client's
    // section, or all of that and an empty list when it sent none.
    let id_len = assigned_id.as_ref().map_or(0, |id| 16 + id.len());
    let mut raw = BytesMut::with_capacity(3 + annotations_len + bare_len + id_len + 8);
    raw.put_u8(RAW_VERSION);
    let mut flags = 0;
    if let Some(durable) = durable {
        flags |= RAW_DURABLE_SET;
        if durable {
            flags |= RAW_DURABLE;
        }
    }
    if priority.is_some() {
        flags |= RAW_PRIORITY_SET;
    }
    if kept_annotations.is_some() {
        flags |= RAW_ANNOTATIONS;
    }
    if kept_delivery_annotations.is_some() {
        flags |= RAW_DELIVERY_ANNOTATIONS;
    }
    raw.put_u8(flags);
    raw.put_u8(priority.unwrap_or(DEFAULT_PRIORITY));
    for (count, body) in [&kept_annotations, &kept_delivery_annotations].into_iter().flatten() {
        put_map(&mut raw, *count, body);
    }
    let mut data: Vec<Range<usize>> = Vec::new();
    if let Some(id) = &assigned_id {
        if !sections.iter().any(|s| s.code == PROPERTIES) {
            put_properties_with_id(&mut raw, &[0x45], id)?;
        }
    }
    for s in sections.iter().filter(|s| s.code >= PROPERTIES) {
        let value_at = raw.len() + 3;
        match (&assigned_id, s.code) {
            (Some(id), PROPERTIES) => put_properties_with_id(&mut raw, &buf[s.value..s.end], id)?,
            (_, APPLICATION_PROPERTIES) if decimal::has_decimal(&buf[s.value..s.end])? => {
                decimal::put_app_properties_service_decimals(&mut raw, &buf[s.value..s.end])?
            }
            _ => put_section_normalized(&mut raw, buf, s),
        }
        if s.code == DATA {
            let content = binary_content(&buf[s.value..s.end])?;
            data.push(value_at + content.start..value_at + content.end);
        }
    }
    let raw = raw.freeze();

    let body = match data.as_slice() {
        [] => Bytes::new(),
        [one] => raw.slice(one.clone()),
        many => {
            let mut body = BytesMut::with_capacity(many.iter().map(|r| r.len()).sum());
            for r in many {
                body.put_slice(&raw[r.clone()]);
            }
            body.freeze()
        }
    };

    Ok(Message {
        properties,
        application_properties,
        body,
        raw: Some(raw),
        application_properties_modified: false,
        forwarded: None,
    })
}

/// Decodes the payload of a batch transfer (message-format [`BATCH_MESSAGE_FORMAT`]): the
/// envelope's body is one data section per inner message, each a complete encoded message
/// decoded with [`decode_message`]. The envelope's other sections are routing copies of the
/// first message's and are ignored. An envelope without data sections gives an empty vector.
pub fn decode_batch(payload: Bytes) -> Result<Vec<Message>> {
    let sections = split_sections(&payload)?;
    let mut messages = Vec::new();
    for s in &sections {
        match s.code {
            DATA => {
                let content = binary_content(&payload[s.value..s.end])?;
                let inner = payload.slice(s.value + content.start..s.value + content.end);
                let message = decode_message(inner).map_err(|e| {
                    CodecError::new(format!("batch message {}: {e}", messages.len()))
                })?;
                messages.push(message);
            }
            AMQP_VALUE | AMQP_SEQUENCE => {
                return Err(CodecError::new(
                    "a batch envelope's body must be data sections (one per message)",
                ))
            }
            _ => {}
        }
    }
    Ok(messages)
}

/// Decodes a transfer payload by its message format: 0 → one message, [`BATCH_MESSAGE_FORMAT`]
/// → the batch's messages; any other format is an error.
pub fn decode_transfer(message_format: u32, payload: Bytes) -> Result<Vec<Message>> {
    match message_format {
        0 => decode_message(payload).map(|m| vec![m]),
        BATCH_MESSAGE_FORMAT => decode_batch(payload),
        other => Err(CodecError::new(format!("unsupported message-format {other:#x}"))),
    }
}
