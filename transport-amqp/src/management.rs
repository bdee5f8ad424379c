//! The `<entity>/$management` node: Service Bus's request/response operations on an entity
//! (amqp.md §6.3), carried out through the broker.
//!
//! One handler per operation, each in its own file under `management/`, picked by
//! [`Operation`] (the request's `operation` property), which also names the right the
//! operation needs. A new operation is one more variant and one more file.
//!
//! What a request brings besides its message (the session receiver the connection holds for
//! its `session-id`, the transaction its transfer names) is a `Context`. Schedule, cancel,
//! update-disposition and set-session-state add their work to that transaction; the others run
//! as without one (rule changes in a transaction on a partitioned topic are refused with
//! `amqp:not-allowed`).

mod cancel_scheduled;
mod delete;
mod fields;
mod peek;
mod receive_deferred;
mod renew_lock;
mod rules;
mod schedule;
mod sessions;
mod update_disposition;

use fe2o3_amqp_types::primitives::Value;
use ironbus_core::auth::Right;
use std::sync::Arc;

use ironbus_core::{Broker, EntityAddress, SessionReceiver, Transaction};

use crate::error::WireError;
use crate::request::Request;

pub use fields::{as_i64, properties_to_modify, property_value};

/// The result of an operation: status, description and body.
#[derive(Debug)]
pub struct Outcome {
    pub status: i32,
    pub description: &'static str,
    pub body: Option<Value>,
}

impl Outcome {
    fn ok(body: Option<Value>) -> Self {
        Outcome { status: 200, description: "OK", body }
    }

    fn no_content() -> Self {
        Outcome { status: 204, description: "No Content", body: None }
    }
}

/// What a request brings besides its message: the session receiver the caller holds for the
/// request's `session-id`, and the transaction the request transfer names (its
/// transactional-state), if any. An operation that can be part of a transaction (schedule,
/// cancel, update-disposition, set-session-state) adds its work to `txn` instead of doing it;
/// the others run as without one.
#[derive(Debug, Default)]
pub struct Context {
    pub held: Option<Arc<SessionReceiver>>,
    pub txn: Option<Transaction>,
}

/// A `$management` operation, as named by a request's `operation` application property.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    RenewLock,
    PeekMessage,
    ScheduleMessage,
    CancelScheduledMessage,
    ReceiveBySequenceNumber,
    UpdateDisposition,
    RenewSessionLock,
    GetSessionState,
    SetSessionState,
    GetMessageSessions,
    AddRule,
    RemoveRule,
    EnumerateRules,
    DeleteMessages,
}

impl Operation {
    const ALL: [Operation; 14] = [
        Operation::RenewLock,
        Operation::PeekMessage,
        Operation::ScheduleMessage,
        Operation::CancelScheduledMessage,
        Operation::ReceiveBySequenceNumber,
        Operation::UpdateDisposition,
        Operation::RenewSessionLock,
        Operation::GetSessionState,
        Operation::SetSessionState,
        Operation::GetMessageSessions,
        Operation::AddRule,
        Operation::RemoveRule,
        Operation::EnumerateRules,
        Operation::DeleteMessages,
    ];

    /// The operation a request names; `None` for one we do not know.
    pub fn parse(name: &str) -> Option<Operation> {
        Operation::ALL.into_iter().find(|op| op.name() == name)
    }

