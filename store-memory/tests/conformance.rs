//! The store conformance suite, run against `MemoryStore` and against a `FaultyStore` with no
//! fault active (which must be indistinguishable from the store it wraps).

use std::sync::Arc;

use ironbus_core::testing::FaultyStore;
use ironbus_store_memory::MemoryStore;

ironbus_core::store_conformance_suite!(memory, || async { Arc::new(MemoryStore::new()) });
ironbus_core::store_conformance_suite!(faulty_memory, || async {
    Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())))
});
