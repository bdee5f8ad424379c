//! `cargo xtask fuzz`: builds the cargo-fuzz targets in `fuzz/` and runs them with libFuzzer's
//! allocation and RSS limits (see `fuzz/README.md`).
//!
//! The machine has a stable toolchain only. cargo-fuzz's coverage instrumentation uses stable
//! `-C` flags; AddressSanitizer (whose allocator gives libFuzzer `-malloc_limit_mb` and leak
//! detection) is a `-Z` flag, which stable rustc accepts with `RUSTC_BOOTSTRAP=1`. That variable
//! is set for the cargo-fuzz commands only, never for the workspace build. Campaigns on a shared
//! machine run under `nice -n 19 cargo xtask fuzz ...`: cargo-fuzz and libFuzzer inherit it.

use std::fs;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

/// Every target, as named in `fuzz/Cargo.toml` and `fuzz/fuzz_targets/`.
pub(crate) const TARGETS: &[&str] = &[
    "amqp_frame",
    "amqp_message",
    "amqp_request",
    "atom_description",
    "rest_properties",
    "sas_token",
    "sql_filter",
];

/// libFuzzer's limits for every run: one allocation above 64 MiB, a process above 512 MiB of
/// RSS or an input that runs 10 s is a finding.
const LIMITS: &[&str] = &["-malloc_limit_mb=64", "-rss_limit_mb=512", "-timeout=10"];

/// Seconds per target for `--smoke` and for a run without `--seconds` / `--runs`.
const SMOKE_SECONDS: u32 = 20;
const DEFAULT_SECONDS: u32 = 60;

#[derive(Debug, PartialEq, Eq)]
struct Plan {
    targets: Vec<&'static str>,
    /// `-max_total_time` / `-runs`; both may be given, the first reached ends the run.
    seconds: Option<u32>,
    runs: Option<u64>,
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    if args.first().map(String::as_str) == Some("list") {
        crate::no_arguments("fuzz list", &args[1..])?;
        print_targets();
        return Ok(());
    }
    let plan = parse(args)?;
    ensure_cargo_fuzz()?;
    cargo_fuzz("build", &["build", "-O", "--sanitizer", "address", "--target-dir", &target_dir()])?;
    for target in &plan.targets {
        run_target(target, &plan)?;
    }
    eprintln!(
        "xtask: fuzz passed ({} targets, no crash, leak or limit exceeded)",
        plan.targets.len()
    );
    Ok(())
}

fn parse(args: &[String]) -> Result<Plan> {
    let mut plan = Plan { targets: Vec::new(), seconds: None, runs: None };
    let mut smoke = false;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let mut value = |name: &str| {
            rest.next()
                .with_context(|| format!("`fuzz {name}` needs a number"))?
                .parse::<u64>()
                .with_context(|| format!("`fuzz {name}` needs a whole number"))
        };
        match arg.as_str() {
            "--smoke" => smoke = true,
            "--seconds" => plan.seconds = Some(u32::try_from(value("--seconds")?)?),
            "--runs" => plan.runs = Some(value("--runs")?),
            "all" => plan.targets.extend(TARGETS),
            name => match TARGETS.iter().find(|t| **t == name) {
                Some(target) => plan.targets.push(target),
                None => bail!("unknown fuzz target `{name}`; known: {}", TARGETS.join(", ")),
            },
        }
    }
    if smoke {
        if plan.seconds.is_some() || plan.runs.is_some() || !plan.targets.is_empty() {
            bail!("`fuzz --smoke` runs every target for {SMOKE_SECONDS} s and takes no other argument");
        }
        plan.seconds = Some(SMOKE_SECONDS);
    }
    if plan.targets.is_empty() {
        if !smoke {
            bail!("`fuzz` needs a target, `all` or `--smoke` (see `cargo xtask fuzz list`)");
        }
        plan.targets.extend(TARGETS);
    }
    if plan.seconds.is_none() && plan.runs.is_none() {
        plan.seconds = Some(DEFAULT_SECONDS);
    }
    Ok(plan)
}

#[allow(clippy::print_stdout, reason = "the asked-for list goes to stdout")]
fn print_targets() {
    for target in TARGETS {
        println!("{target}");
    }
}

fn fuzz_dir() -> PathBuf {
    crate::workspace_root().join("fuzz")
}

