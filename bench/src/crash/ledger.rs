//! The crash test's bookkeeping: what producers attempted and got acknowledged, what consumers
//! were delivered and got confirmed as completed, and the verdict at the end.
//!
//! Pure and synchronous: the async producers and consumers report events, the ledger decides.
//!
//! Definitions (per MessageId):
//! - **acknowledged**: the broker answered a send of it with `Accepted` (a retry that duplicate
//!   detection dropped counts: the broker accepts it).
//! - **completed**: a completion of one of its deliveries was confirmed by the broker.
//! - **lost**: acknowledged, never completed, and its latest delivery (if any) did not end with a
//!   completion request whose answer was cut off. A message the broker never delivered, or
//!   delivered and then dropped without a completion, is lost.
//! - **in doubt**: acknowledged, never confirmed completed, its latest delivery's completion was
//!   sent but the connection died before the answer (the broker may well have committed it: a
//!   crash between commit and reply). Not a failure; reported.
//! - **duplicated**: completed more than once, or delivered again after a completion was
//!   confirmed. A redelivery of a message whose completion was never confirmed is not a duplicate.
//! - **unknown**: delivered, but no producer ever attempted that MessageId.
//!
//! Invariant: every delivery, acknowledgement and completion passes through [`Ledger`]; the
//! summary is a function of the events only.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;

/// How many example ids a summary lists per problem.
const EXAMPLES: usize = 10;

/// Where the latest delivery of a message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Latest {
    /// Never delivered.
    #[default]
    Undelivered,
    /// Delivered; no completion requested yet.
    Delivered,
    /// Completion requested; the answer has not arrived (and may never).
    Requested,
    /// The broker refused the completion (the lock was lost, …): the message must come back.
    Refused,
    /// The broker confirmed the completion.
    Confirmed,
}

#[derive(Debug, Default)]
struct Record {
    acknowledged: bool,
    deliveries: u32,
    confirmed: u32,
    /// Deliveries that arrived after a completion had been confirmed.
    after_completion: u32,
    latest: Latest,
}

/// What a delivery turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// The first delivery of a message a producer attempted.
    First,
    /// Delivered again before any completion was confirmed (a crash or lock expiry): expected.
    Redelivery,
    /// Delivered again after its completion was confirmed: a duplicate.
    AfterCompletion,
    /// No producer attempted this MessageId.
    Unknown,
}

/// The events of one crash-test run.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    records: HashMap<String, Record>,
    /// Delivered MessageIds that no producer attempted (`<none>` for a message without one).
    unknown: BTreeSet<String>,
    unknown_deliveries: u64,
    /// The transaction scenario: each seed `<id>` must yield `<id>/a` and `<id>/b` once each.
    pairs: bool,
}

/// The verdict, printed as JSON by the driver.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Summary {
    /// Distinct MessageIds producers sent at least once.
    pub attempted: u64,
    /// Distinct MessageIds whose send the broker accepted.
    pub acknowledged: u64,
    /// Attempted but never acknowledged (only when producers could not finish).
    pub unacknowledged: u64,
    /// Deliveries received, redeliveries included.
    pub deliveries: u64,
    /// Distinct MessageIds with a confirmed completion.
    pub completed: u64,
    /// Acknowledged and neither completed nor in doubt.
    pub lost: u64,
    /// Acknowledged; the latest completion was sent but its answer was cut off by a crash.
    pub in_doubt: u64,
    /// Completed twice, or delivered after a confirmed completion.
    pub duplicated: u64,
    /// Distinct MessageIds received that were never sent.
    pub unknown: u64,
    /// Deliveries beyond each message's first (informational).
    pub redelivered: u64,
    /// Up to ten examples of each problem, for a report.
    pub lost_ids: Vec<String>,
    pub duplicated_ids: Vec<String>,
    pub unknown_ids: Vec<String>,
    pub in_doubt_ids: Vec<String>,
    /// The transaction scenario: acknowledged seeds whose transaction did not come out whole
    /// (its two derived messages not each consumed exactly once).
    pub unpaired: u64,
    pub unpaired_ids: Vec<String>,
}

