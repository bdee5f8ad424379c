//! Record encodings: how entities and messages are laid out as store values.
//!
//! **Architecture Invariant:** every record starts with a version byte, and a decoder keeps
//! reading every version it ever wrote, so data written today is readable tomorrow. A change to a
//! layout adds a version; it never edits one.
//!
//! - `entity`: entity records (queues, topics, subscriptions, rules).
//! - `message`: a message's body and meta records.
//! - `bookkeeping`: a partition's counter, duplicate-detection entries, session states and
//!   transfer records.
//! - `properties`: typed values and system properties, shared by the records above.
//! - `link`: the cluster link's requests and replies (not stored: sent between nodes).
//! - `primitives`: the bounds-checked reader and the writer every record is built with.
//!
//! Every decoder reads untrusted bytes (a store can be damaged): a truncated record or a length
//! or count larger than what remains is [`Corrupted`](crate::StoreErrorKind::Corrupted), never a
//! panic or a large allocation.

mod bookkeeping;
mod entity;
pub(crate) mod link;
mod message;
mod primitives;
mod properties;
#[cfg(test)]
mod tests;

pub(crate) use bookkeeping::{
    decode_dedup, decode_partition, decode_partition_record, decode_session_state,
    decode_transfer_record, encode_dedup, encode_partition, encode_partition_record,
    encode_session_state, encode_transfer_record,
};
pub(crate) use entity::{decode_entity, encode_entity, EntityRecord};
pub(crate) use message::{decode_body, decode_meta, encode_body, encode_meta, MessageMeta};

/// The first version of every record layout.
const V1: u8 = 1;
/// The second: a partition's record with its main queue's floor.
const V2: u8 = 2;
