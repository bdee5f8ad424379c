//! The message body: a 16-byte header — send time (nanoseconds since the Unix epoch, u64 big
//! endian) then the run id (u64 big endian) — followed by filler up to the requested size.
//!
//! Wall-clock time (not a process-local `Instant`) so that a message left in the queue by an
//! earlier run still reads as old; the run id lets consumers tell such leftovers from this run's
//! messages, drain them, and keep them out of the figures.

use std::time::{SystemTime, UNIX_EPOCH};

/// Bytes at the start of every body that carry the send time and the run id.
pub(crate) const HEADER_LEN: usize = 16;

/// Nanoseconds since the Unix epoch, now.
pub(crate) fn now_nanos() -> u64 {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since_epoch.as_nanos()).unwrap_or(u64::MAX)
}

/// A fresh body of `size` bytes (at least [`HEADER_LEN`]) stamped with `sent_at` and `run_id`.
pub(crate) fn body(size: usize, sent_at: u64, run_id: u64) -> Vec<u8> {
    let mut body = vec![0xAB; size.max(HEADER_LEN)];
    body[..8].copy_from_slice(&sent_at.to_be_bytes());
    body[8..16].copy_from_slice(&run_id.to_be_bytes());
    body
}

/// What a received body says: when it was sent and by which run; `None` if it is too short to be
/// one of ours.
pub(crate) fn read(body: &[u8]) -> Option<Stamp> {
    let sent_at = u64::from_be_bytes(body.get(..8)?.try_into().ok()?);
    let run_id = u64::from_be_bytes(body.get(8..16)?.try_into().ok()?);
    Some(Stamp { sent_at, run_id })
}

/// The header of a received body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// Nanoseconds since the Unix epoch when the producer built the message.
    pub sent_at: u64,
    /// The run that sent it.
    pub run_id: u64,
}

/// An id for this run, different from earlier runs' (time and process id mixed).
pub(crate) fn new_run_id() -> u64 {
    let mixed = now_nanos() ^ (u64::from(std::process::id()) << 40);
    // splitmix64's finaliser, so that consecutive runs differ in every byte
    let mut z = mixed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_round_trips_its_stamp() {
        let body = body(1024, 1_700_000_000_123_456_789, 42);
        assert_eq!(body.len(), 1024);
        assert_eq!(read(&body), Some(Stamp { sent_at: 1_700_000_000_123_456_789, run_id: 42 }));
    }

    #[test]
    fn body_is_never_shorter_than_its_header() {
        assert_eq!(body(3, 1, 2).len(), HEADER_LEN);
    }

    #[test]
    fn short_body_has_no_stamp() {
        assert_eq!(read(&[0; 15]), None);
    }
}
