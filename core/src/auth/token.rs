//! The SAS token format:
//! `SharedAccessSignature sr=<enc(uri)>&sig=<enc(base64)>&se=<unix seconds>&skn=<enc(name)>`.
//! Parsing ([`SasToken`]), the HMAC-SHA256 signature check, and [`generate_token`].
//!
//! Invariants:
//! - The signature is checked over the raw `sr` and `se` texts as received, never over a
//!   re-encoding, and compared in constant time.
//! - Every parameter is decoded strictly: a malformed escape, a non-UTF-8 value, a `se` that is
//!   not plain decimal digits or a `sig` that is not base64 is a malformed token.

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::{alphabet, Engine as _};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{percent, Audience, AuthError, AuthErrorKind, Claim, Rights};
use crate::types::Timestamp;

/// The text every SAS token starts with.
pub const SAS_TOKEN_PREFIX: &str = "SharedAccessSignature ";

pub(super) type HmacSha256 = Hmac<Sha256>;

/// Standard base64 that accepts a signature with or without `=` padding.
const SIGNATURE_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

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

/// The parts of a SAS token, parsed but not yet verified.
pub(super) struct SasToken<'a> {
    /// `sr` as received, still URL-encoded: what was signed.
    raw_resource: &'a str,
    /// `se` as received: what was signed.
    raw_expiry: &'a str,
    pub(super) audience: Audience,
    expires_at: Timestamp,
    signature: Vec<u8>,
    pub(super) policy: String,
}

impl<'a> SasToken<'a> {
    pub(super) fn parse(token: &'a str) -> Result<Self, AuthError> {
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

        let decode = |value: &'a str, name: &str| {
            percent::decode(value).ok_or_else(|| {
                AuthError::malformed(format!("token parameter {name} is not validly url-encoded"))
            })
        };
        let audience = Audience::from_uri(&decode(raw_resource, "sr")?);
        let signature = SIGNATURE_BASE64
            .decode(decode(sig, "sig")?.as_bytes())
            .map_err(|_| AuthError::malformed("token parameter sig is not base64"))?;
        let policy = decode(skn, "skn")?.into_owned();
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
    pub(super) fn signed_with(&self, key: &str) -> bool {
        let mut mac = hmac_for(key);
        mac.update(self.raw_resource.as_bytes());
        mac.update(b"\n");
        mac.update(self.raw_expiry.as_bytes());
        mac.verify_slice(&self.signature).is_ok()
    }

    /// The claim of a genuine token with `rights`, unless it has expired.
    pub(super) fn into_claim(self, rights: Rights, now: Timestamp) -> Result<Claim, AuthError> {
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
/// Fails like [`Authorizer::verify_token`](super::Authorizer::verify_token) on a malformed token.
pub fn token_audience(token: &str) -> Result<Audience, AuthError> {
    Ok(SasToken::parse(token)?.audience)
}

/// The host of the URI a SAS token is for (`sr`), with its port if it has one: `None` when the
/// resource is a bare path. What selects the namespace a token is for ([`crate::Namespaces`]).
pub fn token_host(token: &str) -> Result<Option<String>, AuthError> {
    let resource = SasToken::parse(token)?.raw_resource;
    let resource = percent::decode(resource)
        .ok_or_else(|| AuthError::malformed("token parameter sr is not validly url-encoded"))?;
    let Some((_, rest)) = resource.split_once("://") else { return Ok(None) };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    Ok((!host.is_empty()).then(|| host.to_owned()))
}

/// Decimal digits only (no sign, no spaces), fitting an `i64`.
fn parse_seconds(text: &str) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}
