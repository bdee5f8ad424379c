//! `cargo xtask cluster [--scenario kill|join|cutoff|store-failover] [--nodes N] [--kills K]
//! [--interval SECONDS] [--bound SECONDS] [--lease-ms MS] [--restart-after SECONDS]
//! [--producers P] [--consumers C]
//! [--rate R] [--seed S] [--cut refuse|black-hole] [--timeout SECONDS] [-- DRIVER-ARGS]`:
//! ironbus nodes on one PostgreSQL, loaded through every node by the official Python SDK, while
//! the task kills nodes, cuts them off from PostgreSQL or kills PostgreSQL's primary (the
//! failure proofs of the cluster design, `CLUSTER.md` §4).
//!
//! Steps, shared by every scenario ([`Rig::start`]): start a throwaway PostgreSQL
//! ([`Store`], the harness of `crate::postgres`); build `ironbus` as the crash test does; write a
//! config.json with one queue `cluster`, 16 partitions, duplicate detection; start `--nodes`
//! nodes on loopback ports of their own (`--cluster --node-id node-<i> --link-addr …`, each in
//! its own directory of the work directory, with its own log; [`nodes`]); wait until every node
//! answers `GET /health` with 200; create the Python suite's venv if missing and run the ledger's
//! own unit tests; start the driver `compat/cluster/driver.py` ([`driver`]): producers and
//! consumers spread over the nodes, every send acknowledged and every completion in a ledger; and
//! check that every partition accepts a send through every node.
//!
//! Scenarios:
//! - `kill --load queue|forward|transaction`: as `kill`, plus the crash driver `ironbus-crash`
//!   (`cargo xtask crash --scenario …`'s, same queues and flags from [`rig`]) with its workers
//!   spread over every node; after the kills it is stopped and must report nothing lost,
//!   duplicated, unknown or unpaired. The per-kill probes stay the Python driver's (which keeps
//!   its own load on `cluster`, judged as usual).
//! - `kill` (the default, [`kill`]): `--kills` times, after about `--interval` seconds
//!   (±25 %, seeded), SIGKILL a random node, ask the driver to probe every partition through a
//!   surviving node, restart the killed node (alternately 2 s after the kill, before its lease
//!   lapses, and 2 s after the lease, once the others took over), and record the seconds from
//!   the kill until every partition accepted a send again. Then stop the driver (it drains the
//!   queue) and check its verdict: nothing acknowledged lost, nothing completed twice, nothing
//!   unknown, and every kill-to-available time within `--bound` seconds.
//! - `join` ([`join`]): a node started under load takes a share of the partitions (every
//!   node's `/health` agreeing), then a node stopped with SIGTERM hands its partitions over
//!   sooner than a lease, and the same ledger verdict.
//! - `cutoff` ([`cutoff`]): every node reaches PostgreSQL through a [`Proxy`] of its own;
//!   `--kills` times, one node's proxy is cut (`--cut`) while the driver keeps working through
//!   every node: the node must demote itself within its lease, the others take its partitions,
//!   every partition accepts sends within `--bound`; healed, it must run partitions again. At
//!   the end PostgreSQL must hold every fence at its last claim's token and no undelivered
//!   message ([`fences`]).
//! - `store-failover` ([`failover`]): the primary has a synchronous standby and the nodes both
//!   hosts; the primary is SIGKILLed under load, the standby promoted after `--restart-after`
//!   (2 s): nothing acknowledged lost, every partition back within `--bound` of the promotion,
//!   and the SDK's exceptions listed, each retriable or not.
//!
//! A scenario is a module with a `run(&mut Rig, &Options, seed) -> Result<Outcome>`, ending with
//! [`verdict::finish`]: the rig starts the same way for all, [`Store`] adding what the scenario
//! needs (a standby, proxies).
//!
//! `--nodes 1` runs one plain server (no `--cluster`) on the same PostgreSQL: a baseline, where
//! the probe waits for the restart.
//!
//! `IRONBUS_CLUSTER_SERVER=<executable>` runs that instead of building `ironbus`.
//!
//! Invariants:
//! - No node, driver or database outlives the task (their values stop them when dropped).
//! - The same seed gives the same kill schedule (intervals, victims, probing nodes).
//! - A failure keeps the work directory (config, every node's logs, the driver's log) and shows
//!   the tails of the logs.

