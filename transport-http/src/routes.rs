//! Request routing. Paths are percent-decoded first and matched from the right, with keywords
//! compared case-insensitively: clients disagree on casing (`queues`/`Queues`,
//! `subscriptions`/`Subscriptions`), on encoding (`%2F`, `%24`) and on trailing slashes, and
//! queue names may themselves contain `/` (http.md pitfall 2). A fixed axum pattern per route
//! cannot express that, so one fallback handler routes with [`route`].

use axum::http::Method;

use crate::error::HttpError;

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Health,
    Metrics,
    Fault,
    NamespaceInfo,
    /// `GET /$Resources/queues`.
    ListQueues,
    /// `POST /{entity}/messages`.
    Send {
        entity: String,
    },
    /// `POST` (peek-lock) or `DELETE` (receive-and-delete) `/{entity}/messages/head`.
    Receive {
        entity: String,
        peek_lock: bool,
    },
    /// `PUT` / `DELETE` / `POST` `/{entity}/messages/{id}/{lock-token}`.
    Lock {
        entity: String,
        op: LockOp,
        token: String,
    },
    /// `GET` / `PUT` / `DELETE` `/{entity}`.
    Entity {
        name: String,
    },
    /// Topics, subscriptions, rules.
    NotQueues,
}

/// What a lock URI request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockOp {
    Unlock,
    Complete,
    Renew,
}

/// A bounded name for each kind of request, for metrics labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Send,
    SendBatch,
    PeekLock,
    ReceiveAndDelete,
    Unlock,
    Complete,
    RenewLock,
    GetEntity,
    PutEntity,
    DeleteEntity,
    ListEntities,
    NamespaceInfo,
    Health,
    Metrics,
    Fault,
    Other,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Send => "send",
            Operation::SendBatch => "send_batch",
            Operation::PeekLock => "peek_lock",
            Operation::ReceiveAndDelete => "receive_and_delete",
            Operation::Unlock => "unlock",
            Operation::Complete => "complete",
            Operation::RenewLock => "renew_lock",
            Operation::GetEntity => "get_entity",
            Operation::PutEntity => "put_entity",
            Operation::DeleteEntity => "delete_entity",
            Operation::ListEntities => "list_entities",
            Operation::NamespaceInfo => "namespace_info",
            Operation::Health => "health",
            Operation::Metrics => "metrics",
            Operation::Fault => "fault",
            Operation::Other => "other",
        }
    }
}

/// Routes a request by method and decoded path (without leading or trailing `/`). `ops` says
/// whether the listener serves `/health`, `/metrics` and the fault endpoint.
pub fn route(method: &Method, path: &str, ops: bool) -> Result<Route, HttpError> {
    let segments: Vec<&str> = path.split('/').collect();
    let is = |i: usize, word: &str| segments.get(i).is_some_and(|s| s.eq_ignore_ascii_case(word));
    let n = segments.len();
    let not_allowed = || {
        Err(HttpError::new(
            axum::http::StatusCode::METHOD_NOT_ALLOWED,
            format!("{method} is not allowed on /{path}"),
        ))
    };

    if path.is_empty() {
        return Err(HttpError::not_found("no entity named in the path"));
    }
    if ops && n == 1 && (is(0, "health") || is(0, "metrics")) {
        if method != Method::GET {
            return not_allowed();
        }
        return Ok(if is(0, "health") { Route::Health } else { Route::Metrics });
    }
    if ops && n == 2 && is(0, "$ironbus") && is(1, "faults") {
        return Ok(Route::Fault);
    }
    if n == 1 && is(0, "$namespaceinfo") {
        return if method == Method::GET { Ok(Route::NamespaceInfo) } else { not_allowed() };
    }
    if is(0, "$resources") {
        return match (n, method == Method::GET) {
            (2, true) if is(1, "queues") => Ok(Route::ListQueues),
            (2, true) if is(1, "topics") || is(1, "subscriptions") || is(1, "rules") => {
                Ok(Route::NotQueues)
            }
            (2, false) => not_allowed(),
            _ => Err(HttpError::not_found(format!("no such resource collection /{path}"))),
        };
    }
    // `{topic}/subscriptions[/{sub}[/rules[/{rule}]|/messages...]]`
    if (1..n).any(|i| is(i, "subscriptions")) {
        return Ok(Route::NotQueues);
    }
    let entity = |upto: usize| segments[..upto].join("/");
    let data_method =
        *method == Method::POST || *method == Method::DELETE || *method == Method::PUT;
    if n >= 2 && is(n - 1, "messages") && *method == Method::POST {
        return Ok(Route::Send { entity: entity(n - 1) });
    }
    if n >= 3 && is(n - 2, "messages") && is(n - 1, "head") {
        if *method == Method::POST || *method == Method::DELETE {
            return Ok(Route::Receive {
                entity: entity(n - 2),
                peek_lock: *method == Method::POST,
            });
        }
        if *method != Method::GET && *method != Method::PUT {
            return not_allowed();
        }
    }
    if n >= 4 && is(n - 3, "messages") && data_method {
        let op = match *method {
            Method::PUT => LockOp::Unlock,
            Method::DELETE => LockOp::Complete,
            _ => LockOp::Renew,
        };
        return Ok(Route::Lock { entity: entity(n - 3), op, token: segments[n - 1].to_owned() });
    }
    match *method {
        Method::GET | Method::PUT | Method::DELETE => Ok(Route::Entity { name: path.to_owned() }),
        _ => not_allowed(),
    }
}

