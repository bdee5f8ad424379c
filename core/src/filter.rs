//! Subscription rules' filters and actions: Service Bus's SQL filter language, SQL rule actions
//! and correlation filters (the contract is `shared/protocol/sql-filter.md`).
//!
//! A rule's text is compiled once, when the rule is created ([`SqlFilter::parse`],
//! [`SqlRuleAction::parse`]): an invalid text is refused then with a [`FilterError`] shaped like
//! Service Bus's message. Evaluation at publish time ([`Filter::evaluate`]) reads only the
//! message's properties, never its body, and allocates nothing per rule (strings are borrowed
//! from the message and the rule). It fails only with an [`EvalError`] (an unknown `sys.` name,
//! integer division by zero, a bad `ESCAPE`), which dead-letters that subscription's copy.
//!
//! - `lexer` (text to tokens) and `parser` (recursive descent, one function per precedence
//!   level) build the typed tree of `ast`, whose `Display` prints text that parses back to it.
//! - `value` (three-valued truth, comparison, arithmetic, LIKE) and `eval` (properties and
//!   `sys.` names) evaluate it.
//! - `action` applies SET/REMOVE; `correlation` matches correlation filters.
//!
//! Choices where the contract is silent or inferred are documented where they are made; the
//! main ones: a filter must be a condition (`TRUE` or `flag` alone are refused); comparisons
//! do not chain; property and parameter names match case-insensitively; a value compared with
//! a value of another kind is unknown, never an error.
//!
//! A [`FilterError`] carries what Service Bus's message does (line, 0-based column, token,
//! Bison-style details); the limits on length ([`MAX_EXPRESSION_CHARS`]), action statements
//! ([`MAX_ACTION_STATEMENTS`]) and nesting ([`MAX_NESTING`]) are creation errors too. `tests`
//! holds the contract's test table, one named test per case, and round-trip and no-panic
//! property tests; `cargo bench -p ironbus-core --bench filter` measures the time and heap
//! bytes of one evaluation.
//!
//! **Architecture Invariant:** filters see properties only, never the body; evaluation
//! allocates nothing per rule (strings are borrowed from the message and the rule; only `+` on
//! strings allocates) and never panics: any text either compiles or is refused with a
//! [`FilterError`], and what compiles prints as text that compiles to the same tree.

mod action;
mod ast;
mod correlation;
mod error;
mod eval;
mod lexer;
mod parser;
#[cfg(test)]
mod tests;
mod value;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

pub use action::{ActionEffect, SqlRuleAction, RULE_NAME_PROPERTY};
pub use ast::{ArithOp, CompareOp, Expr, Literal, Predicate, Property, Statement, SystemProperty};
pub use correlation::CorrelationFilter;
pub use error::{EvalError, EvalErrorKind, FilterError, FilterErrorKind};
pub use value::{Tri, Value};

use crate::message::{Message, MessageState, PropertyValue};
use crate::types::{SequenceNumber, Timestamp};

/// The longest filter or action text, in characters (Service Bus's quota).
pub const MAX_EXPRESSION_CHARS: usize = 1024;
/// The most statements one action may have (Service Bus's quota).
pub const MAX_ACTION_STATEMENTS: usize = 32;
/// How deep parentheses, `NOT`s, signs and `property()` calls may nest. Service Bus documents
/// no bound; this one keeps the parser's recursion (and the evaluator's) far from the stack's
/// end on any input, and no real filter comes near it.
pub const MAX_NESTING: usize = 64;

/// A rule parameter's value (ATOM rules only: `<Parameters>`). Service Bus allows string, int,
/// long, bool, double, DateTime and TimeSpan.
#[derive(Debug, Clone, PartialEq)]
pub enum ParameterValue {
    Value(PropertyValue),
    /// A TimeSpan (which [`PropertyValue`] cannot hold).
    TimeSpan(Duration),
    /// A negative TimeSpan.
    NegativeTimeSpan(Duration),
}

impl From<PropertyValue> for ParameterValue {
    fn from(v: PropertyValue) -> Self {
        ParameterValue::Value(v)
    }
}

