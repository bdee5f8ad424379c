//! `cargo xtask bench cluster [--rounds N] [--messages N] [--setups LIST] [--pause SECONDS]
//! [--timeout SECONDS] [--out FILE]`: what a cluster on PostgreSQL costs against one node on
//! RocksDB, side by side in one session.
//!
//! Setups (`--setups`: names separated by commas; default all, in this order):
//! - `rocksdb`: one plain node on RocksDB (`--durability sync`, the default), the baseline;
//! - `pg-1x1`, `pg-1x2`: one plain node on PostgreSQL with 1 or 2 stores (`--stores`);
//! - `pg-2x1`, `pg-2x2`, `pg-3x1`, `pg-3x2`: 2 or 3 cluster nodes (`--cluster`) with 1 or 2
//!   stores.
//!
//! Rounds alternate: round 1 runs every setup once, then round 2 does, … Each run starts from
//! nothing and leaves nothing: a fresh data directory, for PostgreSQL a fresh throwaway database
//! (`crate::postgres`) and the nodes of `cargo xtask cluster` ([`Nodes`]), one queue `bench` of
//! 16 partitions; it waits until every node is healthy and, in a cluster, until every node
//! reports the same placement, every partition available and every node running some, unchanged
//! for [`STABLE`]. Then `ironbus-bench` runs 4 producers and 4 consumers, producer i and
//! consumer i on node i mod n, `--messages` durable messages of 1 KiB, peek-lock with one
//! accept per message (what the SDKs' `complete_message` sends), window and credit 100.
//!
//! CPU, read from `/proc` just before and just after the load generator runs ([`cpu`]), per
//! message received: ironbus is the sum over its nodes; PostgreSQL is its postmaster with every
//! child (backends, WAL writer, checkpointer); the load generator is the child this task waited
//! for. Every run's report, with its setup, round, CPU, placement and load average, is a JSON
//! line in `--out` (default `bench-cluster.jsonl`); the end prints a Markdown table of medians
//! over the complete runs, each setup's rate against `rocksdb`'s (the ratio of medians, and the
//! ratio in each round).
//!
//! Invariant: no server or database outlives its run (their values stop them when dropped, the
//! nodes before the database).

use std::{
    fs,
    io::Write,
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::cpu;
use crate::cluster::nodes::{Nodes, Placement};
use crate::compat::{self, Server, WorkDir, SAS_KEY};
use crate::postgres::Database;
use crate::rig::{self, number, QueueSpec};

/// The queue every run works on.
const QUEUE: &str = "bench";
const PARTITIONS: u32 = 16;
/// The cluster nodes' lease (the placement settles within about one).
const LEASE_MS: u64 = 3000;
/// How long a node may take to answer `/health` (or listen) after its start.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a cluster may take to agree on a placement.
const PLACE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a placement must stay the same before the load starts.
const STABLE: Duration = Duration::from_secs(3);

const USAGE: &str = "usage: cargo xtask bench cluster [--rounds N] [--messages N] \
                     [--setups rocksdb,pg-1x1,...] [--pause SECONDS] [--timeout SECONDS] \
                     [--out FILE]";

/// What one run deploys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// One plain node on RocksDB.
    Rocksdb,
    /// `nodes` nodes (a cluster when more than one) on PostgreSQL with `stores` stores.
    Postgres { nodes: usize, stores: u16 },
}

impl Setup {
    const ALL: [Setup; 7] = [
        Setup::Rocksdb,
        Setup::Postgres { nodes: 1, stores: 1 },
        Setup::Postgres { nodes: 1, stores: 2 },
        Setup::Postgres { nodes: 2, stores: 1 },
        Setup::Postgres { nodes: 2, stores: 2 },
        Setup::Postgres { nodes: 3, stores: 1 },
        Setup::Postgres { nodes: 3, stores: 2 },
    ];

    fn name(self) -> String {
        match self {
            Setup::Rocksdb => "rocksdb".to_owned(),
            Setup::Postgres { nodes, stores } => format!("pg-{nodes}x{stores}"),
        }
    }

    /// The table's words for it.
    fn described(self) -> String {
        match self {
            Setup::Rocksdb => "1 node, RocksDB (sync)".to_owned(),
            Setup::Postgres { nodes, stores } => {
                let plural = |n: usize, word: &str| match n {
                    1 => format!("1 {word}"),
                    n => format!("{n} {word}s"),
                };
                format!(
                    "{}, PostgreSQL, {}",
                    plural(nodes, "node"),
                    plural(usize::from(stores), "store")
                )
            }
        }
    }

