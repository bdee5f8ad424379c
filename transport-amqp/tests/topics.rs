//! Topics over AMQP, with fe2o3-amqp's client on a real socket: sends to a topic reach its
//! subscriptions, a receiver on a topic is refused, and the rule operations of a subscription's
//! `$management` node (add-rule, remove-rule, enumerate-rules) as the SDKs send them —
//! unsettled (py/js/rs) and pre-settled (.NET/Java, topics-sessions-transactions.md A.5).

mod common;

use std::time::Duration;

use fe2o3_amqp::link::ReceiverAttachError;
use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition, SenderSettleMode};
use fe2o3_amqp::types::messaging::{
    AmqpValue, ApplicationProperties, Data, Message, MessageId, Properties,
};
use fe2o3_amqp::types::primitives::{OrderedMap, SimpleValue, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use ironbus_core::{
    Broker, EntityDescription, EntityPath, RuleDescription, RuleFilter, ShutdownTrigger,
    SubscriptionDescription, TopicDescription,
};

/// A broker with topic `t` and its subscriptions `s1` and `s2` behind an AMQP listener.
async fn start() -> (Broker, String, ShutdownTrigger) {
    let broker = common::memory_broker().await;
    let create = |path: &str, description| {
        let broker = broker.clone();
        let path = EntityPath::parse(path).unwrap();
        async move { broker.create_entity(&path, description).await.unwrap() }
    };
    create("t", EntityDescription::Topic(TopicDescription::default())).await;
    for s in ["t/Subscriptions/s1", "t/Subscriptions/s2"] {
        create(s, EntityDescription::Subscription(SubscriptionDescription::default())).await;
    }
    let (addr, trigger) = common::serve(broker.clone()).await;
    (broker, format!("amqp://RootManageSharedAccessKey:SAS_KEY_VALUE@{addr}"), trigger)
}

async fn guard<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), future).await.expect("hung")
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    let mut m = OrderedMap::new();
    for (k, v) in entries {
        m.insert(Value::String(k.to_owned()), v);
    }
    Value::Map(m)
}

fn string(s: &str) -> Value {
    Value::String(s.to_owned())
}

/// A management client on one node: a request link (pre-settled or not) and a response link.
struct Management {
    requests: Sender,
    responses: Receiver,
    next_id: u64,
}

/// A response: status code, error condition, description, body.
#[derive(Debug)]
struct Response {
    status: i32,
    condition: Option<String>,
    description: Option<String>,
    body: Value,
}

impl Management {
    async fn attach(
        session: &mut fe2o3_amqp::session::SessionHandle<()>,
        node: &str,
        settled: bool,
    ) -> Self {
        let mode = if settled { SenderSettleMode::Settled } else { SenderSettleMode::Unsettled };
        let requests = guard(
            Sender::builder()
                .name(format!("{node}-requests-{settled}"))
                .target(node)
                .sender_settle_mode(mode)
                .attach(session),
        )
        .await
        .unwrap();
        let responses = guard(
            Receiver::builder()
                .name(format!("{node}-responses-{settled}"))
                .source(node)
                .target(format!("reply-to-{node}-{settled}"))
                .attach(session),
        )
        .await
        .unwrap();
        Management { requests, responses, next_id: 0 }
    }

    async fn request(
        &mut self,
        operation: &str,
        body: Value,
        extra: Vec<(&str, SimpleValue)>,
    ) -> Response {
        self.next_id += 1;
        let reply_to = self.responses.target().as_ref().and_then(|t| t.address.clone());
        let mut props = ApplicationProperties::builder().insert("operation", operation);
        for (k, v) in extra {
            props = props.insert(k, v);
        }
        let message = Message::builder()
            .properties(
                Properties::builder()
                    .message_id(MessageId::Ulong(self.next_id))
                    .reply_to(reply_to.unwrap())
                    .build(),
            )
            .application_properties(props.build())
            .value(body)
            .build();
        guard(self.requests.send(message)).await.unwrap().accepted_or_else(|o| o).unwrap();
        let delivery = guard(self.responses.recv::<AmqpValue<Value>>()).await.unwrap();
        self.responses.accept(&delivery).await.unwrap();
        let message = delivery.into_message();
        assert_eq!(
            message.properties.as_ref().and_then(|p| p.correlation_id.clone()),
            Some(MessageId::Ulong(self.next_id))
        );
        let props = message.application_properties.expect("status properties").0;
        let status = match props.get("statusCode") {
            Some(SimpleValue::Int(s)) => *s,
            other => panic!("statusCode {other:?}"),
        };
        let condition = match props.get("errorCondition") {
            Some(SimpleValue::Symbol(s)) => Some(s.0.clone()),
            Some(SimpleValue::String(s)) => Some(s.clone()),
            _ => None,
        };
        let description = match props.get("statusDescription") {
            Some(SimpleValue::String(s)) => Some(s.clone()),
            _ => None,
        };
        Response { status, condition, description, body: message.body.0 }
    }

