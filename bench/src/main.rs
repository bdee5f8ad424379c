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
//! - Several nodes of one cluster (`--url` repeated): producer i and consumer i connect to URL
//!   i mod the number of URLs; figures are for the whole run, over every node.
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
    future::Future,
    process::ExitCode,
    sync::{atomic::AtomicU64, atomic::Ordering, Arc},
    time::{Duration, Instant},
};

use anyhow::{anyhow, Context, Result};
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
    /// One per `--url`, in order.
    pub endpoints: Vec<Endpoint>,
    /// Stamped into every body; tells this run's messages from leftovers.
    pub id: u64,
    pub counters: Counters,
}

impl Run {
    /// Where producer or consumer number `index` connects: `--url` number `index` mod the
    /// number of URLs.
    pub(crate) fn endpoint(&self, index: u32) -> &Endpoint {
        &self.endpoints[index as usize % self.endpoints.len()]
    }

    /// Every `--url`, passwords hidden, for progress lines.
    fn shown_urls(&self) -> String {
        let urls: Vec<&str> = self.endpoints.iter().map(Endpoint::shown_url).collect();
        urls.join(", ")
    }

    /// The connection (container) name of producer (`kind` `p`) or consumer (`c`) number
    /// `index`.
    pub(crate) fn link_name(&self, kind: char, index: u32) -> String {
        format!("ironbus-bench-{:016x}-{kind}{index}", self.id)
    }
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

/// A producer or a consumer on one of the clients: it connects and attaches, works until its part
/// of the run is done (or the run is aborted), then closes, whatever the work's outcome
/// (`run_participant`).
pub(crate) trait Participant: Sized + Send + 'static {
    /// `Producing` or `Consuming`.
    type Kind: Kind;

    /// Connects participant number `index` of its kind and attaches its link.
    fn attach(run: &Run, index: u32) -> impl Future<Output = Result<Self>>;

    /// Who it is, for errors.
    fn name(&self) -> &str;

