//! Shared access signature (SAS) authorization, shared by every transport.
//!
//! The AMQP transport feeds it the tokens of CBS `put-token` requests and the policy name and key
//! of SASL PLAIN; the HTTP transport feeds it the `Authorization` header. Both then ask the
//! resulting [`Claim`] whether it allows a [`Right`] on an entity path. Mapping an [`AuthError`]
//! to a wire status (CBS 401/400, HTTP 401) is the transport's job.
//!
//! Invariants:
//! - Pure: no clock, no I/O. The caller passes `now`.
//! - A token's signature is checked over the `sr` text exactly as received (still URL-encoded),
//!   never over a re-encoding: the SDKs disagree on how to encode (`quote_plus`,
//!   `encodeURIComponent`, form encoding, lower-cased escapes) and every variant must verify.
//! - Keys and signatures are compared in constant time; keys never appear in `Debug` output or
//!   error messages.
//! - Audiences ignore scheme, host, port, query and case: clients sign `https://` while talking
//!   plain HTTP, sign the public host name behind a proxy, and add or drop ports.

mod percent;
mod rules;

use std::fmt;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::{alphabet, Engine as _};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::types::Timestamp;

pub use rules::{
    validate_rules, AuthorizationRule, MAX_AUTHORIZATION_RULES, MAX_KEY_LEN, MAX_KEY_NAME_LEN,
};

/// The text every SAS token starts with.
pub const SAS_TOKEN_PREFIX: &str = "SharedAccessSignature ";

/// The policy name of the development policy ([`Authorizer::development`]).
pub const DEVELOPMENT_POLICY_NAME: &str = "RootManageSharedAccessKey";

/// The well-known key of Microsoft's Service Bus emulator. Public: anyone can sign with it.
pub const DEVELOPMENT_KEY: &str = "SAS_KEY_VALUE";

type HmacSha256 = Hmac<Sha256>;

/// Standard base64 that accepts a signature with or without `=` padding.
const SIGNATURE_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// One right a shared access policy can grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Right {
    /// Create, update and delete entities, and everything Send and Listen allow.
    Manage,
    /// Send messages, schedule and cancel scheduled messages.
    Send,
    /// Receive, peek, settle, renew locks, manage sessions and rules of a subscription.
    Listen,
}

impl fmt::Display for Right {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Right::Manage => "Manage",
            Right::Send => "Send",
            Right::Listen => "Listen",
        })
    }
}

/// The set of rights a policy grants.
///
/// # Behavior
/// - Manage implies Send and Listen, as in Service Bus: adding Manage adds all three, so a
///   `Rights` with Manage but without Send cannot be built.
/// - Built with the constants, [`Rights::of`], [`Rights::with`] or `collect()` over [`Right`]s.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Rights(u8);

impl Rights {
    const MANAGE_BIT: u8 = 1;
    const SEND_BIT: u8 = 2;
    const LISTEN_BIT: u8 = 4;

    /// No rights at all.
    pub const NONE: Rights = Rights(0);
    /// Send only.
    pub const SEND: Rights = Rights(Self::SEND_BIT);
    /// Listen only.
    pub const LISTEN: Rights = Rights(Self::LISTEN_BIT);
    /// Manage, and therefore Send and Listen too.
    pub const MANAGE: Rights = Rights(Self::MANAGE_BIT | Self::SEND_BIT | Self::LISTEN_BIT);

    /// The rights granted by `right` alone (Manage brings Send and Listen).
    pub const fn of(right: Right) -> Rights {
        match right {
            Right::Manage => Self::MANAGE,
            Right::Send => Self::SEND,
            Right::Listen => Self::LISTEN,
        }
    }

    /// `self` plus `right` (and what `right` implies).
    #[must_use]
    pub const fn with(self, right: Right) -> Rights {
        Rights(self.0 | Self::of(right).0)
    }

    /// Whether these rights allow an operation that needs `right`.
    pub const fn allows(self, right: Right) -> bool {
        let bit = match right {
            Right::Manage => Self::MANAGE_BIT,
            Right::Send => Self::SEND_BIT,
            Right::Listen => Self::LISTEN_BIT,
        };
        self.0 & bit != 0
    }

    fn iter(self) -> impl Iterator<Item = Right> {
        [Right::Manage, Right::Send, Right::Listen]
            .into_iter()
            .filter(move |&right| self.allows(right))
    }
}

impl From<Right> for Rights {
    fn from(right: Right) -> Self {
        Rights::of(right)
    }
}

impl FromIterator<Right> for Rights {
    fn from_iter<I: IntoIterator<Item = Right>>(rights: I) -> Self {
        rights.into_iter().fold(Rights::NONE, Rights::with)
    }
}

/// Lists the rights, e.g. `Send, Listen`; `none` for no rights.
impl fmt::Display for Rights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rights = self.iter().peekable();
        if rights.peek().is_none() {
            return f.write_str("none");
        }
        for (i, right) in rights.enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{right}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Rights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rights({self})")
    }
}

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

/// Why a set of policies cannot make an [`Authorizer`]: a configuration mistake.
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

    fn malformed(message: impl Into<String>) -> Self {
        Self::new(AuthErrorKind::Malformed, message)
    }
}

/// The resource a token is for, normalized to a path: no scheme, host, port, query, fragment,
/// leading or trailing `/`, and lower case. The empty path is the whole namespace.
///
/// # Behavior
/// - `sb://localhost:5672/q`, `amqps://Host/Q/`, `https://ns:443/q?x=1` and `q` all give `q`;
///   `sb://ns/`, `https://localhost:5300` and `""` give the namespace.
/// - A string counts as a URI when it starts with `scheme://` (any scheme); everything up to the
///   first `/` after that is the host and is dropped, and the path is percent-decoded once
///   (leniently: kept as is if it does not decode). Anything else is taken as a bare path.
/// - Comparison is case-insensitive because Service Bus entity names are.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Audience(String);

