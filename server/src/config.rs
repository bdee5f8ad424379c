//! Entities declared at start-up in the Microsoft Service Bus emulator's `config.json` format:
//! `UserConfig → Namespaces → Queues / Topics`, each queue with a `Name` and `Properties`, each
//! topic with a `Name`, `Properties` and `Subscriptions` (`Name`, `Properties`, `Rules`; a rule
//! has a `Name` and `Properties` with `FilterType` `Sql` or `Correlation`, `SqlFilter`,
//! `CorrelationFilter` and an optional `Action`).
//!
//! What ironbus cannot do yet (sessions) is refused with a clear message rather than ignored.
//! Loading is idempotent: an entity that already exists keeps its messages (and its rules);
//! missing ones are created. A subscription that declares rules gets those rules instead of
//! `$Default` (as a `DefaultRuleDescription` on an ATOM create does).

use std::time::Duration;

use ironbus_core::auth::{AuthorizationRule, Rights, SasPolicy};
use ironbus_core::{
    Broker, BrokerError, CorrelationFilter, EntityDescription, EntityPath, EntityStatus,
    PropertyValue, QueueDescription, RuleAction, RuleDescription, RuleFilter,
    SubscriptionDescription, TopicDescription,
};
use ironbus_transport_http::timefmt::parse_xml_duration;
use serde_json::{Map, Value};

mod error;

use self::error::Within;
pub use self::error::{ConfigError, ConfigErrorKind};

type Result<T, E = ConfigError> = std::result::Result<T, E>;

/// Returns early with [`ConfigError::invalid`] of the formatted message.
macro_rules! invalid {
    ($($message:tt)+) => {
        return Err(ConfigError::invalid(format!($($message)+)))
    };
}

/// A queue the file declares.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredQueue {
    pub name: String,
    pub description: QueueDescription,
}

/// A topic the file declares, with its subscriptions.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredTopic {
    pub name: String,
    pub description: TopicDescription,
    pub subscriptions: Vec<DeclaredSubscription>,
}

/// A subscription the file declares, with its rules (none: `$Default`).
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredSubscription {
    pub name: String,
    pub description: SubscriptionDescription,
    pub rules: Vec<(String, RuleDescription)>,
}

/// Everything the file declares.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Declared {
    pub queues: Vec<DeclaredQueue>,
    pub topics: Vec<DeclaredTopic>,
}

impl Declared {
    /// Queues, topics, subscriptions and rules declared.
    pub fn entity_count(&self) -> usize {
        self.queues.len()
            + self
                .topics
                .iter()
                .map(|t| 1 + t.subscriptions.iter().map(|s| 1 + s.rules.len()).sum::<usize>())
                .sum::<usize>()
    }
}

/// Parses the file's text into the entities it declares.
pub fn parse(text: &str) -> Result<Declared> {
    Ok(parse_all(text)?.into_iter().next().map(|(_, declared)| declared).unwrap_or_default())
}

/// What the file declares in each of its namespaces, by name (`""` where a namespace has no
/// `Name`): the first is the server's default namespace, the others are served beside it.
pub fn parse_all(text: &str) -> Result<Vec<(String, Declared)>> {
    let root = json(text)?;
    let namespaces = root
        .get("UserConfig")
        .and_then(|u| u.get("Namespaces"))
        .and_then(Value::as_array)
        .ok_or_else(|| {
            ConfigError::invalid(
                "config needs UserConfig.Namespaces (the emulator's config.json format)",
            )
        })?;
    let mut all = Vec::new();
    for namespace in namespaces {
        let (mut queues, mut topics) = (Vec::new(), Vec::new());
        for topic in namespace.get("Topics").and_then(Value::as_array).into_iter().flatten() {
            topics.push(declared_topic(topic)?);
        }
        for queue in namespace.get("Queues").and_then(Value::as_array).into_iter().flatten() {
            let name = name_of(queue, "queue")?;
            let description =
                queue_description(queue.get("Properties")).within(|| format!("queue {name}"))?;
            queues.push(DeclaredQueue { name, description });
        }
        let name = namespace.get("Name").and_then(Value::as_str).unwrap_or_default();
        all.push((name.to_owned(), Declared { queues, topics }));
    }
    Ok(all)
}

fn json(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| ConfigErrorKind::Json(e).into())
}

fn name_of(entity: &Value, what: &str) -> Result<String> {
    match entity.get("Name").and_then(Value::as_str) {
        Some(name) => Ok(name.to_owned()),
        None => invalid!("every {what} needs a Name"),
    }
}

