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
//!
//! One concern a file:
//! - `rights`: [`Right`] and [`Rights`], the permissions a policy grants.
//! - `authorizer`: [`Authorizer`], which verifies tokens and keys against namespace policies
//!   ([`SasPolicy`]) and entities' authorization rules ([`EntityRules`]).
//! - `token`: the SAS token format: parsing, signature checks, [`generate_token`].
//! - `audience`: [`Audience`], the normalized resource a token is for.
//! - `claim`: [`Claim`], what a verified credential entitles its holder to.
//! - `rules`: entities' [`AuthorizationRule`]s and their validation.
//! - `error`: [`AuthError`] and [`PolicyError`].
//! - `percent`: the percent-encoding of token parameters.

mod audience;
mod authorizer;
mod claim;
mod error;
pub(crate) mod percent;
mod rights;
mod rules;
#[cfg(test)]
mod tests;
mod token;

pub use audience::Audience;
pub use authorizer::{
    Authorizer, EntityRules, SasPolicy, DEVELOPMENT_KEY, DEVELOPMENT_POLICY_NAME,
};
pub use claim::Claim;
pub use error::{AuthError, AuthErrorKind, PolicyError};
pub use rights::{Right, Rights};
pub use rules::{
    validate_rules, AuthorizationRule, MAX_AUTHORIZATION_RULES, MAX_KEY_LEN, MAX_KEY_NAME_LEN,
};
pub use token::{generate_token, token_audience, token_host, SAS_TOKEN_PREFIX};
