//! The ironbus developer tasks, run as `cargo xtask <task>` (an alias in `.cargo/config.toml`).
//!
//! Follows rust-analyzer's xtask convention: plain Rust instead of shell scripts, few
//! dependencies (`anyhow`, `serde_json`; arguments are parsed by hand), and every external tool
//! is run through `std::process::Command`.
//!
//! Invariants:
//! - Tasks run from the workspace root, whatever the caller's directory.
//! - Tasks use the `cargo` that runs xtask (`$CARGO`), so one toolchain does everything.
//! - Every command is echoed to stderr before it runs; a failing task names the failed step.
//!
//! Tasks: `ci` (fmt check, clippy `-D warnings`, every test), `compat` (the SDK suites against
//! a fresh server, on RocksDB or a throwaway PostgreSQL: `postgres`), `bench` (the benchmarks of `bench/` and the core), `crash` (SIGKILL the
//! server under load, then check that nothing acknowledged was lost or duplicated), `cluster`
//! (ironbus nodes on one PostgreSQL, loaded through every node while nodes are killed: nothing
//! lost, every partition back within a bound), `fuzz` (the cargo-fuzz targets of `fuzz/`);
//! `cargo xtask help` lists their arguments.
//!
//! `tidy` holds workspace invariants as plain `#[test]`s, so `cargo test --workspace` enforces
//! them: `ironbus-core` reaches no concrete backend through any kind of dependency; stores and
//! transports depend on no workspace crate but the core; every dependency version is pinned
//! once; the Grafana dashboard queries only catalogued metrics; ARCHITECTURE.md names only
//! paths that exist and stays under 300 lines.

mod bench;
mod ci;
mod cluster;
mod compat;
mod crash;
mod fuzz;
mod native;
mod postgres;
mod rig;
#[cfg(test)]
mod tidy;

use std::{
    env,
    ffi::OsString,
    path::{Path, PathBuf},
    process::{Command, ExitCode},
    sync::OnceLock,
};

use anyhow::{bail, Context, Result};

const USAGE: &str = "\
usage: cargo xtask <task>

