//! Dead-lettering: moving a message of the main queue (or, at the forwarder's or a
//! destination's verdict, of a transfer queue) to where its dead letter belongs, with its
//! reason and description.
//!
//! Invariants kept here: a dead letter goes to the dead-letter queue, or with
//! ForwardDeadLetteredMessagesTo to the transfer queue — except a transfer that already was a
//! dead letter (its destination is the broken one) and one that exceeded the hop limit, which
//! go to the dead-letter queue — and a send-via transfer its destination refused goes to the
//! transfer dead-letter queue; its body leaves the body cache; the metrics' `reason` label takes only the broker's own reasons, any reason a client
//! gave counts as `client` (a bounded set).

use super::PartitionState;
use crate::message::{dead_letter_reason, ApplicationProperties, MessageState, PropertyValue};
use crate::metrics as m;
use crate::types::{SequenceNumber, SubQueue};

impl PartitionState {
    pub(super) fn move_to_dead_letter(
        &mut self,
        seq: SequenceNumber,
        reason: &str,
        description: String,
        properties: ApplicationProperties,
    ) {
        self.move_to_dead_letter_from(SubQueue::Main, seq, reason, description, properties);
    }

    /// Dead-letters a message of the main queue or (the forwarder's verdict) of the transfer
    /// queue. With ForwardDeadLetteredMessagesTo the dead letter goes to the transfer queue to
    /// be forwarded, unless it is a transfer that was already a dead letter (its destination
    /// is the broken one: it stays here) or it exceeded the hop limit.
    pub(super) fn move_to_dead_letter_from(
        &mut self,
        from: SubQueue,
        seq: SequenceNumber,
        reason: &str,
        description: String,
        properties: ApplicationProperties,
    ) {
        let Some(mut entry) = self.take(from, seq) else { return };
        let was_dead_letter = entry.aux.as_ref().is_some_and(|a| a.dead_letter_reason.is_some());
        let to = if from == SubQueue::SendVia {
            // A send-via transfer its destination refused (Service Bus: the via entity's
            // transfer dead-letter queue).
            SubQueue::TransferDeadLetter
        } else if self.forwards_dead_letters()
            && !(from == SubQueue::Transfer && was_dead_letter)
            && reason != dead_letter_reason::MAX_TRANSFER_HOP_COUNT_EXCEEDED
        {
            SubQueue::Transfer
        } else {
            SubQueue::DeadLetter
        };
        let label = match reason {
            dead_letter_reason::MAX_DELIVERY_COUNT_EXCEEDED
            | dead_letter_reason::TTL_EXPIRED
            | dead_letter_reason::MAX_TRANSFER_HOP_COUNT_EXCEEDED
            | dead_letter_reason::FORWARD_DESTINATION_FULL
            | dead_letter_reason::FORWARD_DESTINATION_DISABLED
            | dead_letter_reason::FORWARD_DESTINATION_REFUSED => reason.to_owned(),
            _ => "client".to_owned(),
        };
        if let Some(entity) = &self.metric_entity {
            let entity = entity.to_string();
            metrics::counter!(m::SUBSCRIPTION_DEAD_LETTERED_TOTAL, "entity" => entity, "reason" => label.clone())
                .increment(1);
        }
        metrics::counter!(m::DEAD_LETTERED_TOTAL, "reason" => label).increment(1);
        let mut props = properties;
        props.insert("DeadLetterReason".into(), PropertyValue::String(reason.to_owned()));
        props.insert(
            "DeadLetterErrorDescription".into(),
            PropertyValue::String(description.clone()),
        );
        // A dead-lettered message counts its added properties too, and leaves the body cache
        // (it is rarely read soon).
        let added =
            props.iter().map(|(k, v)| k.len() + crate::message::value_size(v)).sum::<usize>();
        self.uncache(&mut entry);
        entry.body = None;
        entry.size = entry.size.saturating_add(u32::try_from(added).unwrap_or(u32::MAX));
        entry.merge_properties(props);
        let aux = entry.aux_mut();
        aux.dead_letter_reason = Some(reason.to_owned());
        aux.dead_letter_error_description = Some(description);
        entry.state = MessageState::Active;
        self.fx.journal.put_meta(to, seq, &entry.meta(seq));
        self.index.insert(to, seq, entry);
    }
}
