//! How keys sit in the RocksDB keyspace.
//!
//! **Architecture Invariant:** every key the core writes is stored as `DATA_TAG ‖ key`; nothing
//! else lives under `DATA_TAG`. Tags below it are reserved for the store's own records (none
//! yet). Because the data keyspace is exactly `[DATA_TAG, DATA_END)`, a range with no upper
//! bound (an empty `end`) still has one RocksDB can use: `DATA_END`. Changing this layout makes
//! existing databases unreadable.

use std::ops::Bound;

use ironbus_core::store::range_bounds;

/// The first byte of every stored data key.
pub(crate) const DATA_TAG: u8 = 0x01;
/// The smallest RocksDB key past every data key.
pub(crate) const DATA_END: [u8; 1] = [DATA_TAG + 1];

/// The RocksDB key for the core's `key`.
pub(crate) fn data_key(key: &[u8]) -> Vec<u8> {
    let mut stored = Vec::with_capacity(key.len() + 1);
    data_key_in(&mut stored, key);
    stored
}

/// The RocksDB key for the core's `key`, written into `buffer` (replacing what it held): one
/// buffer serves every key of a group write.
pub(crate) fn data_key_in<'a>(buffer: &'a mut Vec<u8>, key: &[u8]) -> &'a [u8] {
    buffer.clear();
    buffer.push(DATA_TAG);
    buffer.extend_from_slice(key);
    buffer
}

/// The RocksDB bounds `[start, end)` of the core's range `[start, end)`, as
/// [`range_bounds`] reads it (an empty `end` means no upper bound, here `DATA_END`); `None` when
/// the range is empty.
pub(crate) fn data_range(start: &[u8], end: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let end = match range_bounds(start, end)?.1 {
        Bound::Excluded(end) => data_key(end),
        Bound::Included(_) | Bound::Unbounded => DATA_END.to_vec(),
    };
    Some((data_key(start), end))
}

/// The core's key for a stored data key, or `None` for a key outside the data keyspace.
pub(crate) fn user_key(stored: &[u8]) -> Option<&[u8]> {
    match stored.split_first() {
        Some((&DATA_TAG, key)) => Some(key),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_keys_order_like_user_keys_and_stay_below_data_end() {
        let keys: [&[u8]; 5] = [b"", b"\x00", b"a", b"\xff", b"\xff\xff\xff"];
        for pair in keys.windows(2) {
            assert!(data_key(pair[0]) < data_key(pair[1]));
        }
        for k in keys {
            assert!(data_key(k).as_slice() < &DATA_END[..]);
            assert_eq!(user_key(&data_key(k)), Some(k));
        }
        assert_eq!(user_key(&DATA_END), None);
        assert_eq!(user_key(b""), None);
    }

    #[test]
    fn data_range_maps_empty_end_to_data_end_and_drops_empty_ranges() {
        assert_eq!(data_range(b"m", b""), Some((b"\x01m".to_vec(), b"\x02".to_vec())));
        assert_eq!(data_range(b"a", b"b"), Some((b"\x01a".to_vec(), b"\x01b".to_vec())));
        assert_eq!(data_range(b"b", b"b"), None);
        assert_eq!(data_range(b"c", b"a"), None);
    }
}
