//! Confirmed completion: `com.microsoft:update-disposition` with `disposition-status =
//! completed` on the entity's `$management` node, for a batch of lock tokens.
//!
//! Why not the receive link's disposition: ironbus confirms an unsettled `Accepted` disposition
//! with a settled echo, but fe2o3-amqp's receiver does not surface that echo to the application,
//! so a completion sent that way can never be known to have happened. The management request has
//! a response (`statusCode` 200) that the broker sends only after every settlement of the batch
//! was carried out through its store — the same `settle` the link path takes.

use anyhow::{bail, Context, Result};
use fe2o3_amqp::{
    session::SessionHandle,
    types::{
        definitions::{ReceiverSettleMode, SenderSettleMode},
        messaging::{ApplicationProperties, Body, Message, MessageId, Outcome, Properties},
        primitives::{Array, OrderedMap, SimpleValue, Uuid, Value},
    },
    Receiver, Sender,
};

use crate::cbs::integer;

/// A request/response link pair on `<address>/$management`.
#[derive(Debug)]
pub(crate) struct Completer {
    name: String,
    sender: Sender,
    receiver: Receiver,
    reply_to: String,
    next_request: u64,
}

/// What the broker answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Every lock token of the batch was completed.
    Completed,
    /// The request failed (some tokens may have been completed before the failing one).
    Refused { status: Option<i64>, description: String },
}

impl Completer {
    /// Attaches the pair, named after `name`, on `session`.
    pub(crate) async fn attach(
        session: &mut SessionHandle<()>,
        name: &str,
        address: &str,
    ) -> Result<Completer> {
        let node = format!("{address}/$management");
        let reply_to = format!("{name}-management-reply");
        let sender = Sender::builder()
            .name(format!("{name}-management-sender"))
            .target(node.clone())
            .sender_settle_mode(SenderSettleMode::Unsettled)
            .receiver_settle_mode(ReceiverSettleMode::First)
            .attach(session)
            .await
            .with_context(|| format!("attaching a sender to {node}"))?;
        let receiver = Receiver::builder()
            .name(format!("{name}-management-receiver"))
            .source(node.clone())
            .target(reply_to.clone())
            .attach(session)
            .await
            .with_context(|| format!("attaching a receiver to {node}"))?;
        Ok(Completer { name: name.to_owned(), sender, receiver, reply_to, next_request: 0 })
    }

    /// Completes the messages locked by `lock_tokens` (UUIDs, 16 bytes each: what ironbus'
    /// `codec::delivery_tag_to_lock_token` reads from a delivery tag) and waits for the answer.
    /// An `Err` means the answer never came (the connection failed).
    pub(crate) async fn complete(&mut self, lock_tokens: &[[u8; 16]]) -> Result<Answer> {
        self.next_request += 1;
        let request_id = format!("{}-{}", self.name, self.next_request);
        let tokens: Vec<Value> =
            lock_tokens.iter().map(|token| Value::Uuid(Uuid::from(*token))).collect();
        let mut body = OrderedMap::new();
        body.insert(Value::from("disposition-status"), Value::from("completed"));
        body.insert(Value::from("lock-tokens"), Value::Array(Array(tokens)));
        let request = Message::builder()
            .properties(
                Properties::builder()
                    .message_id(request_id.clone())
                    .reply_to(self.reply_to.clone())
                    .build(),
            )
            .application_properties(
                ApplicationProperties::builder()
                    .insert("operation", "com.microsoft:update-disposition")
                    .build(),
            )
            .value(Value::Map(body))
            .build();
        match self.sender.send(request).await.context("sending update-disposition")? {
            Outcome::Accepted(_) => {}
            other => bail!("update-disposition request not accepted: {other:?}"),
        }
        // Answers to earlier requests (whose wait was cut short) are skipped by correlation id.
        loop {
            let response = self
                .receiver
                .recv::<Body<Value>>()
                .await
                .context("awaiting the update-disposition response")?;
            self.receiver.accept(&response).await.context("settling the response")?;
            let message = response.message();
            let correlation = message.properties.as_ref().and_then(|p| p.correlation_id.as_ref());
            if !matches!(correlation, Some(MessageId::String(id)) if *id == request_id) {
                continue;
            }
            let properties = message.application_properties.as_ref();
            let status = properties.and_then(|p| p.get("statusCode")).and_then(integer);
            if status == Some(200) {
                return Ok(Answer::Completed);
            }
            let description = match properties.and_then(|p| p.get("statusDescription")) {
                Some(SimpleValue::String(text)) => text.clone(),
                other => format!("{other:?}"),
            };
            return Ok(Answer::Refused { status, description });
        }
    }
}
