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

// ---------------------------------------------------------------------------------------------
// Guards

/// A batch that puts `key = value`, guarded by `guard_key` holding `expected`.
fn guarded_put(guard_key: &[u8], expected: Option<&[u8]>, key: &[u8], value: &[u8]) -> WriteBatch {
    let mut batch = WriteBatch::new();
    batch.require(guard_key.to_vec(), expected.map(Bytes::copy_from_slice));
    batch.put(key.to_vec(), value.to_vec());
    batch
}

/// Writes `batch` and expects it refused with `Conflict`, having applied nothing.
async fn write_conflicts<S: Store + ?Sized>(store: &S, batch: WriteBatch, context: &str) {
    let before = scan_all(store).await;
    match store.write(batch.clone()).await {
        Err(e) if e.kind == StoreErrorKind::Conflict => {
            assert!(!e.is_retriable(), "{context}: a conflict is not retriable: {e}");
        }
        Err(e) => panic!("{context}: expected a conflict, got {e}\nbatch: {batch:?}"),
        Ok(()) => panic!("{context}: expected a conflict, the write succeeded\nbatch: {batch:?}"),
    }
    assert_eq!(scan_all(store).await, before, "{context}: a refused batch applied something");
}

pub async fn guard_equal_to_current_value_applies_batch(store: Arc<dyn Store>) {
    put_all(&*store, &[(b"fence", b"7"), (b"old", b"x"), (b"r/1", b"1")]).await;
    let mut batch = guarded_put(b"fence", Some(b"7"), b"new", b"n");
    batch.put(&b"fence"[..], &b"8"[..]);
    batch.delete(&b"old"[..]);
    batch.delete_range(&b"r/"[..], prefix_end(b"r/"));
    write(&*store, batch).await;
    assert_eq!(scan_all(&*store).await, pairs(&[(b"fence", b"8"), (b"new", b"n")]));
    // The guard moved on with the batch: the next one guards the new value.
    write(&*store, guarded_put(b"fence", Some(b"8"), b"fence", b"9")).await;
    assert_eq!(get(&*store, b"fence").await.as_deref(), Some(&b"9"[..]));
    // An empty value is a value a guard can expect.
    put(&*store, b"empty", b"").await;
    write(&*store, guarded_put(b"empty", Some(b""), b"after_empty", b"e")).await;
    assert_eq!(get(&*store, b"after_empty").await.as_deref(), Some(&b"e"[..]));
}

pub async fn guard_mismatch_applies_nothing_and_conflicts(store: Arc<dyn Store>) {
    put_all(&*store, &[(b"fence", b"7"), (b"old", b"x"), (b"r/1", b"1"), (b"r/2", b"2")]).await;
    // Every kind of operation, each of which would change what a scan returns.
    let refused = |expected: Option<&[u8]>| {
        let mut batch = guarded_put(b"fence", expected, b"new", b"n");
        batch.put(&b"old"[..], &b"overwritten"[..]);
        batch.put(&b"fence"[..], &b"8"[..]);
        batch.delete(&b"r/1"[..]);
        batch.delete_range(&b"r/"[..], Bytes::new());
        batch
    };
    write_conflicts(&*store, refused(Some(b"6")), "a different value").await;
    write_conflicts(&*store, refused(Some(b"7\0")), "a value extending the current one").await;
    write_conflicts(&*store, refused(Some(b"")), "an empty value").await;
    write_conflicts(&*store, refused(None), "absence of a present key").await;
    write_conflicts(&*store, guarded_put(b"missing", Some(b"7"), b"new", b"n"), "a missing key")
        .await;
    write_conflicts(&*store, guarded_put(b"missing", Some(b""), b"new", b"n"), "missing vs empty")
        .await;
    assert_eq!(
        scan_all(&*store).await,
        pairs(&[(b"fence", b"7"), (b"old", b"x"), (b"r/1", b"1"), (b"r/2", b"2")])
    );
    // A refused batch leaves the store writable, guards included.
    write(&*store, refused(Some(b"7"))).await;
    assert_eq!(
        scan_all(&*store).await,
        pairs(&[(b"fence", b"8"), (b"new", b"n"), (b"old", b"overwritten")])
    );
}

