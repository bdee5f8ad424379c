//! Tokens to a typed tree: recursive descent with one function per precedence level
//! (sql-filter.md §3). Tightest first: primary, unary `+ -`, `* / %`, binary `+ -`, the
//! comparisons, `[NOT] LIKE`, `[NOT] IN` and `IS [NOT] NULL` (non-associative), `NOT`, `AND`,
//! `OR`.
//!
//! `(` starts both a parenthesised predicate and a parenthesised expression, so every level
//! returns a [`Node`] that is either, and each operator checks its operands' kind: a value where
//! a predicate is needed (`flag`, `TRUE`, `a AND 1`) or the reverse (`(a = 1) = TRUE`) is a
//! creation error.

use super::ast::{
    is_keyword, ArithOp, CompareOp, Expr, Literal, Predicate, Property, Statement, SystemProperty,
};
use super::error::{FilterError, FilterErrorKind};
use super::lexer::{tokenize, Token, TokenKind};
use super::{Parameters, MAX_ACTION_STATEMENTS, MAX_EXPRESSION_CHARS, MAX_NESTING};

enum Node {
    Pred(Predicate),
    Val(Expr),
}

struct Parser<'s, 'p> {
    source: &'s str,
    tokens: Vec<Token>,
    pos: usize,
    parameters: &'p Parameters,
    depth: usize,
}

/// Checks the length limit, then tokenizes.
fn parser<'s, 'p>(
    source: &'s str,
    parameters: &'p Parameters,
) -> Result<Parser<'s, 'p>, FilterError> {
    let chars = source.chars().count();
    if chars > MAX_EXPRESSION_CHARS {
        let details = format!(
            "the expression is {chars} characters long; the maximum is {MAX_EXPRESSION_CHARS}"
        );
        return Err(FilterError::new(FilterErrorKind::TooLong, 1, 0, "", details));
    }
    Ok(Parser { source, tokens: tokenize(source)?, pos: 0, parameters, depth: 0 })
}

/// Parses a whole filter: one predicate.
pub(crate) fn parse_filter(
    source: &str,
    parameters: &Parameters,
) -> Result<Predicate, FilterError> {
    let mut p = parser(source, parameters)?;
    let first = p.pos;
    let node = p.or()?;
    if !p.at(&TokenKind::Eof) {
        return Err(p.unexpected("AND, or OR"));
    }
    p.predicate_at(node, first, "a filter must be a condition, not a value")
}

/// Parses a whole action: `SET`/`REMOVE` statements, `;` between them optional.
pub(crate) fn parse_action(
    source: &str,
    parameters: &Parameters,
) -> Result<Vec<Statement>, FilterError> {
    let mut p = parser(source, parameters)?;
    let mut statements = Vec::new();
    loop {
        if p.at(&TokenKind::Eof) && !statements.is_empty() {
            return Ok(statements);
        }
        let statement = if p.keyword("SET") {
            let target = p.target()?;
            p.expect(&TokenKind::Compare(CompareOp::Eq), "'='")?;
            let at = p.pos;
            let node = p.additive()?;
            Statement::Set(target, p.value_at(node, at, "SET needs a value, not a condition")?)
        } else if p.keyword("REMOVE") {
            Statement::Remove(p.target()?)
        } else {
            return Err(p.unexpected("SET, or REMOVE"));
        };
        if statements.len() == MAX_ACTION_STATEMENTS {
            let details = format!("an action may have at most {MAX_ACTION_STATEMENTS} statements");
            return Err(p.error_at(
                p.pos.saturating_sub(1),
                FilterErrorKind::TooManyStatements,
                details,
            ));
        }
        statements.push(statement);
        // One optional `;` after each statement.
        if p.at(&TokenKind::Semicolon) {
            p.advance();
        }
    }
}

impl Parser<'_, '_> {
    fn token(&self) -> &Token {
        // The last token is always Eof and `pos` never moves past it.
        &self.tokens[self.pos.min(self.tokens.len() - 1)]
    }

    fn peek_kind(&self, ahead: usize) -> &TokenKind {
        let i = (self.pos + ahead).min(self.tokens.len() - 1);
        &self.tokens[i].kind
    }

    fn at(&self, kind: &TokenKind) -> bool {
        &self.token().kind == kind
    }

    fn advance(&mut self) {
        if self.pos < self.tokens.len() - 1 {
            self.pos += 1;
        }
    }

    /// Whether the current token is the keyword `word`; consumes it if so.
    fn keyword(&mut self, word: &str) -> bool {
        if self.is_keyword_at(0, word) {
            self.advance();
            true
        } else {
            false
        }
    }

    fn is_keyword_at(&self, ahead: usize, word: &str) -> bool {
        matches!(self.peek_kind(ahead), TokenKind::Identifier(w) if w.eq_ignore_ascii_case(word))
    }

