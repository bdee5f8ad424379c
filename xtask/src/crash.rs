//! `cargo xtask crash [--cycles N] [--producers P] [--consumers C] [--seed S]
//! [--store rocksdb|postgres|memory] [--scenario queue|forward|transaction]
//! [--timeout SECONDS] [-- DRIVER-ARGS]`: the crash test (issue 4).
//!
//! Steps: build `ironbus` and the driver `ironbus-crash` (release); write a config with one
//! partitioned queue `crash` with duplicate detection; start the server on a free port with a
//! fresh data directory; start the driver (producers and consumers on `crash`); then `N` times:
//! wait a random 0.5–3 s (seeded, the seed is printed), SIGKILL the server, restart it on the
//! same data directory and port, and wait until it accepts connections. Finally tell the driver
//! to stop (a `stop` line on its stdin): it finishes its unacknowledged sends, drains the queue
//! and prints its verdict, which this task prints as `N cycles, M acknowledged, L lost, D
//! duplicated` plus the JSON.
//!
//! `--store postgres` (issue 26) first starts a throwaway PostgreSQL ([`crate::postgres`]) and
//! runs every incarnation of the server on its database (`--postgres-url`): only ironbus is
//! killed, the database runs from the first start to the verdict (checked after each restart)
//! and is stopped and removed at the end, whatever the outcome. Its commits are slowed by
//! 100 ms (`commit_delay`), so that a SIGKILL often leaves a commit landing while the next
//! server recovers (which must wait for it: `PostgresOptions::wait_for_writers`).
//!
//! `--scenario forward` (issue 14) runs the same test across a forwarding chain of three queues:
//! producers send to `crash` (partitioned, duplicate detection), whose ForwardTo is `crash-mid`
//! (not partitioned), whose ForwardTo is `crash-end` (partitioned); consumers drain `crash-end`.
//! Every acknowledged message must come out of the end of the chain exactly once.
//!
//! `--scenario transaction` (issue 15): workers take each message from `crash` and, in one
//! transaction, send two derived messages through `crash` to `crash-out` (send-via; partitioned,
//! no duplicate detection) and complete it; consumers drain `crash-out`. Every acknowledged
//! message must have been completed and have yielded its two derived messages exactly once
//! (`unpaired` counts those that did not).
//!
//! Exits non-zero on any loss, duplicate or unknown message, when the driver fails, or after
//! `--timeout` (default 600 s). A failure keeps the work directory (config, data, logs) and shows
//! the tails of the logs.
//!
//! `IRONBUS_CRASH_SERVER=<executable>` and `IRONBUS_CRASH_DRIVER=<executable>` run those instead
//! of building `ironbus` and `ironbus-crash` (a build made elsewhere, a stand-in).
//!
//! Invariants:
//! - Neither the server, the driver nor the database outlives the task ([`Server`], [`CrashDriver`]
//!   and [`postgres::Database`] stop their processes when dropped).
//! - The same seed gives the same kill schedule.

use std::{
    env, fs,
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::compat::{self, Server, WorkDir, LOG_TAIL_LINES};
use crate::postgres::{self, StoreKind};
use crate::rig::{self, number, time_seed, CrashDriver, SplitMix64};
#[cfg(test)]
use crate::rig::{CHAIN, CRASH_QUEUE as QUEUE, OUT};

/// Shortest and longest wait before each SIGKILL, in milliseconds.
const KILL_AFTER_MS: (u64, u64) = (500, 3000);
/// How long the server may take to accept connections after a (re)start (recovery included).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The stores the crash test runs the server on.
const STORES: [StoreKind; 3] = [StoreKind::Rocksdb, StoreKind::Postgres, StoreKind::Memory];

/// Names an executable to run as the server instead of building `ironbus`.
const SERVER_ENV: &str = "IRONBUS_CRASH_SERVER";
/// Names an executable to run as the driver instead of building `ironbus-crash`.
const DRIVER_ENV: &str = "IRONBUS_CRASH_DRIVER";

const USAGE: &str = "usage: cargo xtask crash [--cycles N] [--producers P] [--consumers C] \
                     [--seed S] [--store rocksdb|postgres|memory] \
                     [--scenario queue|forward|transaction] \
                     [--timeout SECONDS] [-- DRIVER-ARGS]";

/// The command line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Options {
    cycles: u32,
    producers: u32,
    consumers: u32,
    seed: Option<u64>,
    store: StoreKind,
    /// `queue` (one queue) or `forward` (a chain of three).
    scenario: String,
    timeout: Duration,
    /// Extra arguments for `ironbus-crash`.
    driver_args: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            cycles: 20,
            producers: 4,
            consumers: 4,
            seed: None,
            store: StoreKind::Rocksdb,
            scenario: "queue".to_owned(),
            timeout: Duration::from_secs(600),
            driver_args: Vec::new(),
        }
    }
}