impl ParameterValue {
    /// As a constant of the language. Binary values (not an allowed parameter type) become
    /// null; a ulong above `i64::MAX` becomes a double.
    fn to_literal(&self) -> Literal {
        let millis = |d: &Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        match self {
            ParameterValue::TimeSpan(d) => Literal::TimeSpan(millis(d)),
            ParameterValue::NegativeTimeSpan(d) => Literal::TimeSpan(-millis(d)),
            ParameterValue::Value(v) => match v {
                PropertyValue::Null | PropertyValue::Binary(_) => Literal::Null,
                PropertyValue::Bool(b) => Literal::Bool(*b),
                PropertyValue::UByte(n) => Literal::Integer((*n).into()),
                PropertyValue::UShort(n) => Literal::Integer((*n).into()),
                PropertyValue::UInt(n) => Literal::Integer((*n).into()),
                PropertyValue::ULong(n) => {
                    i64::try_from(*n).map_or(Literal::Double(*n as f64), Literal::Integer)
                }
                PropertyValue::Byte(n) => Literal::Integer((*n).into()),
                PropertyValue::Short(n) => Literal::Integer((*n).into()),
                PropertyValue::Int(n) => Literal::Integer((*n).into()),
                PropertyValue::Long(n) => Literal::Integer(*n),
                PropertyValue::Float(n) => Literal::Double((*n).into()),
                PropertyValue::Double(n) => Literal::Double(*n),
                PropertyValue::Char(c) => Literal::Char(*c),
                PropertyValue::Timestamp(t) | PropertyValue::LocalTimestamp(t) => {
                    Literal::DateTime(t.as_millis())
                }
                PropertyValue::TimeSpan(ms) => Literal::TimeSpan(*ms),
                PropertyValue::Uuid(u) => Literal::Guid(*u),
                PropertyValue::String(s) => Literal::String(s.clone()),
            },
        }
    }
}

/// A rule's parameters by name, the `@` included (`@dtParam`); matched case-insensitively.
pub type Parameters = BTreeMap<String, ParameterValue>;

/// What the broker knows about a message at publish time, beyond the message itself: the
/// `sys.` values it assigns (sql-filter.md §4.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublishInfo<'a> {
    pub enqueued_time: Timestamp,
    pub sequence_number: SequenceNumber,
    /// The original sequence number of an auto-forwarded message, else 0.
    pub enqueued_sequence_number: SequenceNumber,
    /// The message's size in bytes (`Message::size`).
    pub size: u64,
    /// 0 at filter time.
    pub delivery_count: u32,
    pub state: MessageState,
    pub via_partition_key: Option<&'a str>,
    /// Set on messages forwarded from a dead-letter queue.
    pub dead_letter_source: Option<&'a str>,
}

/// A message and its publish-time values: what a filter reads.
#[derive(Debug, Clone, Copy)]
pub struct EvalContext<'a> {
    pub message: &'a Message,
    pub publish: PublishInfo<'a>,
}

impl<'a> EvalContext<'a> {
    /// `message` with default publish-time values (time 0, sequence number 0, its size).
    pub fn new(message: &'a Message) -> Self {
        let publish = PublishInfo { size: message.size() as u64, ..PublishInfo::default() };
        Self { message, publish }
    }

    pub fn with_publish(message: &'a Message, publish: PublishInfo<'a>) -> Self {
        Self { message, publish }
    }
}

/// A compiled SQL filter.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlFilter {
    text: String,
    predicate: Predicate,
}

impl SqlFilter {
    /// Compiles `text` (at most 1,024 characters) with its `parameters`; every `@name` in the
    /// text must be among them.
    pub fn parse(text: &str, parameters: &Parameters) -> Result<Self, FilterError> {
        let predicate = parser::parse_filter(text, parameters)?;
        Ok(Self { text: text.to_owned(), predicate })
    }

    /// The text the filter was created with.
    pub fn expression(&self) -> &str {
        &self.text
    }

    pub fn predicate(&self) -> &Predicate {
        &self.predicate
    }

    /// The filter's truth for one message; only [`Tri::True`] is a match.
    pub fn evaluate(&self, ctx: &EvalContext<'_>) -> Result<Tri, EvalError> {
        eval::predicate(&self.predicate, ctx)
    }

    /// Whether the message matches.
    pub fn matches(&self, ctx: &EvalContext<'_>) -> Result<bool, EvalError> {
        Ok(self.evaluate(ctx)? == Tri::True)
    }
}

impl fmt::Display for SqlFilter {
    /// The compiled predicate, printed canonically (parses back to the same filter).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.predicate.fmt(f)
    }
}

/// A subscription rule's filter.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    True,
    False,
    Sql(SqlFilter),
    Correlation(CorrelationFilter),
}

impl Filter {
    /// Whether the message matches: TRUE only; FALSE and unknown do not.
    pub fn evaluate(&self, ctx: &EvalContext<'_>) -> Result<bool, EvalError> {
        match self {
            Filter::True => Ok(true),
            Filter::False => Ok(false),
            Filter::Sql(sql) => sql.matches(ctx),
            Filter::Correlation(c) => Ok(c.matches(ctx.message)),
        }
    }
}
