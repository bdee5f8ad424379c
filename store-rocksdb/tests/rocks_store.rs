//! `RocksStore` beyond the conformance suite: group commit (concurrent writers share commits,
//! and so syncs, guarded or not), the relaxed mode across a clean close, and opening directories.

use std::sync::Arc;

use bytes::Bytes;
use ironbus_core::store::{prefix_end, Store, WriteBatch};
use ironbus_core::testing::TempDir;
use ironbus_store_rocksdb::{CommitStats, Durability, RocksOptions, RocksStore};
use tokio::sync::Barrier;

const WRITERS: usize = 32;
const WRITES: usize = 20;

/// `WRITERS` tasks each write `WRITES` two-key batches, all starting together.
async fn write_concurrently(store: &Arc<RocksStore>) {
    let barrier = Arc::new(Barrier::new(WRITERS));
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let (store, barrier) = (Arc::clone(store), Arc::clone(&barrier));
        tasks.spawn(async move {
            barrier.wait().await;
            for i in 0..WRITES {
                let mut batch = WriteBatch::new();
                batch.put(format!("g/{w:02}/{i:02}/a"), format!("{w}:{i}"));
                batch.put(format!("g/{w:02}/{i:02}/b"), format!("{w}:{i}"));
                store.write(batch).await.unwrap();
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("writer task panicked");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_share_commits() {
    let dir = TempDir::new("rocks-group-commit");
    let store = Arc::new(RocksStore::open(dir.path(), RocksOptions::default()).unwrap());
    assert_eq!(store.commit_stats(), CommitStats { commits: 0, batches: 0 });
    write_concurrently(&store).await;

    let stats = store.commit_stats();
    assert_eq!(stats.batches, (WRITERS * WRITES) as u64);
    assert!(
        stats.commits < stats.batches,
        "{WRITERS} concurrent writers never shared a commit: {stats:?}"
    );
    let all = store.scan(b"g/", &prefix_end(b"g/"), usize::MAX).await.unwrap();
    assert_eq!(all.len(), WRITERS * WRITES * 2, "every batch of every group landed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_writers_share_commits_too() {
    let dir = TempDir::new("rocks-group-commit");
    let store = Arc::new(RocksStore::open(dir.path(), RocksOptions::default()).unwrap());
    let barrier = Arc::new(Barrier::new(WRITERS));
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
        tasks.spawn(async move {
            barrier.wait().await;
            for i in 0..WRITES {
                // Each writer's own chain: create the next link only if the last is in place.
                let mut batch = WriteBatch::new();
                batch.require(format!("c/{w:02}/{i:02}"), None);
                if i > 0 {
                    batch.require(format!("c/{w:02}/{:02}", i - 1), Some(Bytes::from("link")));
                }
                batch.put(format!("c/{w:02}/{i:02}"), "link");
                store.write(batch).await.unwrap();
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("writer task panicked");
    }
    let stats = store.commit_stats();
    assert_eq!(stats.batches, (WRITERS * WRITES) as u64);
    assert!(stats.commits < stats.batches, "guarded writers never shared a commit: {stats:?}");
    let all = store.scan(b"c/", &prefix_end(b"c/"), usize::MAX).await.unwrap();
    assert_eq!(all.len(), WRITERS * WRITES);
}

#[tokio::test]
async fn empty_batches_make_no_commit() {
    let dir = TempDir::new("rocks-group-commit");
    let store = RocksStore::open(dir.path(), RocksOptions::default()).unwrap();
    store.write(WriteBatch::new()).await.unwrap();
    assert_eq!(store.commit_stats(), CommitStats { commits: 0, batches: 0 });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relaxed_writes_survive_a_clean_close() {
    let dir = TempDir::new("rocks-relaxed");
    let relaxed = RocksOptions { durability: Durability::Relaxed, ..RocksOptions::default() };
    let store = Arc::new(RocksStore::open(dir.path(), relaxed.clone()).unwrap());
    write_concurrently(&store).await;
    let mut batch = WriteBatch::new();
    batch.delete_range(&b"g/00/"[..], prefix_end(b"g/00/"));
    store.write(batch).await.unwrap();
    let before = store.scan(b"", b"", usize::MAX).await.unwrap();
    assert_eq!(before.len(), (WRITERS - 1) * WRITES * 2);
    drop(store);

    // Reopened in the default (sync) mode: the data does not depend on the mode it is read in.
    let store = RocksStore::open(dir.path(), RocksOptions::default()).unwrap();
    assert_eq!(store.scan(b"", b"", usize::MAX).await.unwrap(), before);
    drop(store);
    let store = RocksStore::open(dir.path(), relaxed).unwrap();
    assert_eq!(store.scan(b"", b"", usize::MAX).await.unwrap(), before);
}

#[tokio::test]
async fn opening_a_directory_in_use_is_unavailable() {
    let dir = TempDir::new("rocks-locked");
    let _first = RocksStore::open(dir.path(), RocksOptions::default()).unwrap();
    let err = RocksStore::open(dir.path(), RocksOptions::default()).expect_err("already open");
    assert!(err.is_retriable(), "{err}");
}

#[tokio::test]
async fn open_creates_missing_parent_directories() {
    let dir = TempDir::new("rocks-nested");
    let nested = dir.path().join("data").join("store-0");
    let store = RocksStore::open(&nested, RocksOptions::default()).unwrap();
    assert_eq!(store.path(), nested);
    let mut batch = WriteBatch::new();
    batch.put(&b"k"[..], &b"v"[..]);
    store.write(batch).await.unwrap();
    assert_eq!(store.get(b"k").await.unwrap().as_deref(), Some(&b"v"[..]));
}
