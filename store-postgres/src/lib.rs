//! ironbus-store-postgres: a [`Store`](ironbus_core::store::Store) on PostgreSQL, so that the
//! broker's partitions live in a database operators already run with high availability
//! (CLUSTER.md §1).
//!
//! [`PostgresStore`] keeps every key of one store in one table, `key bytea primary key, value
//! bytea not null` (the name is an option, so several stores share one database: the server's
//! `--stores N` makes tables `ironbus_store_0` to `ironbus_store_{N-1}`). It talks to the server
//! with `tokio-postgres`, without TLS, through a small pool of connections opened on demand.
//!
//! # Reads and writes
//!
//! - [`Store::get`] and [`Store::scan`] are one `SELECT` each: one snapshot, so a scan never
//!   sees half a batch. PostgreSQL compares `bytea` bytewise (unsigned, a prefix first), which
//!   is the store's key order: `ORDER BY key` on the primary-key index.
//! - [`Store::write`] is one transaction (`READ COMMITTED`): first the guards, then every range
//!   delete (`DELETE … WHERE key >= $1 AND key < $2`, no upper bound for an empty end), one
//!   `DELETE … WHERE key = ANY($1)` of the keys whose last operation is a delete, and one
//!   multi-row upsert (`INSERT … SELECT * FROM unnest($1, $2) ON CONFLICT (key) DO UPDATE`) of
//!   the keys whose last operation is a put, each key once with its last value. That is the
//!   batch's effect in its own order (`plan.rs` says why, and a property test checks it), in
//!   at most three statements plus one per range.
//! - Every statement is prepared with parameters; the table name, the one identifier, is
//!   checked (lowercase letters, digits, `_`) and quoted.
//!
//! # Guards
//!
//! A guard expecting a value reads its row with `SELECT … FOR UPDATE`: the row stays locked
//! until the transaction ends, so no writer changes it in between. A guard expecting the key
//! **absent** has no row to lock; it inserts a placeholder row instead (`INSERT … ON CONFLICT
//! DO NOTHING RETURNING key`): it gets the row only if the key was absent, and the primary key
//! then makes every concurrent writer of that key, guarded or not, wait for this transaction
//! (and this one wait for a concurrent uncommitted insert, then see it). The batch removes the
//! placeholder again unless it puts the key; no other transaction ever sees it. So guards are
//! exact (no hash collisions, unlike an advisory lock on a hash of the key, which would also
//! serialise only guarded writers), and the isolation level stays `READ COMMITTED` (no
//! `SERIALIZABLE` predicate locks, whose false conflicts would make concurrent partitions
//! retry each other's writes). Guard keys are locked in key order, each key once.
//!
//! # Opening after a crash
//!
//! A writer killed while its `COMMIT` was under way leaves that commit landing a moment later,
//! and a store opened meanwhile would read the table without it: a partition rebuilt from that
//! read reuses sequence numbers the late commit takes, and one message's body overwrites
//! another's. So [`PostgresStore::connect`] first waits for every transaction writing the table
//! to end (`LOCK TABLE … IN SHARE MODE`, which each writer's `ROW EXCLUSIVE` lock holds off
//! until its commit or rollback is complete, released at once), reporting the writers'
//! backends every 5 s while it waits. A cluster, whose partitions fence their writes (a new
//! owner's claim waits on the old owner's row lock), turns this off
//! ([`PostgresOptions::wait_for_writers`]).
//!
//! # Durability
//!
//! A write returns `Ok` once PostgreSQL acknowledged its `COMMIT`, with `synchronous_commit` as
//! the server has it: on (the default), the commit record is flushed to the server's disk (and,
//! with synchronous standbys, to them) first. The store warns when the server has it off.
//!
//! # Failures (CLUSTER.md §1)
//!
//! | PostgreSQL answered | the store |
//! |---|---|
//! | connection refused, reset or closed; the server shutting down or starting (classes 08, 57), out of resources (53), a system error (58) | drops the connection and retries on a new one at once (the connection string's hosts in turn: with `target_session_attrs=read-write` a promoted standby is found); `Unavailable` after `retry_for` (5 s) |
//! | connection lost during `COMMIT` (the outcome unknown) | runs the same batch again: a batch holds fixed puts and deletes and, under the partition's fence, only its owner writes those keys, so applying it twice is applying it once; `Unavailable` after `retry_for`, and `Unavailable` (not `Conflict`) when a guard fails on the re-run, since the first attempt may have moved it |
//! | serialization failure, deadlock (40001, 40P01) | runs the transaction again |
//! | read-only (25006: a standby) | retries on a new connection; then `Unavailable`, and [`Store::health`] reports `Unavailable` until a write succeeds |
//! | disk full (53100) | `Unavailable` at once; health as above |
//! | a guard did not hold | `Conflict`, nothing applied |
//! | a key over the index's row limit (about 2.7 KB), bad data (classes 54, 22) | `InvalidInput` |
//! | anything else (a wrong password, no such database or table) | `Other` |
//!
//! An attempt (connecting, or one whole transaction) taking longer than `attempt_timeout`
//! (30 s) is abandoned and its connection closed; an abandoned write counts as an unknown
//! outcome.
//!
//! A write whose outcome is unknown may still commit: its backend may be waiting on a slow
//! disk or a synchronous standby, its connection closed or not. So the store remembers that
//! backend (pid and start time), and its next call of any kind first terminates it
//! (`pg_terminate_backend`: a commit under way finishes, anything else rolls back) and waits
//! until it is gone. What a caller reads after a failed write (a partition rebuilding) then
//! shows that write's fate for good.
//!
//! # Limits
//!
//! [`Store::limits`] is finite ([`DEFAULT_LIMITS`]: 10,000 operations and guards, 64 MiB); a
//! larger batch is refused with `InvalidInput` before anything is sent.
//!
//! # Tests
//!
//! `tests/conformance.rs` runs the core's whole conformance suite, durability cases included
//! ("reopen" is a new store on the same table), against a real PostgreSQL that the tests start
//! themselves ([`testing`], feature `testing`: Debian's `postgresql` package, run as an
//! unprivileged user in a temporary directory); without it installed they fail and say how to
//! install it. `tests/postgres_store.rs` adds what the suite cannot show: concurrent
//! create-only guards, limits, a server that goes away and comes back, a commit that hangs,
//! a store opened beside a transaction that writes its table.
//!
//! **Architecture Invariant:** a write is acknowledged only after PostgreSQL acknowledged its
//! transaction's `COMMIT`; a batch is one transaction, its guards checked inside it under row
//! locks; no call starts while the backend of a write whose outcome is unknown still runs. This crate depends on no workspace crate but `ironbus-core`; only the server (and
//! later the cluster) names it.
//!
//! [`Store::get`]: ironbus_core::store::Store::get
//! [`Store::scan`]: ironbus_core::store::Store::scan
//! [`Store::write`]: ironbus_core::store::Store::write
//! [`Store::health`]: ironbus_core::store::Store::health
//! [`Store::limits`]: ironbus_core::store::Store::limits

mod error;
mod options;
mod plan;
mod pool;
mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use crate::options::{PostgresOptions, DEFAULT_LIMITS};
pub use crate::store::PostgresStore;
