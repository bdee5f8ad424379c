//! End-to-end tests of the HTTP transport: a real broker on the memory store, the transport on
//! `127.0.0.1:0`, and requests written by hand over real sockets (so malformed input reaches
//! the server exactly as sent).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ironbus_core::auth::{generate_token, Authorizer, Rights, SasPolicy};
use ironbus_core::testing::FaultyStore;
use ironbus_core::types::PartitionId;
use ironbus_core::{
    shutdown_signal, Broker, NamespaceLimits, QueueDescription, ShutdownTrigger, Store,
    SystemClock, Timestamp, Transport,
};
use ironbus_store_memory::MemoryStore;
use ironbus_transport_http::{FaultHook, HttpConfig, HttpTransport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const KEY: &str = "root-key";
const LISTEN_KEY: &str = "listen-key";

struct Server {
    addr: std::net::SocketAddr,
    broker: Broker,
    _trigger: ShutdownTrigger,
}

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

impl Reply {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|s| s.as_str())
    }
}

async fn start_with(limits: NamespaceLimits, max_body: usize) -> Server {
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let faulty = Arc::new(FaultyStore::new(memory));
    let broker = Broker::open(faulty.clone(), Arc::new(SystemClock), limits).await.unwrap();
    let authorizer = Authorizer::new(vec![
        SasPolicy::new("root", KEY, Rights::MANAGE),
        SasPolicy::new("listener", LISTEN_KEY, Rights::LISTEN),
    ])
    .unwrap();
    let mut config = HttpConfig::new(Arc::new(authorizer));
    config.max_body_bytes = max_body;
    config.metrics = Some(Arc::new(|| "# metrics\n".to_owned()));
    let hook_broker = broker.clone();
    let hook: FaultHook = Arc::new(move |entity, partition, available| {
        let prefix = hook_broker
            .partition_key_prefix(entity, PartitionId(partition))
            .map_err(|e| e.to_string())?;
        if available {
            faulty.heal_prefix(&prefix);
        } else {
            faulty.fail_prefix(prefix.to_vec());
        }
        Ok(())
    });
    config.faults = Some(hook);
    let transport =
        HttpTransport::bind(Some("127.0.0.1:0".parse().unwrap()), None, config).await.unwrap();
    let addr = transport.plain_addr().unwrap();
    let (trigger, shutdown) = shutdown_signal();
    let serving = broker.clone();
    tokio::spawn(async move { Box::new(transport).serve(serving, shutdown).await });
    Server { addr, broker, _trigger: trigger }
}

async fn start() -> Server {
    start_with(NamespaceLimits::default(), 64 * 1024).await
}

fn token(policy: &str, key: &str, resource: &str, valid_for: i64) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    generate_token(resource, policy, key, Timestamp::from_millis(now + valid_for * 1000))
}

fn root() -> String {
    token("root", KEY, "https://anything.example:443", 3600)
}

impl Server {
    /// Sends a raw request; `headers` are written as given (after Host and Content-Length).
    async fn raw(&self, head: &str, headers: &[(&str, String)], body: &[u8]) -> Reply {
        let mut request =
            format!("{head} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n", self.addr);
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        let mut bytes = request.into_bytes();
        bytes.extend_from_slice(body);
        let mut stream = TcpStream::connect(self.addr).await.unwrap();
        stream.write_all(&bytes).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut out))
            .await
            .expect("the server answers")
            .unwrap();
        parse_reply(&out)
    }

    async fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: &[u8],
    ) -> Reply {
        let mut all = vec![("Authorization", root())];
        all.extend(headers.iter().cloned());
        self.raw(&format!("{method} {path}"), &all, body).await
    }
}

fn parse_reply(raw: &[u8]) -> Reply {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Reply { status, headers, body: raw[split + 4..].to_vec() }
}

fn queue_xml(inner: &str) -> Vec<u8> {
    format!(
        r#"<?xml version="1.0" encoding="utf-8"?><entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">{inner}</QueueDescription></content></entry>"#
    )
    .into_bytes()
}

