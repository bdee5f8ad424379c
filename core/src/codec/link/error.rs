//! Broker and session errors on the link: each variant by a code and its fields, so the
//! caller's node raises the error the owner did.

use super::super::primitives::{DecodeResult, Reader, Writer};
use crate::error::{BrokerError, SessionError};
use crate::store::{StoreError, StoreErrorKind};
use crate::types::{PartitionId, SequenceNumber};

/// A broker error as the caller's node will raise it. Variants whose fields are fixed names
/// in the code (a field, a status, an operation) travel by those names and come back as the
/// names this node knows, or a generic one.
pub(super) fn encode_error(w: &mut Writer, e: &BrokerError) {
    match e {
        BrokerError::EntityNotFound { entity } => {
            w.u8(0);
            w.str(entity);
        }
        BrokerError::EntityAlreadyExists { entity } => {
            w.u8(1);
            w.str(entity);
        }
        BrokerError::InvalidArgument { field, reason } => {
            w.u8(2);
            w.str(field);
            w.str(reason);
        }
        BrokerError::InvalidOperation(reason) => {
            w.u8(3);
            w.str(reason);
        }
        BrokerError::QuotaExceeded(reason) => {
            w.u8(4);
            w.str(reason);
        }
        BrokerError::PartitionUnavailable { entity, partition } => {
            w.u8(5);
            w.str(entity);
            w.u16(partition.0);
        }
        BrokerError::EntityDisabled { entity, status } => {
            w.u8(6);
            w.str(entity);
            w.str(status);
        }
        BrokerError::MessageLockLost => w.u8(7),
        BrokerError::MessageNotFound(n) => {
            w.u8(8);
            w.i64(n.0);
        }
        BrokerError::MessageSizeExceeded { size, max } => {
            w.u8(9);
            w.u64(*size as u64);
            w.u64(*max as u64);
        }
        BrokerError::NoMatchingSubscription { entity } => {
            w.u8(10);
            w.str(entity);
        }
        BrokerError::Unimplemented(what) => {
            w.u8(11);
            w.str(what);
        }
        BrokerError::Store(e) => {
            w.u8(12);
            w.u8(match e.kind {
                StoreErrorKind::Unavailable => 0,
                StoreErrorKind::Corrupted => 1,
                StoreErrorKind::InvalidInput => 2,
                StoreErrorKind::Conflict => 3,
                StoreErrorKind::Other => 4,
            });
            w.str(&e.message);
        }
        BrokerError::TransactionTimedOut => w.u8(13),
        BrokerError::TransactionRolledBack(reason) => {
            w.u8(14);
            w.str(reason);
        }
        BrokerError::ShuttingDown => w.u8(15),
    }
}

/// The fixed names [`encode_error`] sends by name.
const STATUSES: [&str; 3] = ["Disabled", "SendDisabled", "ReceiveDisabled"];
const FIELDS: [&str; 6] =
    ["MessageId", "SessionId", "PartitionKey", "SequenceNumber", "PartitionId", "LockToken"];

fn known(names: &[&'static str], name: &str, otherwise: &'static str) -> &'static str {
    names.iter().find(|n| **n == name).copied().unwrap_or(otherwise)
}

pub(super) fn decode_error(r: &mut Reader<'_>) -> DecodeResult<BrokerError> {
    Ok(match r.u8()? {
        0 => BrokerError::EntityNotFound { entity: r.str()? },
        1 => BrokerError::EntityAlreadyExists { entity: r.str()? },
        2 => {
            let field = r.str()?;
            let reason = r.str()?;
            match known(&FIELDS, &field, "") {
                "" => BrokerError::InvalidArgument {
                    field: "request",
                    reason: format!("{field}: {reason}"),
                },
                field => BrokerError::InvalidArgument { field, reason },
            }
        }
        3 => BrokerError::InvalidOperation(r.str()?),
        4 => BrokerError::QuotaExceeded(r.str()?),
        5 => {
            BrokerError::PartitionUnavailable { entity: r.str()?, partition: PartitionId(r.u16()?) }
        }
        6 => {
            let entity = r.str()?;
            let status = known(&STATUSES, &r.str()?, "Disabled");
            BrokerError::EntityDisabled { entity, status }
        }
        7 => BrokerError::MessageLockLost,
        8 => BrokerError::MessageNotFound(SequenceNumber(r.i64()?)),
        9 => BrokerError::MessageSizeExceeded { size: r.u64()? as usize, max: r.u64()? as usize },
        10 => BrokerError::NoMatchingSubscription { entity: r.str()? },
        11 => {
            let _ = r.str()?;
            BrokerError::Unimplemented("an operation on another node")
        }
        12 => {
            let kind = match r.u8()? {
                0 => StoreErrorKind::Unavailable,
                1 => StoreErrorKind::Corrupted,
                2 => StoreErrorKind::InvalidInput,
                3 => StoreErrorKind::Conflict,
                _ => StoreErrorKind::Other,
            };
            BrokerError::Store(StoreError::new(kind, r.str()?))
        }
        13 => BrokerError::TransactionTimedOut,
        14 => BrokerError::TransactionRolledBack(r.str()?),
        15 => BrokerError::ShuttingDown,
        _ => return Err(r.corrupted("broker error")),
    })
}

/// A session error as the caller's node will raise it.
pub(super) fn encode_session_error(w: &mut Writer, e: &SessionError) {
    match e {
        SessionError::Timeout(after) => {
            w.u8(0);
            w.duration(*after);
        }
        SessionError::CannotBeLocked { session } => {
            w.u8(1);
            w.str(session);
        }
        SessionError::LockLost => w.u8(2),
        SessionError::Broker(e) => {
            w.u8(3);
            encode_error(w, e);
        }
    }
}

pub(super) fn decode_session_error(r: &mut Reader<'_>) -> DecodeResult<SessionError> {
    Ok(match r.u8()? {
        0 => SessionError::Timeout(r.duration()?),
        1 => SessionError::CannotBeLocked { session: r.str()? },
        2 => SessionError::LockLost,
        3 => SessionError::Broker(decode_error(r)?),
        _ => return Err(r.corrupted("session error")),
    })
}
