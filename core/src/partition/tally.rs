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
    pub(crate) fn record(&mut self, entity_kind: &'static str) {
        let tally = std::mem::take(self);
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
