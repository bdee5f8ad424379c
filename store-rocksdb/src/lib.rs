//! ironbus-store-rocksdb: a [`Store`](ironbus_core::store::Store) on RocksDB, the broker's
//! durable default.
//!
//! [`RocksStore`] keeps every key in one RocksDB database (one column family) in a directory of
//! its own. Reads go straight to RocksDB; every write goes through one writer thread that
//! commits concurrent batches together (group commit).
//!
//! # Durability
//!
//! With [`Durability::Sync`] (the default) a [`Store::write`] returns `Ok` only after its batch
//! is in RocksDB's write-ahead log **and the log has been synced** (`fsync`/`fdatasync`): an
//! acknowledged write survives a crash of the process, of the operating system and a power
//! loss. On open, RocksDB replays the log (point-in-time recovery), so a torn tail left by a
//! crash is cut at the last whole batch and never surfaces half a batch.
//!
//! [`Durability::Relaxed`] writes every batch to the log too, but does not sync it per write.
//! An acknowledged write then survives the process being killed (the log is in the operating
//! system's page cache), but **the last writes before an operating-system crash or a power loss
//! may be lost** (never half a batch, never older data). A clean close syncs the log, so data
//! survives a clean shutdown followed by a power loss. It is never the default: choose it only
//! where losing the last moments of acknowledged messages is acceptable.
//!
//! # Group commit
//!
//! A sync costs about as much for one batch as for a thousand, so the store does not sync per
//! caller. [`Store::write`] hands its batch to a dedicated writer thread over a channel and
//! waits for the reply. The writer takes the first queued request, then everything else queued
//! behind it (up to a few MiB), appends the batches in arrival order to one RocksDB write batch,
//! writes it with one sync, and replies to every caller in the group. While a sync is under way
//! the next group queues up, so the more partitions write at once, the more batches share each
//! sync. Each caller's batch stays atomic and in order: it is one contiguous part of a group
//! that RocksDB applies all-or-nothing. If the group's write fails, every caller in it gets the
//! error and none of its operations is visible. [`RocksStore::commit_stats`] counts groups and
//! batches.
//!
//! # Guards
//!
//! A guarded batch ([`WriteBatch::require`](ironbus_core::store::WriteBatch::require)) is
//! checked by the writer thread, the only writer, just before its group's write: against the
//! database and against the requests accepted before it in the same group, which the database
//! does not hold yet (their puts, deletes and range deletions are kept in an overlay). A request
//! whose guard does not hold is answered with
//! [`StoreErrorKind::Conflict`](ironbus_core::store::StoreErrorKind::Conflict) and left out of
//! the write; the rest of the group commits without it (a later guard does not see its
//! operations). A group with no guarded request pays nothing for this: no read, no overlay.
//! The store has no write limits ([`Store::limits`] is unlimited).
//!
//! # Reads, ranges and health
//!
//! A write is visible to reads once it has returned `Ok` (read-your-writes); a scan reads one
//! RocksDB iterator, an implicit snapshot, so it never sees half a batch. Point reads run on the
//! calling task; scans run on Tokio's blocking pool so that long scans do not stall the async
//! runtime.
//!
//! A [`BatchOp::DeleteRange`](ironbus_core::store::BatchOp::DeleteRange) becomes a RocksDB range
//! deletion (one tombstone, whose keys compaction later drops, returning the space of settled
//! messages). To give an empty `end` ("no upper bound") a real upper bound, every key is stored
//! under a one-byte tag: the data keyspace ends where the next tag begins.
//!
//! I/O errors, and RocksDB's busy, timed-out and shutting-down errors, map to
//! [`StoreErrorKind::Unavailable`](ironbus_core::store::StoreErrorKind::Unavailable) (retriable);
//! corruption to `Corrupted`. After a failed write [`Store::health`] reports `Unavailable` until
//! a later write succeeds.
//!
//! # The write-ahead log's cost
//!
//! WAL files are recycled: a synced append then overwrites blocks the file already has, with no
//! file-system metadata to commit. On x86-64 RocksDB is compiled for the CPU's CRC32C
//! instructions (the root `.cargo/config.toml`), with which every WAL record is checksummed.
//!
//! # Several stores
//!
//! The server can spread partitions over several stores (`--stores N`), each its own directory
//! and WAL, so one failing disk makes only its partitions unavailable. The trade-off: more
//! stores mean more syncs per second for the same load (groups are per store, so each is
//! smaller) and more memory (memtables and block cache per store); one store is the default.
//!
//! # Tests and benchmarks
//!
//! `tests/conformance.rs` runs the core's whole conformance suite, durability and guard cases
//! included;
//! `benches/backlog.rs` (`cargo xtask bench backlog`) measures RAM per queued message, recovery
//! time and drain rate with a million messages.
//!
//! **Architecture Invariant:** a write is acknowledged only after the WAL holding it is synced
//! (in `Sync` mode); a group's batches are applied all-or-nothing each, in arrival order, and a
//! batch's guards are checked by the writer against the database and the batches accepted
//! before it in its group. This
//! crate depends on no workspace crate but `ironbus-core`; only the server depends on it.
//!
//! [`Store::write`]: ironbus_core::store::Store::write
//! [`Store::health`]: ironbus_core::store::Store::health
//! [`Store::limits`]: ironbus_core::store::Store::limits

mod error;
mod format;
mod guards;
mod options;
mod store;
mod writer;

pub use options::{Durability, RocksOptions};
pub use store::{CommitStats, RocksStore};
