//! [`Authorizer`]: verifies SAS tokens and SASL PLAIN credentials against the namespace's
//! shared access policies ([`SasPolicy`]) and, for a token, an entity's authorization rules.
//!
//! Invariants:
//! - Keys are compared in constant time and never appear in `Debug` output or errors.
//! - A namespace policy is tried before an entity's rules; an entity's key only signs tokens
//!   for that entity or below it.

use std::fmt;

use sha2::{Digest, Sha256};

use super::token::SasToken;
use super::{Audience, AuthError, AuthErrorKind, AuthorizationRule, Claim, PolicyError, Rights};
use crate::types::Timestamp;

/// The policy name of the development policy ([`Authorizer::development`]).
pub const DEVELOPMENT_POLICY_NAME: &str = "RootManageSharedAccessKey";

/// The well-known key of Microsoft's Service Bus emulator. Public: anyone can sign with it.
pub const DEVELOPMENT_KEY: &str = "SAS_KEY_VALUE";

/// A namespace-level shared access policy: a name, a key and the rights a holder of the key has.
///
/// The key is used as text: its UTF-8 bytes are the HMAC key (it is not base64-decoded).
/// `Debug` redacts it.
#[derive(Clone, PartialEq, Eq)]
pub struct SasPolicy {
    pub name: String,
    pub key: String,
    pub rights: Rights,
}

impl SasPolicy {
    pub fn new(name: impl Into<String>, key: impl Into<String>, rights: Rights) -> Self {
        Self { name: name.into(), key: key.into(), rights }
    }
}

impl fmt::Debug for SasPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SasPolicy")
            .field("name", &self.name)
            .field("key", &"<redacted>")
            .field("rights", &self.rights)
            .finish()
    }
}

/// Verifies SAS tokens and SASL PLAIN credentials against a fixed set of namespace policies.
#[derive(Debug, Clone)]
pub struct Authorizer {
    policies: Vec<SasPolicy>,
}

impl Authorizer {
    /// An authorizer for `policies`.
    ///
    /// # Behavior
    /// - Fails on an empty name, an empty key or two policies with the same name (names are
    ///   case-sensitive, as `skn` is matched exactly).
    /// - No policies at all is allowed: every token then fails with `UnknownPolicy`.
    pub fn new(policies: Vec<SasPolicy>) -> Result<Self, PolicyError> {
        for (i, policy) in policies.iter().enumerate() {
            if policy.name.is_empty() {
                return Err(PolicyError::EmptyName);
            }
            if policy.key.is_empty() {
                return Err(PolicyError::EmptyKey { name: policy.name.clone() });
            }
            if policies[..i].iter().any(|earlier| earlier.name == policy.name) {
                return Err(PolicyError::Duplicate { name: policy.name.clone() });
            }
        }
        Ok(Self { policies })
    }

    /// The emulator's well-known credentials: one policy [`DEVELOPMENT_POLICY_NAME`] with key
    /// [`DEVELOPMENT_KEY`] and all rights. For local development only.
    pub fn development() -> Self {
        Self {
            policies: vec![SasPolicy::new(
                DEVELOPMENT_POLICY_NAME,
                DEVELOPMENT_KEY,
                Rights::MANAGE,
            )],
        }
    }

    /// Whether any policy uses the public [`DEVELOPMENT_KEY`], so that the server can refuse to
    /// listen beyond loopback with it.
    pub fn uses_development_key(&self) -> bool {
        self.policies.iter().any(|policy| policy.key == DEVELOPMENT_KEY)
    }

    /// Verifies a SAS token
    /// (`SharedAccessSignature sr=<enc(uri)>&sig=<enc(base64)>&se=<unix seconds>&skn=<enc(name)>`)
    /// and returns what it entitles its holder to.
    ///
    /// # Behavior
    /// - [`Malformed`](AuthErrorKind::Malformed): no `SharedAccessSignature ` prefix (JWT / Entra
    ///   ID tokens are not supported); a part without `=`; `sr`, `sig`, `se` or `skn` missing or
    ///   given twice; `se` not a decimal number of seconds; a bad `%` escape; `sig` not base64.
    ///   Parameters come in any order; empty parts and unknown parameters are ignored.
    /// - [`UnknownPolicy`](AuthErrorKind::UnknownPolicy): no policy named the decoded `skn`.
    /// - [`InvalidSignature`](AuthErrorKind::InvalidSignature): the decoded `sig` is not
    ///   HMAC-SHA256(UTF-8 key, raw `sr` + `"\n"` + raw `se`). Compared in constant time.
    /// - [`Expired`](AuthErrorKind::Expired): `se` seconds is not after `now` (checked after
    ///   the signature, so only genuine tokens are reported as expired).
    /// - On success the claim's audience is the decoded `sr`, normalized ([`Audience`]), and
    ///   `expires_at` is `se` in milliseconds.
    pub fn verify_token(&self, token: &str, now: Timestamp) -> Result<Claim, AuthError> {
        self.verify_token_with(token, now, None)
    }

