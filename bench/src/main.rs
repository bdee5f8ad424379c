//! `ironbus-bench`: an AMQP 1.0 load generator for ironbus and the peer brokers it is compared
//! with (`cargo xtask bench amqp -- --help`), on its own lean client (`wire`) or on fe2o3-amqp's
//! (`producer`, `consumer`).
//!
//! Producers and consumers run concurrently, each on its own connection with one session and one
//! link. Every body starts with its send time and the run's id (`payload`), so consumers measure
//! end-to-end latency and drain messages that earlier runs left behind without counting them.
//! The result is one JSON line on stdout (`report`); progress and errors go to stderr.
//!
//! Invariants:
//! - Fan-out (`--receive-from`): producers send to `--address`, consumers are spread over the
//!   nodes given, and "every message" means every copy: messages x nodes; rates are summed.
//!   `--consumers 0` without it sends only.
//! - A run ends: when every message has been received, or at `--timeout` (which also bounds
//!   connecting), after which it prints what it got and exits non-zero.
//! - The clock starts after every link is attached; connecting and `$cbs` are not measured.
//! - A producer never has more than `--window` unsettled sends; a consumer never grants more than
//!   `--credit`.
//!
//! Consumers accept one by one or, with `--accept-batch N`, up to N consecutive deliveries in
//! one disposition range. `--client wire` (the default) is the lean client of `wire/`; `--client
//! fe2o3` is fe2o3-amqp's (needed for `--cbs-key`). The load generator shares the machine's
//! cores with the broker it measures, so its own CPU per message is taken from the broker
//! (BENCHMARKS.md has the figures). `tests/clients.rs` runs both clients against an in-process
//! ironbus. Like the server, it uses mimalloc as its global allocator (glibc's malloc and free
//! took about 15 % of both).
//!
//! # The rest of the crate
//!
//! - `ironbus-crash` (`src/bin/crash.rs`): the crash test's driver, run by `cargo xtask crash`.
//! - `ironbus-connections` (`src/bin/connections.rs`): holds idle AMQP connections and reports
//!   the server's memory per connection (`cargo xtask bench connections`).
//! - Scripts, each behind a `cargo xtask bench` target: `side-by-side.sh` (RabbitMQ and both
//!   ironbus stores in alternating rounds, each process's CPU per message; with `REVS="A B"`
//!   ironbus revisions against each other, release builds from `git archive` by `lib.sh`),
//!   `instructions.sh` (instructions per message under valgrind, which a noisy machine does not
//!   move), `fanout.sh`, `filter-cost.sh`, `sessions.sh`, `forward.sh` (topics, filters,
//!   session receivers, a one-hop auto-forward, each against its plain counterpart) and
//!   `renew.sh` with `renew.py` (the sync Python SDK renewing locks from several threads).

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod cbs;
mod cli;
mod consumer;
mod endpoint;
mod payload;
mod producer;
mod report;
mod wire;

use std::{
    process::ExitCode,
    sync::{atomic::AtomicU64, atomic::Ordering, Arc},
    time::{Duration, Instant},
};

use anyhow::{anyhow, Result};
use clap::Parser;
use tokio::{
    sync::watch,
    task::JoinSet,
    time::{self as clock, timeout, timeout_at},
};

use crate::{
    cli::{Client, Options},
    consumer::{Consumer, ConsumerReport},
    endpoint::Endpoint,
    producer::{Producer, ProducerReport},
    report::Report,
};

/// How long links get to stop and report after a timeout or an error.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// What every producer and consumer of a run shares.
#[derive(Debug)]
pub(crate) struct Run {
    pub options: Options,
    pub endpoint: Endpoint,
    /// Stamped into every body; tells this run's messages from leftovers.
    pub id: u64,
    pub counters: Counters,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Sends the broker accepted.
    pub acknowledged: AtomicU64,
    /// This run's messages received.
    pub received: AtomicU64,
}

/// Where a run is; consumers stop at `Complete`, everyone stops at `Aborted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Running,
    /// Every message has been received.
    Complete,
    /// Timed out, or a link failed.
    Aborted,
}

/// A producer on either client.
#[derive(Debug)]
enum AnyProducer {
    Fe2o3(Box<Producer>),
    Wire(wire::Producer),
}