/// Percent-decodes a request path and trims its slashes.
pub fn decode_path(raw: &str) -> Result<String, HttpError> {
    let decoded = percent_encoding::percent_decode_str(raw).decode_utf8().map_err(|_| {
        HttpError::bad_request("the request path is not UTF-8 once percent-decoded")
    })?;
    Ok(decoded.trim_matches('/').to_owned())
}

/// Query parameters, names and values percent-decoded (`%24skip` is `$skip`).
pub fn query_params(query: Option<&str>) -> Vec<(String, String)> {
    let decode = |s: &str| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned();
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(method: Method, path: &str) -> Route {
        route(&method, path, true).unwrap()
    }

    #[test]
    fn management_and_data_paths_are_told_apart() {
        assert_eq!(r(Method::GET, "$Resources/Queues"), Route::ListQueues);
        assert_eq!(r(Method::GET, "$resources/queues"), Route::ListQueues);
        assert_eq!(r(Method::GET, "$namespaceinfo"), Route::NamespaceInfo);
        assert_eq!(r(Method::PUT, "a/b"), Route::Entity { name: "a/b".into() });
        assert_eq!(r(Method::POST, "a/b/Messages"), Route::Send { entity: "a/b".into() });
        assert_eq!(
            r(Method::DELETE, "q/messages/head"),
            Route::Receive { entity: "q".into(), peek_lock: false }
        );
        assert_eq!(
            r(Method::POST, "q/$DeadLetterQueue/messages/head"),
            Route::Receive { entity: "q/$DeadLetterQueue".into(), peek_lock: true }
        );
        assert_eq!(
            r(Method::PUT, "q/messages/7/abc"),
            Route::Lock { entity: "q".into(), op: LockOp::Unlock, token: "abc".into() }
        );
        assert_eq!(r(Method::GET, "t/Subscriptions/s/Rules/$Default"), Route::NotQueues);
        assert_eq!(r(Method::POST, "t/subscriptions/s/messages/head"), Route::NotQueues);
        assert_eq!(r(Method::GET, "$Resources/Topics"), Route::NotQueues);
        assert_eq!(r(Method::GET, "health"), Route::Health);
        assert!(route(&Method::GET, "health", false)
            .is_ok_and(|r| r == Route::Entity { name: "health".into() }));
        assert_eq!(route(&Method::PATCH, "q", true).unwrap_err().status.as_u16(), 405);
        assert_eq!(route(&Method::GET, "", true).unwrap_err().status.as_u16(), 404);
    }

    #[test]
    fn paths_and_queries_are_decoded() {
        assert_eq!(decode_path("/a%2Fb%20c/").unwrap(), "a/b c");
        assert_eq!(decode_path("/%FF").unwrap_err().status.as_u16(), 400);
        assert_eq!(
            query_params(Some("%24skip=1&%24top=2&api-version=2021-05")),
            [
                ("$skip".into(), "1".into()),
                ("$top".into(), "2".into()),
                ("api-version".into(), "2021-05".into())
            ]
        );
    }
}
