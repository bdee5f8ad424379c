//! Message codec: AMQP 1.0 transfer payloads to core [`Message`]s and back. Pure functions, no I/O.
//!
//! # Decoding (client → broker)
//!
//! [`decode_message`] walks the sections of a complete (reassembled) message-format-0 payload
//! with a byte-level skipper (constructor width classes plus the described `0x00` prefix) and
//! decodes only what the core needs:
//!
//! * header: `ttl` → `time_to_live`; `durable` and `priority` go into the raw envelope; the
//!   client's `first-acquirer` and `delivery-count` are discarded (the broker writes its own).
//! * delivery-annotations: dropped (they are per hop).
//! * message-annotations: `x-opt-partition-key` → `partition_key`, `x-opt-scheduled-enqueue-time`
//!   → `scheduled_enqueue_time` (both are re-added from the core fields on delivery); the
//!   broker-owned keys (amqp.md §4.1) are dropped; every other annotation is kept in the raw
//!   envelope and re-sent on delivery.
//! * properties: see the canonical-id rule below; `group-id` → `session_id`, `reply-to-group-id`
//!   → `reply_to_session_id`, `to`, `subject`, `reply-to`, `content-type` as strings.
//! * application-properties: string (or symbol) keys; every value type [`PropertyValue`] can
//!   represent is decoded into `application_properties`. Values it cannot represent (symbol,
//!   decimal, list, map, array, described) are *omitted from the core map* but stay in the raw
//!   bare message untouched, and survive a re-encode of the section (see below).
//! * body: one data section → `body` is its bytes (zero-copy, a slice of `raw`); several data
//!   sections → their concatenation; amqp-value / amqp-sequence → `body` is empty (the raw bare
//!   message carries them unchanged).
//!
//! **Canonical id strings.** `message-id` and `correlation-id` may be any AMQP type; the core
//! keeps them as strings: a string (or symbol) as is, a uuid as its hyphenated lowercase form, an
//! integer (ulong, or any other integer width) in decimal, a binary as lowercase hex. The wire type
//! itself is preserved in the raw bare message, so deliveries echo the client's exact type.
//!
//! # The raw envelope (`Message::raw`)
//!
//! ```text
//! offset 0  version    u8  = 0x01
//! offset 1  flags      u8  bit 0: header.durable; bit 1: a client-annotations map follows
//! offset 2  priority   u8  header.priority (4 when the client sent no header)
//! [flags bit 1]        the kept client message-annotations as one encoded AMQP map (map8 or
//!                      map32 constructor, symbol or ulong keys, values byte for byte as received)
//! rest                 the bare message: every section from properties through footer, byte for
//!                      byte as received, except that a section whose descriptor was not
//!                      small-ulong (`0x80` ulong or symbolic) is rewritten as `00 53 <code>` +
//!                      its value bytes unchanged (amqp.md §0.1)
//! ```
//!
//! # Encoding (broker → client)
//!
//! [`encode_delivery`] builds a transfer payload (also used inside management responses): a
//! hand-encoded header with all five fields, delivery-annotations `x-opt-lock-token` when
//! locked, message-annotations (client + broker-owned, symbol keys), then the bare message from
//! `raw` (with the application-properties section re-encoded from the core map when
//! `application_properties_modified`), or encoded from the core fields when there is no raw.
//! Every descriptor is small-ulong (`00 53 code`).

use std::ops::Range;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use ironbus_core::{
    ApplicationProperties, Message, MessageProperties, PropertyValue, ReceivedMessage, Timestamp,
};
use uuid::Uuid;

/// The message format of a Service Bus batch transfer (amqp.md §11.1).
pub const BATCH_MESSAGE_FORMAT: u32 = 0x8001_3700;

const HEADER: u8 = 0x70;
const DELIVERY_ANNOTATIONS: u8 = 0x71;
const MESSAGE_ANNOTATIONS: u8 = 0x72;
const PROPERTIES: u8 = 0x73;
const APPLICATION_PROPERTIES: u8 = 0x74;
const DATA: u8 = 0x75;
const AMQP_SEQUENCE: u8 = 0x76;
const AMQP_VALUE: u8 = 0x77;
const FOOTER: u8 = 0x78;

