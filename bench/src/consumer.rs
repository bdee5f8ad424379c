//! A consumer: one connection, one receiver link with manually managed credit.

use std::{sync::atomic::Ordering, time::Instant};

use anyhow::{Context, Result};
use fe2o3_amqp::{
    link::{delivery::DeliveryInfo, receiver::CreditMode},
    types::{definitions::ReceiverSettleMode, messaging::Data},
    Receiver,
};
use futures_util::FutureExt;
use tokio::sync::watch;

use crate::{cli::Mode, endpoint::Link, payload, Consuming, Participant, Phase, Run};

/// A consumer, connected and attached with its credit granted, that has not received yet.
#[derive(Debug)]
pub(crate) struct Consumer {
    name: String,
    link: Link,
    receiver: Receiver,
}

/// What a consumer saw.
#[derive(Debug, Default)]
pub(crate) struct ConsumerReport {
    /// End-to-end latency of each of this run's messages it received, in microseconds.
    pub latencies_us: Vec<u64>,
    /// Messages from earlier runs it drained (settled like the others, left out of the figures).
    pub stale: u64,
    /// When it received the run's last message, if it did.
    pub completed_at: Option<Instant>,
    /// Sessions: each accept-next's latency (attach sent to the broker's attach naming a
    /// session), in microseconds.
    pub accept_latencies_us: Vec<u64>,
    /// Sessions: accept-next attaches the broker refused for want of a session (its timeout).
    pub accept_timeouts: u64,
    /// Sessions: messages received before one sent earlier in the same session (in one
    /// accepted session).
    pub out_of_order: u64,
    /// Sessions: accepts the broker answered with another outcome (lock lost, ...).
    pub settles_refused: u64,
}

impl ConsumerReport {
    /// Counts a message received at `received_at` (nanoseconds since the Unix epoch) whose body
    /// carried `stamp`: one of this run's adds its latency, and the consumer that receives the
    /// run's last message completes the run; anything else is stale.
    pub(crate) fn record(
        &mut self,
        run: &Run,
        phase: &watch::Sender<Phase>,
        stamp: Option<payload::Stamp>,
        received_at: u64,
    ) {
        match stamp {
            Some(stamp) if stamp.run_id == run.id => {
                let nanos = received_at.saturating_sub(stamp.sent_at);
                self.latencies_us.push(nanos / 1_000);
                let received = run.counters.received.fetch_add(1, Ordering::Relaxed) + 1;
                if received == run.options.expected_received() {
                    self.completed_at = Some(Instant::now());
                    phase.send_if_modified(|phase| {
                        let running = *phase == Phase::Running;
                        if running {
                            *phase = Phase::Complete;
                        }
                        running
                    });
                }
            }
            _ => self.stale += 1,
        }
    }
}

impl Participant for Consumer {
    type Kind = Consuming;

    /// Connects consumer number `index` of the run, attaches its receiver to the address and
    /// grants the credit.
    async fn attach(run: &Run, index: u32) -> Result<Consumer> {
        let name = run.link_name('c', index);
        let address = run.options.receive_address(index);
        let mut link = run.endpoint(index).connect(&name, address).await?;
        // Manual credit: fe2o3-amqp's automatic mode only tops up on dispositions, which a
        // receive-and-delete consumer never sends.
        let mut receiver = Receiver::builder()
            .name(format!("{name}-receiver"))
            .source(address.to_owned())
            .sender_settle_mode(run.options.mode.sender_settle_mode())
            .receiver_settle_mode(ReceiverSettleMode::First)
            .credit_mode(CreditMode::Manual)
            .attach(&mut link.session)
            .await
            .with_context(|| format!("{name}: attaching a receiver to {address}"))?;
        receiver
            .set_credit(run.options.credit)
            .await
            .with_context(|| format!("{name}: granting credit"))?;
        Ok(Consumer { name, link, receiver })
    }

    fn name(&self) -> &str {
        &self.name
    }

    /// Receives (and in peek-lock mode accepts) until the run has received every message or is
    /// aborted.
    async fn work(
        &mut self,
        run: &Run,
        phase: &mut watch::Sender<Phase>,
        report: &mut ConsumerReport,
    ) -> Result<()> {
        let credit = run.options.credit;
        let top_up_after = run.options.top_up_after();
        let mut used = 0;
        let mut watcher = phase.subscribe();
        // Received, not yet accepted (peek-lock): accepted together, as ranges.
        let batch = run.options.accept_batch as usize;
        let mut unaccepted: Vec<DeliveryInfo> = Vec::with_capacity(batch);
        loop {
            if *watcher.borrow_and_update() != Phase::Running {
                return self.accept(&mut unaccepted).await;
            }
            // A message that is already waiting is taken at once; before waiting for the next,
            // the consumer accepts what it holds.
            let waiting = self.receiver.recv::<Data>().now_or_never();
            let delivery = match waiting {
                Some(delivery) => delivery.context("receiving")?,
                None => {
                    self.accept(&mut unaccepted).await?;
                    tokio::select! {
                        delivery = self.receiver.recv::<Data>() => delivery.context("receiving")?,
                        _ = watcher.changed() => continue,
                    }
                }
            };
            let received_at = payload::now_nanos();
            if run.options.mode == Mode::PeekLock {
                unaccepted.push(DeliveryInfo::from(&delivery));
                if unaccepted.len() >= batch {
                    self.accept(&mut unaccepted).await?;
                }
            }
            used += 1;
            if used >= top_up_after {
                self.receiver.set_credit(credit).await.context("topping up credit")?;
                used = 0;
            }
            report.record(run, phase, payload::read(&delivery.body().0), received_at);
        }
    }

    async fn close(self) {
        // Detach rather than close: RabbitMQ 3.x answers a closing detach with closed = false,
        // which fe2o3-amqp reports as an illegal state.
        if let Err((_, err)) = self.receiver.detach().await {
            eprintln!("ironbus-bench: {}: detaching: {err}", self.name);
        }
        self.link.close(&self.name).await;
    }
}

impl Consumer {
    /// Accepts the deliveries held (consecutive ones in one disposition range).
    async fn accept(&self, unaccepted: &mut Vec<DeliveryInfo>) -> Result<()> {
        match unaccepted.len() {
            0 => Ok(()),
            1 => {
                let delivery = unaccepted.pop().expect("one delivery");
                self.receiver.accept(delivery).await.context("accepting")
            }
            _ => self.receiver.accept_all(unaccepted.drain(..)).await.context("accepting"),
        }
    }
}