impl AnyProducer {
    async fn run(self, run: Arc<Run>, phase: watch::Receiver<Phase>) -> Result<ProducerReport> {
        match self {
            AnyProducer::Fe2o3(producer) => producer.run(run, phase).await,
            AnyProducer::Wire(producer) => producer.run(run, phase).await,
        }
    }
}

/// A consumer on either client.
#[derive(Debug)]
enum AnyConsumer {
    Fe2o3(Box<Consumer>),
    Wire(Box<wire::Consumer>),
}

impl AnyConsumer {
    async fn run(self, run: Arc<Run>, phase: watch::Sender<Phase>) -> Result<ConsumerReport> {
        match self {
            AnyConsumer::Fe2o3(consumer) => consumer.run(run, phase).await,
            AnyConsumer::Wire(consumer) => consumer.run(run, phase).await,
        }
    }
}

#[derive(Debug)]
enum Finished {
    Producer(ProducerReport),
    Consumer(ConsumerReport),
}

#[derive(Debug, Default)]
struct Finishes {
    producers: Vec<ProducerReport>,
    consumers: Vec<ConsumerReport>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = Options::parse();
    match execute(options).await {
        Ok(report) => {
            print(&report);
            if report.error.is_none() {
                ExitCode::SUCCESS
            } else {
                eprintln!("ironbus-bench: {}", report.error.as_deref().unwrap_or_default());
                ExitCode::FAILURE
            }
        }
        Err(err) => {
            eprintln!("ironbus-bench: {err:#}");
            ExitCode::FAILURE
        }
    }
}

#[allow(clippy::print_stdout, reason = "the JSON line is this tool's output")]
fn print(report: &Report) {
    let line = serde_json::to_string(report).expect("a report always serialises");
    println!("{line}");
}

async fn execute(options: Options) -> Result<Report> {
    let deadline = clock::Instant::now() + options.timeout();
    let endpoint =
        Endpoint::new(&options.url, options.sasl_plain.as_deref(), options.cbs_key.as_deref())?;
    let run = Arc::new(Run {
        options,
        endpoint,
        id: payload::new_run_id(),
        counters: Counters::default(),
    });
    if run.options.sessions > 0 && run.options.client != Client::Wire {
        return Err(anyhow!("--sessions needs --client wire"));
    }
    if run.options.preload {
        return preload_then_receive(run, deadline).await;
    }
    let (consumers, producers) = timeout_at(deadline, attach_all(&run))
        .await
        .map_err(|_| anyhow!("timed out after {} s while connecting", run.options.timeout))??;
    let receiving = match run.options.receive_from.len() {
        0 => String::new(),
        _ => format!(" (receiving from {})", run.options.receive_from.join(", ")),
    };
    eprintln!(
        "ironbus-bench: run {:016x}: {} producers and {} consumers attached to {}{} at {}; sending {} messages",
        run.id,
        producers.len(),
        consumers.len(),
        run.options.address,
        receiving,
        run.endpoint.shown_url(),
        run.options.messages,
    );

    let (phase, _) = watch::channel(Phase::Running);
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for consumer in consumers {
        let (run, phase) = (Arc::clone(&run), phase.clone());
        tasks.spawn(async move { consumer.run(run, phase).await.map(Finished::Consumer) });
    }
    for producer in producers {
        let (run, phase) = (Arc::clone(&run), phase.subscribe());
        tasks.spawn(async move { producer.run(run, phase).await.map(Finished::Producer) });
    }

    let mut finishes = Finishes::default();
    let error = match timeout_at(deadline, collect(&mut tasks, &mut finishes)).await {
        Ok(Ok(())) => None,
        Ok(Err(err)) => Some(format!("{err:#}")),
        Err(_) => Some(format!("timed out after {} s", run.options.timeout)),
    };
    let stopped = Instant::now();
    if error.is_some() {
        phase.send_replace(Phase::Aborted);
        if timeout(STOP_GRACE, collect_rest(&mut tasks, &mut finishes)).await.is_err() {
            eprintln!("ironbus-bench: links did not stop within {STOP_GRACE:?}; abandoning them");
            tasks.abort_all();
        }
    }
    Ok(summarise(&run, start, start, stopped, finishes, error))
}

