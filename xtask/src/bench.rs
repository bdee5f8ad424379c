//! `cargo xtask bench <target> [ARGS]`: runs a benchmark, passing ARGS to the benchmark itself.

use anyhow::{bail, Context, Result};

pub(crate) fn run(args: &[String]) -> Result<()> {
    let Some((target, rest)) = args.split_first() else {
        bail!(
            "`bench` needs a target: core, amqp, backlog, connections, side-by-side, \
             instructions, fanout, filter-cost, sessions, forward or renew (see `cargo xtask \
             help`)"
        );
    };
    // Everything after the target goes to the benchmark; a leading `--` is accepted and dropped,
    // since this task adds its own.
    let rest = match rest.split_first() {
        Some((dashes, after)) if dashes == "--" => after,
        _ => rest,
    };
    if target == "side-by-side" {
        return script("side-by-side", rest);
    }
    if matches!(
        target.as_str(),
        "instructions" | "fanout" | "filter-cost" | "sessions" | "forward" | "renew"
    ) {
        return script(target, rest);
    }
    if target == "connections" {
        return connections(rest);
    }
    let mut cargo_args: Vec<&str> = match target.as_str() {
        "core" => vec!["bench", "-p", "ironbus-core", "--bench", "throughput", "--"],
        "amqp" => vec!["run", "--release", "-p", "ironbus-bench", "--"],
        "backlog" => vec!["bench", "-p", "ironbus-store-rocksdb", "--bench", "backlog", "--"],
        unknown => {
            bail!(
                "unknown benchmark target `{unknown}`; known: core, amqp, backlog, connections, \
                 side-by-side, instructions, fanout, filter-cost, sessions, forward, renew"
            )
        }
    };
    cargo_args.extend(rest.iter().map(String::as_str));
    crate::run_cargo(&format!("bench {target}"), &cargo_args)
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