    /// The name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Operation::RenewLock => "com.microsoft:renew-lock",
            Operation::PeekMessage => "com.microsoft:peek-message",
            Operation::ScheduleMessage => "com.microsoft:schedule-message",
            Operation::CancelScheduledMessage => "com.microsoft:cancel-scheduled-message",
            Operation::ReceiveBySequenceNumber => "com.microsoft:receive-by-sequence-number",
            Operation::UpdateDisposition => "com.microsoft:update-disposition",
            Operation::RenewSessionLock => "com.microsoft:renew-session-lock",
            Operation::GetSessionState => "com.microsoft:get-session-state",
            Operation::SetSessionState => "com.microsoft:set-session-state",
            Operation::GetMessageSessions => "com.microsoft:get-message-sessions",
            Operation::AddRule => "com.microsoft:add-rule",
            Operation::RemoveRule => "com.microsoft:remove-rule",
            Operation::EnumerateRules => "com.microsoft:enumerate-rules",
            Operation::DeleteMessages => "com.microsoft:batch-delete-messages",
        }
    }

    /// The right a client needs on the entity's path to run the operation.
    pub fn right(self) -> Right {
        match self {
            Operation::ScheduleMessage | Operation::CancelScheduledMessage => Right::Send,
            Operation::RenewLock
            | Operation::PeekMessage
            | Operation::ReceiveBySequenceNumber
            | Operation::UpdateDisposition
            | Operation::RenewSessionLock
            | Operation::GetSessionState
            | Operation::SetSessionState
            | Operation::GetMessageSessions
            // A ServiceBusRuleManager needs only Listen on the subscription (A.4).
            | Operation::AddRule
            | Operation::RemoveRule
            | Operation::EnumerateRules
            // Deleting is receiving without the messages: a receiver's right (the SDKs offer
            // it on the receiver).
            | Operation::DeleteMessages => Right::Listen,
        }
    }

    /// Carries out the operation on `address`, with what `cx` brings.
    pub async fn execute(
        self,
        broker: Broker,
        address: EntityAddress,
        request: &Request,
        cx: Context,
    ) -> Result<Outcome, WireError> {
        let txn = cx.txn.as_ref();
        match self {
            Operation::RenewLock => renew_lock::execute(broker, address, request).await,
            Operation::PeekMessage => peek::execute(broker, address, request).await,
            Operation::ScheduleMessage => schedule::execute(broker, address, request, txn).await,
            Operation::CancelScheduledMessage => {
                cancel_scheduled::execute(broker, address, request, txn).await
            }
            Operation::ReceiveBySequenceNumber => {
                receive_deferred::execute(broker, address, request, cx.held).await
            }
            Operation::UpdateDisposition => {
                update_disposition::execute(broker, address, request, txn).await
            }
            Operation::RenewSessionLock
            | Operation::GetSessionState
            | Operation::SetSessionState
            | Operation::GetMessageSessions => {
                sessions::execute(self, broker, address, request, &cx).await
            }
            Operation::AddRule | Operation::RemoveRule | Operation::EnumerateRules => {
                rules::execute(self, broker, address, request, txn.is_some()).await
            }
            Operation::DeleteMessages => delete::execute(broker, address, request).await,
        }
    }
}

/// Carries out one management request on `address`: the operation it names, or
/// `amqp:not-implemented` for an operation we do not know.
pub async fn execute(
    broker: Broker,
    address: EntityAddress,
    request: Request,
    cx: Context,
) -> Result<Outcome, WireError> {
    let name = request.property("operation").unwrap_or_default();
    match Operation::parse(&name) {
        Some(operation) => operation.execute(broker, address, &request, cx).await,
        None => Err(WireError::not_implemented(format!("unknown management operation {name:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_parses_from_its_name() {
        for operation in Operation::ALL {
            assert_eq!(Operation::parse(operation.name()), Some(operation));
        }
        assert_eq!(Operation::parse("com.microsoft:unknown"), None);
        assert_eq!(Operation::parse("com.microsoft:Renew-Lock"), None);
    }

    #[test]
    fn operations_need_the_rights_service_bus_asks_for() {
        let right = |name| Operation::parse(name).map(Operation::right);
        assert_eq!(right("com.microsoft:schedule-message"), Some(Right::Send));
        assert_eq!(right("com.microsoft:cancel-scheduled-message"), Some(Right::Send));
        assert_eq!(right("com.microsoft:renew-lock"), Some(Right::Listen));
        assert_eq!(right("com.microsoft:peek-message"), Some(Right::Listen));
        assert_eq!(right("com.microsoft:receive-by-sequence-number"), Some(Right::Listen));
        assert_eq!(right("com.microsoft:update-disposition"), Some(Right::Listen));
        assert_eq!(right("com.microsoft:get-session-state"), Some(Right::Listen));
        assert_eq!(right("com.microsoft:add-rule"), Some(Right::Listen));
        assert_eq!(right("com.microsoft:remove-rule"), Some(Right::Listen));
        assert_eq!(right("com.microsoft:enumerate-rules"), Some(Right::Listen));
        assert_eq!(right("com.microsoft:batch-delete-messages"), Some(Right::Listen));
    }
}
