//! SQL rule actions: `SET` / `REMOVE` statements applied to a subscription's copy of a message
//! (sql-filter.md §8).

use std::fmt;
use std::time::Duration;

use super::ast::{Expr, Property, Statement, SystemProperty};
use super::error::{EvalError, EvalErrorKind, FilterError};
use super::eval::{self, lookup};
use super::value::{eq_ignore_case, Value};
use super::{parser, EvalContext, Parameters, PublishInfo};
use crate::message::{Message, MessageProperties, PropertyValue};

/// The application property a copy made by an action rule carries: the rule's name.
pub const RULE_NAME_PROPERTY: &str = "RuleName";

/// A compiled SQL rule action: parsed once when the rule is created, applied to each copy.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlRuleAction {
    text: String,
    statements: Vec<Statement>,
}

/// What applying an action changed, so the transport knows what to re-encode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActionEffect {
    /// Some application property was set or removed (`Message::application_properties_modified`
    /// is then set too).
    pub application_properties_changed: bool,
    /// Some field of `Message::properties` changed.
    pub system_properties_changed: bool,
}

impl SqlRuleAction {
    /// Compiles `text` with its `parameters`: at most 1,024 characters and 32 statements.
    pub fn parse(text: &str, parameters: &Parameters) -> Result<Self, FilterError> {
        let statements = parser::parse_action(text, parameters)?;
        Ok(Self { text: text.to_owned(), statements })
    }

    /// The text the rule was created with.
    pub fn expression(&self) -> &str {
        &self.text
    }

    pub fn statements(&self) -> &[Statement] {
        &self.statements
    }

    /// Runs the statements in order on `message`; each sees the changes of those before it.
    /// Unknown values (a missing property in the expression) set the target to null.
    ///
    /// On an error the message may be partly changed: apply to a copy and dead-letter the
    /// original (sql-filter.md §9.2).
    pub fn apply(
        &self,
        message: &mut Message,
        publish: &PublishInfo<'_>,
    ) -> Result<ActionEffect, EvalError> {
        let mut effect = ActionEffect::default();
        for statement in &self.statements {
            match statement {
                Statement::Set(Property::User(name), e) => {
                    let value = {
                        let ctx = EvalContext { message, publish: *publish };
                        let existing = lookup(&message.application_properties, name);
                        to_property_value(eval::expr(e, &ctx)?, existing)?
                    };
                    set_user(&mut message.application_properties, name, value);
                    effect.application_properties_changed = true;
                }
                Statement::Set(Property::System(target), e) => {
                    let changed = set_system(message, publish, target, e)?;
                    effect.system_properties_changed |= changed;
                }
                Statement::Remove(Property::User(name)) => {
                    let props = &mut message.application_properties;
                    let key = if props.contains_key(name) {
                        Some(name.clone())
                    } else {
                        props.keys().find(|k| eq_ignore_case(k, name)).cloned()
                    };
                    if let Some(key) = key {
                        props.remove(&key);
                        effect.application_properties_changed = true;
                    }
                }
                Statement::Remove(Property::System(target)) => {
                    return Err(match target {
                        SystemProperty::Unknown(name) => unknown(name),
                        known => read_only(known, "removed"),
                    })
                }
            }
        }
        if effect.application_properties_changed {
            message.application_properties_modified = true;
        }
        Ok(effect)
    }

    /// [`apply`](Self::apply), then marks the copy with the rule's name in the application
    /// property `RuleName`, as Service Bus does for every copy an action rule makes.
    pub fn apply_for_rule(
        &self,
        rule_name: &str,
        message: &mut Message,
        publish: &PublishInfo<'_>,
    ) -> Result<ActionEffect, EvalError> {
        let mut effect = self.apply(message, publish)?;
        message
            .application_properties
            .insert(RULE_NAME_PROPERTY.to_owned(), PropertyValue::String(rule_name.to_owned()));
        message.application_properties_modified = true;
        effect.application_properties_changed = true;
        Ok(effect)
    }
}

impl fmt::Display for SqlRuleAction {
    /// The statements, `; `-separated, in a form that parses back to the same action.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.statements.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{s}")?;
        }
        Ok(())
    }
}

fn unknown(name: &str) -> EvalError {
    EvalError::new(
        EvalErrorKind::UnknownSystemProperty,
        format!("sys.{name} is not a system property"),
    )
}

fn read_only(p: &SystemProperty, what: &str) -> EvalError {
    EvalError::new(
        EvalErrorKind::ReadOnlySystemProperty,
        format!("sys.{} cannot be {what} by a rule action", p.name()),
    )
}

/// Sets `name`, keeping the spelling of an existing key that matches it ignoring case.
fn set_user(props: &mut crate::message::ApplicationProperties, name: &str, value: PropertyValue) {
    if let Some(slot) = props.get_mut(name) {
        *slot = value;
    } else if let Some((_, slot)) = props.iter_mut().find(|(k, _)| eq_ignore_case(k, name)) {
        *slot = value;
    } else {
        props.insert(name.to_owned(), value);
    }
}