mod cutoff;
mod driver;
mod failover;
mod fences;
mod join;
mod kill;
pub(crate) mod nodes;
mod proxy;
mod verdict;

use std::{
    env,
    io::IsTerminal,
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use crate::compat::{self, WorkDir, LOG_TAIL_LINES};
use crate::postgres;
use crate::rig::{self, number, time_seed, QueueSpec};

use self::driver::Driver;
pub(crate) use self::nodes::{Nodes, Placement};
use self::proxy::{Cut, Proxy};

/// The queue the driver works on.
const QUEUE: &str = "cluster";
/// Its partitions (the probe sends to each).
const PARTITIONS: u16 = 16;
/// Its lock duration; the driver's drain waits longer than this without deliveries.
const LOCK_DURATION_SECS: u64 = 10;
/// How long after a SIGKILL the node is started again.
const RESTART_AFTER: Duration = Duration::from_secs(2);
/// How long a node may take to answer `/health` after a (re)start.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a probe may wait for a partition before it reports it unavailable.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);
/// The synchronous standby's name (`application_name`, replication slot) in `store-failover`.
const STANDBY: &str = "standby1";
/// Names an executable to run as the server instead of building `ironbus`.
const SERVER_ENV: &str = "IRONBUS_CLUSTER_SERVER";

const USAGE: &str = "usage: cargo xtask cluster [--scenario kill|join|cutoff|store-failover] \
                     [--load python|queue|forward|transaction] [--nodes N] [--kills K] [--interval SECONDS] [--bound SECONDS] \
                     [--lease-ms MS] [--restart-after SECONDS] [--producers P] [--consumers C] \
                     [--rate R] [--seed S] [--cut refuse|black-hole] \
                     [--timeout SECONDS] [-- DRIVER-ARGS]";

/// What the task checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    /// SIGKILL random nodes under load.
    Kill,
    /// A node joins under load; a node leaves on SIGTERM.
    Join,
    /// A node loses PostgreSQL but not its clients.
    Cutoff,
    /// PostgreSQL's primary dies; its standby is promoted.
    StoreFailover,
}

impl Scenario {
    const ALL: [Scenario; 4] =
        [Scenario::Kill, Scenario::Join, Scenario::Cutoff, Scenario::StoreFailover];

    fn name(self) -> &'static str {
        match self {
            Scenario::Kill => "kill",
            Scenario::Join => "join",
            Scenario::Cutoff => "cutoff",
            Scenario::StoreFailover => "store-failover",
        }
    }

    fn parse(text: &str) -> Result<Scenario> {
        match Scenario::ALL.into_iter().find(|scenario| scenario.name() == text) {
            Some(scenario) => Ok(scenario),
            None => bail!("--scenario must be kill, join, cutoff or store-failover, got `{text}`"),
        }
    }
}

/// The command line.
#[derive(Debug, Clone, PartialEq)]
struct Options {
    scenario: Scenario,
    /// `python` (the Python driver alone) or a crash driver scenario ([`rig::CRASH_SCENARIOS`])
    /// beside it (`kill` only).
    load: String,
    nodes: usize,
    kills: u32,
    /// The mean wait before each kill.
    interval: Duration,
    /// The longest kill-to-available time that passes.
    bound: Duration,
    lease_ms: u64,
    /// When a killed node starts again; default: alternately before and after its lease.
    restart_after: Option<Duration>,
    /// Default: one per node.
    producers: Option<usize>,
    consumers: Option<usize>,
    /// Messages per second per producer.
    rate: f64,
    seed: Option<u64>,
    timeout: Duration,
    /// What `cutoff` does to the cut node's new connections to PostgreSQL.
    cut: Cut,
    driver_args: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            scenario: Scenario::Kill,
            load: "python".to_owned(),
            nodes: 3,
            kills: 5,
            interval: Duration::from_secs(20),
            bound: Duration::from_secs(10),
            lease_ms: 3000,
            restart_after: None,
            producers: None,
            consumers: None,
            rate: 40.0,
            seed: None,
            timeout: Duration::from_secs(900),
            cut: Cut::Refuse,
            driver_args: Vec::new(),
        }
    }
}

