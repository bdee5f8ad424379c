//! `com.microsoft:batch-delete-messages` (the SDKs' `deleteMessages` and `purgeMessages`):
//! deletes up to `message-count` messages enqueued before `enqueued-time-utc`, without
//! receiving them, from the node's entity (its main queue or a dead-letter queue); with
//! `session-id`, only that session's. Answers `message-count`: how many were deleted (200 even
//! for none). Which messages go is the core's rule (`Broker::delete_messages`): active and
//! deferred ones, never locked or scheduled ones.

use fe2o3_amqp_types::primitives::Value;
use ironbus_core::{Broker, EntityAddress, Timestamp, MAX_DELETE_MESSAGES};

use crate::error::{WireError, ARGUMENT_OUT_OF_RANGE};
use crate::request::Request;

use super::fields::*;
use super::Outcome;

pub(super) async fn execute(
    broker: Broker,
    address: EntityAddress,
    request: &Request,
) -> Result<Outcome, WireError> {
    let count = int(request, "message-count")?;
    let max = usize::try_from(count)
        .ok()
        .filter(|n| (1..=MAX_DELETE_MESSAGES).contains(n))
        .ok_or_else(|| {
            WireError::new(
                ARGUMENT_OUT_OF_RANGE,
                400,
                format!(
                    "message-count is {count}; one batch delete deletes 1 to \
                     {MAX_DELETE_MESSAGES} messages"
                ),
            )
        })?;
    // The SDKs always send the cutoff (their default is the time of the call); without one,
    // every message enqueued so far is old enough.
    let before = match request.field("enqueued-time-utc") {
        Some(Value::Timestamp(t)) => Timestamp::from_millis(t.milliseconds()),
        None | Some(Value::Null) => Timestamp::MAX,
        Some(_) => {
            return Err(WireError::bad_request("enqueued-time-utc must be a timestamp"));
        }
    };
    let session = match request.field("session-id") {
        Some(Value::String(id)) => Some(id.as_str()),
        None | Some(Value::Null) => None,
        Some(_) => return Err(WireError::bad_request("session-id must be a string")),
    };
    let deleted = broker.delete_messages(address, max, before, session).await?;
    let deleted = i32::try_from(deleted).unwrap_or(i32::MAX);
    Ok(Outcome::ok(Some(map([("message-count", Value::Int(deleted))]))))
}
