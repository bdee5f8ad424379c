//! One call on the server: path, credentials, length, body, then the handler.
//!
//! **Invariant:** the handler runs only for a call whose credentials were admitted and whose
//! body, read whole within the limit, matches the signed hash; every other outcome is a 4xx
//! or 503 with a short reason, never a panic.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::FutureExt;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_LENGTH};
use hyper::{Method, Request, Response, StatusCode};
use sha2::{Digest, Sha256};

use super::{Activity, Shared};
use crate::admission::Refusal;
use crate::wire::{self, Credentials};
use crate::CallError;

/// Answers one request; never fails (hyper sees every outcome as a response).
pub(super) async fn answer(
    shared: &Shared,
    activity: &Arc<Activity>,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let _in_flight = activity.begin();
    let (parts, body) = request.into_parts();
    if parts.method != Method::POST {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "a call is a POST");
    }
    let Some(method) =
        parts.uri.path().strip_prefix(wire::PATH_PREFIX).filter(|m| wire::method_is_valid(m))
    else {
        return plain(StatusCode::NOT_FOUND, "no such method path");
    };
    let credentials = match shared.admission.admit(method, &parts.headers, wire::now_ms()) {
        Ok(credentials) => credentials,
        Err(Refusal::Credentials(reason)) => {
            tracing::debug!(method, reason, "link call refused");
            return plain(StatusCode::UNAUTHORIZED, reason);
        }
        Err(Refusal::Busy) => {
            return plain(StatusCode::SERVICE_UNAVAILABLE, "too many calls to remember");
        }
    };
    activity.admitted();
    let limit = shared.config.max_request_bytes;
    match declared_length(&parts.headers) {
        Ok(Some(length)) if length > limit as u64 => {
            return plain(StatusCode::PAYLOAD_TOO_LARGE, "request body over the limit");
        }
        Ok(_) => {}
        Err(reason) => return plain(StatusCode::BAD_REQUEST, reason),
    }
    // Counted while read as well: a body without a length, or longer than it declared, stops
    // at the limit.
    let read =
        tokio::time::timeout(shared.config.call_timeout, Limited::new(body, limit).collect());
    let body = match read.await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            return plain(StatusCode::PAYLOAD_TOO_LARGE, "request body over the limit");
        }
        Ok(Err(_)) => return plain(StatusCode::BAD_REQUEST, "request body broken off"),
        Err(_) => return plain(StatusCode::REQUEST_TIMEOUT, "request body too slow"),
    };
    if Sha256::digest(&body).as_slice() != credentials.body_sha256 {
        tracing::debug!(method, node = %credentials.node, "link call refused: body altered");
        return plain(StatusCode::UNAUTHORIZED, "body does not match its signed hash");
    }
    run_handler(shared, &credentials, method, body).await
}

async fn run_handler(
    shared: &Shared,
    credentials: &Credentials,
    method: &str,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let called = shared.handler.call(&credentials.node, method, body);
    let (status, code, reply) = match AssertUnwindSafe(called).catch_unwind().await {
        Ok(Ok(reply)) => (StatusCode::OK, String::new(), reply),
        Ok(Err(CallError { code, message })) => {
            let code = if CallError::code_is_valid(&code) {
                code
            } else {
                CallError::INVALID_CODE.to_owned()
            };
            (remote_error(), code, Bytes::from(message))
        }
        Err(_) => {
            tracing::error!(method, "link handler panicked");
            let message = Bytes::from_static(b"the handler panicked");
            (remote_error(), CallError::HANDLER_PANICKED.to_owned(), message)
        }
    };
    let signature = wire::reply_signature(
        shared.admission.secret(),
        &credentials.nonce,
        status.as_u16(),
        &code,
        &reply,
    );
    let mut response = Response::new(Full::new(reply));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    // Codes and hex signatures are visible ASCII.
    if let Ok(signature) = HeaderValue::from_str(&signature) {
        headers.insert(wire::REPLY_SIGNATURE, signature);
    }
    if !code.is_empty() {
        if let Ok(code) = HeaderValue::from_str(&code) {
            headers.insert(wire::ERROR_CODE, code);
        }
    }
    response
}

fn remote_error() -> StatusCode {
    StatusCode::from_u16(wire::REMOTE_ERROR).unwrap_or(StatusCode::UNPROCESSABLE_ENTITY)
}

/// The request's `content-length`, if it declares one.
fn declared_length(headers: &hyper::HeaderMap) -> Result<Option<u64>, &'static str> {
    let Some(value) = headers.get(CONTENT_LENGTH) else { return Ok(None) };
    let text = value.to_str().map_err(|_| "invalid content-length")?;
    if text.is_empty() || text.len() > 20 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err("invalid content-length");
    }
    text.parse().map(Some).map_err(|_| "invalid content-length")
}

/// An unsigned reply: a status and a short reason.
fn plain(status: StatusCode, reason: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(reason.as_bytes())));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_lengths_are_digits_only() {
        let mut headers = hyper::HeaderMap::new();
        assert_eq!(declared_length(&headers), Ok(None));
        for (text, expected) in [
            ("0", Ok(Some(0))),
            ("16777216", Ok(Some(16_777_216))),
            ("+5", Err("invalid content-length")),
            ("", Err("invalid content-length")),
            ("99999999999999999999", Err("invalid content-length")),
        ] {
            headers.insert(CONTENT_LENGTH, HeaderValue::from_static(text));
            assert_eq!(declared_length(&headers), expected, "{text:?}");
        }
    }
}
