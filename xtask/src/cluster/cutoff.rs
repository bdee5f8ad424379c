//! The `cutoff` scenario: a node loses PostgreSQL, not its clients nor the other nodes. It must
//! demote itself, the others must take its partitions, every partition must accept sends again,
//! and once healed it must rejoin; none of its writes after the fence moved may exist.
//!
//! Every node reaches PostgreSQL through a [`Proxy`](super::proxy::Proxy) of its own. `--kills`
//! times, after about `--interval` seconds (±25 %, seeded): pick a node that runs partitions
//! (the victim) and another (the witness); cut the victim's proxy (`--cut refuse`: its
//! connections end and new ones are closed at once; `--cut black-hole`: new ones hang) while the
//! driver keeps sending and receiving through every node, the victim included; probe every
//! partition through the witness; watch until the victim's log says `demoted` and the other
//! nodes agree on owners for every partition, none of them the victim (`/health`; a view of
//! another node's partition may show it unavailable for a while: the probe measures that); heal,
//! and watch until every node agrees on owners, the victim among them again.
//!
//! At the end ([`verdict::finish`]), and then in PostgreSQL ([`fences`]): every partition's
//! fence holds its last claim's token, and no message's meta record is left after the drain.
//!
//! The victim must demote before its lease lapses (`cluster/src/config.rs`: demote-after, 3/5
//! of the lease, is below the lease, so that a node stops serving before the others may take
//! its partitions); the others' take-over, the probe, within `--bound`.

