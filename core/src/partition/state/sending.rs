//! Sending: how a new message (or a topic's copy of one) enters a partition — the
//! duplicate-detection window, the next sequence number, its body and meta record, and the
//! index entry it starts with; and cancelling scheduled messages.
//!
//! Invariants kept here: a message's body and meta record join the journal in the call that
//! stores it, so they are written in the cycle's one write; a message that a forwarding entity
//! would make active (or, with ForwardDeadLetteredMessagesTo, a dead letter) goes straight to
//! the transfer queue in that same write; a message's time to live never exceeds the entity's
//! default; in a session-enabled entity every main-queue message belongs to its session, and
//! a topic's copy without a SessionId is dead-lettered (a send to a queue without one never
//! gets here: the broker refuses it).

use std::sync::Arc;

use super::PartitionState;
use crate::dedup::DedupKey;
use crate::error::Result;
use crate::message::{Message, MessageState};
use crate::metrics as m;
use crate::partition::index::{Aux, Entry};
use crate::partition::sessions::SessionId;
use crate::partition::SendOutcome;
use crate::types::{SequenceNumber, SubQueue, Timestamp};

/// The dead-letter reason and description of a topic message without a SessionId in a
/// session-enabled subscription.
const SESSION_ID_NULL: (&str, &str) = (
    "Session id is null.",
    "Session enabled entity doesn't allow a message whose session identifier is null.",
);

impl PartitionState {
    pub(super) fn enqueue(
        &mut self,
        messages: Vec<Arc<Message>>,
        now: Timestamp,
    ) -> Result<Vec<SendOutcome>> {
        let mut outcomes = Vec::with_capacity(messages.len());
        for message in messages {
            if self.admit(&message, now) {
                outcomes.push(SendOutcome::Enqueued(self.store_new(message, now)));
            } else {
                outcomes.push(SendOutcome::Duplicate);
            }
        }
        // Messages already past their expiry (a TTL shorter than the clock's step) go now.
        self.process_due(now);
        Ok(outcomes)
    }

    /// Whether a duplicate-detection window lets the message in, recording it if so.
    pub(crate) fn admit(&mut self, message: &Message, now: Timestamp) -> bool {
        if self.is_duplicate(message, now) {
            metrics::counter!(m::DUPLICATES_DROPPED_TOTAL).increment(1);
            return false;
        }
        if self.description.requires_duplicate_detection {
            if let Some(key) = DedupKey::of(&message.properties, self.partitioned) {
                let window = self.description.duplicate_detection_history_time_window;
                let until = self.dedup.insert(key.clone(), now, window);
                self.fx.journal.put_dedup(&key, until);
            }
        }
        true
    }

    /// Whether the message is a duplicate within the window (nothing is recorded).
    pub(crate) fn is_duplicate(&self, message: &Message, now: Timestamp) -> bool {
        self.description.requires_duplicate_detection
            && DedupKey::of(&message.properties, self.partitioned)
                .is_some_and(|key| self.dedup.contains(&key, now))
    }

    /// The next sequence number of this partition.
    pub(crate) fn next_seq(&mut self) -> SequenceNumber {
        self.last_counter += 1;
        self.counter_dirty = true;
        SequenceNumber::new(self.partitioned, self.partition, self.last_counter)
    }

    /// Stores a new message (body and meta) under the next sequence number.
    pub(crate) fn store_new(&mut self, message: Arc<Message>, now: Timestamp) -> SequenceNumber {
        let seq = self.next_seq();
        self.store_at(seq, message, now);
        seq
    }

    /// Stores a new message (body and meta) under `seq`, a number this partition gave out.
    pub(crate) fn store_at(&mut self, seq: SequenceNumber, message: Arc<Message>, now: Timestamp) {
        let scheduled = message.properties.scheduled_enqueue_time.filter(|at| *at > now);
        self.fx.journal.put_body(seq, &message);
        let enqueued_time = scheduled.unwrap_or(now);
        self.insert_copy(SubQueue::Main, seq, message, enqueued_time, scheduled.is_some(), None);
    }

    /// Adds a message whose body is (or is being) stored under `seq` to a sub-queue: its entry
    /// and meta record, scheduled for `enqueued_time` or active from then; `aux` carries what
    /// the broker laid over it from the start (a dead-letter reason, a rule action's changes
    /// and the body they share). The TTL is the message's, capped by the entity's default.
    pub(crate) fn insert_copy(
        &mut self,
        queue: SubQueue,
        seq: SequenceNumber,
        message: Arc<Message>,
        enqueued_time: Timestamp,
        scheduled: bool,
        aux: Option<Aux>,
    ) {
        let (mut queue, mut aux) = (queue, aux);
        if queue == SubQueue::Main && self.index.sessions.is_some() {
            let properties = aux.as_ref().and_then(|a| a.system_properties.as_deref());
            match &properties.unwrap_or(&message.properties).session_id {
                Some(id) => {
                    aux.get_or_insert_with(Aux::default).session = Some(SessionId::from(&**id))
                }
                None => {
                    // Only a topic's copy gets here: a send to a session queue without a
                    // SessionId is refused by the broker.
                    metrics::counter!(m::DEAD_LETTERED_TOTAL, "reason" => "session").increment(1);
                    let (reason, description) = SESSION_ID_NULL;
                    let dead = Aux::dead_lettered(reason.to_owned(), description.to_owned());
                    aux = Some(match aux {
                        Some(mut a) => {
                            a.modified_properties.extend(dead.modified_properties);
                            a.dead_letter_reason = dead.dead_letter_reason;
                            a.dead_letter_error_description = dead.dead_letter_error_description;
                            a
                        }
                        None => dead,
                    });
                    queue = SubQueue::DeadLetter;
                }
            }
        }
        // A forwarding entity's active messages (and dead letters, with
        // ForwardDeadLetteredMessagesTo) go to its transfer queue in this same write.
        if (queue == SubQueue::Main && !scheduled && self.forwards())
            || (queue == SubQueue::DeadLetter && self.forwards_dead_letters())
        {
            queue = SubQueue::Transfer;
        }
        let default_ttl = self.description.default_message_time_to_live;
        let ttl = message.properties.time_to_live.map_or(default_ttl, |t| t.min(default_ttl));
        let size = u32::try_from(message.size()).unwrap_or(u32::MAX);
        let counted = self.cache.try_take(u64::from(size));
        let entry = Entry {
            enqueued_time,
            expires_at: enqueued_time.saturating_add(ttl),
            delivery_count: 0,
            size,
            state: if scheduled { MessageState::Scheduled } else { MessageState::Active },
            counted,
            body: Some(message),
            aux: aux.map(Box::new),
        };
        if counted {
            self.cached_bytes += u64::from(size);
        } else {
            self.fx.transient.push((queue, seq));
        }
        self.fx.journal.put_meta(queue, seq, &entry.meta(seq));
        self.index.insert(queue, seq, entry);
        self.fx.tally.incoming += 1;
    }

    pub(crate) fn cancel(&mut self, sequence_numbers: &[SequenceNumber]) {
        for &seq in sequence_numbers {
            let Some(entry) = self.index.entry(SubQueue::Main, seq) else { continue };
            if entry.state == MessageState::Scheduled {
                self.remove(SubQueue::Main, seq);
            }
        }
    }
}
