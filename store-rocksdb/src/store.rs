//! [`RocksStore`]: the [`Store`] trait on a RocksDB database.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use async_trait::async_trait;
use bytes::Bytes;
use ironbus_core::store::{KeyValue, Store, StoreError, StoreErrorKind, StoreHealth, WriteBatch};
use rocksdb::DB;
use tokio::sync::oneshot;

use crate::error::store_error;
use crate::format::{data_key, data_range, user_key};
use crate::options::RocksOptions;
use crate::writer::{self, Request, Shared};

/// A durable [`Store`] on RocksDB. Share it as `Arc<RocksStore>`.
///
/// Dropping the last reference blocks until the writer has committed what is queued (at most
/// one group's sync), then closes the database; the directory can be opened again at once.
pub struct RocksStore {
    db: Arc<DB>,
    /// `None` only while dropping, so that the writer sees the channel close.
    requests: Option<Sender<Request>>,
    writer: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    path: PathBuf,
    options: RocksOptions,
}

/// How many writes the store has made and how many callers' batches they carried, since open.
///
/// `batches / commits` is the mean group size: with many concurrent writers it grows, and
/// each commit costs one log sync (in [`Durability::Sync`](crate::Durability::Sync)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitStats {
    /// RocksDB writes (one sync each in `Durability::Sync`), failed ones included.
    pub commits: u64,
    /// Caller batches carried by those writes (a guarded batch refused with `Conflict` is not
    /// carried).
    pub batches: u64,
}

impl RocksStore {
    /// Opens (creating it and its parent directories if missing) the database in directory
    /// `path` and starts its writer thread.
    ///
    /// # Behavior
    /// Blocks while RocksDB replays its write-ahead log; call it from a blocking context (or
    /// `spawn_blocking`) when that may take long. A directory is used by one store at a time:
    /// opening it again before the previous store is dropped fails with `Unavailable`.
    pub fn open(path: impl AsRef<Path>, options: RocksOptions) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        std::fs::create_dir_all(&path).map_err(|e| {
            StoreError::unavailable(format!("create directory {}: {e}", path.display()))
        })?;
        let db = Arc::new(
            DB::open(&options.to_rocksdb(), &path)
                .map_err(|e| store_error(&format!("open {}", path.display()), e))?,
        );
        let shared = Arc::new(Shared::new());
        let (requests, receiver) = mpsc::channel();
        let writer = std::thread::Builder::new()
            .name("ironbus-rocksdb-writer".into())
            .spawn({
                let (db, shared, durability) =
                    (Arc::clone(&db), Arc::clone(&shared), options.durability);
                move || writer::run(db, receiver, shared, durability)
            })
            .map_err(|e| StoreError::unavailable(format!("start rocksdb writer thread: {e}")))?;
        Ok(Self { db, requests: Some(requests), writer: Some(writer), shared, path, options })
    }

    /// The directory the database lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &RocksOptions {
        &self.options
    }

    /// Writes and batches so far: how well group commit is grouping.
    pub fn commit_stats(&self) -> CommitStats {
        CommitStats {
            commits: self.shared.commits.load(Ordering::Relaxed),
            batches: self.shared.batches.load(Ordering::Relaxed),
        }
    }

    #[cfg(test)]
    pub(crate) fn fail_next_commit(&self) {
        self.shared.fail_next_commit.store(true, Ordering::Relaxed);
    }
}

/// Up to `limit` pairs of `[start, end)` (in RocksDB's keys), from one iterator (one snapshot).
fn scan_blocking(
    db: &DB,
    start: Vec<u8>,
    end: Vec<u8>,
    limit: usize,
) -> Result<Vec<KeyValue>, StoreError> {
    let mut read_options = rocksdb::ReadOptions::default();
    read_options.set_iterate_upper_bound(end);
    let mut iter = db.raw_iterator_opt(read_options);
    iter.seek(&start);
    let mut out = Vec::with_capacity(limit.min(256));
    while out.len() < limit {
        let (Some(key), Some(value)) = (iter.key(), iter.value()) else { break };
        let Some(key) = user_key(key) else {
            return Err(StoreError::corrupted(format!(
                "scan: key outside the data keyspace: {key:?}"
            )));
        };
        out.push((Bytes::copy_from_slice(key), Bytes::copy_from_slice(value)));
        iter.next();
    }
    iter.status().map_err(|e| store_error("scan", e))?;
    Ok(out)
}

