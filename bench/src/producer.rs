//! A producer: one connection, one sender link, up to `window` unsettled sends in flight.

use std::{sync::atomic::Ordering, time::Instant};

use anyhow::{bail, Context, Result};
use fe2o3_amqp::{
    types::{
        definitions::{ReceiverSettleMode, SenderSettleMode},
        messaging::{Data, Header, Message, Outcome},
        primitives::Binary,
    },
    Sender,
};
use futures_util::{stream::FuturesUnordered, StreamExt};
use tokio::sync::watch;

use crate::{endpoint::Link, payload, Participant, Phase, Producing, Run};

/// A producer, connected and attached, that has not sent yet.
#[derive(Debug)]
pub(crate) struct Producer {
    name: String,
    link: Link,
    sender: Sender,
    /// Messages this producer sends.
    count: u64,
}

/// What a producer did.
#[derive(Debug, Default)]
pub(crate) struct ProducerReport {
    /// When the broker acknowledged its last message (`None` if it did not get that far).
    pub finished_at: Option<Instant>,
}

impl Participant for Producer {
    type Kind = Producing;

    /// Connects producer number `index` of the run and attaches its sender to the address.
    async fn attach(run: &Run, index: u32) -> Result<Producer> {
        let name = run.link_name('p', index);
        let mut link = run.endpoint(index).connect(&name, &run.options.address).await?;
        let sender = Sender::builder()
            .name(format!("{name}-sender"))
            .target(run.options.address.clone())
            .sender_settle_mode(SenderSettleMode::Unsettled)
            .receiver_settle_mode(ReceiverSettleMode::First)
            .attach(&mut link.session)
            .await
            .with_context(|| format!("{name}: attaching a sender to {}", run.options.address))?;
        Ok(Producer { name, link, sender, count: run.options.share(index) })
    }

    fn name(&self) -> &str {
        &self.name
    }

    /// Sends this producer's share, keeping at most `window` sends unsettled, until all are
    /// acknowledged or the run is aborted.
    async fn work(
        &mut self,
        run: &Run,
        phase: &mut watch::Receiver<Phase>,
        report: &mut ProducerReport,
    ) -> Result<()> {
        let window = usize::try_from(run.options.window).unwrap_or(usize::MAX);
        let size = usize::try_from(run.options.size).unwrap_or(usize::MAX);
        let header = run.options.durable.then(|| Header { durable: true, ..Header::default() });
        let mut in_flight = FuturesUnordered::new();
        let mut sent = 0;
        while sent < self.count || !in_flight.is_empty() {
            if sent < self.count && in_flight.len() < window {
                let body = payload::body(size, payload::now_nanos(), run.id);
                let message = Message::builder()
                    .header(header.clone())
                    .body(Data(Binary::from(body)))
                    .build();
                tokio::select! {
                    delivery = self.sender.send_batchable(message) => {
                        in_flight.push(delivery.context("sending")?);
                        sent += 1;
                    }
                    _ = aborted(phase) => return Ok(()),
                }
            } else {
                tokio::select! {
                    Some(outcome) = in_flight.next() => {
                        match outcome.context("awaiting an outcome")? {
                            Outcome::Accepted(_) => {}
                            other => bail!("a message was not accepted: {other:?}"),
                        }
                        run.counters.acknowledged.fetch_add(1, Ordering::Relaxed);
                    }
                    _ = aborted(phase) => return Ok(()),
                }
            }
        }
        report.finished_at = Some(Instant::now());
        Ok(())
    }

    async fn close(self) {
        // Detach rather than close: RabbitMQ 3.x answers a closing detach with closed = false,
        // which fe2o3-amqp reports as an illegal state.
        if let Err((_, err)) = self.sender.detach().await {
            eprintln!("ironbus-bench: {}: detaching: {err}", self.name);
        }
        self.link.close(&self.name).await;
    }
}

/// Resolves when the run is aborted (producers ignore completion: they still await outcomes).
pub(crate) async fn aborted(phase: &mut watch::Receiver<Phase>) {
    // An error means the run's controller is gone: stop as if aborted.
    let _ = phase.wait_for(|phase| *phase == Phase::Aborted).await;
}
