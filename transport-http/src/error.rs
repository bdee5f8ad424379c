//! Errors as HTTP answers: a status code and a message, in Service Bus's error body
//! (`<Error><Code>404</Code><Detail>…</Detail></Error>`, which both admin clients read).
//!
//! The mapping from [`BrokerError`] lives here and only here. It differs between the two APIs in
//! one place: a missing entity is 410 Gone on the data plane and 404 on management (http.md
//! A.9, B.3). Client mistakes are always 4xx: a 5xx makes the Python SDK retry for minutes.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ironbus_core::auth::AuthError;
use ironbus_core::BrokerError;

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