    fn expect(&mut self, kind: &TokenKind, expecting: &str) -> Result<(), FilterError> {
        if self.at(kind) {
            self.advance();
            Ok(())
        } else {
            Err(self.unexpected(expecting))
        }
    }

    fn error_at(&self, index: usize, kind: FilterErrorKind, details: String) -> FilterError {
        let t = &self.tokens[index.min(self.tokens.len() - 1)];
        let text = self.source.get(t.start..t.end).unwrap_or("");
        FilterError::new(kind, t.line, t.column, text, details)
    }

    fn error(&self, details: &str) -> FilterError {
        self.error_at(self.pos, FilterErrorKind::Syntax, format!("syntax error, {details}"))
    }

    /// `syntax error, unexpected X, expecting Y`, at the current token.
    fn unexpected(&self, expecting: &str) -> FilterError {
        let found = match &self.token().kind {
            TokenKind::Identifier(w) if is_keyword(w) || w.eq_ignore_ascii_case("SET") => {
                w.to_ascii_uppercase()
            }
            TokenKind::Identifier(w) if w.eq_ignore_ascii_case("REMOVE") => "REMOVE".to_owned(),
            other => other.describe().to_owned(),
        };
        let details = format!("syntax error, unexpected {found}, expecting {expecting}");
        self.error_at(self.pos, FilterErrorKind::Syntax, details)
    }

