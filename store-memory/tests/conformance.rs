//! The store conformance suite, run against `MemoryStore`, against a `FaultyStore` with no fault
//! active (which must be indistinguishable from the store it wraps), and against a `LimitedStore`
//! imposing write limits (roomy enough for every case's batches, so that the limits case runs
//! against finite limits and every other case still applies). The limits case also runs alone
//! against tight limits, and is checked to catch a store that ignores its own limits.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use ironbus_core::store::{KeyValue, Store, StoreError, StoreHealth, WriteBatch, WriteLimits};
use ironbus_core::testing::{conformance, FaultyStore, LimitedStore};
use ironbus_store_memory::MemoryStore;

ironbus_core::store_conformance_suite!(memory, || async { Arc::new(MemoryStore::new()) });
ironbus_core::store_conformance_suite!(faulty_memory, || async {
    Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())))
});
ironbus_core::store_conformance_suite!(limited_memory, || async {
    Arc::new(limited(WriteLimits { max_ops: 1024, max_bytes: 2 << 20 }))
});

fn limited(limits: WriteLimits) -> LimitedStore {
    LimitedStore::new(Arc::new(MemoryStore::new()), limits)
}

#[tokio::test]
async fn limits_case_runs_against_tight_limits() {
    for limits in [
        WriteLimits { max_ops: 3, max_bytes: 64 },
        WriteLimits { max_ops: 1, max_bytes: usize::MAX },
        WriteLimits { max_ops: usize::MAX, max_bytes: 100 },
    ] {
        conformance::batch_over_limits_is_refused_and_applies_nothing(Arc::new(limited(limits)))
            .await;
    }
}

/// Reports limits but applies any batch.
#[derive(Debug, Default)]
struct IgnoresItsLimits(MemoryStore);

#[async_trait]
impl Store for IgnoresItsLimits {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        self.0.get(key).await
    }

    async fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StoreError> {
        self.0.scan(start, end, limit).await
    }

    async fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        self.0.write(batch).await
    }

    fn limits(&self) -> WriteLimits {
        WriteLimits { max_ops: 4, max_bytes: 1024 }
    }

    fn health(&self) -> StoreHealth {
        self.0.health()
    }
}

#[tokio::test]
#[should_panic(expected = "one operation too many: a batch over")]
async fn limits_case_catches_a_store_that_ignores_its_limits() {
    conformance::batch_over_limits_is_refused_and_applies_nothing(Arc::new(
        IgnoresItsLimits::default(),
    ))
    .await;
}

// A namespace's view of a store that other namespaces (and the default one, unprefixed) also
// hold keys in: the suite must see only its own.
ironbus_core::store_conformance_suite!(prefixed_memory, || async {
    let shared = Arc::new(MemoryStore::new());
    let mut others = WriteBatch::new();
    for key in [&b"a"[..], b"zz", b"\xff", b"\xffns\x00other\x00k", b"\xffns\x00t\x01", b"\xff\xff"]
    {
        others.put(Bytes::copy_from_slice(key), Bytes::from_static(b"not yours"));
    }
    shared.write(others).await.unwrap();
    Arc::new(ironbus_core::store::PrefixedStore::new(
        shared,
        ironbus_core::store::PrefixedStore::namespace_prefix("t"),
    ))
});

/// Limits that leave room for the prefix: a batch that fits the view fits the inner store.
#[tokio::test]
async fn a_prefixed_view_of_a_limited_store_sizes_its_limits_for_the_prefix() {
    use ironbus_core::store::PrefixedStore;
    let inner = Arc::new(limited(WriteLimits { max_ops: 1024, max_bytes: 64 << 10 }));
    let view = PrefixedStore::new(inner, PrefixedStore::namespace_prefix("limits"));
    let limits = view.limits();
    assert!(limits.max_ops <= 1024 && limits.max_bytes < 64 << 10, "{limits:?}");
    // A batch at the view's limits, of the smallest keys, is accepted by the inner store.
    let mut batch = WriteBatch::new();
    for i in 0..limits.max_ops {
        batch.delete_range(Bytes::from(format!("{i}")), Bytes::new());
    }
    assert!(limits.admits_batch(&batch));
    view.write(batch).await.expect("fits the inner store");
    conformance::batch_over_limits_is_refused_and_applies_nothing(Arc::new(view)).await;
}
