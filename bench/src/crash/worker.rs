//! A crash-test worker (the transaction scenario): it receives a seed message from `--address`
//! in peek-lock mode and, in **one transaction**, sends two derived messages through
//! `--address` to `--transfer-to` (a send-via link: target `--address`, link property
//! `com.microsoft:transfer-destination-address`) and accepts the seed; then it commits. One
//! seed at a time per worker.
//!
//! Derived messages are `<seed>/a` and `<seed>/b`, with the seed's id as PartitionKey (so they
//! route to the seed's partition of the via queue, as Service Bus requires of a transaction on
//! a partitioned entity). The ledger hears: the seed's delivery; before the discharge, the
//! derived ids as attempted and the seed's completion as requested; after a commit the broker
//! confirmed, the seed as completed and both derived ids as acknowledged; after a refused
//! commit, the seed's completion as refused. A commit whose answer a crash cut off, or that
//! got no answer within `REQUEST_TIMEOUT`, stays in doubt: the verdict's pairing check (each
//! acknowledged seed yields exactly one `a` and one `b` at the destination) decides whether the
//! broker kept it whole. A transaction under way keeps the drain from ending.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use fe2o3_amqp::{
    transaction::{
        Controller, Transaction, TransactionDischarge, TransactionPosting, TransactionRetirement,
    },
    types::{
        definitions::{Fields, ReceiverSettleMode, SenderSettleMode},
        messaging::{Body, Data, Header, Message, Outcome, Properties},
        primitives::{Binary, Symbol, Value},
    },
    Sender,
};
use tokio::time::timeout;

use crate::{
    consumer::{attach_receiver, message_id},
    ledger::Delivery,
    Backoff, Shared, POLL, REQUEST_TIMEOUT,
};

/// The link property naming a send-via link's final destination.
const TRANSFER_DESTINATION: &str = "com.microsoft:transfer-destination-address";

/// Transactional worker `.0` of the run (its connections' names tell which; it connects to URL
/// `.0 mod n`).
#[derive(Debug)]
pub(crate) struct Worker(pub(crate) u32);

impl crate::Connected for Worker {
    /// One connection's life. `Ok` when the run is done; `Err` on any failure.
    async fn connected(&self, shared: &Shared, name: &str, backoff: &mut Backoff) -> Result<()> {
        let options = &shared.options;
        let via = options.address.as_str();
        let destination = options.transfer_to.as_deref().context("no --transfer-to")?;
        let mut link = shared.connect(self.0, name, via).await?;
        let controller =
            timeout(REQUEST_TIMEOUT, Controller::attach(&mut link.session, format!("{name}-txn")))
                .await
                .context("attaching the controller timed out")?
                .context("attaching the controller")?;
        let mut receiver = attach_receiver(&mut link.session, name, via).await?;
        let mut properties = Fields::new();
        properties.insert(Symbol::from(TRANSFER_DESTINATION), Value::String(destination.into()));
        let mut sender = timeout(
            REQUEST_TIMEOUT,
            Sender::builder()
                .name(format!("{name}-via"))
                .target(via.to_owned())
                .properties(properties)
                .sender_settle_mode(SenderSettleMode::Unsettled)
                .receiver_settle_mode(ReceiverSettleMode::First)
                .attach(&mut link.session),
        )
        .await
        .context("attaching timed out")?
        .with_context(|| format!("attaching a send-via link to {via} for {destination}"))?;
        receiver.set_credit(1).await.context("granting credit")?;
        let _attached = shared.consumer_attached();
        backoff.reset();

        let mut phase = shared.phase.subscribe();
        while crate::still_consuming(&mut phase, &link.connection)? {
            let delivery = match timeout(POLL, receiver.recv::<Body<Value>>()).await {
                Err(_elapsed) => continue,
                Ok(delivery) => delivery.context("receiving")?,
            };
            shared.touch();
            let properties = delivery.message().properties.as_ref();
            let seed = message_id(properties.and_then(|p| p.message_id.as_ref()))
                .context("a seed without MessageId")?;
            match shared.ledger().deliver(Some(&seed)) {
                Delivery::AfterCompletion => eprintln!(
                    "ironbus-crash: {name}: DUPLICATE: {seed} delivered after its transaction \
                     committed"
                ),
                Delivery::Unknown => eprintln!("ironbus-crash: {name}: UNKNOWN: {seed}"),
                Delivery::First | Delivery::Redelivery => {}
            }
            let derived = [format!("{seed}/a"), format!("{seed}/b")];
            let _working = shared.working();
            let work = async {
                let txn = Transaction::declare(&controller, None).await.context("declaring")?;
                for id in &derived {
                    shared.ledger().attempt(id);
                    let message = Message::builder()
                        .header(Header { durable: true, ..Header::default() })
                        .properties(Properties::builder().message_id(id.clone()).build())
                        .message_annotations(partition_key(&seed))
                        .body(Data(Binary::from(id.as_bytes().to_vec())))
                        .build();
                    match txn.post(&mut sender, message).await.context("posting")? {
                        Outcome::Accepted(_) => {}
                        other => bail!("a transactional send of {id} was not accepted: {other:?}"),
                    }
                }
                txn.accept(&mut receiver, &delivery).await.context("accepting")?;
                shared.ledger().completion_requested(&seed);
                txn.commit().await.context("committing")
            };
            let outcome = tokio::select! {
                outcome = timeout(REQUEST_TIMEOUT, work) => match outcome {
                    Ok(outcome) => outcome,
                    // No answer: a commit may still land, as when the connection is cut.
                    Err(_elapsed) => bail!("{seed}: the transaction timed out (in doubt)"),
                },
                () = crate::closed(&link.connection) => {
                    bail!("the connection closed during a transaction")
                }
            };
            match outcome {
                Ok(()) => {
                    let mut ledger = shared.ledger();
                    ledger.completion_confirmed(&seed);
                    for id in &derived {
                        ledger.acknowledge(id);
                    }
                }
                Err(err) => {
                    // A refused send or commit is definite; a transport failure is in doubt
                    // (the connection is gone and the next loop turn finds out).
                    if !link.connection.is_closed() {
                        shared.ledger().completion_refused(&seed);
                    }
                    bail!("{seed}: {err:#}");
                }
            }
            shared.touch();
            receiver.set_credit(1).await.context("topping up credit")?;
        }
        let closing = async {
            let _ = receiver.detach().await;
            let _ = sender.detach().await;
            let _ = controller.close().await;
            link.close(name).await;
        };
        let _ = timeout(Duration::from_secs(5), closing).await;
        Ok(())
    }
}

/// The message annotations that carry a PartitionKey (`x-opt-partition-key`).
fn partition_key(key: &str) -> fe2o3_amqp::types::messaging::MessageAnnotations {
    let mut annotations = fe2o3_amqp::types::messaging::MessageAnnotations::default();
    annotations.insert(
        fe2o3_amqp::types::messaging::annotations::OwnedKey::from(Symbol::from(
            "x-opt-partition-key",
        )),
        Value::String(key.to_owned()),
    );
    annotations
}
