//! `ironbus-crash`: the crash test's driver (`cargo xtask crash` runs it). Producers and
//! consumers work one queue over AMQP 1.0 for the whole test, across server crashes, and at the
//! end a ledger says whether anything acknowledged was lost, delivered twice, or made up.
//!
//! - Producers send durable messages with unique MessageIds (`p<producer>-<n>`); a send counts as
//!   acknowledged only on an `Accepted` outcome. On any failure they reconnect with backoff and
//!   send every unacknowledged message again with the same MessageId (the queue has duplicate
//!   detection, so a retry of a stored message is dropped and still acknowledged).
//! - Consumers receive in peek-lock mode and complete through `$management` (`completer`), a
//!   completion counting only once the broker confirmed it.
//! - Stop: a `stop` line on stdin (or end of input), `--stop-file` appearing, or `--duration`.
//!   Producers then finish their unacknowledged sends; consumers drain until nothing arrived for
//!   `--quiet` seconds with every consumer attached and no transaction under way. The summary
//!   is one JSON line on stdout; progress and errors go to stderr.
//!
//! Exit status: 0 when nothing was lost, duplicated or unknown; 1 otherwise, or when the driver
//! could not finish (unacknowledged sends left, the queue never went quiet).

#[path = "../cbs.rs"]
mod cbs;
#[path = "../crash/completer.rs"]
mod completer;
#[path = "../crash/consumer.rs"]
mod consumer;
#[path = "../endpoint.rs"]
#[allow(dead_code, reason = "the lean client's login accessors are the load generator's")]
mod endpoint;
#[path = "../crash/ledger.rs"]
mod ledger;
#[path = "../crash/producer.rs"]
mod producer;
#[path = "../crash/worker.rs"]
mod worker;

use std::{
    io::BufRead,
    path::PathBuf,
    process::ExitCode,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex, MutexGuard,
    },
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use serde::Serialize;
use tokio::{
    sync::watch,
    task::JoinSet,
    time::{sleep, timeout},
};

use crate::{
    consumer::Consumer,
    endpoint::{Endpoint, Link},
    ledger::{Ledger, Summary},
    producer::Producer,
    worker::Worker,
};

/// The crash test's driver: producers and consumers on one queue, across server crashes; prints
/// a JSON verdict (acknowledged, completed, lost, duplicated, unknown) when told to stop.
#[derive(Debug, Parser)]
#[command(name = "ironbus-crash", version)]
pub(crate) struct Options {
    /// Broker URL (plain `amqp`); `amqp://USER:PASS@host:port` authenticates with SASL PLAIN.
    /// Repeated: producer, consumer and worker `i` connect to URL `i mod n` (cluster nodes)
    #[arg(long, default_value = "amqp://127.0.0.1:5672", action = clap::ArgAction::Append)]
    pub url: Vec<String>,

    /// The queue; it needs duplicate detection (RequiresDuplicateDetection) for retries
    #[arg(long, default_value = "crash")]
    pub address: String,

    /// Consumers receive from this node instead of `--address` (the last queue of a forwarding
    /// chain that starts at `--address`)
    #[arg(long, value_name = "ADDRESS")]
    pub receive_from: Option<String>,

    /// The transaction scenario: workers take each message from `--address` and, in one
    /// transaction, send two derived messages through it to this queue (send-via) and complete
    /// it; consumers then drain this queue (it is also `--receive-from`)
    #[arg(long, value_name = "ADDRESS")]
    pub transfer_to: Option<String>,

    /// Messages per second each producer sends at most (0: as fast as acknowledgements come);
    /// given twice, the last one counts
    #[arg(long, default_value_t = 0, overrides_with = "rate")]
    pub rate: u32,

    /// Transactional workers (with `--transfer-to`)
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub workers: u32,

    /// Producer connections
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub producers: u32,

    /// Consumer connections
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub consumers: u32,

    /// Unacknowledged sends per producer
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub window: u32,

    /// Link credit per consumer (and the largest completion batch)
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub credit: u32,

    /// Body size in bytes
    #[arg(long, default_value_t = 64, value_parser = parse_size)]
    pub size: usize,

    /// SASL PLAIN credentials (for ironbus: `RootManageSharedAccessKey:<key>`)
    #[arg(long, value_name = "USER:PASS", conflicts_with = "cbs_key")]
    pub sasl_plain: Option<String>,

    /// SASL ANONYMOUS, then a `$cbs` put-token signed with this key of RootManageSharedAccessKey
    #[arg(long, value_name = "KEY")]
    pub cbs_key: Option<String>,