pub async fn guard_none_means_create_only(store: Arc<dyn Store>) {
    write(&*store, guarded_put(b"k", None, b"k", b"first")).await;
    assert_eq!(get(&*store, b"k").await.as_deref(), Some(&b"first"[..]));
    write_conflicts(&*store, guarded_put(b"k", None, b"k", b"second"), "create of a present key")
        .await;
    assert_eq!(get(&*store, b"k").await.as_deref(), Some(&b"first"[..]));
    // A key holding an empty value is present.
    put(&*store, b"empty", b"").await;
    write_conflicts(&*store, guarded_put(b"empty", None, b"empty", b"v"), "an empty value").await;
    // A key sharing a prefix with a present key is a different key.
    write(&*store, guarded_put(b"k\0", None, b"k\0", b"v")).await;
    write(&*store, guarded_put(b"", None, b"kk", b"v")).await;
    assert_eq!(
        scan_all(&*store).await,
        pairs(&[(b"empty", b""), (b"k", b"first"), (b"k\0", b"v"), (b"kk", b"v")])
    );
}

pub async fn guard_on_key_deleted_earlier_sees_it_absent(store: Arc<dyn Store>) {
    put_all(&*store, &[(b"d", b"1"), (b"r/a", b"2"), (b"r/b", b"3"), (b"z/a", b"4")]).await;
    let mut batch = WriteBatch::new();
    batch.delete(&b"d"[..]);
    write(&*store, batch).await;
    write_conflicts(&*store, guarded_put(b"d", Some(b"1"), b"x", b"x"), "a deleted key").await;
    write(&*store, guarded_put(b"d", None, b"d", b"again")).await;

    let mut batch = WriteBatch::new();
    batch.delete_range(&b"r/"[..], &b"r/b"[..]);
    batch.delete_range(&b"z/"[..], Bytes::new());
    write(&*store, batch).await;
    write_conflicts(&*store, guarded_put(b"r/a", Some(b"2"), b"x", b"x"), "a key in a range").await;
    write_conflicts(&*store, guarded_put(b"z/a", Some(b"4"), b"x", b"x"), "an unbounded range")
        .await;
    write_conflicts(&*store, guarded_put(b"r/b", None, b"x", b"x"), "the range's excluded end")
        .await;
    let mut batch = guarded_put(b"r/a", None, b"r/a", b"again");
    batch.require(&b"z/a"[..], None);
    batch.require(&b"r/b"[..], Some(Bytes::from_static(b"3")));
    write(&*store, batch).await;
    assert_eq!(
        scan_all(&*store).await,
        pairs(&[(b"d", b"again"), (b"r/a", b"again"), (b"r/b", b"3")])
    );
}

pub async fn guards_see_the_state_before_the_batch_own_operations(store: Arc<dyn Store>) {
    put(&*store, b"k", b"old").await;
    // The batch's own put does not make its guard hold, nor its own delete make it fail.
    write_conflicts(&*store, guarded_put(b"k", Some(b"new"), b"k", b"new"), "its own put").await;
    write_conflicts(&*store, guarded_put(b"fresh", Some(b"v"), b"fresh", b"v"), "its own create")
        .await;
    let mut batch = WriteBatch::new();
    batch.delete(&b"k"[..]);
    batch.require(&b"k"[..], Some(Bytes::from_static(b"old")));
    batch.put(&b"gone"[..], &b"yes"[..]);
    write(&*store, batch).await;
    assert_eq!(scan_all(&*store).await, pairs(&[(b"gone", b"yes")]));
}

pub async fn guard_only_batch_succeeds_or_fails_like_any(store: Arc<dyn Store>) {
    put(&*store, b"fence", b"1").await;
    let mut holds = WriteBatch::new();
    holds.require(&b"fence"[..], Some(Bytes::from_static(b"1")));
    holds.require(&b"absent"[..], None);
    write(&*store, holds).await;
    let mut fails = WriteBatch::new();
    fails.require(&b"fence"[..], Some(Bytes::from_static(b"2")));
    write_conflicts(&*store, fails, "a guard-only batch").await;
    let mut fails = WriteBatch::new();
    fails.require(&b"fence"[..], None);
    write_conflicts(&*store, fails, "a create-only guard-only batch").await;
    assert_eq!(scan_all(&*store).await, pairs(&[(b"fence", b"1")]));
}

