//! [`Claim`]: what a verified token or key entitles its holder to, and the check of one
//! operation against it.
//!
//! Invariant: a claim is only made by the [`Authorizer`](super::Authorizer) from a verified
//! credential; checking it is pure (the caller passes `now`).

use super::{Audience, AuthError, AuthErrorKind, Right, Rights};
use crate::types::Timestamp;

/// What a verified token or key entitles its holder to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// What the token is for; SASL PLAIN claims cover the whole namespace.
    pub audience: Audience,
    /// The rights of the policy that signed it.
    pub rights: Rights,
    /// When the token stops being valid (`se` in milliseconds); `Timestamp::MAX` for SASL PLAIN.
    pub expires_at: Timestamp,
    /// The name of the policy that signed it.
    pub policy: String,
}

impl Claim {
    /// Checks that this claim allows `right` on `entity_path` at `now`.
    ///
    /// # Behavior
    /// - [`Expired`](AuthErrorKind::Expired) when `now >= expires_at`.
    /// - [`InsufficientRights`](AuthErrorKind::InsufficientRights) when the audience does not
    ///   [cover](Audience::covers) `entity_path` or the rights do not
    ///   [allow](Rights::allows) `right`.
    pub fn check(&self, entity_path: &str, right: Right, now: Timestamp) -> Result<(), AuthError> {
        if now >= self.expires_at {
            return Err(AuthError::new(
                AuthErrorKind::Expired,
                format!("token of policy {} has expired", self.policy),
            ));
        }
        if !self.audience.covers(entity_path) {
            return Err(AuthError::new(
                AuthErrorKind::InsufficientRights,
                format!("token for {} does not cover {entity_path}", self.audience),
            ));
        }
        if !self.rights.allows(right) {
            return Err(AuthError::new(
                AuthErrorKind::InsufficientRights,
                format!(
                    "policy {} does not grant {right} (it grants {})",
                    self.policy, self.rights
                ),
            ));
        }
        Ok(())
    }

    /// Whether [`check`](Claim::check) passes.
    pub fn authorizes(&self, entity_path: &str, right: Right, now: Timestamp) -> bool {
        self.check(entity_path, right, now).is_ok()
    }
}