fn properties(entity: &Value) -> Result<Option<&Map<String, Value>>> {
    match entity.get("Properties") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(_) => invalid!("Properties must be an object"),
    }
}

fn declared_topic(topic: &Value) -> Result<DeclaredTopic> {
    let name = name_of(topic, "topic")?;
    let place = || format!("topic {name}");
    let description = properties(topic).and_then(topic_description).within(place)?;
    let subscriptions = topic.get("Subscriptions").and_then(Value::as_array).into_iter().flatten();
    let subscriptions = subscriptions.map(declared_subscription).collect::<Result<_>>();
    let subscriptions = subscriptions.within(place)?;
    Ok(DeclaredTopic { name, description, subscriptions })
}

fn declared_subscription(sub: &Value) -> Result<DeclaredSubscription> {
    let name = name_of(sub, "subscription")?;
    let place = || format!("subscription {name}");
    let description = properties(sub).and_then(subscription_description).within(place)?;
    let mut rules = Vec::new();
    for rule in sub.get("Rules").and_then(Value::as_array).into_iter().flatten() {
        let rule_name = name_of(rule, "rule").within(place)?;
        let description = properties(rule)
            .and_then(rule_description)
            .within(|| format!("rule {rule_name}"))
            .within(place)?;
        rules.push((rule_name, description));
    }
    Ok(DeclaredSubscription { name, description, rules })
}

/// One property's value, typed, with errors naming it.
struct Prop<'a> {
    key: &'a str,
    value: &'a Value,
}

impl Prop<'_> {
    fn text(&self) -> Result<&str> {
        self.value.as_str().ok_or_else(|| self.invalid("must be a string"))
    }
    fn flag(&self) -> Result<bool> {
        self.value.as_bool().ok_or_else(|| self.invalid("must be true or false"))
    }
    fn number(&self) -> Result<u64> {
        self.value.as_u64().ok_or_else(|| self.invalid("must be a whole number"))
    }
    /// A whole number that fits `T` (a count or a size).
    fn small<T: TryFrom<u64>>(&self) -> Result<T> {
        let number = self.number()?;
        // TryFromIntError says no more than "out of range".
        T::try_from(number).map_err(|_| self.invalid(&format!("{number} is out of range")))
    }
    fn invalid(&self, what: &str) -> ConfigError {
        ConfigError::invalid(format!("{} {what}", self.key))
    }
    fn duration(&self) -> Result<Duration> {
        iso_duration(self.text()?).within(|| self.key.to_owned())
    }
    fn target(&self) -> Result<Option<String>> {
        Ok(Some(self.text()?.to_owned()).filter(|s| !s.is_empty()))
    }
    fn status(&self) -> Result<EntityStatus> {
        Ok(match self.text()? {
            "Active" => EntityStatus::Active,
            "Disabled" => EntityStatus::Disabled,
            "SendDisabled" => EntityStatus::SendDisabled,
            "ReceiveDisabled" => EntityStatus::ReceiveDisabled,
            other => invalid!(
                "Status {other:?} is not one of Active, Disabled, SendDisabled, ReceiveDisabled"
            ),
        })
    }
}

fn topic_description(props: Option<&Map<String, Value>>) -> Result<TopicDescription> {
    let mut d = TopicDescription::default();
    for (key, value) in props.into_iter().flatten() {
        let p = Prop { key, value };
        match key.as_str() {
            "DefaultMessageTimeToLive" => d.default_message_time_to_live = p.duration()?,
            "DuplicateDetectionHistoryTimeWindow" => {
                d.duplicate_detection_history_time_window = p.duration()?
            }
            "RequiresDuplicateDetection" => d.requires_duplicate_detection = p.flag()?,
            "EnablePartitioning" => d.enable_partitioning = p.flag()?,
            "PartitionCount" => d.partition_count = p.small()?,
            "MaxSizeInMegabytes" => d.max_size_in_megabytes = p.number()?,
            "MaxMessageSizeInKilobytes" => d.max_message_size_in_kilobytes = p.number()?,
            "EnableBatchedOperations" => d.enable_batched_operations = p.flag()?,
            "FilteringMessagesBeforePublishing" => {
                d.filtering_messages_before_publishing = p.flag()?
            }
            "SupportOrdering" => d.support_ordering = p.flag()?,
            "AutoDeleteOnIdle" => d.auto_delete_on_idle = p.duration()?,
            "Status" => d.status = p.status()?,
            "UserMetadata" => d.user_metadata = Some(p.text()?.to_owned()),
            "AuthorizationRules" => d.authorization_rules = authorization_rules(value)?,
            other => invalid!("unknown topic property {other}"),
        }
    }
    Ok(d)
}

