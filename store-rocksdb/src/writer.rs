//! The writer thread: group commit.
//!
//! **Architecture Invariant:** this thread is the only code that writes to the database. It
//! commits requests in the order they arrived on the channel; each request's operations are one
//! contiguous, in-order run of a group, and a group is one RocksDB write, so each request is
//! applied all-or-nothing and a caller is answered only after its group's write (and, in
//! [`Durability::Sync`], the log sync) has returned.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;

use ironbus_core::store::{BatchOp, StoreError, WriteBatch};
use rocksdb::DB;
use tokio::sync::oneshot;

use crate::error::store_error;
use crate::format::{data_key, data_range};
use crate::options::Durability;

/// A group takes queued requests until it holds this many bytes of keys and values; the first
/// request of a group is taken whatever its size.
const MAX_GROUP_BYTES: usize = 4 << 20;

/// One caller's batch and where to send the outcome.
pub(crate) struct Request {
    pub(crate) batch: WriteBatch,
    pub(crate) reply: oneshot::Sender<Result<(), StoreError>>,
}

/// State the writer shares with the store.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) healthy: AtomicBool,
    /// RocksDB writes (groups) done, failed ones included.
    pub(crate) commits: AtomicU64,
    /// Caller batches carried by those writes.
    pub(crate) batches: AtomicU64,
    /// Makes the next group fail as if RocksDB had returned an I/O error.
    #[cfg(test)]
    pub(crate) fail_next_commit: AtomicBool,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Self {
            healthy: AtomicBool::new(true),
            commits: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            #[cfg(test)]
            fail_next_commit: AtomicBool::new(false),
        }
    }
}

/// Appends `batch` to `group`, every key under the data tag. Empty ranges are dropped (they
/// remove nothing, and RocksDB must not see an inverted range).
fn append(group: &mut rocksdb::WriteBatch, batch: &WriteBatch) {
    for op in batch.ops() {
        match op {
            BatchOp::Put { key, value } => group.put(data_key(key), value),
            BatchOp::Delete { key } => group.delete(data_key(key)),
            BatchOp::DeleteRange { start, end } => {
                if let Some((start, end)) = data_range(start, end) {
                    group.delete_range(start, end);
                }
            }
        }
    }
}

/// Runs until every sender is gone: commits queued requests in groups, one write each.
pub(crate) fn run(
    db: Arc<DB>,
    requests: Receiver<Request>,
    shared: Arc<Shared>,
    durability: Durability,
) {
    let mut write_options = rocksdb::WriteOptions::default();
    write_options.set_sync(durability == Durability::Sync);
    write_options.disable_wal(false);
    // A request that did not fit in the previous group opens the next one.
    let mut carried: Option<Request> = None;
    loop {
        let first = match carried.take() {
            Some(request) => request,
            None => match requests.recv() {
                Ok(request) => request,
                Err(_) => break,
            },
        };
        let mut bytes = first.batch.bytes();
        let mut group = vec![first];
        while bytes < MAX_GROUP_BYTES {
            match requests.try_recv() {
                Ok(request) => {
                    let size = request.batch.bytes();
                    if bytes + size > MAX_GROUP_BYTES {
                        carried = Some(request);
                        break;
                    }
                    bytes += size;
                    group.push(request);
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let result = commit(&db, &group, &write_options, &shared);
        for request in group {
            // A caller that stopped waiting (its future was dropped) needs no answer.
            let _ = request.reply.send(result.clone());
        }
    }
    if durability == Durability::Relaxed {
        // A clean close leaves nothing unsynced.
        if let Err(e) = db.flush_wal(true) {
            tracing::warn!(error = %e, "rocksdb: syncing the write-ahead log on close failed");
        }
    }
}

/// Writes one group as one RocksDB write batch and records the outcome in `shared`.
fn commit(
    db: &DB,
    group: &[Request],
    write_options: &rocksdb::WriteOptions,
    shared: &Shared,
) -> Result<(), StoreError> {
    let mut merged = rocksdb::WriteBatch::default();
    for request in group {
        append(&mut merged, &request.batch);
    }
    #[cfg(test)]
    let result = if shared.fail_next_commit.swap(false, Ordering::Relaxed) {
        Err(StoreError::unavailable("write: injected I/O error"))
    } else {
        db.write_opt(merged, write_options).map_err(|e| store_error("write", e))
    };
    #[cfg(not(test))]
    let result = db.write_opt(merged, write_options).map_err(|e| store_error("write", e));
    shared.commits.fetch_add(1, Ordering::Relaxed);
    shared.batches.fetch_add(group.len() as u64, Ordering::Relaxed);
    match &result {
        Ok(()) => shared.healthy.store(true, Ordering::Release),
        Err(e) => {
            tracing::warn!(error = %e, batches = group.len(), "rocksdb: group commit failed");
            shared.healthy.store(false, Ordering::Release);
        }
    }
    result
}
