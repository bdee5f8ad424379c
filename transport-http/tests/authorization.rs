//! The authorization matrix over HTTP: each row is a SAS token (namespace policies with Send,
//! Listen or Manage; an entity rule created over ATOM; an entity-scoped audience; expired,
//! foreign-host, wrong-key and tampered tokens) and what each request must come to — 2xx (or
//! the operation's own answer) when allowed, 401 when not. Time is the broker's manual clock.

mod common;

use std::sync::Arc;

use ironbus_core::auth::{generate_token, Authorizer, Rights, SasPolicy};
use ironbus_core::{
    Broker, EntityDescription, EntityPath, ManualClock, Message, NamespaceLimits, QueueDescription,
    ShutdownTrigger, SubscriptionDescription, Timestamp, TopicDescription,
};
use ironbus_store_memory::MemoryStore;
use ironbus_transport_http::HttpConfig;

const ROOT_KEY: &str = "root-key";
/// The broker's time: 2026-01-01T00:00:00Z.
const NOW_MS: i64 = 1_767_225_600_000;

struct Server {
    addr: std::net::SocketAddr,
    broker: Broker,
    _trigger: ShutdownTrigger,
}

/// Queues `q1`, `q2`, topic `t` with subscription `s`, each with messages to receive; policies
/// root, `sender` (Send), `listener` (Listen), `manager` (Manage).
async fn start() -> Server {
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(NOW_MS)));
    let broker = Broker::open(Arc::new(MemoryStore::new()), clock, NamespaceLimits::default())
        .await
        .unwrap();
    for q in ["q1", "q2"] {
        broker.create_queue(q, QueueDescription::default()).await.unwrap();
    }
    let path = |p: &str| EntityPath::parse(p).unwrap();
    let topic = EntityDescription::Topic(TopicDescription::default());
    broker.create_entity(&path("t"), topic).await.unwrap();
    let sub = EntityDescription::Subscription(SubscriptionDescription::default());
    broker.create_entity(&path("t/Subscriptions/s"), sub).await.unwrap();
    for entity in ["q1", "q2", "t"] {
        let messages = (0..20).map(|_| Message::new("m")).collect();
        broker.send(entity, messages).await.unwrap();
    }
    let authorizer = Authorizer::new(vec![
        SasPolicy::new("RootManageSharedAccessKey", ROOT_KEY, Rights::MANAGE),
        SasPolicy::new("sender", "send-key", Rights::SEND),
        SasPolicy::new("listener", "listen-key", Rights::LISTEN),
        SasPolicy::new("manager", "manage-key", Rights::MANAGE),
    ])
    .unwrap();
    let config = HttpConfig::new(Arc::new(authorizer));
    let (addr, trigger) = common::serve(broker.clone(), config).await;
    Server { addr, broker, _trigger: trigger }
}

