//! A consumer on the lean client: one receiver link with credit granted in flows.

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::{
    definitions::{Handle, Role, SenderSettleMode},
    messaging::{Accepted, DeliveryState},
    performatives::{Disposition, Flow, Performative, Transfer},
};
use ironbus_transport_amqp::frame;
use tokio::sync::watch;

use super::{first_data, Link, Wire, CHANNEL, HANDLE, SESSION_WINDOW};
use crate::{cli::Mode, consumer::ConsumerReport, payload, Phase, Run};

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
}

impl Consumer {
    /// Connects consumer number `index` of the run, attaches its receiver to the address and
    /// grants the credit.
    pub(crate) async fn attach(run: &Run, index: u32) -> Result<Consumer> {
        let name = format!("ironbus-bench-{:016x}-c{index}", run.id);
        let address = run.options.receive_address(index);
        let mut wire = Wire::open(&run.endpoint, &name).await?;
        let snd_settle_mode = match run.options.mode {
            Mode::PeekLock => SenderSettleMode::Unsettled,
            Mode::ReceiveAndDelete => SenderSettleMode::Settled,
        };
        let link = Link {
            name: format!("{name}-receiver"),
            role: Role::Receiver,
            snd_settle_mode,
            source: address.to_owned(),
            target: name.clone(),
        };
        let delivery_count = wire
            .attach(link)
            .await
            .with_context(|| format!("{name}: attaching a receiver to {address}"))?;
        let mut consumer =
            Consumer { wire, delivery_count, partial: None, held: Vec::new(), used: 0 };
        consumer.grant(run.options.credit);
        consumer.wire.flush().await.with_context(|| format!("{name}: granting credit"))?;
        Ok(consumer)
    }

    /// Receives (and in peek-lock mode accepts) until the run has received every message or is
    /// aborted; then closes.
    pub(crate) async fn run(
        mut self,
        run: Arc<Run>,
        mut phase: watch::Sender<Phase>,
    ) -> Result<ConsumerReport> {
        let mut report = ConsumerReport::default();
        let outcome = self.receive_all(&run, &mut phase, &mut report).await;
        let name = self.wire.name.clone();
        self.wire.close().await;
        outcome.with_context(|| name)?;
        Ok(report)
    }

    async fn receive_all(
        &mut self,
        run: &Run,
        phase: &mut watch::Sender<Phase>,
        report: &mut ConsumerReport,
    ) -> Result<()> {
        let credit = run.options.credit;
        let top_up_after = (credit / 2).max(1);
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
            let disposition = Disposition {
                role: Role::Receiver,
                first,
                last: (last != first).then_some(last),
                settled: true,
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
        let flow = Flow {
            next_incoming_id: Some(self.wire.next_incoming_id),
            incoming_window: SESSION_WINDOW,
            next_outgoing_id: self.wire.next_outgoing_id,
            outgoing_window: SESSION_WINDOW,
            handle: Some(Handle(HANDLE)),
            delivery_count: Some(self.delivery_count),
            link_credit: Some(credit),
            available: None,
            drain: false,
            echo: false,
            properties: None,
        };
        frame::write_performative(&mut self.wire.out, CHANNEL, &Performative::Flow(flow));
        self.used = 0;
    }
}