use std::{
    fs, thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use super::nodes::{Nodes, Placement};
use super::{
    fences, median_and_max, paint, progress, shown, utc_now, verdict, Options, Outcome, Rig, QUEUE,
    RED,
};
use crate::rig::SplitMix64;

/// How long the watch after a cut or a heal may take.
const WATCH_TIMEOUT: Duration = Duration::from_secs(60);
/// What a demoting node logs (`cluster/src/member.rs`).
const DEMOTED: &str = "demoted";

/// One cut's measurements, each from the cut (rejoined: from the heal).
#[derive(Debug, Default)]
struct Measured {
    victim: usize,
    demoted: Option<Duration>,
    /// The victim's own `/health` showed it running nothing.
    idle: Option<Duration>,
    /// What the victim's `/health` said last while cut off.
    victim_view: String,
    /// Why the others' placements did not (yet) show a take-over, last seen.
    others_view: String,
    taken_over: Option<Duration>,
    available: Option<Duration>,
    rejoined: Option<Duration>,
}

pub(super) fn run(rig: &mut Rig, options: &Options, seed: u64) -> Result<Outcome> {
    if rig.nodes.len() < 2 {
        bail!("--scenario cutoff needs --nodes 2 or more");
    }
    let mut rng = SplitMix64(seed);
    let mut cuts = Vec::new();
    for number in 1..=options.kills.max(1) {
        let wait = jitter(options.interval, &mut rng);
        pause(rig, wait)?;
        cuts.push(cut_once(rig, options, number, &mut rng)?);
    }
    pause(rig, options.interval / 2)?;
    let (verdict, mut failures) = verdict::finish(rig)?;
    failures.extend(judge(&cuts, options, &rig.nodes));
    failures.extend(fences::check(rig.store.writable())?);
    report(&cuts, options, &rig.nodes);
    verdict::print_ledger(&verdict);
    Ok(Outcome { failures })
}

fn cut_once(
    rig: &mut Rig,
    options: &Options,
    number: u32,
    rng: &mut SplitMix64,
) -> Result<Measured> {
    let nodes = rig.nodes.len();
    let start = (rng.next() % nodes as u64) as usize;
    let witness_view = rig.nodes.placement((start + 1) % nodes, QUEUE);
    // The first node from `start` on that runs partitions.
    let victim = (0..nodes)
        .map(|step| (start + step) % nodes)
        .find(|&i| witness_view.as_ref().is_some_and(|p| !p.of(rig.nodes.name(i)).is_empty()))
        .unwrap_or(start);
    let witness = (victim + 1 + (rng.next() % (nodes as u64 - 1)) as usize) % nodes;
    let name = rig.nodes.name(victim).to_owned();
    let ran = rig.nodes.placement(witness, QUEUE).map(|p| p.of(&name)).unwrap_or_default();
    let log = rig.nodes.log(victim);
    let log_offset = fs::metadata(&log).map(|meta| meta.len()).unwrap_or(0);

    let cut_at = Instant::now();
    let cut_utc = utc_now();
    rig.store.proxies[victim].cut(options.cut);
    rig.driver.start_probe(rig.nodes.amqp(witness))?;
    let asked_after = cut_at.elapsed();
    let mut measured = Measured { victim, ..Measured::default() };
    while cut_at.elapsed() < WATCH_TIMEOUT {
        rig.check_running()?;
        if measured.demoted.is_none() && log_since(&log, log_offset).contains(DEMOTED) {
            measured.demoted = Some(cut_at.elapsed());
        }
        if measured.idle.is_none() {
            let view = rig.nodes.placement(victim, QUEUE);
            measured.victim_view = match &view {
                None => "did not answer".to_owned(),
                Some(p) => format!("showed it running {:?}", p.of(&name)),
            };
            if view.is_some_and(|p| p.of(&name).is_empty()) {
                measured.idle = Some(cut_at.elapsed());
            }
        }
        if measured.taken_over.is_none() {
            match agreed(&rig.nodes, Some(victim)) {
                Ok(p) if owned(&p) && p.of(&name).is_empty() => {
                    measured.taken_over = Some(cut_at.elapsed());
                }
                Ok(p) => measured.others_view = format!("they agree on {p:?}"),
                Err(why) => measured.others_view = why,
            }
        }
        if measured.demoted.is_some() && measured.taken_over.is_some() {
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    let probe = rig.driver.finish_probe(rig.remaining())?;
    measured.available = probe.seconds.map(|secs| asked_after + Duration::from_secs_f64(secs));
    let taken = agreed(&rig.nodes, Some(victim)).ok().map(|p| {
        let others: Vec<String> = rig
            .nodes
            .running()
            .into_iter()
            .filter(|&i| i != victim)
            .map(|i| format!("{} {:?}", rig.nodes.name(i), p.of(rig.nodes.name(i))))
            .collect();
        others.join(", ")
    });
    // Some load while cut off, then heal.
    pause(rig, Duration::from_millis(options.lease_ms))?;
    let healed_at = Instant::now();
    rig.store.proxies[victim].heal();
    while healed_at.elapsed() < WATCH_TIMEOUT {
        rig.check_running()?;
        let back = agreed(&rig.nodes, None).is_ok_and(|p| owned(&p) && !p.of(&name).is_empty());
        if back {
            measured.rejoined = Some(healed_at.elapsed());
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    let (sent, received, failed_sends) = rig.driver.stats()?;
    let secs =
        |d: Option<Duration>| d.map_or("never".to_owned(), |d| format!("{:.2} s", d.as_secs_f64()));
    let line = format!(
        "cut {number}/{}: {name} (ran partitions {ran:?}) cut off from PostgreSQL ({}) at {cut_utc} \
         UTC; its log says demoted after {}, its /health shows it running nothing after {} (last: \
         {}); the others run all its partitions after {} ({}{}); every partition accepts sends through {} \
         after {}; healed after {:.1} s, it runs partitions again {} after the heal; ledger so \
         far: {sent} sent, {received} received, {failed_sends} failed sends retried",
        options.kills.max(1),
        options.cut.name(),
        secs(measured.demoted),
        secs(measured.idle),
        measured.victim_view,
        secs(measured.taken_over),
        taken.unwrap_or_default(),
        if measured.others_view.is_empty() {
            String::new()
        } else {
            format!("; before that: {}", measured.others_view)
        },
        rig.nodes.name(witness),
        secs(measured.available),
        healed_at.duration_since(cut_at).as_secs_f64(),
        secs(measured.rejoined),
    );
    let complete = measured.demoted.is_some()
        && measured.taken_over.is_some()
        && measured.available.is_some()
        && measured.rejoined.is_some();
    progress(&if complete { line } else { paint(&line, RED) });
    Ok(measured)
}

/// The cuts' failures: a node that did not demote, partitions not taken over, not available
/// within `--bound`, a node that did not rejoin.
fn judge(cuts: &[Measured], options: &Options, nodes: &Nodes) -> Vec<String> {
    let mut failures = Vec::new();
    let bound = options.bound;
    for (number, cut) in cuts.iter().enumerate() {
        let name = nodes.name(cut.victim);
        let number = number + 1;
        let late = |what: Option<Duration>| what.is_none_or(|d| d > bound);
        let lease = Duration::from_millis(options.lease_ms);
        if cut.demoted.is_none_or(|d| d > lease) {
            failures.push(format!(
                "cut {number} ({name}): it did not log `{DEMOTED}` within its lease of {:.1} s, \
                 so it still counted itself an owner when the others could take its partitions \
                 (measured: {})",
                lease.as_secs_f64(),
                cut.demoted.map_or("never".to_owned(), |d| format!("{:.2} s", d.as_secs_f64()))
            ));
        }
        if late(cut.taken_over) {
            failures.push(format!(
                "cut {number} ({name}): the other nodes did not agree on running all its \
                 partitions within {:.1} s (measured: {:?})",
                bound.as_secs_f64(),
                cut.taken_over
            ));
        }
        if late(cut.available) {
            failures.push(format!(
                "cut {number} ({name}): some partition did not accept sends within {:.1} s \
                 (measured: {:?})",
                bound.as_secs_f64(),
                cut.available
            ));
        }
        if cut.rejoined.is_none() {
            failures.push(format!(
                "cut {number} ({name}): after the heal it ran no partition again within \
                 {WATCH_TIMEOUT:?}"
            ));
        }
    }
    failures
}

#[allow(clippy::print_stdout, reason = "the measurements are this task's output")]
fn report(cuts: &[Measured], options: &Options, nodes: &Nodes) {
    let times = |pick: fn(&Measured) -> Option<Duration>| {
        shown(median_and_max(&cuts.iter().filter_map(pick).collect::<Vec<_>>()))
    };
    println!(
        "{} nodes, {} cuts ({}), lease {} ms: demoted (its log) {}; others run its partitions {}; \
         every partition accepting sends again {} (bound {:.1} s); rejoined after the heal {}",
        nodes.len(),
        cuts.len(),
        options.cut.name(),
        options.lease_ms,
        times(|c| c.demoted),
        times(|c| c.taken_over),
        times(|c| c.available),
        options.bound.as_secs_f64(),
        times(|c| c.rejoined),
    );
}

/// Whether every partition has an owner (available or not: a node's view of another's
/// partition's availability may lag; the probe measures availability).
fn owned(placement: &Placement) -> bool {
    !placement.0.is_empty() && placement.0.iter().all(|(owner, _)| owner.is_some())
}

/// The owners of every partition.
fn owners(placement: &Placement) -> Vec<Option<String>> {
    placement.0.iter().map(|(owner, _)| owner.clone()).collect()
}

/// The placement every running node but `except` reports, if they all report the same owners;
/// else which node did not answer or differed.
fn agreed(nodes: &Nodes, except: Option<usize>) -> Result<Placement, String> {
    let running = nodes.running().into_iter().filter(|&i| Some(i) != except);
    let mut first: Option<Placement> = None;
    for index in running {
        let name = nodes.name(index);
        let Some(view) = nodes.placement(index, QUEUE) else {
            return Err(format!("{name}'s /health did not answer"));
        };
        match &first {
            None => first = Some(view),
            Some(first) if owners(first) == owners(&view) => {}
            Some(first) => {
                return Err(format!(
                    "{name} sees owners {:?}, not {:?}",
                    owners(&view),
                    owners(first)
                ))
            }
        }
    }
    first.ok_or_else(|| "no node runs".to_owned())
}

/// What `log` gained since byte `offset`.
fn log_since(log: &std::path::Path, offset: u64) -> String {
    let text = fs::read(log).unwrap_or_default();
    let start = usize::try_from(offset).unwrap_or(usize::MAX).min(text.len());
    String::from_utf8_lossy(&text[start..]).into_owned()
}

/// `mean` ± 25 %.
fn jitter(mean: Duration, rng: &mut SplitMix64) -> Duration {
    let ms = mean.as_millis().min(u128::from(u64::MAX)) as u64;
    Duration::from_millis(rng.between(ms - ms / 4, ms + ms / 4))
}

fn pause(rig: &mut Rig, wait: Duration) -> Result<()> {
    if wait > rig.remaining() {
        bail!("timed out: raise --timeout");
    }
    thread::sleep(wait);
    rig.check_running().context("after a pause")
}
