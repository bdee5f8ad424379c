//! Values during evaluation, three-valued truth, comparison, arithmetic and LIKE
//! (sql-filter.md §5, §6). Strings borrow from the message or the rule; only `+` on strings
//! allocates.

use std::borrow::Cow;
use std::cmp::Ordering;

use uuid::Uuid;

use super::ast::{ArithOp, CompareOp, Literal};
use super::error::{EvalError, EvalErrorKind};
use crate::message::PropertyValue;

/// SQL's three-valued truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tri {
    True,
    False,
    Unknown,
}

impl Tri {
    pub fn from_bool(b: bool) -> Tri {
        if b {
            Tri::True
        } else {
            Tri::False
        }
    }

    /// The docs' AND table.
    pub fn and(self, other: Tri) -> Tri {
        match (self, other) {
            (Tri::False, _) | (_, Tri::False) => Tri::False,
            (Tri::True, Tri::True) => Tri::True,
            _ => Tri::Unknown,
        }
    }

    /// The docs' OR table.
    pub fn or(self, other: Tri) -> Tri {
        match (self, other) {
            (Tri::True, _) | (_, Tri::True) => Tri::True,
            (Tri::False, Tri::False) => Tri::False,
            _ => Tri::Unknown,
        }
    }
}

impl std::ops::Not for Tri {
    type Output = Tri;

    /// NOT unknown is unknown (inferred; the docs give no NOT table).
    fn not(self) -> Tri {
        match self {
            Tri::True => Tri::False,
            Tri::False => Tri::True,
            Tri::Unknown => Tri::Unknown,
        }
    }
}

