//! The authorization matrix over AMQP: connections authenticated with SASL ANONYMOUS put one
//! token on `$cbs` (as the SDKs do) and then try to send, receive and use `$management`. Each
//! row names a token (namespace policies with Send, Listen or Manage; an entity rule's keys; an
//! audience for one entity; expired, foreign-host, wrong-key and tampered tokens) and what each
//! operation must come to. Time is the broker's manual clock.

use std::sync::Arc;
use std::time::Duration;

use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::types::messaging::{
    AmqpValue, ApplicationProperties, Body, Message, MessageId, Properties,
};
use fe2o3_amqp::types::primitives::{OrderedMap, SimpleValue, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use ironbus_core::auth::{generate_token, AuthorizationRule, Authorizer, Rights, SasPolicy};
use ironbus_core::{
    shutdown_signal, Broker, EntityDescription, EntityPath, ManualClock, NamespaceLimits,
    QueueDescription, ShutdownTrigger, SubscriptionDescription, Timestamp, TopicDescription,
    Transport,
};
use ironbus_store_memory::MemoryStore;
use ironbus_transport_amqp::AmqpTransport;

const ROOT_KEY: &str = "root-key";
/// The broker's time: 2026-01-01T00:00:00Z.
const NOW_MS: i64 = 1_767_225_600_000;

struct Server {
    url: String,
    clock: Arc<ManualClock>,
    _trigger: ShutdownTrigger,
}

/// Queues `q1`, `q2` (with entity rules `q2-send` and `q2-listen`), topic `t` with
/// subscription `s`; namespace policies root, `sender` (Send), `listener` (Listen), `manager`
/// (Manage).
async fn start() -> Server {
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(NOW_MS)));
    let broker =
        Broker::open(Arc::new(MemoryStore::new()), clock.clone(), NamespaceLimits::default())
            .await
            .unwrap();
    broker.create_queue("q1", QueueDescription::default()).await.unwrap();
    let rules = vec![
        AuthorizationRule::new("q2-send", "q2-primary", "q2-secondary", Rights::SEND),
        AuthorizationRule::new("q2-listen", "q2-listen-key", "", Rights::LISTEN),
    ];
    let q2 = QueueDescription { authorization_rules: rules, ..Default::default() };
    broker.create_queue("q2", q2).await.unwrap();
    create(&broker, "t", EntityDescription::Topic(TopicDescription::default())).await;
    let sub = EntityDescription::Subscription(SubscriptionDescription::default());
    create(&broker, "t/Subscriptions/s", sub).await;
    let authorizer = Authorizer::new(vec![
        SasPolicy::new("RootManageSharedAccessKey", ROOT_KEY, Rights::MANAGE),
        SasPolicy::new("sender", "send-key", Rights::SEND),
        SasPolicy::new("listener", "listen-key", Rights::LISTEN),
        SasPolicy::new("manager", "manage-key", Rights::MANAGE),
    ])
    .unwrap();
    let transport =
        AmqpTransport::bind("127.0.0.1:0".parse().unwrap(), Arc::new(authorizer)).await.unwrap();
    let addr = transport.local_addr().unwrap();
    let (trigger, shutdown) = shutdown_signal();
    tokio::spawn(Box::new(transport).serve(broker, shutdown));
    Server { url: format!("amqp://{addr}"), clock, _trigger: trigger }
}

async fn create(broker: &Broker, path: &str, description: EntityDescription) {
    broker.create_entity(&EntityPath::parse(path).unwrap(), description).await.unwrap();
}

async fn guard<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), future).await.expect("hung")
}

/// A token for `sb://localhost/{path}` signed with `key` of `policy`, expiring an hour from now.
fn token(path: &str, policy: &str, key: &str) -> String {
    token_until(&format!("sb://localhost/{path}"), policy, key, NOW_MS + 3_600_000)
}

fn token_until(audience: &str, policy: &str, key: &str, expires_ms: i64) -> String {
    generate_token(audience, policy, key, Timestamp::from_millis(expires_ms))
}

/// A connection that has put one token on `$cbs`.
struct Client {
    connection: fe2o3_amqp::connection::ConnectionHandle<()>,
    session: fe2o3_amqp::session::SessionHandle<()>,
    /// The status `$cbs` answered.
    cbs_status: i32,
    cbs_description: String,
}

