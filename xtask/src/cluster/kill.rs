//! The `kill` scenario: SIGKILL a random node every `--interval` seconds (±25 %) under load,
//! `--kills` times, and measure how long every partition takes to accept sends again.
//!
//! Each kill: pick the victim and a surviving node (seeded); SIGKILL the victim; at once ask
//! the driver to probe every partition through the survivor; start the victim again after
//! [`RESTART_AFTER`] and wait until it is healthy; the probe's answer plus the moments between
//! the kill and the request is the kill-to-available time. After the last kill, every partition
//! must accept sends through every node; then the driver stops and drains, and its verdict must
//! show nothing lost, duplicated or unknown, and every kill-to-available time within `--bound`.

use std::{
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::{
    driver, median_and_max, paint, progress, Options, Outcome, Rig, PROBE_TIMEOUT, READY_TIMEOUT,
    RED, RESTART_AFTER,
};
use crate::rig::SplitMix64;

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
    for number in 1..=options.kills {
        let wait = jittered(options.interval, &mut rng);
        sleep_within(rig, wait, "waiting for the next kill")?;
        rig.check_running().with_context(|| format!("before kill {number}"))?;
        let victim = pick(&mut rng, nodes);
        // Through a surviving node; with one node, through the victim once it is back.
        let survivor =
            if nodes > 1 { (victim + 1 + pick(&mut rng, nodes - 1)) % nodes } else { victim };

        let killed_at = Instant::now();
        rig.nodes.kill(victim).with_context(|| format!("kill {number}"))?;
        rig.driver.start_probe(rig.nodes.amqp(survivor))?;
        let asked_after = killed_at.elapsed();
        thread::sleep(RESTART_AFTER.saturating_sub(killed_at.elapsed()));
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
                    "kill {number}/{}: SIGKILL {name} after {:.1} s; every partition accepts \
                     sends through {} {:.2} s after the kill{slowest}; {name} healthy again {:.1} \
                     s after its restart; ledger so far: {sent} sent, {received} received, \
                     {failed_sends} failed sends retried",
                    options.kills,
                    wait.as_secs_f64(),
                    rig.nodes.name(survivor),
                    available.as_secs_f64(),
                    restarted.as_secs_f64(),
                ));
            }
            None => progress(&paint(
                &format!(
                    "kill {number}/{}: SIGKILL {name}: partitions {:?} accepted no send through {} \
                     within {PROBE_TIMEOUT:?}",
                    options.kills,
                    probe.unavailable(),
                    rig.nodes.name(survivor)
                ),
                RED,
            )),
        }
        kills.push(Kill { victim, available, restarted });
    }

    // Some load on the healed cluster, then every partition through every node.
    let wait = jittered(options.interval / 2, &mut rng);
    sleep_within(rig, wait, "running after the last kill")?;
    rig.check_running().context("after the last kill")?;
    let mut failures = Vec::new();
    for index in 0..nodes {
        let probe = rig.probe(index)?;
        if probe.seconds.is_none() {
            failures.push(format!(
                "after the last kill, partitions {:?} accept no send through {}",
                probe.unavailable(),
                rig.nodes.name(index)
            ));
        }
    }

    progress("telling the driver to stop; it finishes its sends and drains the queue");
    let verdict = rig.driver.stop(rig.remaining())?;
    rig.check_store_and_nodes().context("during the drain")?;
    failures.extend(judge(&kills, &verdict, options.bound, &rig.nodes));
    report(&kills, &verdict, options, &rig.nodes);
    Ok(Outcome { failures })
}

/// What fails the run: the driver's verdict and the kill-to-available times.
fn judge(
    kills: &[Kill],
    verdict: &Value,
    bound: Duration,
    nodes: &super::nodes::Nodes,
) -> Vec<String> {
    let count = |key: &str| verdict[key].as_u64().unwrap_or(0);
    let mut failures = Vec::new();
    for (key, what) in [
        ("lost", "acknowledged but never received"),
        ("duplicated", "completed twice"),
        ("unknown", "received but never sent"),
    ] {
        if count(key) > 0 {
            failures.push(format!(
                "{} {key} ({what}): {}",
                count(key),
                placed(&verdict[format!("{key}_ids")])
            ));
        }
    }
    if verdict["passed"] != true && failures.is_empty() {
        failures.push(format!("the driver's verdict did not pass: {verdict}"));
    }
    for (number, kill) in kills.iter().enumerate() {
        let name = nodes.name(kill.victim);
        match kill.available {
            None => failures.push(format!(
                "kill {}: ({name}) some partition accepted no send within {PROBE_TIMEOUT:?}",
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

/// Listed MessageIds with their partitions: `p0-12 (partition 3), …`.
fn placed(ids: &Value) -> String {
    let ids = ids.as_array().map(Vec::as_slice).unwrap_or_default();
    let placed: Vec<String> = ids
        .iter()
        .filter_map(Value::as_str)
        .map(|id| format!("{id} (partition {})", driver::partition_of_message(id)))
        .collect();
    placed.join(", ")
}

#[allow(clippy::print_stdout, reason = "the measurements are this task's output")]
fn report(kills: &[Kill], verdict: &Value, options: &Options, nodes: &super::nodes::Nodes) {
    let count = |key: &str| verdict[key].as_u64().unwrap_or(0);
    let times: Vec<Duration> = kills.iter().filter_map(|kill| kill.available).collect();
    let restarts: Vec<Duration> = kills.iter().map(|kill| kill.restarted).collect();
    let shown = |value: Option<(Duration, Duration)>| match value {
        Some((median, max)) => {
            format!("median {:.2} s, max {:.2} s", median.as_secs_f64(), max.as_secs_f64())
        }
        None => "none".to_owned(),
    };
    println!(
        "{} nodes, {} kills: every partition accepting sends again after the kill: {} (bound \
         {:.1} s); restart to healthy: {}",
        nodes.len(),
        kills.len(),
        shown(median_and_max(&times)),
        options.bound.as_secs_f64(),
        shown(median_and_max(&restarts)),
    );
    println!(
        "ledger: {} sent, {} received, {} lost, {} duplicated, {} unknown, {} unconfirmed, {} \
         redelivered",
        count("sent"),
        count("received"),
        count("lost"),
        count("duplicated"),
        count("unknown"),
        count("unconfirmed"),
        count("redelivered"),
    );
    println!("{verdict}");
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
    fn waits_stay_within_a_quarter_of_the_interval() {
        let mut rng = SplitMix64(3);
        for _ in 0..200 {
            let wait = jittered(Duration::from_secs(20), &mut rng);
            assert!((Duration::from_secs(15)..=Duration::from_secs(25)).contains(&wait));
        }
    }

    #[test]
    fn lost_ids_are_shown_with_their_partitions() {
        let ids = serde_json::json!(["probe2-7", "p1-3"]);
        let p = driver::partition_of_message("p1-3");
        assert_eq!(placed(&ids), format!("probe2-7 (partition 7), p1-3 (partition {p})"));
    }
}
