//! The typed syntax tree of filters and actions, and its printer (`Display`), which writes text
//! that parses back to the same tree (a property test checks it).
//!
//! Predicates (three-valued) and expressions (values) are separate types, so the evaluator needs
//! no run-time type checks and "a value where a predicate is needed" is caught at creation.

use std::fmt;

use uuid::Uuid;

use super::lexer::{is_identifier_continue, is_identifier_start};

/// A value written in the text or bound from a parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Null,
    Bool(bool),
    Integer(i64),
    Double(f64),
    String(String),
    /// Parameters only.
    Char(char),
    /// Parameters only.
    Guid(Uuid),
    /// Parameters only: milliseconds since the Unix epoch, UTC.
    DateTime(i64),
    /// Parameters only: milliseconds, may be negative.
    TimeSpan(i64),
}

/// A name a filter reads or an action writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Property {
    /// `name` or `user.name`: an application property, looked up case-insensitively.
    User(String),
    /// `sys.name`.
    System(SystemProperty),
}

/// The `sys.` names (sql-filter.md §4.1), matched case-insensitively.
#[derive(Debug, Clone, PartialEq)]
pub enum SystemProperty {
    MessageId,
    CorrelationId,
    /// `sys.Label`, alias `sys.Subject`.
    Label,
    To,
    ReplyTo,
    ReplyToSessionId,
    SessionId,
    ContentType,
    PartitionKey,
    ViaPartitionKey,
    ScheduledEnqueueTimeUtc,
    TimeToLive,
    ForcePersistence,
    EnqueuedTimeUtc,
    SequenceNumber,
    EnqueuedSequenceNumber,
    DeliveryCount,
    Size,
    ExpiresAtUtc,
    State,
    DeadLetterSource,
    LockedUntilUtc,
    LockToken,
    /// Not a system property: evaluating it fails with a `FilterException` (the docs say the
    /// error comes at evaluation, not at creation).
    Unknown(String),
}

const SYSTEM_NAMES: &[(&str, SystemProperty)] = &[
    ("MessageId", SystemProperty::MessageId),
    ("CorrelationId", SystemProperty::CorrelationId),
    ("Label", SystemProperty::Label),
    ("To", SystemProperty::To),
    ("ReplyTo", SystemProperty::ReplyTo),
    ("ReplyToSessionId", SystemProperty::ReplyToSessionId),
    ("SessionId", SystemProperty::SessionId),
    ("ContentType", SystemProperty::ContentType),
    ("PartitionKey", SystemProperty::PartitionKey),
    ("ViaPartitionKey", SystemProperty::ViaPartitionKey),
    ("ScheduledEnqueueTimeUtc", SystemProperty::ScheduledEnqueueTimeUtc),
    ("TimeToLive", SystemProperty::TimeToLive),
    ("ForcePersistence", SystemProperty::ForcePersistence),
    ("EnqueuedTimeUtc", SystemProperty::EnqueuedTimeUtc),
    ("SequenceNumber", SystemProperty::SequenceNumber),
    ("EnqueuedSequenceNumber", SystemProperty::EnqueuedSequenceNumber),
    ("DeliveryCount", SystemProperty::DeliveryCount),
    ("Size", SystemProperty::Size),
    ("ExpiresAtUtc", SystemProperty::ExpiresAtUtc),
    ("State", SystemProperty::State),
    ("DeadLetterSource", SystemProperty::DeadLetterSource),
    ("LockedUntilUtc", SystemProperty::LockedUntilUtc),
    ("LockToken", SystemProperty::LockToken),
];