const RAW_VERSION: u8 = 1;
const RAW_DURABLE: u8 = 0x01;
const RAW_ANNOTATIONS: u8 = 0x02;

/// How deep described-type nesting may go before the input is treated as garbage.
const MAX_DEPTH: u32 = 32;

const PARTITION_KEY: &str = "x-opt-partition-key";
const SCHEDULED_ENQUEUE_TIME: &str = "x-opt-scheduled-enqueue-time";
const SEQUENCE_NUMBER: &str = "x-opt-sequence-number";
const ENQUEUED_TIME: &str = "x-opt-enqueued-time";
const LOCKED_UNTIL: &str = "x-opt-locked-until";
const MESSAGE_STATE: &str = "x-opt-message-state";
const ENQUEUE_SEQUENCE_NUMBER: &str = "x-opt-enqueue-sequence-number";
const DEADLETTER_SOURCE: &str = "x-opt-deadletter-source";
const LOCK_TOKEN: &str = "x-opt-lock-token";

/// Message annotations only the broker may set; dropped when a client sends them (amqp.md §4.1).
const BROKER_OWNED: [&str; 6] = [
    SEQUENCE_NUMBER,
    ENQUEUED_TIME,
    LOCKED_UNTIL,
    MESSAGE_STATE,
    ENQUEUE_SEQUENCE_NUMBER,
    DEADLETTER_SOURCE,
];

/// A payload that is not a well-formed AMQP message (or batch), with what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CodecError {
    message: String,
}

impl CodecError {
    fn new(message: impl Into<String>) -> Self {
        Self { message: message.into() }
    }

    /// What was wrong, for a `amqp:decode-error` description.
    pub fn message(&self) -> &str {
        &self.message
    }
}

type Result<T> = std::result::Result<T, CodecError>;

/// Options for [`encode_delivery`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeliveryOptions {
    /// Leave out the body sections (management peek with `omit-message-body`).
    pub omit_body: bool,
}

// ---------------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------------