    /// [`verify_token`](Authorizer::verify_token), with the authorization rules of the entity
    /// the token is for as further keys.
    ///
    /// # Behavior
    /// - A namespace policy named by `skn` whose key signed the token wins.
    /// - Otherwise a rule of `entity` with that key name whose primary or secondary key signed
    ///   it: the claim has the rule's rights, and only if the token's audience lies within the
    ///   entity (the entity itself or below it); a token for the namespace or another entity
    ///   signed with an entity's key is [`InsufficientRights`](AuthErrorKind::InsufficientRights).
    /// - [`InvalidSignature`](AuthErrorKind::InvalidSignature) when a policy or rule of that
    ///   name exists but no key of it signed the token;
    ///   [`UnknownPolicy`](AuthErrorKind::UnknownPolicy) when none does.
    pub fn verify_token_with(
        &self,
        token: &str,
        now: Timestamp,
        entity: Option<EntityRules<'_>>,
    ) -> Result<Claim, AuthError> {
        let token = SasToken::parse(token)?;
        let mut named = false;
        if let Some(policy) = self.policies.iter().find(|policy| policy.name == token.policy) {
            named = true;
            if token.signed_with(&policy.key) {
                return token.into_claim(policy.rights, now);
            }
        }
        if let Some(entity) = entity {
            let rule = entity.rules.iter().find(|rule| rule.key_name == token.policy);
            if let Some(rule) = rule {
                named = true;
                if rule.keys().any(|key| token.signed_with(key)) {
                    let scope = Audience::from_uri(entity.entity);
                    if !scope.covers(token.audience.as_str()) {
                        return Err(AuthError::new(
                            AuthErrorKind::InsufficientRights,
                            format!(
                                "token signed with the key of rule {} of {} is for {}, outside \
                                 that entity",
                                rule.key_name, entity.entity, token.audience
                            ),
                        ));
                    }
                    return token.into_claim(rule.rights, now);
                }
            }
        }
        Err(if named {
            AuthError::new(
                AuthErrorKind::InvalidSignature,
                format!("token signature does not match the key of policy {}", token.policy),
            )
        } else {
            AuthError::new(
                AuthErrorKind::UnknownPolicy,
                format!("no shared access policy named {}", token.policy),
            )
        })
    }

    /// Verifies SASL PLAIN credentials (user name = policy name, password = key).
    ///
    /// # Behavior
    /// - [`UnknownPolicy`](AuthErrorKind::UnknownPolicy) when no policy has that name;
    ///   [`InvalidSignature`](AuthErrorKind::InvalidSignature) when the key differs (compared in
    ///   constant time, independent of where or whether the lengths differ).
    /// - On success: a claim for the whole namespace that never expires, with the policy's
    ///   rights. The connection's links are then checked against it like a CBS claim.
    pub fn verify_key(&self, policy_name: &str, key: &str) -> Result<Claim, AuthError> {
        let policy = self.policy(policy_name)?;
        if !keys_equal(&policy.key, key) {
            return Err(AuthError::new(
                AuthErrorKind::InvalidSignature,
                format!("key does not match policy {}", policy.name),
            ));
        }
        Ok(Claim {
            audience: Audience::namespace(),
            rights: policy.rights,
            expires_at: Timestamp::MAX,
            policy: policy.name.clone(),
        })
    }

    /// The namespace policies, in the order given.
    pub fn policies(&self) -> &[SasPolicy] {
        &self.policies
    }

    fn policy(&self, name: &str) -> Result<&SasPolicy, AuthError> {
        self.policies.iter().find(|policy| policy.name == name).ok_or_else(|| {
            AuthError::new(
                AuthErrorKind::UnknownPolicy,
                format!("no shared access policy named {name}"),
            )
        })
    }
}

/// An entity's authorization rules, offered to [`Authorizer::verify_token_with`].
#[derive(Debug, Clone, Copy)]
pub struct EntityRules<'a> {
    /// The queue or topic the rules belong to (its path).
    pub entity: &'a str,
    pub rules: &'a [AuthorizationRule],
}

/// Constant-time equality of two keys: compares their SHA-256 digests, so neither the position
/// of the first difference nor a length difference changes the work done.
fn keys_equal(expected: &str, given: &str) -> bool {
    let expected = Sha256::digest(expected.as_bytes());
    let given = Sha256::digest(given.as_bytes());
    let difference = expected.iter().zip(given.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    std::hint::black_box(difference) == 0
}
