//! What the tasks that kill servers under load share: `cargo xtask crash` (one server) and
//! `cargo xtask cluster` (several nodes on one PostgreSQL).
//!
//! - the queues they declare, in the emulator's config format ([`QueueSpec`], [`config_json`]):
//!   partitioned, duplicate detection whose window outlasts the test, a short lock, and a
//!   delivery limit no kill pattern reaches;
//! - a seeded generator for kill schedules ([`SplitMix64`], [`time_seed`]);
//! - reading flags (`--flag value` or `--flag=value`, [`walk_flags`]) and their numbers
//!   ([`number`]);
//! - the crash driver `ironbus-crash` under its scenarios `queue`, `forward` and `transaction`
//!   (issues 4, 14, 15): their queues ([`crash_queues`]), the driver process on one or several
//!   URLs ([`CrashDriver`]) and how its JSON summary is judged ([`crash_passed`],
//!   [`crash_counts`], [`crash_failure`]).

use std::{
    fs,
    io::{Read, Write},
    path::Path,
    process::{Child, ChildStdin, Command, ExitStatus, Stdio},
    thread,
    time::{Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::compat::{self, NAMESPACE, SAS_KEY};

/// The crash driver's queue (it sends to it; in `forward`, the chain's start).
pub(crate) const CRASH_QUEUE: &str = "crash";
/// The `forward` scenario: the chain after [`CRASH_QUEUE`], in order; consumers drain the last.
pub(crate) const CHAIN: [&str; 2] = ["crash-mid", "crash-end"];
/// The `transaction` scenario: where the workers' derived messages go.
pub(crate) const OUT: &str = "crash-out";
/// The crash queues' lock duration; the driver's drain waits longer than this without
/// deliveries, so that a completion the broker lost makes the message come back before the
/// verdict.
pub(crate) const CRASH_LOCK_SECS: u64 = 10;
/// The crash driver's scenarios.
pub(crate) const CRASH_SCENARIOS: [&str; 3] = ["queue", "forward", "transaction"];

/// One queue of a rig's config.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueSpec<'a> {
    pub(crate) name: &'a str,
    /// 1: not partitioned.
    pub(crate) partitions: u32,
    pub(crate) dedup: bool,
    /// `""`: no auto-forwarding.
    pub(crate) forward_to: &'a str,
    pub(crate) lock_secs: u64,
}

impl QueueSpec<'_> {
    /// The queue in the emulator's format.
    pub(crate) fn to_json(self) -> Value {
        json!({
            "Name": self.name,
            "Properties": {
                "DeadLetteringOnMessageExpiration": false,
                "DefaultMessageTimeToLive": "PT2H",
                "DuplicateDetectionHistoryTimeWindow": "PT1H",
                "ForwardDeadLetteredMessagesTo": "",
                "ForwardTo": self.forward_to,
                "LockDuration": format!("PT{}S", self.lock_secs),
                "MaxDeliveryCount": 1000,
                "RequiresDuplicateDetection": self.dedup,
                "RequiresSession": false,
                "EnablePartitioning": self.partitions > 1,
                "PartitionCount": self.partitions,
            },
        })
    }
}

/// The emulator-format config.json declaring `queues` in the development namespace.
pub(crate) fn config_json(queues: &[QueueSpec<'_>]) -> Value {
    let queues: Vec<Value> = queues.iter().map(|queue| queue.to_json()).collect();
    json!({
        "UserConfig": {
            "Namespaces": [{ "Name": NAMESPACE, "Queues": queues, "Topics": [] }],
            "Logging": { "Type": "File" },
        }
    })
}

/// The queues of crash `scenario`: the one producers send to, partitioned, with duplicate
/// detection; with `forward`, it forwards to the [`CHAIN`] (the middle queue not partitioned, the
/// last one partitioned, neither deduplicating: the forwarder alone must keep copies single);
/// with `transaction`, [`OUT`] (partitioned, no duplicate detection) beside it.
pub(crate) fn crash_queues(scenario: &str) -> Vec<QueueSpec<'static>> {
    let queue = |name, partitions, dedup, forward_to| QueueSpec {
        name,
        partitions,
        dedup,
        forward_to,
        lock_secs: CRASH_LOCK_SECS,
    };
    match scenario {
        "transaction" => vec![queue(CRASH_QUEUE, 4, true, ""), queue(OUT, 2, false, "")],
        "queue" => vec![queue(CRASH_QUEUE, 4, true, "")],
        _ => vec![
            queue(CRASH_QUEUE, 4, true, CHAIN[0]),
            queue(CHAIN[0], 1, false, CHAIN[1]),
            queue(CHAIN[1], 2, false, ""),
        ],
    }
}

