//! The `kill` scenario: SIGKILL a random node every `--interval` seconds (±25 %) under load,
//! `--kills` times, and measure how long every partition takes to accept sends again.
//!
//! Each kill: pick the victim and a surviving node (seeded); SIGKILL the victim; at once ask
//! the driver to probe every partition through the survivor; start the victim again (after
//! [`restart_after`]: alternately before and after its lease lapses, so that both the node's own
//! next start and the survivors take its partitions over) and wait until it is healthy; the probe's answer plus the moments between
//! the kill and the request is the kill-to-available time. After the last kill, every partition
//! must accept sends through every node; then the driver stops and drains, and its verdict must
//! show nothing lost, duplicated or unknown, and every kill-to-available time within `--bound`.
//!
//! With a crash `--load` the crash driver runs too, from before the first kill, on every node;
//! it is checked before each kill, stopped after the last (before the Python driver's verdict)
//! and its summary judged as `cargo xtask crash` judges it ([`rig::crash_passed`]).

use std::{
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use super::nodes::Nodes;
use super::{
    median_and_max, paint, progress, shown, utc_now, verdict, Options, Outcome, Rig, PROBE_TIMEOUT,
    QUEUE, READY_TIMEOUT, RED, RESTART_AFTER,
};
use crate::compat::{self, LOG_TAIL_LINES};
use crate::rig::{self, CrashDriver, SplitMix64};

/// One kill's measurements.
#[derive(Debug)]
struct Kill {
    victim: usize,
    /// Until every partition accepted a send; `None`: not within the probe's timeout.
    available: Option<Duration>,
    /// Until the restarted victim was healthy, from its restart.
    restarted: Duration,
}

pub(super) fn run(rig: &mut Rig, options: &Options, seed: u64) -> Result<Outcome> {
    let mut rng = SplitMix64(seed);
    let mut kills = Vec::new();
    let nodes = rig.nodes.len();
    let mut crash = start_crash_driver(rig, options)?;
    for number in 1..=options.kills {
        let wait = jittered(options.interval, &mut rng);
        sleep_within(rig, wait, "waiting for the next kill")?;
        rig.check_running().with_context(|| format!("before kill {number}"))?;
        if let Some((driver, _)) = &mut crash {
            if let Some(status) = driver.exited()? {
                bail!("the crash driver exited before kill {number} ({status})");
            }
        }
        let victim = pick(&mut rng, nodes);
        // Through a surviving node; with one node, through the victim once it is back.
        let survivor =
            if nodes > 1 { (victim + 1 + pick(&mut rng, nodes - 1)) % nodes } else { victim };

        let ran = rig.nodes.placement(survivor, QUEUE).map(|placement| {
            let ran = placement.of(rig.nodes.name(victim));
            format!(" (it ran partitions {ran:?})")
        });
        let restart_after = restart_after(options, number);
        let killed_at = Instant::now();
        let killed_utc = utc_now();
        rig.nodes.kill(victim).with_context(|| format!("kill {number}"))?;
        rig.driver.start_probe(rig.nodes.amqp(survivor))?;
        let asked_after = killed_at.elapsed();
        thread::sleep(restart_after.saturating_sub(killed_at.elapsed()));
        rig.nodes.start(victim)?;
        let restarted = rig.nodes.wait_ready(victim, READY_TIMEOUT.min(rig.remaining()))?;
        let probe = rig.driver.finish_probe(rig.remaining())?;
        let available = probe.seconds.map(|secs| asked_after + Duration::from_secs_f64(secs));
        let (sent, received, failed_sends) = rig.driver.stats()?;
        let name = rig.nodes.name(victim).to_owned();
        match available {
            Some(available) => {
                let slowest = probe.slowest().map_or(String::new(), |(partition, _)| {
                    format!(" (last: partition {partition})")
                });
                progress(&format!(
                    "kill {number}/{}: SIGKILL {name}{} at {killed_utc} UTC after {:.1} s; \
                     every partition accepts sends through {} {:.2} s after the kill{slowest}; \
                     {name} restarted after {:.0} s, healthy {:.1} s later; ledger so far: {sent} \
                     sent, {received} received, {failed_sends} failed sends retried",
                    options.kills,
                    ran.unwrap_or_default(),
                    wait.as_secs_f64(),
                    rig.nodes.name(survivor),
                    available.as_secs_f64(),
                    restart_after.as_secs_f64(),
                    restarted.as_secs_f64(),
                ));
            }
            None => progress(&paint(
                &format!(
                    "kill {number}/{}: SIGKILL {name} at {killed_utc} UTC: partitions {:?} \
                     accepted no send through {} within {PROBE_TIMEOUT:?}",
                    options.kills,
                    probe.unavailable(),
                    rig.nodes.name(survivor)
                ),
                RED,
            )),
        }
        kills.push(Kill { victim, available, restarted });
    }

    // Some load on the healed cluster before the end.
    let wait = jittered(options.interval / 2, &mut rng);
    sleep_within(rig, wait, "running after the last kill")?;
    let crash_failures = match crash {
        Some((mut driver, log)) => stop_crash_driver(rig, &mut driver, options, &log)?,
        None => Vec::new(),
    };
    let (verdict, mut failures) = verdict::finish(rig)?;
    failures.extend(crash_failures);
    failures.extend(slow_kills(&kills, options.bound, &rig.nodes));
    report(&kills, options, &rig.nodes);
    verdict::print_ledger(&verdict);
    Ok(Outcome { failures })
}

/// With a crash `--load`: the crash driver on every node, and its log.
fn start_crash_driver(
    rig: &Rig,
    options: &Options,
) -> Result<Option<(CrashDriver, std::path::PathBuf)>> {
    let (Some(load), Some(binary)) = (options.crash_load(), &rig.crash_driver) else {
        return Ok(None);
    };
    let ports: Vec<u16> = (0..rig.nodes.len()).map(|i| rig.nodes.amqp(i).port()).collect();
    let log = rig.work.join("crash-driver.log");
    let counts = (options.producers(), options.consumers());
    let driver = CrashDriver::start(binary, &ports, load, counts, &[], &log)?;
    progress(&format!("crash driver ({load}) started on {} nodes", ports.len()));
    Ok(Some((driver, log)))
}

/// Stops the crash driver (it finishes its sends and drains), prints its counts and summary and
/// returns what failed.
#[allow(clippy::print_stdout, reason = "the crash driver's verdict is this task's output")]
fn stop_crash_driver(
    rig: &Rig,
    driver: &mut CrashDriver,
    options: &Options,
    log: &std::path::Path,
) -> Result<Vec<String>> {
    progress("telling the crash driver to stop; it finishes its sends and drains its queues");
    let report = driver.stop(rig.deadline)?;
    let load = options.load.as_str();
    println!("crash driver ({load}): {}", rig::crash_counts(&report, load));
    println!("{report}");
    if rig::crash_passed(&report) {
        return Ok(Vec::new());
    }
    eprintln!("{}", compat::log_tail(log, LOG_TAIL_LINES));
    Ok(vec![format!("crash driver ({load}): {}", rig::crash_failure(&report))])
}

/// Kills after which some partition took longer than `bound` (or forever) to accept sends.
fn slow_kills(kills: &[Kill], bound: Duration, nodes: &Nodes) -> Vec<String> {
    let mut failures = Vec::new();
    for (number, kill) in kills.iter().enumerate() {
        let name = nodes.name(kill.victim);
        match kill.available {
            None => failures.push(format!(
                "kill {} ({name}): some partition accepted no send within {PROBE_TIMEOUT:?}",
                number + 1
            )),
            Some(available) if available > bound => failures.push(format!(
                "kill {} ({name}): every partition accepted sends only after {:.2} s, over the \
                 bound of {:.1} s",
                number + 1,
                available.as_secs_f64(),
                bound.as_secs_f64()
            )),
            Some(_) => {}
        }
    }
    failures
}

#[allow(clippy::print_stdout, reason = "the measurements are this task's output")]
fn report(kills: &[Kill], options: &Options, nodes: &Nodes) {
    let times: Vec<Duration> = kills.iter().filter_map(|kill| kill.available).collect();
    let restarts: Vec<Duration> = kills.iter().map(|kill| kill.restarted).collect();
    println!(
        "{} nodes, {} kills: every partition accepting sends again after the kill: {} (bound \
         {:.1} s); restart to healthy: {}",
        nodes.len(),
        kills.len(),
        shown(median_and_max(&times)),
        options.bound.as_secs_f64(),
        shown(median_and_max(&restarts)),
    );
}

/// When kill `number` (from 1) restarts its node: `--restart-after`, else alternately
/// [`RESTART_AFTER`] (the node's next start claims its partitions back before its lease lapsed)
/// and a lease plus [`RESTART_AFTER`] (the surviving nodes take them over first, then hand the
/// restarted node its share).
fn restart_after(options: &Options, number: u32) -> Duration {
    match options.restart_after {
        Some(after) => after,
        None if number % 2 == 1 => RESTART_AFTER,
        None => Duration::from_millis(options.lease_ms) + RESTART_AFTER,
    }
}

/// `mean` ± 25 %.
fn jittered(mean: Duration, rng: &mut SplitMix64) -> Duration {
    let ms = mean.as_millis().min(u128::from(u64::MAX)) as u64;
    Duration::from_millis(rng.between(ms - ms / 4, ms + ms / 4))
}

/// A number in `0..n`.
fn pick(rng: &mut SplitMix64, n: usize) -> usize {
    (rng.next() % n as u64) as usize
}

fn sleep_within(rig: &Rig, wait: Duration, what: &str) -> Result<()> {
    if wait > rig.remaining() {
        bail!("timed out ({what}): raise --timeout");
    }
    thread::sleep(wait);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_alternate_before_and_after_the_lease_unless_given() {
        let options = Options::default();
        let lease = Duration::from_millis(options.lease_ms);
        assert_eq!(restart_after(&options, 1), RESTART_AFTER);
        assert_eq!(restart_after(&options, 2), lease + RESTART_AFTER);
        assert_eq!(restart_after(&options, 3), RESTART_AFTER);
        let given = Options { restart_after: Some(Duration::from_secs(7)), ..Options::default() };
        assert_eq!(restart_after(&given, 2), Duration::from_secs(7));
    }

    #[test]
    fn waits_stay_within_a_quarter_of_the_interval() {
        let mut rng = SplitMix64(3);
        for _ in 0..200 {
            let wait = jittered(Duration::from_secs(20), &mut rng);
            assert!((Duration::from_secs(15)..=Duration::from_secs(25)).contains(&wait));
        }
    }
}
