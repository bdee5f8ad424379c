//! The backlog benchmark's steps (`testing::backlog`) on a small backlog in a memory store:
//! what each store's `benches/backlog.rs` runs at a million messages.
#![cfg(feature = "testing")]

use std::sync::Arc;

use ironbus_core::testing::backlog::{self, BacklogOptions};
use ironbus_core::Store;
use ironbus_store_memory::MemoryStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_fills_recovers_from_the_same_store_and_drains() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let options = BacklogOptions {
        messages: 2_050,
        size: 16,
        partitions: 2,
        body_cache_mb: 1,
        cargo_bench: false,
    };
    let mut out = Vec::new();
    let open = || async { vec![store.clone()] };
    let report = backlog::run(&options, open, || 0, &mut out).await;
    assert_eq!(report.messages, 2_000, "whole batches of 100");
    let out = String::from_utf8(out).unwrap();
    let steps: Vec<&str> = out.lines().map(|line| line.split('"').nth(3).unwrap()).collect();
    assert_eq!(steps, ["fill", "recover", "drain"], "{out}");
    assert!(out.lines().all(|line| line.contains("\"messages\":2000")), "{out}");
}
