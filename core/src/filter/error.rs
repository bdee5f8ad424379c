//! The two kinds of failure: an invalid rule, refused when it is created ([`FilterError`]), and a
//! failed evaluation at publish time ([`EvalError`]), which dead-letters the subscription's copy.

use std::fmt;

/// Why a rule's SQL text was refused at creation time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FilterErrorKind {
    /// The text is not in the language (lexical or grammar error, or a value where a predicate
    /// is needed and the reverse).
    Syntax,
    /// The text is longer than [`MAX_EXPRESSION_CHARS`](super::MAX_EXPRESSION_CHARS).
    TooLong,
    /// An action has more than [`MAX_ACTION_STATEMENTS`](super::MAX_ACTION_STATEMENTS)
    /// statements.
    TooManyStatements,
    /// Parentheses, `NOT`s or signs nested deeper than [`MAX_NESTING`](super::MAX_NESTING).
    TooDeep,
    /// `@name` names no entry of the rule's parameters.
    UnknownParameter,
}

/// A rule's SQL filter or action text that cannot be compiled. Its `Display` has the shape of
/// Service Bus's message (`There was an error parsing the SQL expression. [Token line=1,
/// column=0, Token in error= EventType, Additional details= syntax error, unexpected
/// IDENTIFIER, expecting SET, or REMOVE]`), which transports return as the 400 detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    pub kind: FilterErrorKind,
    /// 1-based line of the token in error.
    pub line: u32,
    /// 0-based column (in characters) of the token in error, as Service Bus counts it.
    pub column: u32,
    /// The token's text as written (empty at the end of the text).
    pub token: String,
    /// What is wrong, Bison-style for syntax errors (`syntax error, unexpected …`).
    pub details: String,
}

impl FilterError {
    pub(crate) fn new(
        kind: FilterErrorKind,
        line: u32,
        column: u32,
        token: &str,
        details: impl Into<String>,
    ) -> Self {
        Self { kind, line, column, token: token.to_owned(), details: details.into() }
    }
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "There was an error parsing the SQL expression. [Token line={}, column={}, \
             Token in error= {}, Additional details= {}]",
            self.line, self.column, self.token, self.details
        )
    }
}

impl std::error::Error for FilterError {}

/// Why evaluating a filter or applying an action failed for one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EvalErrorKind {
    /// `sys.X` where X is no system property (docs: "throws a FilterException").
    UnknownSystemProperty,
    /// Integer `/` or `%` by zero.
    DivideByZero,
    /// `LIKE … ESCAPE e` where `e` is not a one-character string.
    InvalidEscape,
    /// An action sets or removes a system property it may not change.
    ReadOnlySystemProperty,
    /// An action stores a value an application property cannot hold (a TimeSpan).
    UnsupportedValue,
}

/// A filter or action that failed on one message. The subscription dead-letters its copy with
/// [`exception_type`](Self::exception_type) as `DeadLetterReason` and
/// [`description`](Self::description) as `DeadLetterErrorDescription` (sql-filter.md §9.2).
///
/// One pointer wide (the details are boxed), so the evaluator's `Result`s stay small on the
/// path that does not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError(Box<EvalErrorInner>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct EvalErrorInner {
    kind: EvalErrorKind,
    description: String,
}

impl EvalError {
    pub(crate) fn new(kind: EvalErrorKind, description: impl Into<String>) -> Self {
        Self(Box::new(EvalErrorInner { kind, description: description.into() }))
    }

    pub fn kind(&self) -> EvalErrorKind {
        self.0.kind
    }

    /// The .NET exception type name Service Bus reports as the dead-letter reason.
    /// `FilterException` is documented for unknown `sys.` names; the other names are inferred:
    /// what the .NET engine would throw (`DivideByZeroException`), and `RuleActionException`
    /// (the classic SDK's type for action failures) for actions.
    pub fn exception_type(&self) -> &'static str {
        match self.0.kind {
            EvalErrorKind::UnknownSystemProperty | EvalErrorKind::InvalidEscape => {
                "FilterException"
            }
            EvalErrorKind::DivideByZero => "DivideByZeroException",
            EvalErrorKind::ReadOnlySystemProperty | EvalErrorKind::UnsupportedValue => {
                "RuleActionException"
            }
        }
    }

    pub fn description(&self) -> &str {
        &self.0.description
    }
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.exception_type(), self.0.description)
    }
}

impl std::error::Error for EvalError {}
