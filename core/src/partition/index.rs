//! [`Index`]: what a partition keeps in memory of its messages — an [`Entry`] per message and
//! sub-queue, and the sets that order them (available, scheduled, expiring).
//!
//! **Architecture Invariant:** memory holds an index, not the messages. An entry is small
//! (times, counts, state); the body stays only while the broker-wide body cache has room.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::sessions::{SessionId, SessionIndex};
use super::sub_queues::SubQueues;
use crate::codec::MessageMeta;
use crate::message::{
    ApplicationProperties, Message, MessageLock, MessageProperties, MessageState, PropertyValue,
};
use crate::types::{SequenceNumber, SubQueue, Timestamp};

/// Expiry times at or after this (year 10000) mean "never" for indexing: Service Bus's default
/// time to live (`TimeSpan.MaxValue`) ends far beyond it.
pub(crate) const NEVER_EXPIRES: Timestamp = Timestamp::from_millis(253_402_300_800_000);

/// A message in the partition's index. Kept small: a backlog of a million messages costs a
/// million of these, while bodies stay in the store (see `BodyCache`).
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) enqueued_time: Timestamp,
    pub(crate) expires_at: Timestamp,
    pub(crate) delivery_count: u32,
    pub(crate) size: u32,
    pub(crate) state: MessageState,
    /// Whether `body` is counted in the `BodyCache` (else it is held only until the end of the
    /// cycle that stored it).
    pub(crate) counted: bool,
    pub(crate) body: Option<Arc<Message>>,
    /// The lock and the rarely set parts of the meta record.
    pub(crate) aux: Option<Box<Aux>>,
}

#[derive(Debug, Default)]
pub(crate) struct Aux {
    pub(crate) lock: Option<MessageLock>,
    pub(crate) enqueued_sequence_number: Option<SequenceNumber>,
    pub(crate) dead_letter_source: Option<String>,
    pub(crate) dead_letter_reason: Option<String>,
    pub(crate) dead_letter_error_description: Option<String>,
    pub(crate) modified_properties: ApplicationProperties,
    /// A topic copy changed by a rule action: the body it shares (stored at the publish's
    /// number), and what the action removed and changed beyond `modified_properties`.
    pub(crate) body_seq: Option<SequenceNumber>,
    pub(crate) removed_properties: Vec<String>,
    pub(crate) system_properties: Option<Box<MessageProperties>>,
    /// The message's session, on a session-enabled entity.
    pub(crate) session: Option<SessionId>,
}

impl Aux {
    fn is_empty(&self) -> bool {
        self.lock.is_none()
            && self.enqueued_sequence_number.is_none()
            && self.dead_letter_source.is_none()
            && self.dead_letter_reason.is_none()
            && self.dead_letter_error_description.is_none()
            && self.modified_properties.is_empty()
            && self.body_seq.is_none()
            && self.removed_properties.is_empty()
            && self.system_properties.is_none()
            && self.session.is_none()
    }

    /// What a message put straight into a dead-letter queue carries: the reason and
    /// description, also as the application properties Service Bus adds.
    pub(crate) fn dead_lettered(reason: String, description: String) -> Aux {
        let mut aux = Aux::default();
        aux.modified_properties
            .insert("DeadLetterReason".into(), PropertyValue::String(reason.clone()));
        aux.modified_properties.insert(
            "DeadLetterErrorDescription".into(),
            PropertyValue::String(description.clone()),
        );
        aux.dead_letter_reason = Some(reason);
        aux.dead_letter_error_description = Some(description);
        aux
    }

    /// A copy of `original` that a rule action turned into `changed`, sharing the body
    /// stored at `body_seq`: only the differences are kept.
    pub(crate) fn changed_copy(
        original: &Message,
        changed: &Message,
        body_seq: SequenceNumber,
    ) -> Aux {
        let mut aux = Aux { body_seq: Some(body_seq), ..Aux::default() };
        for (name, value) in &changed.application_properties {
            if original.application_properties.get(name) != Some(value) {
                aux.modified_properties.insert(name.clone(), value.clone());
            }
        }
        aux.removed_properties = original
            .application_properties
            .keys()
            .filter(|name| !changed.application_properties.contains_key(*name))
            .cloned()
            .collect();
        if changed.properties != original.properties {
            aux.system_properties = Some(Box::new(changed.properties.clone()));
        }
        aux
    }
}