impl Client {
    async fn connect(url: &str, audience: &str, token: &str) -> Client {
        let mut connection = guard(
            Connection::builder()
                .container_id("authorization-test")
                .sasl_profile(SaslProfile::Anonymous)
                .open(url),
        )
        .await
        .unwrap();
        let mut session = guard(Session::begin(&mut connection)).await.unwrap();
        let mut requests =
            guard(Sender::attach(&mut session, "cbs-requests", "$cbs")).await.unwrap();
        let mut responses = guard(
            Receiver::builder()
                .name("cbs-responses")
                .source("$cbs")
                .target("cbs-reply")
                .attach(&mut session),
        )
        .await
        .unwrap();
        let message = Message::builder()
            .properties(
                Properties::builder().message_id(MessageId::Ulong(1)).reply_to("cbs-reply").build(),
            )
            .application_properties(
                ApplicationProperties::builder()
                    .insert("operation", "put-token")
                    .insert("type", "servicebus.windows.net:sastoken")
                    .insert("name", audience)
                    .build(),
            )
            .value(Value::String(token.to_owned()))
            .build();
        guard(requests.send(message)).await.unwrap().accepted_or_else(|o| o).unwrap();
        let delivery = guard(responses.recv::<Body<Value>>()).await.unwrap();
        responses.accept(&delivery).await.unwrap();
        let props = delivery.into_message().application_properties.expect("status").0;
        let cbs_status = match props.get("status-code") {
            Some(SimpleValue::Int(s)) => *s,
            other => panic!("status-code {other:?}"),
        };
        let cbs_description = match props.get("status-description") {
            Some(SimpleValue::String(s)) => s.clone(),
            _ => String::new(),
        };
        Client { connection, session, cbs_status, cbs_description }
    }

    /// Attaches a sender to `address` and sends one message.
    async fn send(&mut self, address: &str) -> Outcome {
        let sender =
            guard(Sender::attach(&mut self.session, format!("send-{address}"), address)).await;
        let mut sender = match sender {
            Ok(s) => s,
            Err(e) => return Outcome::of(&format!("{e:?}")),
        };
        let message = Message::builder().value("hello".to_owned()).build();
        let outcome = match guard(sender.send(message)).await {
            Ok(o) if o.is_accepted() => Outcome::Ok,
            other => Outcome::of(&format!("{other:?}")),
        };
        let _ = guard(sender.close()).await;
        outcome
    }

    /// Attaches a receiver to `address`.
    async fn receive(&mut self, address: &str) -> Outcome {
        let receiver =
            guard(Receiver::attach(&mut self.session, format!("receive-{address}"), address)).await;
        match receiver {
            Ok(r) => {
                let _ = guard(r.close()).await;
                Outcome::Ok
            }
            Err(e) => Outcome::of(&format!("{e:?}")),
        }
    }

    /// Attaches to `{entity}/$management` and runs `operation` (peek or schedule).
    async fn manage(&mut self, entity: &str, operation: &str) -> Outcome {
        let node = format!("{entity}/$management");
        let requests =
            guard(Sender::attach(&mut self.session, format!("mgmt-{entity}"), node.as_str())).await;
        let mut requests = match requests {
            Ok(s) => s,
            Err(e) => return Outcome::of(&format!("{e:?}")),
        };
        let reply_to = format!("mgmt-reply-{entity}");
        let responses = guard(
            Receiver::builder()
                .name(format!("mgmt-responses-{entity}"))
                .source(node.as_str())
                .target(reply_to.as_str())
                .attach(&mut self.session),
        )
        .await;
        let mut responses = match responses {
            Ok(r) => r,
            Err(e) => return Outcome::of(&format!("{e:?}")),
        };
        let mut body = OrderedMap::new();
        let (name, value) = match operation {
            "peek" => {
                body.insert(Value::String("from-sequence-number".into()), Value::Long(0));
                body.insert(Value::String("message-count".into()), Value::Int(1));
                ("com.microsoft:peek-message", Value::Map(body))
            }
            "cancel" => {
                let numbers = fe2o3_amqp::types::primitives::Array::from(vec![Value::Long(1)]);
                body.insert(Value::String("sequence-numbers".into()), Value::Array(numbers));
                ("com.microsoft:cancel-scheduled-message", Value::Map(body))
            }
            other => panic!("unknown operation {other}"),
        };
        let message = Message::builder()
            .properties(
                Properties::builder().message_id(MessageId::Ulong(1)).reply_to(reply_to).build(),
            )
            .application_properties(
                ApplicationProperties::builder().insert("operation", name).build(),
            )
            .value(value)
            .build();
        guard(requests.send(message)).await.unwrap().accepted_or_else(|o| o).unwrap();
        let delivery = guard(responses.recv::<AmqpValue<Value>>()).await.unwrap();
        let _ = guard(requests.close()).await;
        let _ = guard(responses.close()).await;
        let props = delivery.into_message().application_properties.expect("status").0;
        let status = match props.get("statusCode") {
            Some(SimpleValue::Int(s)) => *s,
            other => panic!("statusCode {other:?}"),
        };
        let condition = match props.get("errorCondition") {
            Some(SimpleValue::Symbol(s)) => s.0.clone(),
            Some(SimpleValue::String(s)) => s.clone(),
            _ => String::new(),
        };
        match status {
            200 | 204 => Outcome::Ok,
            // Nothing to cancel: the request was allowed.
            404 if operation == "cancel" => Outcome::Ok,
            _ => Outcome::of(&condition),
        }
    }