pub async fn every_guard_of_a_batch_must_hold(store: Arc<dyn Store>) {
    put_all(&*store, &[(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]).await;
    let batch = |a: &'static [u8], b: Option<&'static [u8]>, c: &'static [u8]| {
        let mut batch = WriteBatch::new();
        batch.require(&b"a"[..], Some(Bytes::from_static(a)));
        batch.require(&b"b"[..], b.map(Bytes::from_static));
        batch.require(&b"absent"[..], None);
        batch.require(&b"c"[..], Some(Bytes::from_static(c)));
        batch.put(&b"a"[..], &b"10"[..]);
        batch.delete(&b"c"[..]);
        batch
    };
    write_conflicts(&*store, batch(b"x", Some(b"2"), b"3"), "the first guard fails").await;
    write_conflicts(&*store, batch(b"1", None, b"3"), "a middle guard fails").await;
    write_conflicts(&*store, batch(b"1", Some(b"2"), b"x"), "the last guard fails").await;
    write_conflicts(&*store, batch(b"x", None, b"x"), "every guard fails").await;
    let mut absent_present = batch(b"1", Some(b"2"), b"3");
    absent_present.require(&b"b"[..], None);
    write_conflicts(&*store, absent_present, "two guards on one key disagree").await;
    write(&*store, batch(b"1", Some(b"2"), b"3")).await;
    assert_eq!(scan_all(&*store).await, pairs(&[(b"a", b"10"), (b"b", b"2")]));
}

/// Writes `batch`, expecting `Ok` or a `Conflict` (with nothing applied); whether it applied.
async fn write_or_conflict<S: Store + ?Sized>(store: &S, batch: WriteBatch, context: &str) -> bool {
    match store.write(batch).await {
        Ok(()) => true,
        Err(e) if e.kind == StoreErrorKind::Conflict => false,
        Err(e) => panic!("{context}: expected Ok or a conflict, got {e}"),
    }
}

pub async fn concurrent_guarded_increments_lose_no_update(store: Arc<dyn Store>) {
    const TASKS: u32 = 16;
    const ATTEMPTS: u32 = 40;
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..TASKS {
        let store = Arc::clone(&store);
        tasks.spawn(async move {
            let mut applied = 0u32;
            for attempt in 0..ATTEMPTS {
                // Read, then compare-and-set: absent counts as zero and is created only once.
                let current = get(&*store, b"counter").await;
                let value = match &current {
                    Some(v) => u32::from_be_bytes(v[..].try_into().expect("a 4-byte counter")),
                    None => 0,
                };
                let mut batch = WriteBatch::new();
                batch.require(&b"counter"[..], current);
                batch.put(&b"counter"[..], (value + 1).to_be_bytes().to_vec());
                batch.put(format!("inc/{t:02}/{attempt:02}"), (value + 1).to_be_bytes().to_vec());
                if write_or_conflict(&*store, batch, &format!("task {t} attempt {attempt}")).await {
                    applied += 1;
                }
                tokio::task::yield_now().await;
            }
            applied
        });
    }
    let mut applied = 0u32;
    while let Some(joined) = tasks.join_next().await {
        applied += joined.expect("increment task panicked");
    }
    assert!(applied > 0, "some increment must succeed");
    let counter = get(&*store, b"counter").await.expect("the counter exists");
    assert_eq!(counter[..], applied.to_be_bytes(), "final value vs successful increments");
    let marks = scan(&*store, b"inc/", &prefix_end(b"inc/"), usize::MAX).await;
    assert_eq!(marks.len(), applied as usize, "exactly the successful batches applied");
    let mut values: Vec<u32> = marks
        .iter()
        .map(|(_, v)| u32::from_be_bytes(v[..].try_into().expect("a 4-byte mark")))
        .collect();
    values.sort_unstable();
    assert_eq!(values, (1..=applied).collect::<Vec<_>>(), "each value was set exactly once");
}

