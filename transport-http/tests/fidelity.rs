//! Service Bus fidelity of management answers (issue 28): errors in Service Bus's words, forward
//! targets as `sb://` URLs, a partitioned entity's size as all its partitions together,
//! api-version 2017-04 round trips, the namespace root and Premium's message-size range. A real
//! broker on the memory store behind the transport on `127.0.0.1:0`, requests over sockets.

mod common;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use ironbus_core::auth::{generate_token, Authorizer, Rights, SasPolicy};
use ironbus_core::{Broker, NamespaceLimits, ShutdownTrigger, SystemClock, Tier, Timestamp};
use ironbus_store_memory::MemoryStore;
use ironbus_transport_http::HttpConfig;

const KEY: &str = "root-key";
const ATOM: &str = "http://www.w3.org/2005/Atom";
const CONNECT: &str = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect";

struct Server {
    addr: std::net::SocketAddr,
    _broker: Broker,
    _trigger: ShutdownTrigger,
}

struct Reply {
    status: u16,
    body: String,
}

async fn start(tier: Tier) -> Server {
    let broker = Broker::open(
        Arc::new(MemoryStore::new()),
        Arc::new(SystemClock),
        NamespaceLimits::default(),
    )
    .await
    .unwrap();
    let authorizer = Authorizer::new(vec![SasPolicy::new("root", KEY, Rights::MANAGE)]).unwrap();
    let mut config = HttpConfig::new(Arc::new(authorizer));
    config.namespace = "myns".to_owned();
    config.tier = tier;
    let (addr, trigger) = common::serve(broker.clone(), config).await;
    Server { addr, _broker: broker, _trigger: trigger }
}

fn token() -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    generate_token("https://myns.example", "root", KEY, Timestamp::from_millis(now + 3_600_000))
}

impl Server {
    /// One request; `update` adds `If-Match: *`, `auth` the root token.
    async fn send(&self, method: &str, path: &str, body: &str, update: bool, auth: bool) -> Reply {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if auth {
            head.push_str(&format!("Authorization: {}\r\n", token()));
        }
        if update {
            head.push_str("If-Match: *\r\n");
        }
        head.push_str("\r\n");
        head.push_str(body);
        let out = common::exchange(self.addr, head.as_bytes()).await;
        let text = String::from_utf8_lossy(&out).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").expect("a complete head");
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        Reply { status, body: body.to_owned() }
    }

    async fn get(&self, path: &str) -> Reply {
        self.send("GET", path, "", false, true).await
    }

    async fn create(&self, path: &str, body: &str) -> Reply {
        self.send("PUT", path, body, false, true).await
    }

    async fn update(&self, path: &str, body: &str) -> Reply {
        self.send("PUT", path, body, true, true).await
    }
}

fn described(element: &str, inner: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="utf-8"?><entry xmlns="{ATOM}"><content type="application/xml"><{element} xmlns="{CONNECT}">{inner}</{element}></content></entry>"#
    )
}

fn queue(inner: &str) -> String {
    described("QueueDescription", inner)
}

fn topic(inner: &str) -> String {
    described("TopicDescription", inner)
}

/// The `<Detail>` of an error body (unescaped as far as these tests need).
fn detail(reply: &Reply) -> String {
    let start = reply.body.find("<Detail>").map(|i| i + "<Detail>".len());
    let end = reply.body.find("</Detail>");
    match (start, end) {
        (Some(start), Some(end)) => reply.body[start..end].replace("&apos;", "'"),
        _ => panic!("no error detail in {}", reply.body),
    }
}

/// The text of `<element>` in a body.
fn element<'a>(body: &'a str, element: &str) -> &'a str {
    let open = format!("<{element}>");
    let start = body.find(&open).unwrap_or_else(|| panic!("no {element} in {body}")) + open.len();
    let end = body[start..].find(&format!("</{element}>")).unwrap() + start;
    &body[start..end]
}

