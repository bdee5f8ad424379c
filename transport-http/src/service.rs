//! The request handler: authorization, routing, management, health, metrics. One axum fallback
//! handler serves everything (see [`crate::routes`] for why).
//!
//! Every API request is authorized with the core's `Authorizer`, and a token no namespace
//! policy signed against the authorization rules of the entity the request is about; every
//! failure is 401 with the reason, missing rights in Service Bus's words. Management goes by
//! `EntityPath` through the core's generic operations, by the kind the namespace holds (GET,
//! DELETE) or the body describes (PUT): create 201, conflict 409, update with `If-Match: *`
//! 200, delete 200, paged lists.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, request::Parts, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::FutureExt;
use ironbus_core::auth::{AuthError, AuthErrorKind, AuthorizationRule, EntityRules, Right};
use ironbus_core::broker::Owner;
use ironbus_core::transport::authorization::{entity_rules, named_entity};
use ironbus_core::{
    Availability, Broker, BrokerError, EntityDescription, EntityInfo, EntityKind, EntityPath,
    PathShape, QueueInfo, ReceiveMode,
};
use serde_json::json;

use crate::atom::{self, Described};
use crate::dataplane;
use crate::error::{HttpError, Plane};
use crate::metrics as m;
use crate::routes::{self, LockOp, Operation, Route};
use crate::HttpConfig;

/// Where a listener is: the scheme its clients use, and whether it serves the operator
/// endpoints (`/health`, `/metrics`, the embedding binary's `plain_routes`), which only the
/// plain listener does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    Plain,
    Tls,
}

/// The state every request sees.
#[derive(Debug, Clone)]
pub struct App {
    /// The broker of the request's namespace.
    pub broker: Broker,
    /// The request's namespace when several are served and it is not the default one.
    pub namespace: Option<String>,
    pub config: Arc<HttpConfig>,
    pub listener: Listener,
}

/// The axum router of one listener.
pub fn router(app: App) -> axum::Router {
    axum::Router::new().fallback(dispatch).with_state(app)
}