pub async fn guard_sees_earlier_writes_of_the_same_group(store: Arc<dyn Store>) {
    // Writers released together, so that a store with group commit groups them. Per round:
    // claimers race to create `slot`; doomed writers put `slot` under a guard that never holds
    // (their put must not count for anyone after them); plain writers land whatever happens.
    const ROUNDS: u32 = 20;
    const CLAIMERS: u32 = 6;
    const DOOMED: u32 = 3;
    const PLAIN: u32 = 3;
    for round in 0..ROUNDS {
        let slot = format!("slot/{round:02}");
        let start = Arc::new(tokio::sync::Barrier::new((CLAIMERS + DOOMED + PLAIN) as usize));
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..CLAIMERS + DOOMED + PLAIN {
            let (store, start, slot) = (Arc::clone(&store), Arc::clone(&start), slot.clone());
            tasks.spawn(async move {
                let mut batch = WriteBatch::new();
                let claimer = w < CLAIMERS;
                if claimer {
                    batch.require(slot.clone(), None);
                    batch.put(slot, w.to_string());
                    batch.put(format!("claim/{round:02}/{w}"), Bytes::new());
                } else if w < CLAIMERS + DOOMED {
                    batch.require(&b"never"[..], Some(Bytes::from_static(b"set")));
                    batch.put(slot, Bytes::from_static(b"doomed"));
                    batch.delete_range(&b"claim/"[..], Bytes::new());
                } else {
                    batch.put(format!("plain/{round:02}/{w}"), Bytes::new());
                }
                start.wait().await;
                let applied = write_or_conflict(&*store, batch, &format!("round {round}")).await;
                (w, claimer, applied)
            });
        }
        let mut winners = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            let (w, claimer, applied) = joined.expect("writer task panicked");
            match (claimer, applied, w < CLAIMERS + DOOMED) {
                (true, true, _) => winners.push(w),
                (false, true, true) => {
                    panic!("round {round}: a batch whose guard never holds applied")
                }
                (false, false, false) => panic!("round {round}: an unguarded batch conflicted"),
                _ => {}
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one create of {slot} wins");
        let winner = winners[0];
        assert_eq!(get(&*store, slot.as_bytes()).await, Some(Bytes::from(winner.to_string())));
        let prefix = format!("claim/{round:02}/");
        let claims = scan(&*store, prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 10).await;
        assert_eq!(keys(&claims), vec![format!("{prefix}{winner}").into_bytes()], "round {round}");
        let prefix = format!("plain/{round:02}/");
        let plain = scan(&*store, prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 10).await;
        assert_eq!(plain.len(), PLAIN as usize, "round {round}: every plain write lands");
    }
}

// ---------------------------------------------------------------------------------------------
// Write limits

/// For a store with finite [`Store::limits`]: a batch at the limits applies; a batch over them
/// (in operations, guards counted, or in bytes) fails with `InvalidInput` and applies nothing.
/// For an unlimited store (or limits too large to reach in a test), a batch of 10 000
/// operations simply applies. Stores' suites run it either way; a
/// store with finite limits runs it on its own as well (see `FaultyStore::with_limits`).
pub async fn batch_over_limits_is_refused_and_applies_nothing(store: Arc<dyn Store>) {
    /// Limits beyond these are too large to build a batch over in a test: treated as unlimited.
    const TESTABLE_OPS: usize = 1 << 16;
    const TESTABLE_BYTES: usize = 16 << 20;
    let limits = store.limits();
    put(&*store, b"fence", b"1").await;
    let before = scan_all(&*store).await;
    let refused = |batch: WriteBatch, context: &'static str| {
        let store = Arc::clone(&store);
        let before = before.clone();
        async move {
            assert!(!limits.admits_batch(&batch), "{context}: the batch should be over the limits");
            match store.write(batch).await {
                Err(e) => assert_eq!(e.kind, StoreErrorKind::InvalidInput, "{context}: {e}"),
                Ok(()) => panic!("{context}: a batch over {limits:?} was applied"),
            }
            assert_eq!(scan_all(&*store).await, before, "{context}: a refused batch applied");
        }
    };
    // Small puts, `n` of them: `l/000000` = "" (8 bytes each).
    let puts = |n: usize| {
        let mut batch = WriteBatch::new();
        for i in 0..n {
            batch.put(format!("l/{i:06}"), Bytes::new());
        }
        batch
    };
    // The largest batch of small puts to check that a batch within the limits applies whole.
    let mut fits_ops = 10_000;
    if limits.max_ops < TESTABLE_OPS {
        refused(puts(limits.max_ops + 1), "one operation too many").await;
        // Guards count as operations, even guards that hold.
        let mut with_guard = puts(limits.max_ops);
        with_guard.require(&b"fence"[..], Some(Bytes::from_static(b"1")));
        refused(with_guard, "a guard too many").await;
        fits_ops = fits_ops.min(limits.max_ops);
    }
    if limits.max_bytes < TESTABLE_BYTES {
        let mut big = WriteBatch::new();
        big.put(&b"big"[..], vec![0u8; limits.max_bytes.saturating_sub(2)]);
        refused(big, "one byte too many").await;
        fits_ops = fits_ops.min(limits.max_bytes / 8);
    }
    let fitting = puts(fits_ops);
    assert!(limits.admits_batch(&fitting), "a batch within {limits:?}");
    let applied = fitting.len();
    write(&*store, fitting).await;
    let written = scan(&*store, b"l/", &prefix_end(b"l/"), usize::MAX).await;
    assert_eq!(written.len(), applied, "a batch at the limits applies whole");
}