impl Server {
    /// `method path` with `token` (none if empty); returns the status and the body.
    async fn request(&self, method: &str, path: &str, token: &str, body: &[u8]) -> (u16, String) {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if !token.is_empty() {
            head.push_str(&format!("Authorization: {token}\r\n"));
        }
        if method == "PUT" && !body.is_empty() {
            head.push_str("Content-Type: application/atom+xml\r\n");
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(body);
        let out = common::exchange(self.addr, &bytes).await;
        let text = String::from_utf8_lossy(&out).into_owned();
        let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status line");
        let body = text.split_once("\r\n\r\n").map_or(String::new(), |(_, b)| b.to_owned());
        (status, body)
    }
}

fn token_until(audience: &str, policy: &str, key: &str, expires_ms: i64) -> String {
    generate_token(audience, policy, key, Timestamp::from_millis(expires_ms))
}

/// A token for `https://localhost/{path}`, an hour from now.
fn token(path: &str, policy: &str, key: &str) -> String {
    token_until(&format!("https://localhost/{path}"), policy, key, NOW_MS + 3_600_000)
}

/// A request a row makes.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// POST `{entity}/messages`.
    Send(&'static str),
    /// DELETE `{entity}/messages/head` (receive and delete).
    Receive(&'static str),
    /// PUT `{entity}/messages/{seq}/{lock}` with a lock nobody holds (404 when allowed).
    Unlock(&'static str),
    /// GET `{entity}` (the ATOM description).
    Get(&'static str),
    /// PUT a new queue.
    Create(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Allowed,
    Unauthorized,
}

use Op::{Create, Get, Receive, Send, Unlock};
use Outcome::{Allowed, Unauthorized};

/// A row: its name, the token, requests and what each comes to.
type Row = (&'static str, String, Vec<(Op, Outcome)>);

const LOCK: &str = "0b5c1c4e-3f7a-4d0e-9c55-6f1f3c2a9e10";

fn queue_body(inner: &str) -> Vec<u8> {
    format!(
        r#"<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">{inner}</QueueDescription></content></entry>"#
    )
    .into_bytes()
}

async fn run(server: &Server, token: &str, op: Op) -> (u16, String) {
    let api = "api-version=2021-05";
    match op {
        Send(e) => server.request("POST", &format!("/{e}/messages"), token, b"hi").await,
        Receive(e) => {
            server.request("DELETE", &format!("/{e}/messages/head?timeout=0"), token, b"").await
        }
        Unlock(e) => server.request("PUT", &format!("/{e}/messages/1/{LOCK}"), token, b"").await,
        Get(e) => server.request("GET", &format!("/{e}?{api}"), token, b"").await,
        Create(e) => server.request("PUT", &format!("/{e}?{api}"), token, &queue_body("")).await,
    }
}

#[tokio::test]
async fn the_authorization_matrix_holds_over_http() {
    let server = start().await;
    // q2 gets two entity rules over ATOM, as the admin SDKs send them.
    let rules = r#"<AuthorizationRules><AuthorizationRule i:type="SharedAccessAuthorizationRule"><ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue><Rights><AccessRights>Send</AccessRights></Rights><KeyName>q2-send</KeyName><PrimaryKey>q2-primary</PrimaryKey><SecondaryKey>q2-secondary</SecondaryKey></AuthorizationRule><AuthorizationRule i:type="SharedAccessAuthorizationRule"><Rights><AccessRights>Manage</AccessRights><AccessRights>Send</AccessRights><AccessRights>Listen</AccessRights></Rights><KeyName>q2-all</KeyName><PrimaryKey>q2-all-key</PrimaryKey></AuthorizationRule></AuthorizationRules>"#;
    let root = token("", "RootManageSharedAccessKey", ROOT_KEY);
    let (status, body) =
        server.request("PUT", "/q2?api-version=2021-05", &root, &queue_body(rules)).await;
    // An update of an existing queue needs If-Match: *; without it: 409. Use the broker's view.
    assert!(status == 409 || status == 200 || status == 201, "{status} {body}");
    if status == 409 {
        let (status, body) = server
            .request_with_if_match("/q2?api-version=2021-05", &root, &queue_body(rules))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, got) = server.request("GET", "/q2?api-version=2021-05", &root, b"").await;
    assert_eq!(status, 200, "{got}");
    assert!(got.contains("<KeyName>q2-send</KeyName>"), "{got}");
    assert!(got.contains("<SecondaryKey>q2-secondary</SecondaryKey>"), "{got}");
    assert_eq!(got.matches("<AccessRights>").count(), 4, "{got}");

    let ns = |policy: &str, key: &str| token("", policy, key);
    let rows: Vec<Row> = vec![
        (
            "root: everything",
            ns("RootManageSharedAccessKey", ROOT_KEY),
            vec![
                (Send("q1"), Allowed),
                (Receive("q1"), Allowed),
                (Unlock("q1"), Allowed),
                (Get("q1"), Allowed),
                (Create("new-by-root"), Allowed),
                (Receive("t/subscriptions/s"), Allowed),
            ],
        ),
        (
            "send-only policy cannot receive or manage",
            ns("sender", "send-key"),
            vec![
                (Send("q1"), Allowed),
                (Send("t"), Allowed),
                (Receive("q1"), Unauthorized),
                (Receive("q1/$DeadLetterQueue"), Unauthorized),
                (Unlock("q1"), Unauthorized),
                (Get("q1"), Unauthorized),
                (Create("new-by-sender"), Unauthorized),
            ],
        ),
        (
            "listen-only policy cannot send or manage",
            ns("listener", "listen-key"),
            vec![
                (Receive("q1"), Allowed),
                (Unlock("q1"), Allowed),
                (Receive("t/subscriptions/s"), Allowed),
                (Send("q1"), Unauthorized),
                (Get("q1"), Unauthorized),
            ],
        ),
        (
            "manage policy: everything",
            ns("manager", "manage-key"),
            vec![(Get("q2"), Allowed), (Send("q2"), Allowed), (Receive("q2"), Allowed)],
        ),
        (
            "entity-scoped token touches its entity only",
            token("q1", "RootManageSharedAccessKey", ROOT_KEY),
            vec![
                (Send("q1"), Allowed),
                (Get("q1"), Allowed),
                (Receive("q1/$DeadLetterQueue"), Allowed),
                (Send("q2"), Unauthorized),
                (Receive("q2/$DeadLetterQueue"), Unauthorized),
                (Get("q2"), Unauthorized),
                (Create("new-by-q1"), Unauthorized),
            ],
        ),
        (
            "entity rule (primary key): its rights on its entity",
            token("q2", "q2-send", "q2-primary"),
            vec![
                (Send("q2"), Allowed),
                (Receive("q2"), Unauthorized),
                (Get("q2"), Unauthorized),
                (Send("q1"), Unauthorized),
            ],
        ),
        (
            "entity rule (secondary key)",
            token("q2", "q2-send", "q2-secondary"),
            vec![(Send("q2"), Allowed)],
        ),
        (
            "entity Manage rule: the entity's description, not the namespace",
            token("q2", "q2-all", "q2-all-key"),
            vec![
                (Get("q2"), Allowed),
                (Receive("q2/$DeadLetterQueue"), Allowed),
                (Get("q1"), Unauthorized),
                (Create("new-by-q2-rule"), Unauthorized),
            ],
        ),
        (
            "entity rule key for the namespace",
            ns("q2-all", "q2-all-key"),
            vec![(Get("q2"), Unauthorized), (Send("q2"), Unauthorized)],
        ),
        (
            "expired token",
            token_until("https://localhost/", "RootManageSharedAccessKey", ROOT_KEY, NOW_MS),
            vec![(Send("q1"), Unauthorized), (Get("q1"), Unauthorized)],
        ),
        (
            "token for another host (signed with that host's key)",
            token_until(
                "https://elsewhere.example/q1",
                "RootManageSharedAccessKey",
                "the-other-hosts-key",
                NOW_MS + 3_600_000,
            ),
            vec![(Send("q1"), Unauthorized)],
        ),
        (
            "wrong key",
            ns("RootManageSharedAccessKey", "not-the-key"),
            vec![(Send("q1"), Unauthorized), (Get("q1"), Unauthorized)],
        ),
        (
            "tampered signature",
            tamper(&ns("RootManageSharedAccessKey", ROOT_KEY)),
            vec![(Send("q1"), Unauthorized)],
        ),
        ("no token", String::new(), vec![(Send("q1"), Unauthorized), (Get("q1"), Unauthorized)]),
    ];
    for (row, token, ops) in rows {
        for (op, expected) in ops {
            let (status, body) = run(&server, &token, op).await;
            let outcome = match (op, status) {
                (_, 401) => Unauthorized,
                (Unlock(_), 404) | (_, 200..=299) => Allowed,
                other => panic!("{row}: {op:?}: unexpected {other:?}: {body}"),
            };
            assert_eq!(outcome, expected, "{row}: {op:?}: {status} {body}");
        }
    }
    // Missing rights are named as Service Bus names them.
    let (_, body) = run(&server, &ns("sender", "send-key"), Get("q1")).await;
    assert!(body.contains("Manage,EntityRead claims required"), "{body}");
    let (_, body) = run(&server, &ns("listener", "listen-key"), Send("q1")).await;
    assert!(body.contains("Send&apos; claim(s) are required"), "{body}");
    assert!(server.broker.get_queue("new-by-sender").await.is_err());
}

impl Server {
    async fn request_with_if_match(&self, path: &str, token: &str, body: &[u8]) -> (u16, String) {
        let mut head = format!(
            "PUT {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        head.push_str(&format!("Authorization: {token}\r\nIf-Match: *\r\n"));
        head.push_str("Content-Type: application/atom+xml\r\n\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(body);
        let out = common::exchange(self.addr, &bytes).await;
        let text = String::from_utf8_lossy(&out).into_owned();
        let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status line");
        (status, text)
    }
}

/// Flips one character of the signature.
fn tamper(token: &str) -> String {
    let at = token.find("sig=").unwrap() + 4;
    let mut bytes = token.as_bytes().to_vec();
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).unwrap()
}
