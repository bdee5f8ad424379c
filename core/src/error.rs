//! The broker's errors: one enum whose variants say what happened and how to recover.
//! Transports map them onto their protocol (an AMQP error condition, an HTTP status); the core
//! never sees either.

use crate::store::StoreError;
use crate::types::{PartitionId, SequenceNumber};

/// Why a broker operation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BrokerError {
    /// No entity of that name exists. Not retriable. Worded as Service Bus words it, which
    /// SDKs and applications match on.
    #[error("The messaging entity '{entity}' could not be found.")]
    EntityNotFound { entity: String },

    /// Create of an entity whose name is taken. Not retriable. Worded as Service Bus words it
    /// (the JS SDK's own tests look for `NAME' already exists.`).
    #[error("The messaging entity '{entity}' already exists.")]
    EntityAlreadyExists { entity: String },

    /// A field of a description or request is out of range or malformed. Fix the input.
    #[error("invalid {field}: {reason}")]
    InvalidArgument { field: &'static str, reason: String },

    /// The request is well-formed but breaks a Service Bus rule (for example SessionId and
    /// PartitionKey differ, or the partitioning option of an existing entity changes).
    #[error("invalid operation: {0}")]
    InvalidOperation(String),

    /// A namespace or entity quota is used up (entity counts, entity size). Retry after freeing
    /// space.
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),

    /// The partition the operation is pinned to cannot serve now. Retriable.
    #[error("partition {partition} of {entity} is unavailable")]
    PartitionUnavailable { entity: String, partition: PartitionId },

    /// The entity's status forbids the operation (Disabled, SendDisabled, ReceiveDisabled).
    #[error("entity {entity} is {status} for this operation")]
    EntityDisabled { entity: String, status: &'static str },

    /// The lock token is unknown or its lock expired; the message may be delivered again.
    #[error(
        "the lock supplied is invalid: it expired, or the message was already settled or removed"
    )]
    MessageLockLost,

    /// No message with that sequence number is in the state the operation needs.
    #[error("message {0} not found")]
    MessageNotFound(SequenceNumber),

    /// The message is larger than the entity's maximum message size.
    #[error("message of {size} bytes exceeds the maximum of {max} bytes")]
    MessageSizeExceeded { size: usize, max: usize },

    /// No subscription of the topic took the message, and the topic has
    /// FilteringMessagesBeforePublishing on. Not retriable.
    #[error("no subscription of topic {entity} matched the message")]
    NoMatchingSubscription { entity: String },

    /// The operation is not built yet. Fails loudly rather than pretending.
    #[error("not implemented: {0}")]
    Unimplemented(&'static str),

    /// The store failed in a way that is not a partition outage (corruption, invalid input).
    #[error(transparent)]
    Store(#[from] StoreError),

    /// The transaction ran past its timeout (two minutes from its first operation): its work
    /// is gone.
    #[error("the transaction timed out")]
    TransactionTimedOut,

    /// The transaction cannot commit (an operation of it failed, or what it settles is no
    /// longer locked): nothing of it was applied.
    #[error("the transaction was rolled back: {0}")]
    TransactionRolledBack(String),

    /// The broker is shutting down.
    #[error("the broker is shutting down")]
    ShuttingDown,
}

impl BrokerError {
    /// Whether the same request may succeed later without change.
    pub fn is_retriable(&self) -> bool {
        match self {
            BrokerError::PartitionUnavailable { .. } | BrokerError::ShuttingDown => true,
            BrokerError::Store(e) => e.is_retriable(),
            _ => false,
        }
    }

    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        BrokerError::InvalidArgument { field, reason: reason.into() }
    }
}

/// Why a session operation failed: what only sessions add, or a [`BrokerError`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SessionError {
    /// No session could be accepted within the time the caller gave. Retriable.
    #[error("no unlocked session with messages became available within {0:?}")]
    Timeout(std::time::Duration),

    /// The session named is locked by another receiver. Retriable (once it is released).
    #[error("the requested session {session} cannot be locked: another receiver holds it")]
    CannotBeLocked { session: String },

    /// The caller does not hold the session's lock (any more): it expired or was released.
    /// The receiver is unusable; accept the session again.
    #[error("the session lock was lost: it expired, or the session was released")]
    LockLost,

    #[error(transparent)]
    Broker(#[from] BrokerError),
}

impl SessionError {
    /// Whether the same request may succeed later without change.
    pub fn is_retriable(&self) -> bool {
        match self {
            SessionError::Timeout(_) | SessionError::CannotBeLocked { .. } => true,
            SessionError::LockLost => false,
            SessionError::Broker(e) => e.is_retriable(),
        }
    }
}

/// The result of a broker operation.
pub type Result<T, E = BrokerError> = std::result::Result<T, E>;