    fn parse_list(text: &str) -> Result<Vec<Setup>> {
        let names: Vec<String> = Setup::ALL.iter().map(|setup| setup.name()).collect();
        let find = |name: &str| -> Result<Setup> {
            match Setup::ALL.iter().find(|setup| setup.name() == name) {
                Some(setup) => Ok(*setup),
                None => bail!("--setups: unknown setup `{name}`; known: {}", names.join(", ")),
            }
        };
        let setups = text.split(',').map(str::trim).filter(|name| !name.is_empty()).map(find);
        let setups = setups.collect::<Result<Vec<_>>>()?;
        if setups.is_empty() {
            bail!("--setups names no setup; known: {}", names.join(", "));
        }
        Ok(setups)
    }
}

/// The command line.
#[derive(Debug, Clone, PartialEq)]
struct Options {
    rounds: u32,
    messages: u64,
    setups: Vec<Setup>,
    /// Between two runs.
    pause: Duration,
    /// The load generator's `--timeout`, in seconds.
    timeout: u64,
    out: PathBuf,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            rounds: 3,
            messages: 100_000,
            setups: Setup::ALL.to_vec(),
            pause: Duration::from_secs(2),
            timeout: 300,
            out: PathBuf::from("bench-cluster.jsonl"),
        }
    }
}

fn parse(args: &[String]) -> Result<Options> {
    let mut options = Options::default();
    let rest = rig::walk_flags(args, |flag, value| {
        match flag {
            "--rounds" => options.rounds = number(flag, &value()?, 1)?,
            "--messages" => options.messages = number(flag, &value()?, 1)?,
            "--setups" => options.setups = Setup::parse_list(&value()?)?,
            "--pause" => options.pause = Duration::from_secs(number(flag, &value()?, 0)?),
            "--timeout" => options.timeout = number(flag, &value()?, 1)?,
            "--out" => options.out = PathBuf::from(value()?),
            "-h" | "--help" => bail!("{USAGE}"),
            other => bail!("unknown argument `{other}`\n{USAGE}"),
        }
        Ok(())
    })?;
    if !rest.is_empty() {
        bail!("`bench cluster` takes nothing after `--`\n{USAGE}");
    }
    Ok(options)
}

pub(super) fn run(args: &[String]) -> Result<()> {
    let options = parse(args)?;
    let binaries =
        compat::build_release(&["ironbus", "ironbus-bench"], &["ironbus", "ironbus-bench"])?;
    let (server, bench) = (&binaries[0], &binaries[1]);
    let work = WorkDir::create("bench-cluster")?;
    let config = work.path.join("config.json");
    let queue = QueueSpec {
        name: QUEUE,
        partitions: PARTITIONS,
        dedup: false,
        forward_to: "",
        lock_secs: 60,
    };
    let text =
        serde_json::to_string_pretty(&rig::config_json(&[queue])).context("encoding the config")?;
    fs::write(&config, text + "\n").with_context(|| format!("writing {}", config.display()))?;
    let mut out = fs::File::create(&options.out)
        .with_context(|| format!("creating {}", options.out.display()))?;
    let clock = cpu::Clock::new();
    progress(&format!(
        "{} rounds of {} ({} messages each); every run's JSON goes to {}",
        options.rounds,
        options.setups.iter().map(|setup| setup.name()).collect::<Vec<_>>().join(", "),
        options.messages,
        options.out.display()
    ));

    let mut runs = Vec::new();
    for round in 1..=options.rounds {
        for &setup in &options.setups {
            let dir = work.path.join(format!("round-{round}-{}", setup.name()));
            fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let record = (|| -> Result<Value> {
                let deployment = Deployment::start(setup, server, &config, &dir)?;
                measure(&deployment, bench, &options, clock)
            })()
            .with_context(|| format!("round {round}, {}", setup.name()))?;
            let record = annotate(record, setup, round);
            progress(&shown_run(&record));
            writeln!(out, "{record}").context("writing a run's record")?;
            runs.push(record);
            let _ = fs::remove_dir_all(&dir);
            thread::sleep(options.pause);
        }
    }
    work.remove();
    eprintln!("\n{}", summary(&runs, &options));
    Ok(())
}

/// The servers of one run; dropped, they stop: the nodes, then the database.
#[derive(Debug)]
struct Deployment {
    nodes: Option<Nodes>,
    single: Option<Server>,
    database: Option<Database>,
    /// Every node's AMQP address.
    amqp: Vec<SocketAddr>,
    /// Partitions per node, in a cluster.
    placement: Vec<usize>,
}