impl Options {
    fn producers(&self) -> usize {
        self.producers.unwrap_or(self.nodes)
    }

    fn consumers(&self) -> usize {
        self.consumers.unwrap_or(self.nodes)
    }

    /// The crash driver's scenario, when `--load` asks for it.
    fn crash_load(&self) -> Option<&str> {
        Some(self.load.as_str()).filter(|load| *load != "python")
    }
}

fn parse(args: &[String]) -> Result<Options> {
    let mut options = Options::default();
    let seconds = |flag: &str, text: String| -> Result<Duration> {
        match text.parse::<f64>() {
            Ok(secs) if secs > 0.0 && secs.is_finite() => Ok(Duration::from_secs_f64(secs)),
            _ => bail!("{flag} needs a positive number of seconds, got `{text}`"),
        }
    };
    options.driver_args = rig::walk_flags(args, |flag, value| {
        match flag {
            "--scenario" => options.scenario = Scenario::parse(&value()?)?,
            "--load" => {
                let load = value()?;
                if load != "python" && !rig::CRASH_SCENARIOS.contains(&load.as_str()) {
                    bail!("--load must be python, queue, forward or transaction, got `{load}`");
                }
                options.load = load;
            }
            "--nodes" => options.nodes = number(flag, &value()?, 1)?,
            "--kills" => options.kills = number(flag, &value()?, 0)?,
            "--interval" => options.interval = seconds(flag, value()?)?,
            "--bound" => options.bound = seconds(flag, value()?)?,
            "--lease-ms" => options.lease_ms = number(flag, &value()?, 1)?,
            "--restart-after" => options.restart_after = Some(seconds(flag, value()?)?),
            "--producers" => options.producers = Some(number(flag, &value()?, 1)?),
            "--consumers" => options.consumers = Some(number(flag, &value()?, 1)?),
            "--rate" => {
                let text = value()?;
                options.rate = match text.parse::<f64>() {
                    Ok(rate) if rate >= 0.0 && rate.is_finite() => rate,
                    _ => bail!("--rate needs a number of messages per second, got `{text}`"),
                };
            }
            "--seed" => options.seed = Some(number(flag, &value()?, 0)?),
            "--timeout" => options.timeout = seconds(flag, value()?)?,
            "--cut" => {
                let text = value()?;
                options.cut = match Cut::parse(&text) {
                    Some(cut) => cut,
                    None => bail!("--cut must be refuse or black-hole, got `{text}`"),
                };
            }
            "-h" | "--help" => bail!("{USAGE}"),
            other => bail!("unknown argument `{other}`\n{USAGE}"),
        }
        Ok(())
    })?;
    if options.crash_load().is_some() && options.scenario != Scenario::Kill {
        bail!("--load {} needs --scenario kill", options.load);
    }
    Ok(options)
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let options = parse(args)?;
    let started = Instant::now();
    let seed = options.seed.unwrap_or_else(time_seed);
    progress(&format!(
        "cluster scenario {} with {} nodes, seed {seed} (repeat the schedule with --seed {seed})",
        options.scenario.name(),
        options.nodes
    ));
    let (server, crash_driver) = binaries(&options)?;
    let python = compat::python_sdk()?;
    driver::check_ledger(&python)?;

    let work = WorkDir::create("cluster")?;
    let outcome = (|| -> Result<Outcome> {
        let mut rig = Rig::start(&server, &python, &work.path, &options)?;
        rig.crash_driver = crash_driver;
        let outcome = match options.scenario {
            Scenario::Kill => kill::run(&mut rig, &options, seed),
            Scenario::Join => join::run(&mut rig, &options, seed),
            Scenario::Cutoff => cutoff::run(&mut rig, &options, seed),
            Scenario::StoreFailover => failover::run(&mut rig, &options, seed),
        };
        if outcome.is_err() {
            rig.show_logs();
        }
        outcome
    })();
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(err) => {
            progress(&format!("kept the work directory {}", work.path.display()));
            return Err(err.context(format!("cluster {} failed", options.scenario.name())));
        }
    };
    progress(&format!(
        "cluster {} took {:.1} s",
        options.scenario.name(),
        started.elapsed().as_secs_f64()
    ));
    if outcome.failures.is_empty() {
        progress(&paint("passed", GREEN));
        work.remove();
        return Ok(());
    }
    progress(&format!("kept the work directory {}", work.path.display()));
    bail!("cluster {} failed: {}", options.scenario.name(), outcome.failures.join("; "))
}

