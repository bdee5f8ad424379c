//! Sign-in and entities: the session, the namespace's entities with their counts, one entity's
//! properties (read, edit), creation and deletion.

use axum::body::Body;
use axum::http::{header, request::Parts, Method, StatusCode};
use futures_util::future::join_all;
use ironbus_core::auth::Right;
use ironbus_core::{
    Availability, EntityDescription, EntityInfo, EntityKind, EntityPath, QueueDescription,
    SubscriptionDescription, TopicDescription,
};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{json_response, read_json, session, shape, ApiError, ApiResult, Call, Console};
use crate::service::App;

#[derive(Deserialize)]
struct SignIn {
    policy: String,
    key: String,
}

/// `GET` (who is signed in, and the CSRF token), `POST` (sign in), `DELETE` (sign out).
pub(super) async fn session(console: &Console, app: App, parts: &Parts, body: Body) -> ApiResult {
    let listener = console.app.listener;
    let answer = |s: &session::Session| {
        json!({
            "policy": s.policy,
            "rights": s.right_names(),
            "csrf": s.csrf,
            "namespace": s.namespace.as_deref().unwrap_or(&app.config.namespace),
        })
    };
    match parts.method {
        Method::GET => match console.sessions.find(&parts.headers) {
            Some(s) if s.namespace == app.namespace => {
                Ok(json_response(StatusCode::OK, &answer(&s)))
            }
            _ => Err(ApiError::new(StatusCode::UNAUTHORIZED, "not signed in")),
        },
        Method::POST => {
            let sign_in: SignIn = read_json(&app, body).await?;
            let claim = match app.config.authorizer.verify_key(&sign_in.policy, &sign_in.key) {
                Ok(claim) => claim,
                Err(_) => {
                    // The same answer for an unknown policy and a wrong key, a little late.
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    return Err(ApiError::new(
                        StatusCode::UNAUTHORIZED,
                        "the policy name or key is wrong",
                    ));
                }
            };
            let (id, s) = console.sessions.open(claim.policy, claim.rights, app.namespace.clone());
            tracing::info!(policy = %s.policy, "console sign-in");
            let mut response = json_response(StatusCode::OK, &answer(&s));
            response
                .headers_mut()
                .insert(header::SET_COOKIE, session::set_cookie(Some(&id), listener));
            Ok(response)
        }
        Method::DELETE => {
            let Some(s) = console.sessions.find(&parts.headers) else {
                return Err(ApiError::new(StatusCode::UNAUTHORIZED, "not signed in"));
            };
            let given = parts.headers.get(session::CSRF_HEADER).and_then(|v| v.to_str().ok());
            if !given.is_some_and(|given| session::tokens_equal(&s.csrf, given)) {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "the X-Ironbus-Csrf header is missing or wrong",
                ));
            }
            console.sessions.close(&parts.headers);
            let mut response = json_response(StatusCode::OK, &json!({ "signedOut": true }));
            response.headers_mut().insert(header::SET_COOKIE, session::set_cookie(None, listener));
            Ok(response)
        }
        _ => Err(ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "GET, POST or DELETE")),
    }
}

/// Every queue, topic and subscription with its counts, status and partitions, and the
/// namespace's health (whether every partition answers).
pub(super) async fn list(call: &Call) -> ApiResult {
    call.require(Right::Listen)?;
    let broker = &call.app.broker;
    let mut all = Vec::new();
    for kind in [EntityKind::Queue, EntityKind::Topic, EntityKind::Subscription] {
        all.extend(broker.list_entities(kind, 0, usize::MAX).await.map_err(ApiError::broker)?);
    }
    all.sort_by(|a, b| a.path.key().cmp(b.path.key()));
    let rows = join_all(all.iter().map(|info| entity_row(call, info))).await;
    let limited = rows.iter().filter(|r| r["availability"] == "Limited").count();
    let body = json!({
        "namespace": call.app.namespace.as_deref().unwrap_or(&call.app.config.namespace),
        "health": if limited == 0 { "Available" } else { "Limited" },
        "limitedEntities": limited,
        "entities": rows,
    });
    Ok(json_response(StatusCode::OK, &body))
}

/// One row of the dashboard: an entity and its runtime counts (none if no partition answers).
async fn entity_row(call: &Call, info: &EntityInfo) -> Value {
    let mut row = shape::entity_summary(info);
    match call.app.broker.get_queue_runtime(info.path.as_str()).await {
        Ok(runtime) => {
            row["counts"] = shape::counts(&runtime);
            row["sizeBytes"] = json!(runtime.size_in_bytes);
            row["availability"] = json!(match runtime.availability {
                Availability::Available => "Available",
                Availability::Limited => "Limited",
            });
            row["unavailablePartitions"] =
                json!(runtime.unavailable_partitions.iter().map(|p| p.0).collect::<Vec<_>>());
        }
        Err(e) => {
            row["availability"] = json!("Limited");
            row["error"] = json!(e.to_string());
        }
    }
    row
}