impl SystemProperty {
    /// The system property `name` denotes, in any casing. `Subject` is an alias of `Label`
    /// (inferred: users write `sys.Subject` in templates; the service's name is `Label`).
    pub fn from_name(name: &str) -> SystemProperty {
        if name.eq_ignore_ascii_case("Subject") {
            return SystemProperty::Label;
        }
        SYSTEM_NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, p)| p.clone())
            .unwrap_or_else(|| SystemProperty::Unknown(name.to_owned()))
    }

    /// The canonical name.
    pub fn name(&self) -> &str {
        match self {
            SystemProperty::Unknown(name) => name,
            known => SYSTEM_NAMES.iter().find(|(_, p)| p == known).map_or("", |(n, _)| n),
        }
    }

    /// All known system properties (for tests and tools).
    pub fn all() -> impl Iterator<Item = SystemProperty> {
        SYSTEM_NAMES.iter().map(|(_, p)| p.clone())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    Eq,
    /// `<>` or `!=`.
    NotEq,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

/// A three-valued condition.
#[derive(Debug, Clone, PartialEq)]
pub enum Predicate {
    /// Two or more operands.
    And(Vec<Predicate>),
    /// Two or more operands.
    Or(Vec<Predicate>),
    Not(Box<Predicate>),
    Compare(CompareOp, Expr, Expr),
    In {
        expr: Expr,
        list: Vec<Expr>,
        negated: bool,
    },
    Like {
        expr: Expr,
        pattern: Expr,
        escape: Option<Expr>,
        negated: bool,
    },
    IsNull {
        property: Property,
        negated: bool,
    },
    Exists(Property),
}

/// A value.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Literal(Literal),
    /// `@name` (as written) and the value bound at creation.
    Parameter(String, Literal),
    Property(Property),
    /// `newid()`.
    NewId,
    /// `property(e)` / `p(e)`: the application property named by `e`.
    PropertyOf(Box<Expr>),
    /// Unary `-`.
    Negate(Box<Expr>),
    /// Unary `+`: numbers and TimeSpans only.
    Plus(Box<Expr>),
    Arith(ArithOp, Box<Expr>, Box<Expr>),
}

/// One statement of a SQL rule action.
#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    Set(Property, Expr),
    Remove(Property),
}

/// Words that cannot be regular identifiers. `SET` and `REMOVE` are reserved in actions only,
/// but the printer quotes them everywhere.
pub(crate) const KEYWORDS: &[&str] =
    &["AND", "OR", "NOT", "IS", "NULL", "IN", "LIKE", "ESCAPE", "EXISTS", "TRUE", "FALSE"];

pub(crate) fn is_keyword(word: &str) -> bool {
    KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(word))
}

/// Writes a name as a regular identifier when it is one, else as `[…]`.
fn write_name(f: &mut fmt::Formatter<'_>, name: &str) -> fmt::Result {
    let mut chars = name.chars();
    let regular = chars.next().is_some_and(is_identifier_start)
        && chars.all(is_identifier_continue)
        && !is_keyword(name)
        && !name.eq_ignore_ascii_case("SET")
        && !name.eq_ignore_ascii_case("REMOVE");
    if regular {
        f.write_str(name)
    } else {
        f.write_str("[")?;
        f.write_str(&name.replace(']', "]]"))?;
        f.write_str("]")
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // A name that is also a scope word (`sys`) is never followed by `.` when printed.
            Property::User(name) => write_name(f, name),
            Property::System(p) => {
                f.write_str("sys.")?;
                write_name(f, p.name())
            }
        }
    }
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Null => f.write_str("NULL"),
            Literal::Bool(true) => f.write_str("TRUE"),
            Literal::Bool(false) => f.write_str("FALSE"),
            Literal::Integer(v) => write!(f, "{v}"),
            // `{:?}` is the shortest text that reads back to the same double (`1e-7`, `2.5`).
            Literal::Double(v) => write!(f, "{v:?}"),
            Literal::String(s) => write!(f, "'{}'", s.replace('\'', "''")),
            // Not expressible as SQL constants: only parameters hold these, and they print as
            // `@name`. Written here for diagnostics.
            Literal::Char(c) => write!(f, "'{c}'"),
            Literal::Guid(g) => write!(f, "'{g}'"),
            Literal::DateTime(ms) => write!(f, "{ms}"),
            Literal::TimeSpan(ms) => write!(f, "{ms}"),
        }
    }
}

impl CompareOp {
    /// The operator in quotes, as a syntax error names its token: `'<='`.
    pub(crate) fn quoted(self) -> &'static str {
        match self {
            CompareOp::Eq => "'='",
            CompareOp::NotEq => "'<>'",
            CompareOp::Lt => "'<'",
            CompareOp::Le => "'<='",
            CompareOp::Gt => "'>'",
            CompareOp::Ge => "'>='",
        }
    }

    /// The operator as SQL writes it: `<=`.
    fn symbol(self) -> &'static str {
        self.quoted().trim_matches('\'')
    }
}