impl Deployment {
    fn start(setup: Setup, server: &Path, config: &Path, dir: &Path) -> Result<Deployment> {
        match setup {
            Setup::Rocksdb => Deployment::start_rocksdb(server, config, dir),
            Setup::Postgres { nodes, stores } => {
                Deployment::start_postgres(nodes, stores, server, config, dir)
            }
        }
    }

    fn start_rocksdb(server: &Path, config: &Path, dir: &Path) -> Result<Deployment> {
        let amqp = SocketAddr::from((Ipv4Addr::LOCALHOST, compat::free_port()?));
        let mut command = Command::new(server);
        command
            .args(["--store", "rocksdb", "--durability", "sync", "--data-dir"])
            .arg(dir.join("data"))
            .arg("--amqp-addr")
            .arg(amqp.to_string())
            .args(["--amqps-addr", "off", "--http-addr", "off", "--https-addr", "off"])
            .arg("--config")
            .arg(config);
        let mut single = Server::start(command, &dir.join("ironbus.log"))?;
        single.wait_until_listening(amqp, READY_TIMEOUT)?;
        Ok(Deployment {
            nodes: None,
            single: Some(single),
            database: None,
            amqp: vec![amqp],
            placement: Vec::new(),
        })
    }

    fn start_postgres(
        count: usize,
        stores: u16,
        server: &Path,
        config: &Path,
        dir: &Path,
    ) -> Result<Deployment> {
        let database = Database::start()?;
        let mut nodes = Nodes::new(server, config, dir, database.url(), LEASE_MS, count > 1);
        nodes.add_args(&["--stores", &stores.to_string()]);
        for _ in 0..count {
            let index = nodes.add()?;
            nodes.start(index)?;
        }
        for index in 0..count {
            nodes.wait_ready(index, READY_TIMEOUT)?;
        }
        let placement = match count {
            1 => Vec::new(),
            _ => {
                let placement = wait_for_placement(&nodes)?;
                (0..count).map(|index| placement.of(nodes.name(index)).len()).collect()
            }
        };
        let amqp = (0..count).map(|index| nodes.amqp(index)).collect();
        Ok(Deployment {
            nodes: Some(nodes),
            single: None,
            database: Some(database),
            amqp,
            placement,
        })
    }

    /// Every ironbus process.
    fn ironbus_pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        if let Some(nodes) = &self.nodes {
            pids.extend((0..nodes.len()).filter_map(|index| nodes.pid(index)));
        }
        if let Some(child) = self.single.as_ref().and_then(|server| server.child.as_ref()) {
            pids.push(child.id());
        }
        pids
    }

    /// PostgreSQL's CPU time so far (0 without PostgreSQL).
    fn postgres_cpu(&self, clock: cpu::Clock) -> f64 {
        let pid = self.database.as_ref().and_then(Database::postmaster_pid);
        pid.map_or(0.0, |pid| clock.tree(pid))
    }
}

/// Waits until every node reports the same placement of the queue, every partition available,
/// every node running some, and it has stayed so for [`STABLE`].
fn wait_for_placement(nodes: &Nodes) -> Result<Placement> {
    let started = Instant::now();
    let mut stable: Option<(Placement, Instant)> = None;
    while started.elapsed() < PLACE_TIMEOUT {
        let mut views = (0..nodes.len()).map(|index| nodes.placement(index, QUEUE));
        let first = views.next().flatten();
        let agreed = first.filter(|first| views.all(|view| view.as_ref() == Some(first)));
        let spread = agreed.filter(|placement| {
            placement.settled() && (0..nodes.len()).all(|i| !placement.of(nodes.name(i)).is_empty())
        });
        stable = match (spread, stable) {
            (Some(now), Some((before, since))) if now == before => {
                if since.elapsed() >= STABLE {
                    return Ok(now);
                }
                Some((now, since))
            }
            (Some(now), _) => Some((now, Instant::now())),
            (None, _) => None,
        };
        thread::sleep(Duration::from_millis(200));
    }
    bail!("the nodes did not agree on a placement running partitions on each within {PLACE_TIMEOUT:?}")
}

