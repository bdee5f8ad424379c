//! In-process throughput of the core engine: producers send 1 KiB messages to a 16-partition
//! queue on the memory store while consumers receive them with peek-lock and complete them.
//! Prints one JSON line per scenario with messages/s and end-to-end latency percentiles.
//!
//! `cargo xtask bench core [--messages N] [--size BYTES] [--credit N] [--window N] [--scenario PxC ...]`

#![allow(clippy::disallowed_methods, reason = "a benchmark measures wall time")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use clap::Parser;
use ironbus_core::{Broker, Message, NamespaceLimits, QueueDescription, ReceiveMode, SystemClock};
use ironbus_store_memory::MemoryStore;
use tokio::task::JoinSet;

/// In-process throughput of the core engine: messages/s and end-to-end latency per scenario.
#[derive(Debug, Clone, Parser)]
struct Options {
    /// Messages per scenario.
    #[arg(long, default_value_t = 200_000)]
    messages: usize,
    /// Body bytes per message.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Each consumer's credit.
    #[arg(long, default_value_t = 100)]
    credit: u32,
    /// Sends each producer keeps in flight.
    #[arg(long, default_value_t = 32)]
    window: usize,
    /// The queue's partitions.
    #[arg(long, default_value_t = 16)]
    partitions: u16,
    /// Producers x consumers, `PxC`, repeatable (default: 1x1 and 4x4).
    #[arg(long = "scenario", value_parser = scenario)]
    scenarios: Vec<(usize, usize)>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long = "bench", hide = true)]
    _bench: bool,
}

/// A `PxC` scenario: producers and consumers.
fn scenario(text: &str) -> Result<(usize, usize), String> {
    let parse = |n: &str| n.parse().map_err(|err| format!("{text}: {err}"));
    let (p, c) = text.split_once('x').ok_or_else(|| format!("{text}: expected PxC"))?;
    Ok((parse(p)?, parse(c)?))
}

fn main() {
    let mut options = Options::parse();
    if options.scenarios.is_empty() {
        options.scenarios = vec![(1, 1), (4, 4)];
    }
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    for &(producers, consumers) in &options.scenarios {
        runtime.block_on(run(&options, producers, consumers));
    }
}

async fn run(o: &Options, producers: usize, consumers: usize) {
    let broker = Broker::open(
        Arc::new(MemoryStore::new()),
        Arc::new(SystemClock),
        NamespaceLimits::default(),
    )
    .await
    .expect("broker");
    let description = QueueDescription {
        enable_partitioning: o.partitions > 1,
        partition_count: o.partitions.max(1),
        max_size_in_megabytes: 81_920,
        ..Default::default()
    };
    broker.create_queue("bench", description).await.expect("queue");
    let origin = Instant::now();
    let total = o.messages - o.messages % producers;

    let mut tasks = JoinSet::new();
    let received = Arc::new(AtomicUsize::new(0));
    let (done_tx, done_rx) = tokio::sync::watch::channel(false);
    let done_tx = Arc::new(done_tx);
    for _ in 0..consumers {
        let broker = broker.clone();
        let credit = o.credit;
        let (received, done_tx, mut done_rx) = (received.clone(), done_tx.clone(), done_rx.clone());
        tasks.spawn(async move {
            let receiver =
                broker.open_receiver("bench", ReceiveMode::PeekLock).await.expect("receiver");
            receiver.add_credit(credit);
            let mut latencies = Vec::new();
            loop {
                let m = tokio::select! {
                    m = receiver.recv() => m.expect("message"),
                    _ = done_rx.wait_for(|done| *done) => break,
                };
                let sent = u64::from_le_bytes(m.message.body[..8].try_into().expect("stamp"));
                latencies.push(origin.elapsed().as_nanos() as u64 - sent);
                broker.complete("bench", m.lock_token().expect("lock")).await.expect("complete");
                if received.fetch_add(1, Ordering::Relaxed) + 1 == total {
                    let _ = done_tx.send(true);
                    break;
                }
                receiver.add_credit(1);
            }
            latencies
        });
    }
    let per_producer = total / producers;
    for _ in 0..producers {
        let broker = broker.clone();
        let (size, window) = (o.size.max(8), o.window.max(1));
        tasks.spawn(async move {
            let mut in_flight: JoinSet<ironbus_core::Result<()>> = JoinSet::new();
            for _ in 0..per_producer {
                if in_flight.len() >= window {
                    in_flight.join_next().await.expect("send task").expect("join").expect("send");
                }
                let mut body = BytesMut::with_capacity(size);
                body.put_u64_le(origin.elapsed().as_nanos() as u64);
                body.resize(size, 0xab);
                let broker = broker.clone();
                in_flight.spawn(async move {
                    broker.send("bench", vec![Message::new(body.freeze())]).await.map(|_| ())
                });
            }
            while let Some(done) = in_flight.join_next().await {
                done.expect("send task").expect("send");
            }
            Vec::new()
        });
    }
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(total);
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done.expect("task"));
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    let pct = |p: f64| {
        let i = ((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1));
        Duration::from_nanos(latencies.get(i).copied().unwrap_or(0)).as_secs_f64() * 1e3
    };
    let line = format!(
        "{{\"bench\":\"core\",\"store\":\"memory\",\"partitions\":{},\"producers\":{producers},\"consumers\":{consumers},\"messages\":{total},\"size\":{},\"credit\":{},\"window\":{},\"seconds\":{:.3},\"msgs_per_sec\":{:.0},\"p50_ms\":{:.3},\"p99_ms\":{:.3}}}",
        o.partitions,
        o.size,
        o.credit,
        o.window,
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64(),
        pct(0.50),
        pct(0.99),
    );
    #[allow(clippy::print_stdout)]
    {
        println!("{line}");
    }
    broker.shutdown();
}