fn subscription_description(props: Option<&Map<String, Value>>) -> Result<SubscriptionDescription> {
    let mut d = SubscriptionDescription::default();
    for (key, value) in props.into_iter().flatten() {
        let p = Prop { key, value };
        match key.as_str() {
            "DeadLetteringOnMessageExpiration" => {
                d.dead_lettering_on_message_expiration = p.flag()?
            }
            "DeadLetteringOnFilterEvaluationExceptions" => {
                d.dead_lettering_on_filter_evaluation_exceptions = p.flag()?
            }
            "DefaultMessageTimeToLive" => d.default_message_time_to_live = p.duration()?,
            "LockDuration" => d.lock_duration = p.duration()?,
            "MaxDeliveryCount" => d.max_delivery_count = p.small()?,
            "ForwardDeadLetteredMessagesTo" => d.forward_dead_lettered_messages_to = p.target()?,
            "ForwardTo" => d.forward_to = p.target()?,
            "RequiresSession" => d.requires_session = p.flag()?,
            "EnableBatchedOperations" => d.enable_batched_operations = p.flag()?,
            "AutoDeleteOnIdle" => d.auto_delete_on_idle = p.duration()?,
            "Status" => d.status = p.status()?,
            "UserMetadata" => d.user_metadata = Some(p.text()?.to_owned()),
            other => invalid!("unknown subscription property {other}"),
        }
    }
    Ok(d)
}

/// A rule's `Properties`: `FilterType` (`Sql` or `Correlation`; none: a True filter), the
/// filter of that type, and an optional SQL `Action`.
fn rule_description(props: Option<&Map<String, Value>>) -> Result<RuleDescription> {
    let Some(props) = props else { return Ok(RuleDescription::default()) };
    let object = |key: &str| -> Result<Option<&Map<String, Value>>> {
        match props.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(_) => invalid!("{key} must be an object"),
        }
    };
    let expression = |map: &Map<String, Value>, what: &str| -> Result<String> {
        map.get("SqlExpression")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| ConfigError::invalid(format!("{what} needs a SqlExpression string")))
    };
    for key in props.keys() {
        if !matches!(key.as_str(), "FilterType" | "SqlFilter" | "CorrelationFilter" | "Action") {
            invalid!("unknown rule property {key}");
        }
    }
    let filter_type = props.get("FilterType").and_then(Value::as_str);
    let filter = match filter_type {
        None if props.get("FilterType").is_some() => invalid!("FilterType must be a string"),
        None => RuleFilter::True,
        Some(t) if t.eq_ignore_ascii_case("Sql") => {
            let Some(sql) = object("SqlFilter")? else {
                invalid!("FilterType Sql needs a SqlFilter")
            };
            RuleFilter::Sql { expression: expression(sql, "SqlFilter")?, parameters: Vec::new() }
        }
        Some(t) if t.eq_ignore_ascii_case("Correlation") => {
            let Some(c) = object("CorrelationFilter")? else {
                invalid!("FilterType Correlation needs a CorrelationFilter")
            };
            correlation_filter(c)?
        }
        Some(other) => invalid!("FilterType {other:?} is not Sql or Correlation"),
    };
    let action = match object("Action")? {
        None => None,
        Some(a) => {
            Some(RuleAction { expression: expression(a, "Action")?, parameters: Vec::new() })
        }
    };
    Ok(RuleDescription { filter, action })
}

fn correlation_filter(c: &Map<String, Value>) -> Result<RuleFilter> {
    let mut f = CorrelationFilter::default();
    for (key, value) in c {
        let p = Prop { key, value };
        let text = || p.target();
        match key.as_str() {
            "CorrelationId" => f.correlation_id = text()?,
            "MessageId" => f.message_id = text()?,
            "To" => f.to = text()?,
            "ReplyTo" => f.reply_to = text()?,
            "Label" | "Subject" => f.subject = text()?,
            "SessionId" => f.session_id = text()?,
            "ReplyToSessionId" => f.reply_to_session_id = text()?,
            "ContentType" => f.content_type = text()?,
            "Properties" => {
                let Some(map) = value.as_object() else {
                    invalid!("CorrelationFilter.Properties must be an object")
                };
                for (name, v) in map {
                    f.properties.push((name.clone(), property_value(name, v)?));
                }
            }
            other => invalid!("unknown correlation filter property {other}"),
        }
    }
    Ok(RuleFilter::Correlation(f))
}