/// Runs the load generator against `deployment`: its report, with the CPU each side used per
/// message and the load average at the start.
fn measure(
    deployment: &Deployment,
    bench: &Path,
    options: &Options,
    clock: cpu::Clock,
) -> Result<Value> {
    let mut command = Command::new(bench);
    for addr in &deployment.amqp {
        command.arg("--url").arg(format!("amqp://{addr}"));
    }
    command
        .args(["--sasl-plain", &format!("RootManageSharedAccessKey:{SAS_KEY}")])
        .args(["--address", QUEUE, "--producers", "4", "--consumers", "4", "--size", "1024"])
        .args(["--durable", "--mode", "peek-lock", "--accept-batch", "1"])
        .args(["--window", "100", "--credit", "100", "--client", "wire"])
        .args(["--messages", &options.messages.to_string()])
        .args(["--timeout", &options.timeout.to_string()])
        .stdin(Stdio::null());
    let load = load_average();
    let pids = deployment.ironbus_pids();
    let before = (clock.processes(&pids), deployment.postgres_cpu(clock), clock.reaped_children());
    let output = command.output().with_context(|| format!("running {}", bench.display()))?;
    let after = (clock.processes(&pids), deployment.postgres_cpu(clock), clock.reaped_children());
    let stdout = String::from_utf8_lossy(&output.stdout);
    let Some(line) = stdout.lines().last() else {
        bail!(
            "the load generator printed no report ({})\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let mut report: Value = serde_json::from_str(line).context("reading the report")?;
    if !output.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    }
    let received = report["received"].as_u64().unwrap_or(0).max(1) as f64;
    let per_message = |seconds: f64| (seconds * 1e6 / received * 10.0).round() / 10.0;
    report["ironbus_cpu_us_per_msg"] = json!(per_message(after.0 - before.0));
    report["postgres_cpu_us_per_msg"] = json!(per_message(after.1 - before.1));
    report["client_cpu_us_per_msg"] = json!(per_message(after.2 - before.2));
    report["placement"] = json!(deployment.placement);
    report["load"] = json!(load);
    Ok(report)
}

fn annotate(mut record: Value, setup: Setup, round: u32) -> Value {
    record["setup"] = json!(setup.name());
    record["round"] = json!(round);
    record
}

/// The 1-minute load average.
fn load_average() -> f64 {
    let text = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().next().and_then(|load| load.parse().ok()).unwrap_or(0.0)
}

/// One run's progress line.
fn shown_run(record: &Value) -> String {
    let number = |key: &str| record[key].as_f64().unwrap_or(f64::NAN);
    let error = record["error"].as_str().map(|e| format!("  FAILED: {e}")).unwrap_or_default();
    format!(
        "round {} {:7} {:>8.0} msg/s  p50 {:6.1} ms  p99 {:7.1} ms  ironbus {:5.1} µs/msg  \
         PostgreSQL {:5.1}  client {:4.1}  placement {}  load {:.2}{error}",
        record["round"],
        record["setup"].as_str().unwrap_or("?"),
        number("msgs_per_sec"),
        number("p50_ms"),
        number("p99_ms"),
        number("ironbus_cpu_us_per_msg"),
        number("postgres_cpu_us_per_msg"),
        number("client_cpu_us_per_msg"),
        record["placement"],
        number("load"),
    )
}

/// Whether a run received every message without an error.
fn complete(record: &Value) -> bool {
    record["error"].is_null() && record["received"] == record["messages"]
}

/// The median of `values` (`NAN` when empty).
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The Markdown table of medians over complete runs, with the ratios to `rocksdb`.
fn summary(runs: &[Value], options: &Options) -> String {
    let of = |setup: Setup| -> Vec<&Value> {
        let name = setup.name();
        runs.iter().filter(|run| run["setup"] == name.as_str() && complete(run)).collect()
    };
    let column = |runs: &[&Value], key: &str| -> Vec<f64> {
        runs.iter().filter_map(|run| run[key].as_f64()).collect()
    };
    let baseline = of(Setup::Rocksdb);
    let base_rate = median(&column(&baseline, "msgs_per_sec"));
    let rate_in = |round: &Value| -> Option<f64> {
        let run = baseline.iter().find(|run| run["round"] == *round)?;
        run["msgs_per_sec"].as_f64()
    };
    let loads = column(&runs.iter().collect::<Vec<_>>(), "load");
    let (low, high) =
        loads.iter().fold((f64::INFINITY, 0.0_f64), |(l, h), &x| (l.min(x), h.max(x)));
    let mut table = format!(
        "{} messages per run, 4 P / 4 C, durable 1 KiB, peek-lock, one accept per message; \
         medians over complete runs (range); load average {low:.2}–{high:.2}\n\n\
         | setup | runs | msg/s | p50 ms | p99 ms | ironbus µs/msg | PostgreSQL µs/msg | \
         load generator µs/msg | msg/s / RocksDB (per round) |\n|---|---|---|---|---|---|---|---|---|\n",
        options.messages
    );
    for &setup in &options.setups {
        let complete = of(setup);
        let rates = column(&complete, "msgs_per_sec");
        let (min, max) =
            rates.iter().fold((f64::INFINITY, 0.0_f64), |(l, h), &x| (l.min(x), h.max(x)));
        let rate = median(&rates);
        let per_round: Vec<String> = complete
            .iter()
            .filter_map(|run| {
                Some(format!("{:.2}", run["msgs_per_sec"].as_f64()? / rate_in(&run["round"])?))
            })
            .collect();
        let cpu = |key: &str| median(&column(&complete, key));
        let postgres = match setup {
            Setup::Rocksdb => "—".to_owned(),
            Setup::Postgres { .. } => format!("{:.1}", cpu("postgres_cpu_us_per_msg")),
        };
        table += &format!(
            "| {} | {}/{} | {} ({}–{}) | {:.1} | {:.1} | {:.1} | {postgres} | {:.1} | {:.2}× ({}) |\n",
            setup.described(),
            complete.len(),
            options.rounds,
            thousands(rate),
            thousands(min),
            thousands(max),
            cpu("p50_ms"),
            cpu("p99_ms"),
            cpu("ironbus_cpu_us_per_msg"),
            cpu("client_cpu_us_per_msg"),
            rate / base_rate,
            per_round.join(", "),
        );
    }
    table
}

/// `value` rounded, with thousands separated by commas (`-` when not a number).
fn thousands(value: f64) -> String {
    if !value.is_finite() {
        return "-".to_owned();
    }
    let digits = format!("{:.0}", value.round());
    let mut shown = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            shown.push(',');
        }
        shown.push(digit);
    }
    shown
}

