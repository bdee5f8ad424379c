//! `cargo xtask bench <target> [ARGS]`: runs a benchmark, passing ARGS to the benchmark itself.

use anyhow::{bail, Result};

pub(crate) fn run(args: &[String]) -> Result<()> {
    let Some((target, rest)) = args.split_first() else {
        bail!("`bench` needs a target: core, amqp or backlog (see `cargo xtask help`)");
    };
    // Everything after the target goes to the benchmark; a leading `--` is accepted and dropped,
    // since this task adds its own.
    let rest = match rest.split_first() {
        Some((dashes, after)) if dashes == "--" => after,
        _ => rest,
    };
    let mut cargo_args: Vec<&str> = match target.as_str() {
        "core" => vec!["bench", "-p", "ironbus-core", "--bench", "throughput", "--"],
        "amqp" => vec!["run", "--release", "-p", "ironbus-bench", "--"],
        "backlog" => vec!["bench", "-p", "ironbus-store-rocksdb", "--bench", "backlog", "--"],
        unknown => bail!("unknown benchmark target `{unknown}`; known: core, amqp, backlog"),
    };
    cargo_args.extend(rest.iter().map(String::as_str));
    crate::run_cargo(&format!("bench {target}"), &cargo_args)
}
