//! Errors as HTTP answers: a status code and a message, in Service Bus's error body
//! (`<Error><Code>404</Code><Detail>…</Detail></Error>`, which both admin clients read).
//!
//! The mapping from [`BrokerError`] lives here and only here. It differs between the two APIs in
//! one place: a missing entity is 410 Gone on the data plane and 404 on management (http.md
//! A.9, B.3). Client mistakes are always 4xx: a 5xx makes the Python SDK retry for minutes.
//!
//! A management answer about a missing or existing entity is worded as Service Bus words it
//! ([`entity_detail`]), which applications match on: `The messaging entity 'ns:Queue:q' could
//! not be found. To know more visit https://aka.ms/sbResourceMgrExceptions.  TrackingId:…,
//! SystemTracker:ns:Queue:q, Timestamp:…`, and for a conflict `SubCode=40900. Conflict. The
//! messaging entity '…' already exists. …`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ironbus_core::auth::AuthError;
use ironbus_core::{BrokerError, EntityKind, EntityPath, PathShape, Timestamp};

use crate::atom::escape;

/// Which API an error is answered on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plane {
    /// REST messaging: send, receive, lock operations.
    Data,
    /// ATOM management.
    Management,
}

/// A failed request: the status to answer and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {detail}")]
pub struct HttpError {
    pub status: StatusCode,
    pub detail: String,
}

impl HttpError {
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        Self { status, detail: detail.into() }
    }

    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, detail)
    }

    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, detail)
    }

    /// Topics, subscriptions and rules: the core has none yet.
    pub fn unauthorized(error: &AuthError) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, format!("unauthorized: {error}"))
    }

    /// The answer to a broker error on `plane`.
    pub fn from_broker(error: BrokerError, plane: Plane) -> Self {
        let status = match &error {
            BrokerError::EntityNotFound { .. } => match plane {
                Plane::Data => StatusCode::GONE,
                Plane::Management => StatusCode::NOT_FOUND,
            },
            BrokerError::EntityAlreadyExists { .. } => StatusCode::CONFLICT,
            BrokerError::InvalidArgument { .. }
            | BrokerError::InvalidOperation(_)
            | BrokerError::TransactionRolledBack(_) => StatusCode::BAD_REQUEST,
            BrokerError::TransactionTimedOut => StatusCode::REQUEST_TIMEOUT,
            // Service Bus reports quota and message-size violations as 403 (http.md A.3, B.3).
            BrokerError::QuotaExceeded(_)
            | BrokerError::MessageSizeExceeded { .. }
            | BrokerError::EntityDisabled { .. } => StatusCode::FORBIDDEN,
            BrokerError::MessageLockLost | BrokerError::MessageNotFound(_) => StatusCode::NOT_FOUND,
            BrokerError::PartitionUnavailable { .. } | BrokerError::ShuttingDown => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            BrokerError::NoMatchingSubscription { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            BrokerError::Unimplemented(_) => StatusCode::NOT_IMPLEMENTED,
            BrokerError::Store(e) if e.is_retriable() => StatusCode::SERVICE_UNAVAILABLE,
            BrokerError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut detail = error.to_string();
        if matches!(error, BrokerError::QuotaExceeded(_)) {
            // JS maps a 403 whose detail carries this sub-code to QuotaExceededError.
            detail.push_str(". SubCode=40300");
        }
        Self::new(status, detail)
    }
}

/// Service Bus's name of an entity in management errors (its `SystemTracker`):
/// `ns:Queue:q`, `ns:Topic:t`, `ns:Topic:t|s` for a subscription, `ns:Topic:t|s|r` for a rule.
/// `kind` says whether a bare name is a queue or a topic (only the namespace knows).
pub fn system_tracker(namespace: &str, path: &EntityPath, kind: EntityKind) -> String {
    match path.shape() {
        PathShape::QueueOrTopic => {
            let kind = if kind == EntityKind::Topic { "Topic" } else { "Queue" };
            format!("{namespace}:{kind}:{}", path.as_str())
        }
        PathShape::Subscription | PathShape::Rule => {
            let mut names = vec![path.name().to_owned()];
            let mut parent = path.parent();
            while let Some(p) = parent {
                names.push(p.name().to_owned());
                parent = p.parent();
            }
            names.reverse();
            format!("{namespace}:Topic:{}", names.join("|"))
        }
    }
}

/// The text Service Bus answers a management request about a missing (`exists` false) or an
/// existing entity with: its words, the entity's `tracker` ([`system_tracker`]), and a tracking
/// id and timestamp (`2024-01-01T10:00:00`) as the real service appends them.
pub fn entity_detail(tracker: &str, exists: bool, now: Timestamp) -> String {
    let what = if exists {
        format!("SubCode=40900. Conflict. The messaging entity '{tracker}' already exists.")
    } else {
        format!("The messaging entity '{tracker}' could not be found.")
    };
    let stamp = crate::timefmt::iso8601(now);
    let stamp = stamp.get(..19).unwrap_or(&stamp);
    format!(
        "{what} To know more visit https://aka.ms/sbResourceMgrExceptions.  TrackingId:{}_G0, \
         SystemTracker:{tracker}, Timestamp:{stamp}",
        uuid::Uuid::new_v4()
    )
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let body = format!(
            "<Error><Code>{}</Code><Detail>{}</Detail></Error>",
            self.status.as_u16(),
            escape(&self.detail)
        );
        let mut response = (self.status, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/xml; charset=utf-8"),
        );
        response
    }
}

