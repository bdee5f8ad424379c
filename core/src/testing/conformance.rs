//! The store conformance suite: one async function per behaviour every [`Store`] must show.
//!
//! Each case takes a fresh, empty store and panics when the store misbehaves. Store crates run
//! them through [`store_conformance_suite!`](crate::store_conformance_suite), which makes one
//! named test per case. The durability cases take a factory that opens a store at a directory,
//! so that a store can be dropped and opened again at the same place; only stores that promise
//! durability opt into them.
//!
//! Ranges are half-open, `[start, end)`, and an empty `end` means "no upper bound", both for
//! [`Store::scan`] and for [`BatchOp::DeleteRange`]: a
//! delete range removes exactly the keys a scan of the same range returns.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::TempDir;
use crate::store::{
    prefix_end, range_bounds, BatchOp, KeyValue, Store, StoreErrorKind, StoreHealth, WriteBatch,
};

// ---------------------------------------------------------------------------------------------
// Helpers

async fn put<S: Store + ?Sized>(store: &S, key: &[u8], value: &[u8]) {
    let mut batch = WriteBatch::new();
    batch.put(key.to_vec(), value.to_vec());
    write(store, batch).await;
}

async fn write<S: Store + ?Sized>(store: &S, batch: WriteBatch) {
    if let Err(e) = store.write(batch.clone()).await {
        panic!("write failed: {e}\nbatch: {batch:?}");
    }
}

async fn get<S: Store + ?Sized>(store: &S, key: &[u8]) -> Option<Bytes> {
    store.get(key).await.unwrap_or_else(|e| panic!("get {key:?} failed: {e}"))
}

async fn scan<S: Store + ?Sized>(
    store: &S,
    start: &[u8],
    end: &[u8],
    limit: usize,
) -> Vec<KeyValue> {
    store
        .scan(start, end, limit)
        .await
        .unwrap_or_else(|e| panic!("scan {start:?}..{end:?} limit {limit} failed: {e}"))
}

async fn scan_all<S: Store + ?Sized>(store: &S) -> Vec<KeyValue> {
    scan(store, b"", b"", usize::MAX).await
}

fn pairs(items: &[(&[u8], &[u8])]) -> Vec<KeyValue> {
    items.iter().map(|(k, v)| (Bytes::copy_from_slice(k), Bytes::copy_from_slice(v))).collect()
}

fn keys(kvs: &[KeyValue]) -> Vec<Vec<u8>> {
    kvs.iter().map(|(k, _)| k.to_vec()).collect()
}

/// Puts `key = value` for every key, as one batch.
async fn put_all<S: Store + ?Sized>(store: &S, items: &[(&[u8], &[u8])]) {
    let mut batch = WriteBatch::new();
    for (k, v) in items {
        batch.put(k.to_vec(), v.to_vec());
    }
    write(store, batch).await;
}

// ---------------------------------------------------------------------------------------------
// Point reads and writes

pub async fn get_missing_key_returns_none(store: Arc<dyn Store>) {
    assert_eq!(get(&*store, b"missing").await, None);
    put(&*store, b"present", b"v").await;
    assert_eq!(get(&*store, b"missing").await, None);
    assert_eq!(get(&*store, b"presen").await, None, "a prefix of a key is a different key");
    assert_eq!(get(&*store, b"present\0").await, None, "an extension of a key is a different key");
}

pub async fn put_then_get_returns_value(store: Arc<dyn Store>) {
    put(&*store, b"k", b"value").await;
    assert_eq!(get(&*store, b"k").await.as_deref(), Some(&b"value"[..]));
}

pub async fn put_overwrites_previous_value(store: Arc<dyn Store>) {
    put(&*store, b"k", b"first").await;
    put(&*store, b"k", b"second").await;
    assert_eq!(get(&*store, b"k").await.as_deref(), Some(&b"second"[..]));
    assert_eq!(scan_all(&*store).await, pairs(&[(b"k", b"second")]));
}

pub async fn empty_value_is_not_a_missing_key(store: Arc<dyn Store>) {
    put(&*store, b"k", b"").await;
    assert_eq!(get(&*store, b"k").await.as_deref(), Some(&b""[..]));
    assert_eq!(scan_all(&*store).await, pairs(&[(b"k", b"")]));
}

