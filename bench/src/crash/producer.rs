//! A crash-test producer: durable sends with MessageIds `<run>-p<index>-<n>` (the run id keeps
//! a rerun against the same queue clear of the earlier run's duplicate detection), at most `--window`
//! unacknowledged; on any failure it reconnects (with backoff) and sends every unacknowledged
//! message again with the same MessageId.
//!
//! Invariant: a MessageId leaves `pending` only when the broker answered a send of it with
//! `Accepted`; until then it is re-sent on every new connection.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use anyhow::{bail, Context, Result};
use fe2o3_amqp::{
    types::{
        definitions::{ReceiverSettleMode, SenderSettleMode},
        messaging::{Data, Header, Message, Outcome, Properties},
        primitives::Binary,
    },
    Sender,
};
use futures_util::{stream::FuturesUnordered, StreamExt};
use tokio::time::timeout;

use crate::{Phase, Shared};

/// How long an outcome may take before the connection is considered dead.
const OUTCOME_TIMEOUT: Duration = Duration::from_secs(15);

/// One producer's state across connections.
#[derive(Debug)]
pub(crate) struct Producer {
    /// Its index: it connects to URL `index mod n`.
    index: u32,
    /// `<run>-p<index>`, the MessageIds' prefix.
    prefix: String,
    /// The next new message number.
    next: u64,
    /// Message numbers sent (at least once) but not acknowledged.
    pending: BTreeSet<u64>,
}

impl Producer {
    pub(crate) fn new(run: &str, index: u32) -> Producer {
        Producer { index, prefix: format!("{run}-p{index}"), next: 0, pending: BTreeSet::new() }
    }

    fn id(&self, n: u64) -> String {
        format!("{}-{n}", self.prefix)
    }

    /// Sends until told to finish and everything sent is acknowledged, reconnecting as needed.
    /// Returns only then, or when the run is aborted.
    pub(crate) async fn run(mut self, shared: Arc<Shared>) -> Result<()> {
        let mut phase = shared.phase.subscribe();
        let mut backoff = crate::Backoff::default();
        let mut connection = 0u64;
        loop {
            let current = *phase.borrow_and_update();
            if current == Phase::Aborted {
                bail!("aborted with {} sends unacknowledged", self.pending.len());
            }
            if current != Phase::Running && self.pending.is_empty() {
                return Ok(());
            }
            connection += 1;
            let name = format!("crash-{}-{connection}", self.prefix);
            match self.connected(&shared, &name, &mut backoff).await {
                Ok(()) => return Ok(()),
                Err(err) => {
                    let stop = |p: &Phase| *p == Phase::Aborted;
                    shared
                        .pause_before_reconnecting(&name, &err, &mut backoff, &mut phase, stop)
                        .await;
                }
            }
        }
    }

    /// One connection's life: re-send what is pending, then new messages while running. `Ok`
    /// when finished (told to stop and nothing pending); `Err` on any failure.
    async fn connected(
        &mut self,
        shared: &Shared,
        name: &str,
        backoff: &mut crate::Backoff,
    ) -> Result<()> {
        let options = &shared.options;
        let mut link = shared.connect(self.index, name, &options.address).await?;
        let mut sender = timeout(
            OUTCOME_TIMEOUT,
            Sender::builder()
                .name(format!("{name}-sender"))
                .target(options.address.clone())
                .sender_settle_mode(SenderSettleMode::Unsettled)
                .receiver_settle_mode(ReceiverSettleMode::First)
                .attach(&mut link.session),
        )
        .await
        .context("attaching timed out")?
        .with_context(|| format!("attaching a sender to {}", options.address))?;
        backoff.reset();

        let mut phase = shared.phase.subscribe();
        let window = usize::try_from(options.window).unwrap_or(usize::MAX);
        let mut retries: Vec<u64> = self.pending.iter().copied().collect();
        retries.reverse();
        let mut in_flight = FuturesUnordered::new();
        loop {
            let running = *phase.borrow_and_update() == Phase::Running;
            if *phase.borrow() == Phase::Aborted {
                bail!("aborted");
            }
            let next = match retries.last() {
                Some(&n) => Some(n),
                None if running => Some(self.next),
                None => None,
            };
            if next.is_none() && in_flight.is_empty() {
                break;
            }
            match next {
                Some(n) if in_flight.len() < window => {
                    let id = self.id(n);
                    shared.ledger().attempt(&id);
                    if retries.last() == Some(&n) {
                        retries.pop();
                    } else {
                        self.next += 1;
                        self.pending.insert(n);
                    }
                    let message = Message::builder()
                        .header(Header { durable: true, ..Header::default() })
                        .properties(Properties::builder().message_id(id).build())
                        .body(Data(Binary::from(vec![0x5A; options.size])))
                        .build();
                    let delivery = tokio::select! {
                        sent = timeout(OUTCOME_TIMEOUT, sender.send_batchable(message)) => {
                            sent.context("sending timed out")?.context("sending")?
                        }
                        () = crate::closed(&link.connection) => bail!("the connection closed"),
                    };
                    in_flight.push(async move { (n, timeout(OUTCOME_TIMEOUT, delivery).await) });
                    if options.rate > 0 {
                        tokio::time::sleep(Duration::from_secs_f64(1.0 / f64::from(options.rate)))
                            .await;
                    }
                }
                _ => {
                    tokio::select! {
                        Some((n, outcome)) = in_flight.next() => {
                            let outcome = outcome
                                .context("awaiting an outcome timed out")?
                                .context("awaiting an outcome")?;
                            match outcome {
                                Outcome::Accepted(_) => {
                                    self.pending.remove(&n);
                                    shared.ledger().acknowledge(&self.id(n));
                                }
                                other => bail!("{} was not accepted: {other:?}", self.id(n)),
                            }
                        }
                        _ = phase.changed() => {}
                        () = crate::closed(&link.connection) => bail!("the connection closed"),
                    }
                }
            }
        }
        let closing = async {
            let _ = sender.detach().await;
            link.close(name).await;
        };
        let _ = timeout(Duration::from_secs(5), closing).await;
        Ok(())
    }
}
