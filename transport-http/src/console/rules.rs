//! A subscription's rules (list, create or replace, delete; a SQL filter or action the parser
//! refuses is answered with where it is), and a session-enabled entity's sessions with state
//! (listed; set or cleared).

use axum::body::Body;
use axum::http::StatusCode;
use base64::Engine;
use ironbus_core::auth::Right;
use ironbus_core::filter::{FilterError, Parameters, SqlFilter, SqlRuleAction};
use ironbus_core::{
    BrokerError, EntityDescription, EntityPath, PathShape, RuleAction, RuleDescription, RuleFilter,
    SessionError,
};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{json_response, read_json, shape, ApiError, ApiResult, Call};

/// The most sessions one listing shows.
const MAX_SESSIONS: usize = 200;

/// The subscription the `path` parameter names.
fn subscription(call: &Call) -> Result<EntityPath, ApiError> {
    let path = call.path()?;
    if path.shape() != PathShape::Subscription {
        return Err(ApiError::bad_request(format!("{path} is not a subscription")));
    }
    Ok(path)
}

fn rule_json(name: &str, rule: &RuleDescription) -> Value {
    let filter = match &rule.filter {
        RuleFilter::True => json!({ "type": "true" }),
        RuleFilter::False => json!({ "type": "false" }),
        RuleFilter::Sql { expression, parameters } => json!({
            "type": "sql",
            "expression": expression,
            "parameters": parameters.iter().map(|(k, v)| (k.clone(), shape::property_value(v))).collect::<serde_json::Map<_, _>>(),
        }),
        RuleFilter::Correlation(c) => json!({
            "type": "correlation",
            "correlationId": c.correlation_id,
            "messageId": c.message_id,
            "to": c.to,
            "replyTo": c.reply_to,
            "subject": c.subject,
            "sessionId": c.session_id,
            "replyToSessionId": c.reply_to_session_id,
            "contentType": c.content_type,
            "properties": c.properties.iter().map(|(k, v)| (k.clone(), shape::property_value(v))).collect::<serde_json::Map<_, _>>(),
        }),
    };
    json!({ "name": name, "filter": filter, "action": rule.action.as_ref().map(|a| &a.expression) })
}

/// `GET rules?path=<subscription>`.
pub(super) async fn list(call: &Call) -> ApiResult {
    call.require(Right::Listen)?;
    let path = subscription(call)?;
    let rules =
        call.app.broker.list_children(&path, 0, usize::MAX).await.map_err(ApiError::broker)?;
    let rules: Vec<Value> = rules
        .iter()
        .filter_map(|info| match &info.description {
            EntityDescription::Rule(rule) => Some(rule_json(info.path.name(), rule)),
            _ => None,
        })
        .collect();
    Ok(json_response(StatusCode::OK, &json!({ "rules": rules })))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PutRule {
    name: String,
    /// `sql` (the default), `true` or `false`.
    #[serde(default)]
    filter_type: Option<String>,
    #[serde(default)]
    sql_expression: String,
    #[serde(default)]
    action: Option<String>,
}

/// A parser's refusal, with where it is: `field`, 1-based `line`, 0-based `column`, `token`.
fn parse_error(field: &str, error: &FilterError) -> ApiError {
    ApiError::with(
        StatusCode::BAD_REQUEST,
        format!("{field}: {error}"),
        json!({
            "field": field,
            "line": error.line,
            "column": error.column,
            "token": error.token,
            "details": error.details,
        }),
    )
}

/// `PUT rules?path=<subscription>`: creates the rule the body names, or replaces it.
pub(super) async fn put(call: &Call, body: Body) -> ApiResult {
    call.require(Right::Manage)?;
    let subscription = subscription(call)?;
    let put: PutRule = read_json(&call.app, body).await?;
    let name = put.name.trim();
    if name.is_empty() || name.contains('/') {
        return Err(ApiError::bad_request("name: 1 to 50 characters, no '/'"));
    }
    let filter = match put.filter_type.as_deref().unwrap_or("sql") {
        "true" => RuleFilter::True,
        "false" => RuleFilter::False,
        "sql" => {
            // Parsed here first, so that a refusal says where the error is.
            SqlFilter::parse(&put.sql_expression, &Parameters::new())
                .map_err(|e| parse_error("sqlExpression", &e))?;
            RuleFilter::Sql { expression: put.sql_expression.clone(), parameters: Vec::new() }
        }
        other => {
            return Err(ApiError::bad_request(format!("filterType {other:?}: sql, true or false")))
        }
    };
    let action = match put.action.as_deref().map(str::trim).filter(|a| !a.is_empty()) {
        None => None,
        Some(text) => {
            SqlRuleAction::parse(text, &Parameters::new())
                .map_err(|e| parse_error("action", &e))?;
            Some(RuleAction { expression: text.to_owned(), parameters: Vec::new() })
        }
    };
    let path = EntityPath::parse(&format!("{subscription}/Rules/{name}"))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let rule = EntityDescription::Rule(RuleDescription { filter, action });
    let broker = &call.app.broker;
    let (status, result) = match broker.get_entity(&path).await {
        Ok(_) => (StatusCode::OK, broker.update_entity(&path, rule).await),
        Err(BrokerError::EntityNotFound { .. }) => {
            (StatusCode::CREATED, broker.create_entity(&path, rule).await)
        }
        Err(e) => return Err(ApiError::broker(e)),
    };
    let info = result.map_err(ApiError::broker)?;
    match &info.description {
        EntityDescription::Rule(rule) => Ok(json_response(status, &rule_json(name, rule))),
        _ => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the rule came back as another kind",
        )),
    }
}