impl Audience {
    /// The whole namespace: covers every path.
    pub fn namespace() -> Self {
        Self(String::new())
    }

    /// Normalizes a URI or bare path that is no longer URL-encoded (decode a SAS `sr` first).
    pub fn from_uri(uri: &str) -> Self {
        Self(normalize_path(uri))
    }

    /// The normalized path, without leading or trailing `/`; empty for the namespace.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_namespace(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether this audience covers `path` (a link address, entity path or request path, with or
    /// without `scheme://host[:port]`, normalized the same way).
    ///
    /// # Behavior
    /// - True when the audience equals the path or is a whole-segment prefix of it: `q` covers
    ///   `q`, `Q/`, `q/$management`, `q/$DeadLetterQueue`, but not `q2` or the namespace itself.
    /// - The namespace audience covers everything.
    pub fn covers(&self, path: &str) -> bool {
        if self.is_namespace() {
            return true;
        }
        let path = normalize_path(path);
        match path.strip_prefix(self.0.as_str()) {
            Some(rest) => rest.is_empty() || rest.starts_with('/'),
            None => false,
        }
    }
}

/// `/` for the namespace, else `/` followed by the path.
impl fmt::Display for Audience {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "/{}", self.0)
    }
}

fn normalize_path(uri: &str) -> String {
    let end = uri.find(['?', '#']).unwrap_or(uri.len());
    let uri = &uri[..end];
    let path = match uri.split_once("://") {
        Some((scheme, rest)) if is_scheme(scheme) => {
            let path = rest.find('/').map_or("", |slash| &rest[slash..]);
            percent::decode(path).unwrap_or_else(|| path.to_owned())
        }
        _ => uri.to_owned(),
    };
    path.trim_matches('/').to_lowercase()
}

/// RFC 3986: `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`.
fn is_scheme(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

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

/// Builds a SAS token for `resource_uri` the way the SDKs do:
/// `SharedAccessSignature sr=<enc(uri)>&sig=<enc(base64(hmac))>&se=<seconds>&skn=<enc(name)>`.
///
/// # Behavior
/// - `enc` escapes everything but `A-Z a-z 0-9 - _ . ~` (upper-case hex), which matches
///   Python's `quote_plus` and JS's `encodeURIComponent` for every URI an SDK signs.
/// - `se` is `expires_at` in whole seconds, rounded down (and never negative).
pub fn generate_token(
    resource_uri: &str,
    policy_name: &str,
    key: &str,
    expires_at: Timestamp,
) -> String {
    let resource = percent::encode(resource_uri);
    let expiry = expires_at.as_millis().div_euclid(1000).max(0);
    let mut mac = hmac_for(key);
    mac.update(format!("{resource}\n{expiry}").as_bytes());
    let signature = STANDARD.encode(mac.finalize().into_bytes());
    format!(
        "{SAS_TOKEN_PREFIX}sr={resource}&sig={}&se={expiry}&skn={}",
        percent::encode(&signature),
        percent::encode(policy_name),
    )
}

fn hmac_for(key: &str) -> HmacSha256 {
    // HMAC takes keys of any length; an error here would be a bug in the hmac crate.
    HmacSha256::new_from_slice(key.as_bytes()).expect("hmac accepts keys of any length")
}

/// Constant-time equality of two keys: compares their SHA-256 digests, so neither the position
/// of the first difference nor a length difference changes the work done.
fn keys_equal(expected: &str, given: &str) -> bool {
    let expected = Sha256::digest(expected.as_bytes());
    let given = Sha256::digest(given.as_bytes());
    let difference = expected.iter().zip(given.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    std::hint::black_box(difference) == 0
}

/// The parts of a SAS token, parsed but not yet verified.
struct SasToken<'a> {
    /// `sr` as received, still URL-encoded: what was signed.
    raw_resource: &'a str,
    /// `se` as received: what was signed.
    raw_expiry: &'a str,
    audience: Audience,
    expires_at: Timestamp,
    signature: Vec<u8>,
    policy: String,
}

impl<'a> SasToken<'a> {
    fn parse(token: &'a str) -> Result<Self, AuthError> {
        let Some(parameters) = token.strip_prefix(SAS_TOKEN_PREFIX) else {
            return Err(AuthError::malformed(
                "not a shared access signature: only tokens starting with \
                 'SharedAccessSignature ' are supported (jwt / entra id tokens are not)",
            ));
        };
        let [mut sr, mut sig, mut se, mut skn] = [None::<&str>; 4];
        for part in parameters.split('&').filter(|part| !part.is_empty()) {
            let Some((name, value)) = part.split_once('=') else {
                return Err(AuthError::malformed("token parameter without '='"));
            };
            let slot = match name {
                "sr" => &mut sr,
                "sig" => &mut sig,
                "se" => &mut se,
                "skn" => &mut skn,
                _ => continue,
            };
            if slot.replace(value).is_some() {
                return Err(AuthError::malformed(format!("token parameter {name} given twice")));
            }
        }
        let require = |value: Option<&'a str>, name: &str| {
            value.ok_or_else(|| AuthError::malformed(format!("token parameter {name} is missing")))
        };
        let (raw_resource, sig, raw_expiry, skn) =
            (require(sr, "sr")?, require(sig, "sig")?, require(se, "se")?, require(skn, "skn")?);

        let decode = |value: &str, name: &str| {
            percent::decode(value).ok_or_else(|| {
                AuthError::malformed(format!("token parameter {name} is not validly url-encoded"))
            })
        };
        let audience = Audience::from_uri(&decode(raw_resource, "sr")?);
        let signature = SIGNATURE_BASE64
            .decode(decode(sig, "sig")?)
            .map_err(|_| AuthError::malformed("token parameter sig is not base64"))?;
        let policy = decode(skn, "skn")?;
        let seconds = parse_seconds(raw_expiry)
            .ok_or_else(|| AuthError::malformed("token parameter se is not a number of seconds"))?;
        Ok(Self {
            raw_resource,
            raw_expiry,
            audience,
            expires_at: Timestamp::from_millis(seconds.saturating_mul(1000)),
            signature,
            policy,
        })
    }
}

