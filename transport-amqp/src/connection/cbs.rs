//! `$cbs`: put-token requests, and the claims (`Grants`) they and SASL PLAIN give the
//! connection.

use fe2o3_amqp_types::primitives::Value;
use ironbus_core::auth::{Claim, Right};

use crate::error::WireError;
use crate::request::{encode_error, encode_response, Dialect, Request};

use super::*;

/// Who may do what on this connection: the claims of tokens put on `$cbs`, and of the policy
/// a SASL PLAIN connection authenticated with.
#[derive(Debug, Default)]
pub(super) struct Grants {
    pub(super) claims: Vec<Claim>,
}

impl Grants {
    pub(super) fn allows(
        &self,
        path: &str,
        right: Option<Right>,
        now: ironbus_core::Timestamp,
    ) -> bool {
        let rights = match right {
            Some(r) => vec![r],
            None => vec![Right::Send, Right::Listen, Right::Manage],
        };
        self.claims.iter().any(|c| rights.iter().any(|r| c.authorizes(path, *r, now)))
    }
}

impl Connection {
    pub(super) fn on_cbs_request(&mut self, channel: u16, path: &str, body: &[u8]) {
        let request = match Request::decode(body) {
            Ok(r) => r,
            Err(e) => {
                let payload = encode_error(None, Dialect::Cbs, &e);
                return self.respond(channel, path.to_owned(), None, payload);
            }
        };
        let operation = request.property("operation").unwrap_or_default();
        let payload = if operation != "put-token" {
            encode_error(
                request.message_id.clone(),
                Dialect::Cbs,
                &WireError::bad_request(format!("unknown $cbs operation {operation:?}")),
            )
        } else {
            let token = match &request.body {
                Value::String(s) => s.clone(),
                _ => String::new(),
            };
            match self.cx.authorizer.verify_token(&token, self.now()) {
                Ok(claim) => {
                    self.grants.claims.retain(|c| c.audience != claim.audience);
                    self.grants.claims.push(claim);
                    encode_response(
                        request.message_id.clone(),
                        Dialect::Cbs,
                        202,
                        "Accepted",
                        None,
                        None,
                    )
                }
                Err(e) => {
                    tracing::info!(error = %e, "put-token refused");
                    let status = if e.kind == ironbus_core::auth::AuthErrorKind::Malformed {
                        400
                    } else {
                        401
                    };
                    encode_response(
                        request.message_id.clone(),
                        Dialect::Cbs,
                        status,
                        &e.to_string(),
                        None,
                        None,
                    )
                }
            }
        };
        self.respond(channel, path.to_owned(), request.reply_to, payload);
    }
}
