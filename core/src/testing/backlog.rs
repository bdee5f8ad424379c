//! A large backlog on any store: how much memory a queued message costs, how long a restart
//! takes to recover the backlog, and how fast the backlog drains with bodies read back from the
//! store. Each store's benchmark (`store-*/benches/backlog.rs`) is a thin `main` that opens its
//! stores and calls [`run`]; the steps are here, once.
//!
//! Steps, each reported as one JSON line on the given output:
//! 1. `fill`: send N messages (1 KiB by default) to one queue in batches of 100, from 8 tasks;
//!    the heap (read by the caller's closure, typically a counting global allocator) and the
//!    process RSS before and after. The heap growth per message is the broker's own index cost;
//!    RSS also holds the store's caches (RocksDB's memtables and block cache), which are
//!    bounded by configuration, not by the backlog.
//! 2. `recover`: shut the broker down, open it again on stores from the caller's `open`
//!    closure (the same data), and time until every partition has rebuilt its index
//!    ([`Broker::recovered`]); heap growth per message again.
//! 3. `drain`: one receive-and-delete receiver empties the queue; messages/s.
//!
//! Uses the core's public API only, like any embedding application.

#![allow(
    clippy::disallowed_methods,
    reason = "a benchmark measures wall time and waits for the stores to close"
)]

use std::future::Future;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Broker, BrokerOptions, Message, QueueDescription, ReceiveMode, Store, SystemClock};

/// Messages per send.
pub const BATCH: usize = 100;
/// Concurrent sending tasks.
pub const SENDERS: usize = 8;
/// The queue the benchmark fills.
const QUEUE: &str = "backlog";

/// The store-independent options of a backlog benchmark; a bench's own `clap` options flatten
/// them (`#[command(flatten)]`) and add their store's.
#[derive(Debug, Clone, clap::Args)]
pub struct BacklogOptions {
    /// Messages in the backlog.
    #[arg(long, default_value_t = 1_000_000)]
    pub messages: usize,
    /// Body bytes per message.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// The queue's partitions.
    #[arg(long, default_value_t = 1)]
    pub partitions: u16,
    /// The broker's body cache, in MiB.
    #[arg(long, default_value_t = 64)]
    pub body_cache_mb: u64,
    /// Passed by `cargo bench`; ignored.
    #[arg(long = "bench", hide = true)]
    pub cargo_bench: bool,
}

/// What [`run`] measured (also written, step by step, as JSON lines).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BacklogReport {
    /// Messages queued after the fill.
    pub messages: u64,
    pub fill_seconds: f64,
    /// Heap growth per message during the fill, without the body cache's bytes.
    pub fill_heap_per_message: f64,
    pub recover_seconds: f64,
    /// Heap growth per message from before the reopen to after the recovery.
    pub recover_heap_per_message: f64,
    pub drain_seconds: f64,
}

