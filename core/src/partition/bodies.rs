//! Message bodies: the broker-wide [`BodyCache`], messages on their way out ([`Outgoing`])
//! before their bodies are known, and the choice of which bodies a cycle reads from the store.
//!
//! Deliveries, peeks and deferred receives read missing bodies *before* the cycle's write (so
//! even a message deleted in that cycle is still readable), reading ahead — only as much as the
//! cache has room for — at the head of a backlog, or, on a session entity, in the sessions being
//! delivered.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::index::Entry;
use super::state::PartitionState;
use super::SessionId;
use crate::message::ReceivedMessage;
use crate::message::{
    ApplicationProperties, BrokerProperties, Message, MessageLock, MessageProperties,
};
use crate::metrics as m;
use crate::store::StoreError;
use crate::types::{PartitionId, SequenceNumber, SubQueue};

/// Bodies read ahead of the head of a backlog, when a delivery needs one from the store.
const PREFETCH: usize = 256;

/// How many body bytes the partitions of one broker keep in memory, together.
///
/// A message's body is stored once, in its body record; a partition keeps it in memory only
/// while the cache has room (new messages first take what is free; deliveries from a backlog
/// read bodies back from the store, prefetching ahead). What is cached is counted here, so a
/// backlog of any length costs memory only for its index.
#[derive(Debug)]
pub(crate) struct BodyCache {
    budget: u64,
    used: AtomicU64,
}

impl BodyCache {
    pub(crate) fn new(budget: u64) -> Self {
        Self { budget, used: AtomicU64::new(0) }
    }

    /// Takes `n` bytes of the budget, if that many are free.
    pub(crate) fn try_take(&self, n: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used + n <= self.budget).then_some(used + n)
            })
            .is_ok()
    }

    pub(crate) fn give_back(&self, n: u64) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }

    /// Bytes the cache could still take now (shared by every partition: a hint, not a promise).
    pub(crate) fn room(&self) -> u64 {
        self.budget.saturating_sub(self.used.load(Ordering::Acquire))
    }

    /// Bytes cached now, by every partition.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }
}

/// A message on its way out (a delivery, a peek, a deferred receive) before its body is known.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub(crate) broker: BrokerProperties,
    pub(crate) lock: Option<MessageLock>,
    /// Where the body is stored (the message's own number, or a topic copy's publish).
    pub(crate) body_seq: SequenceNumber,
    pub(crate) body: Option<Arc<Message>>,
    pub(crate) modified_properties: Option<ApplicationProperties>,
    /// A rule action's removals and system-property changes (topic copies only).
    pub(crate) removed_properties: Vec<String>,
    pub(crate) system_properties: Option<Box<MessageProperties>>,
}

impl Outgoing {
    /// What goes out for the message `entry` indexes; its body may still have to be read.
    pub(crate) fn of(
        entry: &Entry,
        seq: SequenceNumber,
        partition: PartitionId,
        lock: Option<MessageLock>,
    ) -> Outgoing {
        let meta = entry.meta(seq);
        Outgoing {
            broker: BrokerProperties {
                sequence_number: seq,
                enqueued_sequence_number: meta.enqueued_sequence_number,
                enqueued_time: meta.enqueued_time,
                partition_id: partition,
                delivery_count: meta.delivery_count,
                state: meta.state,
                expires_at: meta.expires_at,
                dead_letter_source: meta.dead_letter_source,
                dead_letter_reason: meta.dead_letter_reason,
                dead_letter_error_description: meta.dead_letter_error_description,
            },
            lock,
            body_seq: entry.body_seq(seq),
            body: entry.body.clone(),
            modified_properties: Some(meta.modified_properties).filter(|p| !p.is_empty()),
            removed_properties: meta.removed_properties,
            system_properties: meta.system_properties,
        }
    }

    /// The received message, once the body is there (bodies are loaded before a cycle that
    /// went well completes).
    pub(crate) fn finish(mut self) -> ReceivedMessage {
        let body = self.body.take().expect("bodies are loaded before a cycle ends well");
        if let Some(forwarded) = &body.forwarded {
            // What an auto-forwarded message brought along, unless this entity set its own.
            let b = &mut self.broker;
            if b.enqueued_sequence_number == b.sequence_number {
                b.enqueued_sequence_number = forwarded.enqueued_sequence_number;
            }
            if b.dead_letter_reason.is_none() && b.dead_letter_source.is_none() {
                b.dead_letter_source.clone_from(&forwarded.dead_letter_source);
                b.dead_letter_reason.clone_from(&forwarded.dead_letter_reason);
                b.dead_letter_error_description
                    .clone_from(&forwarded.dead_letter_error_description);
            }
        }
        let unchanged = self.modified_properties.is_none()
            && self.removed_properties.is_empty()
            && self.system_properties.is_none();
        let message = if unchanged {
            body
        } else {
            let mut message = (*body).clone();
            for name in &self.removed_properties {
                message.application_properties.remove(name);
            }
            message.application_properties.extend(self.modified_properties.unwrap_or_default());
            message.application_properties_modified = true;
            if let Some(properties) = self.system_properties {
                // The transport's kept encoding no longer says what the message is: it
                // encodes this one from its fields.
                message.properties = *properties;
                message.raw = None;
            }
            Arc::new(message)
        };
        ReceivedMessage { message, broker: self.broker, lock: self.lock }
    }
}

/// The bodies a cycle reads from the store.
#[derive(Debug)]
pub(crate) struct BodyReads {
    /// What this cycle's outgoing messages need (sorted, unique): missing one is corruption.
    needed: Vec<SequenceNumber>,
    /// Read ahead for the cache, in delivery order: each message and where its body is.
    ahead: Vec<(SubQueue, SequenceNumber, SequenceNumber)>,
    /// Everything to read (sorted, unique).
    pub(crate) wanted: Vec<SequenceNumber>,
}