pub async fn delete_removes_key(store: Arc<dyn Store>) {
    put_all(&*store, &[(b"a", b"1"), (b"b", b"2")]).await;
    let mut batch = WriteBatch::new();
    batch.delete(&b"a"[..]);
    write(&*store, batch).await;
    assert_eq!(get(&*store, b"a").await, None);
    assert_eq!(scan_all(&*store).await, pairs(&[(b"b", b"2")]));
}

pub async fn delete_missing_key_is_ok(store: Arc<dyn Store>) {
    put(&*store, b"other", b"v").await;
    let mut batch = WriteBatch::new();
    batch.delete(&b"missing"[..]);
    batch.put(&b"after"[..], &b"w"[..]);
    write(&*store, batch).await;
    assert_eq!(get(&*store, b"missing").await, None);
    assert_eq!(scan_all(&*store).await, pairs(&[(b"after", b"w"), (b"other", b"v")]));
}

pub async fn large_value_round_trips(store: Arc<dyn Store>) {
    let value: Vec<u8> = (0..1024 * 1024).map(|i: u32| (i.wrapping_mul(31) % 251) as u8).collect();
    put(&*store, b"large", &value).await;
    put(&*store, b"small", b"s").await;
    assert_eq!(get(&*store, b"large").await.as_deref(), Some(&value[..]));
    let all = scan_all(&*store).await;
    assert_eq!(keys(&all), vec![b"large".to_vec(), b"small".to_vec()]);
    assert_eq!(&all[0].1[..], &value[..]);
}

pub async fn healthy_store_reports_healthy(store: Arc<dyn Store>) {
    assert_eq!(store.health(), StoreHealth::Healthy);
    put(&*store, b"k", b"v").await;
    let _ = scan_all(&*store).await;
    assert_eq!(store.health(), StoreHealth::Healthy);
}

// ---------------------------------------------------------------------------------------------
// Batches

pub async fn empty_batch_is_ok(store: Arc<dyn Store>) {
    write(&*store, WriteBatch::new()).await;
    assert!(scan_all(&*store).await.is_empty());
    put(&*store, b"k", b"v").await;
    write(&*store, WriteBatch::new()).await;
    assert_eq!(scan_all(&*store).await, pairs(&[(b"k", b"v")]));
}

pub async fn batch_applies_every_operation(store: Arc<dyn Store>) {
    put_all(&*store, &[(b"old1", b"x"), (b"old2", b"y"), (b"r1", b"1"), (b"r2", b"2")]).await;
    let mut batch = WriteBatch::new();
    batch.put(&b"new"[..], &b"n"[..]);
    batch.delete(&b"old1"[..]);
    batch.put(&b"old2"[..], &b"z"[..]);
    batch.delete_range(&b"r"[..], &b"s"[..]);
    write(&*store, batch).await;
    assert_eq!(scan_all(&*store).await, pairs(&[(b"new", b"n"), (b"old2", b"z")]));
}

pub async fn later_op_in_batch_wins(store: Arc<dyn Store>) {
    put_all(&*store, &[(b"deleted_then_put", b"old"), (b"range/b", b"old")]).await;
    let mut batch = WriteBatch::new();
    batch.put(&b"put_twice"[..], &b"first"[..]);
    batch.put(&b"put_twice"[..], &b"second"[..]);
    batch.put(&b"put_then_deleted"[..], &b"v"[..]);
    batch.delete(&b"put_then_deleted"[..]);
    batch.delete(&b"deleted_then_put"[..]);
    batch.put(&b"deleted_then_put"[..], &b"new"[..]);
    // A put before a delete range covering it is removed; a put after it stays.
    batch.put(&b"range/a"[..], &b"v"[..]);
    batch.delete_range(&b"range/"[..], prefix_end(b"range/"));
    batch.put(&b"range/c"[..], &b"v"[..]);
    write(&*store, batch).await;
    assert_eq!(
        scan_all(&*store).await,
        pairs(&[(b"deleted_then_put", b"new"), (b"put_twice", b"second"), (b"range/c", b"v")])
    );
}