/// A JSON value as an application property value: strings, booleans, whole numbers (int when
/// they fit, else long) and other numbers (double).
fn property_value(name: &str, value: &Value) -> Result<PropertyValue> {
    Ok(match value {
        Value::String(s) => PropertyValue::String(s.clone()),
        Value::Bool(b) => PropertyValue::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => match i32::try_from(i) {
                Ok(small) => PropertyValue::Int(small),
                Err(_) => PropertyValue::Long(i),
            },
            (None, Some(f)) => PropertyValue::Double(f),
            _ => invalid!("property {name}: {n} is out of range"),
        },
        Value::Null => PropertyValue::Null,
        _ => invalid!("property {name} must be a string, number or boolean"),
    })
}

/// The name of the (first) namespace the file declares, which `$namespaceinfo` reports.
pub fn namespace_name(text: &str) -> Option<String> {
    let root: Value = serde_json::from_str(text).ok()?;
    let name = root.get("UserConfig")?.get("Namespaces")?.get(0)?.get("Name")?.as_str()?;
    Some(name.to_owned()).filter(|n| !n.is_empty())
}

fn queue_description(properties: Option<&Value>) -> Result<QueueDescription> {
    let mut d = QueueDescription::default();
    let Some(props) = properties else { return Ok(d) };
    let Some(props) = props.as_object() else { invalid!("Properties must be an object") };
    for (key, value) in props {
        let p = Prop { key, value };
        match key.as_str() {
            "DeadLetteringOnMessageExpiration" => {
                d.dead_lettering_on_message_expiration = p.flag()?
            }
            "DefaultMessageTimeToLive" => d.default_message_time_to_live = p.duration()?,
            "AutoDeleteOnIdle" => d.auto_delete_on_idle = p.duration()?,
            "EnableExpress" => d.enable_express = p.flag()?,
            "DuplicateDetectionHistoryTimeWindow" => {
                d.duplicate_detection_history_time_window = p.duration()?
            }
            "ForwardDeadLetteredMessagesTo" => d.forward_dead_lettered_messages_to = p.target()?,
            "ForwardTo" => d.forward_to = p.target()?,
            "LockDuration" => d.lock_duration = p.duration()?,
            "MaxDeliveryCount" => d.max_delivery_count = p.small()?,
            "RequiresDuplicateDetection" => d.requires_duplicate_detection = p.flag()?,
            "RequiresSession" => d.requires_session = p.flag()?,
            "EnablePartitioning" => d.enable_partitioning = p.flag()?,
            "PartitionCount" => d.partition_count = p.small()?,
            "MaxSizeInMegabytes" => d.max_size_in_megabytes = p.number()?,
            "MaxMessageSizeInKilobytes" => d.max_message_size_in_kilobytes = p.number()?,
            "EnableBatchedOperations" => d.enable_batched_operations = p.flag()?,
            "Status" => d.status = p.status()?,
            "UserMetadata" => d.user_metadata = Some(p.text()?.to_owned()),
            "AuthorizationRules" => d.authorization_rules = authorization_rules(value)?,
            other => invalid!("unknown queue property {other}"),
        }
    }
    Ok(d)
}

/// The namespace policies the file declares beyond the root key (an ironbus extension of the
/// emulator's format): `UserConfig.Namespaces[].Policies`, each `{"Name", "Key", "Rights"}`.
pub fn policies(text: &str) -> Result<Vec<SasPolicy>> {
    let root = json(text)?;
    let namespaces = root.get("UserConfig").and_then(|u| u.get("Namespaces"));
    let mut policies = Vec::new();
    for namespace in namespaces.and_then(Value::as_array).into_iter().flatten() {
        for policy in namespace.get("Policies").and_then(Value::as_array).into_iter().flatten() {
            let name = name_of(policy, "policy")?;
            let place = || format!("policy {name}");
            let key = policy.get("Key").and_then(Value::as_str);
            let key = key.ok_or_else(|| ConfigError::invalid("every policy needs a Key"));
            let key = key.within(place)?;
            let rights = rights(policy.get("Rights")).within(place)?;
            policies.push(SasPolicy::new(name.clone(), key, rights));
        }
    }
    Ok(policies)
}

/// `Rights` as a list (`["Listen", "Send"]`) or one string (`"Listen,Send"`).
fn rights(value: Option<&Value>) -> Result<Rights> {
    let text = match value {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().ok_or_else(|| ConfigError::invalid("Rights must be strings")))
            .collect::<Result<Vec<_>>>()?
            .join(","),
        _ => invalid!("Rights must list Manage, Send and/or Listen"),
    };
    text.parse().map_err(|e| ConfigErrorKind::Rights(e).into())
}