    /// Stop when this file exists (instead of reading `stop` from stdin)
    #[arg(long, value_name = "PATH")]
    pub stop_file: Option<PathBuf>,

    /// Stop after this many seconds (instead of reading `stop` from stdin)
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<u64>,

    /// The drain ends after this many seconds without a delivery (longer than the queue's lock
    /// duration, so that a completion the broker lost comes back before the verdict)
    #[arg(long, value_name = "SECONDS", default_value_t = 12)]
    pub quiet: u64,

    /// After the stop, how long producers and the drain may take before the driver gives up
    #[arg(long, value_name = "SECONDS", default_value_t = 180)]
    pub finish_timeout: u64,

    /// Seconds between progress lines on stderr (0: none)
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    pub progress: u64,

    /// Log every reconnect and its cause on stderr
    #[arg(long)]
    pub verbose: bool,
}

impl Options {
    /// The node consumers receive from: `--receive-from`, else `--address`.
    pub(crate) fn receive_address(&self) -> &str {
        self.receive_from.as_deref().or(self.transfer_to.as_deref()).unwrap_or(&self.address)
    }
}

fn parse_size(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(size) if (1..=1 << 20).contains(&size) => Ok(size),
        _ => Err(format!("`{text}` is not a body size from 1 to 1048576 bytes")),
    }
}

/// How long connecting, attaching or a consumer's request (a completion; a worker's post,
/// accept or discharge) may take before the connection is considered dead.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// How long one wait for a delivery lasts before the phase is looked at again.
pub(crate) const POLL: Duration = Duration::from_millis(250);

/// Where the run is; every task watches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Producers send new messages; consumers consume.
    Running,
    /// Stop requested: producers only finish their unacknowledged sends.
    Finishing,
    /// Producers are done; consumers drain the queue.
    Draining,
    /// The queue stayed quiet: consumers detach.
    Done,
    /// Gave up: everyone stops.
    Aborted,
}

/// What producers and consumers share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub options: Options,
    /// This run's id, the first part of every MessageId.
    pub run: String,
    /// One per `--url`; connection `slot` uses `endpoints[slot % n]`.
    pub endpoints: Vec<Endpoint>,
    pub phase: watch::Sender<Phase>,
    ledger: Mutex<Ledger>,
    /// When a consumer last received something or (re)attached.
    last_activity: Mutex<Instant>,
    attached_consumers: AtomicUsize,
    /// Transactions under way: the queue is not quiet while one may still commit.
    working: AtomicUsize,
    reconnects: AtomicU64,
}

impl Shared {
    /// The ledger (a poisoned lock is taken over: the ledger's updates are single statements).
    pub(crate) fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Opens connection `name` for producer, consumer or worker `slot` to URL `slot mod n`
    /// (putting a `$cbs` token for `address` if asked to), within `REQUEST_TIMEOUT`.
    pub(crate) async fn connect(&self, slot: u32, name: &str, address: &str) -> Result<Link> {
        let index = usize::try_from(slot).unwrap_or(0) % self.endpoints.len().max(1);
        let endpoint = self.endpoints.get(index).context("no --url")?;
        timeout(REQUEST_TIMEOUT, endpoint.connect(name, address))
            .await
            .context("connecting timed out")?
    }

    /// Every URL as shown (passwords hidden), comma-separated.
    fn shown_urls(&self) -> String {
        let urls: Vec<&str> = self.endpoints.iter().map(Endpoint::shown_url).collect();
        urls.join(",")
    }

    pub(crate) fn touch(&self) {
        *self.last_activity.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn quiet_for(&self) -> Duration {
        self.last_activity.lock().unwrap_or_else(|p| p.into_inner()).elapsed()
    }

    /// A transaction began; it counts as activity until the guard is dropped.
    pub(crate) fn working(&self) -> Working<'_> {
        self.working.fetch_add(1, Ordering::SeqCst);
        self.touch();
        Working(self)
    }

    /// Whether nothing happened for `quiet` and no transaction is under way.
    fn quiet(&self, quiet: Duration) -> bool {
        self.working.load(Ordering::SeqCst) == 0 && self.quiet_for() >= quiet
    }

    /// A consumer attached; it counts as attached until the guard is dropped.
    pub(crate) fn consumer_attached(&self) -> Attached<'_> {
        self.attached_consumers.fetch_add(1, Ordering::SeqCst);
        self.touch();
        Attached(self)
    }

    /// After connection `name` failed with `err`: counts the reconnect, says why when verbose,
    /// and waits out the backoff, cut short once the phase satisfies `stop`.
    pub(crate) async fn pause_before_reconnecting(
        &self,
        name: &str,
        err: &anyhow::Error,
        backoff: &mut Backoff,
        phase: &mut watch::Receiver<Phase>,
        stop: impl FnMut(&Phase) -> bool,
    ) {
        self.reconnects.fetch_add(1, Ordering::Relaxed);
        if self.options.verbose {
            eprintln!("ironbus-crash: {name}: {err:#}; reconnecting");
        }
        tokio::select! {
            () = backoff.wait() => {}
            _ = phase.wait_for(stop) => {}
        }
    }
}