impl Summary {
    /// Whether the broker kept its promises: nothing lost, duplicated or unknown.
    pub(crate) fn passed(&self) -> bool {
        self.lost == 0 && self.duplicated == 0 && self.unknown == 0 && self.unpaired == 0
    }
}

impl Ledger {
    /// A ledger for the transaction scenario (see [`Summary::unpaired`]).
    pub(crate) fn with_pairs() -> Ledger {
        Ledger { pairs: true, ..Ledger::default() }
    }

    /// A producer is about to send `id` (first time or retry).
    pub(crate) fn attempt(&mut self, id: &str) {
        if !self.records.contains_key(id) {
            self.records.insert(id.to_owned(), Record::default());
        }
    }

    /// The broker accepted a send of `id`. An id never attempted is recorded as attempted.
    pub(crate) fn acknowledge(&mut self, id: &str) {
        self.record(id).acknowledged = true;
    }

    /// A consumer received a delivery of `id` (`None`: the message had no MessageId).
    pub(crate) fn deliver(&mut self, id: Option<&str>) -> Delivery {
        let Some(record) = id.and_then(|id| self.records.get_mut(id)) else {
            self.unknown.insert(id.unwrap_or("<none>").to_owned());
            self.unknown_deliveries += 1;
            return Delivery::Unknown;
        };
        record.deliveries += 1;
        let verdict = if record.confirmed > 0 {
            record.after_completion += 1;
            Delivery::AfterCompletion
        } else if record.deliveries > 1 {
            Delivery::Redelivery
        } else {
            Delivery::First
        };
        // A delivery after a confirmed completion keeps the message counted as completed.
        if record.latest != Latest::Confirmed {
            record.latest = Latest::Delivered;
        }
        verdict
    }

    /// A consumer sent the completion of its latest delivery of `id`.
    pub(crate) fn completion_requested(&mut self, id: &str) {
        if let Some(record) = self.records.get_mut(id) {
            if record.latest != Latest::Confirmed {
                record.latest = Latest::Requested;
            }
        }
    }

    /// The broker confirmed a completion of `id`.
    pub(crate) fn completion_confirmed(&mut self, id: &str) {
        if let Some(record) = self.records.get_mut(id) {
            record.confirmed += 1;
            record.latest = Latest::Confirmed;
        }
    }

    /// The broker refused a completion of `id`: the message is still there and must come back.
    pub(crate) fn completion_refused(&mut self, id: &str) {
        if let Some(record) = self.records.get_mut(id) {
            if record.latest != Latest::Confirmed {
                record.latest = Latest::Refused;
            }
        }
    }

    /// Distinct MessageIds acknowledged so far.
    pub(crate) fn acknowledged(&self) -> u64 {
        self.records.values().filter(|r| r.acknowledged).count() as u64
    }

    /// Distinct MessageIds completed so far.
    pub(crate) fn completed(&self) -> u64 {
        self.records.values().filter(|r| r.confirmed > 0).count() as u64
    }

    /// The verdict over everything recorded (meaningful once the queue has been drained).
    pub(crate) fn summary(&self) -> Summary {
        let mut summary = Summary {
            attempted: self.records.len() as u64,
            unknown: self.unknown.len() as u64,
            deliveries: self.unknown_deliveries,
            unknown_ids: self.unknown.iter().take(EXAMPLES).cloned().collect(),
            ..Summary::default()
        };
        let mut lost = Vec::new();
        let mut duplicated = Vec::new();
        let mut in_doubt = Vec::new();
        for (id, record) in &self.records {
            summary.deliveries += u64::from(record.deliveries);
            summary.redelivered += u64::from(record.deliveries.saturating_sub(1));
            if record.acknowledged {
                summary.acknowledged += 1;
            } else {
                summary.unacknowledged += 1;
            }
            if record.confirmed > 0 {
                summary.completed += 1;
            }
            if record.confirmed > 1 || record.after_completion > 0 {
                duplicated.push(id.as_str());
            }
            if record.acknowledged && record.confirmed == 0 {
                match record.latest {
                    Latest::Requested => in_doubt.push(id.as_str()),
                    _ => lost.push(id.as_str()),
                }
            }
        }
        let mut unpaired = Vec::new();
        if self.pairs {
            // Consumed once: confirmed once, or delivered with its completion's answer cut off.
            let once = |id: String| {
                self.records.get(&id).is_some_and(|r| {
                    r.confirmed == 1
                        || (r.confirmed == 0 && r.deliveries > 0 && r.latest == Latest::Requested)
                })
            };
            for (id, record) in &self.records {
                if !id.contains('/')
                    && record.acknowledged
                    && !(once(format!("{id}/a")) && once(format!("{id}/b")))
                {
                    unpaired.push(id.as_str());
                }
            }
        }
        summary.unpaired = unpaired.len() as u64;
        summary.unpaired_ids = examples(unpaired);
        summary.lost = lost.len() as u64;
        summary.duplicated = duplicated.len() as u64;
        summary.in_doubt = in_doubt.len() as u64;
        summary.lost_ids = examples(lost);
        summary.duplicated_ids = examples(duplicated);
        summary.in_doubt_ids = examples(in_doubt);
        summary
    }