fn parse(args: &[String]) -> Result<Options> {
    let mut options = Options::default();
    options.driver_args = rig::walk_flags(args, |flag, value| {
        match flag {
            "--cycles" => options.cycles = number(flag, &value()?, 0)?,
            "--producers" => options.producers = number(flag, &value()?, 1)?,
            "--consumers" => options.consumers = number(flag, &value()?, 1)?,
            "--seed" => options.seed = Some(number(flag, &value()?, 0)?),
            "--timeout" => options.timeout = Duration::from_secs(number(flag, &value()?, 1)?),
            "--store" => options.store = StoreKind::parse(&value()?, &STORES)?,
            "--scenario" => {
                let scenario = value()?;
                if !rig::CRASH_SCENARIOS.contains(&scenario.as_str()) {
                    bail!("--scenario must be queue, forward or transaction, got `{scenario}`");
                }
                options.scenario = scenario;
            }
            "-h" | "--help" => bail!("{USAGE}"),
            other => bail!("unknown argument `{other}`\n{USAGE}"),
        }
        Ok(())
    })?;
    Ok(options)
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let options = parse(args)?;
    let started = Instant::now();
    let deadline = started + options.timeout;
    let seed = options.seed.unwrap_or_else(time_seed);
    eprintln!("xtask: crash test seed {seed} (repeat the kill schedule with --seed {seed})");

    let (server_binary, driver_binary) = binaries()?;
    let (server_binary, driver_binary) = (&server_binary, &driver_binary);

    let work = WorkDir::create("crash")?;
    let config = work.path.join("config.json");
    let text = serde_json::to_string_pretty(&config_json(&options.scenario))
        .context("encoding the config")?;
    fs::write(&config, text + "\n").with_context(|| format!("writing {}", config.display()))?;
    let data = work.path.join("data");
    // Before the first server, after the work directory: dropped (stopped) after the server.
    let database = postgres::start_for(options.store)?;
    if let Some(database) = &database {
        database.delay_commits()?;
    }
    let store_args = postgres::server_args(options.store, database.as_ref())?;
    let port = compat::free_port()?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let server_command = || {
        let mut command = Command::new(server_binary);
        command
            .arg("--amqp-addr")
            .arg(addr.to_string())
            .args(["--amqps-addr", "off"])
            .args(&store_args)
            .arg("--data-dir")
            .arg(&data)
            .arg("--config")
            .arg(&config);
        command
    };

    let outcome = (|| -> Result<Verdict> {
        let mut log = server_log(&work.path, 0);
        let mut server = Server::start(server_command(), &log)?;
        server.wait_until_listening(addr, READY_TIMEOUT)?;
        eprintln!("xtask: server listening on {addr}; work directory {}", work.path.display());

        let driver_log = work.path.join("driver.log");
        // Workers commit one seed at a time, and on PostgreSQL each commit waits out the delay:
        // a slower pace, unless the caller's own `--rate` (after it) says otherwise.
        let mut driver_args = options.driver_args.clone();
        if database.is_some() && options.scenario == "transaction" {
            driver_args.splice(0..0, ["--rate".to_owned(), "5".to_owned()]);
        }
        let mut driver = CrashDriver::start(
            driver_binary,
            &[port],
            &options.scenario,
            (options.producers as usize, options.consumers as usize),
            &driver_args,
            &driver_log,
        )?;
        let mut rng = SplitMix64(seed);
        let mut downtimes = Vec::new();
        for cycle in 1..=options.cycles {
            let delay = Duration::from_millis(rng.between(KILL_AFTER_MS.0, KILL_AFTER_MS.1));
            sleep_until_or_deadline(delay, deadline, "waiting to kill the server")?;
            if let Some(status) = driver.exited()? {
                bail!("the driver exited during cycle {cycle} ({status})");
            }
            if let Some(status) = server.exited()? {
                bail!("the server exited by itself during cycle {cycle} ({status})");
            }
            let killed_at = Instant::now();
            kill(&mut server).with_context(|| format!("cycle {cycle}: killing the server"))?;
            log = server_log(&work.path, cycle);
            server = Server::start(server_command(), &log)?;
            let ready = READY_TIMEOUT.min(deadline.saturating_duration_since(Instant::now()));
            server
                .wait_until_listening(addr, ready)
                .with_context(|| format!("cycle {cycle}: restarting the server"))?;
            if let Some(database) = &database {
                database.check_running().with_context(|| format!("cycle {cycle}"))?;
            }
            let down = killed_at.elapsed();
            downtimes.push(down);
            eprintln!(
                "xtask: cycle {cycle}/{}: SIGKILL after {:.1} s, listening again after {:.2} s",
                options.cycles,
                delay.as_secs_f64(),
                down.as_secs_f64()
            );
        }
        // Some traffic on the last incarnation before stopping.
        let delay = Duration::from_millis(rng.between(KILL_AFTER_MS.0, KILL_AFTER_MS.1));
        sleep_until_or_deadline(delay, deadline, "running after the last restart")?;

        eprintln!("xtask: telling the driver to stop; it finishes its sends and drains the queue");
        let report = driver.stop(deadline)?;
        if let Some(status) = server.exited()? {
            bail!("the server exited during the drain ({status})");
        }
        server.stop();
        Ok(Verdict { report, downtimes, server_log: log, driver_log })
    })();

    let verdict = match outcome {
        Ok(verdict) => verdict,
        Err(err) => {
            show_logs(&work.path);
            eprintln!("xtask: kept the work directory {}", work.path.display());
            return Err(err.context("crash test failed"));
        }
    };
    let report = &verdict.report;
    let line =
        format!("{} cycles, {}", options.cycles, rig::crash_counts(report, &options.scenario));
    let longest_down = verdict.downtimes.iter().max().copied().unwrap_or_default();
    eprintln!(
        "xtask: crash test took {:.1} s (seed {seed}, store {}, scenario {}, longest restart {:.2} s)",
        started.elapsed().as_secs_f64(),
        options.store.name(),
        options.scenario,
        longest_down.as_secs_f64()
    );
    print_result(&line, report);
    if rig::crash_passed(report) {
        work.remove();
        return Ok(());
    }
    eprintln!("{}", compat::log_tail(&verdict.driver_log, LOG_TAIL_LINES));
    eprintln!("{}", compat::log_tail(&verdict.server_log, LOG_TAIL_LINES));
    eprintln!("xtask: kept the work directory {}", work.path.display());
    bail!("crash test failed: {}", rig::crash_failure(report))
}

