//! The web console's JSON API over a real socket: sign-in, the session cookie, the CSRF token
//! and same-origin check on writes, rights per policy, and the operations (entities, peek,
//! send, purge, resubmit, rules, sessions, scheduled messages).

mod common;

use std::sync::Arc;

use ironbus_core::auth::{Authorizer, Rights, SasPolicy};
use ironbus_core::{
    Broker, Disposition, EntityDescription, EntityPath, ManualClock, Message, NamespaceLimits,
    QueueDescription, ReceiveMode, ShutdownTrigger, SubscriptionDescription, Timestamp,
    TopicDescription,
};
use ironbus_store_memory::MemoryStore;
use ironbus_transport_http::HttpConfig;
use serde_json::{json, Value};

const NOW_MS: i64 = 1_767_225_600_000;

struct Server {
    addr: std::net::SocketAddr,
    broker: Broker,
    _trigger: ShutdownTrigger,
}

struct Reply {
    status: u16,
    headers: String,
    body: Value,
}

/// A signed-in client: its cookie and CSRF token.
struct Client<'a> {
    server: &'a Server,
    cookie: String,
    csrf: String,
}

async fn start_with(console: bool) -> Server {
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(NOW_MS)));
    let broker = Broker::open(Arc::new(MemoryStore::new()), clock, NamespaceLimits::default())
        .await
        .unwrap();
    broker.create_queue("orders", QueueDescription::default()).await.unwrap();
    let path = |p: &str| EntityPath::parse(p).unwrap();
    broker
        .create_entity(&path("events"), EntityDescription::Topic(TopicDescription::default()))
        .await
        .unwrap();
    let sub = EntityDescription::Subscription(SubscriptionDescription::default());
    broker.create_entity(&path("events/Subscriptions/all"), sub).await.unwrap();
    let sessions = QueueDescription { requires_session: true, ..QueueDescription::default() };
    broker.create_queue("sessions", sessions).await.unwrap();
    let authorizer = Authorizer::new(vec![
        SasPolicy::new("root", "root-key", Rights::MANAGE),
        SasPolicy::new("sender", "send-key", Rights::SEND),
        SasPolicy::new("listener", "listen-key", Rights::LISTEN),
    ])
    .unwrap();
    let mut config = HttpConfig::new(Arc::new(authorizer));
    config.console = console;
    let (addr, trigger) = common::serve(broker.clone(), config).await;
    Server { addr, broker, _trigger: trigger }
}

async fn start() -> Server {
    start_with(true).await
}

impl Server {
    fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `method path` with extra headers and a JSON body (none if `Null`).
    async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &Value,
    ) -> Reply {
        let body = if body.is_null() { String::new() } else { body.to_string() };
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if !body.is_empty() {
            head.push_str("Content-Type: application/json\r\n");
        }
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(body.as_bytes());
        let out = common::exchange(self.addr, &bytes).await;
        let text = String::from_utf8_lossy(&out).into_owned();
        let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status line");
        let (headers, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let body = serde_json::from_str(body).unwrap_or(Value::String(body.to_owned()));
        Reply { status, headers: headers.to_ascii_lowercase(), body }
    }

    async fn sign_in(&self, policy: &str, key: &str) -> Client<'_> {
        let origin = self.origin();
        let reply = self
            .request(
                "POST",
                "/$console/api/session",
                &[("Origin", &origin)],
                &json!({ "policy": policy, "key": key }),
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let cookie = reply
            .headers
            .lines()
            .find_map(|l| l.strip_prefix("set-cookie: "))
            .and_then(|c| c.split(';').next())
            .expect("a session cookie")
            .to_owned();
        let csrf = reply.body["csrf"].as_str().unwrap().to_owned();
        Client { server: self, cookie, csrf }
    }
}