/// A queue's or topic's `AuthorizationRules`: `[{"KeyName", "PrimaryKey", "SecondaryKey",
/// "Rights"}]`, as in an ATOM description.
fn authorization_rules(value: &Value) -> Result<Vec<AuthorizationRule>> {
    let Some(list) = value.as_array() else { invalid!("AuthorizationRules must be a list") };
    let mut rules = Vec::with_capacity(list.len());
    for rule in list {
        let field = |name: &str| rule.get(name).and_then(Value::as_str);
        let Some(key_name) = field("KeyName") else {
            invalid!("every authorization rule needs a KeyName")
        };
        let place = || format!("authorization rule {key_name}");
        let primary = field("PrimaryKey")
            .ok_or_else(|| ConfigError::invalid("every authorization rule needs a PrimaryKey"))
            .within(place)?;
        let secondary = field("SecondaryKey").unwrap_or_default();
        let rights = rights(rule.get("Rights")).within(place)?;
        rules.push(AuthorizationRule::new(key_name, primary, secondary, rights));
    }
    Ok(rules)
}

/// Parses a duration as the emulator's config.json and the ATOM descriptions write it (an XML
/// Schema duration such as `PT1M`, `P14D`, `PT0.5S`): the ATOM parser's rules, so the two
/// agree on what is accepted and on `TimeSpan.MaxValue` meaning "never".
fn iso_duration(text: &str) -> Result<Duration> {
    parse_xml_duration(text).ok_or_else(|| {
        ConfigError::invalid(format!("{text:?} is not an ISO 8601 duration such as PT1M"))
    })
}

/// Creates the declared entities that do not exist yet. Existing ones are left as they are
/// (their messages kept). Returns how many were created.
pub async fn apply(broker: &Broker, declared: &Declared) -> Result<usize> {
    let mut created = 0;
    // Forward targets must exist first: topics (which never forward) before every queue, each
    // queue after the queues it forwards to, and subscriptions (which may forward to queues and
    // topics) last.
    for topic in &declared.topics {
        created += create_topic(broker, topic).await?;
    }
    let named: Vec<(&str, &QueueDescription)> =
        declared.queues.iter().map(|q| (q.name.as_str(), &q.description)).collect();
    let ordered: Vec<&DeclaredQueue> = ironbus_core::broker::creation_order(&named)
        .into_iter()
        .map(|i| &declared.queues[i])
        .collect();
    for queue in ordered {
        match broker.create_queue(&queue.name, queue.description.clone()).await {
            Ok(_) => created += 1,
            Err(BrokerError::EntityAlreadyExists { .. }) => {}
            Err(e) => return Err(creating("queue", &queue.name, e)),
        }
    }
    for topic in &declared.topics {
        created += apply_subscriptions(broker, topic).await?;
    }
    Ok(created)
}

fn parse_path(path: &str) -> Result<EntityPath> {
    EntityPath::parse(path)
        .map_err(|source| ConfigErrorKind::Path { path: path.to_owned(), source }.into())
}

fn creating(what: &'static str, path: impl ToString, source: BrokerError) -> ConfigError {
    ConfigErrorKind::Create { what, path: path.to_string(), source }.into()
}

/// Creates a topic if it is missing (1 if it did, else 0).
async fn create_topic(broker: &Broker, topic: &DeclaredTopic) -> Result<usize> {
    let path = parse_path(&topic.name)?;
    match broker.create_entity(&path, EntityDescription::Topic(topic.description.clone())).await {
        Ok(_) => Ok(1),
        Err(BrokerError::EntityAlreadyExists { .. }) => Ok(0),
        Err(e) => Err(creating("topic", &topic.name, e)),
    }
}

