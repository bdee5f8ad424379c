//! Our deliveries to the client's receiver links (only against link credit and the remote
//! session window), and their settlement: dispositions read, handed to the broker per entity
//! and partition, outcomes echoed.
//!
//! The settlements read in one turn of the loop go to the broker together, one request per
//! entity and partition (`Broker::start_settle_many`), so a burst of dispositions costs a store
//! write per partition, not one per message. A Detach or an End hands the settlements read
//! before it over first: a session link's detach releases its session, which must not release
//! (and redeliver) messages the client had just accepted. The unsettled deliveries of a gone
//! session link are remembered (bounded), and a later disposition of one fails with
//! `com.microsoft:session-lock-lost`.

use fe2o3_amqp_types::definitions::Role;
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Modified, Outcome, Rejected, Released};
use fe2o3_amqp_types::performatives::Disposition;
use fe2o3_amqp_types::primitives::Value;
use ironbus_core::{
    ApplicationProperties, Disposition as CoreDisposition, EntityAddress, LockToken,
};

use crate::codec;
use crate::error::{WireError, SESSION_LOCK_LOST};
use crate::frame::{self};
use crate::management;

use super::*;

/// A settlement read from a disposition, waiting for the end of the read to be handed over.
pub(super) struct Settle {
    pub(super) address: EntityAddress,
    pub(super) token: LockToken,
    pub(super) disposition: CoreDisposition,
    pub(super) answer: SettleAnswer,
}

/// Where a settlement's outcome is echoed: `echo` carries the state to echo when asked.
pub(super) struct SettleAnswer {
    pub(super) channel: u16,
    pub(super) delivery_id: u32,
    pub(super) echo: Option<DeliveryState>,
}

#[derive(Debug)]
pub(super) struct Unsettled {
    pub(super) handle: u32,
    pub(super) token: LockToken,
    pub(super) address: EntityAddress,
}

impl Connection {
    /// Sends what links may send now.
    pub(super) fn pump(&mut self) {
        self.detach_lost_sessions();
        if self.writes_paused() {
            return;
        }
        let targets: Vec<(u16, u32)> = self
            .sessions
            .iter()
            .flat_map(|(ch, s)| {
                s.links.iter().filter_map(move |(h, l)| {
                    matches!(l, LinkState::Outbound(_)).then_some((*ch, *h))
                })
            })
            .collect();
        for (channel, handle) in targets {
            self.pump_link(channel, handle);
        }
    }

    pub(super) fn pump_link(&mut self, channel: u16, handle: u32) {
        let max_frame = self.remote_max_frame;
        // Deliveries and responses wait while the writer is behind (`writes_paused`); the
        // writer wakes the loop when it catches up.
        let resume_below = self.cx.max_write_buffer / 2;
        let Some(session) = self.sessions.get_mut(&channel) else { return };
        let Some(LinkState::Outbound(link)) = session.links.get_mut(&handle) else { return };
        loop {
            if session.remote_incoming_window == 0 {
                return;
            }
            if self.outbox.must_wait(self.out.len(), resume_below) {
                return;
            }
            let (payload, tag, settled, lock) = match &mut link.kind {
                Outbound::Responses { pending } => {
                    if link.credit == 0 {
                        return;
                    }
                    let Some(payload) = pending.pop_front() else { return };
                    (payload, session.next_delivery_id.to_be_bytes().to_vec(), true, None)
                }
                Outbound::Entity { receiver, address } => {
                    if link.credit == 0 {
                        // Credit taken back: hand back what arrived beyond it.
                        if !link.draining {
                            while let Some(m) = receiver.try_recv() {
                                if let Some(lock) = m.lock {
                                    let broker = self.cx.broker.clone();
                                    let address = address.clone();
                                    tokio::spawn(async move {
                                        let _ = broker
                                            .settle(address, lock.token, CoreDisposition::Release)
                                            .await;
                                    });
                                }
                            }
                        }
                        return;
                    }
                    let Some(m) = receiver.try_recv() else { return };
                    let payload = codec::encode_delivery(&m, codec::DeliveryOptions::default());
                    match m.lock {
                        Some(lock) => (
                            payload,
                            codec::lock_token_to_delivery_tag(&lock.token.0).to_vec(),
                            false,
                            Some((lock.token, address.clone())),
                        ),
                        // Settled on arrival (receive-and-delete): an empty tag, as Service
                        // Bus sends (the python SDK then reports no delivery tag).
                        None => (payload, Vec::new(), true, None),
                    }
                }
            };
            self.largest_payload = self.largest_payload.max(payload.len());
            let delivery_id = session.next_delivery_id;
            session.next_delivery_id = delivery_id.wrapping_add(1);
            let transfer = frame::delivery_transfer(handle, delivery_id, tag, settled);
            let frames =
                frame::write_transfer(&mut self.out, channel, transfer, payload, max_frame);
            session.next_outgoing_id = session.next_outgoing_id.wrapping_add(frames);
            session.remote_incoming_window = session.remote_incoming_window.saturating_sub(frames);
            link.delivery_count = link.delivery_count.wrapping_add(1);
            link.credit -= 1;
            if let Some((token, address)) = lock {
                session.unsettled.insert(delivery_id, Unsettled { handle, token, address });
            }
        }
    }

