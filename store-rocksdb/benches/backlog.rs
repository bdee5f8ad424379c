//! A large backlog on RocksDB: how much memory a queued message costs, how long a restart takes
//! to recover the backlog, and how fast the backlog drains with bodies read back from disk.
//!
//! `cargo xtask bench backlog [--messages N] [--size BYTES] [--partitions N] [--body-cache-mb N] [--dir PATH]`
//!
//! Steps, each reported in one JSON line:
//! 1. fill: send N messages (1 KiB by default) to one queue in batches of 100, from 8 tasks;
//!    measure the Rust heap (a counting global allocator) and the process RSS before and after.
//!    The heap growth per message is the broker's own index cost; RSS also holds RocksDB's
//!    memtables and block cache, which are bounded by configuration, not by the backlog.
//! 2. recover: close the broker, reopen it on the same directory, and time until every
//!    partition has rebuilt its index (`Broker::recovered`); heap growth per message again.
//! 3. drain: one receive-and-delete receiver empties the queue; messages/s.

#![allow(clippy::print_stdout, reason = "the benchmark reports on stdout")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use cap::Cap;
use clap::Parser;
use ironbus_core::testing::TempDir;
use ironbus_core::{
    Broker, BrokerOptions, Message, QueueDescription, ReceiveMode, Store, SystemClock,
};
use ironbus_store_rocksdb::{RocksOptions, RocksStore};

#[global_allocator]
static ALLOCATOR: Cap<std::alloc::System> = Cap::new(std::alloc::System, usize::MAX);

const BATCH: usize = 100;
const SENDERS: usize = 8;

/// A large backlog on RocksDB: memory per message, recovery time, drain rate.
#[derive(Debug, Parser)]
struct Options {
    /// Messages in the backlog.
    #[arg(long, default_value_t = 1_000_000)]
    messages: usize,
    /// Body bytes per message.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// The queue's partitions.
    #[arg(long, default_value_t = 1)]
    partitions: u16,
    /// The broker's body cache, in MiB.
    #[arg(long, default_value_t = 64)]
    body_cache_mb: u64,
    /// Where RocksDB keeps its files (default: a temporary directory).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long = "bench", hide = true)]
    _bench: bool,
}

/// Resident set size of this process, in bytes (Linux; 0 elsewhere).
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

async fn open(dir: &std::path::Path, body_cache_mb: u64) -> Broker {
    let store: Arc<dyn Store> =
        Arc::new(RocksStore::open(dir, RocksOptions::default()).expect("open RocksDB"));
    let options = BrokerOptions { body_cache_bytes: body_cache_mb << 20, ..Default::default() };
    Broker::open_with(vec![store], Arc::new(SystemClock), options).await.expect("open broker")
}

fn per_message(before: usize, after: usize, messages: usize) -> f64 {
    (after as f64 - before as f64) / messages as f64
}

fn main() {
    let o = Options::parse();
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(run(o));
}

async fn run(o: Options) {
    let temp = TempDir::new("ironbus-backlog");
    let dir = o.dir.clone().unwrap_or_else(|| temp.path().to_path_buf());
    let description = QueueDescription {
        enable_partitioning: o.partitions > 1,
        partition_count: o.partitions.max(1),
        max_size_in_megabytes: 81_920,
        ..Default::default()
    };

    // 1. fill
    let broker = open(&dir, o.body_cache_mb).await;
    broker.create_queue("backlog", description).await.expect("create queue");
    let (heap0, rss0) = (ALLOCATOR.allocated(), rss());
    let started = Instant::now();
    let mut senders = tokio::task::JoinSet::new();
    for s in 0..SENDERS {
        let (broker, body) = (broker.clone(), vec![b'x'; o.size]);
        let batches = o.messages / BATCH;
        senders.spawn(async move {
            for b in (s..batches).step_by(SENDERS) {
                let batch = (0..BATCH)
                    .map(|i| Message::new(body.clone()).with_message_id(format!("{b}-{i}")))
                    .collect();
                broker.send("backlog", batch).await.expect("send");
            }
        });
    }
    while let Some(done) = senders.join_next().await {
        done.expect("sender");
    }
    let fill_seconds = started.elapsed().as_secs_f64();
    let queued = broker.get_queue_runtime("backlog").await.expect("runtime").active_message_count;
    let (heap1, rss1) = (ALLOCATOR.allocated(), rss());
    let cached = broker.cached_body_bytes();
    println!(
        "{}",
        serde_json::json!({
            "step": "fill",
            "messages": queued,
            "size": o.size,
            "partitions": o.partitions,
            "seconds": fill_seconds,
            "msgs_per_sec": queued as f64 / fill_seconds,
            "heap_bytes_per_message": per_message(heap0, heap1, queued as usize),
            "heap_bytes_per_message_without_body_cache": per_message(heap0, heap1 - cached as usize, queued as usize),
            "body_cache_bytes": cached,
            "rss_bytes_per_message": per_message(rss0 as usize, rss1 as usize, queued as usize),
            "rss_mib": rss1 >> 20,
        })
    );
    broker.shutdown();
    drop(broker);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // 2. recover
    let (heap2, rss2) = (ALLOCATOR.allocated(), rss());
    let started = Instant::now();
    let broker = open(&dir, o.body_cache_mb).await;
    let recovered = broker.recovered().await;
    let recover_seconds = started.elapsed().as_secs_f64();
    let (heap3, rss3) = (ALLOCATOR.allocated(), rss());
    println!(
        "{}",
        serde_json::json!({
            "step": "recover",
            "messages": recovered,
            "seconds": recover_seconds,
            "heap_bytes_per_message": per_message(heap2, heap3, recovered as usize),
            "rss_bytes_per_message": per_message(rss2 as usize, rss3 as usize, recovered as usize),
            "rss_mib": rss3 >> 20,
        })
    );
    assert_eq!(recovered, queued, "every queued message is recovered");

    // 3. drain
    let started = Instant::now();
    let receiver =
        broker.open_receiver("backlog", ReceiveMode::ReceiveAndDelete).await.expect("receiver");
    let mut received = 0u64;
    receiver.add_credit(1000);
    while received < recovered {
        match tokio::time::timeout(Duration::from_secs(30), receiver.recv()).await {
            Ok(Some(_)) => {
                received += 1;
                if received % 500 == 0 {
                    receiver.add_credit(500);
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    let drain_seconds = started.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "step": "drain",
            "messages": received,
            "seconds": drain_seconds,
            "msgs_per_sec": received as f64 / drain_seconds,
        })
    );
    assert_eq!(received, recovered, "the whole backlog drains");
    broker.shutdown();
}
