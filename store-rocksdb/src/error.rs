//! RocksDB errors as [`StoreError`]s.

use ironbus_core::store::{StoreError, StoreErrorKind};
use rocksdb::ErrorKind;

/// Maps a RocksDB error to the kind a caller can branch on: trouble that may pass (I/O, busy,
/// timeouts, shutdown) is `Unavailable`, damage is `Corrupted`.
pub(crate) fn store_error(context: &str, e: rocksdb::Error) -> StoreError {
    let kind = match e.kind() {
        ErrorKind::IOError
        | ErrorKind::Busy
        | ErrorKind::TimedOut
        | ErrorKind::TryAgain
        | ErrorKind::Incomplete
        | ErrorKind::ShutdownInProgress
        | ErrorKind::Aborted
        | ErrorKind::Expired => StoreErrorKind::Unavailable,
        ErrorKind::Corruption => StoreErrorKind::Corrupted,
        ErrorKind::InvalidArgument => StoreErrorKind::InvalidInput,
        _ => StoreErrorKind::Other,
    };
    StoreError::new(kind, format!("{context}: {e}")).caused_by(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_are_retriable_and_corruption_is_not() {
        // RocksDB reports a directory it cannot lock as an I/O error.
        let dir = ironbus_core::testing::TempDir::new("rocks-error");
        let _held = rocksdb::DB::open_default(dir.path()).unwrap();
        let err = rocksdb::DB::open_default(dir.path()).expect_err("locked by the first open");
        assert_eq!(err.kind(), ErrorKind::IOError);
        let err = store_error("open", err);
        assert_eq!(err.kind, StoreErrorKind::Unavailable);
        assert!(err.is_retriable());
        assert!(err.message.starts_with("open: "), "{err}");
        let source = std::error::Error::source(&err).expect("RocksDB's error is the source");
        assert!(source.is::<rocksdb::Error>(), "{source}");
    }
}
