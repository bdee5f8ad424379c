//! A consumer on the lean client: one receiver link with credit granted in flows.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::{
    definitions::{Fields, Handle, ReceiverSettleMode, Role, SenderSettleMode},
    messaging::{Accepted, DeliveryState, Source, Target},
    performatives::{Attach, Detach, Disposition, Flow, Performative, Transfer},
    primitives::{Symbol, Value},
};
use ironbus_transport_amqp::frame;
use tokio::sync::watch;

use super::{first_data, Link, Wire, CHANNEL, HANDLE, SESSION_WINDOW};
use crate::{consumer::ConsumerReport, payload, Consuming, Participant, Phase, Run};

/// A consumer, connected and attached with its credit granted, that has not received yet.
#[derive(Debug)]
pub(crate) struct Consumer {
    wire: Wire,
    /// The link's delivery count as the receiver sees it: the broker's initial count plus the
    /// deliveries received.
    delivery_count: u32,
    /// A delivery whose transfer frames are still arriving: its id and the bytes so far.
    partial: Option<(u32, bool, BytesMut)>,
    /// Delivery ids received and not yet accepted (peek-lock), in order.
    held: Vec<u32>,
    /// Deliveries received since credit was last granted.
    used: u32,
    /// Sessions: the node accept-next attaches ask for a session of (`None`: a plain
    /// receiver, attached already).
    session_source: Option<String>,
    /// Sessions: accept unsettled and wait for the broker's outcomes before detaching (a
    /// session's holder lets it go only once its messages are settled, as SDKs do).
    confirm: bool,
    /// Accepted deliveries whose outcome the broker has not sent yet.
    unconfirmed: u64,
    /// Accepts the broker answered with an outcome other than accepted.
    refused: u64,
}

/// The source filter that asks for a session (null: the next available).
const SESSION_FILTER: &str = "com.microsoft:session-filter";

/// The answer to an accept-next attach.
#[derive(Debug, PartialEq, Eq)]
enum Accept {
    /// A session, with the broker's initial delivery count.
    Session(String, u32),
    /// No session became available within the wait.
    TimedOut,
}

impl Participant for Consumer {
    type Kind = Consuming;

    /// Connects consumer number `index` of the run, attaches its receiver to the address and
    /// grants the credit.
    async fn attach(run: &Run, index: u32) -> Result<Consumer> {
        let name = run.link_name('c', index);
        let address = run.options.receive_address(index);
        let mut wire = Wire::open(run.endpoint(index), &name).await?;
        if run.options.sessions > 0 {
            return Ok(Consumer {
                wire,
                delivery_count: 0,
                partial: None,
                held: Vec::new(),
                used: 0,
                session_source: Some(address.to_owned()),
                confirm: run.options.confirm_accepts,
                unconfirmed: 0,
                refused: 0,
            });
        }
        let link = Link {
            name: format!("{name}-receiver"),
            role: Role::Receiver,
            snd_settle_mode: run.options.mode.sender_settle_mode(),
            source: address.to_owned(),
            target: name.clone(),
        };
        let delivery_count = wire
            .attach(link)
            .await
            .with_context(|| format!("{name}: attaching a receiver to {address}"))?;
        let mut consumer = Consumer {
            wire,
            delivery_count,
            partial: None,
            held: Vec::new(),
            used: 0,
            session_source: None,
            confirm: false,
            unconfirmed: 0,
            refused: 0,
        };
        consumer.grant(run.options.credit);
        consumer.wire.flush().await.with_context(|| format!("{name}: granting credit"))?;
        Ok(consumer)
    }

    fn name(&self) -> &str {
        &self.wire.name
    }

    /// Receives (and in peek-lock mode accepts) until the run has received every message or is
    /// aborted.
    async fn work(
        &mut self,
        run: &Run,
        phase: &mut watch::Sender<Phase>,
        report: &mut ConsumerReport,
    ) -> Result<()> {
        match self.session_source.clone() {
            Some(source) => self.receive_sessions(run, &source, phase, report).await,
            None => self.receive_all(run, phase, report).await,
        }
    }

    async fn close(self) {
        self.wire.close().await;
    }
}