#[async_trait]
impl Store for RocksStore {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        // A point read is a memtable or block-cache hit or one block read: cheap enough to run
        // on the calling task.
        let value = self.db.get_pinned(data_key(key)).map_err(|e| store_error("get", e))?;
        Ok(value.map(|v| Bytes::copy_from_slice(&v)))
    }

    async fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StoreError> {
        let Some((start, end)) = data_range(start, end) else {
            return Ok(Vec::new());
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let db = Arc::clone(&self.db);
        let scan = move || scan_blocking(&db, start, end, limit);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime.spawn_blocking(scan).await.map_err(|e| {
                StoreError::new(StoreErrorKind::Other, format!("scan: blocking task failed: {e}"))
            })?,
            // Outside a Tokio runtime there is no runtime to stall.
            Err(_) => scan(),
        }
    }

    async fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let stopped = || StoreError::unavailable("write: rocksdb writer thread stopped");
        let (reply, outcome) = oneshot::channel();
        self.requests
            .as_ref()
            .ok_or_else(stopped)?
            .send(Request { batch, reply })
            .map_err(|_| stopped())?;
        outcome.await.map_err(|_| stopped())?
    }

    fn health(&self) -> StoreHealth {
        let writer_running = self.writer.as_ref().is_some_and(|writer| !writer.is_finished());
        if writer_running && self.shared.healthy.load(Ordering::Acquire) {
            StoreHealth::Healthy
        } else {
            StoreHealth::Unavailable
        }
    }
}

impl Drop for RocksStore {
    fn drop(&mut self) {
        // Closing the channel lets the writer commit what is queued and stop; joining it
        // releases its reference to the database, so the database closes with `self.db`.
        drop(self.requests.take());
        if let Some(writer) = self.writer.take() {
            if writer.join().is_err() {
                tracing::error!(path = %self.path.display(), "rocksdb writer thread panicked");
            }
        }
    }
}

impl fmt::Debug for RocksStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocksStore")
            .field("path", &self.path)
            .field("options", &self.options)
            .field("health", &self.health())
            .field("commit_stats", &self.commit_stats())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use ironbus_core::testing::TempDir;

    use super::*;

    fn put(key: &str) -> WriteBatch {
        let mut batch = WriteBatch::new();
        batch.put(key.to_owned(), "v");
        batch
    }

    #[tokio::test]
    async fn failed_write_reports_unavailable_until_a_write_succeeds() {
        let dir = TempDir::new("rocks-health");
        let store = RocksStore::open(dir.path(), RocksOptions::default()).unwrap();
        store.write(put("a")).await.unwrap();
        store.fail_next_commit();
        let err = store.write(put("b")).await.expect_err("injected failure");
        assert!(err.is_retriable(), "{err}");
        assert_eq!(store.health(), StoreHealth::Unavailable);
        assert_eq!(store.get(b"b").await.unwrap(), None, "a failed write applies nothing");
        store.write(put("c")).await.unwrap();
        assert_eq!(store.health(), StoreHealth::Healthy);
        assert_eq!(store.scan(b"", b"", usize::MAX).await.unwrap().len(), 2);
    }

    #[test]
    fn scan_outside_a_runtime_runs_inline() {
        let dir = TempDir::new("rocks-no-runtime");
        let store = RocksStore::open(dir.path(), RocksOptions::default()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(store.write(put("a"))).unwrap();
        drop(runtime);
        // Polled without any runtime: the scan must not panic.
        let scanned = block_on_without_runtime(store.scan(b"", b"", 10));
        assert_eq!(scanned.unwrap().len(), 1);
    }

    /// Polls a future that never waits to completion, without a runtime.
    fn block_on_without_runtime<F: std::future::Future>(future: F) -> F::Output {
        use std::task::{Context, Poll, Waker};
        let mut future = std::pin::pin!(future);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return out;
            }
        }
    }
}
