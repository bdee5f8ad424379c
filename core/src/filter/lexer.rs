//! Text to tokens (sql-filter.md §2). Keywords are not tokens of their own: they are regular
//! identifiers the parser recognises case-insensitively, so `p`, `sys` and `user` stay usable as
//! names where they are not followed by `(` or `.`.

use super::ast::CompareOp;
use super::error::{FilterError, FilterErrorKind};

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TokenKind {
    /// A regular identifier (possibly a keyword).
    Identifier(String),
    /// A `[…]` or `"…"` identifier, unescaped; never a keyword.
    QuotedIdentifier(String),
    String(String),
    Integer(i64),
    Double(f64),
    /// `@name`, with the `@`.
    Parameter(String),
    LParen,
    RParen,
    Comma,
    Dot,
    Semicolon,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    /// `=`, `<>` or `!=`, `<`, `<=`, `>`, `>=`.
    Compare(CompareOp),
    Eof,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub kind: TokenKind,
    pub line: u32,
    pub column: u32,
    /// Byte range of the token in the source.
    pub start: usize,
    pub end: usize,
}

impl TokenKind {
    /// The token's class as a Bison-style message names it.
    pub(crate) fn describe(&self) -> &'static str {
        match self {
            TokenKind::Identifier(_) | TokenKind::QuotedIdentifier(_) => "IDENTIFIER",
            TokenKind::String(_) => "STRING",
            TokenKind::Integer(_) => "INTEGER",
            TokenKind::Double(_) => "DECIMAL",
            TokenKind::Parameter(_) => "PARAMETER",
            TokenKind::LParen => "'('",
            TokenKind::RParen => "')'",
            TokenKind::Comma => "','",
            TokenKind::Dot => "'.'",
            TokenKind::Semicolon => "';'",
            TokenKind::Plus => "'+'",
            TokenKind::Minus => "'-'",
            TokenKind::Star => "'*'",
            TokenKind::Slash => "'/'",
            TokenKind::Percent => "'%'",
            TokenKind::Compare(op) => op.quoted(),
            TokenKind::Eof => "end of expression",
        }
    }
}

/// A character that may start a regular identifier (.NET `Char.IsLetter`, approximately).
pub(crate) fn is_identifier_start(c: char) -> bool {
    c.is_alphabetic()
}

/// A character that may continue a regular identifier: letters, digits, `_`.
pub(crate) fn is_identifier_continue(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

struct Lexer<'s> {
    source: &'s str,
    /// Byte offset of the next character.
    pos: usize,
    line: u32,
    column: u32,
}

/// Splits `source` into tokens, ending with [`TokenKind::Eof`].
pub(crate) fn tokenize(source: &str) -> Result<Vec<Token>, FilterError> {
    let mut lexer = Lexer { source, pos: 0, line: 1, column: 0 };
    let mut tokens = Vec::new();
    loop {
        lexer.skip_whitespace();
        let (start, line, column) = (lexer.pos, lexer.line, lexer.column);
        let kind = match lexer.peek() {
            None => TokenKind::Eof,
            Some(c) => lexer.token(c)?,
        };
        let done = kind == TokenKind::Eof;
        tokens.push(Token { kind, line, column, start, end: lexer.pos });
        if done {
            return Ok(tokens);
        }
    }
}

