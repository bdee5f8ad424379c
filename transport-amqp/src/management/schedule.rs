//! `com.microsoft:schedule-message`: enqueues encoded messages at their
//! `x-opt-scheduled-enqueue-time`, answers their sequence numbers.

use fe2o3_amqp_types::primitives::{Array, Value};
use ironbus_core::{Broker, EntityAddress, SendOutcome, Transaction};

use crate::codec;
use crate::error::WireError;
use crate::request::Request;

use super::fields::*;
use super::Outcome;

pub(super) async fn execute(
    broker: Broker,
    address: EntityAddress,
    request: &Request,
    txn: Option<&Transaction>,
) -> Result<Outcome, WireError> {
    let (Some(Value::List(entries)) | Some(Value::Array(Array(entries)))) =
        request.field("messages").cloned()
    else {
        return Err(WireError::bad_request("schedule-message needs a list of messages"));
    };
    let mut messages = Vec::with_capacity(entries.len());
    for entry in &entries {
        let Value::Map(fields) = entry else {
            return Err(WireError::bad_request("each scheduled message must be a map"));
        };
        let Some(Value::Binary(bytes)) = fields.get(&Value::String("message".into())) else {
            return Err(WireError::bad_request("a scheduled message needs its encoded message"));
        };
        let message = codec::decode_message(bytes::Bytes::copy_from_slice(bytes))
            .map_err(|e| WireError::new("amqp:decode-error", 400, e.to_string()))?;
        if message.properties.scheduled_enqueue_time.is_none() {
            return Err(WireError::bad_request(
                "a scheduled message needs x-opt-scheduled-enqueue-time",
            ));
        }
        messages.push(message);
    }
    if let Some(txn) = txn {
        // Numbered now, stored at commit.
        let seqs = broker.schedule_in_transaction(txn, &address, messages).await?;
        let numbers = seqs.into_iter().map(|seq| Value::Long(seq.0)).collect();
        return Ok(Outcome::ok(Some(map([("sequence-numbers", Value::Array(Array(numbers)))]))));
    }
    let outcomes = broker.schedule(address, messages).await?;
    let numbers = outcomes
        .into_iter()
        .map(|o| match o {
            SendOutcome::Enqueued(seq) => Value::Long(seq.0),
            // A duplicate was dropped; Service Bus answers with no usable number.
            SendOutcome::Duplicate => Value::Long(0),
        })
        .collect();
    Ok(Outcome::ok(Some(map([("sequence-numbers", Value::Array(Array(numbers)))]))))
}