/// A consumer of the run (a plain one, or a transactional worker): it works one connection at
/// a time.
pub(crate) trait Connected {
    /// One connection's life. `Ok` when the run is done; `Err` on any failure.
    async fn connected(&self, shared: &Shared, name: &str, backoff: &mut Backoff) -> Result<()>;
}

/// Runs `consumer` until the run is done (or aborted), reconnecting with backoff after each
/// failure; its connections are named `<prefix>-<n>`, n = 1, 2, ...
pub(crate) async fn reconnecting<C: Connected>(
    consumer: C,
    prefix: String,
    shared: Arc<Shared>,
) -> Result<()> {
    let mut phase = shared.phase.subscribe();
    let mut backoff = Backoff::default();
    let mut connection = 0u64;
    loop {
        match *phase.borrow_and_update() {
            Phase::Done => return Ok(()),
            Phase::Aborted => return Err(anyhow!("aborted")),
            _ => {}
        }
        connection += 1;
        let name = format!("{prefix}-{connection}");
        match consumer.connected(&shared, &name, &mut backoff).await {
            Ok(()) => return Ok(()),
            Err(err) => {
                let stop = |p: &Phase| matches!(p, Phase::Done | Phase::Aborted);
                shared.pause_before_reconnecting(&name, &err, &mut backoff, &mut phase, stop).await;
            }
        }
    }
}

/// Resolves once `connection`'s event loop has stopped (the broker went away). fe2o3-amqp leaves
/// outstanding outcomes pending when the socket dies, so this is watched beside them.
pub(crate) async fn closed(connection: &fe2o3_amqp::connection::ConnectionHandle<()>) {
    while !connection.is_closed() {
        sleep(Duration::from_millis(100)).await;
    }
}

/// Whether a consumer's loop goes on: not once the run is done (or aborted); an error once its
/// `connection` has closed.
pub(crate) fn still_consuming(
    phase: &mut watch::Receiver<Phase>,
    connection: &fe2o3_amqp::connection::ConnectionHandle<()>,
) -> Result<bool> {
    if matches!(*phase.borrow_and_update(), Phase::Done | Phase::Aborted) {
        return Ok(false);
    }
    if connection.is_closed() {
        bail!("the connection closed");
    }
    Ok(true)
}

/// An attached consumer; dropping it (the connection ended) uncounts it.
#[derive(Debug)]
pub(crate) struct Attached<'a>(&'a Shared);

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        self.0.attached_consumers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A transaction under way; dropping it (the transaction ended, either way) marks activity.
#[derive(Debug)]
pub(crate) struct Working<'a>(&'a Shared);

impl Drop for Working<'_> {
    fn drop(&mut self) {
        self.0.touch();
        self.0.working.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Exponential backoff between reconnects: 50 ms doubling to 1 s.
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
}

const BACKOFF_FIRST: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: BACKOFF_FIRST }
    }
}

impl Backoff {
    /// The next delay, doubling the one after.
    pub(crate) fn step(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        delay
    }

    pub(crate) async fn wait(&mut self) {
        sleep(self.step()).await;
    }

    /// After a successful connection.
    pub(crate) fn reset(&mut self) {
        self.next = BACKOFF_FIRST;
    }
}

/// An id for this run, different from earlier runs' (time and process id mixed; 8 hex digits).
fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64);
    // splitmix64's finaliser, so that consecutive runs differ in every digit
    let mut z = (nanos ^ (u64::from(std::process::id()) << 40)).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    format!("r{:08x}", (z ^ (z >> 31)) as u32)
}