/// The crash driver process: stdin kept to tell it to stop, stdout collected by a thread,
/// stderr in a log file. Dropping it kills the process if it still runs.
#[derive(Debug)]
pub(crate) struct CrashDriver {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<thread::JoinHandle<String>>,
}

impl CrashDriver {
    /// Starts `binary` under crash `scenario` on `ports` (producer, consumer and worker `i`
    /// connect to port `i mod n`), with `extra` arguments last; stderr to `log`.
    pub(crate) fn start(
        binary: &Path,
        ports: &[u16],
        scenario: &str,
        (producers, consumers): (usize, usize),
        extra: &[String],
        log: &Path,
    ) -> Result<CrashDriver> {
        let mut command = Command::new(binary);
        for port in ports {
            command.arg("--url").arg(format!("amqp://127.0.0.1:{port}"));
        }
        command
            .arg("--sasl-plain")
            .arg(format!("RootManageSharedAccessKey:{SAS_KEY}"))
            .args(["--address", CRASH_QUEUE])
            .args(match scenario {
                "forward" => vec!["--receive-from", CHAIN[1]],
                // One transaction per message and worker: producers at a pace workers keep up
                // with, so that the drain ends in time (a `--rate` in `extra` comes later and
                // counts instead).
                "transaction" => vec!["--transfer-to", OUT, "--rate", "25"],
                _ => vec![],
            })
            .arg("--producers")
            .arg(producers.to_string())
            .arg("--consumers")
            .arg(consumers.to_string())
            .arg("--quiet")
            .arg((CRASH_LOCK_SECS + 2).to_string())
            .args(extra);
        let err = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(err);
        eprintln!("$ {} 2> {}", compat::shown(&command), log.display());
        let mut child = command
            .spawn()
            .with_context(|| format!("could not start `{}`", compat::shown(&command)))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().map(|mut out| {
            thread::spawn(move || {
                let mut text = String::new();
                let _ = out.read_to_string(&mut text);
                text
            })
        });
        Ok(CrashDriver { child, stdin, stdout })
    }

    pub(crate) fn exited(&mut self) -> Result<Option<ExitStatus>> {
        self.child.try_wait().context("checking on the driver")
    }

    /// Sends `stop`, waits for the driver to exit (until `deadline`) and returns its JSON
    /// summary.
    pub(crate) fn stop(&mut self, deadline: Instant) -> Result<Value> {
        if let Some(mut stdin) = self.stdin.take() {
            writeln!(stdin, "stop").context("telling the driver to stop")?;
            // Dropping stdin closes it: also a stop for the driver.
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        let status = compat::wait_at_most(&mut self.child, remaining)?
            .context("timed out waiting for the driver's verdict")?;
        let output = match self.stdout.take() {
            Some(reader) => reader.join().unwrap_or_default(),
            None => String::new(),
        };
        let last = output.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or_default();
        let report: Value = serde_json::from_str(last).with_context(|| {
            format!("the driver ({status}) printed no JSON verdict; its output: {output:?}")
        })?;
        if !report.is_object() {
            bail!("the driver's verdict is not a JSON object: {last}");
        }
        Ok(report)
    }
}

impl Drop for CrashDriver {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `M acknowledged, L lost, D duplicated` of the crash driver's `report` (`, U unpaired` in the
/// `transaction` scenario).
pub(crate) fn crash_counts(report: &Value, scenario: &str) -> String {
    let count = |key: &str| report[key].as_u64().unwrap_or(0);
    let mut line = format!(
        "{} acknowledged, {} lost, {} duplicated",
        count("acknowledged"),
        count("lost"),
        count("duplicated")
    );
    if scenario == "transaction" {
        line.push_str(&format!(", {} unpaired", count("unpaired")));
    }
    line
}

/// Whether the crash driver's `report` passes: it says so, and nothing is lost, duplicated,
/// unknown or unpaired.
pub(crate) fn crash_passed(report: &Value) -> bool {
    let count = |key: &str| report[key].as_u64().unwrap_or(0);
    report["passed"] == true
        && ["lost", "duplicated", "unknown", "unpaired"].iter().all(|key| count(key) == 0)
}

/// Why the crash driver's `report` failed: its counts and its error, if any.
pub(crate) fn crash_failure(report: &Value) -> String {
    let count = |key: &str| report[key].as_u64().unwrap_or(0);
    format!(
        "{} lost, {} duplicated, {} unknown, {} unpaired{}",
        count("lost"),
        count("duplicated"),
        count("unknown"),
        count("unpaired"),
        report["error"].as_str().map(|e| format!(" (driver: {e})")).unwrap_or_default()
    )
}

/// Walks `args`: calls `on(flag, value)` for each flag, where `value()` takes the flag's value
/// (after `=`, else the next argument); returns the arguments after `--`.
pub(crate) fn walk_flags(
    args: &[String],
    mut on: impl FnMut(&str, &mut dyn FnMut() -> Result<String>) -> Result<()>,
) -> Result<Vec<String>> {
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            return Ok(rest.cloned().collect());
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_owned())),
            _ => (arg.as_str(), None),
        };
        let mut value = || -> Result<String> {
            match &inline {
                Some(value) => Ok(value.clone()),
                None => rest.next().cloned().with_context(|| format!("{flag} needs a value")),
            }
        };
        on(flag, &mut value)?;
    }
    Ok(Vec::new())
}