    async fn add_rule(&mut self, name: &str, description: Value) -> Response {
        let body = map(vec![("rule-name", string(name)), ("rule-description", description)]);
        self.request("com.microsoft:add-rule", body, vec![]).await
    }

    /// The names of the rules enumerate-rules answers for `skip`/`top`.
    async fn rule_names(&mut self, skip: i32, top: i32) -> Vec<String> {
        let body = map(vec![("top", Value::Int(top)), ("skip", Value::Int(skip))]);
        let response = self.request("com.microsoft:enumerate-rules", body, vec![]).await;
        assert_eq!(response.status, 200, "{response:?}");
        rules(&response.body).iter().map(|r| r.2.clone()).collect()
    }
}

/// An enumerated rule: (filter code, action code, name, filter fields, action fields).
type Enumerated = (u64, u64, String, Vec<Value>, Vec<Value>);

/// The enumerated rules of a response.
fn rules(body: &Value) -> Vec<Enumerated> {
    let Value::Map(body) = body else { panic!("a map body: {body:?}") };
    let Some(Value::List(rules)) = body.get(&string("rules")) else { panic!("rules list") };
    let code = |v: &Value| -> (u64, Vec<Value>) {
        let Value::Described(d) = v else { panic!("described: {v:?}") };
        let serde_amqp::descriptor::Descriptor::Code(c) = d.descriptor else { panic!("code") };
        let Value::List(fields) = &d.value else { panic!("list") };
        (c, fields.clone())
    };
    rules
        .iter()
        .map(|rule| {
            let Value::Map(rule) = rule else { panic!("rule map") };
            let (c, fields) = code(rule.get(&string("rule-description")).unwrap());
            assert_eq!(c, 0x0000_0137_0000_0004);
            let (filter, filter_fields) = code(&fields[0]);
            let (action, action_fields) = code(&fields[1]);
            let Value::String(name) = &fields[2] else { panic!("name") };
            assert!(matches!(fields[3], Value::Timestamp(_)), "created-at");
            (filter, action, name.clone(), filter_fields, action_fields)
        })
        .collect()
}

