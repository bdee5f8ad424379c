//! The errors of authorization: [`AuthError`] for a credential that is refused, with a kind a
//! transport maps to its wire status, and [`PolicyError`] for a configuration mistake.
//!
//! Invariant: no message ever contains a key or a signature.

use std::fmt;

/// Why a set of policies cannot make an [`Authorizer`](super::Authorizer): a configuration
/// mistake.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("shared access policy has an empty name")]
    EmptyName,
    #[error("shared access policy {name} has an empty key")]
    EmptyKey { name: String },
    #[error("shared access policy {name} is defined more than once")]
    Duplicate { name: String },
    #[error("{0}")]
    Invalid(String),
}

/// What kind of authorization failure happened; transports branch on it.
///
/// AMQP CBS answers 400 for [`Malformed`](AuthErrorKind::Malformed) and 401 for the rest;
/// HTTP answers 401 for all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AuthErrorKind {
    /// The token is not a SAS token, or a part of it cannot be parsed.
    Malformed,
    /// The token's expiry (`se`) is not in the future.
    Expired,
    /// The signature (or, for SASL PLAIN, the key) does not match the policy's key.
    InvalidSignature,
    /// No policy has the token's `skn` (or the SASL user name).
    UnknownPolicy,
    /// A valid claim that does not cover the entity or lacks the right.
    InsufficientRights,
}

impl fmt::Display for AuthErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AuthErrorKind::Malformed => "malformed token",
            AuthErrorKind::Expired => "expired token",
            AuthErrorKind::InvalidSignature => "invalid signature",
            AuthErrorKind::UnknownPolicy => "unknown policy",
            AuthErrorKind::InsufficientRights => "insufficient rights",
        })
    }
}

/// An authorization failure: a kind to branch on and a message for people (never a key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct AuthError {
    pub kind: AuthErrorKind,
    pub message: String,
}

impl AuthError {
    pub fn new(kind: AuthErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    pub(super) fn malformed(message: impl Into<String>) -> Self {
        Self::new(AuthErrorKind::Malformed, message)
    }
}