impl Consumer {
    async fn receive_all(
        &mut self,
        run: &Run,
        phase: &mut watch::Sender<Phase>,
        report: &mut ConsumerReport,
    ) -> Result<()> {
        let credit = run.options.credit;
        let top_up_after = run.options.top_up_after();
        let batch = run.options.accept_batch as usize;
        let mut watcher = phase.subscribe();
        loop {
            if *watcher.borrow_and_update() != Phase::Running {
                self.accept_held();
                return self.wire.flush().await;
            }
            // Wait for a frame, then take every frame already buffered before answering.
            let (performative, payload) = tokio::select! {
                frame = self.wire.next_frame() => frame?,
                _ = watcher.changed() => continue,
            };
            let mut next = Some((performative, payload));
            while let Some((performative, payload)) = next.take() {
                if let Some(message) = self.on_frame(performative, payload, batch)? {
                    let received_at = payload::now_nanos();
                    report.record(
                        run,
                        phase,
                        first_data(&message).and_then(payload::read),
                        received_at,
                    );
                }
                if self.wire.reader.has_frame() {
                    next = Some(self.wire.next_frame().await?);
                }
            }
            // Whatever is held is accepted whenever nothing more is waiting.
            self.accept_held();
            if self.used >= top_up_after {
                self.grant(credit);
            }
            self.wire.flush().await?;
        }
    }

    /// Sessions: accepts the next session, drains it, accepts its messages, detaches and
    /// accepts the next, until the run has received every message or is aborted.
    async fn receive_sessions(
        &mut self,
        run: &Run,
        source: &str,
        phase: &mut watch::Sender<Phase>,
        report: &mut ConsumerReport,
    ) -> Result<()> {
        let credit = run.options.credit;
        let batch = run.options.accept_batch as usize;
        let mut watcher = phase.subscribe();
        let mut attach_number = 0u64;
        loop {
            if *watcher.borrow_and_update() != Phase::Running {
                return Ok(());
            }
            attach_number += 1;
            let link_name = format!("{}-session-{attach_number}", self.wire.name);
            self.write_session_attach(&link_name, source, run.options.session_wait_ms);
            let asked = Instant::now();
            self.wire.flush().await?;
            let accepted = tokio::select! {
                accepted = self.accepted_session() => accepted?,
                _ = watcher.wait_for(|phase| *phase != Phase::Running) => return Ok(()),
            };
            let (_session, initial_count) = match accepted {
                Accept::Session(session, count) => (session, count),
                Accept::TimedOut => {
                    report.accept_timeouts += 1;
                    // The broker forgot the refused link; our detach frees the handle on our side.
                    self.write_detach();
                    continue;
                }
            };
            let waited = u64::try_from(asked.elapsed().as_micros()).unwrap_or(u64::MAX);
            report.accept_latencies_us.push(waited);
            self.delivery_count = initial_count;
            self.partial = None;
            self.grant_drain(credit);
            self.wire.flush().await?;
            let mut last_sent_at = 0u64;
            // Receive until a drain comes back with less than the credit used: the session is
            // empty (for now).
            loop {
                let (performative, payload) = tokio::select! {
                    frame = self.wire.next_frame() => frame?,
                    _ = watcher.changed() => {
                        if *watcher.borrow_and_update() != Phase::Running {
                            self.accept_held();
                            self.wire.flush().await?;
                            return Ok(());
                        }
                        continue;
                    }
                };
                let mut drained = false;
                let mut next = Some((performative, payload));
                while let Some((performative, payload)) = next.take() {
                    if let Performative::Flow(Flow {
                        handle: Some(Handle(HANDLE)),
                        link_credit,
                        ..
                    }) = &performative
                    {
                        drained |= *link_credit == Some(0);
                    }
                    if let Some(message) = self.on_frame(performative, payload, batch)? {
                        let received_at = payload::now_nanos();
                        let stamp = first_data(&message).and_then(payload::read);
                        // One producer sends a session's messages in order, stamping each
                        // with its send time: a session's stamps never go back.
                        if let Some(stamp) = stamp.filter(|s| s.run_id == run.id) {
                            report.out_of_order += u64::from(stamp.sent_at < last_sent_at);
                            last_sent_at = stamp.sent_at;
                        }
                        report.record(run, phase, stamp, received_at);
                    }
                    if self.wire.reader.has_frame() {
                        next = Some(self.wire.next_frame().await?);
                    }
                }
                self.accept_held();
                if drained {
                    if self.used < credit {
                        break;
                    }
                    // Every credit was used: there may be more.
                    self.grant_drain(credit);
                }
                self.wire.flush().await?;
            }
            // Accepted: wait for the outcomes, then let the session go.
            self.wire.flush().await?;
            while self.unconfirmed > 0 {
                let (performative, payload) = self.wire.next_frame().await?;
                if self.on_frame(performative, payload, batch)?.is_some() {
                    bail!("a delivery after the drain had finished");
                }
            }
            report.settles_refused = self.refused;
            self.write_detach();
            self.wire.flush().await?;
            loop {
                match self.wire.next_frame().await?.0 {
                    Performative::Detach(Detach { error: None, .. }) => break,
                    Performative::Detach(Detach { error: Some(error), .. }) => {
                        bail!(
                            "the broker detached a session link: {}",
                            super::describe(Some(&error))
                        )
                    }
                    Performative::Flow(Flow { next_incoming_id, incoming_window, .. }) => {
                        self.wire.on_session_flow(next_incoming_id, incoming_window)
                    }
                    _ => {}
                }
            }
        }
    }