impl SasToken<'_> {
    /// Whether `key` signed the token: HMAC-SHA256 over the raw `sr`, `\n` and the raw `se`,
    /// compared in constant time.
    fn signed_with(&self, key: &str) -> bool {
        let mut mac = hmac_for(key);
        mac.update(self.raw_resource.as_bytes());
        mac.update(b"\n");
        mac.update(self.raw_expiry.as_bytes());
        mac.verify_slice(&self.signature).is_ok()
    }

    /// The claim of a genuine token with `rights`, unless it has expired.
    fn into_claim(self, rights: Rights, now: Timestamp) -> Result<Claim, AuthError> {
        if now >= self.expires_at {
            return Err(AuthError::new(
                AuthErrorKind::Expired,
                format!("token expired at se={}", self.raw_expiry),
            ));
        }
        Ok(Claim {
            audience: self.audience,
            rights,
            expires_at: self.expires_at,
            policy: self.policy,
        })
    }
}

/// The audience (`sr`) of a SAS token, parsed but not verified: where a transport looks for the
/// entity whose authorization rules may have signed it.
///
/// # Behavior
/// Fails like [`Authorizer::verify_token`] on a malformed token.
pub fn token_audience(token: &str) -> Result<Audience, AuthError> {
    Ok(SasToken::parse(token)?.audience)
}

/// An entity's authorization rules, offered to [`Authorizer::verify_token_with`].
#[derive(Debug, Clone, Copy)]
pub struct EntityRules<'a> {
    /// The queue or topic the rules belong to (its path).
    pub entity: &'a str,
    pub rules: &'a [AuthorizationRule],
}

