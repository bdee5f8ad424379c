//! `com.microsoft:receive-by-sequence-number`: receives deferred messages by sequence number.

use fe2o3_amqp_types::primitives::{Binary, Value};
use std::sync::Arc;

use ironbus_core::SessionReceiver;
use ironbus_core::{Broker, EntityAddress, ReceiveMode, SessionError};

use crate::codec;
use crate::error::WireError;
use crate::request::Request;

use super::fields::*;
use super::Outcome;

pub(super) async fn execute(
    broker: Broker,
    address: EntityAddress,
    request: &Request,
    held: Option<Arc<SessionReceiver>>,
) -> Result<Outcome, WireError> {
    let seqs = sequence_numbers(request)?;
    let mode = match request.field("receiver-settle-mode").and_then(as_i64) {
        Some(0) => ReceiveMode::ReceiveAndDelete,
        _ => ReceiveMode::PeekLock,
    };
    // A session's deferred messages are received under the session lock the caller holds.
    let received = match request.field("session-id") {
        Some(Value::String(id)) if !id.is_empty() => {
            let held = held.ok_or(SessionError::LockLost)?;
            held.receive_deferred(&seqs, mode).await?
        }
        _ => broker.receive_deferred(address, &seqs, mode).await?,
    };
    let messages = received
        .iter()
        .map(|m| {
            let token = m.lock_token().map(|t| t.0).unwrap_or_else(uuid::Uuid::nil);
            map([
                ("lock-token", Value::Uuid((*token.as_bytes()).into())),
                (
                    "message",
                    Value::Binary(Binary::from(
                        codec::encode_delivery(m, codec::DeliveryOptions::default()).to_vec(),
                    )),
                ),
            ])
        })
        .collect();
    Ok(Outcome::ok(Some(map([("messages", Value::List(messages))]))))
}