/// `DELETE rules?path=<subscription>&name=`.
pub(super) async fn delete(call: &Call) -> ApiResult {
    call.require(Right::Manage)?;
    let subscription = subscription(call)?;
    let name = call.param("name").ok_or_else(|| ApiError::bad_request("name is missing"))?;
    let path = EntityPath::parse(&format!("{subscription}/Rules/{name}"))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    call.app.broker.delete_entity(&path).await.map_err(ApiError::broker)?;
    Ok(json_response(StatusCode::OK, &json!({ "deleted": name })))
}

/// `GET sessions?path=`: the sessions that have messages or state, with their state (as
/// text when it is UTF-8, and in base64).
pub(super) async fn sessions(call: &Call) -> ApiResult {
    call.require(Right::Listen)?;
    let path = call.path()?;
    let broker = &call.app.broker;
    let ids = broker
        .list_sessions(path.clone(), None, None, 0, MAX_SESSIONS)
        .await
        .map_err(ApiError::broker)?;
    let mut sessions = Vec::with_capacity(ids.len());
    for id in ids {
        let state = broker.session_state(path.clone(), &id).await.ok().flatten();
        sessions.push(json!({
            "id": id,
            "stateSize": state.as_ref().map(|s| s.len()),
            "state": state.as_ref().map(|s| base64::engine::general_purpose::STANDARD.encode(s)),
            "stateText": state.as_ref().and_then(|s| std::str::from_utf8(s).ok()),
        }));
    }
    Ok(json_response(StatusCode::OK, &json!({ "sessions": sessions })))
}

#[derive(Deserialize)]
struct SetState {
    /// The new state as text (UTF-8), or `null` to clear it.
    state: Option<String>,
}

/// `PUT sessions?path=&session=`: sets (or with `null` clears) a session's state, whoever holds
/// the session.
pub(super) async fn set_state(call: &Call, body: Body) -> ApiResult {
    call.require(Right::Manage)?;
    let path = call.path()?;
    let session = call
        .param("session")
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::bad_request("session is missing"))?;
    let set: SetState = read_json(&call.app, body).await?;
    let state = set.state.map(bytes::Bytes::from);
    call.app.broker.set_session_state(path, session, state).await.map_err(|e| match e {
        SessionError::Broker(e) => ApiError::broker(e),
        other => ApiError::new(StatusCode::CONFLICT, other.to_string()),
    })?;
    Ok(json_response(StatusCode::OK, &json!({ "session": session })))
}