/// `$IRONBUS_FUZZ_TARGET_DIR`, else `fuzz/target`: instrumented builds never share the
/// workspace's target directory.
fn target_dir() -> String {
    match std::env::var_os("IRONBUS_FUZZ_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir).display().to_string(),
        None => fuzz_dir().join("target").display().to_string(),
    }
}

/// Installs cargo-fuzz from crates.io when `cargo fuzz` is missing.
fn ensure_cargo_fuzz() -> Result<()> {
    let present = crate::cargo()
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !present {
        crate::run_cargo("install cargo-fuzz", &["install", "cargo-fuzz", "--locked"])?;
    }
    Ok(())
}

/// Runs `cargo fuzz <args>` in `fuzz/` with `RUSTC_BOOTSTRAP=1` (for `-Zsanitizer=address`).
fn cargo_fuzz(step: &str, args: &[&str]) -> Result<()> {
    let shown = format!("RUSTC_BOOTSTRAP=1 cargo fuzz {}", args.join(" "));
    eprintln!("$ (cd fuzz && {shown})");
    let status = crate::cargo()
        .arg("fuzz")
        .args(args)
        .current_dir(fuzz_dir())
        .env("RUSTC_BOOTSTRAP", "1")
        .status()
        .with_context(|| format!("fuzz {step}: could not start `{shown}`"))?;
    if !status.success() {
        bail!("fuzz {step} failed ({status}): `{shown}`; a crash's input is in fuzz/artifacts/");
    }
    Ok(())
}

/// One target: the working corpus `fuzz/corpus/<target>` (git-ignored, grows) plus the
/// committed seeds `fuzz/seeds/<target>`, with the limits.
fn run_target(target: &str, plan: &Plan) -> Result<()> {
    let corpus = fuzz_dir().join("corpus").join(target);
    fs::create_dir_all(&corpus).with_context(|| format!("cannot create {}", corpus.display()))?;
    let seeds = fuzz_dir().join("seeds").join(target);
    let (corpus, seeds) = (corpus.display().to_string(), seeds.display().to_string());
    let mut args = vec!["run", "-O", "--sanitizer", "address", "--target-dir"];
    let dir = target_dir();
    args.extend([dir.as_str(), target, &corpus, &seeds, "--"]);
    args.extend(LIMITS);
    let seconds = plan.seconds.map(|s| format!("-max_total_time={s}"));
    let runs = plan.runs.map(|r| format!("-runs={r}"));
    args.extend(seconds.iter().chain(&runs).map(String::as_str));
    args.push("-print_final_stats=1");
    eprintln!("xtask: fuzzing {target}");
    cargo_fuzz(target, &args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn smoke_runs_every_target_briefly() {
        let plan = parse(&args("--smoke")).unwrap();
        assert_eq!(plan.targets, TARGETS);
        assert_eq!(plan.seconds, Some(SMOKE_SECONDS));
        assert_eq!(plan.runs, None);
    }

    #[test]
    fn targets_and_budgets_are_parsed() {
        let plan = parse(&args("sas_token amqp_frame --runs 10000000")).unwrap();
        assert_eq!(plan.targets, ["sas_token", "amqp_frame"]);
        assert_eq!((plan.seconds, plan.runs), (None, Some(10_000_000)));
        let plan = parse(&args("all")).unwrap();
        assert_eq!(plan.targets, TARGETS);
        assert_eq!(plan.seconds, Some(DEFAULT_SECONDS));
    }

    #[test]
    fn bad_arguments_are_refused() {
        for bad in ["", "nope", "--runs", "--runs x", "--smoke amqp_frame", "--smoke --seconds 5"] {
            assert!(parse(&args(bad)).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn every_target_has_a_source_and_seeds() {
        for target in TARGETS {
            let source = fuzz_dir().join("fuzz_targets").join(format!("{target}.rs"));
            assert!(source.is_file(), "{} is missing", source.display());
            let seeds = fuzz_dir().join("seeds").join(target);
            let count = fs::read_dir(&seeds).map_or(0, Iterator::count);
            assert!(count > 0, "{} holds no seeds", seeds.display());
        }
        let manifest = fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
        let declared = manifest.matches("[[bin]]").count();
        assert_eq!(declared, TARGETS.len(), "fuzz/Cargo.toml declares {declared} targets");
    }
}