fn sql(expression: &str) -> Value {
    map(vec![("expression", string(expression))])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_are_added_enumerated_and_removed_through_the_management_node() {
    let (broker, url, _trigger) = start().await;
    let mut connection = guard(Connection::open("rules-test", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    let mut mgmt = Management::attach(&mut session, "t/Subscriptions/s1/$management", false).await;

    // js: a SQL filter with an action; a correlation filter; sql 1=1 for a TrueRuleFilter.
    let response = mgmt
        .add_rule(
            "sqlRule",
            map(vec![("sql-filter", sql("color = 'red'")), ("sql-rule-action", sql("SET a = 1"))]),
        )
        .await;
    assert_eq!(response.status, 200, "{response:?}");
    let mut properties = OrderedMap::new();
    properties.insert(string("color"), string("blue"));
    let correlation = map(vec![
        ("correlation-id", string("cid")),
        ("message-id", Value::Null),
        ("to", Value::Null),
        ("reply-to", Value::Null),
        ("label", string("subject")),
        ("session-id", Value::Null),
        ("reply-to-session-id", Value::Null),
        ("content-type", Value::Null),
        ("properties", Value::Map(properties)),
    ]);
    let response =
        mgmt.add_rule("correlationRule", map(vec![("correlation-filter", correlation)])).await;
    assert_eq!(response.status, 200, "{response:?}");
    let response = mgmt.add_rule("trueRule", map(vec![("sql-filter", sql("1=1"))])).await;
    assert_eq!(response.status, 200, "{response:?}");

    // Duplicate: 409 entity-already-exists (names are case-insensitive).
    let response = mgmt.add_rule("SQLRULE", map(vec![("sql-filter", sql("1=1"))])).await;
    assert_eq!(response.status, 409, "{response:?}");
    assert_eq!(response.condition.as_deref(), Some("com.microsoft:entity-already-exists"));
    // In Service Bus's words, which the JS SDK's own tests match (`NAME' already exists.`).
    assert_eq!(
        response.description.as_deref(),
        Some("The messaging entity 't/Subscriptions/s1/Rules/SQLRULE' already exists."),
        "{response:?}"
    );
    // No filter: 400.
    let response = mgmt.add_rule("bad", map(vec![])).await;
    assert_eq!(response.status, 400, "{response:?}");

    // Everything, by name, with the described codes the SDKs decode.
    let body = map(vec![("top", Value::Int(i32::MAX)), ("skip", Value::Int(0))]);
    let response = mgmt.request("com.microsoft:enumerate-rules", body, vec![]).await;
    assert_eq!(response.status, 200);
    let all = rules(&response.body);
    let names: Vec<&str> = all.iter().map(|r| r.2.as_str()).collect();
    assert_eq!(names, ["$Default", "correlationRule", "sqlRule", "trueRule"]);
    let (filter, action, _, _, action_fields) = &all[0];
    assert_eq!((*filter, *action), (0x0000_0013_7000_0007, 0x0000_0137_0000_0005));
    assert!(action_fields.is_empty());
    let (filter, action, _, fields, _) = &all[1];
    assert_eq!((*filter, *action), (0x0000_0013_7000_0009, 0x0000_0137_0000_0005));
    assert_eq!(fields[0], string("cid"));
    assert_eq!(fields[1], Value::Null);
    assert_eq!(fields[4], string("subject"));
    let Value::Map(props) = &fields[8] else { panic!("properties map") };
    assert_eq!(props.get(&string("color")), Some(&string("blue")));
    let (filter, action, _, fields, action_fields) = &all[2];
    assert_eq!((*filter, *action), (0x0000_0013_7000_0006, 0x0000_0137_0000_0006));
    assert_eq!(fields[0], string("color = 'red'"));
    assert_eq!(action_fields[0], string("SET a = 1"));
    assert_eq!(all[3].0, 0x0000_0013_7000_0007, "1=1 is a true filter");

    // Paging by skip/top over the name order.
    for (skip, expected) in
        [(0, "$Default"), (1, "correlationRule"), (2, "sqlRule"), (3, "trueRule")]
    {
        assert_eq!(mgmt.rule_names(skip, 1).await, [expected]);
    }
    assert_eq!(mgmt.rule_names(1, 2).await, ["correlationRule", "sqlRule"]);
    assert!(mgmt.rule_names(4, 1).await.is_empty(), "past the end: an empty list");

    // Remove; an unknown rule is 404 with the wording js classifies.
    for name in ["trueRule", "$Default", "sqlRule"] {
        let body = map(vec![("rule-name", string(name))]);
        let response = mgmt.request("com.microsoft:remove-rule", body, vec![]).await;
        assert_eq!(response.status, 200, "{name}: {response:?}");
    }
    let body = map(vec![("rule-name", string("sqlRule"))]);
    let response = mgmt.request("com.microsoft:remove-rule", body, vec![]).await;
    assert_eq!(response.status, 404, "{response:?}");
    assert_eq!(response.condition.as_deref(), Some("amqp:not-found"));
    assert_eq!(mgmt.rule_names(0, 100).await, ["correlationRule"]);

    // The broker holds what the node answered.
    let s1 = EntityPath::parse("t/Subscriptions/s1").unwrap();
    let held = broker.list_children(&s1, 0, 100).await.unwrap();
    assert_eq!(held.len(), 1);
    let EntityDescription::Rule(rule) = &held[0].description else { panic!("rule") };
    let RuleFilter::Correlation(c) = &rule.filter else { panic!("correlation") };
    assert_eq!(c.subject.as_deref(), Some("subject"));
    assert_eq!(rule.action, None);

    // Rules belong to subscriptions: a topic's node refuses them.
    let mut topic_mgmt = Management::attach(&mut session, "t/$management", false).await;
    let body = map(vec![("top", Value::Int(10)), ("skip", Value::Int(0))]);
    let response = topic_mgmt.request("com.microsoft:enumerate-rules", body, vec![]).await;
    assert_eq!(response.status, 400, "{response:?}");
    session.end().await.unwrap();
    connection.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_settled_requests_as_dotnet_sends_them_are_answered() {
    let (broker, url, _trigger) = start().await;
    let mut connection = guard(Connection::open("presettled-test", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    let mut mgmt = Management::attach(&mut session, "t/Subscriptions/s2/$management", true).await;
    // .NET: server-timeout uint, a tracking id, no associated-link-name; the action is null and
    // the description repeats the rule name. Java sends server-timeout as a long.
    let timeouts = [SimpleValue::Uint(60_000), SimpleValue::Long(60_000)];
    for (i, timeout) in timeouts.into_iter().enumerate() {
        let name = format!("net{i}");
        let description = map(vec![
            ("sql-filter", sql("1=1")),
            ("sql-rule-action", Value::Null),
            ("rule-name", string(&name)),
        ]);
        let body = map(vec![("rule-name", string(&name)), ("rule-description", description)]);
        let extra = vec![
            ("com.microsoft:server-timeout", timeout),
            ("com.microsoft:tracking-id", SimpleValue::String("a-tracking-id".into())),
        ];
        let response = mgmt.request("com.microsoft:add-rule", body, extra).await;
        assert_eq!(response.status, 200, "{response:?}");
    }
    // rs: an empty action map is no action either.
    let response = mgmt
        .add_rule("rs", map(vec![("sql-filter", sql("1=0")), ("sql-rule-action", map(vec![]))]))
        .await;
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(mgmt.rule_names(0, 100).await, ["$Default", "net0", "net1", "rs"]);
    let s2 = EntityPath::parse("t/Subscriptions/s2/Rules/rs").unwrap();
    let EntityDescription::Rule(rule) = broker.get_entity(&s2).await.unwrap().description else {
        panic!("rule")
    };
    assert_eq!(rule, RuleDescription { filter: RuleFilter::False, action: None });
    session.end().await.unwrap();
    connection.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_on_a_topic_and_a_sender_on_a_subscription_are_refused() {
    let (_broker, url, _trigger) = start().await;
    let mut connection = guard(Connection::open("refusal-test", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    // A receiver on the topic itself: refused, saying why.
    match guard(Receiver::attach(&mut session, "topic-receiver", "t")).await {
        Err(ReceiverAttachError::RemoteClosedWithError(error)) => {
            assert_eq!(error.condition, ErrorCondition::AmqpError(AmqpError::NotAllowed));
            let description = error.description.unwrap_or_default();
            assert!(description.contains("subscriptions"), "{description}");
        }
        other => panic!("a receiver on a topic must be refused: {other:?}"),
    }
    // A sender on a subscription, a link on a rule: refused too (each on a session of its own:
    // fe2o3's client may end a session whose attach was refused).
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    assert!(guard(Sender::attach(&mut session, "sub-sender", "t/Subscriptions/s1")).await.is_err());
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    assert!(guard(Receiver::attach(&mut session, "rule", "t/Subscriptions/s1/Rules/$Default"))
        .await
        .is_err());
    // The connection still works: a sender on the topic sends.
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    let mut sender = guard(Sender::attach(&mut session, "sender", "t")).await.unwrap();
    let message = Message::builder().data(Data(b"hello".to_vec().into())).build();
    guard(sender.send(message)).await.unwrap().accepted_or_else(|o| o).unwrap();
    guard(sender.detach()).await.unwrap();
    session.end().await.unwrap();
    connection.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_fans_out_to_its_subscriptions() {
    let (_broker, url, _trigger) = start().await;
    let mut connection = guard(Connection::open("fanout-test", url.as_str())).await.unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    let mut sender = guard(Sender::attach(&mut session, "sender", "t")).await.unwrap();
    let message = Message::builder().data(Data(b"hello".to_vec().into())).build();
    guard(sender.send(message)).await.unwrap().accepted_or_else(|o| o).unwrap();
    for sub in ["t/Subscriptions/s1", "T/subscriptions/S2"] {
        let mut receiver =
            guard(Receiver::attach(&mut session, format!("r-{sub}"), sub)).await.unwrap();
        let delivery = guard(receiver.recv::<Data>()).await.unwrap();
        assert_eq!(&delivery.body().0[..], b"hello", "{sub}");
        receiver.accept(&delivery).await.unwrap();
        guard(receiver.detach()).await.unwrap();
    }
    guard(sender.detach()).await.unwrap();
    session.end().await.unwrap();
    connection.close().await.unwrap();
}

/// A link to a missing entity is refused naming its full address as Service Bus does:
/// `sb://<the host the client connected to>/<path>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_entity_is_named_by_its_full_address() {
    let (_broker, url, _trigger) = start().await;
    let mut connection = guard(
        Connection::builder()
            .container_id("missing-test")
            .hostname("ns.example.test")
            .open(url.as_str()),
    )
    .await
    .unwrap();
    let mut session = guard(Session::begin(&mut connection)).await.unwrap();
    match guard(Receiver::attach(&mut session, "missing-receiver", "nothing/here")).await {
        Err(ReceiverAttachError::RemoteClosedWithError(error)) => {
            assert_eq!(error.condition, ErrorCondition::AmqpError(AmqpError::NotFound));
            assert_eq!(
                error.description.as_deref(),
                Some(
                    "The messaging entity 'sb://ns.example.test/nothing/here' could not be found."
                )
            );
        }
        other => panic!("a receiver on a missing queue must be refused: {other:?}"),
    }
}
