//! The fault behaviour of `FaultyStore`, over a `MemoryStore`.

use std::sync::Arc;

use bytes::Bytes;
use ironbus_core::store::{
    prefix_end, Store, StoreError, StoreErrorKind, StoreHealth, WriteBatch, WriteLimits,
};
use ironbus_core::testing::{FaultyStore, LimitedStore};
use ironbus_store_memory::MemoryStore;

/// A `FaultyStore` over a memory store holding `a/1`, `b/1`, `b/2`, `c/1`.
async fn faulty() -> Arc<FaultyStore> {
    let store = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())));
    let mut batch = WriteBatch::new();
    for key in ["a/1", "b/1", "b/2", "c/1"] {
        batch.put(key, "v");
    }
    store.write(batch).await.unwrap();
    store
}

fn put(key: &str, value: &str) -> WriteBatch {
    let mut batch = WriteBatch::new();
    batch.put(key.to_owned(), value.to_owned());
    batch
}

#[track_caller]
fn assert_unavailable<T: std::fmt::Debug>(result: Result<T, StoreError>) {
    let err = result.expect_err("expected an injected failure");
    assert_eq!(err.kind, StoreErrorKind::Unavailable, "{err}");
    assert!(err.is_retriable());
}

/// The keys in the inner store, bypassing the faults.
async fn inner_keys(store: &FaultyStore) -> Vec<String> {
    let all = store.inner().scan(b"", b"", usize::MAX).await.unwrap();
    all.into_iter().map(|(k, _)| String::from_utf8(k.to_vec()).unwrap()).collect()
}

#[tokio::test]
async fn no_fault_passes_everything_through() {
    let store = faulty().await;
    assert_eq!(store.health(), StoreHealth::Healthy);
    assert_eq!(store.get(b"a/1").await.unwrap(), Some(Bytes::from("v")));
    assert_eq!(store.scan(b"b/", &prefix_end(b"b/"), 10).await.unwrap().len(), 2);
    store.write(put("d/1", "w")).await.unwrap();
    assert_eq!(store.inner().get(b"d/1").await.unwrap(), Some(Bytes::from("w")));
    assert_eq!(store.injected_failures(), 0);
}

#[tokio::test]
async fn whole_store_outage_fails_every_call_and_reports_unavailable() {
    let store = faulty().await;
    store.set_unavailable(true);
    assert_eq!(store.health(), StoreHealth::Unavailable);
    assert_unavailable(store.get(b"a/1").await);
    assert_unavailable(store.get(b"missing").await);
    assert_unavailable(store.scan(b"", b"", usize::MAX).await);
    assert_unavailable(store.scan(b"x", b"y", 1).await);
    assert_unavailable(store.write(put("d/1", "w")).await);
    assert_unavailable(store.write(WriteBatch::new()).await);
    assert_eq!(store.injected_failures(), 6);
    assert_eq!(inner_keys(&store).await, ["a/1", "b/1", "b/2", "c/1"], "the write applied nothing");

    store.set_unavailable(false);
    assert_eq!(store.health(), StoreHealth::Healthy);
    assert_eq!(store.get(b"a/1").await.unwrap(), Some(Bytes::from("v")));
    store.write(put("d/1", "w")).await.unwrap();
    assert_eq!(inner_keys(&store).await, ["a/1", "b/1", "b/2", "c/1", "d/1"]);
}

#[tokio::test]
async fn prefix_outage_fails_only_operations_touching_the_prefix() {
    let store = faulty().await;
    store.fail_prefix("b/");
    assert_eq!(store.health(), StoreHealth::Healthy, "one failed prefix is not a store outage");

    // Gets.
    assert_unavailable(store.get(b"b/1").await);
    assert_unavailable(store.get(b"b/missing").await);
    assert_unavailable(store.get(b"b/").await);
    assert_eq!(store.get(b"a/1").await.unwrap(), Some(Bytes::from("v")));
    assert_eq!(store.get(b"b").await.unwrap(), None, "a key shorter than the prefix is outside it");

    // Scans: any overlap fails, whatever the limit; ranges beside the prefix work.
    assert_unavailable(store.scan(b"b/", &prefix_end(b"b/"), 10).await);
    assert_unavailable(store.scan(b"a", b"c", 1).await);
    assert_unavailable(store.scan(b"", b"", usize::MAX).await);
    assert_unavailable(store.scan(b"b/5", b"", 10).await);
    assert_eq!(store.scan(b"a", b"b/", 10).await.unwrap().len(), 1, "end exclusive at the prefix");
    assert_eq!(store.scan(&prefix_end(b"b/"), b"", 10).await.unwrap().len(), 1);
    assert!(store.scan(b"c", b"a", 10).await.unwrap().is_empty(), "an empty range touches nothing");

    // Writes: puts, deletes and delete ranges inside fail; others pass.
    assert_unavailable(store.write(put("b/3", "w")).await);
    let mut delete = WriteBatch::new();
    delete.delete(&b"b/1"[..]);
    assert_unavailable(store.write(delete).await);
    let mut range = WriteBatch::new();
    range.delete_range(&b"a"[..], &b"z"[..]);
    assert_unavailable(store.write(range).await);
    store.write(put("a/2", "w")).await.unwrap();
    let mut beside = WriteBatch::new();
    beside.delete_range(&b"c/"[..], Bytes::new());
    store.write(beside).await.unwrap();
    assert_eq!(inner_keys(&store).await, ["a/1", "a/2", "b/1", "b/2"]);
    assert_eq!(store.injected_failures(), 10);
}