// ---------------------------------------------------------------------------------------------
// Model-based

/// Seeds of [`model_based_random_ops_match_btreemap`]; a failure names the seed and step.
pub const MODEL_SEEDS: [u64; 5] = [0, 1, 7, 42, 0x1b05_5eed_cafe_f00d];
/// Random operations per seed.
pub const MODEL_STEPS: usize = 400;

#[derive(Debug, Clone)]
enum ModelOp {
    Write(WriteBatch),
    Get(Vec<u8>),
    Scan { start: Vec<u8>, end: Vec<u8>, limit: usize },
}

/// A key from a small alphabet rich in edge bytes, so that operations collide and ordering
/// edges (0x00, 0xff, prefixes) come up often. Never empty.
fn random_key(rng: &mut ChaCha8Rng) -> Vec<u8> {
    const ALPHABET: [u8; 6] = [0x00, 0x01, b'a', 0x7f, 0xfe, 0xff];
    let len = rng.gen_range(1..=3);
    (0..len).map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())]).collect()
}

/// A range end: usually a key, sometimes empty ("no upper bound").
fn random_end(rng: &mut ChaCha8Rng) -> Vec<u8> {
    if rng.gen_bool(0.15) {
        Vec::new()
    } else {
        random_key(rng)
    }
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn random_batch(rng: &mut ChaCha8Rng, model: &Model) -> WriteBatch {
    let mut batch = WriteBatch::new();
    // Sometimes guards: mostly on what the model holds (so they hold), sometimes not.
    if rng.gen_bool(0.25) {
        for _ in 0..rng.gen_range(1..=2) {
            let key = random_key(rng);
            let expected = match rng.gen_range(0..10) {
                0..=6 => model.get(&key).cloned(),
                7 => None,
                _ => Some(vec![rng.gen_range(0..4)]),
            };
            batch.require(key, expected.map(Bytes::from));
        }
    }
    // Mostly small batches, sometimes empty ones.
    for _ in 0..rng.gen_range(0..=6) {
        match rng.gen_range(0..10) {
            0..=5 => {
                let len = rng.gen_range(0..=4);
                let value: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                batch.put(random_key(rng), value);
            }
            6..=8 => batch.delete(random_key(rng)),
            _ => batch.delete_range(random_key(rng), random_end(rng)),
        }
    }
    batch
}

fn random_op(rng: &mut ChaCha8Rng, model: &Model) -> ModelOp {
    match rng.gen_range(0..10) {
        0..=4 => ModelOp::Write(random_batch(rng, model)),
        5..=6 => ModelOp::Get(random_key(rng)),
        _ => ModelOp::Scan {
            start: if rng.gen_bool(0.1) { Vec::new() } else { random_key(rng) },
            end: random_end(rng),
            limit: if rng.gen_bool(0.3) { usize::MAX } else { rng.gen_range(0..6) },
        },
    }
}

fn model_apply(model: &mut BTreeMap<Vec<u8>, Vec<u8>>, batch: &WriteBatch) {
    for op in batch.ops() {
        match op {
            BatchOp::Put { key, value } => {
                model.insert(key.to_vec(), value.to_vec());
            }
            BatchOp::Delete { key } => {
                model.remove(&key[..]);
            }
            BatchOp::DeleteRange { start, end } => {
                if let Some(range) = range_bounds(start, end) {
                    let doomed: Vec<Vec<u8>> =
                        model.range::<[u8], _>(range).map(|(k, _)| k.clone()).collect();
                    for k in doomed {
                        model.remove(&k);
                    }
                }
            }
        }
    }
}

fn model_scan(
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    start: &[u8],
    end: &[u8],
    limit: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    match range_bounds(start, end) {
        Some(range) => {
            model.range::<[u8], _>(range).take(limit).map(|(k, v)| (k.clone(), v.clone())).collect()
        }
        None => Vec::new(),
    }
}

fn owned(kvs: Vec<KeyValue>) -> Vec<(Vec<u8>, Vec<u8>)> {
    kvs.into_iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
}

/// Random writes (some guarded), gets and scans against the store and a `BTreeMap` model, for
/// each of [`MODEL_SEEDS`]; a write must succeed exactly when its guards hold in the model (and
/// otherwise conflict), and every read and, after every write, the whole contents must match.
pub async fn model_based_random_ops_match_btreemap(store: Arc<dyn Store>) {
    for (run, seed) in MODEL_SEEDS.into_iter().enumerate() {
        // Each seed starts from an empty store: clear what the previous seed left.
        if run > 0 {
            let mut clear = WriteBatch::new();
            for (key, _) in scan_all(&*store).await {
                clear.delete(key);
            }
            write(&*store, clear).await;
            assert!(scan_all(&*store).await.is_empty(), "seed {seed}: store not cleared");
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut model = BTreeMap::new();
        for step in 0..MODEL_STEPS {
            let op = random_op(&mut rng, &model);
            match &op {
                ModelOp::Write(batch) => {
                    let holds = batch
                        .guards()
                        .iter()
                        .all(|g| g.holds(model.get(&g.key[..]).map(Vec::as_slice)));
                    match store.write(batch.clone()).await {
                        Ok(()) if holds => model_apply(&mut model, batch),
                        Err(e) if !holds && e.kind == StoreErrorKind::Conflict => {}
                        outcome => panic!(
                            "seed {seed} step {step}: {op:?}: guards hold: {holds}, got {outcome:?}"
                        ),
                    }
                    let actual = owned(scan_all(&*store).await);
                    let expected: Vec<_> = model.clone().into_iter().collect();
                    assert_eq!(actual, expected, "seed {seed} step {step}: contents after {op:?}");
                }
                ModelOp::Get(key) => {
                    let actual = get(&*store, key).await.map(|v| v.to_vec());
                    assert_eq!(actual, model.get(key).cloned(), "seed {seed} step {step}: {op:?}");
                }
                ModelOp::Scan { start, end, limit } => {
                    let actual = owned(scan(&*store, start, end, *limit).await);
                    let expected = model_scan(&model, start, end, *limit);
                    assert_eq!(actual, expected, "seed {seed} step {step}: {op:?}");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Durability (opt-in)

/// What a durability case takes: a factory that opens a store at a directory, and opens it
/// again there after it was closed. Every `Fn(PathBuf) -> impl Future<Output = Arc<S>>` is one.
pub trait OpenAt {
    type Store: Store + ?Sized;
    type Opening: Future<Output = Arc<Self::Store>>;

    /// Opens the store at `dir`.
    fn open_at(&self, dir: PathBuf) -> Self::Opening;
}

impl<F, Fut, S> OpenAt for F
where
    F: Fn(PathBuf) -> Fut,
    Fut: Future<Output = Arc<S>>,
    S: Store + ?Sized,
{
    type Store = S;
    type Opening = Fut;

    fn open_at(&self, dir: PathBuf) -> Fut {
        self(dir)
    }
}

/// Drops the last reference to a store so that it closes before being opened again.
fn close<S: Store + ?Sized>(store: Arc<S>) {
    assert_eq!(
        Arc::strong_count(&store),
        1,
        "the suite holds the only reference, so dropping it must close the store"
    );
    drop(store);
}

pub async fn data_survives_reopen(open_at: impl OpenAt) {
    let dir = TempDir::new("durability");
    let open = || open_at.open_at(dir.path().to_path_buf());
    let store = open().await;
    put_all(&*store, &[(b"a", b"1"), (b"b", b"2"), (b"\xff", b"3")]).await;
    put(&*store, b"b", b"22").await;
    put(&*store, b"empty", b"").await;
    close(store);

    let store = open().await;
    let expected = pairs(&[(b"a", b"1"), (b"b", b"22"), (b"empty", b""), (b"\xff", b"3")]);
    assert_eq!(scan_all(&*store).await, expected);
    assert_eq!(get(&*store, b"b").await.as_deref(), Some(&b"22"[..]));
    // Writes after a reopen survive the next one too.
    put(&*store, b"c", b"4").await;
    close(store);

    let store = open().await;
    assert_eq!(
        scan_all(&*store).await,
        pairs(&[(b"a", b"1"), (b"b", b"22"), (b"c", b"4"), (b"empty", b""), (b"\xff", b"3")])
    );
    close(store);
}

pub async fn batch_survives_reopen_atomically(open_at: impl OpenAt) {
    let dir = TempDir::new("durability");
    let open = || open_at.open_at(dir.path().to_path_buf());
    let store = open().await;
    let mut model = BTreeMap::new();
    let mut first = WriteBatch::new();
    for i in 0..500u32 {
        first.put(format!("k/{i:04}"), i.to_be_bytes().to_vec());
    }
    write(&*store, first.clone()).await;
    model_apply(&mut model, &first);
    // One batch that overwrites, deletes, deletes a range and puts again into it.
    let mut second = WriteBatch::new();
    for i in (0..500u32).step_by(3) {
        second.put(format!("k/{i:04}"), b"overwritten".to_vec());
    }
    for i in (1..500u32).step_by(7) {
        second.delete(format!("k/{i:04}"));
    }
    second.delete_range(&b"k/01"[..], &b"k/02"[..]);
    second.put(&b"k/0150"[..], &b"again"[..]);
    second.put(&b"later"[..], vec![0u8; 64 * 1024]);
    write(&*store, second.clone()).await;
    model_apply(&mut model, &second);
    let expected: Vec<_> = model.into_iter().collect();
    assert_eq!(owned(scan_all(&*store).await), expected, "before reopen");
    close(store);

    let store = open().await;
    assert_eq!(owned(scan_all(&*store).await), expected, "after reopen");
    close(store);
}

pub async fn delete_range_survives_reopen(open_at: impl OpenAt) {
    let dir = TempDir::new("durability");
    let open = || open_at.open_at(dir.path().to_path_buf());
    let store = open().await;
    let mut batch = WriteBatch::new();
    for i in 0..100u32 {
        batch.put(format!("r/{i:03}"), b"v".to_vec());
    }
    batch.put(&b"q"[..], &b"before"[..]);
    batch.put(&b"s"[..], &b"after"[..]);
    write(&*store, batch).await;
    close(store);

    // Delete a range of keys that were written before the reopen (so already persisted).
    let store = open().await;
    let mut batch = WriteBatch::new();
    batch.delete_range(&b"r/"[..], prefix_end(b"r/"));
    write(&*store, batch).await;
    close(store);

    let store = open().await;
    assert_eq!(scan_all(&*store).await, pairs(&[(b"q", b"before"), (b"s", b"after")]));
    assert!(scan(&*store, b"r/", &prefix_end(b"r/"), usize::MAX).await.is_empty());
    close(store);
}
