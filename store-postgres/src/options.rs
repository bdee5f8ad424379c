//! How a [`PostgresStore`](crate::PostgresStore) connects, and the table it keeps its keys in.

use std::fmt;
use std::time::Duration;

use ironbus_core::store::{StoreError, StoreErrorKind, WriteLimits};

/// The options of [`PostgresStore::connect`](crate::PostgresStore::connect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresOptions {
    /// The table of this store (created if missing): lowercase ASCII letters, digits and `_`,
    /// not starting with a digit, at most 63 bytes. Several stores share one database with a
    /// table each.
    pub table: String,
    /// The most connections the store opens (opened on demand, replaced when lost).
    pub connections: usize,
    /// The most one batch may hold ([`Store::limits`](ironbus_core::store::Store::limits)).
    pub limits: WriteLimits,
    /// How long a call retries what may pass (a lost or refused connection, a serialization
    /// failure, a deadlock, a read-only server, an interrupted commit) before it fails with
    /// `Unavailable`.
    pub retry_for: Duration,
    /// The longest one attempt (connecting, or one transaction) may take; an attempt that takes
    /// longer is abandoned and its connection closed.
    pub attempt_timeout: Duration,
    /// Whether [`connect`](crate::PostgresStore::connect) waits until every transaction that
    /// is writing the table has ended (committed or rolled back) before it returns. On for a
    /// store with one writer (the default): a writer killed while its `COMMIT` was under way
    /// leaves that commit landing a moment later, and what the new store reads first (a
    /// partition's rebuild) must include it. A cluster, whose partition writes are fenced,
    /// turns it off.
    pub wait_for_writers: bool,
}

impl PostgresOptions {
    /// The default options with table `table`.
    pub fn with_table(table: impl Into<String>) -> Self {
        Self { table: table.into(), ..Self::default() }
    }
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            table: "ironbus_store".to_owned(),
            connections: 8,
            limits: DEFAULT_LIMITS,
            retry_for: Duration::from_secs(5),
            attempt_timeout: Duration::from_secs(30),
            wait_for_writers: true,
        }
    }
}

/// 10,000 operations and guards, 64 MiB: a transaction PostgreSQL commits in well under a
/// second, far from its 1 GiB limit of one parameter.
pub const DEFAULT_LIMITS: WriteLimits = WriteLimits { max_ops: 10_000, max_bytes: 64 << 20 };

/// A checked table name, quoted where it is written into SQL (the one part of a statement that
/// cannot be a parameter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Table(String);

impl Table {
    pub(crate) fn new(name: &str) -> Result<Self, StoreError> {
        let valid = !name.is_empty()
            && name.len() <= 63
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if valid {
            Ok(Self(name.to_owned()))
        } else {
            Err(StoreError::new(
                StoreErrorKind::InvalidInput,
                format!(
                    "postgres: table name {name:?} is not lowercase ASCII letters, digits and \
                     `_` (not starting with a digit, at most 63 bytes)"
                ),
            ))
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.0
    }
}

/// The quoted identifier, as SQL text.
impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_lowercase_table_names_are_accepted() {
        for good in ["ironbus_store_0", "t", "_x9"] {
            assert_eq!(Table::new(good).map(|t| t.to_string()), Ok(format!("\"{good}\"")));
        }
        let long = "a".repeat(64);
        for bad in ["", "0t", "Store", "a-b", "a\"b", "a b", "t;drop", &long] {
            let err = Table::new(bad).expect_err(bad);
            assert_eq!(err.kind, StoreErrorKind::InvalidInput, "{bad}");
        }
    }
}