impl ArithOp {
    fn symbol(self) -> &'static str {
        match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
            ArithOp::Mod => "%",
        }
    }

    /// Binding strength: `* / %` bind tighter than `+ -`.
    fn precedence(self) -> u8 {
        match self {
            ArithOp::Add | ArithOp::Sub => 1,
            ArithOp::Mul | ArithOp::Div | ArithOp::Mod => 2,
        }
    }
}

impl Expr {
    /// 1 for `+ -`, 2 for `* / %`, 3 for unary, 4 for primaries.
    fn precedence(&self) -> u8 {
        match self {
            Expr::Arith(op, _, _) => op.precedence(),
            Expr::Negate(_) | Expr::Plus(_) => 3,
            _ => 4,
        }
    }
}

fn write_expr(f: &mut fmt::Formatter<'_>, e: &Expr, parens: bool) -> fmt::Result {
    if parens {
        write!(f, "({e})")
    } else {
        write!(f, "{e}")
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Literal(l) => l.fmt(f),
            Expr::Parameter(name, _) => f.write_str(name),
            Expr::Property(p) => p.fmt(f),
            Expr::NewId => f.write_str("newid()"),
            Expr::PropertyOf(e) => write!(f, "property({e})"),
            Expr::Negate(e) | Expr::Plus(e) => {
                f.write_str(if matches!(self, Expr::Negate(_)) { "-" } else { "+" })?;
                // A sign on a sign is written `- -x`, not `-(-x)`: parentheses would count
                // towards the nesting limit where the text read had none.
                if e.precedence() == 3 {
                    f.write_str(" ")?;
                }
                write_expr(f, e, e.precedence() < 3)
            }
            Expr::Arith(op, l, r) => {
                let p = op.precedence();
                write_expr(f, l, l.precedence() < p)?;
                write!(f, " {} ", op.symbol())?;
                write_expr(f, r, r.precedence() <= p)
            }
        }
    }
}

impl Predicate {
    /// 1 for OR, 2 for AND, 3 for NOT, 4 for the rest.
    fn precedence(&self) -> u8 {
        match self {
            Predicate::Or(_) => 1,
            Predicate::And(_) => 2,
            Predicate::Not(_) => 3,
            _ => 4,
        }
    }
}

fn write_pred(f: &mut fmt::Formatter<'_>, p: &Predicate, parens: bool) -> fmt::Result {
    if parens {
        write!(f, "({p})")
    } else {
        write!(f, "{p}")
    }
}

impl fmt::Display for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Predicate::And(list) | Predicate::Or(list) => {
                let (word, p) =
                    if matches!(self, Predicate::And(_)) { (" AND ", 2) } else { (" OR ", 1) };
                for (i, child) in list.iter().enumerate() {
                    if i > 0 {
                        f.write_str(word)?;
                    }
                    write_pred(f, child, child.precedence() <= p)?;
                }
                Ok(())
            }
            Predicate::Not(p) => {
                f.write_str("NOT ")?;
                write_pred(f, p, p.precedence() < 3)
            }
            Predicate::Compare(op, l, r) => write!(f, "{l} {} {r}", op.symbol()),
            Predicate::In { expr, list, negated } => {
                write!(f, "{expr} {}IN (", if *negated { "NOT " } else { "" })?;
                for (i, item) in list.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str(")")
            }
            Predicate::Like { expr, pattern, escape, negated } => {
                write!(f, "{expr} {}LIKE {pattern}", if *negated { "NOT " } else { "" })?;
                if let Some(e) = escape {
                    write!(f, " ESCAPE {e}")?;
                }
                Ok(())
            }
            Predicate::IsNull { property, negated } => {
                write!(f, "{property} IS {}NULL", if *negated { "NOT " } else { "" })
            }
            Predicate::Exists(p) => write!(f, "EXISTS({p})"),
        }
    }
}

impl fmt::Display for Statement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Statement::Set(p, e) => write!(f, "SET {p} = {e}"),
            Statement::Remove(p) => write!(f, "REMOVE {p}"),
        }
    }
}