    /// Enters one level of nesting (parentheses, `NOT`, a sign).
    fn nest(&mut self) -> Result<(), FilterError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            let details = format!("expressions may nest at most {MAX_NESTING} levels deep");
            return Err(self.error_at(self.pos, FilterErrorKind::TooDeep, details));
        }
        Ok(())
    }

    /// `node` as a predicate; the error points at the current token (the operator).
    fn predicate(&self, node: Node, details: &str) -> Result<Predicate, FilterError> {
        match node {
            Node::Pred(p) => Ok(p),
            Node::Val(_) => Err(self.error(details)),
        }
    }

    fn or(&mut self) -> Result<Node, FilterError> {
        let first = self.and()?;
        if !self.is_keyword_at(0, "OR") {
            return Ok(first);
        }
        let mut list = vec![self.predicate(first, "OR needs a condition on its left")?];
        while self.keyword("OR") {
            let at = self.pos;
            let next = self.and()?;
            list.push(self.predicate_at(next, at, "OR needs a condition on its right")?);
        }
        Ok(Node::Pred(Predicate::Or(list)))
    }

    fn and(&mut self) -> Result<Node, FilterError> {
        let first = self.not()?;
        if !self.is_keyword_at(0, "AND") {
            return Ok(first);
        }
        let mut list = vec![self.predicate(first, "AND needs a condition on its left")?];
        while self.keyword("AND") {
            let at = self.pos;
            let next = self.not()?;
            list.push(self.predicate_at(next, at, "AND needs a condition on its right")?);
        }
        Ok(Node::Pred(Predicate::And(list)))
    }

    fn predicate_at(&self, node: Node, at: usize, details: &str) -> Result<Predicate, FilterError> {
        match node {
            Node::Pred(p) => Ok(p),
            Node::Val(_) => {
                Err(self.error_at(at, FilterErrorKind::Syntax, format!("syntax error, {details}")))
            }
        }
    }

    fn not(&mut self) -> Result<Node, FilterError> {
        if !self.keyword("NOT") {
            return self.comparison();
        }
        self.nest()?;
        let at = self.pos;
        let operand = self.not()?;
        let operand = self.predicate_at(operand, at, "NOT needs a condition")?;
        self.depth -= 1;
        Ok(Node::Pred(Predicate::Not(Box::new(operand))))
    }

    fn comparison(&mut self) -> Result<Node, FilterError> {
        let at = self.pos;
        let left = self.additive()?;
        if let TokenKind::Compare(op) = self.token().kind {
            let left = self.value_at(left, at, "a condition cannot be compared")?;
            self.advance();
            let at = self.pos;
            let right = self.additive()?;
            let right = self.value_at(right, at, "a condition cannot be compared")?;
            return Ok(Node::Pred(Predicate::Compare(op, left, right)));
        }
        let negated = self.is_keyword_at(0, "NOT")
            && (self.is_keyword_at(1, "IN") || self.is_keyword_at(1, "LIKE"));
        if negated {
            self.advance();
        }
        if self.keyword("IN") {
            let expr = self.value_at(left, at, "IN needs a value on its left")?;
            self.expect(&TokenKind::LParen, "'('")?;
            let mut list = Vec::new();
            loop {
                let at = self.pos;
                let item = self.additive()?;
                list.push(self.value_at(item, at, "IN lists values")?);
                if self.at(&TokenKind::Comma) {
                    self.advance();
                } else {
                    self.expect(&TokenKind::RParen, "',', or ')'")?;
                    break;
                }
            }
            return Ok(Node::Pred(Predicate::In { expr, list, negated }));
        }
        if self.keyword("LIKE") {
            let expr = self.value_at(left, at, "LIKE needs a value on its left")?;
            let at = self.pos;
            let pattern = self.additive()?;
            let pattern = self.value_at(pattern, at, "LIKE needs a pattern")?;
            let escape = if self.keyword("ESCAPE") {
                let at = self.pos;
                let escape = self.additive()?;
                Some(self.value_at(escape, at, "ESCAPE needs a value")?)
            } else {
                None
            };
            return Ok(Node::Pred(Predicate::Like { expr, pattern, escape, negated }));
        }
        if self.keyword("IS") {
            let negated = self.keyword("NOT");
            if !self.keyword("NULL") {
                return Err(self.unexpected(if negated { "NULL" } else { "NOT, or NULL" }));
            }
            return match left {
                Node::Val(Expr::Property(property)) => {
                    Ok(Node::Pred(Predicate::IsNull { property, negated }))
                }
                _ => Err(self.error_at(
                    at,
                    FilterErrorKind::Syntax,
                    "syntax error, IS NULL applies to a property only".to_owned(),
                )),
            };
        }
        Ok(left)
    }

    fn value_at(&self, node: Node, at: usize, details: &str) -> Result<Expr, FilterError> {
        match node {
            Node::Val(e) => Ok(e),
            Node::Pred(_) => {
                Err(self.error_at(at, FilterErrorKind::Syntax, format!("syntax error, {details}")))
            }
        }
    }

    fn additive(&mut self) -> Result<Node, FilterError> {
        let at = self.pos;
        let mut left = self.multiplicative()?;
        loop {
            let op = match self.token().kind {
                TokenKind::Plus => ArithOp::Add,
                TokenKind::Minus => ArithOp::Sub,
                _ => return Ok(left),
            };
            left = self.arith(op, left, at, Self::multiplicative)?;
        }
    }

    fn multiplicative(&mut self) -> Result<Node, FilterError> {
        let at = self.pos;
        let mut left = self.unary()?;
        loop {
            let op = match self.token().kind {
                TokenKind::Star => ArithOp::Mul,
                TokenKind::Slash => ArithOp::Div,
                TokenKind::Percent => ArithOp::Mod,
                _ => return Ok(left),
            };
            left = self.arith(op, left, at, Self::unary)?;
        }
    }

    /// `left op right`, with `right` parsed by `next`; the operator is the current token.
    fn arith(
        &mut self,
        op: ArithOp,
        left: Node,
        left_at: usize,
        next: fn(&mut Self) -> Result<Node, FilterError>,
    ) -> Result<Node, FilterError> {
        let left = self.value_at(left, left_at, "arithmetic needs values")?;
        self.advance();
        let at = self.pos;
        let right = next(self)?;
        let right = self.value_at(right, at, "arithmetic needs values")?;
        Ok(Node::Val(Expr::Arith(op, Box::new(left), Box::new(right))))
    }

    fn unary(&mut self) -> Result<Node, FilterError> {
        let negate = match self.token().kind {
            TokenKind::Minus => true,
            TokenKind::Plus => false,
            _ => return self.primary(),
        };
        self.advance();
        self.nest()?;
        let at = self.pos;
        let operand = self.unary()?;
        let operand = Box::new(self.value_at(operand, at, "a sign needs a value")?);
        self.depth -= 1;
        Ok(Node::Val(if negate { Expr::Negate(operand) } else { Expr::Plus(operand) }))
    }

    fn primary(&mut self) -> Result<Node, FilterError> {
        const EXPECTING: &str = "a constant, a property, a parameter, a function, or '('";
        let node = match self.token().kind.clone() {
            TokenKind::Integer(v) => Node::Val(Expr::Literal(Literal::Integer(v))),
            TokenKind::Double(v) => Node::Val(Expr::Literal(Literal::Double(v))),
            TokenKind::String(s) => Node::Val(Expr::Literal(Literal::String(s))),
            TokenKind::Parameter(name) => {
                let Some(value) = lookup_parameter(self.parameters, &name) else {
                    let details = format!("the parameter {name} is not defined");
                    return Err(self.error_at(
                        self.pos,
                        FilterErrorKind::UnknownParameter,
                        details,
                    ));
                };
                Node::Val(Expr::Parameter(name, value))
            }
            TokenKind::LParen => {
                self.advance();
                self.nest()?;
                let inner = self.or()?;
                self.expect(&TokenKind::RParen, "')'")?;
                self.depth -= 1;
                return Ok(inner);
            }
            TokenKind::QuotedIdentifier(name) => Node::Val(Expr::Property(Property::User(name))),
            TokenKind::Identifier(word) => return self.word(word),
            _ => return Err(self.unexpected(EXPECTING)),
        };
        self.advance();
        Ok(node)
    }

    /// A regular identifier in operand position: a constant keyword, `EXISTS(…)`, a function,
    /// a scoped or plain property.
    fn word(&mut self, word: String) -> Result<Node, FilterError> {
        let literal = if word.eq_ignore_ascii_case("TRUE") {
            Some(Literal::Bool(true))
        } else if word.eq_ignore_ascii_case("FALSE") {
            Some(Literal::Bool(false))
        } else if word.eq_ignore_ascii_case("NULL") {
            Some(Literal::Null)
        } else {
            None
        };
        if let Some(literal) = literal {
            self.advance();
            return Ok(Node::Val(Expr::Literal(literal)));
        }
        if word.eq_ignore_ascii_case("EXISTS") {
            self.advance();
            self.expect(&TokenKind::LParen, "'('")?;
            let property = self.property()?;
            self.expect(&TokenKind::RParen, "')'")?;
            return Ok(Node::Pred(Predicate::Exists(property)));
        }
        if is_keyword(&word) {
            return Err(self.unexpected("a constant, a property, a parameter, a function, or '('"));
        }
        if self.peek_kind(1) == &TokenKind::LParen {
            return self.function(&word);
        }
        Ok(Node::Val(Expr::Property(self.property()?)))
    }

    /// `newid()`, `property(e)`, `p(e)`; the name is the current token, `(` the next.
    fn function(&mut self, name: &str) -> Result<Node, FilterError> {
        if name.eq_ignore_ascii_case("newid") {
            self.advance();
            self.advance();
            self.expect(&TokenKind::RParen, "')'")?;
            return Ok(Node::Val(Expr::NewId));
        }
        if name.eq_ignore_ascii_case("property") || name.eq_ignore_ascii_case("p") {
            self.advance();
            self.advance();
            self.nest()?;
            let at = self.pos;
            let arg = self.additive()?;
            let arg = self.value_at(arg, at, "property() needs a value")?;
            self.expect(&TokenKind::RParen, "')'")?;
            self.depth -= 1;
            return Ok(Node::Val(Expr::PropertyOf(Box::new(arg))));
        }
        Err(self.error(&format!("unknown function {name}")))
    }

    /// `[sys. | user.] name`.
    fn property(&mut self) -> Result<Property, FilterError> {
        let token = self.token().kind.clone();
        match token {
            TokenKind::QuotedIdentifier(name) => {
                self.advance();
                Ok(Property::User(name))
            }
            TokenKind::Identifier(word) => {
                if self.peek_kind(1) == &TokenKind::Dot {
                    let system = if word.eq_ignore_ascii_case("sys") {
                        true
                    } else if word.eq_ignore_ascii_case("user") {
                        false
                    } else {
                        return Err(self.error(&format!(
                            "unknown scope {word} (names with '.' are written [{word}.…])"
                        )));
                    };
                    self.advance();
                    self.advance();
                    let name = self.name()?;
                    return Ok(if system {
                        Property::System(SystemProperty::from_name(&name))
                    } else {
                        Property::User(name)
                    });
                }
                if is_keyword(&word) {
                    return Err(self.unexpected("IDENTIFIER"));
                }
                self.advance();
                Ok(Property::User(word))
            }
            _ => Err(self.unexpected("IDENTIFIER")),
        }
    }

    /// A name after a scope: any identifier that is not a keyword.
    fn name(&mut self) -> Result<String, FilterError> {
        match self.token().kind.clone() {
            TokenKind::QuotedIdentifier(name) => {
                self.advance();
                Ok(name)
            }
            TokenKind::Identifier(word) if !is_keyword(&word) => {
                self.advance();
                Ok(word)
            }
            _ => Err(self.unexpected("IDENTIFIER")),
        }
    }

    /// The target of `SET` / `REMOVE`: a property; `SET` and `REMOVE` are reserved here.
    fn target(&mut self) -> Result<Property, FilterError> {
        if self.is_keyword_at(0, "SET") || self.is_keyword_at(0, "REMOVE") {
            return Err(self.unexpected("IDENTIFIER"));
        }
        self.property()
    }
}

/// The parameter `name` (with `@`), matched case-insensitively; a key written without the `@`
/// is accepted too.
fn lookup_parameter(parameters: &Parameters, name: &str) -> Option<Literal> {
    let bare = &name[1..];
    parameters
        .get(name)
        .or_else(|| {
            parameters.iter().find_map(|(k, v)| {
                let k = k.strip_prefix('@').unwrap_or(k);
                super::value::eq_ignore_case(k, bare).then_some(v)
            })
        })
        .map(|v| v.to_literal())
}