impl PartitionState {
    /// Caches `body` in the entry if the budget allows. True if it did.
    fn try_cache(&mut self, queue: SubQueue, seq: SequenceNumber, body: &Arc<Message>) -> bool {
        let Some(entry) = self.index.messages[queue].get_mut(&seq) else { return false };
        if entry.body.is_some() || !self.cache.try_take(u64::from(entry.size)) {
            return false;
        }
        entry.body = Some(body.clone());
        entry.counted = true;
        self.cached_bytes += u64::from(entry.size);
        true
    }

    /// Gives back the cache share of an entry leaving memory (deleted, or dead-lettered).
    pub(crate) fn uncache(&mut self, entry: &mut Entry) {
        if std::mem::take(&mut entry.counted) {
            self.cache.give_back(u64::from(entry.size));
            self.cached_bytes -= u64::from(entry.size);
        }
    }

    /// Gives the partition's share of the body cache back (the state holding it is going).
    pub(crate) fn release_cache(&mut self) {
        self.cache.give_back(std::mem::take(&mut self.cached_bytes));
    }

    /// Drops the bodies of this cycle's messages that did not fit the cache (after the write:
    /// until then deliveries may need them).
    pub(crate) fn drop_transient_bodies(&mut self) {
        for (queue, seq) in self.fx.transient.drain(..) {
            if let Some(entry) = self.index.messages[queue].get_mut(&seq) {
                if !entry.counted {
                    entry.body = None;
                }
            }
        }
    }

    /// The bodies this cycle's deliveries, peeks and deferred receives need and the cache did
    /// not hold, and, for a backlog being delivered, the bodies of the next available messages.
    /// `None` if nothing is missing.
    pub(crate) fn body_reads(&self) -> Option<BodyReads> {
        let fx = &self.fx;
        let mut needed: Vec<SequenceNumber> = fx
            .deliveries
            .iter()
            .map(|(_, o)| o)
            .chain(fx.lists.iter().filter_map(|(_, l)| l.as_ref().ok()).flatten())
            .filter(|o| o.body.is_none())
            .map(|o| o.body_seq)
            .collect();
        if needed.is_empty() {
            return None;
        }
        let delivering = fx.deliveries.iter().any(|(_, o)| o.body.is_none());
        let mut ahead = Vec::new();
        // Read ahead only what the cache can keep: a body read ahead and not cached is read
        // again when it is delivered.
        let mut room = if delivering { self.cache.room() } else { 0 };
        let mut read_ahead = |queue: SubQueue, seq: SequenceNumber| {
            let Some(entry) = self.index.entry(queue, seq) else { return true };
            if entry.body.is_some() {
                return true;
            }
            if u64::from(entry.size) > room {
                return false;
            }
            room -= u64::from(entry.size);
            ahead.push((queue, seq, entry.body_seq(seq)));
            true
        };
        for (queue, available) in self.index.available.iter() {
            match (queue, self.index.sessions.as_deref()) {
                // A session entity's head belongs to sessions nobody may hold yet: read ahead in
                // the sessions being delivered, whose holders ask for those messages next.
                (SubQueue::Main, Some(sessions)) => {
                    let mut delivered: Vec<&SessionId> = Vec::new();
                    for (_, o) in &fx.deliveries {
                        let seq = o.broker.sequence_number;
                        let Some(id) = self.index.entry(queue, seq).and_then(|e| e.session())
                        else {
                            continue;
                        };
                        if !delivered.contains(&id) {
                            delivered.push(id);
                        }
                    }
                    let next = delivered.into_iter().flat_map(|id| sessions.available_of(id));
                    for seq in next.take(PREFETCH) {
                        if !read_ahead(queue, seq) {
                            break;
                        }
                    }
                }
                _ => {
                    for &seq in available.iter().take(PREFETCH) {
                        if !read_ahead(queue, seq) {
                            break;
                        }
                    }
                }
            }
        }
        let mut wanted: Vec<SequenceNumber> =
            needed.iter().copied().chain(ahead.iter().map(|&(_, _, b)| b)).collect();
        wanted.sort_unstable();
        wanted.dedup();
        needed.sort_unstable();
        needed.dedup();
        Some(BodyReads { needed, ahead, wanted })
    }

    /// Puts the bodies read for `reads` where they are needed and caches the ones read ahead.
    pub(crate) fn fill_bodies(
        &mut self,
        reads: BodyReads,
        loaded: &HashMap<SequenceNumber, Arc<Message>>,
    ) -> Result<(), StoreError> {
        for &seq in &reads.needed {
            if !loaded.contains_key(&seq) {
                return Err(StoreError::corrupted(format!("the body of message {seq} is missing")));
            }
        }
        metrics::counter!(m::BODIES_READ_TOTAL).increment(loaded.len() as u64);
        let fill = |o: &mut Outgoing| {
            if o.body.is_none() {
                o.body = loaded.get(&o.body_seq).cloned();
            }
        };
        self.fx.deliveries.iter_mut().for_each(|(_, o)| fill(o));
        self.fx.lists.iter_mut().filter_map(|(_, l)| l.as_mut().ok()).flatten().for_each(fill);
        for (queue, seq, body_seq) in reads.ahead {
            if let Some(body) = loaded.get(&body_seq) {
                if !self.try_cache(queue, seq, body) {
                    break;
                }
            }
        }
        Ok(())
    }
}