/// `--preload`: producers send everything (every send acknowledged), then consumers attach and
/// receive; the receive rate is timed from the consumers' start, the send rate from the
/// producers'.
async fn preload_then_receive(run: Arc<Run>, deadline: clock::Instant) -> Result<Report> {
    let connecting = |_| anyhow!("timed out after {} s while connecting", run.options.timeout);
    let producers = timeout_at(deadline, attach_producers(&run)).await.map_err(connecting)??;
    eprintln!(
        "ironbus-bench: run {:016x}: preloading {} messages with {} producers to {} at {}",
        run.id,
        run.options.messages,
        producers.len(),
        run.options.address,
        run.endpoint.shown_url(),
    );
    let (phase, _) = watch::channel(Phase::Running);
    let send_start = Instant::now();
    let mut tasks = JoinSet::new();
    for producer in producers {
        let (run, phase) = (Arc::clone(&run), phase.subscribe());
        tasks.spawn(async move { producer.run(run, phase).await.map(Finished::Producer) });
    }
    let mut finishes = Finishes::default();
    let mut error = match timeout_at(deadline, collect(&mut tasks, &mut finishes)).await {
        Ok(Ok(())) => None,
        Ok(Err(err)) => Some(format!("{err:#}")),
        Err(_) => Some(format!("timed out after {} s while preloading", run.options.timeout)),
    };
    let mut start = Instant::now();
    if error.is_none() {
        match timeout_at(deadline, attach_consumers(&run)).await {
            Ok(Ok(consumers)) => {
                eprintln!(
                    "ironbus-bench: run {:016x}: preloaded in {:.3} s; {} consumers receiving",
                    run.id,
                    send_start.elapsed().as_secs_f64(),
                    consumers.len(),
                );
                start = Instant::now();
                for consumer in consumers {
                    let (run, phase) = (Arc::clone(&run), phase.clone());
                    tasks.spawn(
                        async move { consumer.run(run, phase).await.map(Finished::Consumer) },
                    );
                }
                error = match timeout_at(deadline, collect(&mut tasks, &mut finishes)).await {
                    Ok(Ok(())) => None,
                    Ok(Err(err)) => Some(format!("{err:#}")),
                    Err(_) => Some(format!("timed out after {} s", run.options.timeout)),
                };
            }
            Ok(Err(err)) => error = Some(format!("{err:#}")),
            Err(_) => {
                error = Some(format!("timed out after {} s while connecting", run.options.timeout))
            }
        }
    }
    let stopped = Instant::now();
    if error.is_some() {
        phase.send_replace(Phase::Aborted);
        if timeout(STOP_GRACE, collect_rest(&mut tasks, &mut finishes)).await.is_err() {
            eprintln!("ironbus-bench: links did not stop within {STOP_GRACE:?}; abandoning them");
            tasks.abort_all();
        }
    }
    Ok(summarise(&run, send_start, start, stopped, finishes, error))
}

/// Attaches consumers first (so they are there when producers start), then producers.
async fn attach_all(run: &Run) -> Result<(Vec<AnyConsumer>, Vec<AnyProducer>)> {
    let consumers = attach_consumers(run).await?;
    let producers = attach_producers(run).await?;
    Ok((consumers, producers))
}

async fn attach_consumers(run: &Run) -> Result<Vec<AnyConsumer>> {
    let mut consumers = Vec::new();
    for index in 0..run.options.consumer_count() {
        consumers.push(match run.options.client {
            Client::Wire => AnyConsumer::Wire(Box::new(wire::Consumer::attach(run, index).await?)),
            Client::Fe2o3 => AnyConsumer::Fe2o3(Box::new(Consumer::attach(run, index).await?)),
        });
    }
    Ok(consumers)
}

async fn attach_producers(run: &Run) -> Result<Vec<AnyProducer>> {
    let mut producers = Vec::new();
    for index in 0..run.options.producers {
        let count = share(run, index);
        producers.push(match run.options.client {
            Client::Wire => AnyProducer::Wire(wire::Producer::attach(run, index, count).await?),
            Client::Fe2o3 => {
                AnyProducer::Fe2o3(Box::new(Producer::attach(run, index, count).await?))
            }
        });
    }
    Ok(producers)
}

/// Producer `index`'s part of the messages: an even split, the first ones taking the remainder.
fn share(run: &Run, index: u32) -> u64 {
    let producers = u64::from(run.options.producers);
    let (each, remainder) = (run.options.messages / producers, run.options.messages % producers);
    each + u64::from(u64::from(index) < remainder)
}

