//! The small records a partition keeps beside its messages: its sequence counter, duplicate
//! detection entries, session states and the transfer records of send-via destinations.
//!
//! Invariants: each starts with its version byte like every record, and each decoder refuses a
//! version it does not know rather than guess.

use bytes::Bytes;

use super::primitives::{DecodeResult, Reader, Writer};
use super::{V1, V2};
use crate::types::Timestamp;

/// The version of the counter records (the namespace's, and a partition's as created); a
/// message partition writes its record as [`PARTITION_RECORD_VERSION`].
const PARTITION_VERSION: u8 = V1;
const PARTITION_RECORD_VERSION: u8 = V2;
const SESSION_VERSION: u8 = V1;
const DEDUP_VERSION: u8 = V1;
const TRANSFER_RECORD_VERSION: u8 = V1;

/// A session's state record: when it was last set, and the state (never empty: a cleared
/// state has no record).
pub(crate) fn encode_session_state(updated_at: Timestamp, state: &[u8]) -> Bytes {
    let mut w = Writer::versioned(SESSION_VERSION, 12 + state.len());
    w.i64(updated_at.as_millis());
    w.bytes(state);
    w.finish()
}

pub(crate) fn decode_session_state(value: &[u8]) -> DecodeResult<(Timestamp, Bytes)> {
    let (mut r, version) = Reader::versioned(value, "session state record")?;
    match version {
        V1 => Ok((Timestamp::from_millis(r.i64()?), r.bytes()?)),
        v => Err(r.unknown_version(v)),
    }
}

/// A counter record (version 1): a partition's own record as created, the last sequence
/// counter it issued; also the namespace's counters (next entity id, store count, version).
pub(crate) fn encode_partition(last_counter: u64) -> Bytes {
    let mut w = Writer::versioned(PARTITION_VERSION, 8);
    w.u64(last_counter);
    w.finish()
}

pub(crate) fn decode_partition(value: &[u8]) -> DecodeResult<u64> {
    let (mut r, version) = Reader::versioned(value, "partition record")?;
    match version {
        V1 => r.u64(),
        v => Err(r.unknown_version(v)),
    }
}

/// A message partition's own record from version 2 on: the last sequence counter it issued and
/// its main queue's floor (no main-queue message below it is live; see `partition/journal.rs`).
pub(crate) fn encode_partition_record(last_counter: u64, main_floor: u64) -> Bytes {
    let mut w = Writer::versioned(PARTITION_RECORD_VERSION, 16);
    w.u64(last_counter);
    w.u64(main_floor);
    w.finish()
}

/// A message partition's record, either version: the last sequence counter and the main
/// queue's floor (0, every record live, in version 1, which had none).
pub(crate) fn decode_partition_record(value: &[u8]) -> DecodeResult<(u64, u64)> {
    let (mut r, version) = Reader::versioned(value, "partition record")?;
    match version {
        V1 => Ok((r.u64()?, 0)),
        V2 => Ok((r.u64()?, r.u64()?)),
        v => Err(r.unknown_version(v)),
    }
}

/// A duplicate-detection entry: until when the id counts as seen.
pub(crate) fn encode_dedup(until: Timestamp) -> Bytes {
    let mut w = Writer::versioned(DEDUP_VERSION, 8);
    w.i64(until.as_millis());
    w.finish()
}

pub(crate) fn decode_dedup(value: &[u8]) -> DecodeResult<Timestamp> {
    let (mut r, version) = Reader::versioned(value, "dedup entry")?;
    match version {
        V1 => Ok(Timestamp::from_millis(r.i64()?)),
        v => Err(r.unknown_version(v)),
    }
}

/// A destination's record of a transfer it stored: the key says everything, the value is
/// its version.
pub(crate) fn encode_transfer_record() -> Bytes {
    Writer::versioned(TRANSFER_RECORD_VERSION, 0).finish()
}

pub(crate) fn decode_transfer_record(value: &[u8]) -> DecodeResult<()> {
    let (r, version) = Reader::versioned(value, "transfer record")?;
    match version {
        V1 => Ok(()),
        v => Err(r.unknown_version(v)),
    }
}