#[tokio::test]
async fn every_request_needs_a_valid_sas_token() {
    let s = start().await;
    s.broker.create_queue("q", QueueDescription::default()).await.unwrap();
    let none = s.raw("GET /q", &[], b"").await;
    assert_eq!(none.status, 401);
    assert!(none.text().contains("no Authorization header"), "{}", none.text());

    let wrong_key = token("root", "nope", "https://h/q", 3600);
    let r = s.raw("GET /q", &[("Authorization", wrong_key)], b"").await;
    assert_eq!(r.status, 401);
    assert!(r.text().contains("signature"), "{}", r.text());

    let expired = token("root", KEY, "https://h/q", -10);
    let r = s.raw("GET /q", &[("Authorization", expired)], b"").await;
    assert_eq!(r.status, 401);
    assert!(r.text().contains("expired"), "{}", r.text());

    let r = s.raw("GET /q", &[("Authorization", "Bearer xyz".to_owned())], b"").await;
    assert_eq!(r.status, 401);

    // Listen rights: may receive, may not send or manage.
    let listen = token("listener", LISTEN_KEY, "http://h/q", 3600);
    let r = s.raw("POST /q/messages", &[("Authorization", listen.clone())], b"x").await;
    assert_eq!(r.status, 401);
    assert!(r.text().contains("does not grant Send"), "{}", r.text());
    let r = s.raw("GET /q", &[("Authorization", listen.clone())], b"").await;
    assert_eq!(r.status, 401);
    let r = s.raw("DELETE /q/messages/head?timeout=0", &[("Authorization", listen)], b"").await;
    assert_eq!(r.status, 204);

    // A token for one queue does not cover another.
    let other = token("root", KEY, "https://h/other", 3600);
    let r = s.raw("GET /q", &[("Authorization", other)], b"").await;
    assert_eq!(r.status, 401);

    // The full-URL audience with a query (the Rust crate, JS admin) is fine.
    let full = token("root", KEY, "https://ns.servicebus.windows.net/q?api-version=2021-05", 3600);
    let r = s.raw("GET /q?api-version=2021-05", &[("Authorization", full)], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test]
async fn queues_are_created_read_updated_listed_and_deleted() {
    let s =
        start_with(NamespaceLimits { max_entities: 100, max_partitioned_entities: 1 }, 64 * 1024)
            .await;
    let r = s.call("PUT", "/orders", &[], &queue_xml("<LockDuration>PT30S</LockDuration>")).await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert!(r.header("content-type").unwrap().contains("atom+xml"));
    assert!(r.text().contains("<LockDuration>PT30S</LockDuration>"));
    assert!(r.text().contains(r#"<title type="text">orders</title>"#));

    let r = s.call("PUT", "/orders", &[], &queue_xml("")).await;
    assert_eq!(r.status, 409, "{}", r.text());

    let r = s.call("PUT", "/missing", &[("If-Match", "*".into())], &queue_xml("")).await;
    assert_eq!(r.status, 404);

    let r = s
        .call(
            "PUT",
            "/orders",
            &[("If-Match", "*".into())],
            &queue_xml("<MaxDeliveryCount>3</MaxDeliveryCount>"),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("<MaxDeliveryCount>3</MaxDeliveryCount>"));
    assert!(
        r.text().contains("<LockDuration>PT1M</LockDuration>"),
        "omitted fields revert to defaults"
    );

    // Partitioned, with the ironbus partition count extension; then the quota of one.
    let r = s
        .call(
            "PUT",
            "/a%2Fpart",
            &[],
            &queue_xml(r#"<EnablePartitioning>true</EnablePartitioning><PartitionCount xmlns="urn:ironbus:servicebus:extensions">4</PartitionCount>"#),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(s.broker.get_queue("a/part").await.unwrap().description.partitions(), 4);
    let r = s
        .call("PUT", "/part2", &[], &queue_xml("<EnablePartitioning>true</EnablePartitioning>"))
        .await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.text().contains("quota"), "{}", r.text());

    // Partitioning is fixed at creation; an update that leaves it out keeps it.
    let r = s
        .call(
            "PUT",
            "/a/part",
            &[("If-Match", "*".into())],
            &queue_xml("<EnablePartitioning>false</EnablePartitioning>"),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text());
    let r = s
        .call(
            "PUT",
            "/a/part",
            &[("If-Match", "*".into())],
            &queue_xml("<MaxDeliveryCount>4</MaxDeliveryCount>"),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("<EnablePartitioning>true</EnablePartitioning>"));

    // Core validation → 400 with the field named.
    let r = s.call("PUT", "/bad", &[], &queue_xml("<LockDuration>PT1S</LockDuration>")).await;
    assert_eq!(r.status, 400);
    assert!(r.text().contains("LockDuration"), "{}", r.text());
    let r = s.call("PUT", "/bad%20name", &[], &queue_xml("")).await;
    assert_eq!(r.status, 400);

    // Paging: self first, next only while entries remain.
    let r = s.call("GET", "/$Resources/Queues?%24skip=0&%24top=1", &[], b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text().matches("<entry>").count(), 1);
    assert!(r.text().contains(r#"rel="next""#));
    let r = s.call("GET", "/$resources/queues?$skip=1&$top=5", &[], b"").await;
    assert_eq!(r.text().matches("<entry>").count(), 1);
    assert!(!r.text().contains(r#"rel="next""#));
    let r = s.call("GET", "/$resources/queues?$top=x", &[], b"").await;
    assert_eq!(r.status, 400);

    let r = s.call("GET", "/$namespaceinfo", &[], b"").await;
    assert_eq!(r.status, 200);
    assert!(r.text().contains("<MessagingSKU>Standard</MessagingSKU>"));

    let r = s.call("DELETE", "/orders", &[], b"").await;
    assert_eq!(r.status, 200);
    let r = s.call("DELETE", "/orders", &[], b"").await;
    assert_eq!(r.status, 404);
    let r = s.call("GET", "/orders", &[], b"").await;
    assert_eq!(r.status, 404);
    assert!(r.text().starts_with("<Error><Code>404</Code>"), "{}", r.text());
}

#[tokio::test]
async fn topics_subscriptions_and_rules_are_refused_clearly() {
    let s = start().await;
    let topic = br#"<entry xmlns="http://www.w3.org/2005/Atom"><content><TopicDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"/></content></entry>"#;
    for (method, path, body) in [
        ("PUT", "/t1", &topic[..]),
        ("GET", "/t1/Subscriptions/s1", &b""[..]),
        ("GET", "/$Resources/Topics", &b""[..]),
        ("POST", "/t1/subscriptions/s1/messages/head", &b""[..]),
    ] {
        let r = s.call(method, path, &[], body).await;
        assert_eq!(r.status, 501, "{method} {path}");
        assert!(r.text().contains("not supported"), "{}", r.text());
    }
}

#[tokio::test]
async fn messages_go_through_send_peek_lock_renew_unlock_complete() {
    let s = start().await;
    s.broker.create_queue("q", QueueDescription::default()).await.unwrap();
    let r = s
        .call(
            "POST",
            "/q/messages",
            &[
                ("Content-Type", "text/plain".into()),
                (
                    "BrokerProperties",
                    r#"{"Label":"L1","MessageId":"m1","CorrelationId":"c"}"#.into(),
                ),
                ("Priority", "High".into()),
                ("Count", "5".into()),
                ("Quoted", "\"7\"".into()),
            ],
            b"hello",
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text());

    let r = s.call("POST", "/q/messages/head?timeout=5", &[], b"").await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.body, b"hello");
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.header("priority"), Some("\"High\""));
    assert_eq!(r.header("count"), Some("5"));
    assert_eq!(r.header("quoted"), Some("\"7\""));
    let props: serde_json::Value =
        serde_json::from_str(r.header("brokerproperties").unwrap()).unwrap();
    for key in [
        "DeliveryCount",
        "EnqueuedTimeUtc",
        "LockToken",
        "LockedUntilUtc",
        "MessageId",
        "SequenceNumber",
        "State",
        "TimeToLive",
    ] {
        assert!(props.get(key).is_some(), "BrokerProperties lacks {key}: {props}");
    }
    assert_eq!(props["Label"], "L1");
    assert_eq!(props["DeliveryCount"], 1);
    assert!(props["LockedUntilUtc"].as_str().unwrap().ends_with(" GMT"));
    let location = r.header("location").unwrap().to_owned();
    let token = props["LockToken"].as_str().unwrap();
    assert_eq!(
        location,
        format!("http://{}/q/messages/{}/{token}", s.addr, props["SequenceNumber"])
    );
    let lock_path = location.split_once(&s.addr.to_string()).unwrap().1.to_owned();

    assert_eq!(s.call("POST", &lock_path, &[], b"").await.status, 200, "renew");
    assert_eq!(s.call("PUT", &lock_path, &[], b"").await.status, 200, "unlock");
    assert_eq!(
        s.call("DELETE", &lock_path, &[], b"").await.status,
        404,
        "the unlocked lock is gone"
    );

    let r = s.call("POST", "/q/messages/head?timeout=5", &[], b"").await;
    assert_eq!(r.status, 201);
    let props: serde_json::Value =
        serde_json::from_str(r.header("brokerproperties").unwrap()).unwrap();
    assert_eq!(props["DeliveryCount"], 2);
    let lock_path =
        r.header("location").unwrap().split_once(&s.addr.to_string()).unwrap().1.to_owned();
    assert_eq!(s.call("DELETE", &lock_path, &[], b"").await.status, 200, "complete");
    assert_eq!(s.call("DELETE", &lock_path, &[], b"").await.status, 404, "completed twice");
    assert_eq!(s.call("DELETE", "/q/messages/1/not-a-guid", &[], b"").await.status, 400);
    assert_eq!(
        s.call("DELETE", "/q/messages/1/00000000-0000-4000-8000-000000000000", &[], b"")
            .await
            .status,
        404
    );

    let r = s.call("DELETE", "/q/messages/head?timeout=0", &[], b"").await;
    assert_eq!(r.status, 204);
}

#[tokio::test]
async fn batches_and_receive_and_delete() {
    let s = start().await;
    s.broker.create_queue("q", QueueDescription::default()).await.unwrap();
    let batch = br#"[{"Body":"one","BrokerProperties":{"Label":"a"},"UserProperties":{"n":1}},{"Body":"two"}]"#;
    let r = s
        .call(
            "POST",
            "/q/messages",
            &[("Content-Type", "application/vnd.microsoft.servicebus.json; charset=utf-8".into())],
            batch,
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text());
    let r = s.call("DELETE", "/q/messages/head?timeout=5", &[], b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"one");
    assert_eq!(r.header("n"), Some("1"));
    let props: serde_json::Value =
        serde_json::from_str(r.header("brokerproperties").unwrap()).unwrap();
    assert!(props.get("LockToken").is_none());
    let r = s.call("DELETE", "/q/messages/head", &[], b"").await;
    assert_eq!(r.body, b"two");
    // A JSON-looking body without the batch content type is one message.
    let r =
        s.call("POST", "/q/messages", &[("Content-Type", "application/json".into())], batch).await;
    assert_eq!(r.status, 201);
    let r = s.call("DELETE", "/q/messages/head?timeout=5", &[], b"").await;
    assert_eq!(r.body, batch);
    // A huge timeout is capped, not a panic.
    assert_eq!(s.call("POST", "/q/messages", &[], b"z").await.status, 201);
    let r = s.call("DELETE", "/q/messages/head?timeout=1e300", &[], b"").await;
    assert_eq!(r.status, 200);
}

/// method, path, headers, body, expected status, expected text in the answer.
type Case = (&'static str, &'static str, Vec<(&'static str, String)>, Vec<u8>, u16, &'static str);

#[tokio::test]
async fn data_plane_errors_have_their_status_codes() {
    let s = start().await;
    s.broker.create_queue("q", QueueDescription::default()).await.unwrap();
    let batch_type = ("Content-Type", "application/vnd.microsoft.servicebus.json".to_owned());
    let cases: Vec<Case> = vec![
        ("POST", "/missing/messages", vec![], b"x".to_vec(), 410, "not found"),
        ("POST", "/missing/messages/head?timeout=0", vec![], vec![], 410, "not found"),
        (
            "POST",
            "/q/messages",
            vec![("BrokerProperties", "{not json".into())],
            b"x".to_vec(),
            400,
            "BrokerProperties",
        ),
        (
            "POST",
            "/q/messages",
            vec![("BrokerProperties", r#"{"TimeToLive":"soon"}"#.into())],
            b"x".to_vec(),
            400,
            "TimeToLive",
        ),
        ("POST", "/q/messages", vec![batch_type.clone()], b"[{".to_vec(), 400, "not valid JSON"),
        ("POST", "/q/messages", vec![batch_type.clone()], b"{}".to_vec(), 400, "JSON array"),
        ("POST", "/q/messages", vec![batch_type], b"[]".to_vec(), 400, "no messages"),
        ("POST", "/q/messages/head?timeout=abc", vec![], vec![], 400, "timeout"),
        ("DELETE", "/q/messages/head?timeout=-1", vec![], vec![], 400, "timeout"),
        ("DELETE", "/q/messages/head?timeout=NaN", vec![], vec![], 400, "timeout"),
        ("POST", "/q/messages", vec![], vec![b'x'; 300 * 1024], 413, "exceeds"),
        ("PUT", "/newq", vec![], vec![b'<'; 300 * 1024], 413, "exceeds"),
        ("PUT", "/newq", vec![], b"<entry><content>".to_vec(), 400, "malformed XML"),
        ("PUT", "/newq", vec![], b"not xml at all".to_vec(), 400, "malformed XML"),
        ("PATCH", "/q", vec![], vec![], 405, "not allowed"),
    ];
    for (method, path, headers, body, status, wants) in cases {
        let r = s.call(method, path, &headers, &body).await;
        assert_eq!(r.status, status, "{method} {path}: {}", r.text());
        assert!(r.text().contains(wants), "{method} {path}: {}", r.text());
    }
    // A message over the queue's own size limit (256 KiB) but under the body limit: 403.
    let s2 = start_with(NamespaceLimits::default(), 1024 * 1024).await;
    s2.broker.create_queue("q", QueueDescription::default()).await.unwrap();
    let r = s2.call("POST", "/q/messages", &[], &vec![b'x'; 300 * 1024]).await;
    assert_eq!(r.status, 403, "{}", r.text());
}

#[tokio::test]
async fn malformed_headers_and_paths_get_400_not_500() {
    let s = start().await;
    s.broker.create_queue("q", QueueDescription::default()).await.unwrap();
    // Non-ASCII bytes in a BrokerProperties header and in a custom property header.
    let mut raw = format!("POST /q/messages HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAuthorization: {}\r\nContent-Length: 1\r\n", s.addr, root()).into_bytes();
    raw.extend_from_slice(b"BrokerProperties: {\"Label\":\"\xff\"}\r\n\r\nx");
    let r = send_raw(s.addr, &raw).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let mut raw = format!("POST /q/messages HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAuthorization: {}\r\nContent-Length: 1\r\n", s.addr, root()).into_bytes();
    raw.extend_from_slice(b"Color: r\xe9d\r\n\r\nx");
    let r = send_raw(s.addr, &raw).await;
    assert_eq!(r.status, 400, "{}", r.text());
    // An Authorization header that is not ASCII.
    let mut raw =
        format!("GET /q HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n", s.addr).into_bytes();
    raw.extend_from_slice(b"Authorization: SharedAccessSignature sr=\xff\r\n\r\n");
    assert_eq!(send_raw(s.addr, &raw).await.status, 401);
    // A path that does not decode to UTF-8.
    let r = s.call("GET", "/q%FF", &[], b"").await;
    assert_eq!(r.status, 400);
    // A SAS token with garbage in it.
    let r = s
        .raw(
            "GET /q",
            &[("Authorization", "SharedAccessSignature sr=%ZZ&sig=&se=x&skn=".into())],
            b"",
        )
        .await;
    assert_eq!(r.status, 401);
}

async fn send_raw(addr: std::net::SocketAddr, raw: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw).await.unwrap();
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await.unwrap();
    parse_reply(&out)
}

#[tokio::test]
async fn runtime_counts_and_limited_status_show_in_management_and_health() {
    let s = start().await;
    s.broker
        .create_queue(
            "p",
            QueueDescription {
                enable_partitioning: true,
                partition_count: 2,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    for i in 0..3 {
        let r = s.call("POST", "/p/messages", &[], format!("m{i}").as_bytes()).await;
        assert_eq!(r.status, 201);
    }
    let r = s.call("GET", "/p", &[], b"").await;
    assert!(
        r.text().contains("<d2p1:ActiveMessageCount>3</d2p1:ActiveMessageCount>"),
        "{}",
        r.text()
    );
    assert!(r.text().contains("<MessageCount>3</MessageCount>"));
    assert!(r.text().contains("<EntityAvailabilityStatus>Available</EntityAvailabilityStatus>"));

    let health = s.raw("GET /health", &[], b"").await;
    assert_eq!(health.status, 200);
    assert!(health.text().contains(r#""limited_entities":[]"#), "{}", health.text());

    let r = s.raw("POST /$ironbus/faults?entity=p&partition=1&available=false", &[], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = s.call("GET", "/p", &[], b"").await;
    assert_eq!(r.status, 200);
    assert!(
        r.text().contains("<EntityAvailabilityStatus>Limited</EntityAvailabilityStatus>"),
        "{}",
        r.text()
    );
    let health = s.raw("GET /health", &[], b"").await;
    assert_eq!(health.status, 503);
    let body: serde_json::Value = serde_json::from_slice(&health.body).unwrap();
    assert_eq!(body["limited_entities"][0]["name"], "p");
    assert_eq!(body["limited_entities"][0]["unavailable_partitions"][0], 1);

    let r = s.raw("POST /$ironbus/faults?entity=p&partition=9&available=false", &[], b"").await;
    assert_eq!(r.status, 400);
    let r = s.raw("POST /$ironbus/faults?entity=p&partition=1&available=true", &[], b"").await;
    assert_eq!(r.status, 200);
    let mut healed = false;
    for _ in 0..50 {
        if s.raw("GET /health", &[], b"").await.status == 200 {
            healed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(healed, "the partition becomes available again");

    let metrics = s.raw("GET /metrics", &[], b"").await;
    assert_eq!(metrics.status, 200);
    assert!(metrics.header("content-type").unwrap().starts_with("text/plain"));
}

#[tokio::test]
async fn lock_uris_are_absolute_and_callable_however_the_path_was_spelled() {
    let s = start().await;
    s.broker.create_queue("a/b", QueueDescription::default()).await.unwrap();
    for path in ["/a%2Fb/messages/hea%64?timeout=5", "/A/B/Messages/Head/?timeout=5"] {
        assert_eq!(s.call("POST", "/a/b/messages", &[], b"x").await.status, 201);
        let r = s.call("POST", path, &[], b"").await;
        assert_eq!(r.status, 201, "{path}: {}", r.text());
        let location = r.header("location").unwrap();
        let lock_path = location.strip_prefix(&format!("http://{}", s.addr)).unwrap().to_owned();
        assert!(lock_path.to_ascii_lowercase().contains("/messages/"), "{location}");
        assert_eq!(s.call("DELETE", &lock_path, &[], b"").await.status, 200, "{location}");
    }
}
