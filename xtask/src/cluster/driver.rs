//! The Python driver of `cargo xtask cluster` (`compat/cluster/driver.py`, the official SDK from
//! the Python suite's venv): started once per run, told what to do one line at a time on its
//! stdin (`probe HOST:PORT`, `stats`, `stop`), answering each with one JSON line on stdout; its
//! stderr goes to `driver.log` in the work directory.
//!
//! The probe sends to each partition with a PartitionKey the task picked for it
//! ([`partition_keys`]): the broker's router maps a key to `xxh3_64(key) % partitions`
//! (`core/src/router.rs`).

use std::{
    fs,
    io::{BufRead, BufReader, Write},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, ExitStatus, Stdio},
    sync::mpsc::{self, Receiver, RecvTimeoutError},
    thread,
    time::Duration,
};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::{progress, Options, LOCK_DURATION_SECS, PARTITIONS, PROBE_TIMEOUT, QUEUE};
use crate::compat;
use crate::workspace_root;

/// The driver's directory, under the workspace root.
const DIR: &str = "compat/cluster";
/// How long the driver may take to start its threads.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The running driver. Dropping it kills the process if it still runs.
#[derive(Debug)]
pub(super) struct Driver {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    pub(super) log: PathBuf,
}

impl Driver {
    /// Starts the driver on `endpoints` (every node's AMQP address) and waits for `ready`.
    pub(super) fn start(
        python: &Path,
        work: &Path,
        endpoints: &[String],
        options: &Options,
    ) -> Result<Driver> {
        let keys = partition_keys(PARTITIONS);
        let mut command = Command::new(python);
        command
            .arg("driver.py")
            .args(["--endpoints", &endpoints.join(",")])
            .args(["--queue", QUEUE])
            .args(["--partition-keys", &keys.join(",")])
            .args(["--producers", &options.producers().to_string()])
            .args(["--consumers", &options.consumers().to_string()])
            .args(["--rate", &options.rate.to_string()])
            .args(["--quiet", &(LOCK_DURATION_SECS + 2).to_string()])
            .args(["--probe-timeout", &PROBE_TIMEOUT.as_secs().to_string()])
            .args(["--key", compat::SAS_KEY])
            .args(&options.driver_args)
            .current_dir(workspace_root().join(DIR))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1");
        let log = work.join("driver.log");
        let err = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(err);
        eprintln!("$ (cd {DIR}) {} 2> {}", compat::shown(&command), log.display());
        let mut child = command
            .spawn()
            .with_context(|| format!("could not start `{}`", compat::shown(&command)))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().context("the driver has no stdout")?;
        let (sender, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut driver = Driver { child, stdin, lines, log };
        driver.answer("ready", READY_TIMEOUT)?;
        Ok(driver)
    }

    fn send(&mut self, command: &str) -> Result<()> {
        let stdin = self.stdin.as_mut().context("the driver's stdin is closed")?;
        writeln!(stdin, "{command}").with_context(|| format!("telling the driver `{command}`"))?;
        stdin.flush().context("flushing the driver's stdin")
    }

    /// Waits up to `timeout` for the next JSON line, which must be the answer `event`.
    fn answer(&mut self, event: &str, timeout: Duration) -> Result<Value> {
        let line = match self.lines.recv_timeout(timeout) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                bail!("the driver gave no `{event}` answer within {timeout:?}")
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait().context("waiting for the driver")?;
                bail!("the driver exited ({status}) instead of answering `{event}`")
            }
        };
        let answer: Value = serde_json::from_str(&line)
            .with_context(|| format!("the driver answered `{event}` with no JSON: {line:?}"))?;
        if answer["event"] != event {
            bail!("the driver answered `{event}` with {answer}");
        }
        Ok(answer)
    }

    /// Asks for a probe of every partition through `via` (answered by [`Driver::finish_probe`]).
    pub(super) fn start_probe(&mut self, via: SocketAddr) -> Result<()> {
        self.send(&format!("probe {via}"))
    }

    /// The answer to [`Driver::start_probe`].
    pub(super) fn finish_probe(&mut self, timeout: Duration) -> Result<Probe> {
        let answer = self.answer("probe", timeout.min(PROBE_TIMEOUT + Duration::from_secs(30)))?;
        let partitions = answer["partitions"].as_array().context("a probe without partitions")?;
        Ok(Probe {
            seconds: answer["seconds"].as_f64(),
            partitions: partitions.iter().map(Value::as_f64).collect(),
        })
    }

    /// The ledger's running totals: (acknowledged sends, completed messages, failed sends).
    pub(super) fn stats(&mut self) -> Result<(u64, u64, u64)> {
        self.send("stats")?;
        let answer = self.answer("stats", Duration::from_secs(30))?;
        let count = |key: &str| answer[key].as_u64().unwrap_or(0);
        Ok((count("sent"), count("received"), count("failed_sends")))
    }

    /// Tells the driver to stop: producers stop, consumers drain; returns the verdict.
    pub(super) fn stop(&mut self, timeout: Duration) -> Result<Value> {
        self.send("stop")?;
        let verdict = self.answer("verdict", timeout)?;
        self.stdin = None;
        let _ = compat::wait_at_most(&mut self.child, Duration::from_secs(10))?;
        Ok(verdict)
    }

    pub(super) fn check_running(&mut self) -> Result<()> {
        match self.exited()? {
            Some(status) => bail!("the driver exited ({status})"),
            None => Ok(()),
        }
    }

    fn exited(&mut self) -> Result<Option<ExitStatus>> {
        self.child.try_wait().context("checking on the driver")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The answer to a probe: seconds from the request until each partition took a send.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Probe {
    /// Until every partition took one; `None`: some did not within the probe's timeout.
    pub(super) seconds: Option<f64>,
    pub(super) partitions: Vec<Option<f64>>,
}

impl Probe {
    /// The partitions that took no send.
    pub(super) fn unavailable(&self) -> Vec<usize> {
        let missing = self.partitions.iter().enumerate().filter(|(_, secs)| secs.is_none());
        missing.map(|(partition, _)| partition).collect()
    }

    /// The partition that took longest, and its seconds.
    pub(super) fn slowest(&self) -> Option<(usize, f64)> {
        let done = self.partitions.iter().enumerate();
        let done = done.filter_map(|(partition, secs)| secs.map(|secs| (partition, secs)));
        done.max_by(|a, b| a.1.total_cmp(&b.1))
    }
}

/// The partition a key goes to on an entity of `partitions` partitions: the broker's router
/// (`core/src/router.rs`: xxh3-64, seed 0, over the UTF-8 bytes, modulo the partitions).
pub(super) fn partition_of(key: &str, partitions: u16) -> u16 {
    (xxhash_rust::xxh3::xxh3_64(key.as_bytes()) % u64::from(partitions.max(1))) as u16
}

/// A PartitionKey for each partition, in partition order: the first of `key-0`, `key-1`, …
/// that maps to it.
pub(super) fn partition_keys(partitions: u16) -> Vec<String> {
    let mut keys: Vec<Option<String>> = vec![None; usize::from(partitions)];
    let mut candidate = 0u64;
    while keys.iter().any(Option::is_none) {
        let key = format!("key-{candidate}");
        let slot = &mut keys[usize::from(partition_of(&key, partitions))];
        if slot.is_none() {
            *slot = Some(key);
        }
        candidate += 1;
    }
    keys.into_iter().flatten().collect()
}

/// The partition of a MessageId in the driver's verdict: a producer's message goes where its
/// MessageId hashes (the queue has duplicate detection and no PartitionKey is set); a probe's,
/// `probe<round>-<partition>`, says it.
pub(super) fn partition_of_message(message_id: &str) -> u16 {
    let probe = message_id.strip_prefix("probe").and_then(|rest| rest.split_once('-'));
    match probe.and_then(|(_, partition)| partition.parse().ok()) {
        Some(partition) => partition,
        None => partition_of(message_id, PARTITIONS),
    }
}

/// Runs the ledger's unit tests (`compat/cluster/test_ledger.py`, standard library only) with
/// `python`: the verdict is only as good as the ledger.
pub(super) fn check_ledger(python: &Path) -> Result<()> {
    let dir = workspace_root().join(DIR);
    let output = Command::new(python)
        .args(["-m", "unittest", "-q", "test_ledger"])
        .current_dir(&dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .context("running the ledger's unit tests")?;
    if !output.status.success() {
        bail!(
            "the driver's ledger fails its unit tests ({DIR}/test_ledger.py):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    progress("the driver's ledger passes its unit tests");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_the_routers() {
        // Pinned in core/src/router.rs's hash_is_stable_across_releases.
        assert_eq!(xxhash_rust::xxh3::xxh3_64(b"order-1"), 6_900_751_593_513_035_894);
        let pinned: Vec<u16> =
            ["a", "b", "order-1", "session-42", ""].iter().map(|k| partition_of(k, 16)).collect();
        assert_eq!(pinned, [15, 15, 6, 14, 2]);
    }

    #[test]
    fn every_partition_gets_a_key_that_maps_to_it() {
        for partitions in [1, 2, 16, 32] {
            let keys = partition_keys(partitions);
            assert_eq!(keys.len(), usize::from(partitions));
            for (partition, key) in keys.iter().enumerate() {
                assert_eq!(usize::from(partition_of(key, partitions)), partition, "{key}");
            }
        }
    }

    #[test]
    fn messages_are_placed_by_id_or_by_their_probe_partition() {
        assert_eq!(partition_of_message("probe3-11"), 11);
        assert_eq!(partition_of_message("p0-17"), partition_of("p0-17", PARTITIONS));
        assert_eq!(partition_of_message("probe-x"), partition_of("probe-x", PARTITIONS));
    }

    #[test]
    fn a_probe_names_missing_and_slowest_partitions() {
        let probe = Probe { seconds: None, partitions: vec![Some(0.5), None, Some(2.5), None] };
        assert_eq!(probe.unavailable(), [1, 3]);
        assert_eq!(probe.slowest(), Some((2, 2.5)));
    }
}
