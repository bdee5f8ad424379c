//! Request routing. Paths are percent-decoded first and matched from the right, with keywords
//! compared case-insensitively: clients disagree on casing (`queues`/`Queues`,
//! `subscriptions`/`Subscriptions`), on encoding (`%2F`, `%24`) and on trailing slashes, and
//! queue names may themselves contain `/` (http.md pitfall 2). A fixed axum pattern per route
//! cannot express that, so one fallback handler routes with [`route`]. This module knows the
//! HTTP keywords (`$Resources`, `messages`, `head`, lock URIs); what is left of the path is an
//! address, parsed by the core's one grammar ([`Address::parse`]): queues, topics,
//! subscriptions and rules route to one entity handler, `{topic}/Subscriptions` and
//! `{topic}/Subscriptions/{name}/Rules` to listings. A transfer queue (`$Transfer`), which the
//! grammar recognises but no client may address, is answered 501 after authorization.

use axum::http::Method;
use ironbus_core::{Address, AddressError, EntityAddress, EntityPath, PathShape, SubQueue};

use crate::error::HttpError;

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Health,
    Metrics,
    /// `GET /`: the namespace root, which Service Bus answers with its feed of publicly listed
    /// services (the JS admin client asks for it).
    NamespaceRoot,
    NamespaceInfo,
    /// `GET /$Resources/queues`.
    ListQueues,
    /// `GET /$Resources/topics`.
    ListTopics,
    /// `GET /{topic}/Subscriptions` or `GET /{topic}/Subscriptions/{sub}/Rules`: the children
    /// of `parent`.
    ListChildren {
        parent: EntityPath,
    },
    /// `POST /{entity}/messages`.
    Send {
        entity: EntityAddress,
    },
    /// `POST` (peek-lock) or `DELETE` (receive-and-delete) `/{entity}/messages/head`.
    Receive {
        entity: EntityAddress,
        peek_lock: bool,
    },
    /// `PUT` / `DELETE` / `POST` `/{entity}/messages/{id}/{lock-token}`.
    Lock {
        entity: EntityAddress,
        op: LockOp,
        token: String,
    },
    /// `GET` / `PUT` / `DELETE` `/{entity}`: a queue, topic, subscription or rule.
    Entity {
        path: EntityPath,
    },
    /// An address the core recognises but does not build yet (transfer queues).
    Unimplemented(String),
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
            Operation::Other => "other",
        }
    }
}

/// Routes a request by method and decoded path (without leading or trailing `/`). `ops` says
/// whether the listener serves `/health` and `/metrics`.
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
        return if *method == Method::GET { Ok(Route::NamespaceRoot) } else { not_allowed() };
    }
    if ops && n == 1 && (is(0, "health") || is(0, "metrics")) {
        if method != Method::GET {
            return not_allowed();
        }
        return Ok(if is(0, "health") { Route::Health } else { Route::Metrics });
    }
    if n == 1 && is(0, "$namespaceinfo") {
        return if method == Method::GET { Ok(Route::NamespaceInfo) } else { not_allowed() };
    }
    if is(0, "$resources") {
        return match (n, method == Method::GET) {
            (2, true) if is(1, "queues") => Ok(Route::ListQueues),
            (2, true) if is(1, "topics") => Ok(Route::ListTopics),
            (2, false) => not_allowed(),
            _ => Err(HttpError::not_found(format!("no such resource collection /{path}"))),
        };
    }
    // A data-plane route on the address in the first `upto` segments.
    let data = |upto: usize, make: &dyn Fn(EntityAddress) -> Route| -> Result<Route, HttpError> {
        match address(&segments[..upto].join("/")) {
            Ok(address) if address.entity.shape() == PathShape::Rule => Err(
                HttpError::bad_request(format!("/{path} addresses a rule, which has no messages")),
            ),
            Ok(address) => Ok(make(address)),
            Err(Unparsed::Unimplemented(what)) => Ok(Route::Unimplemented(what)),
            Err(Unparsed::Error(e)) => Err(e),
        }
    };
    let data_method =
        *method == Method::POST || *method == Method::DELETE || *method == Method::PUT;
    if n >= 2 && is(n - 1, "messages") && *method == Method::POST {
        return data(n - 1, &|entity| Route::Send { entity });
    }
    if n >= 3 && is(n - 2, "messages") && is(n - 1, "head") {
        if *method == Method::POST || *method == Method::DELETE {
            let peek_lock = *method == Method::POST;
            return data(n - 2, &|entity| Route::Receive { entity, peek_lock });
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
        let token = segments[n - 1];
        return data(n - 3, &|entity| Route::Lock { entity, op, token: token.to_owned() });
    }
    if !matches!(*method, Method::GET | Method::PUT | Method::DELETE) {
        return not_allowed();
    }
    if let Some((parent, _)) = EntityPath::parse_listing(path) {
        return if *method == Method::GET {
            Ok(Route::ListChildren { parent })
        } else {
            not_allowed()
        };
    }
    match address(path) {
        Ok(EntityAddress { entity, queue: SubQueue::Main }) => Ok(Route::Entity { path: entity }),
        Ok(_) if *method == Method::PUT => Err(HttpError::bad_request(format!(
            "/{path} is a sub-queue; only entities are created"
        ))),
        Ok(_) => Err(HttpError::not_found(format!(
            "/{path} is a sub-queue, not an entity with a description"
        ))),
        Err(Unparsed::Unimplemented(e)) => Ok(Route::Unimplemented(e)),
        Err(Unparsed::Error(e)) => Err(e),
    }
}

