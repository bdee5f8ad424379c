//! The `store-failover` scenario: PostgreSQL's primary dies under load and its synchronous
//! standby is promoted. Nothing acknowledged may be lost, clients may see only retriable errors,
//! and every partition must accept sends again soon after the promotion.
//!
//! The rig started the primary with a synchronous standby (`FIRST 1 (standby1)`) and gave every
//! node both hosts (`host=127.0.0.1,127.0.0.1 port=P1,P2 … target_session_attrs=read-write`).
//! After about `--interval` seconds of load: SIGKILL the primary's postmaster; at once probe
//! every partition through a node (seeded); after `--restart-after` seconds (default 2) promote
//! the standby (`SELECT pg_promote()`, which waits for the promotion); the probe's answer is the
//! kill-to-available time. After another `--interval / 2` seconds the common end
//! ([`verdict::finish`]), the fences and leftover messages in the promoted database
//! ([`fences`]), and the exceptions the SDK raised (the driver's `errors`), each judged retriable
//! or not.

use std::{
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::{fences, paint, progress, utc_now, verdict, Options, Outcome, Rig, RED, RESTART_AFTER};
use crate::rig::SplitMix64;

pub(super) fn run(rig: &mut Rig, options: &Options, seed: u64) -> Result<Outcome> {
    let mut rng = SplitMix64(seed);
    let mut failures = Vec::new();
    pause(rig, options.interval)?;
    let via = (rng.next() % rig.nodes.len() as u64) as usize;
    let promote_after = options.restart_after.unwrap_or(RESTART_AFTER);

    let killed_at = Instant::now();
    let killed_utc = utc_now();
    rig.store.primary.kill()?;
    rig.store.primary_killed = true;
    rig.driver.start_probe(rig.nodes.amqp(via))?;
    let asked_after = killed_at.elapsed();
    thread::sleep(promote_after.saturating_sub(killed_at.elapsed()));
    let standby = rig.store.standby.as_ref().context("store-failover without a standby")?;
    let promoting = killed_at.elapsed();
    let promoted = standby.psql("SELECT pg_promote()").context("promoting the standby")?;
    let promoted_after = killed_at.elapsed();
    if promoted != "t" {
        bail!("SELECT pg_promote() answered {promoted:?}");
    }
    let probe = rig.driver.finish_probe(rig.remaining())?;
    let available = probe.seconds.map(|secs| asked_after + Duration::from_secs_f64(secs));
    let (sent, received, failed_sends) = rig.driver.stats()?;
    let secs =
        |d: Option<Duration>| d.map_or("never".to_owned(), |d| format!("{:.2} s", d.as_secs_f64()));
    let line = format!(
        "SIGKILL the PostgreSQL primary at {killed_utc} UTC; standby promoted from {:.2} s to \
         {:.2} s after the kill; every partition accepts sends through {} {} after the kill ({} \
         after the promotion); ledger so far: {sent} sent, {received} received, {failed_sends} \
         failed sends retried",
        promoting.as_secs_f64(),
        promoted_after.as_secs_f64(),
        rig.nodes.name(via),
        secs(available),
        secs(available.map(|a| a.saturating_sub(promoted_after))),
    );
    progress(&if available.is_some() { line } else { paint(&line, RED) });
    match available {
        Some(available) if available <= options.bound + promoted_after => {}
        _ => failures.push(format!(
            "some partition did not accept sends within {:.1} s of the promotion (measured from \
             the kill: {})",
            options.bound.as_secs_f64(),
            secs(available)
        )),
    }
    pause(rig, options.interval / 2)?;

    let (verdict, more) = verdict::finish(rig)?;
    failures.extend(more);
    failures.extend(fences::check(rig.store.writable())?);
    failures.extend(errors(&verdict));
    report(available, promoted_after, options);
    verdict::print_ledger(&verdict);
    Ok(Outcome { failures })
}

/// The SDK exceptions the driver saw, printed; those not retriable are failures, but for a lost
/// lock on a completion (`MessageLockLostError`): the partition was rebuilt, the message comes
/// back, as Service Bus does when a partition moves.
#[allow(clippy::print_stdout, reason = "the list is this task's output")]
fn errors(verdict: &Value) -> Vec<String> {
    let listed = verdict["errors"].as_array().cloned().unwrap_or_default();
    let mut failures = Vec::new();
    println!("exceptions the SDK raised ({} kinds):", listed.len());
    for error in &listed {
        let (operation, name) = (error["operation"].as_str(), error["error"].as_str());
        let (operation, name) = (operation.unwrap_or("?"), name.unwrap_or("?"));
        let retriable = error["retriable"] == true;
        let count = error["count"].as_u64().unwrap_or(0);
        println!(
            "  {operation}: {name} × {count} ({})",
            if retriable { "retriable" } else { "not retriable" }
        );
        let lock_lost = operation == "complete" && name == "MessageLockLostError";
        if !retriable && !lock_lost {
            failures.push(format!("the SDK raised a non-retriable {name} on {operation} ×{count}"));
        }
    }
    failures
}

#[allow(clippy::print_stdout, reason = "the measurements are this task's output")]
fn report(available: Option<Duration>, promoted: Duration, options: &Options) {
    let shown = available.map_or("never".to_owned(), |a| format!("{:.2} s", a.as_secs_f64()));
    println!(
        "store failover (1 primary kill, lease {} ms): every partition accepting sends again {} \
         after the kill (median and max of 1), {:.2} s after the promotion finished (bound {:.1} s)",
        options.lease_ms,
        shown,
        available.map_or(f64::NAN, |a| a.saturating_sub(promoted).as_secs_f64()),
        options.bound.as_secs_f64()
    );
}

fn pause(rig: &mut Rig, wait: Duration) -> Result<()> {
    if wait > rig.remaining() {
        bail!("timed out: raise --timeout");
    }
    thread::sleep(wait);
    rig.check_running().context("after a pause")
}