/// The server's executable (built unless [`SERVER_ENV`] names one) and, for a crash `--load`,
/// the crash driver's (built).
fn binaries(options: &Options) -> Result<(PathBuf, Option<PathBuf>)> {
    let given = env::var_os(SERVER_ENV).map(PathBuf::from);
    if let Some(path) = &given {
        progress(&format!("{SERVER_ENV} is set: running {}", path.display()));
    }
    let mut wanted = Vec::new();
    if given.is_none() {
        wanted.push(("ironbus", "ironbus"));
    }
    if options.crash_load().is_some() {
        wanted.push(("ironbus-bench", "ironbus-crash"));
    }
    let packages: Vec<&str> = wanted.iter().map(|(package, _)| *package).collect();
    let names: Vec<&str> = wanted.iter().map(|(_, binary)| *binary).collect();
    let mut built = match wanted.is_empty() {
        true => Vec::new(),
        false => compat::build_release(&packages, &names)?,
    }
    .into_iter();
    let server = match given {
        Some(path) => path,
        None => built.next().context("no server executable was built")?,
    };
    Ok((server, built.next()))
}

/// What a scenario found: empty `failures` passes.
#[derive(Debug, Default)]
struct Outcome {
    failures: Vec<String>,
}

/// The PostgreSQL the nodes share: one primary; for `store-failover` also a synchronous
/// standby, and then [`Store::url`] names both hosts (`host=a,b … target_session_attrs=read-write`)
/// so that the nodes find the promoted one; for `cutoff` each node reaches the primary through
/// a [`Proxy`] of its own, which the scenario cuts.
#[derive(Debug)]
struct Store {
    primary: postgres::Database,
    standby: Option<postgres::Database>,
    /// Node `i`'s way to the primary, `proxies[i]` (`cutoff` only).
    proxies: Vec<Proxy>,
    /// The primary was killed on purpose: no longer checked.
    primary_killed: bool,
}

impl Store {
    fn start(options: &Options) -> Result<Store> {
        let primary = postgres::Database::start()?;
        let standby = match options.scenario {
            Scenario::StoreFailover => Some(primary.start_standby(STANDBY)?),
            _ => None,
        };
        let mut proxies = Vec::new();
        if options.scenario == Scenario::Cutoff {
            let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, primary.port()));
            for _ in 0..options.nodes {
                proxies.push(Proxy::start(upstream)?);
            }
        }
        Ok(Store { primary, standby, proxies, primary_killed: false })
    }

    /// Every node's `--postgres-url` (node `index`'s own: [`Store::node_url`]).
    fn url(&self) -> String {
        match &self.standby {
            Some(standby) => format!(
                "host=127.0.0.1,127.0.0.1 port={},{} user={} dbname=postgres \
                 target_session_attrs=read-write",
                self.primary.port(),
                standby.port(),
                postgres::USER
            ),
            None => self.primary.url(),
        }
    }

    /// Node `index`'s `--postgres-url`: through its proxy when it has one.
    fn node_url(&self, index: usize) -> Option<String> {
        let proxy = self.proxies.get(index)?;
        Some(format!("postgresql://{}@{}/postgres", postgres::USER, proxy.addr()))
    }

    /// The database that takes writes: the standby once the primary was killed.
    fn writable(&self) -> &postgres::Database {
        match (&self.standby, self.primary_killed) {
            (Some(standby), true) => standby,
            _ => &self.primary,
        }
    }

    fn check_running(&self) -> Result<()> {
        if !self.primary_killed {
            self.primary.check_running()?;
        }
        if let Some(standby) = &self.standby {
            standby.check_running().context("the standby")?;
        }
        Ok(())
    }
}