#[tokio::test]
async fn batch_touching_a_failed_prefix_applies_nothing() {
    let store = faulty().await;
    store.fail_prefix("b/");
    let mut batch = WriteBatch::new();
    batch.put(&b"a/2"[..], &b"w"[..]);
    batch.delete(&b"c/1"[..]);
    batch.put(&b"b/3"[..], &b"w"[..]);
    batch.put(&b"d/1"[..], &b"w"[..]);
    assert_unavailable(store.write(batch.clone()).await);
    assert_eq!(inner_keys(&store).await, ["a/1", "b/1", "b/2", "c/1"]);

    store.heal_prefix("b/");
    store.write(batch).await.unwrap();
    assert_eq!(inner_keys(&store).await, ["a/1", "a/2", "b/1", "b/2", "b/3", "d/1"]);
}

#[tokio::test]
async fn all_ff_prefix_covers_keys_up_to_the_end() {
    let store = faulty().await;
    store.fail_prefix(vec![0xff]);
    assert_unavailable(store.get(b"\xff\x00").await);
    assert_unavailable(store.scan(b"c", b"", 10).await);
    assert_eq!(store.scan(b"c", b"\xff", 10).await.unwrap().len(), 1);
    assert_eq!(store.get(b"\xfe\xff").await.unwrap(), None);
}

#[tokio::test]
async fn fail_next_writes_fails_exactly_that_many_writes() {
    let store = faulty().await;
    store.fail_next_writes(2);
    assert_eq!(store.health(), StoreHealth::Healthy);
    assert_unavailable(store.write(put("d/1", "w")).await);
    // Reads are unaffected and use up nothing.
    assert_eq!(store.get(b"a/1").await.unwrap(), Some(Bytes::from("v")));
    assert_eq!(store.scan(b"", b"", usize::MAX).await.unwrap().len(), 4);
    assert_unavailable(store.write(put("d/2", "w")).await);
    assert_eq!(inner_keys(&store).await, ["a/1", "b/1", "b/2", "c/1"], "failed writes applied");
    store.write(put("d/3", "w")).await.unwrap();
    assert_eq!(inner_keys(&store).await, ["a/1", "b/1", "b/2", "c/1", "d/3"]);
    assert_eq!(store.writes(), 4, "the setup write and three more");
    assert_eq!(store.injected_failures(), 2);
}

#[tokio::test]
async fn writes_failed_by_another_fault_do_not_use_up_pending_failures() {
    let store = faulty().await;
    store.fail_next_writes(1);
    store.fail_prefix("b/");
    assert_unavailable(store.write(put("b/3", "w")).await);
    store.set_unavailable(true);
    assert_unavailable(store.write(put("d/1", "w")).await);
    store.set_unavailable(false);
    assert_unavailable(store.write(put("d/1", "w")).await);
    store.write(put("d/1", "w")).await.unwrap();
    assert_eq!(inner_keys(&store).await, ["a/1", "b/1", "b/2", "c/1", "d/1"]);
}

#[tokio::test]
async fn fail_next_writes_zero_cancels_pending_failures() {
    let store = faulty().await;
    store.fail_next_writes(3);
    store.fail_next_writes(0);
    store.write(put("d/1", "w")).await.unwrap();
}

