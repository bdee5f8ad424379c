//! The rule operations of a subscription's management node (amqp.md §6.3,
//! topics-sessions-transactions.md A.4–A.5): `com.microsoft:add-rule`, `remove-rule` and
//! `enumerate-rules`, carried out as rule entities (`{topic}/Subscriptions/{sub}/Rules/{rule}`)
//! of the broker.
//!
//! Requests are read as every SDK sends them: True/False filters arrive as SQL `1=1` / `1=0` and
//! are stored as such; `sql-rule-action` null, absent or an empty map all mean "no action"; an
//! extra `rule-name` inside `rule-description` is ignored. Enumerated rules are described
//! values whose codes the SDKs decode (Appendix A of amqp.md).

use fe2o3_amqp_types::primitives::{OrderedMap, Symbol, Timestamp as AmqpTimestamp, Value};
use ironbus_core::{
    Broker, CorrelationFilter, EntityAddress, EntityDescription, EntityInfo, EntityPath, PathShape,
    PropertyValue, RuleAction, RuleDescription, RuleFilter, SubQueue,
};
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;

use crate::error::WireError;
use crate::request::Request;

use super::fields::*;
use super::{Operation, Outcome};

/// Descriptor codes of an enumerated rule (amqp.md Appendix A).
const RULE_DESCRIPTION: u64 = 0x0000_0137_0000_0004;
const EMPTY_ACTION: u64 = 0x0000_0137_0000_0005;
const SQL_ACTION: u64 = 0x0000_0137_0000_0006;
const SQL_FILTER: u64 = 0x0000_0013_7000_0006;
const TRUE_FILTER: u64 = 0x0000_0013_7000_0007;
const FALSE_FILTER: u64 = 0x0000_0013_7000_0008;
const CORRELATION_FILTER: u64 = 0x0000_0013_7000_0009;
/// The compatibility level Service Bus reports with SQL filters and actions.
const COMPATIBILITY_LEVEL: i32 = 20;
/// The most rules one enumerate-rules answer holds, whatever `top` asks for.
const MAX_PAGE: i64 = 10_000;

pub(super) async fn execute(
    operation: Operation,
    broker: Broker,
    address: EntityAddress,
    request: &Request,
    in_transaction: bool,
) -> Result<Outcome, WireError> {
    let subscription = subscription(&address)?;
    if in_transaction && matches!(operation, Operation::AddRule | Operation::RemoveRule) {
        // Rule changes are not transactional here: they take effect at once. Service Bus
        // refuses them in a transaction on a partitioned topic (A.4).
        if let Some(topic) = subscription.parent() {
            let info = broker.get_entity(&topic).await?;
            if matches!(&info.description, EntityDescription::Topic(t) if t.enable_partitioning) {
                return Err(WireError::new(
                    "amqp:not-allowed",
                    400,
                    format!(
                        "rules of a subscription of partitioned topic {topic} cannot be \
                         changed in a transaction"
                    ),
                ));
            }
        }
    }
    match operation {
        Operation::AddRule => {
            let path = rule_path(&subscription, request)?;
            let description = rule_description(request.field("rule-description"))?;
            broker.create_entity(&path, EntityDescription::Rule(description)).await?;
            Ok(Outcome::ok(None))
        }
        Operation::RemoveRule => {
            let path = rule_path(&subscription, request)?;
            broker.delete_entity(&path).await?;
            Ok(Outcome::ok(None))
        }
        Operation::EnumerateRules => {
            let skip = optional_int(request, "skip")?.unwrap_or(0).max(0) as usize;
            let top = optional_int(request, "top")?.unwrap_or(MAX_PAGE).clamp(0, MAX_PAGE) as usize;
            let rules = broker.list_children(&subscription, skip, top).await?;
            let rules = rules
                .iter()
                .map(|rule| map([("rule-description", enumerated(rule))]))
                .collect::<Vec<_>>();
            Ok(Outcome::ok(Some(map([("rules", Value::List(rules))]))))
        }
        _ => unreachable!("only rule operations are routed here"),
    }
}

