//! What a caller can choose when opening a [`RocksStore`](crate::RocksStore).

/// When an acknowledged write is safe. See the crate docs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    /// Every acknowledged write has been synced to the write-ahead log: it survives a process
    /// crash, an operating-system crash and a power loss. Concurrent writes share one sync.
    #[default]
    Sync,
    /// Every acknowledged write is in the write-ahead log but not synced: it survives the
    /// process being killed, but the last writes before an operating-system crash or a power
    /// loss may be lost. A clean close syncs the log. Never the default.
    Relaxed,
}

/// Options for [`RocksStore::open`](crate::RocksStore::open).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RocksOptions {
    /// When a write is acknowledged. Default: [`Durability::Sync`].
    pub durability: Durability,
    /// Size of one memtable (RocksDB's `write_buffer_size`). Default: 32 MiB.
    pub write_buffer_bytes: usize,
    /// Size of the block cache for reads. Default: 64 MiB.
    pub block_cache_bytes: usize,
}

impl Default for RocksOptions {
    fn default() -> Self {
        Self {
            durability: Durability::Sync,
            write_buffer_bytes: 32 << 20,
            block_cache_bytes: 64 << 20,
        }
    }
}

impl RocksOptions {
    /// The RocksDB options these stand for, with the broker's fixed choices: create if
    /// missing, write-ahead log on with point-in-time recovery, LZ4, bloom filters.
    pub(crate) fn to_rocksdb(&self) -> rocksdb::Options {
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_block_cache(&rocksdb::Cache::new_lru_cache(self.block_cache_bytes));
        table.set_bloom_filter(10.0, false);
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        opts.set_block_based_table_factory(&table);
        opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
        opts.set_write_buffer_size(self.write_buffer_bytes);
        opts.set_max_write_buffer_number(3);
        opts.set_max_background_jobs(2);
        opts.set_level_compaction_dynamic_level_bytes(true);
        // Spread the syncs of flushes and compactions instead of one large sync per file.
        opts.set_bytes_per_sync(1 << 20);
        opts.set_wal_recovery_mode(rocksdb::DBRecoveryMode::PointInTime);
        opts.set_keep_log_file_num(4);
        // Reuse finished write-ahead-log files instead of creating new ones: a synced write to a
        // recycled file only overwrites blocks the file already has, so the sync need not also
        // commit file-system metadata (the file's new size and extents). RocksDB writes
        // recycled logs in a record format that tells old records from new, which
        // point-in-time recovery needs.
        opts.set_recycle_log_file_num(4);
        opts
    }
}