/// Why the entity part of a path is not an address this transport serves.
enum Unparsed {
    /// Recognised but not built: answered 501 after authorization.
    Unimplemented(String),
    Error(HttpError),
}

/// Parses the entity part of a path with the core's address grammar. A `$management` node is
/// AMQP's; over HTTP it names nothing.
fn address(path: &str) -> Result<EntityAddress, Unparsed> {
    match Address::parse(path) {
        Ok(Address::Entity(address)) => Ok(address),
        Ok(Address::Management(_)) => Err(Unparsed::Error(HttpError::not_found(format!(
            "/{path} is an AMQP management node; HTTP has no entity there"
        )))),
        Err(e @ AddressError::NotImplemented { .. }) => Err(Unparsed::Unimplemented(e.to_string())),
        Err(e @ (AddressError::Empty | AddressError::Malformed { .. })) => {
            Err(Unparsed::Error(HttpError::bad_request(e.to_string())))
        }
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
        assert_eq!(r(Method::PUT, "a/b"), Route::Entity { path: path("a/b") });
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
        assert_eq!(
            r(Method::GET, "t/Subscriptions/s/Rules/$Default"),
            Route::Entity { path: path("t/Subscriptions/s/Rules/$Default") }
        );
        assert_eq!(
            r(Method::POST, "t/subscriptions/s/messages/head"),
            Route::Receive { entity: "t/Subscriptions/s".into(), peek_lock: true }
        );
        assert_eq!(r(Method::GET, "$Resources/Topics"), Route::ListTopics);
        assert_eq!(r(Method::GET, "$resources/topics"), Route::ListTopics);
        assert_eq!(r(Method::GET, "health"), Route::Health);
        assert!(route(&Method::GET, "health", false)
            .is_ok_and(|r| r == Route::Entity { path: path("health") }));
        assert_eq!(route(&Method::PATCH, "q", true).unwrap_err().status.as_u16(), 405);
        assert_eq!(r(Method::GET, ""), Route::NamespaceRoot);
        assert_eq!(route(&Method::PUT, "", true).unwrap_err().status.as_u16(), 405);
    }

    fn path(p: &str) -> EntityPath {
        EntityPath::parse(p).unwrap()
    }

    #[test]
    fn entity_parts_are_addresses_of_the_core_grammar() {
        // Casing of keywords and names; the name keeps the client's spelling.
        match r(Method::POST, "Orders/EU/$deadletterqueue/MESSAGES/Head") {
            Route::Receive { entity, peek_lock: true } => {
                assert_eq!(entity.entity.as_str(), "Orders/EU");
                assert_eq!(entity.queue, SubQueue::DeadLetter);
            }
            other => panic!("{other:?}"),
        }
        // `%2F` and `%24` as clients send them, decoded before routing.
        let decoded = decode_path("/a%2Fb/%24DeadLetterQueue/messages/head/").unwrap();
        assert_eq!(
            r(Method::DELETE, &decoded),
            Route::Receive { entity: "a/b/$DeadLetterQueue".into(), peek_lock: false }
        );
        assert_eq!(
            r(Method::GET, &decode_path("/A%2FB/").unwrap()),
            Route::Entity { path: path("a/b") }
        );
        // Subscriptions and rules are entities; their listings are children of their parents.
        assert_eq!(r(Method::GET, "t/Subscriptions"), Route::ListChildren { parent: path("t") });
        assert_eq!(
            r(Method::GET, "t/subscriptions/s/rules"),
            Route::ListChildren { parent: path("t/Subscriptions/s") }
        );
        assert_eq!(
            r(Method::PUT, "t/Subscriptions/s"),
            Route::Entity { path: path("t/Subscriptions/s") }
        );
        assert_eq!(
            r(Method::DELETE, "t/Subscriptions/s/Rules/r"),
            Route::Entity { path: path("t/Subscriptions/s/Rules/r") }
        );
        assert_eq!(
            r(Method::POST, "t/subscriptions/s/$DeadLetterQueue/messages/head"),
            Route::Receive { entity: "t/Subscriptions/s/$DeadLetterQueue".into(), peek_lock: true }
        );
        assert_eq!(route(&Method::PUT, "t/Subscriptions", true).unwrap_err().status.as_u16(), 405);
        assert_eq!(
            route(&Method::POST, "t/Subscriptions/s/Rules/r/messages", true)
                .unwrap_err()
                .status
                .as_u16(),
            400
        );
        // The transfer queue is the forwarder's: recognised, not addressable; its dead-letter
        // queue is addressable.
        assert!(matches!(r(Method::POST, "q/$transfer/messages/head"), Route::Unimplemented(_)));
        assert!(matches!(
            r(Method::POST, "q/$Transfer/$DeadLetterQueue/messages/head"),
            Route::Receive { peek_lock: true, .. }
        ));
        // A sub-queue or a management node has no description; a broken path is a bad request.
        let status = |method: Method, p: &str| route(&method, p, true).unwrap_err().status.as_u16();
        assert_eq!(status(Method::GET, "q/$DeadLetterQueue"), 404);
        assert_eq!(status(Method::PUT, "q/$DeadLetterQueue"), 400);
        assert_eq!(status(Method::POST, "q/$management/messages"), 404);
        assert_eq!(status(Method::GET, "t/Subscriptions/s/x"), 400);
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
