//! How every scenario ends: every partition must accept sends through every node; then the
//! driver stops, drains the queue and gives its ledger's verdict, whose lost, duplicated and
//! unknown messages fail the run (named with their partitions).

use anyhow::{Context, Result};
use serde_json::Value;

use super::{driver, progress, Rig};

/// Probes through every running node, stops the driver and judges its verdict: returns the
/// verdict and what failed.
pub(super) fn finish(rig: &mut Rig) -> Result<(Value, Vec<String>)> {
    rig.check_running().context("before the final probes")?;
    let mut failures = Vec::new();
    for index in rig.nodes.running() {
        let probe = rig.probe(index)?;
        if probe.seconds.is_none() {
            failures.push(format!(
                "at the end, partitions {:?} accept no send through {}",
                probe.unavailable(),
                rig.nodes.name(index)
            ));
        }
    }
    progress("telling the driver to stop; it finishes its sends and drains the queue");
    let verdict = rig.driver.stop(rig.remaining())?;
    rig.check_store_and_nodes().context("during the drain")?;
    failures.extend(ledger_failures(&verdict));
    Ok((verdict, failures))
}

/// The failures in the driver's verdict.
fn ledger_failures(verdict: &Value) -> Vec<String> {
    let count = |key: &str| verdict[key].as_u64().unwrap_or(0);
    let mut failures = Vec::new();
    for (key, what) in [
        ("lost", "acknowledged but never received"),
        ("duplicated", "completed twice"),
        ("unknown", "received but never sent"),
    ] {
        if count(key) > 0 {
            let ids = placed(&verdict[format!("{key}_ids")]);
            failures.push(format!("{} {key} ({what}): {ids}", count(key)));
        }
    }
    if verdict["producers_gave_up"] == true {
        failures.push("producers gave up on sends that were never acknowledged".to_owned());
    }
    if verdict["passed"] != true && failures.is_empty() {
        failures.push(format!("the driver's verdict did not pass: {verdict}"));
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

/// The ledger's line of the report, and the verdict itself.
#[allow(clippy::print_stdout, reason = "the verdict is the task's output")]
pub(super) fn print_ledger(verdict: &Value) {
    let count = |key: &str| verdict[key].as_u64().unwrap_or(0);
    println!(
        "ledger: {} sent, {} received, {} lost, {} duplicated, {} unknown, {} unconfirmed, {} \
         unsettled, {} redelivered, {} failed sends retried",
        count("sent"),
        count("received"),
        count("lost"),
        count("duplicated"),
        count("unknown"),
        count("unconfirmed"),
        count("unsettled"),
        count("redelivered"),
        count("failed_sends"),
    );
    if count("returned_after_completion") > 0 {
        println!(
            "delivered again after a completion the broker acknowledged (completed once, so not \
             duplicated): {}",
            placed(&verdict["returned_after_completion_ids"])
        );
    }
    if count("unsettled") > 0 {
        println!(
            "unsettled (a completion failed ambiguously, the message never came back: applied, \
             or lost): {}",
            placed(&verdict["unsettled_ids"])
        );
    }
    println!("{verdict}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_ids_are_shown_with_their_partitions() {
        let ids = serde_json::json!(["probe2-7", "p1-3"]);
        let p = driver::partition_of_message("p1-3");
        assert_eq!(placed(&ids), format!("probe2-7 (partition 7), p1-3 (partition {p})"));
    }

    #[test]
    fn a_clean_verdict_passes_and_a_lossy_one_names_what_it_lost() {
        let clean = serde_json::json!({"passed": true, "lost": 0, "duplicated": 0, "unknown": 0});
        assert!(ledger_failures(&clean).is_empty());
        let lossy = serde_json::json!({"passed": false, "lost": 1, "lost_ids": ["probe1-4"],
                                       "duplicated": 0, "unknown": 0});
        assert_eq!(
            ledger_failures(&lossy),
            ["1 lost (acknowledged but never received): probe1-4 (partition 4)"]
        );
        let odd = serde_json::json!({"passed": false});
        assert_eq!(ledger_failures(&odd).len(), 1);
    }
}
