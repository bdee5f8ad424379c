//! `cargo xtask bench <target> [ARGS]`: runs a benchmark, passing ARGS to the benchmark itself.
//! `bench cluster` is this crate's own ([`cluster`]).

mod cluster;
mod cpu;

use anyhow::{bail, Context, Result};

use crate::postgres::{take_store_flag, StoreKind};

pub(crate) fn run(args: &[String]) -> Result<()> {
    let Some((target, rest)) = args.split_first() else {
        bail!(
            "`bench` needs a target: core, amqp, backlog, cluster, connections, side-by-side, \
             instructions, fanout, filter-cost, sessions, forward, renew, console or \
             console-overhead (see `cargo xtask help`)"
        );
    };
    // Everything after the target goes to the benchmark; a leading `--` is accepted and dropped,
    // since this task adds its own.
    let rest = match rest.split_first() {
        Some((dashes, after)) if dashes == "--" => after,
        _ => rest,
    };
    if target == "console" {
        return crate::compat::console::bench(rest);
    }
    if target == "side-by-side" {
        return script("side-by-side", rest);
    }
    if matches!(
        target.as_str(),
        "instructions"
            | "fanout"
            | "filter-cost"
            | "sessions"
            | "forward"
            | "renew"
            | "console-overhead"
    ) {
        return script(target, rest);
    }
    if target == "connections" {
        return connections(rest);
    }
    if target == "backlog" {
        return backlog(rest);
    }
    if target == "cluster" {
        return cluster::run(rest);
    }
    let mut cargo_args: Vec<&str> = match target.as_str() {
        "core" => vec!["bench", "-p", "ironbus-core", "--bench", "throughput", "--"],
        "amqp" => vec!["run", "--release", "-p", "ironbus-bench", "--"],
        unknown => {
            bail!(
                "unknown benchmark target `{unknown}`; known: core, amqp, backlog, cluster, \
                 connections, side-by-side, instructions, fanout, filter-cost, sessions, forward, \
                 renew, console, console-overhead"
            )
        }
    };
    cargo_args.extend(rest.iter().map(String::as_str));
    crate::run_cargo(&format!("bench {target}"), &cargo_args)
}

/// The stores `bench backlog` runs on.
const BACKLOG_STORES: [StoreKind; 2] = [StoreKind::Rocksdb, StoreKind::Postgres];

/// `bench backlog [--store rocksdb|postgres] [ARGS] [-- ARGS]`: the store's backlog benchmark
/// (`store-<store>/benches/backlog.rs`, the steps shared in the core's `testing::backlog`).
fn backlog(rest: &[String]) -> Result<()> {
    let (store, cargo_args) = backlog_command(rest)?;
    if store == StoreKind::Postgres {
        // The benchmark starts a throwaway server of the tests' harness.
        crate::native::ensure_postgres()?;
    }
    crate::run_cargo(&format!("bench backlog --store {}", store.name()), &cargo_args)
}

/// The store and cargo's arguments of `bench backlog`: `--store` is taken from the arguments
/// before a `--`, everything else goes to the benchmark.
fn backlog_command(rest: &[String]) -> Result<(StoreKind, Vec<String>)> {
    let (ours, theirs) = match rest.iter().position(|arg| arg == "--") {
        Some(dashes) => (&rest[..dashes], &rest[dashes + 1..]),
        None => (rest, &[][..]),
    };
    let (store, args) = take_store_flag(ours, StoreKind::Rocksdb, &BACKLOG_STORES)?;
    let package = format!("ironbus-store-{}", store.name());
    let mut cargo_args: Vec<String> =
        ["bench", "-p", &package, "--bench", "backlog", "--"].map(str::to_owned).to_vec();
    cargo_args.extend(args);
    cargo_args.extend(theirs.iter().cloned());
    Ok((store, cargo_args))
}

/// `bench/<name>.sh` (`side-by-side`: RabbitMQ, ironbus on memory and ironbus on RocksDB in
/// alternating rounds with the same load generator, or ironbus revisions against each other with
/// `REVS`; `instructions`: valgrind's count of the instructions a revision's server executes per
/// message; `fanout`: the same for a topic with 1, 4 and
/// 16 subscriptions against a RabbitMQ fanout exchange; `filter-cost`: the publish rate with 100
/// filtered subscriptions against one; `sessions`: accept-next session receivers on a
/// 16-partition session queue against plain receivers on a plain one; `forward`: a one-hop
/// auto-forward against a direct queue; `renew`: the sync Python SDK's lock renewals from several
/// threads, for ironbus revisions); settings come from the
/// environment (see the script).
fn script(name: &str, rest: &[String]) -> Result<()> {
    if !rest.is_empty() {
        bail!("`bench {name}` takes no arguments; set ROUNDS, MESSAGES, OUT, ... instead");
    }
    let script = crate::workspace_root().join("bench").join(format!("{name}.sh"));
    let status = std::process::Command::new("bash")
        .arg(&script)
        .current_dir(crate::workspace_root())
        .status()
        .with_context(|| format!("could not start `bash {}`", script.display()))?;
    if !status.success() {
        bail!("bench {name} failed ({status})");
    }
    Ok(())
}

/// `ironbus-connections` against a freshly built server: idle AMQP connections and the
/// server's memory (flags: see `cargo run -p ironbus-bench --bin ironbus-connections -- --help`).
fn connections(rest: &[String]) -> Result<()> {
    let binaries = crate::compat::build_release(
        &["ironbus", "ironbus-bench"],
        &["ironbus", "ironbus-connections"],
    )?;
    let status = std::process::Command::new(&binaries[1])
        .arg("--server")
        .arg(&binaries[0])
        .args(rest)
        .current_dir(crate::workspace_root())
        .status()
        .with_context(|| format!("could not start {}", binaries[1].display()))?;
    if !status.success() {
        bail!("bench connections failed ({status})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backlog_takes_the_store_and_passes_the_rest_to_that_stores_bench() {
        let args = |text: &str| text.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        let bench = |package: &str, rest: &str| {
            args(&format!("bench -p ironbus-store-{package} --bench backlog -- {rest}"))
        };
        let command = |text: &str| backlog_command(&args(text)).unwrap();
        assert_eq!(command(""), (StoreKind::Rocksdb, bench("rocksdb", "")));
        assert_eq!(
            command("--store postgres -- --messages 10"),
            (StoreKind::Postgres, bench("postgres", "--messages 10"))
        );
        assert_eq!(
            command("--messages 10 --store=postgres --stores 4"),
            (StoreKind::Postgres, bench("postgres", "--messages 10 --stores 4"))
        );
        assert!(backlog_command(&args("--store memory")).is_err());
    }
}
