//! How core errors travel over AMQP: the error condition and description the Service Bus SDKs
//! recognise (amqp.md §9), and the status code of management responses.

use fe2o3_amqp_types::definitions::{AmqpError, Error, ErrorCondition, LinkError};
use fe2o3_amqp_types::primitives::Symbol;
use ironbus_core::{BrokerError, SessionError};

pub const LOCK_LOST: &str = "com.microsoft:message-lock-lost";
pub const MESSAGE_NOT_FOUND: &str = "com.microsoft:message-not-found";
pub const ENTITY_DISABLED: &str = "com.microsoft:entity-disabled";
pub const ENTITY_ALREADY_EXISTS: &str = "com.microsoft:entity-already-exists";
pub const SERVER_BUSY: &str = "com.microsoft:server-busy";
pub const ARGUMENT_ERROR: &str = "com.microsoft:argument-error";
pub const ARGUMENT_OUT_OF_RANGE: &str = "com.microsoft:argument-out-of-range";
pub const DEAD_LETTER: &str = "com.microsoft:dead-letter";
pub const SESSION_LOCK_LOST: &str = "com.microsoft:session-lock-lost";
pub const SESSION_CANNOT_BE_LOCKED: &str = "com.microsoft:session-cannot-be-locked";
pub const TIMEOUT: &str = "com.microsoft:timeout";

/// An error in Service Bus's AMQP terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError {
    /// The condition symbol, e.g. `amqp:not-found`.
    pub condition: &'static str,
    pub description: String,
    /// The status code a management response carries.
    pub status: i32,
}

impl WireError {
    pub fn new(condition: &'static str, status: i32, description: impl Into<String>) -> Self {
        WireError { condition, description: description.into(), status }
    }

    pub fn not_found(entity: &str) -> Self {
        // js classifies "not found" by this wording.
        WireError::new(
            "amqp:not-found",
            404,
            format!("The messaging entity '{entity}' could not be found."),
        )
    }

    pub fn unauthorized(description: impl Into<String>) -> Self {
        WireError::new("amqp:unauthorized-access", 401, description)
    }

    pub fn not_implemented(description: impl Into<String>) -> Self {
        WireError::new("amqp:not-implemented", 501, description)
    }

    pub fn bad_request(description: impl Into<String>) -> Self {
        WireError::new(ARGUMENT_ERROR, 400, description)
    }

    /// The AMQP `error` value. `info` is always present (an empty map): py reads all three
    /// fields of a rejected send's error by position.
    pub fn to_amqp(&self) -> Error {
        Error {
            condition: condition(self.condition),
            description: Some(self.description.clone()),
            info: Some(Box::default()),
        }
    }
}

/// The typed condition for a symbol, so standard conditions encode as themselves.
pub fn condition(symbol: &str) -> ErrorCondition {
    match symbol {
        "amqp:not-found" => ErrorCondition::AmqpError(AmqpError::NotFound),
        "amqp:unauthorized-access" => ErrorCondition::AmqpError(AmqpError::UnauthorizedAccess),
        "amqp:not-implemented" => ErrorCondition::AmqpError(AmqpError::NotImplemented),
        "amqp:not-allowed" => ErrorCondition::AmqpError(AmqpError::NotAllowed),
        "amqp:internal-error" => ErrorCondition::AmqpError(AmqpError::InternalError),
        "amqp:resource-limit-exceeded" => {
            ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded)
        }
        "amqp:decode-error" => ErrorCondition::AmqpError(AmqpError::DecodeError),
        "amqp:invalid-field" => ErrorCondition::AmqpError(AmqpError::InvalidField),
        "amqp:link:message-size-exceeded" => {
            ErrorCondition::LinkError(LinkError::MessageSizeExceeded)
        }
        other => ErrorCondition::Custom(Symbol::from(other)),
    }
}