    /// Queues an accept-next attach on handle 0 to `source`: session filter null, the wait in
    /// `com.microsoft:timeout`.
    fn write_session_attach(&mut self, name: &str, source: &str, wait_ms: u32) {
        let source = Source::builder()
            .address(source.to_owned())
            .add_to_filter_using_legacy_format(Symbol::from(SESSION_FILTER), Value::Null)
            .build();
        let mut properties = Fields::new();
        properties.insert(Symbol::from("com.microsoft:timeout"), Value::Uint(wait_ms));
        let attach = Attach {
            name: name.to_owned(),
            handle: Handle(HANDLE),
            role: Role::Receiver,
            snd_settle_mode: SenderSettleMode::Unsettled,
            rcv_settle_mode: ReceiverSettleMode::First,
            source: Some(Box::new(source)),
            target: Some(Box::new(
                Target::builder().address(self.wire.name.clone()).build().into(),
            )),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: None,
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: Some(properties),
        };
        frame::write_performative(&mut self.wire.out, CHANNEL, &Performative::Attach(attach));
    }

    /// The broker's answer to an accept-next attach: a session, or a refusal for want of one
    /// (any other refusal is an error).
    async fn accepted_session(&mut self) -> Result<Accept> {
        loop {
            match self.wire.next_performative().await? {
                Performative::Attach(attach) if attach.role == Role::Sender => {
                    if let Some(session) = attach.source.as_deref().and_then(session_of) {
                        return Ok(Accept::Session(
                            session,
                            attach.initial_delivery_count.unwrap_or(0),
                        ));
                    }
                    if attach.source.is_some() {
                        bail!("the broker attached a session receiver without naming a session");
                    }
                    return match self.wire.next_performative().await? {
                        Performative::Detach(Detach { error, .. })
                            if is_timeout(error.as_ref()) =>
                        {
                            Ok(Accept::TimedOut)
                        }
                        Performative::Detach(Detach { error, .. }) => bail!(
                            "the broker refused the session receiver: {}",
                            super::describe(error.as_ref())
                        ),
                        other => bail!("after a refused attach, {other:?}"),
                    };
                }
                Performative::Flow(Flow { next_incoming_id, incoming_window, .. }) => {
                    self.wire.on_session_flow(next_incoming_id, incoming_window)
                }
                Performative::Detach(Detach { error, .. }) => {
                    bail!(
                        "the broker detached the session receiver: {}",
                        super::describe(error.as_ref())
                    )
                }
                other => bail!("expected the answer to an accept-next attach, got {other:?}"),
            }
        }
    }

    /// Queues a detach (closed) of handle 0.
    fn write_detach(&mut self) {
        let detach = Detach { handle: Handle(HANDLE), closed: true, error: None };
        frame::write_performative(&mut self.wire.out, CHANNEL, &Performative::Detach(detach));
    }

    /// Queues a flow granting `credit` with drain: the broker sends what it has, then a flow
    /// with no credit left.
    fn grant_drain(&mut self, credit: u32) {
        self.grant_flow(credit, true);
    }

