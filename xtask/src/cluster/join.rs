//! The `join` scenario: a node joins under load and takes its share of the partitions, then a
//! node leaves on SIGTERM and hands its partitions over without waiting for a lease.
//!
//! 1. After about `--interval / 2` seconds of load, start one more node (the clients keep to the
//!    first nodes) and poll every node's `/health` until they all show the same placement, every
//!    partition running and available, the new node running some: it must take at least one
//!    partition within [`SETTLE_TIMEOUT`] (its fair share, 16 / nodes, is reported beside what it
//!    took), and every partition must accept sends through it.
//! 2. After another `--interval / 2` seconds, SIGTERM a random node of the first ones, probe every
//!    partition through another, and wait until the others' placement is settled without it: both
//!    within `--bound` seconds, and the partitions it ran must have moved before `--lease-ms`
//!    passed (a hand-over, not a lease expiry). Then start it again (its clients come back).
//! 3. The common end ([`verdict::finish`]): every partition through every node, the drain, nothing
//!    lost, duplicated or unknown.

use std::{
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Result};

use super::nodes::Placement;
use super::{progress, verdict, Options, Outcome, Rig, PARTITIONS, QUEUE, READY_TIMEOUT};
use crate::rig::SplitMix64;

/// How long the cluster may take to settle after a join or a leave.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

pub(super) fn run(rig: &mut Rig, options: &Options, seed: u64) -> Result<Outcome> {
    let mut rng = SplitMix64(seed);
    let mut failures = Vec::new();
    let first = rig.nodes.len();
    pause(rig, options.interval / 2)?;

    // A node joins.
    let joined = rig.nodes.add()?;
    let name = rig.nodes.name(joined).to_owned();
    let started = Instant::now();
    rig.nodes.start(joined)?;
    let healthy = rig.nodes.wait_ready(joined, READY_TIMEOUT.min(rig.remaining()))?;
    let placement = settle(rig, |placement| !placement.of(&name).is_empty())?;
    let fair = f64::from(PARTITIONS) / rig.nodes.len() as f64;
    match placement {
        Some(placement) => progress(&format!(
            "{name} joined: healthy after {:.1} s, runs partitions {:?} ({} of {PARTITIONS}, a \
             fair share is {fair:.1}) {:.1} s after its start, as every node sees it",
            healthy.as_secs_f64(),
            placement.of(&name),
            placement.of(&name).len(),
            started.elapsed().as_secs_f64()
        )),
        None => failures.push(format!(
            "{name} joined but the nodes did not agree on a placement giving it partitions within \
             {SETTLE_TIMEOUT:?}"
        )),
    }
    let probe = rig.probe(joined)?;
    if probe.seconds.is_none() {
        failures.push(format!(
            "partitions {:?} accept no send through the joined {name}",
            probe.unavailable()
        ));
    }
    pause(rig, options.interval / 2)?;

    // A node leaves on SIGTERM, and comes back.
    let leaving = (rng.next() % first as u64) as usize;
    let through = (leaving + 1) % rig.nodes.len();
    let name = rig.nodes.name(leaving).to_owned();
    let ran = rig.nodes.placement(through, QUEUE).map(|p| p.of(&name)).unwrap_or_default();
    let stopped_at = Instant::now();
    rig.driver.start_probe(rig.nodes.amqp(through))?;
    let exited = rig.nodes.terminate(leaving)?;
    let handed = settle(rig, |placement| placement.of(&name).is_empty())?;
    let handed_over = stopped_at.elapsed();
    let probe = rig.driver.finish_probe(rig.remaining())?;
    let available = probe.seconds.map(Duration::from_secs_f64);
    progress(&format!(
        "{name} left on SIGTERM (it ran partitions {ran:?}): exited after {:.1} s; the others run \
         all its partitions after {:.2} s; every partition accepts sends through {} after {}",
        exited.as_secs_f64(),
        handed_over.as_secs_f64(),
        rig.nodes.name(through),
        available.map_or("never".to_owned(), |secs| format!("{:.2} s", secs.as_secs_f64()))
    ));
    let lease = Duration::from_millis(options.lease_ms);
    if handed.is_none() {
        failures.push(format!("after {name} left, the placement did not settle"));
    } else if handed_over >= lease {
        failures.push(format!(
            "{name}'s partitions moved only after {:.2} s, no sooner than a lease ({lease:?}): \
             no hand-over on SIGTERM",
            handed_over.as_secs_f64()
        ));
    }
    match available {
        Some(available) if available <= options.bound => {}
        _ => failures.push(format!(
            "after {name} left, some partition took over {:.1} s to accept sends",
            options.bound.as_secs_f64()
        )),
    }
    rig.nodes.start(leaving)?;
    rig.nodes.wait_ready(leaving, READY_TIMEOUT.min(rig.remaining()))?;
    pause(rig, options.interval / 2)?;

    let (verdict, more) = verdict::finish(rig)?;
    failures.extend(more);
    verdict::print_ledger(&verdict);
    Ok(Outcome { failures })
}

/// Polls every running node's placement until they all agree, it is settled and `wanted`
/// holds; `None` after [`SETTLE_TIMEOUT`].
fn settle(rig: &mut Rig, wanted: impl Fn(&Placement) -> bool) -> Result<Option<Placement>> {
    let started = Instant::now();
    while started.elapsed() < SETTLE_TIMEOUT {
        rig.check_running()?;
        if let Some(placement) = rig.nodes.agreed().and_then(|mut all| all.remove(QUEUE)) {
            if placement.settled() && wanted(&placement) {
                return Ok(Some(placement));
            }
        }
        thread::sleep(Duration::from_millis(100));
    }
    Ok(None)
}

fn pause(rig: &mut Rig, wait: Duration) -> Result<()> {
    if wait > rig.remaining() {
        bail!("timed out: raise --timeout");
    }
    thread::sleep(wait);
    rig.check_running()
}
