//! `cargo xtask fuzz`: builds the cargo-fuzz targets in `fuzz/` and runs them with libFuzzer's
//! allocation and RSS limits (see `fuzz/README.md`).
//!
//! The machine has a stable toolchain only. cargo-fuzz's coverage instrumentation uses stable
//! `-C` flags; AddressSanitizer (whose allocator gives libFuzzer `-malloc_limit_mb` and leak
//! detection) is a `-Z` flag, which stable rustc accepts with `RUSTC_BOOTSTRAP=1`. That variable
//! is set for the cargo-fuzz commands only, never for the workspace build. Campaigns on a shared
//! machine run under `nice -n 19 cargo xtask fuzz ...`: cargo-fuzz and libFuzzer inherit it.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;

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
    // Every chosen target runs, even after one failed, so that the table covers them all.
    let mut outcomes = Vec::new();
    for target in &plan.targets {
        outcomes.push(run_target(target, &plan)?);
    }
    print_summary(&outcomes);
    let failed: Vec<&str> = outcomes.iter().filter(|o| !o.passed()).map(|o| o.target).collect();
    if !failed.is_empty() {
        bail!("fuzz failed: {} (their inputs are in fuzz/artifacts/<target>/)", failed.join(", "));
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
    let shown = format!("(cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz {})", args.join(" "));
    let mut cmd = crate::cargo();
    cmd.arg("fuzz").args(args).current_dir(fuzz_dir()).env("RUSTC_BOOTSTRAP", "1");
    crate::run_shown(&format!("fuzz {step}"), &shown, &mut cmd)
}

/// One target: the working corpus `fuzz/corpus/<target>` (git-ignored, grows) plus the
/// committed seeds `fuzz/seeds/<target>`, with the limits. libFuzzer's output is shown as it
/// comes and read for the summary.
fn run_target(target: &'static str, plan: &Plan) -> Result<Outcome> {
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
    let shown = format!("RUSTC_BOOTSTRAP=1 cargo fuzz {}", args.join(" "));
    eprintln!("xtask: fuzzing {target}\n$ (cd fuzz && {shown})");
    let started = Instant::now();
    let mut child = crate::cargo()
        .arg("fuzz")
        .args(&args)
        .current_dir(fuzz_dir())
        .env("RUSTC_BOOTSTRAP", "1")
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("fuzz {target}: could not start `{shown}`"))?;
    let mut outcome = Outcome::new(target);
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).split(b'\n') {
            let line =
                line.with_context(|| format!("fuzz {target}: reading libFuzzer's output"))?;
            let line = String::from_utf8_lossy(&line);
            eprintln!("{line}");
            outcome.read(&line);
        }
    }
    let status = child.wait().with_context(|| format!("fuzz {target}: waiting for cargo fuzz"))?;
    outcome.seconds = started.elapsed().as_secs_f64();
    outcome.success = status.success();
    if !outcome.success {
        eprintln!("xtask: fuzz {target} failed ({status}): `{shown}`");
    }
    Ok(outcome)
}

/// What one target's run found, read from libFuzzer's and the sanitizer's output.
#[derive(Debug, Default, PartialEq)]
struct Outcome {
    target: &'static str,
    /// `stat::number_of_executed_units` (seed runs included).
    executions: Option<u64>,
    exec_per_sec: Option<u64>,
    peak_rss_mb: Option<u64>,
    /// A panic, a sanitizer error (other than a leak), a deadly signal or a timeout.
    crashes: u32,
    leaks: u32,
    /// Single allocations above `-malloc_limit_mb`.
    over_limit: u32,
    /// The process above `-rss_limit_mb`.
    over_rss: u32,
    seconds: f64,
    success: bool,
}

impl Outcome {
    fn new(target: &'static str) -> Self {
        Self { target, ..Self::default() }
    }

    fn passed(&self) -> bool {
        self.success && self.crashes + self.leaks + self.over_limit + self.over_rss == 0
    }

    /// Counts one line of output.
    fn read(&mut self, line: &str) {
        let stat =
            |name: &str| line.strip_prefix(name).and_then(|rest| rest.trim().parse::<u64>().ok());
        if let Some(n) = stat("stat::number_of_executed_units:") {
            self.executions = Some(n);
        } else if let Some(n) = stat("stat::average_exec_per_sec:") {
            self.exec_per_sec = Some(n);
        } else if let Some(n) = stat("stat::peak_rss_mb:") {
            self.peak_rss_mb = Some(n);
        } else if line.contains("ERROR: libFuzzer: out-of-memory (malloc(") {
            self.over_limit += 1;
        } else if line.contains("ERROR: libFuzzer: out-of-memory") {
            self.over_rss += 1;
        } else if line.contains("ERROR: LeakSanitizer") {
            self.leaks += 1;
        } else if line.contains("ERROR: AddressSanitizer")
            || line.contains("ERROR: libFuzzer: deadly signal")
            || line.contains("ERROR: libFuzzer: timeout")
            || line.contains("ERROR: libFuzzer: fuzz target exited")
        {
            self.crashes += 1;
        }
    }
}

/// The per-target table, on stdout: what ran, what it found, under which limits.
#[allow(clippy::print_stdout, reason = "the summary is the task's result")]
fn print_summary(outcomes: &[Outcome]) {
    let number = |n: Option<u64>| n.map_or_else(|| "?".to_owned(), |n| n.to_string());
    println!("\nfuzz summary (limits: {}, leak detection on)", LIMITS.join(" "));
    println!(
        "| target | executions | seconds | exec/s | peak RSS (MiB) | crashes | leaks | over-limit allocations | over RSS limit | result |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for o in outcomes {
        println!(
            "| `{}` | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |",
            o.target,
            number(o.executions),
            o.seconds,
            number(o.exec_per_sec),
            number(o.peak_rss_mb),
            o.crashes,
            o.leaks,
            o.over_limit,
            o.over_rss,
            if o.passed() { "pass" } else { "FAIL" },
        );
    }
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

    #[test]
    fn libfuzzer_output_is_counted() {
        let mut outcome = Outcome::new("amqp_frame");
        for line in [
            "#1000\tpulse  cov: 10 ft: 12 corp: 3/9b exec/s: 500 rss: 40Mb",
            "==1== ERROR: libFuzzer: out-of-memory (malloc(104857600))",
            "==1== ERROR: libFuzzer: out-of-memory (used: 600Mb; exceeds: 512Mb)",
            "==1==ERROR: LeakSanitizer: detected memory leaks",
            "==1== ERROR: libFuzzer: deadly signal",
            "stat::number_of_executed_units: 10000123",
            "stat::average_exec_per_sec:     9876",
            "stat::peak_rss_mb:              301",
        ] {
            outcome.read(line);
        }
        outcome.success = true;
        assert_eq!(outcome.executions, Some(10_000_123));
        assert_eq!((outcome.exec_per_sec, outcome.peak_rss_mb), (Some(9876), Some(301)));
        assert_eq!((outcome.crashes, outcome.leaks), (1, 1));
        assert_eq!((outcome.over_limit, outcome.over_rss), (1, 1));
        assert!(!outcome.passed());

        let mut clean = Outcome::new("sas_token");
        clean.read("stat::number_of_executed_units: 5");
        clean.success = true;
        assert!(clean.passed());
        clean.success = false;
        assert!(!clean.passed(), "a failed cargo fuzz is a failure even without a finding");
    }
}