/// Decodes the payload of a complete message-format-0 transfer. See the module docs for what
/// is kept where. Never panics: malformed input gives a [`CodecError`].
pub fn decode_message(payload: Bytes) -> Result<Message> {
    let buf: &[u8] = &payload;
    let sections = split_sections(buf)?;

    let mut properties = MessageProperties::default();
    let mut durable = false;
    let mut priority = 4u8;
    let mut kept_annotations: Option<(usize, Vec<u8>)> = None;
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
    let annotations_len = kept_annotations.as_ref().map_or(0, |(_, body)| body.len() + 9);
    let mut raw = BytesMut::with_capacity(3 + annotations_len + bare_len + 8);
    raw.put_u8(RAW_VERSION);
    let mut flags = 0;
    if durable {
        flags |= RAW_DURABLE;
    }
    if kept_annotations.is_some() {
        flags |= RAW_ANNOTATIONS;
    }
    raw.put_u8(flags);
    raw.put_u8(priority);
    if let Some((count, body)) = &kept_annotations {
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
    // delivery-count as None, frame-level.md §2).
    let (durable, priority) = raw.as_ref().map_or((false, 4), |r| (r.durable, r.priority));
    put_header(&mut out, durable, priority, header_ttl(received), broker.delivery_count);

    // Delivery annotations: the lock token in network order (rs reads it, amqp.md §4.3).
    if let Some(lock) = &received.lock {
        let mut entries = Vec::with_capacity(40);
        put_symbol(&mut entries, LOCK_TOKEN.as_bytes());
        entries.put_u8(0x98);
        entries.put_slice(lock.token.0.as_bytes());
        put_described_map(&mut out, DELIVERY_ANNOTATIONS, 2, &entries);
    }

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
    annotate(MESSAGE_STATE, &|o| put_int(o, broker.state.code()));
    annotate(ENQUEUE_SEQUENCE_NUMBER, &|o| put_long(o, broker.enqueued_sequence_number.0));
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

/// The delivery tag for a lock token: the .NET `Guid.ToByteArray()` layout
/// `N3 N2 N1 N0 N5 N4 N7 N6 N8 … N15` of the network-order bytes `N` (amqp.md §4.3).
pub fn lock_token_to_delivery_tag(token: &Uuid) -> [u8; 16] {
    let n = token.as_bytes();
    [
        n[3], n[2], n[1], n[0], n[5], n[4], n[7], n[6], n[8], n[9], n[10], n[11], n[12], n[13],
        n[14], n[15],
    ]
}

/// The lock token a delivery tag carries ([`lock_token_to_delivery_tag`]'s inverse); `None`
/// unless the tag is 16 bytes.
pub fn delivery_tag_to_lock_token(tag: &[u8]) -> Option<Uuid> {
    let t: [u8; 16] = tag.try_into().ok()?;
    Some(Uuid::from_bytes([
        t[3], t[2], t[1], t[0], t[5], t[4], t[7], t[6], t[8], t[9], t[10], t[11], t[12], t[13],
        t[14], t[15],
    ]))
}

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn truncated(&self) -> CodecError {
        CodecError::new(format!("truncated AMQP encoding at byte {}", self.pos))
    }

    fn u8(&mut self) -> Result<u8> {
        let b = *self.buf.get(self.pos).ok_or_else(|| self.truncated())?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| self.truncated())?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// Skips one complete value (constructor included).
    fn skip_value(&mut self, depth: u32) -> Result<()> {
        let code = self.u8()?;
        if code == 0x00 {
            let depth = depth
                .checked_sub(1)
                .ok_or_else(|| CodecError::new("described types nested too deeply"))?;
            self.skip_value(depth)?;
            return self.skip_value(depth);
        }
        self.skip_body(code)
    }

    /// Skips the bytes that follow the format code `code`, by its width class.
    fn skip_body(&mut self, code: u8) -> Result<()> {
        let n = match code >> 4 {
            0x4 => 0,
            0x5 => 1,
            0x6 => 2,
            0x7 => 4,
            0x8 => 8,
            0x9 => 16,
            0xa | 0xc | 0xe => self.u8()? as usize,
            0xb | 0xd | 0xf => self.u32()? as usize,
            _ => {
                return Err(CodecError::new(format!(
                    "invalid AMQP format code {code:#04x} at byte {}",
                    self.pos - 1
                )))
            }
        };
        self.take(n).map(|_| ())
    }

    /// Reads one value, decoding the primitive types and the list/map framing.
    fn value(&mut self) -> Result<Val<'a>> {
        let code = self.u8()?;
        Ok(match code {
            0x00 => {
                self.skip_value(MAX_DEPTH)?;
                self.skip_value(MAX_DEPTH)?;
                Val::Other
            }
            0x40 => Val::Null,
            0x41 => Val::Bool(true),
            0x42 => Val::Bool(false),
            0x56 => Val::Bool(self.u8()? != 0),
            0x50 => Val::UByte(self.u8()?),
            0x60 => Val::UShort(u16::from_be_bytes(self.array()?)),
            0x70 => Val::UInt(self.u32()?),
            0x52 => Val::UInt(self.u8()?.into()),
            0x43 => Val::UInt(0),
            0x80 => Val::ULong(self.u64()?),
            0x53 => Val::ULong(self.u8()?.into()),
            0x44 => Val::ULong(0),
            0x51 => Val::Byte(i8::from_be_bytes(self.array()?)),
            0x61 => Val::Short(i16::from_be_bytes(self.array()?)),
            0x71 => Val::Int(i32::from_be_bytes(self.array()?)),
            0x54 => Val::Int(i8::from_be_bytes(self.array()?).into()),
            0x81 => Val::Long(i64::from_be_bytes(self.array()?)),
            0x55 => Val::Long(i8::from_be_bytes(self.array()?).into()),
            0x72 => Val::Float(f32::from_bits(self.u32()?)),
            0x82 => Val::Double(f64::from_bits(self.u64()?)),
            0x73 => Val::Char(self.u32()?),
            0x83 => Val::Timestamp(i64::from_be_bytes(self.array()?)),
            0x98 => Val::Uuid(self.array()?),
            0xa0 => Val::Binary(self.var8()?),
            0xb0 => Val::Binary(self.var32()?),
            0xa1 => Val::String(self.var8()?),
            0xb1 => Val::String(self.var32()?),
            0xa3 => Val::Symbol(self.var8()?),
            0xb3 => Val::Symbol(self.var32()?),
            0x45 => Val::List(Compound { count: 0, items: &[] }),
            0xc0 => Val::List(self.compound8()?),
            0xd0 => Val::List(self.compound32()?),
            0xc1 => Val::Map(self.map(true)?),
            0xd1 => Val::Map(self.map(false)?),
            other => {
                self.skip_body(other)?;
                Val::Other
            }
        })
    }

    /// Reads one value and returns it with its encoded bytes.
    fn value_with_bytes(&mut self) -> Result<(Val<'a>, &'a [u8])> {
        let start = self.pos;
        let v = self.value()?;
        Ok((v, &self.buf[start..self.pos]))
    }

    fn var8(&mut self) -> Result<&'a [u8]> {
        let n = self.u8()? as usize;
        self.take(n)
    }

    fn var32(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn compound8(&mut self) -> Result<Compound<'a>> {
        let body = self.var8()?;
        let (&count, items) =
            body.split_first().ok_or_else(|| CodecError::new("compound value without a count"))?;
        Compound::new(count.into(), items)
    }

    fn compound32(&mut self) -> Result<Compound<'a>> {
        let body = self.var32()?;
        if body.len() < 4 {
            return Err(CodecError::new("compound value without a count"));
        }
        let (count, items) = body.split_at(4);
        let count = u32::from_be_bytes([count[0], count[1], count[2], count[3]]);
        Compound::new(count as usize, items)
    }

    fn map(&mut self, small: bool) -> Result<Compound<'a>> {
        let c = if small { self.compound8()? } else { self.compound32()? };
        if c.count % 2 != 0 {
            return Err(CodecError::new("map with an odd number of items"));
        }
        Ok(c)
    }
}

