//! A large backlog on RocksDB: how much memory a queued message costs, how long a restart takes
//! to recover the backlog, and how fast the backlog drains with bodies read back from disk.
//!
//! `cargo xtask bench backlog [--messages N] [--size BYTES] [--partitions N] [--body-cache-mb N] [--dir PATH]`
//!
//! The steps (fill, recover, drain, each one JSON line) are the core's, shared with the other
//! stores: [`ironbus_core::testing::backlog`]. This file only opens RocksDB, in a temporary
//! directory or `--dir`, and counts the heap.

#![allow(clippy::print_stdout, reason = "the benchmark reports on stdout")]

use std::path::PathBuf;
use std::sync::Arc;

use cap::Cap;
use clap::Parser;
use ironbus_core::testing::backlog::{self, BacklogOptions};
use ironbus_core::testing::TempDir;
use ironbus_core::Store;
use ironbus_store_rocksdb::{RocksOptions, RocksStore};

#[global_allocator]
static ALLOCATOR: Cap<std::alloc::System> = Cap::new(std::alloc::System, usize::MAX);

/// A large backlog on RocksDB: memory per message, recovery time, drain rate.
#[derive(Debug, Parser)]
struct Options {
    #[command(flatten)]
    backlog: BacklogOptions,
    /// Where RocksDB keeps its files (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
}

fn main() {
    let o = Options::parse();
    let temp = TempDir::new("ironbus-backlog");
    let dir = o.dir.clone().unwrap_or_else(|| temp.path().to_path_buf());
    let open = || async {
        let store = RocksStore::open(&dir, RocksOptions::default()).expect("open RocksDB");
        vec![Arc::new(store) as Arc<dyn Store>]
    };
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(backlog::run(
        &o.backlog,
        open,
        || ALLOCATOR.allocated(),
        &mut std::io::stdout(),
    ));
}