impl Client<'_> {
    async fn get(&self, path: &str) -> Reply {
        self.server.request("GET", path, &[("Cookie", &self.cookie)], &Value::Null).await
    }

    /// A write as the page makes it: cookie, CSRF token, same origin.
    async fn write(&self, method: &str, path: &str, body: Value) -> Reply {
        let origin = self.server.origin();
        let headers =
            [("Cookie", self.cookie.as_str()), ("X-Ironbus-Csrf", &self.csrf), ("Origin", &origin)];
        self.server.request(method, path, &headers, &body).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_served_with_a_policy_that_allows_only_itself() {
    let server = start().await;
    let reply = server.request("GET", "/$console/", &[], &Value::Null).await;
    assert_eq!(reply.status, 200);
    assert!(reply.headers.contains("content-security-policy: default-src 'none'"));
    assert!(reply.body.as_str().unwrap().contains("<script src=\"app.js\""));
    for asset in ["/$console/app.js", "/$console/style.css"] {
        assert_eq!(server.request("GET", asset, &[], &Value::Null).await.status, 200, "{asset}");
    }
    assert_eq!(server.request("GET", "/$console", &[], &Value::Null).await.status, 308);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_can_be_switched_off() {
    let server = start_with(false).await;
    let reply = server.request("GET", "/$console/", &[], &Value::Null).await;
    assert_ne!(reply.status, 200);
    let origin = server.origin();
    let reply = server
        .request(
            "POST",
            "/$console/api/session",
            &[("Origin", &origin)],
            &json!({"policy": "root", "key": "root-key"}),
        )
        .await;
    assert_ne!(reply.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_or_unknown_policy_is_refused() {
    let server = start().await;
    let origin = server.origin();
    for (policy, key) in [("root", "wrong"), ("nobody", "root-key"), ("root", "")] {
        let body = json!({ "policy": policy, "key": key });
        let reply =
            server.request("POST", "/$console/api/session", &[("Origin", &origin)], &body).await;
        assert_eq!(reply.status, 401, "{policy}");
        assert!(!reply.headers.contains("set-cookie"));
        assert_eq!(reply.body["error"], "the policy name or key is wrong");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_sets_a_strict_http_only_cookie_and_the_api_needs_it() {
    let server = start().await;
    let reply = server.request("GET", "/$console/api/entities", &[], &Value::Null).await;
    assert_eq!(reply.status, 401);
    let forged = server
        .request(
            "GET",
            "/$console/api/entities",
            &[("Cookie", "ironbus_console=forged")],
            &Value::Null,
        )
        .await;
    assert_eq!(forged.status, 401);
    let origin = server.origin();
    let reply = server
        .request(
            "POST",
            "/$console/api/session",
            &[("Origin", &origin)],
            &json!({"policy": "root", "key": "root-key"}),
        )
        .await;
    let cookie = reply.headers.lines().find(|l| l.starts_with("set-cookie:")).unwrap();
    assert!(cookie.contains("httponly") && cookie.contains("samesite=strict"), "{cookie}");
    assert!(cookie.contains("path=/$console") && !cookie.contains("secure"), "{cookie}");
    let client = server.sign_in("root", "root-key").await;
    let who = client.get("/$console/api/session").await;
    assert_eq!(who.body["policy"], "root");
    assert_eq!(who.body["rights"], json!(["Manage", "Send", "Listen"]));
    assert_eq!(who.body["csrf"], client.csrf.as_str());
    // Signed out, the cookie is dead.
    assert_eq!(client.write("DELETE", "/$console/api/session", Value::Null).await.status, 200);
    assert_eq!(client.get("/$console/api/entities").await.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_need_the_csrf_token_and_the_same_origin() {
    let server = start().await;
    let client = server.sign_in("root", "root-key").await;
    let send = "/$console/api/messages?path=orders";
    let body = json!({ "body": "hello" });
    let origin = server.origin();
    let cookie = client.cookie.as_str();
    let cases: [(&str, Vec<(&str, &str)>); 5] = [
        ("no csrf", vec![("Cookie", cookie), ("Origin", &origin)]),
        ("wrong csrf", vec![("Cookie", cookie), ("Origin", &origin), ("X-Ironbus-Csrf", "0000")]),
        ("no origin", vec![("Cookie", cookie), ("X-Ironbus-Csrf", &client.csrf)]),
        (
            "foreign origin",
            vec![
                ("Cookie", cookie),
                ("X-Ironbus-Csrf", &client.csrf),
                ("Origin", "http://evil.example"),
            ],
        ),
        (
            "cross-site fetch",
            vec![
                ("Cookie", cookie),
                ("X-Ironbus-Csrf", &client.csrf),
                ("Sec-Fetch-Site", "cross-site"),
            ],
        ),
    ];
    for (case, headers) in cases {
        let reply = server.request("POST", send, &headers, &body).await;
        assert_eq!(reply.status, 403, "{case}: {}", reply.body);
        assert!(reply.body["error"].is_string(), "{case}");
    }
    // Sign-in itself is a write: a foreign origin cannot sign a browser in.
    let reply = server
        .request(
            "POST",
            "/$console/api/session",
            &[("Origin", "http://evil.example")],
            &json!({"policy": "root", "key": "root-key"}),
        )
        .await;
    assert_eq!(reply.status, 403);
    assert_eq!(server.broker.get_queue_runtime("orders").await.unwrap().active_message_count, 0);
    let same_site =
        [("Cookie", cookie), ("X-Ironbus-Csrf", &client.csrf), ("Sec-Fetch-Site", "same-origin")];
    assert_eq!(server.request("POST", send, &same_site, &body).await.status, 201);
    assert_eq!(client.write("POST", send, body).await.status, 201);
    assert_eq!(server.broker.get_queue_runtime("orders").await.unwrap().active_message_count, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_only_reads_and_peeks_but_cannot_send_purge_or_manage() {
    let server = start().await;
    server.broker.send("orders", vec![Message::new("m")]).await.unwrap();
    let client = server.sign_in("listener", "listen-key").await;
    assert_eq!(client.get("/$console/api/session").await.body["rights"], json!(["Listen"]));
    let list = client.get("/$console/api/entities").await;
    assert_eq!(list.status, 200);
    assert_eq!(client.get("/$console/api/messages?path=orders").await.status, 200);
    let refused = [
        ("POST", "/$console/api/messages?path=orders", json!({ "body": "x" }), "Send"),
        ("POST", "/$console/api/purge?path=orders", json!({ "queue": "active" }), "Manage"),
        ("POST", "/$console/api/entities", json!({ "kind": "queue", "path": "new" }), "Manage"),
        ("PUT", "/$console/api/entity?path=orders", json!({ "maxDeliveryCount": 3 }), "Manage"),
        ("DELETE", "/$console/api/entity?path=orders", Value::Null, "Manage"),
        ("POST", "/$console/api/resubmit?path=orders", json!({ "sequenceNumbers": [1] }), "Manage"),
    ];
    for (method, path, body, needs) in refused {
        let reply = client.write(method, path, body).await;
        assert_eq!(reply.status, 403, "{method} {path}");
        assert_eq!(reply.body["needs"], needs, "{method} {path}");
    }
    assert_eq!(server.broker.get_queue_runtime("orders").await.unwrap().active_message_count, 1);
    // Send-only can send but not read.
    let sender = server.sign_in("sender", "send-key").await;
    assert_eq!(sender.get("/$console/api/entities").await.status, 403);
    let sent =
        sender.write("POST", "/$console/api/messages?path=orders", json!({ "body": "y" })).await;
    assert_eq!(sent.status, 201, "{}", sent.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entities_are_listed_with_counts_and_edited() {
    let server = start().await;
    let client = server.sign_in("root", "root-key").await;
    let created = client
        .write(
            "POST",
            "/$console/api/entities",
            json!({ "kind": "queue", "path": "a/very/long/name" }),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    server.broker.send("orders", vec![Message::new("1"), Message::new("2")]).await.unwrap();
    let list = client.get("/$console/api/entities").await;
    assert_eq!(list.body["health"], "Available");
    let entities = list.body["entities"].as_array().unwrap();
    let paths: Vec<&str> = entities.iter().map(|e| e["path"].as_str().unwrap()).collect();
    assert_eq!(
        paths,
        ["a/very/long/name", "events", "events/Subscriptions/all", "orders", "sessions"]
    );
    let orders = &entities[3];
    assert_eq!(orders["kind"], "queue");
    assert_eq!(orders["counts"]["active"], 2);
    assert_eq!(orders["counts"]["deadLetter"], 0);
    // The totals the dashboard's message rates come from.
    assert_eq!(orders["counts"]["incoming"], 2);
    assert_eq!(orders["counts"]["outgoing"], 0);
    assert_eq!(orders["availability"], "Available");
    let entity = client.get("/$console/api/entity?path=orders").await;
    assert_eq!(entity.body["properties"]["maxDeliveryCount"], 10);
    assert_eq!(entity.body["properties"]["defaultMessageTimeToLive"], Value::Null);
    let update = json!({ "maxDeliveryCount": 3, "lockDuration": 30, "userMetadata": "edited" });
    let updated = client.write("PUT", "/$console/api/entity?path=orders", update).await;
    assert_eq!(updated.status, 200, "{}", updated.body);
    assert_eq!(updated.body["properties"]["maxDeliveryCount"], 3);
    assert_eq!(updated.body["properties"]["lockDuration"], 30.0);
    let fixed = client
        .write("PUT", "/$console/api/entity?path=orders", json!({ "requiresSession": true }))
        .await;
    assert_eq!(fixed.status, 400);
    assert!(fixed.body["error"].as_str().unwrap().starts_with("requiresSession"));
    // A partitioned queue: its counts per partition.
    let body = json!({ "kind": "queue", "path": "wide", "enablePartitioning": true });
    assert_eq!(client.write("POST", "/$console/api/entities", body).await.status, 201);
    server.broker.send("wide", vec![Message::new("1")]).await.unwrap();
    let wide = client.get("/$console/api/entity?path=wide").await;
    let partitions = wide.body["partitionRuntimes"].as_array().unwrap();
    assert_eq!(partitions.len(), 16);
    assert!(partitions.iter().all(|p| p["available"] == true));
    assert_eq!(partitions.iter().map(|p| p["active"].as_u64().unwrap()).sum::<u64>(), 1);
    assert!(entity.body.get("partitionRuntimes").is_none());
    let topic = client.get("/$console/api/entity?path=events").await;
    assert_eq!(topic.body["subscriptions"][0]["path"], "events/Subscriptions/all");
    let deleted =
        client.write("DELETE", "/$console/api/entity?path=a/very/long/name", Value::Null).await;
    assert_eq!(deleted.status, 200);
    assert_eq!(client.get("/$console/api/entity?path=a/very/long/name").await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sent_messages_are_peeked_with_their_properties_and_body() {
    let server = start().await;
    let client = server.sign_in("root", "root-key").await;
    let form = json!({
        "body": "{\"id\":1}",
        "contentType": "application/json",
        "subject": "order",
        "messageId": "m-1",
        "properties": { "region": "eu", "priority": 3, "urgent": true },
        "count": 3,
    });
    let sent = client.write("POST", "/$console/api/messages?path=orders", form).await;
    assert_eq!(sent.status, 201, "{}", sent.body);
    assert_eq!(sent.body["sent"], 3);
    let peeked = client.get("/$console/api/messages?path=orders&max=2").await;
    let messages = peeked.body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    let m = &messages[0];
    assert_eq!(m["properties"]["messageId"], "m-1");
    assert_eq!(m["properties"]["contentType"], "application/json");
    assert_eq!(m["applicationProperties"]["region"], json!({ "type": "string", "value": "eu" }));
    assert_eq!(m["applicationProperties"]["priority"], json!({ "type": "long", "value": 3 }));
    assert_eq!(m["body"], "eyJpZCI6MX0=");
    assert_eq!(m["state"], "Active");
    let next = peeked.body["next"].as_i64().unwrap();
    let rest = client.get(&format!("/$console/api/messages?path=orders&from={next}")).await;
    assert_eq!(rest.body["messages"].as_array().unwrap().len(), 1);
    let bad =
        client.write("POST", "/$console/api/messages?path=orders", json!({ "count": 0 })).await;
    assert_eq!(bad.status, 400);
    let missing =
        client.write("POST", "/$console/api/messages?path=nowhere", json!({ "body": "x" })).await;
    assert_eq!(missing.status, 404, "{}", missing.body);
}

/// Dead-letters `n` messages of `queue` (sent for it).
async fn dead_letter(broker: &Broker, queue: &str, n: usize) {
    let messages = (0..n).map(|i| Message::new(format!("dead {i}"))).collect();
    broker.send(queue, messages).await.unwrap();
    let receiver = broker.open_receiver(queue, ReceiveMode::PeekLock).await.unwrap();
    receiver.add_credit(n as u32);
    for _ in 0..n {
        let m = receiver.recv().await.unwrap();
        let reason = Disposition::DeadLetter {
            reason: Some("test".into()),
            description: None,
            properties: Default::default(),
        };
        broker.settle(queue, m.lock_token().unwrap(), reason).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_resubmitted_and_purged() {
    let server = start().await;
    dead_letter(&server.broker, "orders", 3).await;
    let client = server.sign_in("root", "root-key").await;
    let dead = client.get("/$console/api/messages?path=orders&queue=deadletter").await;
    let dead = dead.body["messages"].as_array().unwrap().clone();
    assert_eq!(dead.len(), 3);
    assert_eq!(dead[0]["deadLetterReason"], "test");
    let seqs: Vec<i64> = dead.iter().map(|m| m["sequenceNumber"].as_i64().unwrap()).collect();
    // A copy, originals kept.
    let copy = client
        .write(
            "POST",
            "/$console/api/resubmit?path=orders",
            json!({ "sequenceNumbers": [seqs[0]] }),
        )
        .await;
    assert_eq!(copy.status, 200, "{}", copy.body);
    assert_eq!(copy.body["resubmitted"], 1);
    let runtime = server.broker.get_queue_runtime("orders").await.unwrap();
    assert_eq!((runtime.active_message_count, runtime.dead_letter_message_count), (1, 3));
    // A move: the copy stored, the original gone.
    let moved = client
        .write(
            "POST",
            "/$console/api/resubmit?path=orders",
            json!({ "sequenceNumbers": [seqs[1], 999_999], "remove": true }),
        )
        .await;
    assert_eq!(moved.status, 200, "{}", moved.body);
    assert_eq!(moved.body["removed"], 1);
    assert_eq!(moved.body["missing"], json!([999_999]));
    let runtime = server.broker.get_queue_runtime("orders").await.unwrap();
    assert_eq!((runtime.active_message_count, runtime.dead_letter_message_count), (2, 2));
    // Purges: the dead letters, then the active messages.
    let purged = client
        .write("POST", "/$console/api/purge?path=orders", json!({ "queue": "deadletter" }))
        .await;
    assert_eq!(purged.body["deleted"], 2, "{}", purged.body);
    let purged =
        client.write("POST", "/$console/api/purge?path=orders", json!({ "queue": "active" })).await;
    assert_eq!(purged.body["deleted"], 2, "{}", purged.body);
    let runtime = server.broker.get_queue_runtime("orders").await.unwrap();
    assert_eq!(runtime.total_message_count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_resubmitted_elsewhere_gets_a_fresh_id_where_duplicates_are_detected() {
    let server = start().await;
    let dedup =
        QueueDescription { requires_duplicate_detection: true, ..QueueDescription::default() };
    server.broker.create_queue("dedup", dedup).await.unwrap();
    dead_letter(&server.broker, "orders", 1).await;
    let client = server.sign_in("root", "root-key").await;
    let dead = client.get("/$console/api/messages?path=orders&queue=deadletter").await;
    let seq = dead.body["messages"][0]["sequenceNumber"].as_i64().unwrap();
    let original_id = dead.body["messages"][0]["properties"]["messageId"].clone();
    for _ in 0..2 {
        let body = json!({ "sequenceNumbers": [seq], "target": "dedup" });
        let copy = client.write("POST", "/$console/api/resubmit?path=orders", body).await;
        assert_eq!(copy.status, 200, "{}", copy.body);
        assert_eq!(copy.body["target"], "dedup");
        assert_eq!(copy.body["freshMessageIds"], true);
    }
    // Both copies stored: each has a MessageId of its own, not the original's.
    let copies = client.get("/$console/api/messages?path=dedup").await;
    let copies = copies.body["messages"].as_array().unwrap();
    assert_eq!(copies.len(), 2);
    assert_ne!(copies[0]["properties"]["messageId"], copies[1]["properties"]["messageId"]);
    assert_ne!(copies[0]["properties"]["messageId"], original_id);
    assert_eq!(copies[0]["body"], dead.body["messages"][0]["body"]);
    let missing = client
        .write(
            "POST",
            "/$console/api/resubmit?path=orders",
            json!({ "sequenceNumbers": [seq], "target": "nowhere" }),
        )
        .await;
    assert_eq!(missing.status, 404, "{}", missing.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_messages_are_listed_cancelled_and_purged() {
    let server = start().await;
    let client = server.sign_in("root", "root-key").await;
    let form =
        json!({ "body": "later", "scheduledEnqueueTime": "2027-01-01T00:00:00Z", "count": 3 });
    let sent = client.write("POST", "/$console/api/messages?path=orders", form).await;
    assert_eq!(sent.status, 201, "{}", sent.body);
    let listed = client.get("/$console/api/scheduled?path=orders").await;
    let listed = listed.body["messages"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 3);
    assert_eq!(listed[0]["state"], "Scheduled");
    let first = listed[0]["sequenceNumber"].as_i64().unwrap();
    let cancelled = client
        .write(
            "DELETE",
            "/$console/api/scheduled?path=orders",
            json!({ "sequenceNumbers": [first] }),
        )
        .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    let runtime = server.broker.get_queue_runtime("orders").await.unwrap();
    assert_eq!(runtime.scheduled_message_count, 2);
    let purged = client
        .write("POST", "/$console/api/purge?path=orders", json!({ "queue": "scheduled" }))
        .await;
    assert_eq!(purged.body["deleted"], 2, "{}", purged.body);
    assert_eq!(server.broker.get_queue_runtime("orders").await.unwrap().scheduled_message_count, 0);
    // A topic's scheduled messages wait in the topic.
    let form = json!({ "body": "later", "scheduledEnqueueTime": "2027-01-01T00:00:00Z" });
    let sent = client.write("POST", "/$console/api/messages?path=events", form).await;
    assert_eq!(sent.status, 201, "{}", sent.body);
    let listed = client.get("/$console/api/scheduled?path=events").await;
    assert_eq!(listed.body["messages"].as_array().map(Vec::len), Some(1), "{}", listed.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_sql_filter_is_refused_with_where_it_is() {
    let server = start().await;
    let client = server.sign_in("root", "root-key").await;
    let rules = "/$console/api/rules?path=events/Subscriptions/all";
    let listed = client.get(rules).await;
    assert_eq!(listed.body["rules"][0]["name"], "$Default");
    let bad = client
        .write("PUT", rules, json!({ "name": "eu", "sqlExpression": "region = 'eu' AND" }))
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.body["field"], "sqlExpression");
    assert_eq!(bad.body["line"], 1);
    assert!(bad.body["column"].as_u64().is_some());
    assert!(bad.body["error"].as_str().unwrap().contains("syntax error"), "{}", bad.body);
    let bad_action = client
        .write("PUT", rules, json!({ "name": "eu", "sqlExpression": "1=1", "action": "SET" }))
        .await;
    assert_eq!(bad_action.status, 400);
    assert_eq!(bad_action.body["field"], "action");
    let good = client
        .write(
            "PUT",
            rules,
            json!({ "name": "eu", "sqlExpression": "region = 'eu'", "action": "SET seen = 1" }),
        )
        .await;
    assert_eq!(good.status, 201, "{}", good.body);
    let edited =
        client.write("PUT", rules, json!({ "name": "eu", "sqlExpression": "region = 'us'" })).await;
    assert_eq!(edited.status, 200, "{}", edited.body);
    assert_eq!(edited.body["filter"]["expression"], "region = 'us'");
    let listed = client.get(rules).await;
    assert_eq!(listed.body["rules"].as_array().unwrap().len(), 2);
    let deleted = client.write("DELETE", &format!("{rules}&name=eu"), Value::Null).await;
    assert_eq!(deleted.status, 200);
    let listener = server.sign_in("listener", "listen-key").await;
    let refused =
        listener.write("PUT", rules, json!({ "name": "x", "sqlExpression": "1=1" })).await;
    assert_eq!(refused.status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_listed_with_their_state() {
    let server = start().await;
    let mut m = Message::new("s");
    m.properties.session_id = Some("s-1".into());
    server.broker.send("sessions", vec![m]).await.unwrap();
    server.broker.set_session_state("sessions", "s-2", Some("step 3".into())).await.unwrap();
    let client = server.sign_in("listener", "listen-key").await;
    let listed = client.get("/$console/api/sessions?path=sessions").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let sessions = listed.body["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2);
    assert_eq!(sessions[0]["id"], "s-1");
    assert_eq!(sessions[1]["stateText"], "step 3");
    let peeked = client.get("/$console/api/messages?path=sessions&session=s-1").await;
    assert_eq!(peeked.body["messages"].as_array().unwrap().len(), 1, "{}", peeked.body);
    // Setting a state needs Manage.
    let set = "/$console/api/sessions?path=sessions&session=s-1";
    assert_eq!(client.write("PUT", set, json!({ "state": "x" })).await.status, 403);
    let root = server.sign_in("root", "root-key").await;
    let reply = root.write("PUT", set, json!({ "state": "step 1" })).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let state = server.broker.session_state("sessions", "s-1").await.unwrap();
    assert_eq!(state.as_deref(), Some(&b"step 1"[..]));
    let cleared = root
        .write("PUT", "/$console/api/sessions?path=sessions&session=s-2", json!({ "state": null }))
        .await;
    assert_eq!(cleared.status, 200);
    assert_eq!(server.broker.session_state("sessions", "s-2").await.unwrap(), None);
}
