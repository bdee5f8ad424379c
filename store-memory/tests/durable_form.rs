//! Exercises the durable form of `store_conformance_suite!` with a toy store that snapshots a
//! `MemoryStore` to a file after every write, and checks that the durability cases catch a
//! store that forgets its data.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use ironbus_core::store::{KeyValue, Store, StoreError, StoreHealth, WriteBatch};
use ironbus_core::testing::{conformance, TempDir};
use ironbus_store_memory::MemoryStore;

/// A `MemoryStore` saved whole to `<dir>/snapshot` after each write and loaded on open.
#[derive(Debug)]
struct SnapshotStore {
    file: PathBuf,
    memory: MemoryStore,
    writer: tokio::sync::Mutex<()>,
    /// The directory to remove with the store, when the store owns it.
    _owned_dir: Option<TempDir>,
}

impl SnapshotStore {
    async fn open(dir: &Path) -> Self {
        let file = dir.join("snapshot");
        let memory = MemoryStore::new();
        if let Ok(bytes) = std::fs::read(&file) {
            fn take(rest: &mut &[u8]) -> Bytes {
                let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
                let field = Bytes::copy_from_slice(&rest[4..4 + len]);
                *rest = &rest[4 + len..];
                field
            }
            let mut rest = &bytes[..];
            let mut batch = WriteBatch::new();
            while !rest.is_empty() {
                let key = take(&mut rest);
                batch.put(key, take(&mut rest));
            }
            memory.write(batch).await.unwrap();
        }
        Self { file, memory, writer: tokio::sync::Mutex::new(()), _owned_dir: None }
    }

    async fn open_owning(dir: TempDir) -> Self {
        let store = Self::open(dir.path()).await;
        Self { _owned_dir: Some(dir), ..store }
    }
}

#[async_trait]
impl Store for SnapshotStore {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        self.memory.get(key).await
    }

    async fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StoreError> {
        self.memory.scan(start, end, limit).await
    }

    async fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        let _writer = self.writer.lock().await;
        self.memory.write(batch).await?;
        let mut bytes = Vec::new();
        for (key, value) in self.memory.scan(b"", b"", usize::MAX).await? {
            for field in [key, value] {
                bytes.extend_from_slice(&u32::try_from(field.len()).unwrap().to_be_bytes());
                bytes.extend_from_slice(&field);
            }
        }
        let tmp = self.file.with_extension("tmp");
        std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, &self.file)).unwrap();
        Ok(())
    }

    fn health(&self) -> StoreHealth {
        self.memory.health()
    }
}

ironbus_core::store_conformance_suite!(
    snapshot,
    || async { Arc::new(SnapshotStore::open_owning(TempDir::new("snapshot-store")).await) },
    durable: |dir: PathBuf| async move { Arc::new(SnapshotStore::open(&dir).await) },
);

/// Opens a store that forgets: a new, empty `MemoryStore` whatever `dir` holds.
async fn open_forgetful(_dir: PathBuf) -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new())
}

#[tokio::test]
#[should_panic(expected = "assertion `left == right` failed")]
async fn data_survives_reopen_fails_for_a_store_that_forgets() {
    conformance::data_survives_reopen(open_forgetful).await;
}

#[tokio::test]
#[should_panic(expected = "after reopen")]
async fn batch_survives_reopen_fails_for_a_store_that_forgets() {
    conformance::batch_survives_reopen_atomically(open_forgetful).await;
}

#[tokio::test]
#[should_panic(expected = "assertion `left == right` failed")]
async fn delete_range_survives_reopen_fails_for_a_store_that_forgets() {
    conformance::delete_range_survives_reopen(open_forgetful).await;
}