impl From<&BrokerError> for WireError {
    fn from(error: &BrokerError) -> Self {
        let text = error.to_string();
        match error {
            BrokerError::EntityNotFound { entity } => WireError::not_found(entity),
            BrokerError::EntityAlreadyExists { .. } => {
                WireError::new(ENTITY_ALREADY_EXISTS, 409, text)
            }
            BrokerError::InvalidArgument { .. } => WireError::new(ARGUMENT_ERROR, 400, text),
            BrokerError::InvalidOperation(_) => WireError::new("amqp:not-allowed", 400, text),
            BrokerError::QuotaExceeded(_) => {
                WireError::new("amqp:resource-limit-exceeded", 403, text)
            }
            BrokerError::PartitionUnavailable { .. } | BrokerError::ShuttingDown => {
                WireError::new(SERVER_BUSY, 503, text)
            }
            BrokerError::EntityDisabled { .. } => WireError::new(ENTITY_DISABLED, 400, text),
            BrokerError::MessageLockLost => WireError::new(LOCK_LOST, 410, text),
            BrokerError::MessageNotFound(_) => WireError::new(MESSAGE_NOT_FOUND, 404, text),
            BrokerError::MessageSizeExceeded { .. } => {
                WireError::new("amqp:link:message-size-exceeded", 413, text)
            }
            BrokerError::NoMatchingSubscription { .. } => {
                WireError::new("com.microsoft:no-matching-subscription", 500, text)
            }
            BrokerError::Unimplemented(_) => WireError::not_implemented(text),
            BrokerError::TransactionTimedOut => {
                WireError::new("amqp:transaction:timeout", 408, text)
            }
            BrokerError::TransactionRolledBack(_) => {
                WireError::new("amqp:transaction:rollback", 400, text)
            }
            BrokerError::Store(e) if e.is_retriable() => WireError::new(SERVER_BUSY, 503, text),
            BrokerError::Store(_) => WireError::new("amqp:internal-error", 500, text),
        }
    }
}

impl From<&SessionError> for WireError {
    fn from(error: &SessionError) -> Self {
        let text = error.to_string();
        match error {
            SessionError::Timeout(_) => WireError::new(TIMEOUT, 408, text),
            SessionError::CannotBeLocked { .. } => {
                WireError::new(SESSION_CANNOT_BE_LOCKED, 410, text)
            }
            SessionError::LockLost => WireError::new(SESSION_LOCK_LOST, 410, text),
            SessionError::Broker(e) => WireError::from(e),
        }
    }
}

impl From<SessionError> for WireError {
    fn from(error: SessionError) -> Self {
        WireError::from(&error)
    }
}

impl From<BrokerError> for WireError {
    fn from(error: BrokerError) -> Self {
        WireError::from(&error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ironbus_core::{PartitionId, SequenceNumber};

    #[test]
    fn core_errors_map_to_the_conditions_the_sdks_recognise() {
        let cases: Vec<(BrokerError, &str, i32)> = vec![
            (BrokerError::EntityNotFound { entity: "q".into() }, "amqp:not-found", 404),
            (BrokerError::MessageLockLost, LOCK_LOST, 410),
            (BrokerError::MessageNotFound(SequenceNumber(3)), MESSAGE_NOT_FOUND, 404),
            (
                BrokerError::MessageSizeExceeded { size: 2, max: 1 },
                "amqp:link:message-size-exceeded",
                413,
            ),
            (BrokerError::QuotaExceeded("full".into()), "amqp:resource-limit-exceeded", 403),
            (
                BrokerError::PartitionUnavailable { entity: "q".into(), partition: PartitionId(1) },
                SERVER_BUSY,
                503,
            ),
            (BrokerError::InvalidOperation("x".into()), "amqp:not-allowed", 400),
            (BrokerError::Unimplemented("sessions"), "amqp:not-implemented", 501),
        ];
        for (error, condition, status) in cases {
            let wire = WireError::from(&error);
            assert_eq!((wire.condition, wire.status), (condition, status), "{error:?}");
        }
        let sessions: Vec<(SessionError, &str, i32)> = vec![
            (SessionError::Timeout(std::time::Duration::from_secs(1)), TIMEOUT, 408),
            (SessionError::CannotBeLocked { session: "s".into() }, SESSION_CANNOT_BE_LOCKED, 410),
            (SessionError::LockLost, SESSION_LOCK_LOST, 410),
            (SessionError::Broker(BrokerError::MessageLockLost), LOCK_LOST, 410),
        ];
        for (error, condition, status) in sessions {
            let wire = WireError::from(&error);
            assert_eq!((wire.condition, wire.status), (condition, status), "{error:?}");
        }
        // py indexes the error's three fields: info must be encoded even when empty.
        let bytes = serde_amqp::to_vec(&WireError::bad_request("x").to_amqp()).unwrap();
        assert_eq!(&bytes[..3], &[0x00, 0x53, 0x1d]);
        let fields: serde_amqp::Value = serde_amqp::from_slice(&bytes).unwrap();
        let serde_amqp::Value::Described(d) = fields else { panic!("described") };
        let serde_amqp::Value::List(list) = d.value else { panic!("list") };
        assert_eq!(list.len(), 3);
        let not_found = WireError::from(&BrokerError::EntityNotFound { entity: "q".into() });
        assert_eq!(not_found.description, "The messaging entity 'q' could not be found.");
    }
}