async fn dispatch(State(app): State<App>, request: Request) -> Response {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let (body, read) = ReadToEnd::wrap(body);
    let app = match app.in_namespace(&parts).await {
        Ok(app) => app,
        Err(error) => return error.into_response(),
    };
    let mut operation = Operation::Other;
    // A panic would be a bug; the net turns it into a 500 instead of a dropped connection.
    let handled = AssertUnwindSafe(app.handle(&parts, body, &mut operation)).catch_unwind().await;
    let handled = handled.unwrap_or_else(|_| {
        tracing::error!(path = parts.uri.path(), "request handler panicked");
        Err(HttpError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error"))
    });
    let response = match handled {
        Ok(response) => response,
        Err(error) => {
            if error.status.is_server_error() {
                tracing::warn!(path = parts.uri.path(), status = %error.status, detail = %error.detail, "request failed");
            }
            error.into_response()
        }
    };
    let outcome = match response.status().as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    };
    let op = operation.as_str();
    metrics::counter!(m::REQUESTS_TOTAL, "operation" => op, "outcome" => outcome).increment(1);
    metrics::histogram!(m::REQUEST_DURATION_SECONDS, "operation" => op)
        .record(started.elapsed().as_secs_f64());
    let mut response = response;
    if !read.load(Ordering::Acquire) {
        // Answered without reading the body (refused before it was needed, as an unauthorized
        // send is): its bytes are still on the connection, so hyper closes it after this
        // response. Saying so keeps a client from sending its next request on it.
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// A request body that records whether it was read to its end (or had nothing to read).
struct ReadToEnd {
    inner: Body,
    read: Arc<AtomicBool>,
}

impl ReadToEnd {
    fn wrap(inner: Body) -> (Body, Arc<AtomicBool>) {
        let read = Arc::new(AtomicBool::new(hyper::body::Body::is_end_stream(&inner)));
        (Body::new(ReadToEnd { inner, read: read.clone() }), read)
    }
}

impl hyper::body::Body for ReadToEnd {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.read.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

fn xml(status: StatusCode, content_type: &'static str, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The request's `api-version` query parameter, if any.
fn api_version(parts: &Parts) -> Option<&str> {
    parts.uri.query()?.split('&').find_map(|pair| pair.strip_prefix("api-version="))
}

fn empty(status: StatusCode) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = status;
    response
}

impl App {
    /// This app for the namespace the request's host selects, when several are served.
    pub(crate) async fn in_namespace(self, parts: &Parts) -> Result<App, HttpError> {
        let Some(namespaces) = &self.config.namespaces else { return Ok(self) };
        let host = parts
            .headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| parts.uri.authority().map(|a| a.as_str()));
        match namespaces.resolve(host).await {
            Ok((None, _)) => Ok(self),
            Ok((name, broker)) => Ok(App { broker, namespace: name, ..self }),
            Err(e) => Err(HttpError::from_broker(e, Plane::Management)),
        }
    }

    /// The name of the request's namespace.
    fn namespace_name(&self) -> &str {
        self.namespace.as_deref().unwrap_or(&self.config.namespace)
    }

    /// Whether `token` is for the request's namespace: when several are served, the host of
    /// the URI it is for must select the same one (a token for a bare path fits any).
    fn token_in_namespace(&self, token: &str) -> Result<(), HttpError> {
        let Some(namespaces) = &self.config.namespaces else { return Ok(()) };
        namespaces.token_fits(token, self.namespace.as_deref()).map_err(|message| {
            HttpError::unauthorized(&AuthError::new(AuthErrorKind::InvalidSignature, message))
        })
    }

    async fn handle(
        &self,
        parts: &Parts,
        body: Body,
        operation: &mut Operation,
    ) -> Result<Response, HttpError> {
        let path = routes::decode_path(parts.uri.path())?;
        let params = routes::query_params(parts.uri.query());
        let route = routes::route(&parts.method, &path, self.listener == Listener::Plain)?;
        match route {
            Route::Health => {
                *operation = Operation::Health;
                Ok(self.health().await)
            }
            Route::Metrics => {
                *operation = Operation::Metrics;
                match &self.config.metrics {
                    Some(render) => {
                        let mut response = render().into_response();
                        response.headers_mut().insert(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                        );
                        Ok(response)
                    }
                    None => Err(HttpError::not_found("no metrics exporter is installed")),
                }
            }
            Route::Unimplemented(what) => {
                if self.authorize(parts, &path, Right::Manage).await.is_err() {
                    self.authorize(parts, &path, Right::Listen).await?;
                }
                Err(HttpError::new(StatusCode::NOT_IMPLEMENTED, what))
            }
            Route::NamespaceRoot => {
                // Service Bus answers it to anyone (it is what a browser pointed at the
                // namespace sees): a feed that lists nothing.
                *operation = Operation::NamespaceInfo;
                let now = self.broker.clock().now();
                Ok(xml(StatusCode::OK, atom::FEED_CONTENT_TYPE, atom::namespace_root(now)))
            }
            Route::NamespaceInfo => {
                *operation = Operation::NamespaceInfo;
                self.authorize(parts, &path, Right::Manage).await?;
                let body = atom::namespace_info(
                    &self.base(parts),
                    self.namespace_name(),
                    self.config.started_at,
                    self.config.tier,
                );
                Ok(xml(StatusCode::OK, atom::ENTRY_CONTENT_TYPE, body))
            }
            Route::ListQueues | Route::ListTopics => {
                *operation = Operation::ListEntities;
                self.authorize(parts, &path, Right::Manage).await?;
                let kind =
                    if route == Route::ListQueues { EntityKind::Queue } else { EntityKind::Topic };
                let list = |skip, top| self.broker.list_entities(kind, skip, top);
                self.list(parts, &path, &params, kind, list).await
            }
            Route::ListChildren { parent } => {
                *operation = Operation::ListEntities;
                self.authorize(parts, &path, Right::Manage).await?;
                // A topic's children are its subscriptions, a subscription's its rules.
                let kind = if parent.shape() == PathShape::Subscription {
                    EntityKind::Rule
                } else {
                    EntityKind::Subscription
                };
                let list = |skip, top| self.broker.list_children(&parent, skip, top);
                self.list(parts, &path, &params, kind, list).await
            }
            Route::Entity { path: entity } => {
                *operation = match parts.method.as_str() {
                    "GET" => Operation::GetEntity,
                    "DELETE" => Operation::DeleteEntity,
                    _ => Operation::PutEntity,
                };
                self.authorize(parts, &path, Right::Manage).await?;
                self.entity(parts, body, &entity, operation).await
            }
            Route::Send { entity } => {
                let batch = dataplane::is_batch(&parts.headers);
                *operation = if batch { Operation::SendBatch } else { Operation::Send };
                self.authorize(parts, &path, Right::Send).await?;
                let body = self.read_body(body).await?;
                let messages = if batch {
                    dataplane::batch_messages(&body)?
                } else {
                    vec![dataplane::single_message(&parts.headers, body)?]
                };
                self.broker
                    .send(entity, messages)
                    .await
                    .map_err(|e| HttpError::from_broker(e, Plane::Data))?;
                Ok(empty(StatusCode::CREATED))
            }
            Route::Receive { entity, peek_lock } => {
                *operation =
                    if peek_lock { Operation::PeekLock } else { Operation::ReceiveAndDelete };
                self.authorize(parts, &path, Right::Listen).await?;
                let timeout = dataplane::receive_timeout(&params)?;
                let mode =
                    if peek_lock { ReceiveMode::PeekLock } else { ReceiveMode::ReceiveAndDelete };
                let Some(received) =
                    dataplane::receive_one(&self.broker, &entity, mode, timeout).await?
                else {
                    return Ok(empty(StatusCode::NO_CONTENT));
                };
                if !peek_lock {
                    return Ok(dataplane::message_response(StatusCode::OK, &received, None));
                }
                // The lock URI keeps the client's own spelling of the entity path when it can.
                let raw = parts.uri.path().trim_end_matches('/');
                let suffix = "/messages/head";
                let prefix = match raw.len().checked_sub(suffix.len()) {
                    Some(cut)
                        if raw.is_char_boundary(cut) && raw[cut..].eq_ignore_ascii_case(suffix) =>
                    {
                        raw[..cut].to_owned()
                    }
                    _ => format!("/{}", atom::url_path(&entity.to_string())),
                };
                let location = received.lock.map(|lock| {
                    format!(
                        "{}{prefix}/messages/{}/{}",
                        self.base(parts),
                        received.sequence_number().0,
                        lock.token
                    )
                });
                Ok(dataplane::message_response(StatusCode::CREATED, &received, location))
            }
            Route::Lock { entity, op, token } => {
                *operation = match op {
                    LockOp::Unlock => Operation::Unlock,
                    LockOp::Complete => Operation::Complete,
                    LockOp::Renew => Operation::RenewLock,
                };
                self.authorize(parts, &path, Right::Listen).await?;
                let token = dataplane::lock_token(&token)?;
                dataplane::lock_op(&self.broker, &entity, op, token).await?;
                Ok(empty(StatusCode::OK))
            }
        }
    }

    /// `scheme://host[:port]` as the client addressed us.
    fn base(&self, parts: &Parts) -> String {
        let scheme = match self.listener {
            Listener::Plain => "http",
            Listener::Tls => "https",
        };
        let host = parts
            .headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .filter(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_graphic()))
            .or(parts.uri.authority().map(|a| a.as_str()))
            .unwrap_or("localhost");
        format!("{scheme}://{host}")
    }

    /// Checks the `Authorization` header's SAS token for `right` on `path`. Every failure is 401
    /// (http.md A.2), with the reason in the body; missing rights are worded as Service Bus
    /// words them.
    ///
    /// A token no namespace policy signed may be signed by an authorization rule of the queue or
    /// topic the request is about: the longest leading part of `path` naming an existing entity.
    async fn authorize(&self, parts: &Parts, path: &str, right: Right) -> Result<(), HttpError> {
        let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
            return Err(HttpError::unauthorized(&AuthError::new(
                AuthErrorKind::Malformed,
                "the request has no Authorization header",
            )));
        };
        let token = value.to_str().map_err(|_| {
            HttpError::unauthorized(&AuthError::new(
                AuthErrorKind::Malformed,
                "the Authorization header is not ASCII text",
            ))
        })?;
        let token = token.trim();
        self.token_in_namespace(token)?;
        let now = self.broker.clock().now();
        let authorizer = &self.config.authorizer;
        let claim = match authorizer.verify_token(token, now) {
            Err(e)
                if matches!(
                    e.kind,
                    AuthErrorKind::UnknownPolicy | AuthErrorKind::InvalidSignature
                ) =>
            {
                match self.entity_rules_of(path).await {
                    Some((entity, rules)) => {
                        let rules = EntityRules { entity: entity.as_str(), rules: &rules };
                        authorizer.verify_token_with(token, now, Some(rules))
                    }
                    None => Err(e),
                }
            }
            verified => verified,
        }
        .map_err(|e| HttpError::unauthorized(&e))?;
        claim.check(path, right, now).map_err(|e| {
            if e.kind == AuthErrorKind::InsufficientRights && claim.audience.covers(path) {
                let needed = match right {
                    Right::Manage => "Manage,EntityRead claims required for this operation".into(),
                    right => format!("'{right}' claim(s) are required to perform this operation"),
                };
                HttpError::unauthorized(&AuthError::new(e.kind, format!("{needed}: {}", e.message)))
            } else {
                HttpError::unauthorized(&e)
            }
        })
    }

    /// The authorization rules of the queue or topic `path` is about: the longest leading part
    /// of the path (at most 16 segments) that names an existing entity.
    async fn entity_rules_of(&self, path: &str) -> Option<(EntityPath, Vec<AuthorizationRule>)> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').take(16).collect();
        for end in (1..=segments.len()).rev() {
            let Some(entity) = named_entity(&segments[..end].join("/")) else { continue };
            if let Ok(found) = entity_rules(&self.broker, &entity).await {
                return Some(found);
            }
        }
        None
    }

    /// The whole body, or 413 past the configured limit.
    async fn read_body(&self, body: Body) -> Result<Bytes, HttpError> {
        let limit = self.config.max_body_bytes;
        axum::body::to_bytes(body, limit).await.map_err(|e| {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if too_large {
                HttpError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the request body exceeds the limit of {limit} bytes"),
                )
            } else {
                HttpError::bad_request(format!("could not read the request body: {e}"))
            }
        })
    }

    /// `GET` / `PUT` / `DELETE` of an entity's description, by the kind the namespace holds
    /// at `path` (GET, DELETE) or the body describes (PUT).
    async fn entity(
        &self,
        parts: &Parts,
        body: Body,
        path: &EntityPath,
        operation: &mut Operation,
    ) -> Result<Response, HttpError> {
        // GET and DELETE cannot tell a missing queue from a missing topic: Queue, as JS asks.
        let management = |e| self.management_error(e, Some(path), EntityKind::Queue);
        let base = self.base(parts);
        match parts.method.as_str() {
            "GET" => {
                *operation = Operation::GetEntity;
                let info = self.broker.get_entity(path).await.map_err(management)?;
                self.entity_entry(StatusCode::OK, &base, &info).await
            }
            "DELETE" => {
                *operation = Operation::DeleteEntity;
                self.broker.delete_entity(path).await.map_err(management)?;
                // Python accepts only 200 here (a 204 raises).
                Ok(xml(StatusCode::OK, atom::ENTRY_CONTENT_TYPE, String::new()))
            }
            _ => {
                *operation = Operation::PutEntity;
                let body = self.read_body(body).await?;
                let (mut described, omitted) = atom::parse_description(&body)?;
                let kind = described.entity_kind();
                let management = |e| self.management_error(e, Some(path), kind);
                let tier = self.config.tier;
                let (status, info) = if parts.headers.contains_key(header::IF_MATCH) {
                    let current = self.broker.get_entity(path).await.map_err(management)?;
                    let current_size = match &current.description {
                        EntityDescription::Queue(d) => Some(d.max_message_size_in_kilobytes),
                        EntityDescription::Topic(d) => Some(d.max_message_size_in_kilobytes),
                        _ => None,
                    };
                    let echoed =
                        current_size.is_some() && described.max_message_size() == current_size;
                    atom::check_api_version(api_version(parts), &omitted, echoed)?;
                    atom::fit_to_tier(tier, &mut described, &omitted, current_size)?;
                    atom::fit_partitioned_size(&mut described, &current.description);
                    let update =
                        described.into_update(&current.description, &omitted).map_err(|body| {
                            HttpError::bad_request(format!(
                                "/{} is a {}; the body describes a {}",
                                path,
                                current.description.kind().as_str(),
                                body
                            ))
                        })?;
                    (StatusCode::OK, self.broker.update_entity(path, update).await)
                } else {
                    atom::check_api_version(api_version(parts), &omitted, false)?;
                    atom::fit_to_tier(tier, &mut described, &omitted, None)?;
                    let created = match described {
                        Described::Queue(d) => {
                            self.broker.create_entity(path, EntityDescription::Queue(d)).await
                        }
                        Described::Topic(d) => {
                            self.broker.create_entity(path, EntityDescription::Topic(d)).await
                        }
                        Described::Subscription(d, rule) => {
                            self.broker.create_subscription(path, d, rule).await
                        }
                        Described::Rule(d) => {
                            self.broker.create_entity(path, EntityDescription::Rule(d)).await
                        }
                    };
                    (StatusCode::CREATED, created)
                };
                self.entity_entry(status, &base, &info.map_err(management)?).await
            }
        }
    }

    /// The answer to a management error about the entity at `path` (`kind`: what a bare name
    /// there is): a missing or existing entity in Service Bus's words, naming the entity the
    /// error is about (a request's parent when that is what is missing, and then a bare name
    /// is a topic); any other error as [`HttpError::from_broker`] maps it.
    fn management_error(
        &self,
        error: BrokerError,
        path: Option<&EntityPath>,
        kind: EntityKind,
    ) -> HttpError {
        let (entity, exists) = match &error {
            BrokerError::EntityNotFound { entity } => (entity.clone(), false),
            BrokerError::EntityAlreadyExists { entity } => (entity.clone(), true),
            _ => return HttpError::from_broker(error, Plane::Management),
        };
        let mut answer = HttpError::from_broker(error, Plane::Management);
        if let Ok(about) = EntityPath::parse(&entity) {
            let kind = if path == Some(&about) { kind } else { EntityKind::Topic };
            let tracker = crate::error::system_tracker(&self.config.namespace, &about, kind);
            answer.detail =
                crate::error::entity_detail(&tracker, exists, self.broker.clock().now());
        }
        answer
    }

    /// An entity's entry document, of its kind, with its runtime figures when its partitions
    /// answer.
    async fn entity_entry(
        &self,
        status: StatusCode,
        base: &str,
        info: &EntityInfo,
    ) -> Result<Response, HttpError> {
        let element = self.entry_element(base, info, true).await?;
        Ok(xml(status, atom::ENTRY_CONTENT_TYPE, atom::entry_document(&element)))
    }

    /// An entity's `<entry>` element, of its kind, with its runtime figures when its partitions
    /// answer (`declare_ns`: whether it declares the Atom namespace, as a document does and a
    /// feed's entries do not).
    async fn entry_element(
        &self,
        base: &str,
        info: &EntityInfo,
        declare_ns: bool,
    ) -> Result<String, HttpError> {
        Ok(match &info.description {
            EntityDescription::Queue(_) => {
                let info = QueueInfo::from_entity(info)
                    .map_err(|e| HttpError::from_broker(e, Plane::Management))?;
                let runtime = self.broker.get_queue_runtime(&info.name).await.ok();
                atom::queue::entry_element(base, &info, runtime.as_ref(), declare_ns)
            }
            EntityDescription::Topic(d) => {
                let runtime = self.broker.get_topic_runtime(&info.path).await.ok();
                atom::topic::entry_element(base, info, d, runtime.as_ref(), declare_ns)
            }
            EntityDescription::Subscription(d) => {
                let runtime = self.broker.get_queue_runtime(info.path.as_str()).await.ok();
                atom::subscription::entry_element(base, info, d, runtime.as_ref(), declare_ns)
            }
            EntityDescription::Rule(d) => atom::rule::entry_element(base, info, d, declare_ns),
        })
    }

    /// One page of a listing of entities of `kind`, which `list(skip, count)` gives, as a feed
    /// of their entries.
    async fn list<F>(
        &self,
        parts: &Parts,
        path: &str,
        params: &[(String, String)],
        kind: EntityKind,
        list: impl FnOnce(usize, usize) -> F,
    ) -> Result<Response, HttpError>
    where
        F: std::future::Future<Output = ironbus_core::Result<Vec<EntityInfo>>>,
    {
        // A listing's missing parent is a topic (of subscriptions) or a subscription (of rules).
        let (Page { skip, top }, page, more) = Page::of(params)?
            .fetch(list)
            .await
            .map_err(|e| self.management_error(e, None, EntityKind::Topic))?;
        let base = self.base(parts);
        let mut entries = Vec::with_capacity(page.len());
        for info in &page {
            entries.push(self.entry_element(&base, info, false).await?);
        }
        let now = self.broker.clock().now();
        let body = atom::feed(&base, path, kind, skip, top, &entries, more, now);
        Ok(xml(StatusCode::OK, atom::FEED_CONTENT_TYPE, body))
    }

    /// 200 when every partition of every entity is available, else 503 (a cluster node waits
    /// at most [`CLUSTER_HEALTH_WAIT`] per entity for the partitions' owners to answer, and
    /// takes its own view of those that do not); the JSON body lists the
    /// entities whose status is limited and their unavailable partitions.
    async fn health(&self) -> Response {
        let mut entities = 0usize;
        let cluster = self.config.node_id.is_some();
        let mut unavailable: BTreeMap<String, BTreeSet<u16>> = BTreeMap::new();
        // A cluster node's view of every partition (kept current by the other nodes' reports)
        // stands for an entity whose partitions do not all answer in time.
        let mut view: BTreeMap<String, BTreeSet<u16>> = BTreeMap::new();
        if cluster {
            for p in self.broker.placement().into_iter().filter(|p| !p.available) {
                view.entry(p.entity).or_default().insert(p.partition);
            }
        }
        if let Ok(queues) = self.broker.list_queues(0, usize::MAX).await {
            entities = queues.len();
            for info in queues {
                let runtime = self.broker.get_queue_runtime(&info.name);
                let runtime = if cluster {
                    tokio::time::timeout(CLUSTER_HEALTH_WAIT, runtime).await.ok()
                } else {
                    Some(runtime.await)
                };
                match runtime {
                    Some(Ok(runtime)) => {
                        if runtime.availability == Availability::Limited {
                            let partitions = runtime.unavailable_partitions.iter().map(|p| p.0);
                            unavailable.entry(info.name.clone()).or_default().extend(partitions);
                        }
                    }
                    Some(Err(_)) => {}
                    None => {
                        if let Some(partitions) = view.remove(&info.name) {
                            unavailable.insert(info.name.clone(), partitions);
                        }
                    }
                }
            }
        }
        let limited: Vec<_> = unavailable
            .into_iter()
            .map(|(name, partitions)| {
                json!({
                    "name": name,
                    "status": "Limited",
                    "unavailable_partitions": partitions,
                })
            })
            .collect();
        let status =
            if limited.is_empty() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
        let mut body = json!({
            "status": if limited.is_empty() { "Available" } else { "Limited" },
            "entities": entities,
            "limited_entities": limited,
        });
        if let Some(node) = &self.config.node_id {
            // A cluster node: where every partition runs, as this node knows it.
            let partitions: Vec<_> = self
                .broker
                .placement()
                .into_iter()
                .map(|p| {
                    let owner = match p.owner {
                        Owner::Here => Some(node.clone()),
                        Owner::Node(other) => Some(other),
                        Owner::Unknown => None,
                    };
                    json!({
                        "entity": p.entity,
                        "partition": p.partition,
                        "owner": owner,
                        "available": p.available,
                    })
                })
                .collect();
            body["node"] = json!(node);
            body["partitions"] = json!(partitions);
        }
        let mut response = (status, body.to_string()).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}