/// Everything a scenario works with: the database, the nodes and the driver. Dropped in
/// reverse order of start: the driver, the nodes, then the database.
#[derive(Debug)]
struct Rig {
    driver: Driver,
    nodes: Nodes,
    store: Store,
    deadline: Instant,
    /// The work directory.
    work: PathBuf,
    /// `ironbus-crash`, for a crash `--load`.
    crash_driver: Option<PathBuf>,
}

impl Rig {
    fn start(server: &Path, python: &Path, work: &Path, options: &Options) -> Result<Rig> {
        let deadline = Instant::now() + options.timeout;
        let config = work.join("config.json");
        let queue = QueueSpec {
            name: QUEUE,
            partitions: u32::from(PARTITIONS),
            dedup: true,
            forward_to: "",
            lock_secs: LOCK_DURATION_SECS,
        };
        let mut queues = vec![queue];
        if let Some(load) = options.crash_load() {
            queues.extend(rig::crash_queues(load));
        }
        let text = serde_json::to_string_pretty(&rig::config_json(&queues))
            .context("encoding the config")?;
        std::fs::write(&config, text + "\n")
            .with_context(|| format!("writing {}", config.display()))?;
        let store = Store::start(options)?;
        let mut nodes =
            Nodes::new(server, &config, work, store.url(), options.lease_ms, options.nodes > 1);
        for _ in 0..options.nodes {
            let index = nodes.add()?;
            if let Some(url) = store.node_url(index) {
                nodes.set_postgres_url(index, url);
            }
            nodes.start(index)?;
        }
        for index in 0..nodes.len() {
            let took = nodes.wait_ready(index, READY_TIMEOUT)?;
            progress(&format!("{} healthy after {:.1} s", nodes.name(index), took.as_secs_f64()));
        }
        let endpoints: Vec<String> = (0..nodes.len()).map(|i| nodes.amqp(i).to_string()).collect();
        let driver = Driver::start(python, work, &endpoints, options)?;
        let mut rig =
            Rig { driver, nodes, store, deadline, work: work.to_owned(), crash_driver: None };
        for index in 0..rig.nodes.len() {
            let probe = rig.probe(index)?;
            match probe.seconds {
                Some(secs) => progress(&format!(
                    "every partition accepts sends through {} ({secs:.2} s)",
                    rig.nodes.name(index)
                )),
                None => bail!(
                    "partitions {:?} accept no send through {} after {PROBE_TIMEOUT:?}",
                    probe.unavailable(),
                    rig.nodes.name(index)
                ),
            }
        }
        Ok(rig)
    }

    /// Asks the driver to probe every partition through node `index` and waits for the answer.
    fn probe(&mut self, index: usize) -> Result<driver::Probe> {
        self.driver.start_probe(self.nodes.amqp(index))?;
        self.driver.finish_probe(self.remaining())
    }

    /// Time left before `--timeout`.
    fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Fails when the database, a node that should run or the driver has exited.
    fn check_running(&mut self) -> Result<()> {
        self.check_store_and_nodes()?;
        self.driver.check_running()
    }

    /// Fails when the database or a node that should run has exited.
    fn check_store_and_nodes(&mut self) -> Result<()> {
        self.store.check_running()?;
        self.nodes.check_running()
    }

    /// The tails of the driver's and every node's latest log.
    fn show_logs(&self) {
        eprintln!("{}", compat::log_tail(&self.driver.log, LOG_TAIL_LINES));
        for log in self.nodes.latest_logs() {
            eprintln!("{}", compat::log_tail(&log, LOG_TAIL_LINES / 2));
        }
    }
}

const GREEN: &str = "32";
const RED: &str = "31";