#[allow(clippy::print_stdout, reason = "the verdict is this task's output")]
fn print_result(line: &str, report: &Value) {
    println!("{line}");
    println!("{report}");
}

/// The server's and the driver's executables: built, unless the environment names them.
fn binaries() -> Result<(PathBuf, PathBuf)> {
    let given = |variable: &str| {
        let path = env::var_os(variable).map(PathBuf::from)?;
        eprintln!("xtask: {variable} is set: running {}", path.display());
        Some(path)
    };
    let (server, driver) = (given(SERVER_ENV), given(DRIVER_ENV));
    let mut wanted = Vec::new();
    if server.is_none() {
        wanted.push(("ironbus", "ironbus"));
    }
    if driver.is_none() {
        wanted.push(("ironbus-bench", "ironbus-crash"));
    }
    let mut built = match wanted.is_empty() {
        true => Vec::new(),
        false => {
            let packages: Vec<&str> = wanted.iter().map(|(package, _)| *package).collect();
            let names: Vec<&str> = wanted.iter().map(|(_, binary)| *binary).collect();
            compat::build_release(&packages, &names)?
        }
    }
    .into_iter();
    let server = match server {
        Some(path) => path,
        None => built.next().context("no server executable was built")?,
    };
    let driver = match driver {
        Some(path) => path,
        None => built.next().context("no driver executable was built")?,
    };
    Ok((server, driver))
}

/// What a finished run produced.
#[derive(Debug)]
struct Verdict {
    report: Value,
    downtimes: Vec<Duration>,
    server_log: PathBuf,
    driver_log: PathBuf,
}

/// The log of the server's `incarnation`-th start.
fn server_log(work: &Path, incarnation: u32) -> PathBuf {
    work.join(format!("ironbus-{incarnation}.log"))
}