/// The subscription whose management node got the request: rules belong to subscriptions.
fn subscription(address: &EntityAddress) -> Result<EntityPath, WireError> {
    if address.entity.shape() != PathShape::Subscription || address.queue != SubQueue::Main {
        return Err(WireError::new(
            "amqp:not-allowed",
            400,
            format!("{address} has no rules: rules belong to a subscription's management node"),
        ));
    }
    Ok(address.entity.clone())
}

fn optional_int(request: &Request, name: &str) -> Result<Option<i64>, WireError> {
    match request.field(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => as_i64(v)
            .map(Some)
            .ok_or_else(|| WireError::bad_request(format!("{name} must be an integer"))),
    }
}

fn text(value: &Value) -> Option<&str> {
    match value {
        Value::String(s) => Some(s),
        Value::Symbol(s) => Some(&s.0),
        _ => None,
    }
}

/// A string-keyed entry of a map (string or symbol keys).
fn entry<'a>(map: &'a OrderedMap<Value, Value>, key: &str) -> Option<&'a Value> {
    map.get(&Value::String(key.to_owned())).or_else(|| map.get(&Value::Symbol(key.into())))
}

/// The path of the rule the request's `rule-name` names.
fn rule_path(subscription: &EntityPath, request: &Request) -> Result<EntityPath, WireError> {
    let name = request
        .field("rule-name")
        .and_then(text)
        .ok_or_else(|| WireError::bad_request("the request needs a string rule-name"))?;
    let invalid = || WireError::bad_request(format!("{name:?} is not a valid rule name"));
    if name.is_empty() || name.contains('/') {
        return Err(invalid());
    }
    let path = EntityPath::parse(&format!("{}/Rules/{name}", subscription.as_str()))
        .map_err(|_| invalid())?;
    if path.shape() != PathShape::Rule {
        return Err(invalid());
    }
    Ok(path)
}

/// An optional string field of a filter or action map (absent and null are none).
fn optional_text(map: &OrderedMap<Value, Value>, key: &str) -> Result<Option<String>, WireError> {
    match entry(map, key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => text(v)
            .map(|s| Some(s.to_owned()))
            .ok_or_else(|| WireError::bad_request(format!("{key} must be a string"))),
    }
}

/// Named values (`properties` of a correlation filter, `parameters` of a SQL expression).
fn named_values(
    map: &OrderedMap<Value, Value>,
    key: &str,
) -> Result<Vec<(String, PropertyValue)>, WireError> {
    match entry(map, key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Map(values)) => values
            .iter()
            .map(|(k, v)| {
                let name = text(k).ok_or_else(|| {
                    WireError::bad_request(format!("the names in {key} must be strings"))
                })?;
                let value = property_value(v).ok_or_else(|| {
                    WireError::bad_request(format!("{key}[{name}] must be a simple value"))
                })?;
                Ok((name.to_owned(), value))
            })
            .collect(),
        Some(_) => Err(WireError::bad_request(format!("{key} must be a map"))),
    }
}

fn sub_map<'a>(
    description: &'a OrderedMap<Value, Value>,
    key: &str,
) -> Result<Option<&'a OrderedMap<Value, Value>>, WireError> {
    match entry(description, key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Map(m)) => Ok(Some(m)),
        Some(_) => Err(WireError::bad_request(format!("{key} must be a map"))),
    }
}