#[tokio::test]
async fn heal_prefix_heals_only_that_prefix() {
    let store = faulty().await;
    store.fail_prefix("a/");
    store.fail_prefix(b"b/".to_vec());
    store.heal_prefix("a/");
    assert_eq!(store.get(b"a/1").await.unwrap(), Some(Bytes::from("v")));
    assert_unavailable(store.get(b"b/1").await);
    // Healing a prefix that never failed changes nothing.
    store.heal_prefix("zzz");
    assert_unavailable(store.get(b"b/1").await);
    store.heal_prefix(b"b/");
    assert_eq!(store.get(b"b/1").await.unwrap(), Some(Bytes::from("v")));
}

#[tokio::test]
async fn heal_all_ends_every_fault() {
    let store = faulty().await;
    store.set_unavailable(true);
    store.fail_prefix("a/");
    store.fail_next_writes(5);
    store.heal_all();
    assert_eq!(store.health(), StoreHealth::Healthy);
    assert_eq!(store.get(b"a/1").await.unwrap(), Some(Bytes::from("v")));
    store.write(put("a/2", "w")).await.unwrap();
    assert_eq!(inner_keys(&store).await, ["a/1", "a/2", "b/1", "b/2", "c/1"]);
}

#[tokio::test]
async fn counters_count_calls_including_failed_ones() {
    let store = faulty().await;
    store.get(b"a/1").await.unwrap();
    store.set_unavailable(true);
    let _ = store.get(b"a/1").await;
    let _ = store.scan(b"", b"", 1).await;
    let _ = store.write(WriteBatch::new()).await;
    assert_eq!((store.gets(), store.scans(), store.writes()), (2, 1, 2));
    assert_eq!(store.injected_failures(), 3);
}

#[tokio::test]
async fn code_under_test_sees_faults_through_dyn_store() {
    let faulty = faulty().await;
    let store: Arc<dyn Store> = faulty.clone();
    faulty.fail_prefix("a/");
    assert_unavailable(store.get(b"a/1").await);
    faulty.heal_all();
    assert!(store.get(b"a/1").await.unwrap().is_some());
}

#[tokio::test]
async fn guards_pass_through_to_the_inner_store() {
    let store = faulty().await;
    let guarded = |expected: &'static str| {
        let mut batch = put("d/1", "w");
        batch.require(&b"a/1"[..], Some(Bytes::from_static(expected.as_bytes())));
        batch
    };
    let err = store.write(guarded("other")).await.expect_err("the guard does not hold");
    assert_eq!(err.kind, StoreErrorKind::Conflict, "{err}");
    assert_eq!(inner_keys(&store).await, ["a/1", "b/1", "b/2", "c/1"]);
    store.write(guarded("v")).await.unwrap();
    assert_eq!(inner_keys(&store).await, ["a/1", "b/1", "b/2", "c/1", "d/1"]);
    assert_eq!(store.injected_failures(), 0, "a conflict is not an injected fault");
}

#[tokio::test]
async fn a_guard_on_a_failed_prefix_fails_the_write() {
    let store = faulty().await;
    store.fail_prefix("b/");
    let mut batch = put("d/1", "w");
    batch.require(&b"b/1"[..], Some(Bytes::from_static(b"v")));
    assert_unavailable(store.write(batch.clone()).await);
    assert_eq!(inner_keys(&store).await, ["a/1", "b/1", "b/2", "c/1"]);
    store.heal_prefix("b/");
    store.write(batch).await.unwrap();
    assert_eq!(inner_keys(&store).await, ["a/1", "b/1", "b/2", "c/1", "d/1"]);
}

#[tokio::test]
async fn limits_are_the_inner_stores_and_an_over_limit_batch_is_no_injected_fault() {
    let limits = WriteLimits { max_ops: 2, max_bytes: 16 };
    let store = Arc::new(FaultyStore::new(Arc::new(LimitedStore::new(
        Arc::new(MemoryStore::new()),
        limits,
    ))));
    assert_eq!(store.limits(), limits);
    assert_eq!(
        FaultyStore::new(Arc::new(MemoryStore::new())).limits(),
        WriteLimits::UNLIMITED,
        "the memory store has none"
    );
    let mut three = put("a", "1");
    three.put(&b"b"[..], &b"2"[..]);
    three.require(&b"c"[..], None);
    let err = store.write(three).await.expect_err("three operations and guards");
    assert_eq!(err.kind, StoreErrorKind::InvalidInput, "{err}");
    assert_eq!(store.injected_failures(), 0, "the inner store refused it");
    store.fail_next_writes(1);
    assert_unavailable(store.write(put("a", "1")).await);
    store.write(put("a", "1")).await.unwrap();
    assert_eq!(inner_keys(&store).await, ["a"]);
}