    pub(super) fn on_disposition(
        &mut self,
        channel: u16,
        disposition: Disposition,
    ) -> Result<(), WireError> {
        if disposition.role != Role::Receiver {
            // Settlements of our own dispositions of client transfers: nothing to do.
            return Ok(());
        }
        let Some(session) = self.sessions.get_mut(&channel) else {
            return Err(no_session(channel));
        };
        let first = disposition.first;
        let last = disposition.last.unwrap_or(first);
        let span = last.wrapping_sub(first);
        // Visit only deliveries we hold, however wide the range (a hostile range costs nothing).
        let ids: Vec<u32> = if (span as usize) < session.unsettled.len() {
            (0..=span)
                .map(|i| first.wrapping_add(i))
                .filter(|id| session.unsettled.contains_key(id))
                .collect()
        } else {
            session.unsettled.keys().copied().filter(|id| id.wrapping_sub(first) <= span).collect()
        };
        if !session.lost.is_empty() {
            self.refuse_lost(channel, first, span, disposition.settled);
        }
        let mut state = disposition.state.clone();
        if let Some(DeliveryState::TransactionalState(ts)) = &disposition.state {
            if self.on_transactional_disposition(channel, &ids, ts, disposition.settled) {
                return Ok(());
            }
            // A release in a transaction is a release.
            state = Some(DeliveryState::Released(Released {}));
        }
        let Some(session) = self.sessions.get_mut(&channel) else { return Ok(()) };
        for id in ids {
            let Some(unsettled) = session.unsettled.remove(&id) else { continue };
            // Received or transactional states: not outcomes we act on.
            let Some((core, echo)) = state.as_ref().and_then(settle_outcome) else { continue };
            let echo = match echo {
                Outcome::Accepted(a) => DeliveryState::Accepted(a),
                Outcome::Released(r) => DeliveryState::Released(r),
                Outcome::Modified(m) => DeliveryState::Modified(m),
                Outcome::Rejected(r) => DeliveryState::Rejected(r),
                Outcome::Declared(d) => DeliveryState::Declared(d),
            };
            let echo = (!disposition.settled).then_some(echo);
            self.settles.push(Settle {
                address: unsettled.address,
                token: unsettled.token,
                disposition: core,
                answer: SettleAnswer { channel, delivery_id: id, echo },
            });
        }
        Ok(())
    }

    /// Answers a disposition of deliveries whose session link is gone: each fails with
    /// `com.microsoft:session-lock-lost` (amqp.md §7) — when the client waits for the outcome
    /// (not `settled`); a settled one gets nothing, like any failed settled disposition.
    fn refuse_lost(&mut self, channel: u16, first: u32, span: u32, settled: bool) {
        let Some(session) = self.sessions.get_mut(&channel) else { return };
        let mut lost: Vec<u32> =
            session.lost.iter().copied().filter(|id| id.wrapping_sub(first) <= span).collect();
        lost.sort_unstable_by_key(|id| id.wrapping_sub(first));
        for id in &lost {
            session.lost.remove(id);
        }
        if settled {
            return;
        }
        let error = WireError::new(
            SESSION_LOCK_LOST,
            410,
            "the session lock was lost: the session link is gone; accept the session again",
        )
        .to_amqp();
        for id in lost {
            let disposition = Disposition {
                role: Role::Sender,
                first: id,
                last: None,
                settled: true,
                state: Some(DeliveryState::Rejected(Rejected { error: Some(error.clone()) })),
                batchable: false,
            };
            frame::write_performative(
                &mut self.out,
                channel,
                &Performative::Disposition(disposition),
            );
        }
    }