/// Shows the driver's and the latest server log's tails after a failure.
fn show_logs(work: &Path) {
    eprintln!("{}", compat::log_tail(&work.join("driver.log"), LOG_TAIL_LINES));
    let latest = (0..=u32::MAX).map(|i| server_log(work, i)).take_while(|p| p.exists()).last();
    if let Some(log) = latest {
        eprintln!("{}", compat::log_tail(&log, LOG_TAIL_LINES));
    }
}

/// SIGKILLs the server (`Child::kill` sends SIGKILL on Unix) and waits for it to exit.
fn kill(server: &mut Server) -> Result<()> {
    let Some(mut child) = server.child.take() else { bail!("the server is not running") };
    child.kill().context("sending SIGKILL")?;
    child.wait().context("waiting for the killed server")?;
    Ok(())
}

fn sleep_until_or_deadline(delay: Duration, deadline: Instant, what: &str) -> Result<()> {
    if Instant::now() + delay > deadline {
        bail!("timed out ({what})");
    }
    thread::sleep(delay);
    Ok(())
}

/// The emulator-format config: the queues of `scenario` ([`rig::crash_queues`]).
fn config_json(scenario: &str) -> Value {
    rig::config_json(&rig::crash_queues(scenario))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn defaults_are_twenty_cycles_on_rocksdb() {
        let options = parse(&[]).unwrap();
        assert_eq!(options, Options::default());
        assert_eq!((options.cycles, options.producers, options.consumers), (20, 4, 4));
        assert_eq!(options.store, StoreKind::Rocksdb);
    }

    #[test]
    fn flags_are_parsed_with_spaces_or_equals() {
        let options = parse(&args(
            "--cycles 3 --producers=2 --consumers 1 --seed 42 --store memory -- --verbose",
        ))
        .unwrap();
        assert_eq!((options.cycles, options.producers, options.consumers), (3, 2, 1));
        assert_eq!((options.seed, options.store), (Some(42), StoreKind::Memory));
        assert_eq!(parse(&args("--store=postgres")).unwrap().store, StoreKind::Postgres);
        assert_eq!(options.driver_args, ["--verbose"]);
    }

    #[test]
    fn bad_arguments_are_refused_clearly() {
        for bad in
            ["--cycles", "--cycles x", "--producers 0", "--store ram", "--scenario x", "--what 1"]
        {
            assert!(parse(&args(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn config_declares_a_deduplicating_partitioned_queue() {
        let config = config_json("queue");
        let queues = config["UserConfig"]["Namespaces"][0]["Queues"].as_array().unwrap();
        assert_eq!(queues.len(), 1);
        let queue = &queues[0];
        assert_eq!(queue["Name"], QUEUE);
        assert_eq!(queue["Properties"]["RequiresDuplicateDetection"], true);
        assert_eq!(queue["Properties"]["EnablePartitioning"], true);
        assert_eq!(queue["Properties"]["ForwardTo"], "");
    }

    #[test]
    fn forward_scenario_chains_three_queues_one_partitioned_at_least() {
        assert_eq!(parse(&args("--scenario forward")).unwrap().scenario, "forward");
        let config = config_json("forward");
        let queues = config["UserConfig"]["Namespaces"][0]["Queues"].as_array().unwrap();
        let names: Vec<&str> = queues.iter().map(|q| q["Name"].as_str().unwrap()).collect();
        assert_eq!(names, [QUEUE, CHAIN[0], CHAIN[1]]);
        let forward_to: Vec<&str> =
            queues.iter().map(|q| q["Properties"]["ForwardTo"].as_str().unwrap()).collect();
        assert_eq!(forward_to, [CHAIN[0], CHAIN[1], ""]);
        let partitioned = queues.iter().filter(|q| q["Properties"]["EnablePartitioning"] == true);
        assert_eq!(partitioned.count(), 2);
        assert_eq!(queues[0]["Properties"]["RequiresDuplicateDetection"], true);
    }

    #[test]
    fn transaction_scenario_sends_through_the_queue_to_a_second_one() {
        assert_eq!(parse(&args("--scenario transaction")).unwrap().scenario, "transaction");
        let config = config_json("transaction");
        let queues = config["UserConfig"]["Namespaces"][0]["Queues"].as_array().unwrap();
        let names: Vec<&str> = queues.iter().map(|q| q["Name"].as_str().unwrap()).collect();
        assert_eq!(names, [QUEUE, OUT]);
        assert_eq!(queues[1]["Properties"]["RequiresDuplicateDetection"], false);
        assert_eq!(queues[1]["Properties"]["EnablePartitioning"], true);
    }
}
