//! [`Tally`]: per-message counters of one cycle, added to the metrics once at its end.

use crate::message::Disposition;
use crate::metrics as m;

/// Messages in, out and settled in one cycle: recorded once per cycle, not per message.
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

    /// Adds the cycle's counts to the metrics, labelled with the kind of entity the lane
    /// belongs to (queue, topic, subscription), and starts again from zero.
    pub(crate) fn record(&mut self, entity_kind: &'static str, subscription: Option<&str>) {
        let tally = std::mem::take(self);
        if let Some(entity) = subscription {
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
        if tally.incoming > 0 {
            metrics::counter!(m::MESSAGES_INCOMING_TOTAL, "entity_kind" => entity_kind)
                .increment(tally.incoming);
        }
        if tally.outgoing > 0 {
            metrics::counter!(m::MESSAGES_OUTGOING_TOTAL, "entity_kind" => entity_kind)
                .increment(tally.outgoing);
        }
        for (outcome, count) in SETTLEMENT_OUTCOMES.iter().zip(tally.settlements) {
            if count > 0 {
                metrics::counter!(m::SETTLEMENTS_TOTAL, "outcome" => *outcome).increment(count);
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
