//! `$cbs`: put-token requests, and the claims (`Grants`) they and SASL PLAIN give the
//! connection.
//!
//! A token is checked against the namespace policies and then the authorization rules of the
//! entity its audience names, before the next frame is read; the answer is 400 for a malformed
//! token, 401 for a refused one, and 404 when the audience names an entity that does not exist
//! (as Service Bus answers: the SDKs report an authentication error). Links and `$management`
//! requests without the right their node or operation needs get `amqp:unauthorized-access` in
//! Service Bus's words.

use fe2o3_amqp_types::primitives::Value;
use ironbus_core::auth::{
    token_audience, AuthError, AuthErrorKind, Authorizer, Claim, EntityRules, Right,
};
use ironbus_core::transport::authorization::{entity_rules, named_entity};
use ironbus_core::BrokerError;

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

/// The refusal of an operation the connection's claims do not allow, in Service Bus's words:
/// the claims needed (`right`; `None`: any) and the resource.
pub(super) fn unauthorized(path: &str, right: Option<Right>) -> WireError {
    let claims = match right {
        Some(right) => format!("'{right}'"),
        None => "'Manage', 'Send' or 'Listen'".to_owned(),
    };
    WireError::unauthorized(format!(
        "Unauthorized access. {claims} claim(s) are required to perform this operation. \
         Resource: '{path}'. Put a token for it on $cbs first"
    ))
}

impl Connection {
    /// Handles a `$cbs` request. A put-token is checked before the next frame is read, so a link
    /// attached after its answer sees the new claim.
    pub(super) async fn on_cbs_request(
        &mut self,
        request_at: RequestDelivery,
        path: &str,
        body: &[u8],
    ) {
        let request = match Request::decode(body) {
            Ok(r) => r,
            Err(e) => {
                let payload = encode_error(None, Dialect::Cbs, &e);
                return self.respond(request_at, path.to_owned(), None, payload);
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
                Value::String(s) => s.as_str(),
                _ => "",
            };
            let verified =
                verify_put_token(&self.cx.broker, &self.cx.authorizer, token, self.now()).await;
            // A missing entity is named by its full address, as Service Bus names it.
            let verified = verified.map_err(|mut refusal| {
                if let (404, Some(entity)) = (refusal.status, refusal.missing.take()) {
                    let url = super::address::entity_url(self.hostname.as_deref(), "", &entity);
                    refusal.description =
                        format!("The messaging entity '{url}' could not be found.");
                }
                refusal
            });
            // A token for another namespace's host does not open this one's entities.
            let verified = verified.and_then(|claim| self.in_namespace(token).map(|()| claim));
            // The audience the request names must lie within what the token is for.
            let verified = verified.and_then(|claim| match request.property("name") {
                Some(name) if !claim.audience.covers(&name) => Err(Refusal {
                    status: 401,
                    description: format!(
                        "the token is for {}, which does not cover the audience {name}",
                        claim.audience
                    ),
                    missing: None,
                }),
                _ => Ok(claim),
            });
            match verified {
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
                Err(refusal) => {
                    tracing::info!(
                        status = refusal.status,
                        reason = %refusal.description,
                        "put-token refused"
                    );
                    encode_response(
                        request.message_id.clone(),
                        Dialect::Cbs,
                        refusal.status,
                        &refusal.description,
                        None,
                        None,
                    )
                }
            }
        };
        self.respond(request_at, path.to_owned(), request.reply_to, payload);
    }
}

/// Why a put-token was refused: the CBS status and its description.
impl Connection {
    /// Whether `token` is for this connection's namespace: when several are served, the host
    /// of the URI it is for must select the namespace the connection's Open did (a token for a
    /// bare path is for whichever namespace it is put on).
    fn in_namespace(&self, token: &str) -> Result<(), Refusal> {
        let Some(namespaces) = &self.cx.namespaces else { return Ok(()) };
        namespaces.token_fits(token, self.cx.namespace.as_deref()).map_err(|description| Refusal {
            status: 401,
            description,
            missing: None,
        })
    }
}

#[derive(Debug)]
struct Refusal {
    status: i32,
    description: String,
    /// The path of the missing entity a 404 is about.
    missing: Option<String>,
}

/// Checks a put-token's token as Service Bus does.
///
/// # Behavior
/// - 400: the token cannot be parsed.
/// - 404: its audience names an entity (queue, topic, subscription, sub-queue or management
///   node of one) that does not exist — before any key is tried, so the SDKs report an
///   authentication error for a misspelt entity as they do against Service Bus.
/// - 401: expired, unknown key name, wrong signature, or signed with an entity rule's key for
///   an audience outside that entity.
/// - Otherwise the claim: namespace policies first, then the authorization rules of the queue
///   or topic the audience is in.
async fn verify_put_token(
    broker: &ironbus_core::Broker,
    authorizer: &Authorizer,
    token: &str,
    now: ironbus_core::Timestamp,
) -> Result<Claim, Refusal> {
    let refuse = |e: AuthError| Refusal {
        status: if e.kind == AuthErrorKind::Malformed { 400 } else { 401 },
        description: e.to_string(),
        missing: None,
    };
    let audience = token_audience(token).map_err(refuse)?;
    let Some(entity) = named_entity(audience.as_str()) else {
        return authorizer.verify_token(token, now).map_err(refuse);
    };
    match entity_rules(broker, &entity).await {
        Ok((top, rules)) => {
            let rules = EntityRules { entity: top.as_str(), rules: &rules };
            authorizer.verify_token_with(token, now, Some(rules)).map_err(refuse)
        }
        Err(BrokerError::EntityNotFound { .. }) => Err(Refusal {
            status: 404,
            description: format!("The messaging entity '{entity}' could not be found."),
            missing: Some(entity.to_string()),
        }),
        Err(e) => {
            let e = WireError::from(e);
            Err(Refusal { status: e.status, description: e.description, missing: None })
        }
    }
}