impl Entry {
    pub(crate) fn from_meta(seq: SequenceNumber, meta: MessageMeta) -> Entry {
        let mut entry = Entry {
            enqueued_time: meta.enqueued_time,
            expires_at: meta.expires_at,
            delivery_count: meta.delivery_count,
            size: meta.size,
            state: meta.state,
            counted: false,
            body: None,
            aux: None,
        };
        let aux = Aux {
            lock: None,
            enqueued_sequence_number: (meta.enqueued_sequence_number != seq)
                .then_some(meta.enqueued_sequence_number),
            dead_letter_source: meta.dead_letter_source,
            dead_letter_reason: meta.dead_letter_reason,
            dead_letter_error_description: meta.dead_letter_error_description,
            modified_properties: meta.modified_properties,
            body_seq: meta.body_sequence_number,
            removed_properties: meta.removed_properties,
            system_properties: meta.system_properties,
            session: meta.session_id.map(SessionId::from),
        };
        if !aux.is_empty() {
            entry.aux = Some(Box::new(aux));
        }
        entry
    }

    /// The meta record of this entry.
    pub(crate) fn meta(&self, seq: SequenceNumber) -> MessageMeta {
        let aux = self.aux.as_deref();
        MessageMeta {
            enqueued_sequence_number: aux.and_then(|a| a.enqueued_sequence_number).unwrap_or(seq),
            enqueued_time: self.enqueued_time,
            size: self.size,
            delivery_count: self.delivery_count,
            state: self.state,
            expires_at: self.expires_at,
            dead_letter_source: aux.and_then(|a| a.dead_letter_source.clone()),
            dead_letter_reason: aux.and_then(|a| a.dead_letter_reason.clone()),
            dead_letter_error_description: aux
                .and_then(|a| a.dead_letter_error_description.clone()),
            modified_properties: aux.map(|a| a.modified_properties.clone()).unwrap_or_default(),
            body_sequence_number: aux.and_then(|a| a.body_seq),
            removed_properties: aux.map(|a| a.removed_properties.clone()).unwrap_or_default(),
            system_properties: aux.and_then(|a| a.system_properties.clone()),
            session_id: aux.and_then(|a| a.session.as_deref()).map(str::to_owned),
        }
    }

    /// The message's session (on a session-enabled entity).
    pub(crate) fn session(&self) -> Option<&SessionId> {
        self.aux.as_ref().and_then(|a| a.session.as_ref())
    }

    /// The sequence number the message's body is stored under: its own, or (a changed topic
    /// copy) the publish's.
    pub(crate) fn body_seq(&self, seq: SequenceNumber) -> SequenceNumber {
        self.aux.as_ref().and_then(|a| a.body_seq).unwrap_or(seq)
    }

    pub(crate) fn aux_mut(&mut self) -> &mut Aux {
        self.aux.get_or_insert_with(Box::default)
    }

    pub(crate) fn lock(&self) -> Option<MessageLock> {
        self.aux.as_ref().and_then(|a| a.lock)
    }

    pub(crate) fn take_lock(&mut self) -> Option<MessageLock> {
        let aux = self.aux.as_mut()?;
        let lock = aux.lock.take();
        if aux.is_empty() {
            self.aux = None;
        }
        lock
    }

    /// When a scheduled message comes due.
    pub(crate) fn scheduled_at(&self) -> Option<Timestamp> {
        (self.state == MessageState::Scheduled).then_some(self.enqueued_time)
    }

    /// Merges "properties to modify" into the properties the broker lays over the message's
    /// own.
    pub(crate) fn merge_properties(&mut self, properties: ApplicationProperties) {
        if properties.is_empty() {
            return;
        }
        self.aux_mut().modified_properties.extend(properties);
    }
}

