//! What PostgreSQL answered, sorted into what the store does about it (CLUSTER.md §1):
//! retry at once on a fresh connection, retry the transaction, fail with `Unavailable` and
//! report the store unhealthy, or fail for good.

use ironbus_core::store::{StoreError, StoreErrorKind};
use tokio_postgres::error::SqlState;

/// What to do about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The connection is gone or unusable (refused, reset, closed, the server shutting down):
    /// drop it and try again on a new one, which the connection string may find on another host.
    Reconnect,
    /// The transaction lost a race (serialization failure, deadlock): run it again.
    Retry,
    /// The server cannot take writes (read-only: a standby; disk full): the store is
    /// unavailable until a write succeeds. A read-only server is retried on a new connection,
    /// which finds the new primary once one is promoted.
    ReadOnly,
    DiskFull,
    /// Retrying cannot help.
    Fail(StoreErrorKind),
}

/// The verdict on `error`, raised by `operation` (for the message).
pub(crate) fn judge(error: &tokio_postgres::Error) -> Verdict {
    let Some(code) = error.code() else {
        // No SQLSTATE: the socket, the protocol or a closed connection, never the data (the
        // store's statements convert only bytea and bigint).
        return Verdict::Reconnect;
    };
    judge_code(code)
}

pub(crate) fn judge_code(code: &SqlState) -> Verdict {
    let class = &code.code()[..2];
    if *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED {
        Verdict::Retry
    } else if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
        Verdict::ReadOnly
    } else if *code == SqlState::DISK_FULL {
        Verdict::DiskFull
    } else {
        match class {
            // Connection exceptions; operator intervention (shutdown, cannot connect now);
            // insufficient resources (too many connections, out of memory); system errors.
            "08" | "57" | "53" | "58" => Verdict::Reconnect,
            // Data exceptions; program limits (a key over the index's row size).
            "22" | "54" => Verdict::Fail(StoreErrorKind::InvalidInput),
            "XX" => Verdict::Fail(StoreErrorKind::Corrupted),
            _ => Verdict::Fail(StoreErrorKind::Other),
        }
    }
}

/// Whether a failed `COMMIT` leaves its outcome unknown: it did not come back with an error
/// that rolled the transaction back for sure. Only a rollback class (40) or an integrity
/// error (23) says so; a lost connection, a shutdown or a cancelled wait for a synchronous
/// standby may come after the commit record was written.
pub(crate) fn commit_is_ambiguous(error: &tokio_postgres::Error) -> bool {
    error.code().is_none_or(|code| !matches!(&code.code()[..2], "40" | "23"))
}

/// A store error of `kind` for `operation`, caused by `error`.
pub(crate) fn store_error(
    kind: StoreErrorKind,
    operation: &str,
    error: tokio_postgres::Error,
) -> StoreError {
    StoreError::new(kind, format!("postgres {operation}: {}", describe(&error))).caused_by(error)
}

/// The error with its server message, or the I/O error underneath.
pub(crate) fn describe(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    match std::error::Error::source(error) {
        Some(source) => format!("{error}: {source}"),
        None => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_map_to_the_table_of_cluster_md() {
        assert_eq!(judge_code(&SqlState::T_R_SERIALIZATION_FAILURE), Verdict::Retry);
        assert_eq!(judge_code(&SqlState::T_R_DEADLOCK_DETECTED), Verdict::Retry);
        assert_eq!(judge_code(&SqlState::READ_ONLY_SQL_TRANSACTION), Verdict::ReadOnly);
        assert_eq!(judge_code(&SqlState::DISK_FULL), Verdict::DiskFull);
        assert_eq!(judge_code(&SqlState::ADMIN_SHUTDOWN), Verdict::Reconnect);
        assert_eq!(judge_code(&SqlState::CANNOT_CONNECT_NOW), Verdict::Reconnect);
        assert_eq!(judge_code(&SqlState::CONNECTION_FAILURE), Verdict::Reconnect);
        assert_eq!(judge_code(&SqlState::TOO_MANY_CONNECTIONS), Verdict::Reconnect);
        assert_eq!(
            judge_code(&SqlState::PROGRAM_LIMIT_EXCEEDED),
            Verdict::Fail(StoreErrorKind::InvalidInput)
        );
        assert_eq!(judge_code(&SqlState::DATA_CORRUPTED), Verdict::Fail(StoreErrorKind::Corrupted));
        assert_eq!(
            judge_code(&SqlState::INVALID_PASSWORD),
            Verdict::Fail(StoreErrorKind::Other),
            "a wrong password is not retried"
        );
        assert_eq!(judge_code(&SqlState::UNDEFINED_TABLE), Verdict::Fail(StoreErrorKind::Other));
    }
}