pub async fn delete_range_removes_half_open_range(store: Arc<dyn Store>) {
    let all: [&[u8]; 7] = [b"a", b"b", b"b\0", b"ba", b"bz", b"c", b"c\0"];
    put_all(&*store, &all.map(|k| (k, &b"v"[..]))).await;
    let mut batch = WriteBatch::new();
    batch.delete_range(&b"b"[..], &b"c"[..]);
    write(&*store, batch).await;
    assert_eq!(
        keys(&scan_all(&*store).await),
        vec![b"a".to_vec(), b"c".to_vec(), b"c\0".to_vec()],
        "start is inclusive and end exclusive"
    );
    // A range over missing keys is not an error.
    let mut batch = WriteBatch::new();
    batch.delete_range(&b"x"[..], &b"y"[..]);
    write(&*store, batch).await;
    assert_eq!(scan_all(&*store).await.len(), 3);
}

pub async fn delete_range_with_empty_end_is_unbounded(store: Arc<dyn Store>) {
    let all: [&[u8]; 5] = [b"a", b"m", b"z", b"\xff", b"\xff\xff\xff"];
    put_all(&*store, &all.map(|k| (k, &b"v"[..]))).await;
    let mut batch = WriteBatch::new();
    batch.delete_range(&b"m"[..], Bytes::new());
    write(&*store, batch).await;
    assert_eq!(keys(&scan_all(&*store).await), vec![b"a".to_vec()]);
}

