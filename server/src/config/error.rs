//! [`ConfigError`]: what in a config file is wrong, and where.

use std::fmt;

use ironbus_core::auth::PolicyError;
use ironbus_core::{AddressError, BrokerError};

/// A config file's mistake, or a declared entity the broker did not create: what went wrong
/// ([`kind`](Self::kind)) and where in the file ([`at`](Self::at)), shown together as in
/// `queue orders: LockDuration must be a string`.
#[derive(Debug)]
pub struct ConfigError {
    at: String,
    kind: ConfigErrorKind,
}

/// What went wrong in a config file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// The file is not JSON.
    #[error("config is not valid JSON")]
    Json(#[source] serde_json::Error),
    /// The file is JSON but not what the format allows; the message says what is wrong.
    #[error("{0}")]
    Invalid(String),
    /// A policy's or authorization rule's `Rights` name a right that does not exist.
    #[error(transparent)]
    Rights(PolicyError),
    /// A declared name does not make an entity path.
    #[error("{path:?} is not a valid entity path")]
    Path { path: String, source: AddressError },
    /// The broker refused to create a declared entity (`what`: queue, topic, subscription, rule).
    #[error("creating {what} {path}")]
    Create { what: &'static str, path: String, source: BrokerError },
}

impl ConfigError {
    /// Where in the file: `queue orders`, `topic t, subscription s, rule r`; empty when the
    /// mistake is the file's as a whole.
    pub fn at(&self) -> &str {
        &self.at
    }

    pub fn kind(&self) -> &ConfigErrorKind {
        &self.kind
    }

    /// A mistake that `message` describes.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        ConfigErrorKind::Invalid(message.into()).into()
    }
}

impl From<ConfigErrorKind> for ConfigError {
    fn from(kind: ConfigErrorKind) -> Self {
        ConfigError { at: String::new(), kind }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.at.is_empty() {
            write!(f, "{}: ", self.at)?;
        }
        self.kind.fmt(f)
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.kind.source()
    }
}

/// Places an error within a part of the file: `within(|| format!("queue {name}"))`; places
/// nest outermost first, joined by `, `.
pub(super) trait Within<T> {
    fn within(self, place: impl FnOnce() -> String) -> Result<T, ConfigError>;
}

impl<T> Within<T> for Result<T, ConfigError> {
    fn within(self, place: impl FnOnce() -> String) -> Result<T, ConfigError> {
        self.map_err(|mut error| {
            let place = place();
            error.at = if error.at.is_empty() { place } else { format!("{place}, {}", error.at) };
            error
        })
    }
}