    fn record(&mut self, id: &str) -> &mut Record {
        self.records.entry(id.to_owned()).or_default()
    }
}

/// The first few ids in a stable order.
fn examples(mut ids: Vec<&str>) -> Vec<String> {
    ids.sort_unstable();
    ids.into_iter().take(EXAMPLES).map(str::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(ledger: &mut Ledger, id: &str) {
        ledger.attempt(id);
        ledger.acknowledge(id);
    }

    fn consumed(ledger: &mut Ledger, id: &str) -> Delivery {
        let delivery = ledger.deliver(Some(id));
        ledger.completion_requested(id);
        ledger.completion_confirmed(id);
        delivery
    }

    #[test]
    fn a_seed_passes_only_with_both_derived_messages_consumed_once() {
        let mut ledger = Ledger::with_pairs();
        sent(&mut ledger, "s1");
        consumed(&mut ledger, "s1");
        assert_eq!(ledger.summary().unpaired, 1, "no derived messages yet");
        for id in ["s1/a", "s1/b"] {
            sent(&mut ledger, id);
            consumed(&mut ledger, id);
        }
        assert!(ledger.summary().passed());
        // A half transaction: the seed's second pair member missing.
        sent(&mut ledger, "s2");
        consumed(&mut ledger, "s2");
        sent(&mut ledger, "s2/a");
        consumed(&mut ledger, "s2/a");
        let summary = ledger.summary();
        assert_eq!((summary.unpaired, summary.unpaired_ids.clone()), (1, vec!["s2".to_owned()]));
        assert!(!summary.passed());
    }

    #[test]
    fn sent_and_completed_once_passes() {
        let mut ledger = Ledger::default();
        sent(&mut ledger, "p0-0");
        assert_eq!(consumed(&mut ledger, "p0-0"), Delivery::First);
        let summary = ledger.summary();
        assert!(summary.passed(), "{summary:?}");
        assert_eq!((summary.acknowledged, summary.completed, summary.deliveries), (1, 1, 1));
    }

    #[test]
    fn acknowledged_but_never_delivered_is_lost() {
        let mut ledger = Ledger::default();
        sent(&mut ledger, "p0-0");
        sent(&mut ledger, "p0-1");
        consumed(&mut ledger, "p0-1");
        let summary = ledger.summary();
        assert_eq!(summary.lost, 1);
        assert_eq!(summary.lost_ids, ["p0-0"]);
        assert!(!summary.passed());
    }

    #[test]
    fn delivered_then_dropped_without_completion_is_lost() {
        // Delivered before a crash, never completed, never redelivered: the broker dropped it.
        let mut ledger = Ledger::default();
        sent(&mut ledger, "p0-0");
        ledger.deliver(Some("p0-0"));
        assert_eq!(ledger.summary().lost, 1);
    }

    #[test]
    fn refused_completion_not_redelivered_is_lost() {
        let mut ledger = Ledger::default();
        sent(&mut ledger, "p0-0");
        ledger.deliver(Some("p0-0"));
        ledger.completion_requested("p0-0");
        ledger.completion_refused("p0-0");
        assert_eq!(ledger.summary().lost, 1);
    }

    #[test]
    fn completion_cut_off_by_a_crash_is_in_doubt_not_lost() {
        let mut ledger = Ledger::default();
        sent(&mut ledger, "p0-0");
        ledger.deliver(Some("p0-0"));
        ledger.completion_requested("p0-0");
        let summary = ledger.summary();
        assert_eq!((summary.lost, summary.in_doubt), (0, 1));
        assert_eq!(summary.in_doubt_ids, ["p0-0"]);
        assert!(summary.passed());
    }

    #[test]
    fn in_doubt_then_redelivered_and_completed_is_fine() {
        let mut ledger = Ledger::default();
        sent(&mut ledger, "p0-0");
        ledger.deliver(Some("p0-0"));
        ledger.completion_requested("p0-0");
        assert_eq!(consumed(&mut ledger, "p0-0"), Delivery::Redelivery);
        let summary = ledger.summary();
        assert!(summary.passed(), "{summary:?}");
        assert_eq!((summary.in_doubt, summary.redelivered, summary.completed), (0, 1, 1));
    }

    #[test]
    fn redelivery_after_confirmed_completion_is_a_duplicate() {
        let mut ledger = Ledger::default();
        sent(&mut ledger, "p0-0");
        consumed(&mut ledger, "p0-0");
        assert_eq!(ledger.deliver(Some("p0-0")), Delivery::AfterCompletion);
        let summary = ledger.summary();
        assert_eq!(summary.duplicated, 1);
        assert_eq!(summary.duplicated_ids, ["p0-0"]);
        // Still completed, not lost.
        assert_eq!((summary.completed, summary.lost), (1, 0));
        assert!(!summary.passed());
    }

    #[test]
    fn two_confirmed_completions_are_a_duplicate() {
        let mut ledger = Ledger::default();
        sent(&mut ledger, "p0-0");
        ledger.deliver(Some("p0-0"));
        ledger.completion_confirmed("p0-0");
        ledger.completion_confirmed("p0-0");
        assert_eq!(ledger.summary().duplicated, 1);
    }

    #[test]
    fn message_never_sent_is_unknown() {
        let mut ledger = Ledger::default();
        sent(&mut ledger, "p0-0");
        consumed(&mut ledger, "p0-0");
        assert_eq!(ledger.deliver(Some("stranger")), Delivery::Unknown);
        assert_eq!(ledger.deliver(None), Delivery::Unknown);
        let summary = ledger.summary();
        assert_eq!(summary.unknown, 2);
        assert_eq!(summary.unknown_ids, ["<none>", "stranger"]);
        assert!(!summary.passed());
    }

    #[test]
    fn retried_send_acknowledged_once_is_one_message() {
        // The first send was stored but its acknowledgement was lost in a crash; the retry with
        // the same MessageId is dropped by duplicate detection and acknowledged.
        let mut ledger = Ledger::default();
        ledger.attempt("p1-7");
        ledger.attempt("p1-7");
        ledger.acknowledge("p1-7");
        consumed(&mut ledger, "p1-7");
        let summary = ledger.summary();
        assert!(summary.passed(), "{summary:?}");
        assert_eq!((summary.attempted, summary.acknowledged, summary.completed), (1, 1, 1));
    }

    #[test]
    fn stored_before_its_acknowledgement_is_delivered_normally() {
        // Consumed before the retry's acknowledgement arrives: not unknown, not a duplicate.
        let mut ledger = Ledger::default();
        ledger.attempt("p0-3");
        assert_eq!(consumed(&mut ledger, "p0-3"), Delivery::First);
        ledger.attempt("p0-3");
        ledger.acknowledge("p0-3");
        assert!(ledger.summary().passed());
    }

    #[test]
    fn attempted_but_unacknowledged_is_neither_lost_nor_unknown() {
        let mut ledger = Ledger::default();
        ledger.attempt("p0-0");
        let summary = ledger.summary();
        assert_eq!((summary.unacknowledged, summary.lost, summary.unknown), (1, 0, 0));
    }

    #[test]
    fn counters_track_distinct_ids() {
        let mut ledger = Ledger::default();
        sent(&mut ledger, "a");
        sent(&mut ledger, "a");
        sent(&mut ledger, "b");
        consumed(&mut ledger, "a");
        assert_eq!((ledger.acknowledged(), ledger.completed()), (2, 1));
    }
}