pub async fn inverted_delete_range_removes_nothing(store: Arc<dyn Store>) {
    put_all(&*store, &[(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]).await;
    let mut batch = WriteBatch::new();
    batch.delete_range(&b"c"[..], &b"a"[..]);
    batch.delete_range(&b"b"[..], &b"b"[..]);
    batch.put(&b"d"[..], &b"4"[..]);
    write(&*store, batch).await;
    assert_eq!(
        scan_all(&*store).await,
        pairs(&[(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (b"d", b"4")])
    );
}

// ---------------------------------------------------------------------------------------------
// Scans

pub async fn scan_returns_keys_in_byte_order(store: Arc<dyn Store>) {
    // Written out of order, in several batches.
    let written: [&[u8]; 8] = [b"b", b"ab", b"a", b"B", b"abc", b"aa", b"b\x01", b"\x01"];
    for k in written {
        put(&*store, k, k).await;
    }
    let mut expected: Vec<Vec<u8>> = written.iter().map(|k| k.to_vec()).collect();
    expected.sort();
    let all = scan_all(&*store).await;
    assert_eq!(keys(&all), expected);
    assert!(all.iter().all(|(k, v)| k == v), "each key keeps its own value");
}

pub async fn scan_respects_bounds_and_limit(store: Arc<dyn Store>) {
    let all: [&[u8]; 6] = [b"a", b"b", b"c", b"d", b"e", b"f"];
    put_all(&*store, &all.map(|k| (k, k))).await;
    assert_eq!(
        keys(&scan(&*store, b"b", b"e", usize::MAX).await),
        vec![b"b".to_vec(), b"c".to_vec(), b"d".to_vec()],
        "start is inclusive and end exclusive"
    );
    assert_eq!(
        keys(&scan(&*store, b"bb", b"dd", usize::MAX).await),
        vec![b"c".to_vec(), b"d".to_vec()],
        "bounds need not be keys"
    );
    assert_eq!(
        keys(&scan(&*store, b"b", b"f", 2).await),
        vec![b"b".to_vec(), b"c".to_vec()],
        "limit keeps the smallest keys"
    );
    assert!(scan(&*store, b"a", b"", 0).await.is_empty(), "limit 0 returns nothing");
    assert_eq!(scan(&*store, b"c", b"d", usize::MAX).await, pairs(&[(b"c", b"c")]));
    assert!(scan(&*store, b"c", b"c", usize::MAX).await.is_empty(), "[c, c) is empty");
    assert!(scan(&*store, b"g", b"z", usize::MAX).await.is_empty());
}

pub async fn scan_pages_from_last_key_plus_zero_byte(store: Arc<dyn Store>) {
    let mut batch = WriteBatch::new();
    let mut expected = Vec::new();
    for i in 0..25u8 {
        // Keys where one is a prefix of the next, to catch paging that skips or repeats one.
        let key = vec![b'p', i / 5, i % 5];
        batch.put(key.clone(), vec![i]);
        expected.push(key.clone());
        let mut extended = key;
        extended.push(0);
        batch.put(extended.clone(), vec![i]);
        expected.push(extended);
    }
    write(&*store, batch).await;
    expected.sort();
    let end = prefix_end(b"p");
    let mut start = b"p".to_vec();
    let mut seen = Vec::new();
    loop {
        let page = scan(&*store, &start, &end, 7).await;
        assert!(page.len() <= 7);
        let Some((last, _)) = page.last() else { break };
        start = last.to_vec();
        start.push(0);
        seen.extend(keys(&page));
    }
    assert_eq!(seen, expected);
}

pub async fn scan_with_empty_end_is_unbounded(store: Arc<dyn Store>) {
    let all: [&[u8]; 5] = [b"a", b"m", b"z", b"\xff", b"\xff\xff\xff"];
    put_all(&*store, &all.map(|k| (k, &b"v"[..]))).await;
    assert_eq!(
        keys(&scan(&*store, b"m", b"", usize::MAX).await),
        vec![b"m".to_vec(), b"z".to_vec(), b"\xff".to_vec(), b"\xff\xff\xff".to_vec()]
    );
    assert_eq!(scan(&*store, b"", b"", usize::MAX).await.len(), 5);
    assert_eq!(keys(&scan(&*store, b"\xff\x00", b"", 10).await), vec![b"\xff\xff\xff".to_vec()]);
}

pub async fn scan_inverted_range_is_empty(store: Arc<dyn Store>) {
    put_all(&*store, &[(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]).await;
    assert!(scan(&*store, b"c", b"a", usize::MAX).await.is_empty());
    assert!(scan(&*store, b"b\0", b"b", usize::MAX).await.is_empty());
}

pub async fn prefix_scan_with_prefix_end(store: Arc<dyn Store>) {
    let all: [&[u8]; 9] = [
        b"q",
        b"q/",
        b"q/\x00",
        b"q/a",
        b"q/\xff",
        b"q/\xff\xff",
        b"q0",
        b"\xff\xff",
        b"\xff\xff\x00",
    ];
    put_all(&*store, &all.map(|k| (k, &b"v"[..]))).await;
    assert_eq!(
        keys(&scan(&*store, b"q/", &prefix_end(b"q/"), usize::MAX).await),
        vec![
            b"q/".to_vec(),
            b"q/\x00".to_vec(),
            b"q/a".to_vec(),
            b"q/\xff".to_vec(),
            b"q/\xff\xff".to_vec(),
        ],
        "only keys starting with the prefix, the prefix itself included"
    );
    assert_eq!(
        keys(&scan(&*store, b"q/\xff", &prefix_end(b"q/\xff"), usize::MAX).await),
        vec![b"q/\xff".to_vec(), b"q/\xff\xff".to_vec()],
        "a prefix ending in 0xff"
    );
    assert_eq!(
        keys(&scan(&*store, b"\xff\xff", &prefix_end(b"\xff\xff"), usize::MAX).await),
        vec![b"\xff\xff".to_vec(), b"\xff\xff\x00".to_vec()],
        "an all-0xff prefix has no upper bound"
    );
    // The same ranges as delete ranges.
    let mut batch = WriteBatch::new();
    batch.delete_range(&b"q/"[..], prefix_end(b"q/"));
    batch.delete_range(&b"\xff\xff"[..], prefix_end(b"\xff\xff"));
    write(&*store, batch).await;
    assert_eq!(keys(&scan_all(&*store).await), vec![b"q".to_vec(), b"q0".to_vec()]);
}

pub async fn keys_with_ff_and_zero_bytes_order_correctly(store: Arc<dyn Store>) {
    let all: [&[u8]; 10] = [
        b"\x00",
        b"\x00\x00",
        b"\x00\xff",
        b"\x01",
        b"\x7f",
        b"\x80",
        b"\xfe\xff",
        b"\xff",
        b"\xff\x00",
        b"\xff\xff",
    ];
    // Written in reverse; expected in this (unsigned, shorter-first) order.
    for k in all.iter().rev() {
        put(&*store, k, k).await;
    }
    let expected: Vec<Vec<u8>> = all.iter().map(|k| k.to_vec()).collect();
    assert_eq!(keys(&scan_all(&*store).await), expected);
    assert_eq!(
        keys(&scan(&*store, b"\x00", b"\x01", usize::MAX).await),
        expected[..3].to_vec(),
        "0x00 keys sort after their prefix and before 0x01"
    );
    assert_eq!(
        keys(&scan(&*store, b"\x80", b"\xff\x00", usize::MAX).await),
        expected[5..8].to_vec(),
        "bytes compare unsigned"
    );
    for k in all {
        assert_eq!(get(&*store, k).await.as_deref(), Some(k));
    }
}

// ---------------------------------------------------------------------------------------------
// Concurrency

pub async fn concurrent_writers_all_land(store: Arc<dyn Store>) {
    const WRITERS: u32 = 16;
    const WRITES: u32 = 50;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let store = Arc::clone(&store);
        tasks.spawn(async move {
            for i in 0..WRITES {
                // Two keys per batch, both must land.
                let mut batch = WriteBatch::new();
                batch.put(format!("w/{w:02}/{i:03}/a"), format!("{w}:{i}"));
                batch.put(format!("w/{w:02}/{i:03}/b"), format!("{w}:{i}"));
                if let Err(e) = store.write(batch).await {
                    panic!("writer {w} write {i} failed: {e}");
                }
                tokio::task::yield_now().await;
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("writer task panicked");
    }
    let all = scan_all(&*store).await;
    assert_eq!(all.len(), (WRITERS * WRITES * 2) as usize);
    let mut expected = Vec::new();
    for w in 0..WRITERS {
        for i in 0..WRITES {
            for half in ["a", "b"] {
                expected.push((
                    Bytes::from(format!("w/{w:02}/{i:03}/{half}")),
                    Bytes::from(format!("{w}:{i}")),
                ));
            }
        }
    }
    assert_eq!(all, expected);
}

pub async fn scan_never_sees_half_applied_batch(store: Arc<dyn Store>) {
    const KEYS: u32 = 10;
    const ROUNDS: u32 = 200;
    let prefix = b"atomic/";
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let store = Arc::clone(&store);
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            for round in 0..ROUNDS {
                // Every batch leaves all KEYS keys holding `round`; odd rounds first clear them.
                let mut batch = WriteBatch::new();
                if round % 2 == 1 {
                    batch.delete_range(&prefix[..], prefix_end(prefix));
                }
                for k in 0..KEYS {
                    batch.put(format!("atomic/{k}"), round.to_be_bytes().to_vec());
                }
                if let Err(e) = store.write(batch).await {
                    panic!("round {round} write failed: {e}");
                }
                tokio::task::yield_now().await;
            }
            done.store(true, Ordering::Release);
        })
    };
    let reader = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let mut reads = 0u32;
            while !done.load(Ordering::Acquire) || reads < 10 {
                let seen = scan(&*store, prefix, &prefix_end(prefix), usize::MAX).await;
                if !seen.is_empty() {
                    assert_eq!(seen.len(), KEYS as usize, "half-applied batch seen: {seen:?}");
                    assert!(
                        seen.iter().all(|(_, v)| *v == seen[0].1),
                        "half-applied batch seen: {seen:?}"
                    );
                }
                reads += 1;
                tokio::task::yield_now().await;
            }
        })
    };
    writer.await.expect("writer task panicked");
    reader.await.expect("reader task panicked");
    let last = (ROUNDS - 1).to_be_bytes();
    let seen = scan(&*store, prefix, &prefix_end(prefix), usize::MAX).await;
    assert_eq!(seen.len(), KEYS as usize);
    assert!(seen.iter().all(|(_, v)| v[..] == last[..]));
}

mod durability;
mod guards;
mod model;

pub use durability::*;
pub use guards::*;
pub use model::*;
