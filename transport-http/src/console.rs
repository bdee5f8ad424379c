//! The web console: a person's view of the broker, served under `/$console/` on the same
//! listeners as the API (off with [`HttpConfig::console`](crate::HttpConfig::console)).
//!
//! - The page (`transport-http/console/`: one HTML file, one script, one style sheet) is built
//!   into the binary and loads nothing else; its Content-Security-Policy allows only itself.
//! - The JSON API under `/$console/api/` calls the broker directly. A person signs in with a
//!   namespace policy's name and key (`session`); every API request then needs the session's
//!   cookie and is allowed only what that policy's rights allow (Listen: read counts, peek,
//!   sessions, rules; Send: send, cancel scheduled; Manage: create, edit, delete, purge,
//!   resubmit, set a session's state). Every write (POST, PUT, DELETE) needs the session's CSRF token in the
//!   `X-Ironbus-Csrf` header and a same-origin `Origin` (or `Sec-Fetch-Site`); otherwise it is
//!   403 with a JSON error.
//! - `api`: sign-in, entities and their properties; `messages`: peek, send, purge, resubmit,
//!   scheduled messages; `rules`: rules and sessions; `shape`: the JSON shapes.
//!
//! **Architecture Invariant:** the console serves people, never the message path: its
//! handlers run only for `/$console` requests, outside the SAS check and the request metrics,
//! and nothing of it runs per message sent or received by clients.

mod api;
mod messages;
mod rules;
pub(crate) mod session;
mod shape;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use ironbus_core::auth::Right;
use serde_json::{json, Value};

use crate::service::App;
use session::{Session, Sessions};

/// Where the console is served.
pub const PATH: &str = "/$console";

const INDEX_HTML: &str = include_str!("../console/index.html");
const APP_JS: &str = include_str!("../console/app.js");
const STYLE_CSS: &str = include_str!("../console/style.css");

/// The only sources the page may use: itself.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The console's state: the listener's app (its broker, config, namespace) and the sessions,
/// which the plain and TLS listeners share.
#[derive(Debug, Clone)]
pub(crate) struct Console {
    pub(crate) app: App,
    pub(crate) sessions: Arc<Sessions>,
}

/// The console's routes, to be merged into a listener's router.
pub(crate) fn router(app: App, sessions: Arc<Sessions>) -> axum::Router {
    let console = Console { app, sessions };
    axum::Router::new()
        .route("/$console", axum::routing::get(|| async { Redirect::permanent("/$console/") }))
        .route(
            "/$console/",
            axum::routing::get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/$console/app.js",
            axum::routing::get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/$console/style.css",
            axum::routing::get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }),
        )
        .route("/$console/api/{*rest}", axum::routing::any(api_request))
        .with_state(console)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// A refusal or failure of the JSON API: a status and `{"error": …}` (plus details).
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    body: Value,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, body: json!({ "error": message.into() }) }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// A refusal with details beside the message (`extra`'s fields).
    pub(crate) fn with(status: StatusCode, message: impl Into<String>, extra: Value) -> Self {
        let mut body = json!({ "error": message.into() });
        if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
            body.extend(extra);
        }
        Self { status, body }
    }

    /// A broker error, with the status the management API would answer.
    pub(crate) fn broker(error: ironbus_core::BrokerError) -> Self {
        crate::HttpError::from_broker(error, crate::error::Plane::Management).into()
    }
}

impl From<crate::HttpError> for ApiError {
    fn from(error: crate::HttpError) -> Self {
        Self::new(error.status, error.detail)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        json_response(self.status, &self.body)
    }
}

pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

pub(crate) type ApiResult = Result<Response, ApiError>;

/// One API request, after the checks every request passes.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) app: App,
    pub(crate) method: Method,
    pub(crate) params: Vec<(String, String)>,
    pub(crate) session: Session,
}

impl Call {
    /// Refuses the request unless the session's policy grants `right`.
    pub(crate) fn require(&self, right: Right) -> Result<(), ApiError> {
        if self.session.rights.allows(right) {
            return Ok(());
        }
        Err(ApiError::with(
            StatusCode::FORBIDDEN,
            format!("policy {} does not grant {right}, which this needs", self.session.policy),
            json!({ "needs": right.to_string() }),
        ))
    }

    /// A query parameter.
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The `path` query parameter as an entity path.
    pub(crate) fn path(&self) -> Result<ironbus_core::EntityPath, ApiError> {
        let text = self.param("path").ok_or_else(|| ApiError::bad_request("path is missing"))?;
        ironbus_core::EntityPath::parse(text).map_err(|e| ApiError::bad_request(e.to_string()))
    }
}

/// Reads a JSON body of at most the configured size.
pub(crate) async fn read_json<T: serde::de::DeserializeOwned>(
    app: &App,
    body: Body,
) -> Result<T, ApiError> {
    let bytes = axum::body::to_bytes(body, app.config.max_body_bytes).await.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is over {} bytes", app.config.max_body_bytes),
        )
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not the JSON expected: {e}")))
}

async fn api_request(State(console): State<Console>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    match handle(console, parts, body).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn handle(console: Console, parts: axum::http::request::Parts, body: Body) -> ApiResult {
    let listener = console.app.listener;
    let app = console.app.clone().in_namespace(&parts).await.map_err(ApiError::from)?;
    let rest = parts.uri.path().strip_prefix("/$console/api/").unwrap_or("").trim_end_matches('/');
    let write = parts.method != Method::GET && parts.method != Method::HEAD;
    if write {
        if let Some(why) = session::cross_site(&parts.headers, listener) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!("refused as cross-site: {why}"),
            ));
        }
    }
    if rest == "session" {
        return api::session(&console, app, &parts, body).await;
    }
    let Some(session) = console.sessions.find(&parts.headers) else {
        return Err(ApiError::new(StatusCode::UNAUTHORIZED, "sign in first (no live session)"));
    };
    if session.namespace != app.namespace {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "the session is for another namespace",
        ));
    }
    if write {
        let given = parts.headers.get(session::CSRF_HEADER).and_then(|v| v.to_str().ok());
        if !given.is_some_and(|given| session::tokens_equal(&session.csrf, given)) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "the X-Ironbus-Csrf header is missing or is not this session's token",
            ));
        }
    }
    let params = crate::routes::query_params(parts.uri.query());
    let call = Call { app, method: parts.method.clone(), params, session };
    let m = &call.method;
    match rest {
        "entities" if m == Method::GET => api::list(&call).await,
        "entities" if m == Method::POST => api::create(&call, body).await,
        "entity" if m == Method::GET => api::get(&call).await,
        "entity" if m == Method::PUT => api::update(&call, body).await,
        "entity" if m == Method::DELETE => api::delete(&call).await,
        "messages" if m == Method::GET => messages::peek(&call).await,
        "messages" if m == Method::POST => messages::send(&call, body).await,
        "purge" if m == Method::POST => messages::purge(&call, body).await,
        "resubmit" if m == Method::POST => messages::resubmit(&call, body).await,
        "scheduled" if m == Method::GET => messages::scheduled(&call).await,
        "scheduled" if m == Method::DELETE => messages::cancel(&call, body).await,
        "sessions" if m == Method::GET => rules::sessions(&call).await,
        "sessions" if m == Method::PUT => rules::set_state(&call, body).await,
        "rules" if m == Method::GET => rules::list(&call).await,
        "rules" if m == Method::PUT => rules::put(&call, body).await,
        "rules" if m == Method::DELETE => rules::delete(&call).await,
        _ => Err(ApiError::new(StatusCode::NOT_FOUND, format!("no API {} /{rest}", parts.method))),
    }
}
