//! The stores the broker opens: RocksDB in `--data-dir` (one instance per `--stores`), tables
//! `ironbus_store_<i>` in the PostgreSQL database of `--postgres-url`, or memory.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use ironbus_core::Store;
use ironbus_store_memory::MemoryStore;
use ironbus_store_postgres::{PostgresOptions, PostgresStore};
use ironbus_store_rocksdb::{Durability, RocksOptions, RocksStore};

use crate::ServerError;

/// The storage options.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// Storage engine: `rocksdb` (durable: a send is acknowledged once synced to disk),
    /// `postgres` (durable: acknowledged once PostgreSQL committed it; see `--postgres-url`) or
    /// `memory` (nothing survives a restart).
    #[arg(long, env = "IRONBUS_STORE", value_enum, default_value_t = StoreKind::Rocksdb)]
    pub store: StoreKind,
    /// Data directory of durable stores (store `i` lives in `<data-dir>/store-<i>`).
    #[arg(long, env = "IRONBUS_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
    /// The PostgreSQL database of `--store postgres`, as libpq takes it: a URL
    /// (`postgresql://user:password@host/db`) or `key=value` pairs; several hosts with
    /// `target_session_attrs=read-write` find a promoted standby. Store `i` is table
    /// `ironbus_store_<i>`, created if missing.
    #[arg(long, env = "IRONBUS_POSTGRES_URL", required_if_eq("store", "postgres"))]
    pub postgres_url: Option<String>,
    /// Number of store instances the partitions are spread over (RocksDB directories, or
    /// PostgreSQL tables). One store's failure makes only its partitions unavailable; each
    /// RocksDB store has its own write-ahead log (put the directories on different disks with
    /// symlinks). Fixed once the first store holds data.
    #[arg(long, env = "IRONBUS_STORES", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub stores: u16,
    /// `sync`: a write is acknowledged once the write-ahead log is synced (concurrent writes
    /// share one sync). `relaxed`: once it is in the log, unsynced — survives the process being
    /// killed, but not an operating-system crash or power loss.
    #[arg(long, env = "IRONBUS_DURABILITY", value_enum, default_value_t = DurabilityArg::Sync)]
    pub durability: DurabilityArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    Rocksdb,
    Postgres,
    Memory,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DurabilityArg {
    Sync,
    Relaxed,
}

impl StoreArgs {
    /// Opens the `--stores` store instances; `cluster`: for a node of a cluster, whose
    /// partition writes are fenced (a lone server's PostgreSQL stores first wait for the
    /// writes of a predecessor that may still be committing).
    pub async fn open(&self, cluster: bool) -> Result<Vec<Arc<dyn Store>>, ServerError> {
        match self.store {
            StoreKind::Rocksdb => self.open_rocksdb(),
            StoreKind::Postgres => self.open_postgres(cluster).await,
            StoreKind::Memory => Ok((0..self.stores)
                .map(|_| Arc::new(MemoryStore::new()) as Arc<dyn Store>)
                .collect()),
        }
    }

    /// `<data-dir>/store-<i>`.
    fn open_rocksdb(&self) -> Result<Vec<Arc<dyn Store>>, ServerError> {
        if self.durability == DurabilityArg::Relaxed {
            tracing::warn!(
                "--durability relaxed: acknowledged messages survive a crash of ironbus, but not \
                 of the operating system or a power loss"
            );
        }
        (0..self.stores)
            .map(|i| -> Result<Arc<dyn Store>, ServerError> {
                let dir = self.data_dir.join(format!("store-{i}"));
                if let Err(source) = std::fs::create_dir_all(&dir) {
                    return Err(ServerError::CreateDir { path: dir, source });
                }
                let options = RocksOptions {
                    durability: match self.durability {
                        DurabilityArg::Sync => Durability::Sync,
                        DurabilityArg::Relaxed => Durability::Relaxed,
                    },
                    ..RocksOptions::default()
                };
                match RocksStore::open(&dir, options) {
                    Ok(store) => Ok(Arc::new(store)),
                    Err(source) => Err(ServerError::OpenStore { path: dir, source }),
                }
            })
            .collect()
    }

    /// Tables `ironbus_store_0` to `ironbus_store_<N-1>` in the database of `--postgres-url`.
    async fn open_postgres(&self, cluster: bool) -> Result<Vec<Arc<dyn Store>>, ServerError> {
        let Some(url) = self.postgres_url.as_deref() else {
            return Err(ServerError::MissingPostgresUrl);
        };
        let mut stores: Vec<Arc<dyn Store>> = Vec::with_capacity(usize::from(self.stores));
        for i in 0..self.stores {
            let options = PostgresOptions {
                wait_for_writers: !cluster,
                ..PostgresOptions::with_table(format!("ironbus_store_{i}"))
            };
            let table = options.table.clone();
            match PostgresStore::connect(url, options).await {
                Ok(store) => stores.push(Arc::new(store)),
                Err(source) => return Err(ServerError::OpenPostgres { table, source }),
            }
        }
        Ok(stores)
    }
}