/// The value to store, converted implicitly to the existing property's type where C# would:
/// an integer into the existing integer width when it fits (`SET quantity = quantity / 2`
/// keeps an `int` an `int`), an integer into an existing float or double. A new integer is a
/// `long` (the type of SQL integer constants).
fn to_property_value(
    v: Value<'_>,
    existing: Option<&PropertyValue>,
) -> Result<PropertyValue, EvalError> {
    Ok(match v {
        Value::Null => PropertyValue::Null,
        Value::Bool(b) => PropertyValue::Bool(b),
        Value::Int(n) => integer(n, existing),
        Value::Double(d) => PropertyValue::Double(d),
        Value::String(s) => PropertyValue::String(s.into_owned()),
        Value::Char(c) => PropertyValue::Char(c),
        Value::Guid(g) => PropertyValue::Uuid(g),
        Value::DateTime(ms) => PropertyValue::Timestamp(crate::types::Timestamp::from_millis(ms)),
        Value::Binary(b) => PropertyValue::Binary(bytes::Bytes::copy_from_slice(b)),
        // PropertyValue has no TimeSpan (AMQP's described com.microsoft:timespan).
        Value::TimeSpan(_) => {
            return Err(EvalError::new(
                EvalErrorKind::UnsupportedValue,
                "a TimeSpan cannot be stored in an application property",
            ))
        }
    })
}

fn integer(n: i128, existing: Option<&PropertyValue>) -> PropertyValue {
    let fitted = match existing {
        Some(PropertyValue::UByte(_)) => u8::try_from(n).ok().map(PropertyValue::UByte),
        Some(PropertyValue::UShort(_)) => u16::try_from(n).ok().map(PropertyValue::UShort),
        Some(PropertyValue::UInt(_)) => u32::try_from(n).ok().map(PropertyValue::UInt),
        Some(PropertyValue::ULong(_)) => u64::try_from(n).ok().map(PropertyValue::ULong),
        Some(PropertyValue::Byte(_)) => i8::try_from(n).ok().map(PropertyValue::Byte),
        Some(PropertyValue::Short(_)) => i16::try_from(n).ok().map(PropertyValue::Short),
        Some(PropertyValue::Int(_)) => i32::try_from(n).ok().map(PropertyValue::Int),
        Some(PropertyValue::Double(_)) => Some(PropertyValue::Double(n as f64)),
        Some(PropertyValue::Float(_)) => Some(PropertyValue::Float(n as f32)),
        _ => None,
    };
    fitted.unwrap_or_else(|| match i64::try_from(n) {
        Ok(v) => PropertyValue::Long(v),
        Err(_) => u64::try_from(n).map_or(PropertyValue::Long(n as i64), PropertyValue::ULong),
    })
}

/// `SET sys.X = e`. Returns whether `message.properties` changed.
///
/// Writable: the string properties (MessageId, CorrelationId, Label, To, ReplyTo,
/// ReplyToSessionId, SessionId, ContentType, PartitionKey; a non-string value is stored as its
/// text, null clears the field) and TimeToLive (a TimeSpan; null clears it). Accepted and
/// ignored (sql-filter.md §4.1): ScheduledEnqueueTimeUtc (ignored on subscriptions, per the
/// docs), ForcePersistence (ironbus always persists) and ViaPartitionKey (not kept on messages).
/// The broker-assigned ones are read-only: setting them fails the action.
fn set_system(
    message: &mut Message,
    publish: &PublishInfo<'_>,
    target: &SystemProperty,
    e: &Expr,
) -> Result<bool, EvalError> {
    let field: fn(&mut MessageProperties) -> &mut Option<String> = match target {
        SystemProperty::MessageId => |p| &mut p.message_id,
        SystemProperty::CorrelationId => |p| &mut p.correlation_id,
        SystemProperty::Label => |p| &mut p.subject,
        SystemProperty::To => |p| &mut p.to,
        SystemProperty::ReplyTo => |p| &mut p.reply_to,
        SystemProperty::ReplyToSessionId => |p| &mut p.reply_to_session_id,
        SystemProperty::SessionId => |p| &mut p.session_id,
        SystemProperty::ContentType => |p| &mut p.content_type,
        SystemProperty::PartitionKey => |p| &mut p.partition_key,
        SystemProperty::TimeToLive => {
            let ttl = {
                let ctx = EvalContext { message, publish: *publish };
                match eval::expr(e, &ctx)? {
                    Value::Null => None,
                    Value::TimeSpan(ms) => Some(Duration::from_millis(ms.max(0) as u64)),
                    _ => {
                        return Err(EvalError::new(
                            EvalErrorKind::UnsupportedValue,
                            "sys.TimeToLive needs a TimeSpan",
                        ))
                    }
                }
            };
            let changed = message.properties.time_to_live != ttl;
            message.properties.time_to_live = ttl;
            return Ok(changed);
        }
        SystemProperty::ScheduledEnqueueTimeUtc
        | SystemProperty::ForcePersistence
        | SystemProperty::ViaPartitionKey => {
            let ctx = EvalContext { message, publish: *publish };
            eval::expr(e, &ctx)?;
            return Ok(false);
        }
        SystemProperty::Unknown(name) => return Err(unknown(name)),
        read_only_property => return Err(read_only(read_only_property, "set")),
    };
    let text = {
        let ctx = EvalContext { message, publish: *publish };
        eval::expr(e, &ctx)?.to_text().map(|t| t.into_owned())
    };
    let slot = field(&mut message.properties);
    let changed = *slot != text;
    *slot = text;
    Ok(changed)
}