/// Creates a topic's subscriptions and their rules, those missing.
async fn apply_subscriptions(broker: &Broker, topic: &DeclaredTopic) -> Result<usize> {
    let parse = parse_path;
    let mut created = 0;
    for sub in &topic.subscriptions {
        let sub_path = parse(&format!("{}/Subscriptions/{}", topic.name, sub.name))?;
        let mut rules = sub.rules.iter();
        let first = rules.next().cloned();
        match broker.create_subscription(&sub_path, sub.description.clone(), first).await {
            Ok(_) => created += 1,
            // An existing subscription keeps the rules it has.
            Err(BrokerError::EntityAlreadyExists { .. }) => continue,
            Err(e) => return Err(creating("subscription", &sub_path, e)),
        }
        for (name, rule) in rules {
            let rule_path = parse(&format!("{sub_path}/Rules/{name}"))?;
            match broker.create_entity(&rule_path, EntityDescription::Rule(rule.clone())).await {
                Ok(_) => created += 1,
                Err(e) => return Err(creating("rule", &rule_path, e)),
            }
        }
    }
    Ok(created)
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_namespace_name_is_the_first_namespaces() {
        let text = r#"{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": []}]}}"#;
        assert_eq!(namespace_name(text).as_deref(), Some("sbemulatorns"));
        assert_eq!(namespace_name(r#"{"UserConfig": {"Namespaces": []}}"#), None);
        assert_eq!(namespace_name(r#"{"UserConfig": {"Namespaces": [{"Name": ""}]}}"#), None);
        assert_eq!(namespace_name("not json"), None);
    }

    use super::*;
    use ironbus_core::description::TIME_SPAN_MAX;

    #[test]
    fn durations_parse_like_dotnet_time_spans() {
        let cases = [
            ("PT1M", 60_000),
            ("PT20S", 20_000),
            ("PT0.5S", 500),
            ("P14D", 14 * 86_400_000),
            ("PT1H30M", 5_400_000),
            ("P1DT1S", 86_401_000),
        ];
        for (text, ms) in cases {
            assert_eq!(iso_duration(text).unwrap(), Duration::from_millis(ms), "{text}");
        }
        for bad in ["", "P", "1M", "PTXS", "PT5", "PT5Q", "P2W", "P1Y"] {
            assert!(iso_duration(bad).is_err(), "{bad}");
        }
        // TimeSpan.MaxValue, and anything a client rounded to within a second of it, is "never".
        for never in ["P10675199DT2H48M5.4775807S", "P10675199DT2H48M5S"] {
            assert_eq!(iso_duration(never).unwrap(), TIME_SPAN_MAX, "{never}");
        }
    }

    #[test]
    fn emulator_config_declares_queues() {
        let text = r#"{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [
            {"Name": "q1", "Properties": {"DeadLetteringOnMessageExpiration": true,
              "DefaultMessageTimeToLive": "PT1H", "DuplicateDetectionHistoryTimeWindow": "PT20S",
              "ForwardDeadLetteredMessagesTo": "", "ForwardTo": "", "LockDuration": "PT5S",
              "MaxDeliveryCount": 3, "RequiresDuplicateDetection": true, "RequiresSession": false,
              "EnablePartitioning": true, "PartitionCount": 4}},
            {"Name": "q2"}], "Topics": []}], "Logging": {"Type": "File"}}}"#;
        let queues = parse(text).unwrap().queues;
        assert_eq!(queues.len(), 2);
        let d = &queues[0].description;
        assert!(d.dead_lettering_on_message_expiration && d.requires_duplicate_detection);
        assert_eq!(d.lock_duration, Duration::from_secs(5));
        assert_eq!(d.max_delivery_count, 3);
        assert_eq!(d.partitions(), 4);
        assert_eq!(d.forward_to, None);
        assert_eq!(queues[1].description, QueueDescription::default());
    }

    #[test]
    fn emulator_config_declares_topics_subscriptions_and_rules() {
        // The shape of Microsoft's emulator sample config.
        let text = r#"{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [], "Topics": [
            {"Name": "topic.1", "Properties": {"DefaultMessageTimeToLive": "PT1H",
               "DuplicateDetectionHistoryTimeWindow": "PT20S", "RequiresDuplicateDetection": false},
             "Subscriptions": [
               {"Name": "subscription.1", "Properties": {"DeadLetteringOnMessageExpiration": false,
                  "DefaultMessageTimeToLive": "PT1H", "LockDuration": "PT1M", "MaxDeliveryCount": 3,
                  "ForwardDeadLetteredMessagesTo": "", "ForwardTo": "", "RequiresSession": false},
                "Rules": [
                  {"Name": "app-prop-filter-1", "Properties": {"FilterType": "Correlation",
                     "CorrelationFilter": {"ContentType": "application/text", "CorrelationId": "id1",
                       "Label": "subject1", "MessageId": "msgid1", "ReplyTo": "someQueue",
                       "ReplyToSessionId": "sessionId", "SessionId": "session1", "To": "xyz",
                       "Properties": {"prop1": "value1", "n": 5, "big": 5000000000, "f": 1.5, "b": true}}}},
                  {"Name": "sql-filter-1", "Properties": {"FilterType": "Sql",
                     "SqlFilter": {"SqlExpression": "color = 'red'"},
                     "Action": {"SqlExpression": "SET sys.Label = 'x'"}}}]},
               {"Name": "subscription.2"}]}]}]}}"#;
        let declared = parse(text).unwrap();
        assert!(declared.queues.is_empty());
        let topic = &declared.topics[0];
        assert_eq!(topic.name, "topic.1");
        assert_eq!(topic.description.default_message_time_to_live, Duration::from_secs(3600));
        let sub = &topic.subscriptions[0];
        assert_eq!(sub.description.max_delivery_count, 3);
        assert_eq!(sub.rules.len(), 2);
        let RuleFilter::Correlation(c) = &sub.rules[0].1.filter else { panic!() };
        assert_eq!(c.subject.as_deref(), Some("subject1"));
        assert_eq!(c.to.as_deref(), Some("xyz"));
        assert!(c.properties.contains(&("n".into(), PropertyValue::Int(5))));
        assert!(c.properties.contains(&("big".into(), PropertyValue::Long(5_000_000_000))));
        assert!(c.properties.contains(&("f".into(), PropertyValue::Double(1.5))));
        let (name, sql) = &sub.rules[1];
        assert_eq!(name, "sql-filter-1");
        assert!(
            matches!(&sql.filter, RuleFilter::Sql { expression, .. } if expression == "color = 'red'")
        );
        assert_eq!(sql.action.as_ref().unwrap().expression, "SET sys.Label = 'x'");
        assert!(topic.subscriptions[1].rules.is_empty());
        assert_eq!(declared.entity_count(), 1 + 2 + 2);

        let bad = r#"{"UserConfig": {"Namespaces": [{"Name": "n", "Topics": [{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [{"Name": "r", "Properties": {"FilterType": "Regex"}}]}]}]}]}}"#;
        assert!(format!("{:#}", parse(bad).unwrap_err()).contains("Regex"));
    }

    async fn memory_broker() -> ironbus_core::Broker {
        ironbus_core::Broker::open(
            std::sync::Arc::new(ironbus_store_memory::MemoryStore::new()),
            std::sync::Arc::new(ironbus_core::SystemClock),
            ironbus_core::NamespaceLimits::default(),
        )
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn declared_topics_are_created_once_with_their_rules() {
        let text = r#"{"UserConfig": {"Namespaces": [{"Name": "n", "Topics": [{"Name": "t",
            "Subscriptions": [{"Name": "s1"}, {"Name": "s2", "Rules": [
              {"Name": "a", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}},
              {"Name": "b", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"Label": "x"}}}]}]}]}]}}"#;
        let declared = parse(text).unwrap();
        let broker = memory_broker().await;
        assert_eq!(apply(&broker, &declared).await.unwrap(), 1 + 2 + 1);
        assert_eq!(apply(&broker, &declared).await.unwrap(), 0);
        let names = |p: &str| {
            let broker = broker.clone();
            let p = EntityPath::parse(p).unwrap();
            async move {
                let children = broker.list_children(&p, 0, 100).await.unwrap();
                children.iter().map(|e| e.path.name().to_owned()).collect::<Vec<_>>()
            }
        };
        assert_eq!(names("t").await, ["s1", "s2"]);
        assert_eq!(names("t/Subscriptions/s1").await, ["$Default"]);
        assert_eq!(names("t/Subscriptions/s2").await, ["a", "b"]);
    }

    #[tokio::test]
    async fn forwarding_targets_are_created_before_their_sources_of_any_kind() {
        // A queue forwarding to a topic, whose subscription forwards to a queue declared after
        // the first one: every target exists when its source is created.
        let text = r#"{"UserConfig": {"Namespaces": [{"Name": "n",
            "Queues": [{"Name": "in", "Properties": {"ForwardTo": "t"}},
                       {"Name": "out", "Properties": {}}],
            "Topics": [{"Name": "t", "Subscriptions": [
                {"Name": "s", "Properties": {"ForwardTo": "out"}}]}]}]}}"#;
        let declared = parse(text).unwrap();
        let broker = memory_broker().await;
        assert_eq!(apply(&broker, &declared).await.unwrap(), 2 + 1 + 1);
        assert_eq!(apply(&broker, &declared).await.unwrap(), 0);
    }

    /// The example in the README is a configuration this parser takes, topics included.
    #[test]
    fn the_readme_example_parses() {
        let readme = include_str!("../../README.md");
        let start = readme.find("```json\n{\"UserConfig\"").expect("the README has the example");
        let text = &readme[start + "```json\n".len()..];
        let text = &text[..text.find("```").expect("the example ends")];
        let declared = parse(text).unwrap();
        // A queue, a topic, two subscriptions and one declared rule.
        assert_eq!(declared.entity_count(), 1 + 1 + 2 + 1);
    }

    #[test]
    fn policies_and_entity_authorization_rules_are_declared() {
        let text = r#"{"UserConfig": {"Namespaces": [{"Name": "n",
            "Policies": [{"Name": "reader", "Key": "rk", "Rights": ["Listen"]},
                         {"Name": "app", "Key": "ak", "Rights": "Send,Listen"}],
            "Queues": [{"Name": "q", "Properties": {"AuthorizationRules": [
                {"KeyName": "qsend", "PrimaryKey": "p", "SecondaryKey": "s", "Rights": ["Send"]}]}}],
            "Topics": [{"Name": "t", "Properties": {"AuthorizationRules": [
                {"KeyName": "tall", "PrimaryKey": "p", "Rights": ["Manage"]}]}}]}]}}"#;
        let declared_policies = policies(text).unwrap();
        assert_eq!(
            declared_policies,
            [
                SasPolicy::new("reader", "rk", Rights::LISTEN),
                SasPolicy::new("app", "ak", Rights::SEND.with(ironbus_core::auth::Right::Listen)),
            ]
        );
        let declared = parse(text).unwrap();
        assert_eq!(
            declared.queues[0].description.authorization_rules,
            [AuthorizationRule::new("qsend", "p", "s", Rights::SEND)]
        );
        assert_eq!(
            declared.topics[0].description.authorization_rules,
            [AuthorizationRule::new("tall", "p", "", Rights::MANAGE)]
        );
        for (bad, wants) in [
            (r#"{"Name": "x", "Rights": ["Listen"]}"#, "Key"),
            (r#"{"Name": "x", "Key": "k", "Rights": ["Read"]}"#, "Read"),
            (r#"{"Name": "x", "Key": "k"}"#, "Rights"),
            (r#"{"Key": "k", "Rights": "Send"}"#, "Name"),
        ] {
            let text = format!(r#"{{"UserConfig": {{"Namespaces": [{{"Policies": [{bad}]}}]}}}}"#);
            let error = format!("{:#}", policies(&text).unwrap_err());
            assert!(error.contains(wants), "{bad}: {error}");
        }
        assert!(policies(r#"{"UserConfig": {"Namespaces": [{"Name": "n"}]}}"#).unwrap().is_empty());
    }

    #[test]
    fn requires_session_is_taken() {
        let sessions = r#"{"UserConfig": {"Namespaces": [{"Name": "n", "Queues": [{"Name": "q", "Properties": {"RequiresSession": true}}]}]}}"#;
        let declared = parse(sessions).unwrap();
        assert!(declared.queues[0].description.requires_session);
    }

    #[test]
    fn mistakes_say_what_is_wrong_and_where() {
        let queue = r#"{"UserConfig": {"Namespaces": [{"Queues": [
            {"Name": "orders", "Properties": {"LockDuration": 5}}]}]}}"#;
        let error = parse(queue).unwrap_err();
        assert_eq!(error.to_string(), "queue orders: LockDuration must be a string");
        assert_eq!(error.at(), "queue orders");
        let rule = r#"{"UserConfig": {"Namespaces": [{"Topics": [{"Name": "t", "Subscriptions": [
            {"Name": "s", "Rules": [{"Name": "r", "Properties": {"FilterType": "Regex"}}]}]}]}]}}"#;
        assert_eq!(
            parse(rule).unwrap_err().to_string(),
            r#"topic t, subscription s, rule r: FilterType "Regex" is not Sql or Correlation"#
        );
        let lock = r#"{"UserConfig": {"Namespaces": [{"Queues": [
            {"Name": "q", "Properties": {"LockDuration": "PT5X"}}]}]}}"#;
        assert_eq!(
            parse(lock).unwrap_err().to_string(),
            r#"queue q, LockDuration: "PT5X" is not an ISO 8601 duration such as PT1M"#
        );
        let count = r#"{"UserConfig": {"Namespaces": [{"Queues": [
            {"Name": "q", "Properties": {"MaxDeliveryCount": 5000000000}}]}]}}"#;
        assert_eq!(
            parse(count).unwrap_err().to_string(),
            "queue q: MaxDeliveryCount 5000000000 is out of range"
        );
        // The JSON parser's error is the source, with its line and column.
        let error = parse("not json").unwrap_err();
        assert!(matches!(error.kind(), ConfigErrorKind::Json(_)), "{error:?}");
        let source = std::error::Error::source(&error).expect("the JSON error").to_string();
        assert!(source.contains("line 1 column 2"), "{source}");
    }

    #[test]
    fn unsupported_parts_are_refused_clearly() {
        let unknown = r#"{"UserConfig": {"Namespaces": [{"Name": "n", "Queues": [{"Name": "q", "Properties": {"Bogus": 1}}]}]}}"#;
        assert!(format!("{:#}", parse(unknown).unwrap_err()).contains("Bogus"));
        assert!(parse("{}").is_err());
    }
}
