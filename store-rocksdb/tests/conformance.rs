//! The whole store conformance suite against `RocksStore`, durability cases included, in both
//! durability modes (a clean close must keep everything in either).

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use ironbus_core::store::{KeyValue, Store, StoreError, StoreHealth, WriteBatch};
use ironbus_core::testing::TempDir;
use ironbus_store_rocksdb::{Durability, RocksOptions, RocksStore};

fn open_at(dir: PathBuf, durability: Durability) -> RocksStore {
    RocksStore::open(dir, RocksOptions { durability, ..RocksOptions::default() }).unwrap()
}

/// A `RocksStore` in a directory of its own, removed after the store closes.
#[derive(Debug)]
struct ScratchStore {
    // Fields drop in order: the store closes before its directory goes.
    store: RocksStore,
    _dir: TempDir,
}

impl ScratchStore {
    fn open(durability: Durability) -> Arc<Self> {
        let dir = TempDir::new("rocks-conformance");
        Arc::new(Self { store: open_at(dir.path().to_path_buf(), durability), _dir: dir })
    }
}

#[async_trait]
impl Store for ScratchStore {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        self.store.get(key).await
    }

    async fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StoreError> {
        self.store.scan(start, end, limit).await
    }

    async fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        self.store.write(batch).await
    }

    fn health(&self) -> StoreHealth {
        self.store.health()
    }
}

ironbus_core::store_conformance_suite!(
    rocksdb,
    || async { ScratchStore::open(Durability::Sync) },
    durable: |dir: PathBuf| async move { Arc::new(open_at(dir, Durability::Sync)) },
);

ironbus_core::store_conformance_suite!(
    rocksdb_relaxed,
    || async { ScratchStore::open(Durability::Relaxed) },
    durable: |dir: PathBuf| async move { Arc::new(open_at(dir, Durability::Relaxed)) },
);
