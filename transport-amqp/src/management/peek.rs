//! `com.microsoft:peek-message`: up to `message-count` messages from `from-sequence-number`,
//! without locking them.

use fe2o3_amqp_types::primitives::{Binary, Value};
use ironbus_core::{Broker, EntityAddress, SequenceNumber};

use crate::codec;
use crate::error::WireError;
use crate::request::Request;

use super::fields::*;
use super::Outcome;

pub(super) async fn execute(
    broker: Broker,
    address: EntityAddress,
    request: &Request,
) -> Result<Outcome, WireError> {
    let from = int(request, "from-sequence-number")?;
    let count = int(request, "message-count")?.clamp(0, 1000) as usize;
    let peeked = match request.field("session-id") {
        Some(Value::String(id)) if !id.is_empty() => {
            broker.peek_session(address, id, SequenceNumber(from), count.max(1)).await?
        }
        _ => broker.peek(address, SequenceNumber(from), count.max(1)).await?,
    };
    if peeked.is_empty() {
        return Ok(Outcome::no_content());
    }
    let messages = peeked
        .iter()
        .map(|m| {
            map([(
                "message",
                Value::Binary(Binary::from(
                    codec::encode_delivery(m, codec::DeliveryOptions::default()).to_vec(),
                )),
            )])
        })
        .collect();
    Ok(Outcome::ok(Some(map([("messages", Value::List(messages))]))))
}