/// The messages of a partition and the orders they are taken in.
#[derive(Debug, Default)]
pub(crate) struct Index {
    pub(crate) messages: SubQueues<BTreeMap<SequenceNumber, Entry>>,
    /// Unlocked active messages, per sub-queue, in sequence order.
    pub(crate) available: SubQueues<BTreeSet<SequenceNumber>>,
    /// Scheduled messages of the main queue by due time.
    pub(crate) scheduled: BTreeSet<(Timestamp, SequenceNumber)>,
    /// Messages of the main queue that expire, by expiry time.
    pub(crate) expiring: BTreeSet<(Timestamp, SequenceNumber)>,
    /// The sizes of every message (and session state), together.
    pub(crate) size_bytes: u64,
    /// The sessions of the main queue's messages: only on a session-enabled entity.
    pub(crate) sessions: Option<Box<SessionIndex>>,
}

impl Index {
    /// An empty index, with a session index if the entity requires sessions.
    pub(crate) fn new(sessions: bool) -> Index {
        Index { sessions: sessions.then(Box::default), ..Index::default() }
    }

    pub(crate) fn entry(&self, queue: SubQueue, seq: SequenceNumber) -> Option<&Entry> {
        self.messages[queue].get(&seq)
    }

    pub(crate) fn entry_mut(&mut self, queue: SubQueue, seq: SequenceNumber) -> Option<&mut Entry> {
        self.messages[queue].get_mut(&seq)
    }

    /// Adds an unlocked entry, indexed for its state.
    pub(crate) fn insert(&mut self, queue: SubQueue, seq: SequenceNumber, entry: Entry) {
        self.size_bytes += u64::from(entry.size);
        if queue == SubQueue::Main {
            if let Some(at) = entry.scheduled_at() {
                self.scheduled.insert((at, seq));
            }
            if entry.expires_at < NEVER_EXPIRES {
                self.expiring.insert((entry.expires_at, seq));
            }
        }
        if entry.state == MessageState::Active {
            self.available[queue].insert(seq);
        }
        if let (SubQueue::Main, Some(sessions), Some(id)) =
            (queue, self.sessions.as_deref_mut(), entry.session())
        {
            sessions.add_message(id, seq, entry.state == MessageState::Active);
        }
        self.messages[queue].insert(seq, entry);
    }

    /// Takes a message out of the available set (it is being handed out).
    pub(crate) fn take_available(&mut self, queue: SubQueue, seq: SequenceNumber) {
        self.available[queue].remove(&seq);
        self.session_available(queue, seq, false);
    }

    /// Puts a message back in the available set.
    pub(crate) fn put_available(&mut self, queue: SubQueue, seq: SequenceNumber) {
        self.available[queue].insert(seq);
        self.session_available(queue, seq, true);
    }

    fn session_available(&mut self, queue: SubQueue, seq: SequenceNumber, available: bool) {
        if queue != SubQueue::Main {
            return;
        }
        if let Some(sessions) = self.sessions.as_deref_mut() {
            if let Some(id) = self.messages[queue].get(&seq).and_then(Entry::session) {
                sessions.set_available(id, seq, available);
            }
        }
    }

    /// Takes an entry out of the index and every set that orders it.
    pub(crate) fn remove(&mut self, queue: SubQueue, seq: SequenceNumber) -> Option<Entry> {
        let entry = self.messages[queue].remove(&seq)?;
        self.size_bytes -= u64::from(entry.size);
        self.available[queue].remove(&seq);
        if queue == SubQueue::Main {
            self.expiring.remove(&(entry.expires_at, seq));
            if let Some(at) = entry.scheduled_at() {
                self.scheduled.remove(&(at, seq));
            }
            if let (Some(sessions), Some(id)) = (self.sessions.as_deref_mut(), entry.session()) {
                sessions.remove_message(id, seq);
            }
        }
        Some(entry)
    }

    /// The lowest sequence number of any message, if there is one.
    pub(crate) fn lowest(&self) -> Option<SequenceNumber> {
        self.messages.values().filter_map(|m| m.first_key_value()).map(|(s, _)| *s).min()
    }
}