/// The rule an add-rule request describes.
fn rule_description(value: Option<&Value>) -> Result<RuleDescription, WireError> {
    let Some(Value::Map(description)) = value else {
        return Err(WireError::bad_request("the request needs a rule-description map"));
    };
    let sql = sub_map(description, "sql-filter")?;
    let correlation = sub_map(description, "correlation-filter")?;
    let filter =
        match (sql, correlation) {
            (Some(sql), None) => {
                let expression = optional_text(sql, "expression")?
                    .ok_or_else(|| WireError::bad_request("sql-filter needs an expression"))?;
                let parameters = named_values(sql, "parameters")?;
                match expression.trim() {
                    "1=1" if parameters.is_empty() => RuleFilter::True,
                    "1=0" if parameters.is_empty() => RuleFilter::False,
                    _ => RuleFilter::Sql { expression, parameters },
                }
            }
            (None, Some(c)) => RuleFilter::Correlation(CorrelationFilter {
                correlation_id: optional_text(c, "correlation-id")?,
                message_id: optional_text(c, "message-id")?,
                to: optional_text(c, "to")?,
                reply_to: optional_text(c, "reply-to")?,
                subject: optional_text(c, "label")?,
                session_id: optional_text(c, "session-id")?,
                reply_to_session_id: optional_text(c, "reply-to-session-id")?,
                content_type: optional_text(c, "content-type")?,
                properties: named_values(c, "properties")?,
            }),
            (Some(_), Some(_)) => return Err(WireError::bad_request(
                "a rule-description holds either a sql-filter or a correlation-filter, not both",
            )),
            (None, None) => {
                return Err(WireError::bad_request(
                    "a rule-description needs a sql-filter or a correlation-filter",
                ))
            }
        };
    // Null, absent and an empty map all mean "no action" (rs sends `{}`, .NET and Java null).
    let action = match sub_map(description, "sql-rule-action")? {
        Some(action) => match optional_text(action, "expression")? {
            Some(expression) => {
                Some(RuleAction { expression, parameters: named_values(action, "parameters")? })
            }
            None => None,
        },
        None => None,
    };
    Ok(RuleDescription { filter, action })
}

fn described(code: u64, fields: Vec<Value>) -> Value {
    Value::Described(Box::new(Described {
        descriptor: Descriptor::Code(code),
        value: Value::List(fields),
    }))
}

fn optional_string(value: &Option<String>) -> Value {
    value.clone().map_or(Value::Null, Value::String)
}

/// A core property value as an AMQP value.
fn amqp_value(value: &PropertyValue) -> Value {
    match value {
        PropertyValue::Null => Value::Null,
        PropertyValue::Bool(v) => Value::Bool(*v),
        PropertyValue::UByte(v) => Value::Ubyte(*v),
        PropertyValue::UShort(v) => Value::Ushort(*v),
        PropertyValue::UInt(v) => Value::Uint(*v),
        PropertyValue::ULong(v) => Value::Ulong(*v),
        PropertyValue::Byte(v) => Value::Byte(*v),
        PropertyValue::Short(v) => Value::Short(*v),
        PropertyValue::Int(v) => Value::Int(*v),
        PropertyValue::Long(v) => Value::Long(*v),
        PropertyValue::Float(v) => Value::Float((*v).into()),
        PropertyValue::Double(v) => Value::Double((*v).into()),
        PropertyValue::Char(v) => Value::Char(*v),
        PropertyValue::Timestamp(t) | PropertyValue::LocalTimestamp(t) => {
            Value::Timestamp(AmqpTimestamp::from_milliseconds(t.as_millis()))
        }
        // Service Bus's described TimeSpan: com.microsoft:timespan, .NET ticks (100 ns).
        PropertyValue::TimeSpan(ms) => Value::Described(Box::new(Described {
            descriptor: Descriptor::Name(Symbol::from("com.microsoft:timespan")),
            value: Value::Long(ms.saturating_mul(10_000)),
        })),
        PropertyValue::Uuid(u) => Value::Uuid((*u.as_bytes()).into()),
        PropertyValue::Binary(b) => Value::Binary(b.to_vec().into()),
        PropertyValue::String(s) => Value::String(s.clone()),
    }
}