/// Fills, recovers and drains a backlog (see the module docs); `open` returns the stores, the
/// same data each time it is called (the first call's are empty), `heap` the bytes allocated
/// now, and each step's JSON line goes to `out`.
///
/// # Panics
/// When the broker fails, when not every queued message is recovered or drained, or when
/// `out` cannot be written: it is a benchmark.
pub async fn run<O, F>(
    options: &BacklogOptions,
    open: O,
    heap: impl Fn() -> usize,
    out: &mut dyn Write,
) -> BacklogReport
where
    O: Fn() -> F,
    F: Future<Output = Vec<Arc<dyn Store>>>,
{
    let body_cache_bytes = options.body_cache_mb << 20;
    let open_broker = || async {
        let broker_options = BrokerOptions { body_cache_bytes, ..Default::default() };
        Broker::open_with(open().await, Arc::new(SystemClock), broker_options)
            .await
            .expect("open the broker")
    };
    let description = QueueDescription {
        enable_partitioning: options.partitions > 1,
        partition_count: options.partitions.max(1),
        max_size_in_megabytes: 81_920,
        ..Default::default()
    };

    // 1. fill
    let broker = open_broker().await;
    broker.create_queue(QUEUE, description).await.expect("create the queue");
    let (heap0, rss0) = (heap(), rss());
    let started = Instant::now();
    fill(&broker, options.messages, options.size).await;
    let fill_seconds = started.elapsed().as_secs_f64();
    let queued = broker.get_queue_runtime(QUEUE).await.expect("runtime").active_message_count;
    let (heap1, rss1) = (heap(), rss());
    let cached = broker.cached_body_bytes() as usize;
    let fill_heap_per_message = per_message(heap0, heap1.saturating_sub(cached), queued);
    report(
        out,
        "fill",
        &[
            ("messages", queued as f64),
            ("size", options.size as f64),
            ("partitions", f64::from(options.partitions)),
            ("seconds", fill_seconds),
            ("msgs_per_sec", queued as f64 / fill_seconds),
            ("heap_bytes_per_message", per_message(heap0, heap1, queued)),
            ("heap_bytes_per_message_without_body_cache", fill_heap_per_message),
            ("body_cache_bytes", cached as f64),
            ("rss_bytes_per_message", per_message(rss0, rss1, queued)),
            ("rss_mib", (rss1 >> 20) as f64),
        ],
    );
    broker.shutdown();
    drop(broker);
    // The partitions' tasks let go of the stores (RocksDB's directory lock) once they stop.
    tokio::time::sleep(Duration::from_millis(500)).await;

    // 2. recover
    let (heap2, rss2) = (heap(), rss());
    let started = Instant::now();
    let broker = open_broker().await;
    let recovered = broker.recovered().await;
    let recover_seconds = started.elapsed().as_secs_f64();
    let (heap3, rss3) = (heap(), rss());
    let recover_heap_per_message = per_message(heap2, heap3, recovered);
    report(
        out,
        "recover",
        &[
            ("messages", recovered as f64),
            ("seconds", recover_seconds),
            ("msgs_per_sec", recovered as f64 / recover_seconds),
            ("heap_bytes_per_message", recover_heap_per_message),
            ("rss_bytes_per_message", per_message(rss2, rss3, recovered)),
            ("rss_mib", (rss3 >> 20) as f64),
        ],
    );
    assert_eq!(recovered, queued, "every queued message is recovered");

    // 3. drain
    let started = Instant::now();
    let received = drain(&broker, recovered).await;
    let drain_seconds = started.elapsed().as_secs_f64();
    report(
        out,
        "drain",
        &[
            ("messages", received as f64),
            ("seconds", drain_seconds),
            ("msgs_per_sec", received as f64 / drain_seconds),
        ],
    );
    assert_eq!(received, recovered, "the whole backlog drains");
    broker.shutdown();
    BacklogReport {
        messages: queued,
        fill_seconds,
        fill_heap_per_message,
        recover_seconds,
        recover_heap_per_message,
        drain_seconds,
    }
}

/// Sends `messages` (rounded down to whole batches) of `size` bytes from [`SENDERS`] tasks.
async fn fill(broker: &Broker, messages: usize, size: usize) {
    let batches = messages / BATCH;
    let mut senders = tokio::task::JoinSet::new();
    for s in 0..SENDERS {
        let (broker, body) = (broker.clone(), vec![b'x'; size]);
        senders.spawn(async move {
            for b in (s..batches).step_by(SENDERS) {
                let batch = (0..BATCH)
                    .map(|i| Message::new(body.clone()).with_message_id(format!("{b}-{i}")))
                    .collect();
                broker.send(QUEUE, batch).await.expect("send");
            }
        });
    }
    while let Some(done) = senders.join_next().await {
        done.expect("sender");
    }
}

/// Receives (and so deletes) up to `expected` messages; stops early after 30 s without one.
async fn drain(broker: &Broker, expected: u64) -> u64 {
    let receiver =
        broker.open_receiver(QUEUE, ReceiveMode::ReceiveAndDelete).await.expect("receiver");
    let mut received = 0u64;
    receiver.add_credit(1000);
    while received < expected {
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
    received
}

/// Writes `{"step":"<step>","<name>":<value>,…}` and a newline; a value that is not finite
/// (nothing to divide by) is `null`.
fn report(out: &mut dyn Write, step: &str, fields: &[(&str, f64)]) {
    let mut line = format!("{{\"step\":\"{step}\"");
    for (name, value) in fields {
        if value.is_finite() {
            line.push_str(&format!(",\"{name}\":{value}"));
        } else {
            line.push_str(&format!(",\"{name}\":null"));
        }
    }
    line.push('}');
    writeln!(out, "{line}").and_then(|()| out.flush()).expect("write the report");
}

fn per_message(before: usize, after: usize, messages: u64) -> f64 {
    (after as f64 - before as f64) / messages as f64
}

/// Resident set size of this process, in bytes (Linux; 0 elsewhere).
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_one_json_line_with_null_for_what_has_no_value() {
        let mut out = Vec::new();
        report(&mut out, "fill", &[("messages", 1_000_000.0), ("rate", 0.5), ("none", f64::NAN)]);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"step\":\"fill\",\"messages\":1000000,\"rate\":0.5,\"none\":null}\n"
        );
    }
}