/// `text` in colour when stderr is a terminal and `NO_COLOR` is unset.
fn paint(text: &str, colour: &str) -> String {
    if std::io::stderr().is_terminal() && env::var_os("NO_COLOR").is_none() {
        format!("\x1b[{colour}m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// A progress line for the person watching.
fn progress(text: &str) {
    eprintln!("xtask cluster: {text}");
}

/// The time of day in UTC, `HH:MM:SS.mmm`, as the nodes' and the driver's logs stamp lines.
fn utc_now() -> String {
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = now.as_secs() % 86_400;
    let (hours, minutes, seconds) = (secs / 3600, secs / 60 % 60, secs % 60);
    format!("{hours:02}:{minutes:02}:{seconds:02}.{:03}", now.subsec_millis())
}

/// The median and the maximum of `values` (`None` when empty).
fn median_and_max(values: &[Duration]) -> Option<(Duration, Duration)> {
    let mut sorted = values.to_vec();
    sorted.sort();
    let max = *sorted.last()?;
    let mid = sorted.len() / 2;
    let median =
        if sorted.len() % 2 == 1 { sorted[mid] } else { (sorted[mid - 1] + sorted[mid]) / 2 };
    Some((median, max))
}

/// `median …, max …` of [`median_and_max`]'s answer.
fn shown(value: Option<(Duration, Duration)>) -> String {
    match value {
        Some((median, max)) => {
            format!("median {:.2} s, max {:.2} s", median.as_secs_f64(), max.as_secs_f64())
        }
        None => "none".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn defaults_are_three_nodes_five_kills_every_twenty_seconds() {
        let options = parse(&[]).unwrap();
        assert_eq!(options, Options::default());
        assert_eq!((options.scenario, options.nodes, options.kills), (Scenario::Kill, 3, 5));
        assert_eq!(
            (options.interval, options.bound),
            (Duration::from_secs(20), Duration::from_secs(10))
        );
        assert_eq!((options.producers(), options.consumers()), (3, 3));
    }

    #[test]
    fn the_short_ci_run_parses() {
        let options = parse(&args("--scenario kill --kills 2 --interval 10")).unwrap();
        assert_eq!((options.kills, options.interval), (2, Duration::from_secs(10)));
    }

    #[test]
    fn flags_are_parsed_with_spaces_or_equals() {
        let options = parse(&args(
            "--nodes=4 --bound 7.5 --lease-ms 2000 --restart-after 4 --producers 2 --consumers=5 --rate 0 \
             --seed 9 --timeout 60 -- --quiet 3",
        ))
        .unwrap();
        assert_eq!((options.nodes, options.lease_ms, options.seed), (4, 2000, Some(9)));
        assert_eq!(options.bound, Duration::from_millis(7500));
        assert_eq!(options.restart_after, Some(Duration::from_secs(4)));
        assert_eq!((options.producers(), options.consumers(), options.rate), (2, 5, 0.0));
        assert_eq!(options.driver_args, ["--quiet", "3"]);
    }

    #[test]
    fn crash_loads_parse_for_kill_only() {
        assert_eq!(parse(&[]).unwrap().crash_load(), None);
        for load in rig::CRASH_SCENARIOS {
            let options = parse(&args(&format!("--load {load}"))).unwrap();
            assert_eq!(options.crash_load(), Some(load));
        }
        assert_eq!(parse(&args("--load python")).unwrap().crash_load(), None);
        assert!(parse(&args("--load java")).is_err());
        assert!(parse(&args("--scenario join --load forward")).is_err());
    }

    #[test]
    fn every_scenario_and_cut_mode_parses() {
        for scenario in Scenario::ALL {
            let parsed = parse(&args(&format!("--scenario {}", scenario.name()))).unwrap();
            assert_eq!(parsed.scenario, scenario);
        }
        assert_eq!(parse(&args("--cut black-hole")).unwrap().cut, Cut::BlackHole);
        assert_eq!(parse(&[]).unwrap().cut, Cut::Refuse);
    }

    #[test]
    fn bad_arguments_are_refused_clearly() {
        for bad in [
            "--nodes 0",
            "--nodes",
            "--interval 0",
            "--bound x",
            "--rate -1",
            "--scenario crash",
            "--cut sometimes",
            "--what 1",
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn median_of_odd_and_even_counts_and_the_max() {
        let secs = |list: &[u64]| list.iter().map(|s| Duration::from_secs(*s)).collect::<Vec<_>>();
        assert_eq!(median_and_max(&[]), None);
        assert_eq!(
            median_and_max(&secs(&[5, 1, 3])),
            Some((Duration::from_secs(3), Duration::from_secs(5)))
        );
        assert_eq!(
            median_and_max(&secs(&[4, 1, 2, 8])),
            Some((Duration::from_secs(3), Duration::from_secs(8)))
        );
    }
}
