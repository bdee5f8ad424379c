//! [`Tally`]: per-message counters of one cycle, added to the metrics once its write succeeded.
//!
//! The counters a queue's (or topic's) tallies go to are registered once and kept: a
//! `counter!` with a label builds its key and looks it up in the recorder on every call, which
//! several calls per cycle made a visible part of a message's cost.

use std::sync::Arc;

use metrics::Counter;

use crate::message::Disposition;
use crate::metrics as m;

/// Messages in, out and settled in one cycle: recorded once per cycle, not per message, and
/// only if the cycle's write succeeded (a failed write's commands are answered with errors and
/// sent again: counting them would count them twice).
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) incoming: u64,
    pub(crate) outgoing: u64,
    /// By [`Disposition::outcome`], in the order of [`SETTLEMENT_OUTCOMES`].
    pub(crate) settlements: [u64; SETTLEMENT_OUTCOMES.len()],
    /// A subscription's lane: published messages it did not take.
    pub(crate) filtered_out: u64,
    /// A subscription's lane: copies dead-lettered because a rule failed to evaluate.
    pub(crate) dead_lettered_filter: u64,
    /// A topic's lane: messages sent to the topic and published to its subscriptions at once
    /// (its scheduled ones count in `incoming`). They go into the lane's [`Totals`] only: in
    /// the metrics, each subscription counts the copy it took.
    pub(crate) published: u64,
    /// Set when the cycle ends ([`Tally::record`]): the labels its counts go under once its
    /// write succeeded ([`Tally::written`]).
    labels: Option<Labels>,
    /// The counters of the entity kind last recorded, kept from cycle to cycle.
    meters: Option<Meters>,
}

/// The counters of one entity kind, registered once.
struct Meters {
    entity_kind: &'static str,
    incoming: Counter,
    outgoing: Counter,
    /// In the order of [`SETTLEMENT_OUTCOMES`].
    settlements: [Counter; SETTLEMENT_OUTCOMES.len()],
}

impl Meters {
    fn new(entity_kind: &'static str) -> Self {
        Meters {
            entity_kind,
            incoming: metrics::counter!(m::MESSAGES_INCOMING_TOTAL, "entity_kind" => entity_kind),
            outgoing: metrics::counter!(m::MESSAGES_OUTGOING_TOTAL, "entity_kind" => entity_kind),
            settlements: SETTLEMENT_OUTCOMES
                .map(|outcome| metrics::counter!(m::SETTLEMENTS_TOTAL, "outcome" => outcome)),
        }
    }
}

impl std::fmt::Debug for Meters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meters").field("entity_kind", &self.entity_kind).finish_non_exhaustive()
    }
}

/// Messages in and out of a lane since its state was built: [`Tally`]s added once written.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Totals {
    pub(crate) incoming: u64,
    pub(crate) outgoing: u64,
}

#[derive(Debug)]
struct Labels {
    entity_kind: &'static str,
    subscription: Option<Arc<str>>,
}

pub(crate) const SETTLEMENT_OUTCOMES: [&str; 5] =
    ["complete", "abandon", "release", "defer", "dead_letter"];

impl Tally {
    pub(crate) fn settled(&mut self, disposition: &Disposition) {
        let outcome = disposition.outcome();
        if let Some(i) = SETTLEMENT_OUTCOMES.iter().position(|o| *o == outcome) {
            self.settlements[i] += 1;
        }
    }

    /// Ends the cycle's counting: its counts are to be recorded under these labels, the kind
    /// of entity the lane belongs to (queue, topic, subscription) and, when subscriptions'
    /// own metrics are on, the subscription's path. Nothing reaches the metrics before
    /// [`Tally::written`].
    pub(crate) fn record(&mut self, entity_kind: &'static str, subscription: Option<&str>) {
        let counted = self.incoming
            + self.outgoing
            + self.settlements.iter().sum::<u64>()
            + self.filtered_out
            + self.dead_lettered_filter
            + self.published;
        if counted > 0 {
            self.labels = Some(Labels { entity_kind, subscription: subscription.map(Arc::from) });
        }
    }

    /// The cycle's write is done: if it succeeded, its counts go to the metrics under the
    /// labels [`Tally::record`] gave, and into the lane's `totals`; either way the tally starts
    /// again from zero.
    pub(crate) fn written(&mut self, succeeded: bool, totals: &mut Totals) {
        let meters = self.meters.take();
        let tally = std::mem::take(self);
        self.meters = meters;
        let Some(Labels { entity_kind, subscription }) = tally.labels else { return };
        if !succeeded {
            return;
        }
        totals.incoming += tally.incoming + tally.published;
        totals.outgoing += tally.outgoing;
        if let Some(entity) = subscription.as_deref() {
            let per = [
                (m::SUBSCRIPTION_MESSAGES_INCOMING_TOTAL, tally.incoming),
                (m::SUBSCRIPTION_MESSAGES_OUTGOING_TOTAL, tally.outgoing),
                (m::SUBSCRIPTION_MESSAGES_FILTERED_OUT_TOTAL, tally.filtered_out),
            ];
            for (name, count) in per {
                if count > 0 {
                    metrics::counter!(name, "entity" => entity.to_owned()).increment(count);
                }
            }
            if tally.dead_lettered_filter > 0 {
                metrics::counter!(
                    m::SUBSCRIPTION_DEAD_LETTERED_TOTAL,
                    "entity" => entity.to_owned(),
                    "reason" => "filter"
                )
                .increment(tally.dead_lettered_filter);
            }
        }
        let meters = match &mut self.meters {
            Some(meters) if meters.entity_kind == entity_kind => meters,
            slot => slot.insert(Meters::new(entity_kind)),
        };
        if tally.incoming > 0 {
            meters.incoming.increment(tally.incoming);
        }
        if tally.outgoing > 0 {
            meters.outgoing.increment(tally.outgoing);
        }
        for (counter, count) in meters.settlements.iter().zip(tally.settlements) {
            if count > 0 {
                counter.increment(count);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ApplicationProperties;

    #[test]
    fn every_settlement_outcome_has_a_tally_slot() {
        let properties = ApplicationProperties::default;
        let dispositions = [
            Disposition::Complete,
            Disposition::Abandon { properties: properties() },
            Disposition::Release,
            Disposition::Defer { properties: properties() },
            Disposition::DeadLetter { reason: None, description: None, properties: properties() },
        ];
        let mut tally = Tally::default();
        for d in &dispositions {
            tally.settled(d);
        }
        assert_eq!(tally.settlements, [1; SETTLEMENT_OUTCOMES.len()]);
    }
}