#[cfg(test)]
mod tests {
    use ironbus_core::types::PartitionId;

    use super::*;

    #[test]
    fn missing_entity_is_gone_on_the_data_plane_and_not_found_on_management() {
        let missing = || BrokerError::EntityNotFound { entity: "q".into() };
        assert_eq!(HttpError::from_broker(missing(), Plane::Data).status, StatusCode::GONE);
        assert_eq!(
            HttpError::from_broker(missing(), Plane::Management).status,
            StatusCode::NOT_FOUND
        );
    }

    #[test]
    fn missing_and_existing_entities_are_named_as_service_bus_names_them() {
        let tracker =
            |path: &str, kind| system_tracker("myns", &EntityPath::parse(path).unwrap(), kind);
        assert_eq!(tracker("q", EntityKind::Queue), "myns:Queue:q");
        assert_eq!(tracker("a/b", EntityKind::Topic), "myns:Topic:a/b");
        assert_eq!(tracker("t/Subscriptions/s", EntityKind::Subscription), "myns:Topic:t|s");
        assert_eq!(tracker("t/subscriptions/s/rules/r", EntityKind::Rule), "myns:Topic:t|s|r");

        let now = Timestamp::from_millis(1_600_000_000_000);
        let missing = entity_detail("myns:Queue:q", false, now);
        assert!(
            missing.starts_with(
                "The messaging entity 'myns:Queue:q' could not be found. To know more visit \
                 https://aka.ms/sbResourceMgrExceptions.  TrackingId:"
            ),
            "{missing}"
        );
        assert!(
            missing.ends_with("_G0, SystemTracker:myns:Queue:q, Timestamp:2020-09-13T12:26:40"),
            "{missing}"
        );
        let taken = entity_detail("myns:Topic:t|s", true, now);
        assert!(
            taken.starts_with(
                "SubCode=40900. Conflict. The messaging entity 'myns:Topic:t|s' already exists. "
            ),
            "{taken}"
        );
    }

    #[test]
    fn broker_errors_map_to_client_or_retriable_statuses() {
        let cases = [
            (BrokerError::EntityAlreadyExists { entity: "q".into() }, 409),
            (BrokerError::InvalidOperation("x".into()), 400),
            (BrokerError::QuotaExceeded("full".into()), 403),
            (BrokerError::MessageSizeExceeded { size: 2, max: 1 }, 403),
            (BrokerError::MessageLockLost, 404),
            (
                BrokerError::PartitionUnavailable { entity: "q".into(), partition: PartitionId(1) },
                503,
            ),
            (BrokerError::Unimplemented("x"), 501),
        ];
        for (error, status) in cases {
            assert_eq!(HttpError::from_broker(error, Plane::Management).status.as_u16(), status);
        }
    }
}
