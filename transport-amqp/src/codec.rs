//! Message codec: AMQP 1.0 transfer payloads to core [`Message`](ironbus_core::Message)s and back. Pure functions, no I/O.
//!
//! # Decoding (client → broker)
//!
//! [`decode_message`] walks the sections of a complete (reassembled) message-format-0 payload
//! with a byte-level skipper (constructor width classes plus the described `0x00` prefix) and
//! decodes only what the core needs:
//!
//! * header: `ttl` → `time_to_live`; `durable` and `priority` go into the raw envelope (with
//!   whether the client gave them: deliveries echo them, or null, as Service Bus does); the
//!   client's `first-acquirer` and `delivery-count` are discarded (the broker writes its own).
//! * delivery-annotations: kept in the raw envelope and handed to every receiver, as Service Bus
//!   does, except the broker's own `x-opt-lock-token` (a received message sent again carries its
//!   old lock's token; each delivery writes its own). The section may come anywhere in the
//!   message, once: the python SDK writes it last, after the body and footer.
//! * message-annotations: `x-opt-partition-key` → `partition_key`, `x-opt-scheduled-enqueue-time`
//!   → `scheduled_enqueue_time` (both are re-added from the core fields on delivery); the
//!   broker-owned keys (amqp.md §4.1) are dropped; every other annotation is kept in the raw
//!   envelope and re-sent on delivery.
//! * properties: see the canonical-id rule below; `group-id` → `session_id`, `reply-to-group-id`
//!   → `reply_to_session_id`, `to`, `subject`, `reply-to`, `content-type` as strings.
//! * application-properties: string (or symbol) keys; every value type [`PropertyValue`](ironbus_core::PropertyValue) can
//!   represent is decoded into `application_properties`. Values it cannot represent (symbol,
//!   decimal, list, map, array, described) are *omitted from the core map* but stay in the raw
//!   bare message, and survive a re-encode of the section (see below). Decimals are the one
//!   change: the section is rewritten with each decimal as Service Bus writes it back
//!   (`decimal.rs`), and a decimal no .NET decimal can hold refuses the send.
//! * footer: kept in the bare message where the client put it. It may come anywhere, once: rhea
//!   (the js SDK's AMQP library) writes it before the body.
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
//! offset 1  flags      u8  bit 0: header.durable; bit 1: a client message-annotations map
//!                          follows; bit 2: a client delivery-annotations map follows;
//!                          bit 3: the client gave header.durable; bit 4: it gave
//!                          header.priority (envelopes written before bits 3 and 4 existed:
//!                          a durable or priority other than the default counts as given)
//! offset 2  priority   u8  header.priority (4 when the client gave none)
//! [flags bit 1]        the kept client message-annotations as one encoded AMQP map (map8 or
//!                      map32 constructor, symbol or ulong keys, values byte for byte as received)
//! [flags bit 2]        the kept client delivery-annotations, encoded the same way
//! rest                 the bare message: every section from properties through footer, byte for
//!                      byte as received, except that a section whose descriptor was not
//!                      small-ulong (`0x80` ulong or symbolic) is rewritten as `00 53 <code>` +
//!                      its value bytes unchanged (amqp.md §0.1)
//! ```
//!
//! # Encoding (broker → client)
//!
//! [`encode_delivery`] builds a transfer payload (also used inside management responses): a
//! hand-encoded header with all five fields, delivery-annotations (always, as Service Bus sends
//! them: `x-opt-lock-token` when locked, then the sender's; an empty map otherwise),
//! message-annotations (client + broker-owned, symbol keys, with Service Bus's shape:
//! `x-opt-locked-until` only when locked, `x-opt-message-state` only for a deferred or scheduled
//! message, `x-opt-enqueue-sequence-number` only when it differs from the sequence number, i.e.
//! on a forwarded message), then the bare message from
//! `raw` (with the application-properties section re-encoded from the core map when
//! `application_properties_modified`), or encoded from the core fields when there is no raw.
//! **Architecture Invariant:** every descriptor written is small-ulong (`00 53 code`); the
//! Python SDK parses nothing else.
//!
//! # Files
//!
//! `read.rs` the byte-level reader; `sections.rs` splitting a message into sections and the
//! decoders of each; `decode.rs` transfer payloads to core messages; `encode.rs` deliveries
//! and the value writers; `decimal.rs` decimal application properties in Service Bus's layout.

mod decimal;
mod decode;
mod encode;
mod read;
mod sections;
#[cfg(test)]
mod tests;

use uuid::Uuid;

pub use decode::{decode_batch, decode_message, decode_transfer};
pub use encode::encode_delivery;
pub(crate) use sections::split_sections;

/// The message format of a Service Bus batch transfer (amqp.md §11.1).
pub const BATCH_MESSAGE_FORMAT: u32 = 0x8001_3700;

const HEADER: u8 = 0x70;
const DELIVERY_ANNOTATIONS: u8 = 0x71;
const MESSAGE_ANNOTATIONS: u8 = 0x72;
pub(crate) const PROPERTIES: u8 = 0x73;
pub(crate) const APPLICATION_PROPERTIES: u8 = 0x74;
const DATA: u8 = 0x75;
const AMQP_SEQUENCE: u8 = 0x76;
pub(crate) const AMQP_VALUE: u8 = 0x77;
const FOOTER: u8 = 0x78;

const RAW_VERSION: u8 = 1;
const RAW_DURABLE: u8 = 0x01;
const RAW_ANNOTATIONS: u8 = 0x02;
const RAW_DELIVERY_ANNOTATIONS: u8 = 0x04;
const RAW_DURABLE_SET: u8 = 0x08;
const RAW_PRIORITY_SET: u8 = 0x10;
/// header.priority when a sender gives none.
const DEFAULT_PRIORITY: u8 = 4;

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