impl Lexer<'_> {
    fn peek(&self) -> Option<char> {
        self.source[self.pos..].chars().next()
    }

    fn peek_second(&self) -> Option<char> {
        self.source[self.pos..].chars().nth(1)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        if c == '\n' {
            self.line += 1;
            self.column = 0;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t' | '\r' | '\n')) {
            self.bump();
        }
    }

    fn error(&self, line: u32, column: u32, start: usize, details: &str) -> FilterError {
        let end = self.pos.max(start);
        let token = self.source.get(start..end).unwrap_or("");
        FilterError::new(FilterErrorKind::Syntax, line, column, token, details)
    }

    fn token(&mut self, c: char) -> Result<TokenKind, FilterError> {
        let (start, line, column) = (self.pos, self.line, self.column);
        if c.is_ascii_digit() {
            return self.number();
        }
        if is_identifier_start(c) {
            return Ok(TokenKind::Identifier(self.word().to_owned()));
        }
        self.bump();
        let kind = match c {
            '(' => TokenKind::LParen,
            ')' => TokenKind::RParen,
            ',' => TokenKind::Comma,
            '.' => TokenKind::Dot,
            ';' => TokenKind::Semicolon,
            '+' => TokenKind::Plus,
            '-' => TokenKind::Minus,
            '*' => TokenKind::Star,
            '/' => TokenKind::Slash,
            '%' => TokenKind::Percent,
            '=' => TokenKind::Compare(CompareOp::Eq),
            '<' => TokenKind::Compare(match self.peek() {
                Some('>') => {
                    self.bump();
                    CompareOp::NotEq
                }
                Some('=') => {
                    self.bump();
                    CompareOp::Le
                }
                _ => CompareOp::Lt,
            }),
            '>' => TokenKind::Compare(match self.peek() {
                Some('=') => {
                    self.bump();
                    CompareOp::Ge
                }
                _ => CompareOp::Gt,
            }),
            '!' if self.peek() == Some('=') => {
                self.bump();
                TokenKind::Compare(CompareOp::NotEq)
            }
            '\'' => TokenKind::String(self.quoted('\'', start, line, column, "string")?),
            '[' => {
                let name = self.quoted(']', start, line, column, "identifier")?;
                self.identifier(name, start, line, column)?
            }
            '"' => {
                let name = self.quoted('"', start, line, column, "identifier")?;
                self.identifier(name, start, line, column)?
            }
            '@' => {
                if !self.peek().is_some_and(is_identifier_continue) {
                    return Err(self.error(line, column, start, "syntax error, '@' needs a name"));
                }
                let name = self.word();
                TokenKind::Parameter(format!("@{name}"))
            }
            _ => return Err(self.error(line, column, start, "syntax error, unexpected character")),
        };
        Ok(kind)
    }

    fn identifier(
        &self,
        name: String,
        start: usize,
        line: u32,
        column: u32,
    ) -> Result<TokenKind, FilterError> {
        if name.is_empty() {
            return Err(self.error(line, column, start, "syntax error, empty identifier"));
        }
        Ok(TokenKind::QuotedIdentifier(name))
    }

    /// Letters, digits and `_` from here.
    fn word(&mut self) -> &str {
        let start = self.pos;
        while self.peek().is_some_and(is_identifier_continue) {
            self.bump();
        }
        &self.source[start..self.pos]
    }

    /// The rest of a literal opened by `close` (already consumed); `close` twice is one `close`.
    fn quoted(
        &mut self,
        close: char,
        start: usize,
        line: u32,
        column: u32,
        what: &str,
    ) -> Result<String, FilterError> {
        let mut text = String::new();
        loop {
            match self.bump() {
                None => {
                    let details = format!("syntax error, unterminated {what}");
                    return Err(self.error(line, column, start, &details));
                }
                Some(c) if c == close => {
                    if self.peek() == Some(close) {
                        self.bump();
                        text.push(close);
                    } else {
                        return Ok(text);
                    }
                }
                Some(c) => text.push(c),
            }
        }
    }

    /// `digits [. digits] [E [+|-] digits]`: an Int64 without `.` or exponent, else a double.
    /// Signs are operators, so `-9223372036854775808` is out of range (inferred, as the
    /// contract says: out-of-range integers are a parse error); a double that overflows to
    /// infinity is refused too.
    fn number(&mut self) -> Result<TokenKind, FilterError> {
        let (start, line, column) = (self.pos, self.line, self.column);
        let mut is_double = false;
        self.digits();
        if self.peek() == Some('.') && self.peek_second().is_some_and(|c| c.is_ascii_digit()) {
            is_double = true;
            self.bump();
            self.digits();
        }
        if matches!(self.peek(), Some('e' | 'E')) {
            let sign = matches!(self.peek_second(), Some('+' | '-'));
            let after = self.source[self.pos..].chars().nth(if sign { 2 } else { 1 });
            if after.is_some_and(|c| c.is_ascii_digit()) {
                is_double = true;
                self.bump();
                if sign {
                    self.bump();
                }
                self.digits();
            }
        }
        let text = &self.source[start..self.pos];
        if is_double {
            match text.parse::<f64>() {
                Ok(v) if v.is_finite() => Ok(TokenKind::Double(v)),
                _ => Err(self.error(line, column, start, "syntax error, number out of range")),
            }
        } else {
            match text.parse::<i64>() {
                Ok(v) => Ok(TokenKind::Integer(v)),
                Err(_) => Err(self.error(
                    line,
                    column,
                    start,
                    "syntax error, integer constant out of the Int64 range",
                )),
            }
        }
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
        }
    }
}