    /// Hands the settlements of the frames just read to the broker: one request per entity
    /// and partition.
    pub(super) fn start_settles(&mut self) {
        while !self.settles.is_empty() {
            let address = self.settles[0].address.clone();
            // Usually a read's settlements are all on one entity and settled by the client.
            let one_entity = self.settles.iter().all(|s| s.address == address);
            if one_entity && self.settles.iter().all(|s| s.answer.echo.is_none()) {
                // Nothing to echo, so the answers are not awaited (the requests are queued on
                // their partitions already), and their arrival does not wake this loop.
                let items = self.settles.drain(..).map(|s| (s.token, s.disposition)).collect();
                drop(self.cx.broker.start_settle_many(address, items));
                return;
            }
            let same: Vec<Settle> = if one_entity {
                self.settles.drain(..).collect()
            } else {
                let (same, rest) = self.settles.drain(..).partition(|s| s.address == address);
                self.settles = rest;
                same
            };
            let (items, answers): (Vec<_>, Vec<_>) =
                same.into_iter().map(|s| ((s.token, s.disposition), s.answer)).unzip();
            let outcomes = self.cx.broker.start_settle_many(address, items);
            if answers.iter().all(|answer| answer.echo.is_none()) {
                continue;
            }
            self.pending.push(Box::pin(async move {
                let outcomes = outcomes.await;
                Event::Settled(
                    answers
                        .into_iter()
                        .zip(outcomes)
                        .map(|(answer, outcome)| (answer, outcome.map_err(WireError::from)))
                        .collect(),
                )
            }));
        }
    }
}

/// What a client's outcome asks of a delivery's message, and the outcome echoed back; `None`
/// for states that settle nothing (received, transactional).
pub(super) fn settle_outcome(state: &DeliveryState) -> Option<(CoreDisposition, Outcome)> {
    Some(match state {
        DeliveryState::Accepted(_) => (CoreDisposition::Complete, Outcome::Accepted(Accepted {})),
        DeliveryState::Released(_) => (CoreDisposition::Release, Outcome::Released(Released {})),
        DeliveryState::Modified(m) => {
            let properties = m
                .message_annotations
                .as_ref()
                .map(|f| {
                    f.iter()
                        .filter_map(|(k, v)| Some((k.0.clone(), management::property_value(v)?)))
                        .collect::<ApplicationProperties>()
                })
                .unwrap_or_default();
            let core = if m.undeliverable_here == Some(true) {
                CoreDisposition::Defer { properties }
            } else {
                CoreDisposition::Abandon { properties }
            };
            (
                core,
                Outcome::Modified(Modified {
                    delivery_failed: None,
                    undeliverable_here: None,
                    message_annotations: None,
                }),
            )
        }
        DeliveryState::Rejected(r) => (dead_letter(r), Outcome::Rejected(Rejected { error: None })),
        _ => return None,
    })
}

/// A rejected outcome as a dead-letter request: reason and description from the error's info
/// (or its description), other info entries as properties to modify.
pub(super) fn dead_letter(rejected: &Rejected) -> CoreDisposition {
    let mut reason = None;
    let mut description = None;
    let mut properties = ApplicationProperties::new();
    if let Some(error) = &rejected.error {
        description = error.description.clone();
        if let Some(info) = &error.info {
            for (k, v) in info.iter() {
                match (k.0.as_str(), v) {
                    ("DeadLetterReason", Value::String(s)) => reason = Some(s.clone()),
                    ("DeadLetterErrorDescription", Value::String(s)) => {
                        description = Some(s.clone())
                    }
                    ("DeadLetterReason" | "DeadLetterErrorDescription", _) => {}
                    (key, value) => {
                        if let Some(p) = management::property_value(value) {
                            properties.insert(key.to_owned(), p);
                        }
                    }
                }
            }
        }
    }
    CoreDisposition::DeadLetter { reason, description, properties }
}