    async fn renew_session(&mut self) {
        let _ = guard(self.session.end()).await;
        self.session = guard(Session::begin(&mut self.connection)).await.unwrap();
    }

    async fn close(mut self) {
        let _ = guard(self.session.end()).await;
        let _ = guard(self.connection.close()).await;
    }
}

/// What an operation came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Unauthorized,
    NotFound,
    Other,
}

impl Outcome {
    fn of(error: &str) -> Outcome {
        if error.contains("UnauthorizedAccess") || error.contains("unauthorized-access") {
            Outcome::Unauthorized
        } else if error.contains("NotFound") || error.contains("not-found") {
            Outcome::NotFound
        } else {
            eprintln!("other error: {error}");
            Outcome::Other
        }
    }
}

/// An operation a row tries after its put-token.
#[derive(Debug, Clone, Copy)]
enum Op {
    Send(&'static str),
    Receive(&'static str),
    /// Peek (Listen) or cancel a scheduled message (Send) on `{entity}/$management`.
    Manage(&'static str, &'static str),
}

/// A row: its name, the audience put, the token, the `$cbs` status, operations and outcomes.
type Row = (&'static str, &'static str, String, i32, Vec<(Op, Outcome)>);

use Op::{Manage, Receive, Send};
use Outcome::{NotFound, Ok as Allowed, Unauthorized};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_authorization_matrix_holds_over_amqp() {
    let server = start().await;
    let ns = "sb://localhost/";
    let namespace = |policy: &str, key: &str| token_until(ns, policy, key, NOW_MS + 3_600_000);
    // (row, audience put, token, $cbs status, operations and their outcomes)
    let rows: Vec<Row> = vec![
        (
            "root policy: everything",
            ns,
            namespace("RootManageSharedAccessKey", ROOT_KEY),
            202,
            vec![
                (Send("q1"), Allowed),
                (Receive("q1"), Allowed),
                (Manage("q1", "peek"), Allowed),
                (Send("t"), Allowed),
                (Receive("t/Subscriptions/s"), Allowed),
                (Receive("q2/$DeadLetterQueue"), Allowed),
            ],
        ),
        (
            "send-only policy cannot receive or peek",
            ns,
            namespace("sender", "send-key"),
            202,
            vec![
                (Send("q1"), Allowed),
                (Manage("q1", "cancel"), Allowed),
                (Receive("q1"), Unauthorized),
                (Receive("q1/$DeadLetterQueue"), Unauthorized),
                (Manage("q1", "peek"), Unauthorized),
                (Receive("t/Subscriptions/s"), Unauthorized),
            ],
        ),
        (
            "listen-only policy cannot send or schedule",
            ns,
            namespace("listener", "listen-key"),
            202,
            vec![
                (Receive("q1"), Allowed),
                (Manage("q1", "peek"), Allowed),
                (Send("q1"), Unauthorized),
                (Send("t"), Unauthorized),
                (Manage("q1", "cancel"), Unauthorized),
            ],
        ),
        (
            "entity-scoped token touches its entity only",
            "sb://localhost/q1",
            token("q1", "RootManageSharedAccessKey", ROOT_KEY),
            202,
            vec![
                (Send("q1"), Allowed),
                (Receive("q1/$DeadLetterQueue"), Allowed),
                (Manage("q1", "peek"), Allowed),
                (Send("q2"), Unauthorized),
                (Receive("q2"), Unauthorized),
                (Receive("q2/$DeadLetterQueue"), Unauthorized),
                (Manage("q2", "peek"), Unauthorized),
                (Send("t"), Unauthorized),
            ],
        ),
        (
            "entity rule (primary key) within its entity",
            "sb://localhost/q2",
            token("q2", "q2-send", "q2-primary"),
            202,
            vec![(Send("q2"), Allowed), (Receive("q2"), Unauthorized), (Send("q1"), Unauthorized)],
        ),
        (
            "entity rule (secondary key)",
            "sb://localhost/q2",
            token("q2", "q2-send", "q2-secondary"),
            202,
            vec![(Send("q2"), Allowed), (Manage("q2", "peek"), Unauthorized)],
        ),
        (
            "listen entity rule on the dead-letter queue",
            "sb://localhost/q2/$DeadLetterQueue",
            token("q2/$DeadLetterQueue", "q2-listen", "q2-listen-key"),
            202,
            vec![(Receive("q2/$DeadLetterQueue"), Allowed), (Receive("q2"), Unauthorized)],
        ),
        (
            "entity rule key for another entity is refused on $cbs",
            "sb://localhost/q1",
            token("q1", "q2-send", "q2-primary"),
            401,
            vec![(Send("q1"), Unauthorized), (Send("q2"), Unauthorized)],
        ),
        (
            "entity rule key for the namespace is refused on $cbs",
            ns,
            namespace("q2-send", "q2-primary"),
            401,
            vec![(Send("q2"), Unauthorized)],
        ),
        (
            "expired token",
            ns,
            token_until(ns, "RootManageSharedAccessKey", ROOT_KEY, NOW_MS),
            401,
            vec![(Send("q1"), Unauthorized), (Receive("q1"), Unauthorized)],
        ),
        (
            "token for another host",
            "sb://elsewhere.example/q1",
            token_until(
                "sb://elsewhere.example/q1",
                "RootManageSharedAccessKey",
                "the-other-hosts-key",
                NOW_MS + 3_600_000,
            ),
            401,
            vec![(Send("q1"), Unauthorized)],
        ),
        (
            "wrong key",
            ns,
            namespace("RootManageSharedAccessKey", "not-the-key"),
            401,
            vec![(Send("q1"), Unauthorized), (Manage("q1", "peek"), Unauthorized)],
        ),
        (
            "tampered signature",
            ns,
            tamper(&namespace("RootManageSharedAccessKey", ROOT_KEY)),
            401,
            vec![(Send("q1"), Unauthorized)],
        ),
        (
            "tampered audience",
            "sb://localhost/q2",
            namespace("RootManageSharedAccessKey", ROOT_KEY)
                .replace("sr=sb%3A%2F%2Flocalhost%2F", "sr=sb%3A%2F%2Flocalhost%2Fq2"),
            401,
            vec![(Send("q2"), Unauthorized)],
        ),
        (
            "unknown policy",
            ns,
            namespace("nobody", ROOT_KEY),
            401,
            vec![(Send("q1"), Unauthorized)],
        ),
        (
            "malformed token",
            ns,
            "SharedAccessSignature sr=&se=soon".to_owned(),
            400,
            vec![(Send("q1"), Unauthorized)],
        ),
        (
            "put-token naming an audience its token does not cover",
            "sb://localhost/q2",
            token("q1", "RootManageSharedAccessKey", ROOT_KEY),
            401,
            vec![(Send("q2"), Unauthorized), (Send("q1"), Unauthorized)],
        ),
        (
            "put-token for an entity that does not exist: 404 (issue 17, divergence 4)",
            "sb://localhost/nope",
            token("nope", "RootManageSharedAccessKey", ROOT_KEY),
            404,
            vec![(Send("nope"), NotFound)],
        ),
        (
            "put-token for a missing subscription: 404",
            "sb://localhost/t/Subscriptions/nope",
            token("t/Subscriptions/nope", "RootManageSharedAccessKey", ROOT_KEY),
            404,
            vec![],
        ),
    ];
    for (row, audience, token, cbs_status, ops) in rows {
        let mut client = Client::connect(&server.url, audience, &token).await;
        assert_eq!(client.cbs_status, cbs_status, "{row}: $cbs said {}", client.cbs_description);
        if cbs_status == 404 {
            assert!(client.cbs_description.contains("could not be found"), "{row}");
        }
        for (op, expected) in ops {
            // A refused attach leaves fe2o3's session unusable: one session per operation.
            client.renew_session().await;
            let outcome = match op {
                Send(address) => client.send(address).await,
                Receive(address) => client.receive(address).await,
                Manage(entity, operation) => client.manage(entity, operation).await,
            };
            assert_eq!(outcome, expected, "{row}: {op:?}");
        }
        client.close().await;
    }
}

/// Flips one character of the signature.
fn tamper(token: &str) -> String {
    let at = token.find("sig=").unwrap() + 4;
    let mut bytes = token.as_bytes().to_vec();
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_stops_authorizing_new_links_once_its_token_expires() {
    let server = start().await;
    let expires = NOW_MS + 60_000;
    let token = token_until("sb://localhost/q1", "sender", "send-key", expires);
    let mut client = Client::connect(&server.url, "sb://localhost/q1", &token).await;
    assert_eq!(client.cbs_status, 202);
    assert_eq!(client.send("q1").await, Allowed);
    server.clock.advance(Duration::from_secs(61));
    client.renew_session().await;
    assert_eq!(client.send("q1").await, Unauthorized);
    client.close().await;
}