/// The JSON line on stdout.
#[derive(Debug, Serialize)]
struct Report {
    passed: bool,
    #[serde(flatten)]
    summary: Summary,
    reconnects: u64,
    seconds: f64,
    /// Why the driver could not finish, if it could not.
    error: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = Options::parse();
    let started = Instant::now();
    let endpoints = options
        .url
        .iter()
        .map(|url| Endpoint::new(url, options.sasl_plain.as_deref(), options.cbs_key.as_deref()))
        .collect::<Result<Vec<_>>>();
    let endpoints = match endpoints {
        Ok(endpoints) => endpoints,
        Err(err) => {
            eprintln!("ironbus-crash: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    let (phase, _) = watch::channel(Phase::Running);
    let ledger =
        if options.transfer_to.is_some() { Ledger::with_pairs() } else { Ledger::default() };
    let shared = Arc::new(Shared {
        options,
        run: run_id(),
        endpoints,
        phase,
        ledger: Mutex::new(ledger),
        last_activity: Mutex::new(Instant::now()),
        working: AtomicUsize::new(0),
        attached_consumers: AtomicUsize::new(0),
        reconnects: AtomicU64::new(0),
    });
    let error = execute(&shared).await.err().map(|err| format!("{err:#}"));
    let summary = shared.ledger().summary();
    let report = Report {
        passed: summary.passed() && error.is_none(),
        summary,
        reconnects: shared.reconnects.load(Ordering::Relaxed),
        seconds: (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
        error,
    };
    print(&report);
    if let Some(error) = &report.error {
        eprintln!("ironbus-crash: {error}");
    }
    if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[allow(clippy::print_stdout, reason = "the JSON line is this tool's output")]
fn print(report: &Report) {
    match serde_json::to_string(report) {
        Ok(line) => println!("{line}"),
        Err(err) => eprintln!("ironbus-crash: encoding the report: {err}"),
    }
}

/// Runs producers and consumers until stopped and drained.
async fn execute(shared: &Arc<Shared>) -> Result<()> {
    let options = &shared.options;
    eprintln!(
        "ironbus-crash: run {}: {} producers and {} consumers on `{}` at {}",
        shared.run,
        options.producers,
        options.consumers,
        options.address,
        shared.shown_urls()
    );
    let mut consumers = JoinSet::new();
    for index in 0..options.consumers {
        consumers.spawn(reconnecting(
            Consumer(index),
            format!("crash-c{index}"),
            Arc::clone(shared),
        ));
    }
    if options.transfer_to.is_some() {
        // Workers count as consumers for the drain: the quiet period needs them attached.
        for index in 0..options.workers {
            consumers.spawn(reconnecting(
                Worker(index),
                format!("crash-w{index}"),
                Arc::clone(shared),
            ));
        }
    }
    let mut producers = JoinSet::new();
    for index in 0..options.producers {
        producers.spawn(Producer::new(&shared.run, index).run(Arc::clone(shared)));
    }
    let progress = tokio::spawn(report_progress(Arc::clone(shared)));

    let outcome = finish(shared, &mut producers, &mut consumers).await;
    if outcome.is_err() {
        shared.phase.send_replace(Phase::Aborted);
    }
    // Consumers stop at Done or Aborted; give them a moment to detach.
    let stopping = async {
        while let Some(joined) = consumers.join_next().await {
            match joined {
                Ok(Ok(())) => {}
                Ok(Err(err)) => eprintln!("ironbus-crash: consumer: {err:#}"),
                Err(err) => eprintln!("ironbus-crash: a consumer task died: {err}"),
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(10), stopping).await.is_err() {
        consumers.abort_all();
    }
    producers.abort_all();
    progress.abort();
    outcome
}

/// Waits for the stop, lets producers finish, drains, and moves the phase along.
async fn finish(
    shared: &Arc<Shared>,
    producers: &mut JoinSet<Result<()>>,
    consumers: &mut JoinSet<Result<()>>,
) -> Result<()> {
    let options = &shared.options;
    tokio::select! {
        stop = stop_requested(options) => stop?,
        Some(joined) = producers.join_next() => {
            return Err(task_failure("producer", Some(joined)));
        }
        Some(joined) = consumers.join_next() => {
            return Err(task_failure("consumer", Some(joined)));
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(options.finish_timeout);
    let (acknowledged, completed) = {
        let ledger = shared.ledger();
        (ledger.acknowledged(), ledger.completed())
    };
    eprintln!(
        "ironbus-crash: stop requested ({acknowledged} acknowledged, {completed} completed); \
         finishing unacknowledged sends"
    );
    shared.phase.send_replace(Phase::Finishing);
    let producing = async {
        while let Some(joined) = producers.join_next().await {
            match joined {
                Ok(Ok(())) => {}
                other => return Err(task_failure("producer", Some(other))),
            }
        }
        Ok(())
    };
    tokio::time::timeout_at(deadline, producing).await.map_err(|_| {
        anyhow!(
            "producers could not get every send acknowledged within {} s of the stop",
            options.finish_timeout
        )
    })??;

    eprintln!(
        "ironbus-crash: every send acknowledged; draining until quiet for {} s",
        options.quiet
    );
    shared.phase.send_replace(Phase::Draining);
    let quiet = Duration::from_secs(options.quiet);
    let workers = if options.transfer_to.is_some() { options.workers } else { 0 };
    let consumer_count = usize::try_from(options.consumers + workers).unwrap_or(usize::MAX);
    loop {
        if shared.attached_consumers.load(Ordering::SeqCst) >= consumer_count && shared.quiet(quiet)
        {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(anyhow!(
                "the queue did not stay quiet for {} s within {} s of the stop",
                options.quiet,
                options.finish_timeout
            ));
        }
        tokio::select! {
            () = sleep(Duration::from_millis(200)) => {}
            Some(joined) = consumers.join_next() => {
                return Err(task_failure("consumer", Some(joined)));
            }
        }
    }
    shared.phase.send_replace(Phase::Done);
    Ok(())
}

/// Why a task ended before it should have.
fn task_failure(
    role: &str,
    joined: Option<Result<Result<()>, tokio::task::JoinError>>,
) -> anyhow::Error {
    match joined {
        Some(Ok(Ok(()))) | None => anyhow!("a {role} stopped early"),
        Some(Ok(Err(err))) => err.context(format!("a {role} failed")),
        Some(Err(err)) => anyhow!("a {role} task died: {err}"),
    }
}

/// Resolves when the run should stop: `--duration`, `--stop-file`, or a `stop` line (or the end)
/// of stdin.
async fn stop_requested(options: &Options) -> Result<()> {
    if let Some(seconds) = options.duration {
        sleep(Duration::from_secs(seconds)).await;
        return Ok(());
    }
    if let Some(path) = &options.stop_file {
        while !path.exists() {
            sleep(Duration::from_millis(200)).await;
        }
        return Ok(());
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let stdin = std::io::stdin();
            for line in stdin.lock().lines() {
                match line {
                    Ok(line) if line.trim() == "stop" => break,
                    Ok(line) => {
                        eprintln!("ironbus-crash: ignoring input `{line}` (expected `stop`)")
                    }
                    Err(_) => break,
                }
            }
            let _ = tx.send(());
        })
        .map_err(|err| anyhow!("starting the stdin reader: {err}"))?;
    // A dropped sender (the thread ended some other way) also means stop.
    let _ = rx.await;
    Ok(())
}

/// Prints a progress line every `--progress` seconds.
async fn report_progress(shared: Arc<Shared>) {
    let every = shared.options.progress;
    if every == 0 {
        return;
    }
    loop {
        sleep(Duration::from_secs(every)).await;
        let (acknowledged, completed) = {
            let ledger = shared.ledger();
            (ledger.acknowledged(), ledger.completed())
        };
        eprintln!(
            "ironbus-crash: {:?}: {acknowledged} acknowledged, {completed} completed, {} reconnects",
            *shared.phase.borrow(),
            shared.reconnects.load(Ordering::Relaxed),
        );
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn command_line_definition_is_consistent() {
        Options::command().debug_assert();
    }

    #[test]
    fn defaults_are_four_producers_and_four_consumers() {
        let options = Options::try_parse_from(["ironbus-crash"]).unwrap();
        assert_eq!((options.producers, options.consumers, options.credit), (4, 4, 50));
        assert_eq!(options.address, "crash");
        assert_eq!(options.url, ["amqp://127.0.0.1:5672"]);
    }

    #[test]
    fn urls_repeat() {
        let options = Options::try_parse_from([
            "ironbus-crash",
            "--url",
            "amqp://a:1",
            "--url",
            "amqp://b:2",
        ])
        .unwrap();
        assert_eq!(options.url, ["amqp://a:1", "amqp://b:2"]);
    }

    #[test]
    fn the_last_rate_given_counts() {
        let options =
            Options::try_parse_from(["ironbus-crash", "--rate", "25", "--rate", "5"]).unwrap();
        assert_eq!(options.rate, 5);
    }

    #[test]
    fn bad_numbers_are_refused() {
        assert!(Options::try_parse_from(["ironbus-crash", "--producers", "0"]).is_err());
        assert!(Options::try_parse_from(["ironbus-crash", "--size", "0"]).is_err());
        assert!(Options::try_parse_from(["ironbus-crash", "--size", "lots"]).is_err());
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_and_resets() {
        let mut backoff = Backoff::default();
        let delays: Vec<u64> = (0..7).map(|_| backoff.step().as_millis() as u64).collect();
        assert_eq!(delays, [50, 100, 200, 400, 800, 1000, 1000]);
        backoff.reset();
        assert_eq!(backoff.step(), BACKOFF_FIRST);
    }
}
