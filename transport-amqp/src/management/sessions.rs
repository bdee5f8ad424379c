//! The session operations (`com.microsoft:renew-session-lock`, `get-session-state`,
//! `set-session-state`, `get-message-sessions`), amqp.md §6.3.
//!
//! Renewing a session lock and getting or setting its state need the session receiver the
//! caller holds on this connection (`held`): the lock belongs to a link, and a link to one
//! connection, so a request naming a session that this connection does not hold — unlocked,
//! held by another link elsewhere, or lost — fails with `com.microsoft:session-lock-lost`
//! (410), as Service Bus answers a caller that does not hold the lock
//! (topics-sessions-transactions.md B.2). Listing needs no lock.

use std::sync::Arc;

use bytes::Bytes;
use fe2o3_amqp_types::primitives::Timestamp as AmqpTimestamp;
use fe2o3_amqp_types::primitives::{Array, Binary, Value};
use ironbus_core::{Broker, EntityAddress, SessionError, SessionReceiver, Timestamp};

use crate::error::WireError;
use crate::request::Request;

use super::fields::*;
use super::{Context, Operation, Outcome};

/// py's "no time given": DateTime.MaxValue in Unix milliseconds — list the sessions with a
/// message or a state.
const MAX_DATE_MILLIS: i64 = 253_402_300_800_000;

pub(super) async fn execute(
    operation: Operation,
    broker: Broker,
    address: EntityAddress,
    request: &Request,
    cx: &Context,
) -> Result<Outcome, WireError> {
    let held: Option<&Arc<SessionReceiver>> = cx.held.as_ref();
    match operation {
        Operation::RenewSessionLock => {
            session_id(request)?;
            let held = held.ok_or(SessionError::LockLost)?;
            let until = held.renew_lock().await?;
            let expiration = Value::Timestamp(AmqpTimestamp::from_milliseconds(until.as_millis()));
            Ok(Outcome::ok(Some(map([("expiration", expiration)]))))
        }
        Operation::GetSessionState => {
            session_id(request)?;
            let state = held.ok_or(SessionError::LockLost)?.state().await?;
            let state = state.map_or(Value::Null, |b| Value::Binary(Binary::from(b.to_vec())));
            Ok(Outcome::ok(Some(map([("session-state", state)]))))
        }
        Operation::SetSessionState => {
            session_id(request)?;
            let state = match request.field("session-state") {
                None | Some(Value::Null) => None,
                Some(Value::Binary(b)) => Some(Bytes::copy_from_slice(b.as_slice())),
                Some(_) => {
                    return Err(WireError::bad_request("session-state must be binary or null"))
                }
            };
            let held = held.ok_or(SessionError::LockLost)?;
            match &cx.txn {
                // Set at commit (the session stays held by this connection meanwhile).
                Some(txn) => broker.set_session_state_in_transaction(
                    txn,
                    &address,
                    held.session_id(),
                    state,
                )?,
                None => held.set_state(state).await?,
            }
            Ok(Outcome::ok(None))
        }
        Operation::GetMessageSessions => {
            let updated_after = match request.field("last-updated-time") {
                Some(Value::Timestamp(t)) if t.milliseconds() < MAX_DATE_MILLIS => {
                    Some(Timestamp::from_millis(t.milliseconds()))
                }
                _ => None,
            };
            let skip = request.field("skip").and_then(as_i64).unwrap_or(0).max(0) as usize;
            let top = request.field("top").and_then(as_i64).unwrap_or(100).clamp(0, 1000) as usize;
            let ids = broker.list_sessions(address, updated_after, None, skip, top).await?;
            if ids.is_empty() {
                return Ok(Outcome::no_content());
            }
            let ids = ids.into_iter().map(Value::String).collect();
            Ok(Outcome::ok(Some(map([
                ("sessions-ids", Value::Array(Array(ids))),
                ("skip", Value::Int((skip) as i32)),
            ]))))
        }
        _ => Err(WireError::not_implemented("not a session operation")),
    }
}

/// The request's `session-id`.
pub(super) fn session_id(request: &Request) -> Result<String, WireError> {
    match request.field("session-id") {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(WireError::bad_request("the request needs a session-id")),
    }
}