/// One entity: its properties, counts (and a partitioned one's per partition), and (a
/// topic's) subscriptions.
pub(super) async fn get(call: &Call) -> ApiResult {
    call.require(Right::Listen)?;
    let path = call.path()?;
    let broker = &call.app.broker;
    let info = broker.get_entity(&path).await.map_err(ApiError::broker)?;
    let mut body = entity_row(call, &info).await;
    body["properties"] = shape::properties(&info.description);
    body["createdAt"] = json!(crate::timefmt::iso8601(info.created_at));
    body["updatedAt"] = json!(crate::timefmt::iso8601(info.updated_at));
    // A partitioned entity's partitions, each with its counts or as unavailable.
    let partitions = broker.get_partition_runtimes(path.as_str()).await.unwrap_or_default();
    if partitions.len() > 1 {
        let rows: Vec<Value> = partitions
            .iter()
            .map(|p| match &p.counts {
                Some(c) => json!({
                    "partition": p.partition.0,
                    "available": true,
                    "active": c.active_message_count,
                    "deadLetter": c.dead_letter_message_count,
                    "scheduled": c.scheduled_message_count,
                    "deferred": c.deferred_message_count,
                    "transfer": c.transfer_message_count,
                    "sizeBytes": c.size_in_bytes,
                    "incoming": c.incoming_messages_total,
                    "outgoing": c.outgoing_messages_total,
                }),
                None => json!({ "partition": p.partition.0, "available": false }),
            })
            .collect();
        body["partitionRuntimes"] = json!(rows);
    }
    if info.kind() == EntityKind::Topic {
        let subs = broker.list_children(&path, 0, usize::MAX).await.map_err(ApiError::broker)?;
        let rows = join_all(subs.iter().map(|s| entity_row(call, s))).await;
        body["subscriptions"] = json!(rows);
    }
    Ok(json_response(StatusCode::OK, &body))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Create {
    kind: String,
    path: String,
    #[serde(default)]
    requires_session: bool,
    #[serde(default)]
    requires_duplicate_detection: bool,
    #[serde(default)]
    enable_partitioning: bool,
}

/// Creates a queue, topic or subscription with Service Bus's defaults but for the options given.
pub(super) async fn create(call: &Call, body: Body) -> ApiResult {
    call.require(Right::Manage)?;
    let create: Create = read_json(&call.app, body).await?;
    let path =
        EntityPath::parse(create.path.trim()).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let description = match create.kind.as_str() {
        "queue" => EntityDescription::Queue(QueueDescription {
            requires_session: create.requires_session,
            requires_duplicate_detection: create.requires_duplicate_detection,
            enable_partitioning: create.enable_partitioning,
            ..QueueDescription::default()
        }),
        "topic" => EntityDescription::Topic(TopicDescription {
            requires_duplicate_detection: create.requires_duplicate_detection,
            enable_partitioning: create.enable_partitioning,
            ..TopicDescription::default()
        }),
        "subscription" => EntityDescription::Subscription(SubscriptionDescription {
            requires_session: create.requires_session,
            ..SubscriptionDescription::default()
        }),
        other => {
            return Err(ApiError::bad_request(format!(
                "kind {other:?}: queue, topic or subscription"
            )))
        }
    };
    let info = call.app.broker.create_entity(&path, description).await.map_err(ApiError::broker)?;
    Ok(json_response(StatusCode::CREATED, &shape::entity_summary(&info)))
}

/// Changes an entity's editable properties (those the body names).
pub(super) async fn update(call: &Call, body: Body) -> ApiResult {
    call.require(Right::Manage)?;
    let path = call.path()?;
    let changes: serde_json::Map<String, Value> = read_json(&call.app, body).await?;
    let broker = &call.app.broker;
    let current = broker.get_entity(&path).await.map_err(ApiError::broker)?;
    let updated = shape::apply_properties(&current.description, &changes)?;
    let info = broker.update_entity(&path, updated).await.map_err(ApiError::broker)?;
    let mut body = shape::entity_summary(&info);
    body["properties"] = shape::properties(&info.description);
    Ok(json_response(StatusCode::OK, &body))
}

/// Deletes an entity and its messages.
pub(super) async fn delete(call: &Call) -> ApiResult {
    call.require(Right::Manage)?;
    let path = call.path()?;
    call.app.broker.delete_entity(&path).await.map_err(ApiError::broker)?;
    Ok(json_response(StatusCode::OK, &json!({ "deleted": path.as_str() })))
}