tasks:
    run [ARGS]          build ironbus (release) and start it; ARGS go to the server (`-- --help`).
                        Like `ci`, first finds RocksDB's native build prerequisites (a C++
                        compiler, libclang) and installs them with apt-get where they are missing
    ci                  check formatting, run clippy with -D warnings, run all tests
    bench core [ARGS]   run ironbus-core's throughput benchmark; ARGS go to the benchmark
    bench amqp [ARGS]   run the AMQP 1.0 load generator ironbus-bench; ARGS go to it (`--help`)
    bench backlog [--store rocksdb|postgres] [ARGS]
                        1 M queued messages on RocksDB (default) or a throwaway PostgreSQL: RAM
                        per message, recovery time, drain rate (--messages N, --size BYTES,
                        --partitions N, --body-cache-mb N; postgres also --stores N)
    bench cluster [--rounds N] [--messages N] [--setups LIST] [--out FILE]
                        one node on RocksDB against 1, 2 and 3 nodes on a throwaway PostgreSQL
                        with 1 and 2 stores, in alternating rounds (4 P / 4 C, durable 1 KiB):
                        msg/s, latency, CPU per message of ironbus and of PostgreSQL
    bench connections [ARGS]
                        20,000 idle AMQP connections: the server's RSS and handshake latency
                        meanwhile (--connections N, --hold SECS, --max-rss-mb MB)
    bench side-by-side  RabbitMQ (../shared/peers), ironbus memory and ironbus RocksDB in
                        alternating rounds with ironbus-bench; env ROUNDS, MESSAGES, OUT;
                        REVS='A B' compares ironbus revisions (release builds) instead
    bench instructions  instructions per message of ironbus revisions under valgrind (not
                        affected by a noisy machine); env REVS (required), STORES, CONFIGS
    bench fanout        topic fan-out: ironbus RocksDB (a topic, 1/4/16 subscriptions) against a
                        RabbitMQ fanout exchange bound to 1/4/16 durable queues, alternating
                        rounds, and store bytes per publish; env ROUNDS, RECEIPTS, BROKERS, OUT
    bench filter-cost   publish rate to a topic with 100 subscriptions of distinct SQL filters
                        (one matching) against one with a single subscription; env ROUNDS,
                        MESSAGES, SUBSCRIPTIONS
    bench sessions      1,000 sessions x 100 durable messages on a 16-partition session queue,
                        drained by 4 accept-next session receivers, against the same load on a
                        plain 16-partition queue (4 plain consumers), alternating rounds, with
                        accept-next p50/p99; env ROUNDS, SESSIONS, PER_SESSION, CONSUMERS, OUT
    bench forward       1 KiB durable messages through a one-hop auto-forward (16-partition
                        queues, 4 P / 4 C) against a direct queue, alternating rounds; env
                        ROUNDS, MESSAGES, STORE, MODE, OUT
    bench renew         the sync Python SDK renewing 300 message locks from 1, 2 and 5 threads
                        of one receiver (the AutoLockRenewer's load), ironbus revisions in
                        alternating rounds; env REVS, THREADS, MESSAGES, ROUNDS, OUT
    bench console       the dashboard's load with 1,000 entities in headless Chromium: the
                        API call and the page drawn, median and worst of 10 loads
    bench console-overhead
                        the message path with the console off against the console on with a
                        dashboard loading every second, two RocksDB servers in alternating
                        rounds (4 P / 4 C, durable 1 KiB); env ROUNDS, MESSAGES, ENTITIES, OUT
    compat [SUITE] [--store rocksdb|postgres] [--cluster] [-- ARGS]
                        run the SDK compatibility suites (python, js, rust; default all) against a
                        fresh ironbus (--cluster: 3 nodes on PostgreSQL, the clients spread over
                        them); ARGS go to the suite's runner; `compat config` prints
                        the generated entity config; `compat mssuite` (never in all) runs
                        Microsoft's own azure-servicebus test suite (compat/mssuite);
                        `compat console` (never in all) the web console's browser tests in
                        headless Chromium (compat/console, screenshots in its screenshots/).
                        --store postgres (default rocksdb): the server runs on a throwaway
                        PostgreSQL the task starts (as nobody when root; Debian's postgresql,
                        installed if missing, or IRONBUS_POSTGRES_BIN) and removes at the end
    crash [--cycles N] [--producers P] [--consumers C] [--seed S]
          [--store rocksdb|postgres|memory] [--scenario queue|forward|transaction]
          [--timeout SECONDS] [-- DRIVER-ARGS]
                        the crash test: SIGKILL and restart the server N times (default 20)
                        under load, then check that nothing acknowledged was lost or duplicated;
                        --store postgres runs every restart on one throwaway PostgreSQL (as for
                        compat), which is never killed and is removed at the end
    cluster [--scenario kill|join|cutoff|store-failover] [--load python|queue|forward|transaction]
            [--nodes N] [--kills K]
            [--interval SECONDS] [--bound SECONDS] [--lease-ms MS] [--restart-after SECONDS]
            [--producers P] [--consumers C] [--rate R] [--seed S] [--timeout SECONDS]
            [--cut refuse|black-hole] [-- DRIVER-ARGS]
                        N ironbus nodes (default 3) on one throwaway PostgreSQL, loaded through
                        every node by the official Python SDK (compat/cluster/driver.py);
                        `kill` (the default) SIGKILLs a random node every ~20 s (default 5
                        times), restarts it (alternately 2 s after the kill and 2 s after its
                        lease, or after --restart-after), and fails when anything acknowledged is lost or
                        duplicated or when some partition takes longer than --bound seconds
                        (default 10) to accept sends again after a kill; `join` adds a node under
                        load (it must take a share of the partitions), then SIGTERMs one (its
                        partitions must move before a lease passes); `cutoff` cuts a node off
                        PostgreSQL (not from its clients) K times: it must demote itself within
                        its lease, the others take over, its writes after the fence are refused;
                        `store-failover` kills the PostgreSQL primary under load and promotes its
                        synchronous standby: nothing acknowledged lost, only retriable errors;
                        `kill --load queue|forward|transaction` also runs crash's driver over every node
    fuzz list           list the fuzz targets (fuzz/, cargo-fuzz + libFuzzer; fuzz/README.md)
    fuzz TARGET...|all [--seconds N] [--runs N]
                        build the fuzz targets (installing cargo-fuzz if missing) and run each
                        for N seconds (default 60) or N executions, with -malloc_limit_mb=64
                        and -rss_limit_mb=512; a crash, leak or limit exceeded fails the task
    fuzz --smoke        every target for 20 s (CI)
    help                print this message
";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let (task, rest) = match args.split_first() {
        Some((task, rest)) => (task.as_str(), rest),
        None => ("help", &[][..]),
    };
    let outcome = match task {
        "run" => run_server(rest),
        "ci" => ci::run(rest),
        "bench" => bench::run(rest),
        "compat" => compat::run(rest),
        "crash" => crash::run(rest),
        "cluster" => cluster::run(rest),
        "fuzz" => fuzz::run(rest),
        "help" | "-h" | "--help" => {
            print_usage();
            Ok(())
        }
        unknown => {
            eprint!("xtask: unknown task `{unknown}`\n\n{USAGE}");
            return ExitCode::FAILURE;
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}

#[allow(clippy::print_stdout, reason = "asked-for help goes to stdout")]
fn print_usage() {
    print!("{USAGE}");
}

/// `cargo xtask run [ARGS]`: the README's way to start ironbus on a machine with only Rust.
fn run_server(args: &[String]) -> Result<()> {
    native::ensure()?;
    let mut cargo_args = vec!["run", "--release", "-p", "ironbus", "--"];
    let args = args.strip_prefix(&["--".to_owned()][..]).unwrap_or(args);
    cargo_args.extend(args.iter().map(String::as_str));
    run_cargo("run", &cargo_args)
}

/// The workspace root: the parent of this crate's directory. Taken from the environment `cargo
/// run` and `cargo test` set, not only from the build: one target directory shared by several
/// checkouts keeps one `target/debug/xtask`, built in whichever checkout built it last.
fn workspace_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let manifest_dir = env::var_os("CARGO_MANIFEST_DIR")
            .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
        manifest_dir.parent().expect("xtask/ lives inside the workspace root").to_path_buf()
    })
}

/// A `cargo` command at the workspace root, using the cargo that runs xtask.
fn cargo() -> Command {
    let program = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(program);
    cmd.current_dir(workspace_root());
    cmd
}

/// Runs `cargo <args>` at the workspace root after echoing it; an error names `step`.
fn run_cargo<S: AsRef<str>>(step: &str, args: &[S]) -> Result<()> {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let shown = format!("cargo {}", args.join(" "));
    run_shown(step, &shown, cargo().args(&args))
}

/// Echoes `shown` (how `cmd` reads to a person), runs `cmd` and fails unless it succeeds; an
/// error names `step` and the command.
fn run_shown(step: &str, shown: &str, cmd: &mut Command) -> Result<()> {
    eprintln!("$ {shown}");
    let status = cmd.status().with_context(|| format!("{step}: could not start `{shown}`"))?;
    if !status.success() {
        bail!("{step} failed ({status}): `{shown}`");
    }
    Ok(())
}

/// Fails when a task that takes no arguments is given some.
fn no_arguments(task: &str, args: &[String]) -> Result<()> {
    if !args.is_empty() {
        bail!("`{task}` takes no arguments, got `{}` (see `cargo xtask help`)", args.join(" "));
    }
    Ok(())
}