/// How long a cluster node's `/health` waits for an entity's partitions to answer.
const CLUSTER_HEALTH_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// One page of a listing: `$skip` (default 0) and `$top` (default 100, at most 1000) from the
/// query, the same for queues, topics, subscriptions and rules.
#[derive(Debug, Clone, Copy)]
struct Page {
    skip: usize,
    top: usize,
}

impl Page {
    fn of(params: &[(String, String)]) -> Result<Page, HttpError> {
        let number = |name: &str, default: usize| -> Result<usize, HttpError> {
            match params.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)) {
                None => Ok(default),
                Some((_, v)) => v.parse().map_err(|_| {
                    HttpError::bad_request(format!("{name} {v:?} is not a non-negative integer"))
                }),
            }
        };
        Ok(Page { skip: number("$skip", 0)?, top: number("$top", 100)?.min(1000) })
    }

    /// The page's items from `list(skip, count)`, and whether more follow (it asks for one
    /// item more than the page holds, so that the feed's `next` link is only given when true).
    async fn fetch<T, F>(
        self,
        list: impl FnOnce(usize, usize) -> F,
    ) -> Result<(Page, Vec<T>, bool), BrokerError>
    where
        F: std::future::Future<Output = ironbus_core::Result<Vec<T>>>,
    {
        let mut items = list(self.skip, self.top.saturating_add(1)).await?;
        let more = items.len() > self.top;
        items.truncate(self.top);
        Ok((self, items, more))
    }
}
