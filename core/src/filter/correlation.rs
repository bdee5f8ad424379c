//! Correlation filters: exact matches on system fields and application properties
//! (sql-filter.md §11).

use std::fmt;

use super::ast::CompareOp;
use super::eval::lookup;
use super::value::{compare, Tri, Value};
use crate::message::{Message, PropertyValue};

/// Every field that is `Some` and every entry of `properties` must match (AND); absent fields
/// match anything. The same type is a rule's description (what management stores and answers
/// with, properties in the order they were given) and the filter the broker evaluates.
///
/// - System fields compare as exact, case-sensitive strings (`subject` is Service Bus's
///   `Label`).
/// - `properties` keys are found case-insensitively; values compare with the SQL `=` of
///   sql-filter.md §5.2 (so `1` matches a uint, int or long 1, strings are case-sensitive), and
///   a missing message property does not match.
/// - A `Null` value in `properties` matches a property that is missing or null, like
///   `IS NULL` (inferred: a correlation filter is equality on values, and SQL's `= NULL` would
///   never match).
/// - An empty filter (no field, no property) matches every message (inferred; the docs ask for
///   at least one field but the .NET client can build an empty one).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CorrelationFilter {
    pub correlation_id: Option<String>,
    pub message_id: Option<String>,
    pub to: Option<String>,
    pub reply_to: Option<String>,
    /// Service Bus's `Label` (the SDKs' `Subject`).
    pub subject: Option<String>,
    pub session_id: Option<String>,
    pub reply_to_session_id: Option<String>,
    pub content_type: Option<String>,
    pub properties: Vec<(String, PropertyValue)>,
}

impl CorrelationFilter {
    /// Whether `message` matches. Allocates nothing.
    pub fn matches(&self, message: &Message) -> bool {
        let p = &message.properties;
        let fields = [
            (&self.correlation_id, &p.correlation_id),
            (&self.message_id, &p.message_id),
            (&self.to, &p.to),
            (&self.reply_to, &p.reply_to),
            (&self.subject, &p.subject),
            (&self.session_id, &p.session_id),
            (&self.reply_to_session_id, &p.reply_to_session_id),
            (&self.content_type, &p.content_type),
        ];
        let fields_match = fields.iter().all(|(want, have)| match want {
            None => true,
            Some(want) => have.as_deref() == Some(want.as_str()),
        });
        fields_match
            && self.properties.iter().all(|(name, want)| {
                let have = lookup(&message.application_properties, name);
                match want {
                    PropertyValue::Null => have.is_none_or(|v| *v == PropertyValue::Null),
                    want => have.is_some_and(|have| {
                        compare(
                            CompareOp::Eq,
                            &Value::from_property(have),
                            &Value::from_property(want),
                        ) == Tri::True
                    }),
                }
            })
    }

    /// Whether no field and no property is set (such a filter matches everything).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl fmt::Display for CorrelationFilter {
    /// The equivalent SQL condition, as the .NET client's `ToString` writes it
    /// (`sys.CorrelationId = 'x' AND color = 'red'`); `1=1` for an empty filter. Property
    /// values of types SQL cannot write (Guid, timestamp, binary, char) print as strings.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fields = [
            ("CorrelationId", &self.correlation_id),
            ("MessageId", &self.message_id),
            ("To", &self.to),
            ("ReplyTo", &self.reply_to),
            ("Label", &self.subject),
            ("SessionId", &self.session_id),
            ("ReplyToSessionId", &self.reply_to_session_id),
            ("ContentType", &self.content_type),
        ];
        let mut first = true;
        let mut sep = |f: &mut fmt::Formatter<'_>| {
            if first {
                first = false;
                Ok(())
            } else {
                f.write_str(" AND ")
            }
        };
        for (name, value) in fields {
            if let Some(v) = value {
                sep(f)?;
                write!(f, "sys.{name} = '{}'", v.replace('\'', "''"))?;
            }
        }
        for (name, value) in &self.properties {
            sep(f)?;
            let property = super::ast::Property::User(name.clone());
            match Value::from_property(value) {
                Value::Null => write!(f, "{property} IS NULL")?,
                Value::Bool(b) => write!(f, "{property} = {}", if b { "TRUE" } else { "FALSE" })?,
                Value::Int(n) => write!(f, "{property} = {n}")?,
                Value::Double(d) => write!(f, "{property} = {d:?}")?,
                other => {
                    let text = other.to_text().unwrap_or_default();
                    write!(f, "{property} = '{}'", text.replace('\'', "''"))?
                }
            }
        }
        if first {
            f.write_str("1=1")?;
        }
        Ok(())
    }
}