/// A value during evaluation. `Null` stands for both SQL NULL and unknown (a missing property,
/// a mismatched operation): every operator treats them alike, and `IS NULL` / `EXISTS` look at
/// the property itself.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    /// Every integer width and sign; i128 holds them all exactly.
    Int(i128),
    Double(f64),
    String(Cow<'a, str>),
    Char(char),
    Guid(Uuid),
    /// Milliseconds since the Unix epoch, UTC.
    DateTime(i64),
    /// Milliseconds.
    TimeSpan(i64),
    Binary(&'a [u8]),
}

impl<'a> Value<'a> {
    #[inline]
    pub fn from_property(v: &'a PropertyValue) -> Value<'a> {
        match v {
            PropertyValue::Null => Value::Null,
            PropertyValue::Bool(b) => Value::Bool(*b),
            PropertyValue::UByte(n) => Value::Int((*n).into()),
            PropertyValue::UShort(n) => Value::Int((*n).into()),
            PropertyValue::UInt(n) => Value::Int((*n).into()),
            PropertyValue::ULong(n) => Value::Int((*n).into()),
            PropertyValue::Byte(n) => Value::Int((*n).into()),
            PropertyValue::Short(n) => Value::Int((*n).into()),
            PropertyValue::Int(n) => Value::Int((*n).into()),
            PropertyValue::Long(n) => Value::Int((*n).into()),
            PropertyValue::Float(n) => Value::Double((*n).into()),
            PropertyValue::Double(n) => Value::Double(*n),
            PropertyValue::Char(c) => Value::Char(*c),
            PropertyValue::Timestamp(t) | PropertyValue::LocalTimestamp(t) => {
                Value::DateTime(t.as_millis())
            }
            PropertyValue::TimeSpan(ms) => Value::TimeSpan(*ms),
            PropertyValue::Uuid(u) => Value::Guid(*u),
            PropertyValue::Binary(b) => Value::Binary(b),
            PropertyValue::String(s) => Value::String(Cow::Borrowed(s)),
        }
    }

    #[inline]
    pub fn from_literal(l: &'a Literal) -> Value<'a> {
        match l {
            Literal::Null => Value::Null,
            Literal::Bool(b) => Value::Bool(*b),
            Literal::Integer(n) => Value::Int((*n).into()),
            Literal::Double(n) => Value::Double(*n),
            Literal::String(s) => Value::String(Cow::Borrowed(s)),
            Literal::Char(c) => Value::Char(*c),
            Literal::Guid(g) => Value::Guid(*g),
            Literal::DateTime(ms) => Value::DateTime(*ms),
            Literal::TimeSpan(ms) => Value::TimeSpan(*ms),
        }
    }

    pub fn from_str_opt(s: Option<&'a str>) -> Value<'a> {
        s.map_or(Value::Null, |s| Value::String(Cow::Borrowed(s)))
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(n) => Some(*n as f64),
            Value::Double(n) => Some(*n),
            _ => None,
        }
    }

    /// The value as text, for string concatenation and for string system properties set by an
    /// action; `None` for null. Strings, integers, booleans (`True`/`False`) and GUIDs read as
    /// .NET's `ToString()` writes them; doubles in Rust's shortest form, DateTime and TimeSpan
    /// as milliseconds (inferred: .NET's culture-dependent forms are not worth copying).
    pub fn to_text(&self) -> Option<Cow<'a, str>> {
        Some(match self {
            Value::Null => return None,
            Value::Bool(true) => Cow::Borrowed("True"),
            Value::Bool(false) => Cow::Borrowed("False"),
            Value::Int(n) => Cow::Owned(n.to_string()),
            Value::Double(n) => Cow::Owned(n.to_string()),
            Value::String(s) => s.clone(),
            Value::Char(c) => Cow::Owned(c.to_string()),
            Value::Guid(g) => Cow::Owned(g.to_string()),
            Value::DateTime(ms) => Cow::Owned(ms.to_string()),
            Value::TimeSpan(ms) => Cow::Owned(ms.to_string()),
            Value::Binary(b) => Cow::Owned(format!("{b:02x?}")),
        })
    }
}

/// Case-insensitive name equality without allocating (ASCII fast path, else simple Unicode
/// lowercase mapping, close to .NET's `OrdinalIgnoreCase`).
pub(super) fn eq_ignore_case(a: &str, b: &str) -> bool {
    if a.is_ascii() && b.is_ascii() {
        return a.eq_ignore_ascii_case(b);
    }
    a.chars().flat_map(char::to_lowercase).eq(b.chars().flat_map(char::to_lowercase))
}

/// The ordering of two values under §5.2, `None` when they do not compare (null, mismatched
/// kinds); `Some(None)` when only equality is defined and they differ.
enum Comparison {
    Ordered(Ordering),
    /// Equality only (bool, Guid, char); `true` if equal.
    Equal(bool),
    /// NaN on either side: only `<>` holds.
    Unordered,
    Incomparable,
}

#[inline]
fn compare_values(l: &Value<'_>, r: &Value<'_>) -> Comparison {
    match (l, r) {
        (Value::Int(a), Value::Int(b)) => Comparison::Ordered(a.cmp(b)),
        (Value::Int(_) | Value::Double(_), Value::Int(_) | Value::Double(_)) => {
            match (l.as_f64(), r.as_f64()) {
                (Some(a), Some(b)) => {
                    a.partial_cmp(&b).map_or(Comparison::Unordered, Comparison::Ordered)
                }
                _ => Comparison::Incomparable,
            }
        }
        (Value::String(a), Value::String(b)) => Comparison::Ordered(a.as_ref().cmp(b.as_ref())),
        (Value::DateTime(a), Value::DateTime(b)) | (Value::TimeSpan(a), Value::TimeSpan(b)) => {
            Comparison::Ordered(a.cmp(b))
        }
        (Value::Bool(a), Value::Bool(b)) => Comparison::Equal(a == b),
        (Value::Guid(a), Value::Guid(b)) => Comparison::Equal(a == b),
        (Value::Char(a), Value::Char(b)) => Comparison::Equal(a == b),
        _ => Comparison::Incomparable,
    }
}

/// `l op r` under §5.2: mismatched kinds and nulls are unknown, never an error.
#[inline]
pub(super) fn compare(op: CompareOp, l: &Value<'_>, r: &Value<'_>) -> Tri {
    match compare_values(l, r) {
        Comparison::Ordered(o) => Tri::from_bool(match op {
            CompareOp::Eq => o == Ordering::Equal,
            CompareOp::NotEq => o != Ordering::Equal,
            CompareOp::Lt => o == Ordering::Less,
            CompareOp::Le => o != Ordering::Greater,
            CompareOp::Gt => o == Ordering::Greater,
            CompareOp::Ge => o != Ordering::Less,
        }),
        Comparison::Equal(eq) => match op {
            CompareOp::Eq => Tri::from_bool(eq),
            CompareOp::NotEq => Tri::from_bool(!eq),
            _ => Tri::Unknown,
        },
        Comparison::Unordered => Tri::from_bool(op == CompareOp::NotEq),
        Comparison::Incomparable => Tri::Unknown,
    }
}

/// `l op r` under §5.3. Integers wrap as C#'s unchecked arithmetic; integer division by zero is
/// the only error.
pub(super) fn arith<'a>(op: ArithOp, l: Value<'a>, r: Value<'a>) -> Result<Value<'a>, EvalError> {
    use Value::{DateTime, Double, Int, Null, TimeSpan};
    if l.is_null() || r.is_null() {
        return Ok(Null);
    }
    Ok(match (op, &l, &r) {
        (ArithOp::Add, Value::String(_), _) | (ArithOp::Add, _, Value::String(_)) => {
            match (l.to_text(), r.to_text()) {
                (Some(a), Some(b)) => Value::String(Cow::Owned(format!("{a}{b}"))),
                _ => Null,
            }
        }
        (_, Int(a), Int(b)) => {
            // Values come from i64 or u64, so truncating i128 to i64 is C#'s wrapping.
            let (a, b) = (*a as i64, *b as i64);
            let v = match op {
                ArithOp::Add => a.wrapping_add(b),
                ArithOp::Sub => a.wrapping_sub(b),
                ArithOp::Mul => a.wrapping_mul(b),
                ArithOp::Div | ArithOp::Mod if b == 0 => {
                    return Err(EvalError::new(
                        EvalErrorKind::DivideByZero,
                        "Attempted to divide by zero.",
                    ))
                }
                ArithOp::Div => a.wrapping_div(b),
                ArithOp::Mod => a.wrapping_rem(b),
            };
            Int(v.into())
        }
        (_, Int(_) | Double(_), Int(_) | Double(_)) => {
            let (a, b) = (l.as_f64().unwrap_or(f64::NAN), r.as_f64().unwrap_or(f64::NAN));
            Double(match op {
                ArithOp::Add => a + b,
                ArithOp::Sub => a - b,
                ArithOp::Mul => a * b,
                ArithOp::Div => a / b,
                ArithOp::Mod => a % b,
            })
        }
        (ArithOp::Add, DateTime(t), TimeSpan(s)) | (ArithOp::Add, TimeSpan(s), DateTime(t)) => {
            DateTime(t.saturating_add(*s))
        }
        (ArithOp::Sub, DateTime(t), TimeSpan(s)) => DateTime(t.saturating_sub(*s)),
        (ArithOp::Sub, DateTime(a), DateTime(b)) => TimeSpan(a.saturating_sub(*b)),
        (ArithOp::Add, TimeSpan(a), TimeSpan(b)) => TimeSpan(a.saturating_add(*b)),
        (ArithOp::Sub, TimeSpan(a), TimeSpan(b)) => TimeSpan(a.saturating_sub(*b)),
        _ => Null,
    })
}

/// Unary `-` (`negate`) or `+`: numbers and TimeSpans; anything else is unknown.
pub(super) fn sign(negate: bool, v: Value<'_>) -> Value<'_> {
    match v {
        // Integers hold i64 or u64 values, so the i128 negation is exact.
        Value::Int(n) if negate => Value::Int(-n),
        Value::Double(n) if negate => Value::Double(-n),
        Value::TimeSpan(n) if negate => Value::TimeSpan(n.saturating_neg()),
        Value::Int(_) | Value::Double(_) | Value::TimeSpan(_) => v,
        _ => Value::Null,
    }
}

/// Whether all of `text` matches `pattern`: `%` any run, `_` one character, `escape` makes the
/// next pattern character literal (a trailing escape character matches itself). Ordinal and
/// case-sensitive; no allocation. Works on the UTF-8 bytes, stepping whole characters;
/// backtracks to the last `%` only, so it is O(n·m) at worst.
pub(super) fn like(text: &str, pattern: &str, escape: Option<char>) -> bool {
    let mut buf = [0u8; 4];
    let esc: &[u8] = match escape {
        Some(c) => c.encode_utf8(&mut buf).as_bytes(),
        None => &[],
    };
    let (t, p) = (text.as_bytes(), pattern.as_bytes());
    let (mut ti, mut pi) = (0usize, 0usize);
    // Where to resume after the last `%`: (pattern index after it, text index it matched to).
    let mut star: Option<(usize, usize)> = None;
    loop {
        if pi < p.len() {
            let escaped = !esc.is_empty() && p[pi..].starts_with(esc);
            if !escaped && p[pi] == b'%' {
                star = Some((pi + 1, ti));
                pi += 1;
                continue;
            }
            if ti < t.len() {
                let t_end = ti + utf8_len(t[ti]);
                let (literal, p_end) = if escaped {
                    let start = pi + esc.len();
                    match p.get(start) {
                        Some(&b) => (start, start + utf8_len(b)),
                        None => (pi, start),
                    }
                } else {
                    (pi, pi + utf8_len(p[pi]))
                };
                let matches = (!escaped && p[pi] == b'_')
                    || (t_end - ti == 1 && p_end - literal == 1 && t[ti] == p[literal])
                    || (t_end - ti > 1 && t.get(ti..t_end) == p.get(literal..p_end));
                if matches {
                    ti = t_end;
                    pi = p_end;
                    continue;
                }
            }
        } else if ti == t.len() {
            return true;
        }
        // Mismatch: let the last `%` swallow one more character.
        match star {
            Some((after, matched)) if matched < t.len() => {
                let next = matched + utf8_len(t[matched]);
                star = Some((after, next));
                pi = after;
                ti = next;
            }
            _ => return false,
        }
    }
}

/// The length of the UTF-8 sequence a leading byte starts.
fn utf8_len(lead: u8) -> usize {
    match lead {
        0xF0.. => 4,
        0xE0.. => 3,
        0xC0.. => 2,
        _ => 1,
    }
}