/// `text`, the value of `flag`, as a number of at least `min`.
pub(crate) fn number<T: std::str::FromStr + PartialOrd + From<u8> + Copy + std::fmt::Display>(
    flag: &str,
    text: &str,
    min: u8,
) -> Result<T> {
    match text.parse::<T>() {
        Ok(n) if n >= T::from(min) => Ok(n),
        _ => bail!("{flag} needs a whole number of at least {min}, got `{text}`"),
    }
}

/// splitmix64: a small seeded generator, enough for a kill schedule.
#[derive(Debug)]
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`.
    pub(crate) fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

/// A seed from the clock and the process id, for runs not given `--seed`.
pub(crate) fn time_seed() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    SplitMix64(now.as_nanos() as u64 ^ u64::from(std::process::id())).next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_schedule_is_seeded_and_in_range() {
        let schedule = |seed| {
            let mut rng = SplitMix64(seed);
            (0..100).map(|_| rng.between(500, 3000)).collect::<Vec<_>>()
        };
        assert_eq!(schedule(7), schedule(7));
        assert_ne!(schedule(7), schedule(8));
        assert!(schedule(7).iter().all(|ms| (500..=3000).contains(ms)));
    }

    #[test]
    fn flags_take_values_with_spaces_or_equals_and_stop_at_dashes() {
        let args: Vec<String> =
            "--a 1 --b=2 -- --c 3".split_whitespace().map(str::to_owned).collect();
        let mut seen = Vec::new();
        let after = walk_flags(&args, |flag, value| {
            seen.push((flag.to_owned(), value()?));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [("--a".to_owned(), "1".to_owned()), ("--b".to_owned(), "2".to_owned())]);
        assert_eq!(after, ["--c", "3"]);
        assert!(walk_flags(&["--a".to_owned()], |_, value| value().map(drop)).is_err());
    }

    #[test]
    fn numbers_below_the_minimum_are_refused() {
        assert_eq!(number::<u32>("--n", "3", 1).unwrap(), 3);
        assert!(number::<u32>("--n", "0", 1).is_err());
        assert!(number::<u32>("--n", "x", 0).is_err());
    }

    #[test]
    fn a_queue_spec_gives_every_emulator_property() {
        let spec =
            QueueSpec { name: "q", partitions: 16, dedup: true, forward_to: "", lock_secs: 10 };
        let config = config_json(&[spec]);
        let queue = &config["UserConfig"]["Namespaces"][0]["Queues"][0];
        assert_eq!(queue["Name"], "q");
        assert_eq!(queue["Properties"]["PartitionCount"], 16);
        assert_eq!(queue["Properties"]["EnablePartitioning"], true);
        assert_eq!(queue["Properties"]["LockDuration"], "PT10S");
        let one = QueueSpec { partitions: 1, ..spec }.to_json();
        assert_eq!(one["Properties"]["EnablePartitioning"], false);
    }

    #[test]
    fn a_crash_summary_passes_only_with_nothing_lost_duplicated_unknown_or_unpaired() {
        let clean = json!({"passed": true, "acknowledged": 9, "lost": 0, "duplicated": 0});
        assert!(crash_passed(&clean));
        assert_eq!(crash_counts(&clean, "forward"), "9 acknowledged, 0 lost, 0 duplicated");
        assert!(crash_counts(&clean, "transaction").ends_with(", 0 unpaired"));
        for key in ["lost", "duplicated", "unknown", "unpaired"] {
            let mut bad = clean.clone();
            bad[key] = json!(1);
            assert!(!crash_passed(&bad), "{key}");
        }
        let error = json!({"passed": false, "lost": 2, "error": "gave up"});
        assert!(!crash_passed(&error));
        assert_eq!(
            crash_failure(&error),
            "2 lost, 0 duplicated, 0 unknown, 0 unpaired (driver: gave up)"
        );
    }
}