    /// Sends its share, or receives, until done or aborted, keeping `report` up to date.
    fn work(
        &mut self,
        run: &Run,
        phase: &mut <Self::Kind as Kind>::Watch,
        report: &mut <Self::Kind as Kind>::Report,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Detaches and closes, reporting (not failing on) errors.
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// What sets producers and consumers apart for the run: what they report and how they follow the
/// run's phase.
pub(crate) trait Kind {
    type Report: Default + Send;
    /// A participant's own handle on the phase.
    type Watch: Send + 'static;

    /// A participant's handle, from the run's sender.
    fn watch(phase: &watch::Sender<Phase>) -> Self::Watch;

    /// What a participant's task yields when it is done.
    fn finished(report: Self::Report) -> Finished;
}

/// Producers: they watch the phase (a receiver of their own).
#[derive(Debug)]
pub(crate) enum Producing {}

impl Kind for Producing {
    type Report = ProducerReport;
    type Watch = watch::Receiver<Phase>;

    fn watch(phase: &watch::Sender<Phase>) -> Self::Watch {
        phase.subscribe()
    }

    fn finished(report: ProducerReport) -> Finished {
        Finished::Producer(report)
    }
}

/// Consumers: they also move the phase to `Complete` (a sender of their own).
#[derive(Debug)]
pub(crate) enum Consuming {}

impl Kind for Consuming {
    type Report = ConsumerReport;
    type Watch = watch::Sender<Phase>;

    fn watch(phase: &watch::Sender<Phase>) -> Self::Watch {
        phase.clone()
    }

    fn finished(report: ConsumerReport) -> Finished {
        Finished::Consumer(report)
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
    let endpoints = options
        .url
        .iter()
        .map(|url| Endpoint::new(url, options.sasl_plain.as_deref(), options.cbs_key.as_deref()))
        .collect::<Result<Vec<_>>>()?;
    let run = Arc::new(Run {
        options,
        endpoints,
        id: payload::new_run_id(),
        counters: Counters::default(),
    });
    if run.options.sessions > 0 && run.options.client != Client::Wire {
        return Err(anyhow!("--sessions needs --client wire"));
    }
    match run.options.client {
        Client::Wire => execute_on::<wire::Producer, wire::Consumer>(run, deadline).await,
        Client::Fe2o3 => execute_on::<Producer, Consumer>(run, deadline).await,
    }
}

/// The run with producers `P` and consumers `C` (one client's).
async fn execute_on<P, C>(run: Arc<Run>, deadline: clock::Instant) -> Result<Report>
where
    P: Participant<Kind = Producing>,
    C: Participant<Kind = Consuming>,
{
    if run.options.preload {
        return preload_then_receive::<P, C>(run, deadline).await;
    }
    let (consumers, producers) = connect_by(deadline, &run, attach_all::<P, C>(&run)).await?;
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
        run.shown_urls(),
        run.options.messages,
    );

    let (phase, _) = watch::channel(Phase::Running);
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    spawn_all(&mut tasks, consumers, &run, &phase);
    spawn_all(&mut tasks, producers, &run, &phase);

    let mut finishes = Finishes::default();
    let error = collect_by(deadline, &mut tasks, &mut finishes, &run, "").await;
    let stopped = Instant::now();
    if error.is_some() {
        abort(&phase, &mut tasks, &mut finishes).await;
    }
    Ok(summarise(&run, start, start, stopped, finishes, error))
}

/// `--preload`: producers send everything (every send acknowledged), then consumers attach and
/// receive; the receive rate is timed from the consumers' start, the send rate from the
/// producers'.
async fn preload_then_receive<P, C>(run: Arc<Run>, deadline: clock::Instant) -> Result<Report>
where
    P: Participant<Kind = Producing>,
    C: Participant<Kind = Consuming>,
{
    let producers = connect_by(deadline, &run, attach::<P>(&run, run.options.producers)).await?;
    eprintln!(
        "ironbus-bench: run {:016x}: preloading {} messages with {} producers to {} at {}",
        run.id,
        run.options.messages,
        producers.len(),
        run.options.address,
        run.shown_urls(),
    );
    let (phase, _) = watch::channel(Phase::Running);
    let send_start = Instant::now();
    let mut tasks = JoinSet::new();
    spawn_all(&mut tasks, producers, &run, &phase);
    let mut finishes = Finishes::default();
    let mut error =
        collect_by(deadline, &mut tasks, &mut finishes, &run, " while preloading").await;
    let mut start = Instant::now();
    if error.is_none() {
        let consumers = attach::<C>(&run, run.options.consumer_count());
        match connect_by(deadline, &run, consumers).await {
            Ok(consumers) => {
                eprintln!(
                    "ironbus-bench: run {:016x}: preloaded in {:.3} s; {} consumers receiving",
                    run.id,
                    send_start.elapsed().as_secs_f64(),
                    consumers.len(),
                );
                start = Instant::now();
                spawn_all(&mut tasks, consumers, &run, &phase);
                error = collect_by(deadline, &mut tasks, &mut finishes, &run, "").await;
            }
            Err(err) => error = Some(format!("{err:#}")),
        }
    }
    let stopped = Instant::now();
    if error.is_some() {
        abort(&phase, &mut tasks, &mut finishes).await;
    }
    Ok(summarise(&run, send_start, start, stopped, finishes, error))
}

/// `attaching`, given up at `deadline` (connecting counts against `--timeout`).
async fn connect_by<T>(
    deadline: clock::Instant,
    run: &Run,
    attaching: impl Future<Output = Result<T>>,
) -> Result<T> {
    timeout_at(deadline, attaching)
        .await
        .map_err(|_| anyhow!("timed out after {} s while connecting", run.options.timeout))?
}

/// Attaches consumers first (so they are there when producers start), then producers.
async fn attach_all<P, C>(run: &Run) -> Result<(Vec<C>, Vec<P>)>
where
    P: Participant<Kind = Producing>,
    C: Participant<Kind = Consuming>,
{
    let consumers = attach::<C>(run, run.options.consumer_count()).await?;
    let producers = attach::<P>(run, run.options.producers).await?;
    Ok((consumers, producers))
}

/// Participants number 0 to `count` - 1 of a kind, attached one after the other.
async fn attach<T: Participant>(run: &Run, count: u32) -> Result<Vec<T>> {
    let mut participants = Vec::new();
    for index in 0..count {
        participants.push(T::attach(run, index).await?);
    }
    Ok(participants)
}

/// Starts each participant's run on `tasks`, following `phase`.
fn spawn_all<T: Participant>(
    tasks: &mut JoinSet<Result<Finished>>,
    participants: Vec<T>,
    run: &Arc<Run>,
    phase: &watch::Sender<Phase>,
) {
    for participant in participants {
        let (run, phase) = (Arc::clone(run), <T::Kind as Kind>::watch(phase));
        tasks.spawn(run_participant(participant, run, phase));
    }
}

/// A participant's run: its work, then its close whatever the work's outcome; an error names it.
async fn run_participant<T: Participant>(
    mut participant: T,
    run: Arc<Run>,
    mut phase: <T::Kind as Kind>::Watch,
) -> Result<Finished> {
    let mut report = <T::Kind as Kind>::Report::default();
    let outcome = participant.work(&run, &mut phase, &mut report).await;
    let name = participant.name().to_owned();
    participant.close().await;
    outcome.with_context(|| name)?;
    Ok(<T::Kind as Kind>::finished(report))
}

/// Collects every task's report until `deadline`; the run's error, if any (`during`: what a
/// timeout interrupted, for its message).
async fn collect_by(
    deadline: clock::Instant,
    tasks: &mut JoinSet<Result<Finished>>,
    finishes: &mut Finishes,
    run: &Run,
    during: &str,
) -> Option<String> {
    match timeout_at(deadline, collect(tasks, finishes)).await {
        Ok(Ok(())) => None,
        Ok(Err(err)) => Some(format!("{err:#}")),
        Err(_) => Some(format!("timed out after {} s{during}", run.options.timeout)),
    }
}

/// After an error: aborts the run and collects what the tasks still report, abandoning them
/// after `STOP_GRACE`.
async fn abort(
    phase: &watch::Sender<Phase>,
    tasks: &mut JoinSet<Result<Finished>>,
    finishes: &mut Finishes,
) {
    phase.send_replace(Phase::Aborted);
    if timeout(STOP_GRACE, collect_rest(tasks, finishes)).await.is_err() {
        eprintln!("ironbus-bench: links did not stop within {STOP_GRACE:?}; abandoning them");
        tasks.abort_all();
    }
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
        url: run.endpoint(0).shown_url().to_owned(),
        urls: match run.endpoints.len() {
            1 => Vec::new(),
            _ => run.endpoints.iter().map(|e| e.shown_url().to_owned()).collect(),
        },
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