fn assert_missing(reply: &Reply, tracker: &str) {
    assert_eq!(reply.status, 404, "{}", reply.body);
    let detail = detail(reply);
    let words = format!(
        "The messaging entity '{tracker}' could not be found. To know more visit \
         https://aka.ms/sbResourceMgrExceptions.  TrackingId:"
    );
    assert!(detail.starts_with(&words), "{detail}");
    assert!(detail.contains(&format!(", SystemTracker:{tracker}, Timestamp:")), "{detail}");
}

fn assert_exists(reply: &Reply, tracker: &str) {
    assert_eq!(reply.status, 409, "{}", reply.body);
    let detail = detail(reply);
    let words = format!(
        "SubCode=40900. Conflict. The messaging entity '{tracker}' already exists. To know \
         more visit https://aka.ms/sbResourceMgrExceptions.  TrackingId:"
    );
    assert!(detail.starts_with(&words), "{detail}");
    assert!(detail.contains(&format!(", SystemTracker:{tracker}, Timestamp:")), "{detail}");
}

#[tokio::test]
async fn missing_and_existing_entities_are_answered_in_service_bus_words() {
    let s = start(Tier::Standard).await;
    assert_missing(&s.get("/nothing").await, "myns:Queue:nothing");
    assert_missing(&s.send("DELETE", "/nothing", "", false, true).await, "myns:Queue:nothing");
    assert_missing(&s.update("/nothing", &topic("")).await, "myns:Topic:nothing");

    assert_eq!(s.create("/q", &queue("")).await.status, 201);
    assert_exists(&s.create("/q", &queue("")).await, "myns:Queue:q");
    assert_eq!(s.create("/t", &topic("")).await.status, 201);
    assert_exists(&s.create("/t", &topic("")).await, "myns:Topic:t");

    let subscription = described("SubscriptionDescription", "");
    assert_missing(&s.create("/nope/Subscriptions/s", &subscription).await, "myns:Topic:nope");
    assert_missing(&s.get("/nope/Subscriptions/").await, "myns:Topic:nope");
    assert_eq!(s.create("/t/Subscriptions/s", &subscription).await.status, 201);
    assert_exists(&s.create("/t/Subscriptions/s", &subscription).await, "myns:Topic:t|s");
    assert_missing(&s.get("/t/Subscriptions/gone").await, "myns:Topic:t|gone");

    let rule = described("RuleDescription", "");
    assert_eq!(s.create("/t/Subscriptions/s/Rules/r", &rule).await.status, 201);
    assert_exists(&s.create("/t/Subscriptions/s/Rules/r", &rule).await, "myns:Topic:t|s|r");
    assert_missing(&s.get("/t/Subscriptions/s/Rules/gone").await, "myns:Topic:t|s|gone");
}

#[tokio::test]
async fn forward_targets_read_back_as_sb_urls_from_every_read_and_api_version() {
    let s = start(Tier::Standard).await;
    let host = s.addr.to_string();
    let sb = |name: &str| format!("sb://{host}/{name}");
    assert_eq!(s.create("/dest", &queue("")).await.status, 201);
    let forwarding = format!(
        "<ForwardTo>dest</ForwardTo><ForwardDeadLetteredMessagesTo>https://{host}/dest\
         </ForwardDeadLetteredMessagesTo>"
    );
    let created = s.create("/src", &queue(&forwarding)).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(s.create("/t", &topic("")).await.status, 201);
    let subscription = described("SubscriptionDescription", &forwarding);
    assert_eq!(s.create("/t/Subscriptions/s", &subscription).await.status, 201);

    let mut reads = vec![created.body];
    for version in ["", "?api-version=2017-04", "?api-version=2021-05", "?api-version=2024-05"] {
        reads.push(s.get(&format!("/src{version}")).await.body);
        reads.push(s.get(&format!("/t/Subscriptions/s{version}")).await.body);
        reads.push(s.get(&format!("/$Resources/Queues{version}")).await.body);
        reads.push(s.get(&format!("/t/Subscriptions{version}")).await.body);
    }
    for body in reads {
        assert_eq!(element(&body, "ForwardTo"), sb("dest"), "{body}");
        assert_eq!(element(&body, "ForwardDeadLetteredMessagesTo"), sb("dest"), "{body}");
    }
}