/// A progress line for the person watching.
fn progress(text: &str) {
    eprintln!("xtask bench cluster: {text}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn defaults_are_every_setup_three_rounds() {
        let options = parse(&[]).unwrap();
        assert_eq!(options, Options::default());
        let names: Vec<String> = options.setups.iter().map(|setup| setup.name()).collect();
        assert_eq!(names, ["rocksdb", "pg-1x1", "pg-1x2", "pg-2x1", "pg-2x2", "pg-3x1", "pg-3x2"]);
        assert_eq!(options.rounds, 3);
    }

    #[test]
    fn flags_pick_rounds_messages_and_setups() {
        let options =
            parse(&args("--rounds 5 --messages=1000 --setups rocksdb,pg-3x2 --out x.jsonl"))
                .unwrap();
        assert_eq!((options.rounds, options.messages), (5, 1000));
        assert_eq!(options.setups, [Setup::Rocksdb, Setup::Postgres { nodes: 3, stores: 2 }]);
        assert_eq!(options.out, PathBuf::from("x.jsonl"));
        for bad in ["--rounds 0", "--setups pg-4x1", "--setups ,", "--what", "-- x"] {
            assert!(parse(&args(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn setups_are_described_for_the_table() {
        assert_eq!(Setup::Rocksdb.described(), "1 node, RocksDB (sync)");
        let setup = Setup::Postgres { nodes: 2, stores: 1 };
        assert_eq!(setup.described(), "2 nodes, PostgreSQL, 1 store");
    }

    #[test]
    fn medians_and_thousands() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 8.0]), 3.0);
        assert!(median(&[]).is_nan());
        assert_eq!(thousands(1_234_567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(f64::NAN), "-");
    }

    #[test]
    fn the_summary_divides_by_rocksdb_round_by_round() {
        let run = |setup: &str, round: u32, rate: f64| {
            json!({"setup": setup, "round": round, "msgs_per_sec": rate, "received": 10,
                   "messages": 10, "p50_ms": 1.0, "p99_ms": 2.0, "load": 1.5,
                   "ironbus_cpu_us_per_msg": 10.0, "postgres_cpu_us_per_msg": 0.0,
                   "client_cpu_us_per_msg": 4.0})
        };
        let runs = [
            run("rocksdb", 1, 1000.0),
            run("pg-1x1", 1, 250.0),
            run("rocksdb", 2, 2000.0),
            run("pg-1x1", 2, 1000.0),
        ];
        let options = Options {
            rounds: 2,
            setups: vec![Setup::Rocksdb, Setup::Postgres { nodes: 1, stores: 1 }],
            ..Options::default()
        };
        let table = summary(&runs, &options);
        assert!(
            table.contains("| 1 node, PostgreSQL, 1 store | 2/2 | 625 (250–1,000) |"),
            "{table}"
        );
        assert!(table.contains("| 0.42× (0.25, 0.50) |"), "{table}");
    }
}