/// A decoded value; compound and exotic values stay undecoded.
#[derive(Debug, Clone, Copy)]
enum Val<'a> {
    Null,
    Bool(bool),
    UByte(u8),
    UShort(u16),
    UInt(u32),
    ULong(u64),
    Byte(i8),
    Short(i16),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    Char(u32),
    Timestamp(i64),
    Uuid([u8; 16]),
    Binary(&'a [u8]),
    String(&'a [u8]),
    Symbol(&'a [u8]),
    List(Compound<'a>),
    Map(Compound<'a>),
    /// Decimals, arrays, described values and codes this codec does not know (skipped by width).
    Other,
}

impl Val<'_> {
    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    fn as_u64(&self) -> Option<u64> {
        match *self {
            Val::UByte(v) => Some(v.into()),
            Val::UShort(v) => Some(v.into()),
            Val::UInt(v) => Some(v.into()),
            Val::ULong(v) => Some(v),
            Val::Byte(v) => u64::try_from(v).ok(),
            Val::Short(v) => u64::try_from(v).ok(),
            Val::Int(v) => u64::try_from(v).ok(),
            Val::Long(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer, if it is an integer (or timestamp) of any width.
    fn as_i64(&self) -> Option<i64> {
        match *self {
            Val::Byte(v) => Some(v.into()),
            Val::Short(v) => Some(v.into()),
            Val::Int(v) => Some(v.into()),
            Val::Long(v) | Val::Timestamp(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }
}

/// A list's or map's items, still encoded.
#[derive(Debug, Clone, Copy)]
struct Compound<'a> {
    count: usize,
    items: &'a [u8],
}

impl<'a> Compound<'a> {
    fn new(count: usize, items: &'a [u8]) -> Result<Self> {
        // Every item takes at least one byte; this bounds loops over `count`.
        if count > items.len() {
            return Err(CodecError::new("compound value claims more items than its size allows"));
        }
        Ok(Self { count, items })
    }

    fn reader(&self) -> Reader<'a> {
        Reader::new(self.items)
    }
}

fn utf8<'a>(bytes: &'a [u8], what: &str) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|_| CodecError::new(format!("{what} is not valid UTF-8")))
}

// ---------------------------------------------------------------------------------------------
// Sections
// ---------------------------------------------------------------------------------------------

/// One message section: `buf[start..value]` is `0x00` + descriptor, `buf[value..end]` the value.
#[derive(Debug, Clone, Copy)]
struct Section {
    code: u8,
    start: usize,
    value: usize,
    end: usize,
    /// Whether the descriptor was the small-ulong form `00 53 code`.
    small: bool,
}

impl Section {
    fn len(&self) -> usize {
        // A normalized section's length (3-byte descriptor).
        3 + self.end - self.value
    }
}

fn is_body(code: u8) -> bool {
    matches!(code, DATA | AMQP_SEQUENCE | AMQP_VALUE)
}

fn section_name(code: u8) -> &'static str {
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

fn section_code_by_name(name: &[u8]) -> Option<u8> {
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
fn split_sections(buf: &[u8]) -> Result<Vec<Section>> {
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
        if let Some(prev) = sections.last() {
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
fn binary_content(value: &[u8]) -> Result<Range<usize>> {
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

// ---------------------------------------------------------------------------------------------
// Section decoders
// ---------------------------------------------------------------------------------------------

struct HeaderFields {
    durable: bool,
    priority: u8,
    ttl: Option<Duration>,
}

fn decode_header(value: &[u8]) -> Result<HeaderFields> {
    let Val::List(list) = Reader::new(value).value()? else {
        return Err(CodecError::new("header is not a list"));
    };
    let mut h = HeaderFields { durable: false, priority: 4, ttl: None };
    let mut r = list.reader();
    for i in 0..list.count {
        let v = r.value()?;
        match (i, v) {
            (_, Val::Null) => {}
            (0, Val::Bool(b)) => h.durable = b,
            (0, _) => return Err(CodecError::new("header.durable is not a boolean")),
            (1, v) => {
                h.priority = v
                    .as_u64()
                    .and_then(|p| u8::try_from(p).ok())
                    .ok_or_else(|| CodecError::new("header.priority is not a ubyte"))?;
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
fn decode_message_annotations(
    value: &[u8],
    properties: &mut MessageProperties,
) -> Result<Option<(usize, Vec<u8>)>> {
    let Val::Map(map) = Reader::new(value).value()? else {
        return Err(CodecError::new("message-annotations is not a map"));
    };
    let mut r = map.reader();
    let mut kept = Vec::new();
    let mut count = 0;
    for _ in 0..map.count / 2 {
        let (key, key_bytes) = r.value_with_bytes()?;
        let (v, value_bytes) = r.value_with_bytes()?;
        match key {
            Val::Symbol(name) | Val::String(name) => {
                let name = utf8(name, "a message-annotation key")?;
                if name == PARTITION_KEY {
                    properties.partition_key = match v {
                        Val::Null => None,
                        Val::String(s) | Val::Symbol(s) => Some(utf8(s, PARTITION_KEY)?.to_owned()),
                        _ => return Err(CodecError::new("x-opt-partition-key is not a string")),
                    };
                } else if name == SCHEDULED_ENQUEUE_TIME {
                    properties.scheduled_enqueue_time = match v {
                        Val::Null => None,
                        v => Some(Timestamp::from_millis(v.as_i64().ok_or_else(|| {
                            CodecError::new("x-opt-scheduled-enqueue-time is not a timestamp")
                        })?)),
                    };
                } else if !BROKER_OWNED.contains(&name) {
                    // Re-encode the key as a symbol (a string key would break rs's decoder).
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
            _ => return Err(CodecError::new("message-annotation key is not a symbol or ulong")),
        }
    }
    Ok((count > 0).then_some((count, kept)))
}

fn decode_properties(value: &[u8], p: &mut MessageProperties) -> Result<()> {
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
fn text(v: Val<'_>, what: &str) -> Result<Option<String>> {
    match v {
        Val::Null => Ok(None),
        Val::String(s) | Val::Symbol(s) => Ok(Some(utf8(s, what)?.to_owned())),
        _ => Err(CodecError::new(format!("{what} is not a string"))),
    }
}

/// A message-id or correlation-id as the core's canonical string (module docs).
fn id_string(v: Val<'_>, what: &str) -> Result<Option<String>> {
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

fn decode_app_properties(value: &[u8]) -> Result<ApplicationProperties> {
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
fn app_property_entries(
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
fn property_value(v: Val<'_>, key: &str) -> Result<Option<PropertyValue>> {
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

// ---------------------------------------------------------------------------------------------
// Raw envelope
// ---------------------------------------------------------------------------------------------

struct RawMessage<'a> {
    durable: bool,
    priority: u8,
    /// `(item count, encoded entries)` of the kept client annotations.
    annotations: Option<(usize, &'a [u8])>,
    bare: &'a [u8],
    sections: Vec<Section>,
}

impl<'a> RawMessage<'a> {
    /// `None` if `raw` is not an envelope this codec wrote (the caller falls back to the core
    /// fields).
    fn parse(raw: &'a [u8]) -> Option<Self> {
        let mut r = Reader::new(raw);
        if r.u8().ok()? != RAW_VERSION {
            return None;
        }
        let flags = r.u8().ok()?;
        let priority = r.u8().ok()?;
        let annotations = if flags & RAW_ANNOTATIONS != 0 {
            match r.value().ok()? {
                Val::Map(m) => Some((m.count, m.items)),
                _ => return None,
            }
        } else {
            None
        };
        let bare = &raw[r.pos..];
        let sections = split_sections(bare).ok()?;
        Some(Self { durable: flags & RAW_DURABLE != 0, priority, annotations, bare, sections })
    }

    fn annotations_len(&self) -> usize {
        self.annotations.map_or(0, |(_, a)| a.len())
    }
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

fn len_u32(n: usize) -> u32 {
    // Payloads are far below 4 GiB (max-message-size); saturate rather than panic.
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn put_variable(out: &mut impl BufMut, code8: u8, code32: u8, bytes: &[u8]) {
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

fn put_symbol(out: &mut impl BufMut, s: &[u8]) {
    put_variable(out, 0xa3, 0xb3, s);
}

fn put_string(out: &mut impl BufMut, s: &[u8]) {
    put_variable(out, 0xa1, 0xb1, s);
}

fn put_binary(out: &mut impl BufMut, b: &[u8]) {
    put_variable(out, 0xa0, 0xb0, b);
}

fn put_long(out: &mut impl BufMut, v: i64) {
    out.put_u8(0x81);
    out.put_i64(v);
}

fn put_int(out: &mut impl BufMut, v: i32) {
    out.put_u8(0x71);
    out.put_i32(v);
}

fn put_timestamp(out: &mut impl BufMut, ms: i64) {
    out.put_u8(0x83);
    out.put_i64(ms);
}

/// A map or list (`code8`/`code32` constructors) of `count` items encoded in `items`.
fn put_compound(out: &mut impl BufMut, code8: u8, code32: u8, count: usize, items: &[u8]) {
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

fn put_map(out: &mut impl BufMut, count: usize, items: &[u8]) {
    put_compound(out, 0xc1, 0xd1, count, items);
}

fn put_described_map(out: &mut impl BufMut, code: u8, count: usize, items: &[u8]) {
    out.put_slice(&[0x00, 0x53, code]);
    put_map(out, count, items);
}

/// A section with a small-ulong descriptor and its value bytes as they were.
/// Writes a properties section whose message-id (absent or null in `list`, the section's
/// encoded list) is `id`, a string; the other fields are copied unchanged.
fn put_properties_with_id(out: &mut BytesMut, list: &[u8], id: &str) -> Result<()> {
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

fn put_section_normalized(out: &mut impl BufMut, buf: &[u8], s: &Section) {
    if s.small {
        out.put_slice(&buf[s.start..s.end]);
    } else {
        out.put_slice(&[0x00, 0x53, s.code]);
        out.put_slice(&buf[s.value..s.end]);
    }
}

/// `00 53 70 [durable, priority, ttl|null, first-acquirer=false, delivery-count]`, all five.
fn put_header(out: &mut impl BufMut, durable: bool, priority: u8, ttl: Option<u32>, count: u32) {
    let size = 1 + 1 + 2 + (if ttl.is_some() { 5 } else { 1 }) + 1 + 5;
    out.put_slice(&[0x00, 0x53, HEADER, 0xc0, size, 0x05]);
    out.put_u8(if durable { 0x41 } else { 0x42 });
    out.put_slice(&[0x50, priority]);
    match ttl {
        Some(ms) => {
            out.put_u8(0x70);
            out.put_u32(ms);
        }
        None => out.put_u8(0x40),
    }
    out.put_u8(0x42);
    out.put_u8(0x70);
    out.put_u32(count);
}

/// The header's ttl: the sender's TTL, capped by the effective one (`expires_at` −
/// `enqueued_time`, which includes the entity's default), in uint milliseconds.
fn header_ttl(received: &ReceivedMessage) -> Option<u32> {
    let ttl = received.message.properties.time_to_live?;
    let mut ms = ttl.as_millis();
    let b = &received.broker;
    if b.expires_at < Timestamp::MAX && b.expires_at > b.enqueued_time {
        ms = ms.min(b.expires_at.saturating_since(b.enqueued_time).as_millis());
    }
    Some(u32::try_from(ms).unwrap_or(u32::MAX))
}

fn put_property_value(out: &mut impl BufMut, v: &PropertyValue) {
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
        PropertyValue::Timestamp(t) => put_timestamp(out, t.as_millis()),
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
fn put_app_properties(out: &mut impl BufMut, map: &ApplicationProperties, original: Option<&[u8]>) {
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

fn put_bare_from_raw(
    out: &mut BytesMut,
    raw: &RawMessage<'_>,
    message: &Message,
    options: DeliveryOptions,
) {
    let modified = message.application_properties_modified;
    let mut replaced = false;
    for s in &raw.sections {
        if s.code < PROPERTIES || (options.omit_body && is_body(s.code)) {
            continue;
        }
        if modified && !replaced && s.code >= APPLICATION_PROPERTIES {
            let original = (s.code == APPLICATION_PROPERTIES).then(|| &raw.bare[s.value..s.end]);
            put_app_properties(out, &message.application_properties, original);
            replaced = true;
            if s.code == APPLICATION_PROPERTIES {
                continue;
            }
        }
        put_section_normalized(out, raw.bare, s);
    }
    if modified && !replaced {
        put_app_properties(out, &message.application_properties, None);
    }
}

fn put_bare_from_core(out: &mut BytesMut, message: &Message, options: DeliveryOptions) {
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

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fe2o3_amqp_types::messaging::annotations::OwnedKey;
    use fe2o3_amqp_types::messaging::message::__private::{Deserializable, Serializable};
    use fe2o3_amqp_types::messaging::{
        AmqpSequence, AmqpValue, ApplicationProperties as FeAppProps, Batch, Body, Data,
        DeliveryAnnotations, Header, Message as FeMessage, MessageAnnotations, MessageId,
        Properties,
    };
    use fe2o3_amqp_types::primitives::{Binary, SimpleValue, Symbol, Value};
    use ironbus_core::{BrokerProperties, LockToken, MessageLock, MessageState, SequenceNumber};
    use serde_amqp::primitives::Timestamp as FeTimestamp;

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
        Body::Data(Batch::new(
            parts.iter().map(|p| Data(Binary::from(p.to_vec()))).collect::<Vec<_>>(),
        ))
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

        // The raw envelope: version, durable flag + annotations flag, priority 7.
        let raw = m.raw.as_ref().unwrap();
        assert_eq!(&raw[..3], &[RAW_VERSION, RAW_DURABLE | RAW_ANNOTATIONS, 7]);
        let parsed = RawMessage::parse(raw).unwrap();
        assert_eq!(parsed.annotations.unwrap().0, 4, "x-opt-via-partition-key and ulong 42");
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
        let two = decode_message(encode_fe(
            &FeMessage::builder().body(data_body(&[b"ab", b"cd"])).build(),
        ))
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
        let m = decode_message(encode_fe(&FeMessage::builder().body(data_body(&[b"x"])).build()))
            .unwrap();
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

            // Header: all five fields, delivery-count 0 written out.
            let header = [
                0x00, 0x53, 0x70, 0xc0, 0x0f, 0x05, 0x41, 0x50, 0x07, 0x70, 0, 0, 0x75, 0x30, 0x42,
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
            assert_eq!(da.0.len(), 1);
            assert_eq!(
                da.0.get(&OwnedKey::Symbol(Symbol::from("x-opt-lock-token"))),
                Some(&Value::Uuid(fe_uuid()))
            );

            let ma = fe.message_annotations.as_ref().unwrap();
            assert_eq!(annotation(ma, "x-opt-sequence-number"), Some(&Value::Long(17)));
            assert_eq!(annotation(ma, "x-opt-enqueue-sequence-number"), Some(&Value::Long(17)));
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
            assert_eq!(
                annotation(ma, "x-opt-via-partition-key"),
                Some(&Value::String("via".into()))
            );
            assert_eq!(ma.0.get(&OwnedKey::Ulong(42)), Some(&Value::Bool(true)));
            assert_eq!(ma.0.len(), 10, "no duplicate keys: {ma:?}");

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
        assert!(fe.delivery_annotations.is_none());
        let ma = fe.message_annotations.unwrap();
        assert!(annotation(&ma, "x-opt-locked-until").is_none());
        assert_eq!(annotation(&ma, "x-opt-sequence-number"), Some(&Value::Long(17)));
    }

    #[test]
    fn header_without_ttl_writes_null() {
        let m = decode_message(encode_fe(&FeMessage::builder().body(data_body(&[b"x"])).build()))
            .unwrap();
        let mut r = received(m, false);
        r.broker.delivery_count = 3;
        let out = encode_delivery(&r, DeliveryOptions::default());
        assert_eq!(
            &out[..16],
            &[0x00, 0x53, 0x70, 0xc0, 0x0b, 0x05, 0x42, 0x50, 0x04, 0x40, 0x42, 0x70, 0, 0, 0, 3]
        );
        let h = decode_fe(&out).header.unwrap();
        assert_eq!((h.ttl, h.delivery_count, h.priority.0), (None, 3, 4));
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
        m.application_properties
            .insert("DeadLetterReason".into(), PropertyValue::String("why".into()));
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
            let expected =
                vec![HEADER, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES, DATA];
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
        assert_eq!(
            app.get("when"),
            Some(&SimpleValue::Timestamp(FeTimestamp::from_milliseconds(9)))
        );
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
        assert_eq!(codes, [HEADER, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES]);
        let out = encode_delivery(
            &received(Message::new("x"), false),
            DeliveryOptions { omit_body: true },
        );
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
        let cases: [(&[u8], &str); 8] = [
            (b"\x01", "expected a message section"),
            (b"\x00\x53\x75\xa0\x05ab", "truncated"),
            (b"\x00\x53\x69\x40", "unknown message section"),
            (b"\x00\x53\x75\x40", "wrong value type"),
            (b"\x00\x53\x77\x40\x00\x53\x73\x45", "properties section after amqp-value"),
            (b"\x00\x53\x77\x40\x00\x53\x77\x40", "amqp-value section after amqp-value"),
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
        let long_form =
            with_descriptors(&encode_fe(&full_client_message(data_body(&[b"x"]))), true);

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
        let prefixes: [&[u8]; 5] = [
            &[],
            &[0x00, 0x53, 0x70],
            &[0x00, 0x53, 0x72],
            &[0x00, 0x53, 0x73],
            &[0x00, 0x53, 0x74],
        ];
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
}