/// Decimal digits only (no sign, no spaces), fitting an `i64`.
fn parse_seconds(text: &str) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "SAS_KEY_VALUE";
    const ROOT: &str = "RootManageSharedAccessKey";
    /// 2025-01-01T00:00:00Z.
    const SE: i64 = 1_735_689_600;

    fn at_seconds(seconds: i64) -> Timestamp {
        Timestamp::from_millis(seconds * 1000)
    }

    /// One second before `SE`.
    fn before_expiry() -> Timestamp {
        at_seconds(SE - 1)
    }

    fn authorizer() -> Authorizer {
        Authorizer::new(vec![
            SasPolicy::new(ROOT, KEY, Rights::MANAGE),
            SasPolicy::new("sender", "send-key", Rights::SEND),
            SasPolicy::new("listener", "listen-key", Rights::LISTEN),
            SasPolicy::new("send.listen", "send-listen-key", Rights::SEND.with(Right::Listen)),
        ])
        .expect("valid policies")
    }

    // ---- Independent re-implementations of the SDKs' encoders and token layouts. ----

    /// Python `urllib.parse.quote_plus` (safe: alphanumerics and `_.-~`; space → `+`).
    fn quote_plus(text: &str) -> String {
        encode_with(text, |b| b.is_ascii_alphanumeric() || b"_.-~".contains(&b), true)
    }

    /// JS `encodeURIComponent` (safe: alphanumerics and `-_.!~*'()`).
    fn encode_uri_component(text: &str) -> String {
        encode_with(text, |b| b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b), false)
    }

    /// Rust `form_urlencoded` (safe: alphanumerics and `*-._`; space → `+`).
    fn form_urlencode(text: &str) -> String {
        encode_with(text, |b| b.is_ascii_alphanumeric() || b"*-._".contains(&b), true)
    }

    fn encode_with(text: &str, safe: impl Fn(u8) -> bool, space_as_plus: bool) -> String {
        let mut out = String::new();
        for b in text.bytes() {
            if safe(b) {
                out.push(char::from(b));
            } else if b == b' ' && space_as_plus {
                out.push('+');
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    }

    fn signature(key: &str, signed: &str) -> String {
        let mut mac = HmacSha256::new_from_slice(key.as_bytes()).unwrap();
        mac.update(signed.as_bytes());
        STANDARD.encode(mac.finalize().into_bytes())
    }

    /// A token whose `sr` text is `raw_sr` (already encoded), with parameters in `order`.
    fn token_in_order(
        order: &[&str],
        raw_sr: &str,
        encode: fn(&str) -> String,
        policy: &str,
        key: &str,
        se: i64,
    ) -> String {
        let sig = encode(&signature(key, &format!("{raw_sr}\n{se}")));
        let parts: Vec<String> = order
            .iter()
            .map(|&name| match name {
                "sr" => format!("sr={raw_sr}"),
                "sig" => format!("sig={sig}"),
                "se" => format!("se={se}"),
                "skn" => format!("skn={}", encode(policy)),
                other => other.to_owned(),
            })
            .collect();
        format!("SharedAccessSignature {}", parts.join("&"))
    }

    const PY_ORDER: &[&str] = &["sr", "sig", "se", "skn"];
    const RS_ORDER: &[&str] = &["sig", "se", "skn", "sr"];

    /// `azure-servicebus` (pyamqp `generate_sas_token`): quote_plus, order sr, sig, se, skn.
    fn python_token(audience: &str, policy: &str, key: &str, se: i64) -> String {
        token_in_order(PY_ORDER, &quote_plus(audience), quote_plus, policy, key, se)
    }

    /// `@azure/core-amqp` token provider: encodeURIComponent, order sr, sig, se, skn.
    fn js_token(audience: &str, policy: &str, key: &str, se: i64) -> String {
        token_in_order(
            PY_ORDER,
            &encode_uri_component(audience),
            encode_uri_component,
            policy,
            key,
            se,
        )
    }

    /// The Rust SDK: form_urlencoded, order sig, se, skn, sr.
    fn rust_token(audience: &str, policy: &str, key: &str, se: i64) -> String {
        token_in_order(RS_ORDER, &form_urlencode(audience), form_urlencode, policy, key, se)
    }

    /// JS admin client: the encoded audience lower-cased (`%3a%2f`), order sig, se, skn, sr.
    fn js_admin_token(audience: &str, policy: &str, key: &str, se: i64) -> String {
        let raw_sr = encode_uri_component(&audience.to_lowercase()).to_lowercase();
        token_in_order(RS_ORDER, &raw_sr, encode_uri_component, policy, key, se)
    }

    // ---- Golden tokens, computed with python3's stdlib (hmac, hashlib, base64,
    // urllib.parse.quote_plus / urlencode), exactly like pyamqp's generate_sas_token:
    //   enc = quote_plus(aud)
    //   sig = b64encode(hmac.new(key.encode(), f"{enc}\n{se}".encode(), sha256).digest())
    //   "SharedAccessSignature " + urlencode({"sr": aud, "sig": sig, "se": str(se), "skn": name})
    // with key = "SAS_KEY_VALUE", name = "RootManageSharedAccessKey", se = 1735689600. ----

    const GOLDEN: &[(&str, &str)] = &[
        (
            "sb://localhost:5672/q",
            "SharedAccessSignature sr=sb%3A%2F%2Flocalhost%3A5672%2Fq\
             &sig=Vh75mS2naQbCpCSVVVuDGd5uwj6L00geDnoAgXYZRt4%3D&se=1735689600\
             &skn=RootManageSharedAccessKey",
        ),
        (
            "sb://localhost/orders/Subscriptions/audit",
            "SharedAccessSignature sr=sb%3A%2F%2Flocalhost%2Forders%2FSubscriptions%2Faudit\
             &sig=fCh3rhn4Ru4o%2FT9eHZqTHTt7kc39e0oTgBpF8I%2BBNWA%3D&se=1735689600\
             &skn=RootManageSharedAccessKey",
        ),
    ];

    #[test]
    fn golden_python_tokens_verify() {
        let auth = Authorizer::development();
        for &(audience, token) in GOLDEN {
            let claim = auth.verify_token(token, before_expiry()).expect(audience);
            assert_eq!(claim.audience, Audience::from_uri(audience));
            assert_eq!(claim.rights, Rights::MANAGE);
            assert_eq!(claim.expires_at, at_seconds(SE));
            assert_eq!(claim.policy, ROOT);
        }
    }

    #[test]
    fn generate_token_matches_python_byte_for_byte() {
        for &(audience, token) in GOLDEN {
            assert_eq!(generate_token(audience, ROOT, KEY, at_seconds(SE)), token);
        }
    }

    #[test]
    fn generate_token_rounds_expiry_down_to_seconds() {
        let token = generate_token("sb://h/q", ROOT, KEY, Timestamp::from_millis(SE * 1000 + 999));
        assert!(token.contains(&format!("&se={SE}&")), "{token}");
        let claim = Authorizer::development().verify_token(&token, before_expiry()).unwrap();
        assert_eq!(claim.expires_at, at_seconds(SE));
    }

    #[test]
    fn generated_tokens_verify_for_every_policy() {
        let auth = authorizer();
        for (policy, key, rights) in [
            (ROOT, KEY, Rights::MANAGE),
            ("sender", "send-key", Rights::SEND),
            ("send.listen", "send-listen-key", Rights::SEND.with(Right::Listen)),
        ] {
            let token =
                generate_token("amqps://Host:5671/q/$management", policy, key, at_seconds(SE));
            let claim = auth.verify_token(&token, before_expiry()).expect(policy);
            assert_eq!(claim.audience.as_str(), "q/$management");
            assert_eq!(claim.rights, rights);
            assert_eq!(claim.policy, policy);
        }
    }

    #[test]
    fn every_sdk_encoding_and_parameter_order_verifies() {
        let auth = authorizer();
        type Maker = fn(&str, &str, &str, i64) -> String;
        let cases: &[(&str, Maker, &str, &str)] = &[
            ("python", python_token, "sb://localhost:5672/q", "q"),
            ("js", js_token, "sb://localhost/q", "q"),
            (
                "js, subscription dlq",
                js_token,
                "sb://localhost/t/Subscriptions/s/$DeadLetterQueue",
                "t/subscriptions/s/$deadletterqueue",
            ),
            (
                "rust",
                rust_token,
                "amqps://ns.servicebus.windows.net/q/$management",
                "q/$management",
            ),
            (
                "rust, http url with query",
                rust_token,
                "https://ns.servicebus.windows.net/q1/messages/head?timeout=5",
                "q1/messages/head",
            ),
            (
                "js admin, lower-cased",
                js_admin_token,
                "https://localhost:18445/$Resources/Queues?api-version=2021-05",
                "$resources/queues",
            ),
            ("python admin, namespace root", python_token, "https://localhost:5300", ""),
            ("python, sb namespace", python_token, "sb://ns/", ""),
            ("python, ~ and dotted policy", python_token, "sb://h/q~1", "q~1"),
        ];
        for &(name, make, audience, expected) in cases {
            let (policy, key) = if name.contains("dotted") {
                ("send.listen", "send-listen-key")
            } else {
                (ROOT, KEY)
            };
            let token = make(audience, policy, key, SE);
            let claim = auth
                .verify_token(&token, before_expiry())
                .unwrap_or_else(|e| panic!("{name}: {e} ({token})"));
            assert_eq!(claim.audience.as_str(), expected, "{name}");
            assert_eq!(claim.policy, policy, "{name}");
        }
    }

    #[test]
    fn parameters_are_accepted_in_any_order() {
        let auth = Authorizer::development();
        let raw_sr = quote_plus("sb://localhost:5672/q");
        let orders: &[&[&str]] = &[
            &["sr", "sig", "se", "skn"],
            &["sig", "se", "skn", "sr"],
            &["skn", "se", "sig", "sr"],
            &["se", "sr", "skn", "sig"],
            &["sr", "sig", "se", "skn", ""],
            &["", "sr", "", "sig", "se", "skn"],
            &["sr", "sig", "extra=1", "se", "skn"],
        ];
        for &order in orders {
            let token = token_in_order(order, &raw_sr, quote_plus, ROOT, KEY, SE);
            assert!(auth.verify_token(&token, before_expiry()).is_ok(), "{order:?}: {token}");
        }
    }

    #[test]
    fn expiry_boundary() {
        let auth = Authorizer::development();
        let token = python_token("sb://h/q", ROOT, KEY, SE);
        let cases = [
            (Timestamp::from_millis(0), true),
            (Timestamp::from_millis(SE * 1000 - 1), true),
            (Timestamp::from_millis(SE * 1000), false),
            (Timestamp::from_millis(SE * 1000 + 1), false),
            (at_seconds(SE + 3600), false),
        ];
        for (now, valid) in cases {
            match auth.verify_token(&token, now) {
                Ok(claim) => {
                    assert!(valid, "accepted at {now}");
                    assert!(claim.authorizes("q", Right::Send, now));
                    assert!(!claim.authorizes("q", Right::Send, at_seconds(SE)));
                }
                Err(e) => {
                    assert!(!valid, "refused at {now}: {e}");
                    assert_eq!(e.kind, AuthErrorKind::Expired, "{e}");
                }
            }
        }
    }

    #[test]
    fn bad_tokens_fail_with_the_right_kind() {
        use AuthErrorKind::*;
        let good = python_token("sb://h/q", ROOT, KEY, SE);
        let good_sig = good.split('&').find_map(|p| p.strip_prefix("sig=")).unwrap().to_owned();
        let truncated_sig = {
            let bytes = STANDARD.decode(percent::decode(&good_sig).unwrap()).unwrap();
            quote_plus(&STANDARD.encode(&bytes[..16]))
        };
        let sr = quote_plus("sb://h/q");
        let with_sig =
            |sig: &str| format!("SharedAccessSignature sr={sr}&sig={sig}&se={SE}&skn={ROOT}");
        let cases: Vec<(&str, String, AuthErrorKind)> = vec![
            ("empty", String::new(), Malformed),
            ("bearer jwt", "Bearer eyJhbGciOiJSUzI1NiJ9.e30.sig".into(), Malformed),
            ("bare jwt", "eyJhbGciOiJSUzI1NiJ9.e30.sig".into(), Malformed),
            (
                "prefix without space",
                good.replacen("SharedAccessSignature ", "SharedAccessSignature", 1),
                Malformed,
            ),
            (
                "lower-case prefix",
                good.replacen("SharedAccessSignature", "sharedaccesssignature", 1),
                Malformed,
            ),
            ("no parameters", "SharedAccessSignature ".into(), Malformed),
            ("missing sr", good.replacen(&format!("sr={sr}&"), "", 1), Malformed),
            ("missing sig", format!("SharedAccessSignature sr={sr}&se={SE}&skn={ROOT}"), Malformed),
            (
                "missing se",
                format!("SharedAccessSignature sr={sr}&sig={good_sig}&skn={ROOT}"),
                Malformed,
            ),
            (
                "missing skn",
                format!("SharedAccessSignature sr={sr}&sig={good_sig}&se={SE}"),
                Malformed,
            ),
            ("duplicate sr", format!("{good}&sr={sr}"), Malformed),
            ("duplicate skn", format!("{good}&skn={ROOT}"), Malformed),
            ("part without =", format!("{good}&junk"), Malformed),
            ("se not a number", good.replacen(&format!("se={SE}"), "se=soon", 1), Malformed),
            ("se negative", good.replacen(&format!("se={SE}"), "se=-1", 1), Malformed),
            (
                "se with plus",
                good.replacen(&format!("se={SE}"), &format!("se=+{SE}"), 1),
                Malformed,
            ),
            ("se empty", good.replacen(&format!("se={SE}"), "se=", 1), Malformed),
            (
                "se fractional",
                good.replacen(&format!("se={SE}"), &format!("se={SE}.5"), 1),
                Malformed,
            ),
            (
                "se overflows",
                good.replacen(&format!("se={SE}"), "se=99999999999999999999", 1),
                Malformed,
            ),
            ("sr bad escape", good.replacen("sr=sb%3A", "sr=sb%3", 1), Malformed),
            ("sr not utf-8", good.replacen("sr=sb", "sr=%FFsb", 1), Malformed),
            ("sig bad escape", with_sig("abc%zz"), Malformed),
            ("sig not base64", with_sig("not*base64"), Malformed),
            ("skn bad escape", good.replacen(&format!("skn={ROOT}"), "skn=%", 1), Malformed),
            ("unknown policy", python_token("sb://h/q", "nobody", KEY, SE), UnknownPolicy),
            (
                "policy name case differs",
                python_token("sb://h/q", "rootmanagesharedaccesskey", KEY, SE),
                UnknownPolicy,
            ),
            ("wrong key", python_token("sb://h/q", ROOT, "other-key", SE), InvalidSignature),
            (
                "key of another policy",
                python_token("sb://h/q", "sender", KEY, SE),
                InvalidSignature,
            ),
            (
                "se tampered",
                good.replacen(&format!("se={SE}"), &format!("se={}", SE + 3600), 1),
                InvalidSignature,
            ),
            (
                "se with leading zero",
                good.replacen(&format!("se={SE}"), &format!("se=0{SE}"), 1),
                InvalidSignature,
            ),
            ("sr tampered", good.replacen("%2Fq&", "%2Fq2&", 1), InvalidSignature),
            (
                "sr re-encoded",
                good.replacen("sr=sb%3A%2F%2F", "sr=sb%3a%2f%2f", 1),
                InvalidSignature,
            ),
            ("sig truncated", with_sig(&truncated_sig), InvalidSignature),
            (
                "sig of other text",
                with_sig(&quote_plus(&signature(KEY, "other"))),
                InvalidSignature,
            ),
            ("sig empty", with_sig(""), InvalidSignature),
            ("expired", python_token("sb://h/q", ROOT, KEY, SE - 1), Expired),
        ];
        let auth = authorizer();
        for (name, token, kind) in cases {
            let error = auth.verify_token(&token, at_seconds(SE - 1)).expect_err(name);
            assert_eq!(error.kind, kind, "{name}: {error} ({token})");
            let message = error.to_string();
            assert!(!message.ends_with('.'), "{name}: {message}");
            assert!(
                !message.contains(KEY) && !message.contains(&good_sig),
                "{name}: leaks: {message}"
            );
        }
    }

    #[test]
    fn jwt_tokens_are_refused_with_a_message_saying_so() {
        let error =
            authorizer().verify_token("Bearer eyJ0eXAi.e30.x", before_expiry()).unwrap_err();
        assert_eq!(error.kind, AuthErrorKind::Malformed);
        assert!(error.message.contains("jwt"), "{error}");
    }

    #[test]
    fn audience_normalization() {
        let cases = [
            ("sb://localhost:5672/q", "q"),
            ("amqps://Host/q/", "q"),
            ("amqp://h/q/$management", "q/$management"),
            ("http://localhost:5300/q/messages", "q/messages"),
            (
                "https://ns.servicebus.windows.net:443/Q1/Messages/head?timeout=5",
                "q1/messages/head",
            ),
            (
                "sb://ns.servicebus.windows.net/Orders/Subscriptions/Audit/$DeadLetterQueue",
                "orders/subscriptions/audit/$deadletterqueue",
            ),
            ("sb://h/q/$Transfer/$DeadLetterQueue", "q/$transfer/$deadletterqueue"),
            ("SB://HOST:1/Q", "q"),
            ("sb://h/q#fragment", "q"),
            ("https://h/%24resources/queues", "$resources/queues"),
            ("https://h/bad%zzescape", "bad%zzescape"),
            ("sb://h//q//", "q"),
            ("sb://ns/", ""),
            ("sb://ns", ""),
            ("https://localhost:5300", ""),
            ("https://localhost:5300/?api-version=2021-05", ""),
            ("q", "q"),
            ("/Q/", "q"),
            ("orders/Subscriptions/audit", "orders/subscriptions/audit"),
            ("$cbs", "$cbs"),
            ("", ""),
            ("/", ""),
            ("1bad://scheme/q", "1bad://scheme/q"),
        ];
        for (uri, expected) in cases {
            let audience = Audience::from_uri(uri);
            assert_eq!(audience.as_str(), expected, "{uri}");
            assert_eq!(audience.is_namespace(), expected.is_empty(), "{uri}");
        }
        assert_eq!(Audience::from_uri("sb://ns/").to_string(), "/");
        assert_eq!(Audience::from_uri("sb://ns/Q").to_string(), "/q");
    }

    #[test]
    fn audience_covers_itself_and_whole_segments_below_it() {
        let cases = [
            ("sb://h/q", "q", true),
            ("sb://h/q", "Q", true),
            ("sb://h/q", "q/", true),
            ("sb://h/q", "q/$management", true),
            ("sb://h/q", "q/$DeadLetterQueue", true),
            ("sb://h/q", "q/$DeadLetterQueue/$management", true),
            ("sb://h/q", "q/$Transfer/$DeadLetterQueue", true),
            ("sb://h/q", "amqps://other:5671/q/$management", true),
            ("amqps://h/Q/", "amqps://h/q", true),
            ("sb://h/q", "q2", false),
            ("sb://h/q", "qq/$management", false),
            ("sb://h/q", "", false),
            ("sb://h/q", "p/q", false),
            ("sb://h/q/$management", "q", false),
            ("sb://h/q/$management", "q/$management", true),
            ("sb://h/t", "t/Subscriptions/s", true),
            ("sb://h/t/Subscriptions/s", "t/subscriptions/s/$DeadLetterQueue", true),
            ("sb://h/t/Subscriptions/s", "t/subscriptions/s2", false),
            ("sb://h/t/Subscriptions/s", "t", false),
            ("http://localhost:5300/q/messages", "q/messages/head", true),
            ("http://localhost:5300/q/messages", "q", false),
            ("sb://ns/", "anything/at/all", true),
            ("sb://ns/", "", true),
            ("https://localhost:5300", "$Resources/Queues", true),
        ];
        for (audience, path, expected) in cases {
            assert_eq!(
                Audience::from_uri(audience).covers(path),
                expected,
                "{audience} covers {path}"
            );
        }
    }

    #[test]
    fn rights_and_their_implications() {
        use Right::*;
        let cases = [
            (Rights::NONE, [false, false, false]),
            (Rights::SEND, [false, true, false]),
            (Rights::LISTEN, [false, false, true]),
            (Rights::SEND.with(Listen), [false, true, true]),
            (Rights::MANAGE, [true, true, true]),
            (Rights::of(Manage), [true, true, true]),
            ([Manage].into_iter().collect(), [true, true, true]),
            (Rights::NONE.with(Send).with(Manage), [true, true, true]),
            ([Listen, Listen].into_iter().collect(), [false, false, true]),
        ];
        for (rights, [manage, send, listen]) in cases {
            assert_eq!(rights.allows(Manage), manage, "{rights:?} Manage");
            assert_eq!(rights.allows(Send), send, "{rights:?} Send");
            assert_eq!(rights.allows(Listen), listen, "{rights:?} Listen");
        }
        assert_eq!(Rights::MANAGE, [Send, Listen, Manage].into_iter().collect());
        assert_eq!(Rights::MANAGE.to_string(), "Manage, Send, Listen");
        assert_eq!(Rights::SEND.with(Listen).to_string(), "Send, Listen");
        assert_eq!(Rights::NONE.to_string(), "none");
    }

    #[test]
    fn claims_allow_only_their_policy_rights_on_their_audience() {
        use Right::*;
        let auth = authorizer();
        let now = before_expiry();
        let claim = |policy: &str, key: &str, audience: &str| {
            auth.verify_token(&python_token(audience, policy, key, SE), now).unwrap()
        };
        let cases = [
            (claim("sender", "send-key", "sb://h/q"), "q", Send, true),
            (claim("sender", "send-key", "sb://h/q"), "q", Listen, false),
            (claim("sender", "send-key", "sb://h/q"), "q/$management", Manage, false),
            (claim("listener", "listen-key", "sb://h/q"), "q/$DeadLetterQueue", Listen, true),
            (claim("listener", "listen-key", "sb://h/q"), "q", Send, false),
            (claim(ROOT, KEY, "sb://h/q"), "q", Manage, true),
            (claim(ROOT, KEY, "sb://h/q"), "q", Send, true),
            (claim(ROOT, KEY, "sb://h/q"), "q", Listen, true),
            (claim(ROOT, KEY, "sb://h/q"), "q2", Send, false),
            (claim(ROOT, KEY, "sb://h/"), "q2", Send, true),
        ];
        for (claim, path, right, expected) in cases {
            let result = claim.check(path, right, now);
            assert_eq!(result.is_ok(), expected, "{} {path} {right}: {result:?}", claim.policy);
            assert_eq!(claim.authorizes(path, right, now), expected);
            if let Err(error) = result {
                assert_eq!(error.kind, AuthErrorKind::InsufficientRights, "{error}");
            }
        }
        let expired = claim("sender", "send-key", "sb://h/q").check("q", Send, at_seconds(SE));
        assert_eq!(expired.unwrap_err().kind, AuthErrorKind::Expired);
    }

    #[test]
    fn verify_key_checks_name_and_key() {
        use AuthErrorKind::*;
        let auth = authorizer();
        let cases = [
            (ROOT, KEY, Ok(Rights::MANAGE)),
            ("sender", "send-key", Ok(Rights::SEND)),
            ("listener", "listen-key", Ok(Rights::LISTEN)),
            ("send.listen", "send-listen-key", Ok(Rights::SEND.with(Right::Listen))),
            (ROOT, "send-key", Err(InvalidSignature)),
            (ROOT, "SAS_KEY_VALU", Err(InvalidSignature)),
            (ROOT, "SAS_KEY_VALUEX", Err(InvalidSignature)),
            (ROOT, "sas_key_value", Err(InvalidSignature)),
            (ROOT, "", Err(InvalidSignature)),
            ("nobody", KEY, Err(UnknownPolicy)),
            ("", KEY, Err(UnknownPolicy)),
        ];
        for (name, key, expected) in cases {
            let result = auth.verify_key(name, key);
            match (&result, expected) {
                (Ok(claim), Ok(rights)) => {
                    assert_eq!(claim.rights, rights, "{name}");
                    assert!(claim.audience.is_namespace());
                    assert_eq!(claim.expires_at, Timestamp::MAX);
                    assert_eq!(claim.policy, name);
                    assert_eq!(
                        claim.authorizes("any/entity", Right::Send, at_seconds(SE)),
                        rights.allows(Right::Send)
                    );
                }
                (Err(error), Err(kind)) => {
                    assert_eq!(error.kind, kind, "{name}/{key}: {error}");
                    assert!(!error.to_string().contains(KEY), "{error}");
                }
                _ => panic!("{name}/{key}: got {result:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn authorizer_rejects_bad_policy_sets() {
        let policy = |name: &str, key: &str| SasPolicy::new(name, key, Rights::SEND);
        let cases = [
            (vec![policy("", "k")], Some(PolicyError::EmptyName)),
            (vec![policy("a", "")], Some(PolicyError::EmptyKey { name: "a".into() })),
            (
                vec![policy("a", "k"), policy("a", "k2")],
                Some(PolicyError::Duplicate { name: "a".into() }),
            ),
            (vec![policy("a", "k"), policy("A", "k2")], None),
            (vec![], None),
        ];
        for (policies, expected) in cases {
            assert_eq!(Authorizer::new(policies.clone()).err(), expected, "{policies:?}");
        }
        let empty = Authorizer::new(vec![]).unwrap();
        let error = empty
            .verify_token(&python_token("sb://h/q", ROOT, KEY, SE), before_expiry())
            .unwrap_err();
        assert_eq!(error.kind, AuthErrorKind::UnknownPolicy);
    }

    #[test]
    fn development_authorizer_uses_the_emulator_key() {
        let dev = Authorizer::development();
        assert!(dev.uses_development_key());
        assert_eq!(
            dev.verify_key(DEVELOPMENT_POLICY_NAME, DEVELOPMENT_KEY).unwrap().rights,
            Rights::MANAGE
        );
        assert!(!authorizer_without_dev_key().uses_development_key());
    }

    fn authorizer_without_dev_key() -> Authorizer {
        Authorizer::new(vec![SasPolicy::new(ROOT, "a-real-key", Rights::MANAGE)]).unwrap()
    }

    #[test]
    fn debug_output_never_shows_keys() {
        let text = format!("{:?}", authorizer());
        assert!(
            text.contains("RootManageSharedAccessKey") && text.contains("<redacted>"),
            "{text}"
        );
        for key in [KEY, "send-key", "listen-key", "send-listen-key"] {
            assert!(!text.contains(key), "{text}");
        }
    }

    #[test]
    fn entity_rules_sign_tokens_for_their_entity_only() {
        use AuthErrorKind::*;
        let auth = authorizer();
        let now = before_expiry();
        let rules = [
            AuthorizationRule::new("q-send", "q-primary", "q-secondary", Rights::SEND),
            AuthorizationRule::new("q-all", "q-manage", "", Rights::MANAGE),
            // Same name as a namespace policy, other key: the rule's key still works.
            AuthorizationRule::new("sender", "rule-key-of-sender", "", Rights::LISTEN),
        ];
        let q = EntityRules { entity: "q", rules: &rules };
        let t_rules = [AuthorizationRule::new("t-listen", "t-key", "", Rights::LISTEN)];
        let t = EntityRules { entity: "t", rules: &t_rules };
        let cases = [
            (
                "primary key",
                python_token("sb://h/q", "q-send", "q-primary", SE),
                q,
                Ok(Rights::SEND),
            ),
            (
                "secondary key",
                js_token("sb://h/q", "q-send", "q-secondary", SE),
                q,
                Ok(Rights::SEND),
            ),
            (
                "dead-letter queue",
                python_token("sb://h/q/$DeadLetterQueue", "q-all", "q-manage", SE),
                q,
                Ok(Rights::MANAGE),
            ),
            (
                "management node",
                python_token("amqps://h/q/$management", "q-send", "q-primary", SE),
                q,
                Ok(Rights::SEND),
            ),
            (
                "subscription of the topic",
                python_token("sb://h/t/Subscriptions/s", "t-listen", "t-key", SE),
                t,
                Ok(Rights::LISTEN),
            ),
            (
                "namespace policy first",
                python_token("sb://h/q", "sender", "send-key", SE),
                q,
                Ok(Rights::SEND),
            ),
            (
                "rule sharing a policy's name",
                python_token("sb://h/q", "sender", "rule-key-of-sender", SE),
                q,
                Ok(Rights::LISTEN),
            ),
            (
                "namespace audience",
                python_token("sb://h/", "q-send", "q-primary", SE),
                q,
                Err(InsufficientRights),
            ),
            (
                "another entity",
                python_token("sb://h/q2", "q-send", "q-primary", SE),
                q,
                Err(InsufficientRights),
            ),
            (
                "rules of another entity",
                python_token("sb://h/q", "t-listen", "t-key", SE),
                q,
                Err(UnknownPolicy),
            ),
            (
                "wrong key",
                python_token("sb://h/q", "q-send", "q-manage", SE),
                q,
                Err(InvalidSignature),
            ),
            (
                "empty secondary is no key",
                python_token("sb://h/q", "q-all", "", SE),
                q,
                Err(InvalidSignature),
            ),
            ("expired", python_token("sb://h/q", "q-send", "q-primary", SE - 1), q, Err(Expired)),
        ];
        for (name, token, entity, expected) in cases {
            let result = auth.verify_token_with(&token, now, Some(entity));
            match (result, expected) {
                (Ok(claim), Ok(rights)) => assert_eq!(claim.rights, rights, "{name}"),
                (Err(error), Err(kind)) => {
                    assert_eq!(error.kind, kind, "{name}: {error}");
                    assert!(!error.to_string().contains("q-primary"), "{name}: {error}");
                }
                (result, _) => panic!("{name}: got {result:?}, expected {expected:?}"),
            }
        }
        // Without the entity's rules, its keys are unknown.
        let token = python_token("sb://h/q", "q-send", "q-primary", SE);
        assert_eq!(auth.verify_token(&token, now).unwrap_err().kind, UnknownPolicy);
        assert_eq!(token_audience(&token).unwrap().as_str(), "q");
        assert_eq!(token_audience("junk").unwrap_err().kind, Malformed);
    }
}