    /// Applies a frame; returns the message of a delivery it completed.
    fn on_frame(
        &mut self,
        performative: Performative,
        payload: Bytes,
        batch: usize,
    ) -> Result<Option<Bytes>> {
        match performative {
            Performative::Transfer(Transfer { delivery_id, settled, more, aborted, .. }) => {
                self.wire.next_incoming_id = self.wire.next_incoming_id.wrapping_add(1);
                let (id, settled, bytes) = match (self.partial.take(), delivery_id) {
                    (Some((id, was_settled, mut bytes)), _) => {
                        bytes.extend_from_slice(&payload);
                        (id, was_settled || settled == Some(true), bytes)
                    }
                    (None, Some(id)) => (id, settled == Some(true), BytesMut::from(&payload[..])),
                    (None, None) => bail!("a transfer without a delivery id opened a delivery"),
                };
                if aborted {
                    return Ok(None);
                }
                if more {
                    self.partial = Some((id, settled, bytes));
                    return Ok(None);
                }
                self.delivery_count = self.delivery_count.wrapping_add(1);
                self.used += 1;
                if !settled {
                    self.held.push(id);
                    if self.held.len() >= batch {
                        self.accept_held();
                    }
                }
                Ok(Some(bytes.freeze()))
            }
            Performative::Flow(Flow { next_incoming_id, incoming_window, .. }) => {
                self.wire.on_session_flow(next_incoming_id, incoming_window);
                Ok(None)
            }
            Performative::Disposition(Disposition {
                role: Role::Sender,
                first,
                last,
                state,
                ..
            }) if self.confirm => {
                let count = u64::from(last.unwrap_or(first).wrapping_sub(first)) + 1;
                self.unconfirmed = self.unconfirmed.saturating_sub(count);
                if !matches!(state, Some(DeliveryState::Accepted(_))) {
                    self.refused += count;
                }
                Ok(None)
            }
            Performative::Detach(detach) => {
                bail!("the broker detached the link: {}", super::describe(detach.error.as_ref()))
            }
            _ => Ok(None),
        }
    }

    /// Queues dispositions accepting the held deliveries, one per run of consecutive ids.
    fn accept_held(&mut self) {
        let mut at = 0;
        while at < self.held.len() {
            let first = self.held[at];
            let mut last = first;
            at += 1;
            while at < self.held.len() && self.held[at] == last.wrapping_add(1) {
                last = self.held[at];
                at += 1;
            }
            if self.confirm {
                self.unconfirmed += u64::from(last.wrapping_sub(first)) + 1;
            }
            let disposition = Disposition {
                role: Role::Receiver,
                first,
                last: (last != first).then_some(last),
                settled: !self.confirm,
                state: Some(DeliveryState::Accepted(Accepted {})),
                batchable: false,
            };
            frame::write_performative(
                &mut self.wire.out,
                CHANNEL,
                &Performative::Disposition(disposition),
            );
        }
        self.held.clear();
    }

    /// Queues a flow granting `credit` from the current delivery count (and reopening the
    /// session window).
    fn grant(&mut self, credit: u32) {
        self.grant_flow(credit, false);
    }

    fn grant_flow(&mut self, credit: u32, drain: bool) {
        let flow = Flow {
            next_incoming_id: Some(self.wire.next_incoming_id),
            incoming_window: SESSION_WINDOW,
            next_outgoing_id: self.wire.next_outgoing_id,
            outgoing_window: SESSION_WINDOW,
            handle: Some(Handle(HANDLE)),
            delivery_count: Some(self.delivery_count),
            link_credit: Some(credit),
            available: None,
            drain,
            echo: false,
            properties: None,
        };
        frame::write_performative(&mut self.wire.out, CHANNEL, &Performative::Flow(flow));
        self.used = 0;
    }
}

/// The session an attach's source names in its session filter (a string, or a described one).
fn session_of(source: &Source) -> Option<String> {
    let filter = source.filter.as_ref()?;
    let (_, value) = filter.iter().find(|(key, _)| key.as_str() == SESSION_FILTER)?;
    match value {
        Value::String(session) => Some(session.clone()),
        Value::Described(described) => match &described.value {
            Value::String(session) => Some(session.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// Whether a refusal is the accept-next timeout (`com.microsoft:timeout`).
fn is_timeout(error: Option<&fe2o3_amqp_types::definitions::Error>) -> bool {
    super::describe(error).starts_with("com.microsoft:timeout")
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp_types::definitions::{Error, ErrorCondition};

    use super::*;

    #[test]
    fn the_session_comes_from_the_filter_plain_or_described() {
        let plain = Source::builder()
            .address("q")
            .add_to_filter_using_legacy_format(SESSION_FILTER, Value::String("s-1".into()))
            .build();
        assert_eq!(session_of(&plain).as_deref(), Some("s-1"));
        let asked = Source::builder()
            .address("q")
            .add_to_filter_using_legacy_format(SESSION_FILTER, Value::Null)
            .build();
        assert_eq!(session_of(&asked), None);
        assert_eq!(session_of(&Source::builder().address("q").build()), None);
    }

    #[test]
    fn only_the_timeout_condition_is_a_timeout() {
        let timeout =
            Error::new(ErrorCondition::Custom(Symbol::from("com.microsoft:timeout")), None, None);
        assert!(is_timeout(Some(&timeout)));
        let other = Error::new(
            ErrorCondition::Custom(Symbol::from("com.microsoft:session-cannot-be-locked")),
            None,
            None,
        );
        assert!(!is_timeout(Some(&other)));
        assert!(!is_timeout(None));
    }
}
