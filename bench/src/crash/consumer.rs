//! A crash-test consumer: a peek-lock receiver with manual credit; it takes what has arrived (up
//! to the credit), completes the batch through `$management` and waits for the confirmation, then
//! repeats. On any failure it reconnects with backoff; deliveries whose completion was not
//! confirmed may come again, which is expected.
//!
//! Invariant: the ledger hears of every delivery before its completion is requested, and of a
//! completion's confirmation only after the broker's answer.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use fe2o3_amqp::{
    link::receiver::CreditMode,
    session::SessionHandle,
    types::{
        definitions::{ReceiverSettleMode, SenderSettleMode},
        messaging::{Body, MessageId},
        primitives::Value,
    },
    Receiver,
};
use ironbus_transport_amqp::codec::delivery_tag_to_lock_token;
use tokio::time::timeout;

use crate::{
    completer::{Answer, Completer},
    ledger::Delivery,
    Backoff, Shared, POLL, REQUEST_TIMEOUT,
};

/// Consumer `.0` of the run (its connections' names tell which; it connects to URL `.0 mod n`).
#[derive(Debug)]
pub(crate) struct Consumer(pub(crate) u32);

impl crate::Connected for Consumer {
    /// One connection's life. `Ok` when the run is done; `Err` on any failure.
    async fn connected(&self, shared: &Shared, name: &str, backoff: &mut Backoff) -> Result<()> {
        let options = &shared.options;
        let address = options.receive_address();
        let mut link = shared.connect(self.0, name, address).await?;
        let mut receiver = attach_receiver(&mut link.session, name, address).await?;
        let mut completer =
            timeout(REQUEST_TIMEOUT, Completer::attach(&mut link.session, name, address))
                .await
                .context("attaching the management links timed out")??;
        receiver.set_credit(options.credit).await.context("granting credit")?;
        let _attached = shared.consumer_attached();
        backoff.reset();

        let mut phase = shared.phase.subscribe();
        let batch_limit = usize::try_from(options.credit).unwrap_or(usize::MAX);
        let top_up_after = (options.credit / 2).max(1);
        let mut used = 0u32;
        while crate::still_consuming(&mut phase, &link.connection)? {
            // The first delivery waits (briefly); the rest of the batch is what already arrived.
            let mut batch = Vec::new();
            let mut wait = POLL;
            while batch.len() < batch_limit {
                match timeout(wait, receiver.recv::<Body<Value>>()).await {
                    Err(_elapsed) => break,
                    Ok(delivery) => batch.push(delivery.context("receiving")?),
                }
                wait = Duration::ZERO;
            }
            if batch.is_empty() {
                continue;
            }
            shared.touch();

            let mut tokens = Vec::with_capacity(batch.len());
            let mut ids = Vec::with_capacity(batch.len());
            {
                let mut ledger = shared.ledger();
                for delivery in &batch {
                    let properties = delivery.message().properties.as_ref();
                    let id = message_id(properties.and_then(|p| p.message_id.as_ref()));
                    match ledger.deliver(id.as_deref()) {
                        Delivery::AfterCompletion => eprintln!(
                            "ironbus-crash: {name}: DUPLICATE: {} delivered after its completion \
                             was confirmed",
                            id.as_deref().unwrap_or("<none>")
                        ),
                        Delivery::Unknown => eprintln!(
                            "ironbus-crash: {name}: UNKNOWN: {} was never sent",
                            id.as_deref().unwrap_or("<none>")
                        ),
                        Delivery::First | Delivery::Redelivery => {}
                    }
                    let tag: &[u8] = delivery.delivery_tag().as_ref();
                    let token = delivery_tag_to_lock_token(tag).with_context(|| {
                        format!("delivery tag of {} bytes is not a lock token", tag.len())
                    })?;
                    tokens.push(*token.as_bytes());
                    if let Some(id) = id {
                        ledger.completion_requested(&id);
                        ids.push(id);
                    }
                }
            }
            let answer = tokio::select! {
                answer = timeout(REQUEST_TIMEOUT, completer.complete(&tokens)) => {
                    answer.context("completion timed out")??
                }
                () = crate::closed(&link.connection) => {
                    bail!("the connection closed awaiting a completion")
                }
            };
            match answer {
                Answer::Completed => {
                    let mut ledger = shared.ledger();
                    for id in &ids {
                        ledger.completion_confirmed(id);
                    }
                }
                Answer::Refused { status, description } => {
                    // The broker settles a batch token by token and stops at the first failure:
                    // with one token the refusal is definite; with more, which ones went through
                    // is unknown, so they stay in doubt (their completion requested).
                    if let [id] = ids.as_slice() {
                        shared.ledger().completion_refused(id);
                    }
                    // Start over on a new connection, which lets the broker release the rest.
                    bail!("completion of {} refused ({status:?}): {description}", ids.len());
                }
            }
            shared.touch();
            used += u32::try_from(batch.len()).unwrap_or(u32::MAX);
            if used >= top_up_after {
                receiver.set_credit(options.credit).await.context("topping up credit")?;
                used = 0;
            }
        }
        let closing = async {
            let _ = receiver.detach().await;
            link.close(name).await;
        };
        let _ = timeout(Duration::from_secs(5), closing).await;
        Ok(())
    }
}

/// Attaches a peek-lock receiver with manual credit, `<name>-receiver`, to `source`, within
/// `REQUEST_TIMEOUT`.
pub(crate) async fn attach_receiver(
    session: &mut SessionHandle<()>,
    name: &str,
    source: &str,
) -> Result<Receiver> {
    timeout(
        REQUEST_TIMEOUT,
        Receiver::builder()
            .name(format!("{name}-receiver"))
            .source(source.to_owned())
            .sender_settle_mode(SenderSettleMode::Unsettled)
            .receiver_settle_mode(ReceiverSettleMode::First)
            .credit_mode(CreditMode::Manual)
            .attach(session),
    )
    .await
    .context("attaching timed out")?
    .with_context(|| format!("attaching a receiver to {source}"))
}

/// The MessageId as text (`None` if absent).
pub(crate) fn message_id(id: Option<&MessageId>) -> Option<String> {
    match id? {
        MessageId::String(text) => Some(text.clone()),
        other => Some(format!("{other:?}")),
    }
}