#[tokio::test]
async fn partitioned_entities_report_their_size_as_all_partitions_together() {
    let s = start(Tier::Standard).await;
    for (path, describe) in [("/pq", queue as fn(&str) -> String), ("/pt", topic)] {
        let partitioned = "<EnablePartitioning>true</EnablePartitioning>\
                           <MaxSizeInMegabytes>1024</MaxSizeInMegabytes>";
        let created = s.create(path, &describe(partitioned)).await;
        assert_eq!(created.status, 201, "{}", created.body);
        assert_eq!(element(&created.body, "MaxSizeInMegabytes"), "16384", "{path}");
        let read = s.get(path).await.body;
        assert_eq!(element(&read, "MaxSizeInMegabytes"), "16384", "{path}");
        // An update sending back what it read keeps each partition's 1024.
        let echoed = s.update(path, &read).await;
        assert_eq!(echoed.status, 200, "{}", echoed.body);
        assert_eq!(element(&echoed.body, "MaxSizeInMegabytes"), "16384", "{path}");
        assert_eq!(element(&s.get(path).await.body, "MaxSizeInMegabytes"), "16384", "{path}");
        // Any other value is each partition's, as on creation.
        let bigger = describe("<MaxSizeInMegabytes>2048</MaxSizeInMegabytes>");
        let grown = s.update(path, &bigger).await;
        assert_eq!(grown.status, 200, "{}", grown.body);
        assert_eq!(element(&grown.body, "MaxSizeInMegabytes"), "32768", "{path}");
    }
    // Not partitioned: the size as given.
    let plain = s.create("/plain", &queue("<MaxSizeInMegabytes>2048</MaxSizeInMegabytes>")).await;
    assert_eq!(element(&plain.body, "MaxSizeInMegabytes"), "2048");
}

#[tokio::test]
async fn api_version_2017_04_get_then_update_round_trips() {
    let s = start(Tier::Standard).await;
    for (path, describe) in [("/old-q", queue as fn(&str) -> String), ("/old-t", topic)] {
        let path = format!("{path}?api-version=2017-04");
        assert_eq!(s.create(&path, &describe("")).await.status, 201);
        let read = s.get(&path).await;
        assert!(read.body.contains("<MaxMessageSizeInKilobytes>"), "{}", read.body);
        let echoed = s.update(&path, &read.body).await;
        assert_eq!(echoed.status, 200, "{path}: {}", echoed.body);
        // A value of its own is still refused with that api-version.
        let other = describe("<MaxMessageSizeInKilobytes>1</MaxMessageSizeInKilobytes>");
        let refused = s.update(&path, &other).await;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert!(refused.body.contains("SubCode=40000"), "{}", refused.body);
    }
}

#[tokio::test]
async fn the_namespace_root_answers_200_with_a_feed() {
    let s = start(Tier::Standard).await;
    for auth in [true, false] {
        let root = s.send("GET", "/", "", false, auth).await;
        assert_eq!(root.status, 200, "{}", root.body);
        assert!(root.body.contains(&format!(r#"<feed xmlns="{ATOM}">"#)), "{}", root.body);
        let title = r#"<title type="text">Publicly Listed Services</title>"#;
        assert!(root.body.contains(title), "{}", root.body);
    }
}

#[tokio::test]
async fn a_premium_namespace_states_its_message_size_range() {
    let s = start(Tier::Premium).await;
    for (path, kb) in [("/small", 256), ("/large", 102_401)] {
        let size = format!("<MaxMessageSizeInKilobytes>{kb}</MaxMessageSizeInKilobytes>");
        let refused = s.create(path, &queue(&size)).await;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert!(
            detail(&refused).contains("MaxMessageSizeInKilobytes must be between 1024 and 102400"),
            "{}",
            refused.body
        );
    }
}