/// An enumerated rule: `rule-description` [filter, action, name, created-at].
fn enumerated(rule: &EntityInfo) -> Value {
    let EntityDescription::Rule(description) = &rule.description else {
        unreachable!("the children of a subscription are rules")
    };
    let filter = match &description.filter {
        RuleFilter::True => described(
            TRUE_FILTER,
            vec![Value::String("1=1".into()), Value::Int(COMPATIBILITY_LEVEL)],
        ),
        RuleFilter::False => described(
            FALSE_FILTER,
            vec![Value::String("1=0".into()), Value::Int(COMPATIBILITY_LEVEL)],
        ),
        RuleFilter::Sql { expression, .. } => described(
            SQL_FILTER,
            vec![Value::String(expression.clone()), Value::Int(COMPATIBILITY_LEVEL)],
        ),
        RuleFilter::Correlation(c) => {
            let mut properties = OrderedMap::new();
            for (name, value) in &c.properties {
                properties.insert(Value::String(name.clone()), amqp_value(value));
            }
            described(
                CORRELATION_FILTER,
                vec![
                    optional_string(&c.correlation_id),
                    optional_string(&c.message_id),
                    optional_string(&c.to),
                    optional_string(&c.reply_to),
                    optional_string(&c.subject),
                    optional_string(&c.session_id),
                    optional_string(&c.reply_to_session_id),
                    optional_string(&c.content_type),
                    Value::Map(properties),
                ],
            )
        }
    };
    // Never null: js dereferences the action's descriptor.
    let action = match &description.action {
        Some(action) => described(
            SQL_ACTION,
            vec![Value::String(action.expression.clone()), Value::Int(COMPATIBILITY_LEVEL)],
        ),
        None => described(EMPTY_ACTION, Vec::new()),
    };
    described(
        RULE_DESCRIPTION,
        vec![
            filter,
            action,
            Value::String(rule.path.name().to_owned()),
            Value::Timestamp(AmqpTimestamp::from_milliseconds(rule.created_at.as_millis())),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string_map(entries: Vec<(&str, Value)>) -> Value {
        let mut m = OrderedMap::new();
        for (k, v) in entries {
            m.insert(Value::String(k.to_owned()), v);
        }
        Value::Map(m)
    }

    #[test]
    fn rule_descriptions_read_as_every_sdk_sends_them() {
        let sql = |e: &str| string_map(vec![("expression", Value::String(e.into()))]);
        // .NET: action null and an extra rule-name; rs: an empty action map.
        for action in [Value::Null, string_map(vec![])] {
            let d = string_map(vec![
                ("sql-filter", sql("1=1")),
                ("sql-rule-action", action),
                ("rule-name", Value::String("r".into())),
            ]);
            let rule = rule_description(Some(&d)).unwrap();
            assert_eq!(rule, RuleDescription { filter: RuleFilter::True, action: None });
        }
        let d = string_map(vec![("sql-filter", sql("1=0"))]);
        assert_eq!(rule_description(Some(&d)).unwrap().filter, RuleFilter::False);
        let d =
            string_map(vec![("sql-filter", sql("a = 1")), ("sql-rule-action", sql("SET b = 2"))]);
        let rule = rule_description(Some(&d)).unwrap();
        assert_eq!(rule.filter, RuleFilter::Sql { expression: "a = 1".into(), parameters: vec![] });
        assert_eq!(rule.action.unwrap().expression, "SET b = 2");

        let props = string_map(vec![("color", Value::String("red".into()))]);
        let d = string_map(vec![(
            "correlation-filter",
            string_map(vec![
                ("correlation-id", Value::String("c".into())),
                ("message-id", Value::Null),
                ("label", Value::String("l".into())),
                ("properties", props),
            ]),
        )]);
        let RuleFilter::Correlation(c) = rule_description(Some(&d)).unwrap().filter else {
            panic!("correlation")
        };
        assert_eq!(c.correlation_id.as_deref(), Some("c"));
        assert_eq!(c.message_id, None);
        assert_eq!(c.subject.as_deref(), Some("l"));
        assert_eq!(c.properties, vec![("color".into(), PropertyValue::String("red".into()))]);

        for bad in [
            Value::Null,
            string_map(vec![]),
            string_map(vec![("sql-filter", string_map(vec![]))]),
            string_map(vec![
                ("sql-filter", sql("1=1")),
                ("correlation-filter", string_map(vec![])),
            ]),
            string_map(vec![("sql-filter", Value::Int(1))]),
        ] {
            let e = rule_description(Some(&bad)).unwrap_err();
            assert_eq!(e.status, 400, "{bad:?}");
        }
    }
}