/// Collects every task's report; stops at the first failure (aborting the run is the caller's).
async fn collect(tasks: &mut JoinSet<Result<Finished>>, finishes: &mut Finishes) -> Result<()> {
    while let Some(joined) = tasks.join_next().await {
        match joined.map_err(|err| anyhow!("a link task died: {err}"))?? {
            Finished::Producer(report) => finishes.producers.push(report),
            Finished::Consumer(report) => finishes.consumers.push(report),
        }
    }
    Ok(())
}

/// Collects what the remaining tasks report after an abort; their errors only go to stderr.
async fn collect_rest(tasks: &mut JoinSet<Result<Finished>>, finishes: &mut Finishes) {
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok(Finished::Producer(report))) => finishes.producers.push(report),
            Ok(Ok(Finished::Consumer(report))) => finishes.consumers.push(report),
            Ok(Err(err)) => eprintln!("ironbus-bench: {err:#}"),
            Err(err) => eprintln!("ironbus-bench: a link task died: {err}"),
        }
    }
}

/// `send_start`: when producers started; `start`: when consumers did (the same unless
/// preloading).
fn summarise(
    run: &Run,
    send_start: Instant,
    start: Instant,
    stopped: Instant,
    finishes: Finishes,
    error: Option<String>,
) -> Report {
    let options = &run.options;
    let received = run.counters.received.load(Ordering::Relaxed);
    let sent = run.counters.acknowledged.load(Ordering::Relaxed);
    let stale = finishes.consumers.iter().map(|c| c.stale).sum();
    let mut latencies: Vec<u64> =
        finishes.consumers.iter().flat_map(|c| c.latencies_us.iter().copied()).collect();
    latencies.sort_unstable();

    // Receiving ends with the last message; sending with the last producer's last outcome.
    let received_until = finishes.consumers.iter().filter_map(|c| c.completed_at).max();
    let receive_seconds = (received_until.unwrap_or(stopped) - start).as_secs_f64();
    let all_sent = finishes.producers.len() == usize::try_from(options.producers).unwrap_or(0)
        && finishes.producers.iter().all(|p| p.finished_at.is_some());
    let sent_until = match all_sent {
        true => finishes.producers.iter().filter_map(|p| p.finished_at).max(),
        false => None,
    };
    let send_seconds = (sent_until.unwrap_or(stopped) - send_start).as_secs_f64();
    let mut accepts: Vec<u64> =
        finishes.consumers.iter().flat_map(|c| c.accept_latencies_us.iter().copied()).collect();
    accepts.sort_unstable();
    let sessions = options.sessions > 0;

    Report {
        url: run.endpoint.shown_url().to_owned(),
        address: options.address.clone(),
        receive_from: options.receive_from.clone(),
        producers: options.producers,
        consumers: options.consumer_count(),
        size: options.size,
        durable: options.durable,
        mode: options.mode.as_str(),
        client: options.client.as_str(),
        window: options.window,
        credit: options.credit,
        messages: options.messages,
        expected: (!options.receive_from.is_empty()).then(|| options.expected_received()),
        received,
        sent,
        stale,
        seconds: report::round3(receive_seconds),
        msgs_per_sec: report::rate(received, receive_seconds),
        send_msgs_per_sec: report::rate(sent, send_seconds),
        p50_ms: report::percentile_ms(&latencies, 50.0),
        p99_ms: report::percentile_ms(&latencies, 99.0),
        preload: options.preload,
        sessions: sessions.then_some(options.sessions),
        sessions_accepted: sessions.then_some(accepts.len() as u64),
        accept_timeouts: sessions
            .then(|| finishes.consumers.iter().map(|c| c.accept_timeouts).sum()),
        out_of_order: sessions.then(|| finishes.consumers.iter().map(|c| c.out_of_order).sum()),
        settles_refused: sessions
            .then(|| finishes.consumers.iter().map(|c| c.settles_refused).sum()),
        accept_p50_ms: report::percentile_ms(&accepts, 50.0),
        accept_p99_ms: report::percentile_ms(&accepts, 99.0),
        accept_max_ms: accepts.last().map(|&us| report::round3(us as f64 / 1000.0)),
        error,
    }
}
