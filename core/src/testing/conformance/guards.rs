//! Guarded batches: a batch applies only if every guard holds, checked atomically with it,
//! and a store's write limits.

use super::*;

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
