//! Evaluating a compiled predicate or expression against one message. Nothing here allocates
//! unless the rule concatenates strings or fails.

use super::ast::{CompareOp, Expr, Predicate, Property, SystemProperty};
use super::error::{EvalError, EvalErrorKind};
use super::value::{arith, compare, eq_ignore_case, like, sign, Tri, Value};
use super::EvalContext;
use crate::message::{ApplicationProperties, PropertyValue};

/// .NET `DateTime.MinValue` / `MaxValue` in milliseconds since the Unix epoch.
pub(crate) const DATETIME_MIN_MILLIS: i64 = -62_135_596_800_000;
pub(crate) const DATETIME_MAX_MILLIS: i64 = 253_402_300_799_999;

/// The application property `name`, case-insensitively: the key spelled exactly so if there is
/// one, else the first key (in the map's byte order) equal to it ignoring case.
#[inline]
pub(super) fn lookup<'m>(
    props: &'m ApplicationProperties,
    name: &str,
) -> Option<&'m PropertyValue> {
    props.get(name).or_else(|| props.iter().find(|(k, _)| eq_ignore_case(k, name)).map(|(_, v)| v))
}

fn unknown_system(name: &str) -> EvalError {
    EvalError::new(
        EvalErrorKind::UnknownSystemProperty,
        format!("sys.{name} is not a system property"),
    )
}

/// A predicate's truth. The common leaf (a comparison) is evaluated here; the rest each in a
/// function of its own, so this one's stack frame stays small.
pub(crate) fn predicate(p: &Predicate, ctx: &EvalContext<'_>) -> Result<Tri, EvalError> {
    match p {
        Predicate::Compare(op, l, r) => {
            let l = expr(l, ctx)?;
            let r = expr(r, ctx)?;
            Ok(compare(*op, &l, &r))
        }
        Predicate::And(list) => and(list, ctx),
        Predicate::Or(list) => or(list, ctx),
        Predicate::Not(p) => Ok(!predicate(p, ctx)?),
        Predicate::In { expr, list, negated } => in_list(expr, list, *negated, ctx),
        Predicate::Like { expr, pattern, escape, negated } => {
            like_pattern(expr, pattern, escape.as_ref(), *negated, ctx)
        }
        Predicate::IsNull { property, negated } => {
            Ok(Tri::from_bool(self::property(property, ctx)?.is_null() != *negated))
        }
        Predicate::Exists(Property::User(name)) => {
            Ok(Tri::from_bool(lookup(&ctx.message.application_properties, name).is_some()))
        }
        Predicate::Exists(Property::System(SystemProperty::Unknown(name))) => {
            Err(unknown_system(name))
        }
        // Every known system property exists (inferred, sql-filter.md §6).
        Predicate::Exists(Property::System(_)) => Ok(Tri::True),
    }
}

#[inline(never)]
fn and(list: &[Predicate], ctx: &EvalContext<'_>) -> Result<Tri, EvalError> {
    let mut acc = Tri::True;
    for child in list {
        acc = acc.and(predicate(child, ctx)?);
        if acc == Tri::False {
            break;
        }
    }
    Ok(acc)
}

#[inline(never)]
fn or(list: &[Predicate], ctx: &EvalContext<'_>) -> Result<Tri, EvalError> {
    let mut acc = Tri::False;
    for child in list {
        acc = acc.or(predicate(child, ctx)?);
        if acc == Tri::True {
            break;
        }
    }
    Ok(acc)
}

/// `e [NOT] IN (list)`: unknown when `e` is; else whether some item equals it (unknown items
/// do not make the result unknown), negated for `NOT IN`.
#[inline(never)]
fn in_list(
    e: &Expr,
    list: &[Expr],
    negated: bool,
    ctx: &EvalContext<'_>,
) -> Result<Tri, EvalError> {
    let v = expr(e, ctx)?;
    if v.is_null() {
        return Ok(Tri::Unknown);
    }
    for item in list {
        if compare(CompareOp::Eq, &v, &expr(item, ctx)?) == Tri::True {
            return Ok(Tri::from_bool(!negated));
        }
    }
    Ok(Tri::from_bool(negated))
}

#[inline(never)]
fn like_pattern(
    e: &Expr,
    pattern: &Expr,
    escape: Option<&Expr>,
    negated: bool,
    ctx: &EvalContext<'_>,
) -> Result<Tri, EvalError> {
    let v = expr(e, ctx)?;
    let pat = expr(pattern, ctx)?;
    let esc = match escape {
        None => None,
        Some(escape) => match expr(escape, ctx)? {
            Value::Null => return Ok(Tri::Unknown),
            Value::String(s) => {
                let mut chars = s.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => Some(c),
                    _ => return Err(invalid_escape(&s)),
                }
            }
            Value::Char(c) => Some(c),
            other => return Err(invalid_escape(&other.to_text().unwrap_or_default())),
        },
    };
    Ok(match (v, pat) {
        (Value::String(s), Value::String(p)) => Tri::from_bool(like(&s, &p, esc) != negated),
        _ => Tri::Unknown,
    })
}

fn invalid_escape(escape: &str) -> EvalError {
    EvalError::new(
        EvalErrorKind::InvalidEscape,
        format!("the ESCAPE argument '{escape}' must be a single character"),
    )
}

/// An expression's value. The leaves (constants, user properties) are inlined into the caller,
/// so the common `property = constant` builds its values in registers.
#[inline(always)]
pub(crate) fn expr<'a>(e: &'a Expr, ctx: &EvalContext<'a>) -> Result<Value<'a>, EvalError> {
    match e {
        Expr::Literal(l) | Expr::Parameter(_, l) => Ok(Value::from_literal(l)),
        Expr::Property(Property::User(name)) => Ok(user(ctx, name)),
        Expr::Property(Property::System(s)) => system(s, ctx),
        _ => compound(e, ctx),
    }
}

fn compound<'a>(e: &'a Expr, ctx: &EvalContext<'a>) -> Result<Value<'a>, EvalError> {
    Ok(match e {
        Expr::Literal(l) | Expr::Parameter(_, l) => Value::from_literal(l),
        Expr::Property(p) => property(p, ctx)?,
        Expr::NewId => Value::Guid(uuid::Uuid::new_v4()),
        Expr::PropertyOf(name) => match expr(name, ctx)? {
            Value::String(name) => user(ctx, &name),
            _ => Value::Null,
        },
        Expr::Negate(e) => sign(true, expr(e, ctx)?),
        Expr::Plus(e) => sign(false, expr(e, ctx)?),
        Expr::Arith(op, l, r) => arith(*op, expr(l, ctx)?, expr(r, ctx)?)?,
    })
}

/// The application property `name`'s value; `Null` when missing.
#[inline(always)]
fn user<'a>(ctx: &EvalContext<'a>, name: &str) -> Value<'a> {
    match lookup(&ctx.message.application_properties, name) {
        Some(v) => Value::from_property(v),
        None => Value::Null,
    }
}

/// A property's value; `Null` when missing or without a value.
pub(crate) fn property<'a>(p: &'a Property, ctx: &EvalContext<'a>) -> Result<Value<'a>, EvalError> {
    match p {
        Property::User(name) => Ok(user(ctx, name)),
        Property::System(s) => system(s, ctx),
    }
}

#[inline(always)]
fn system<'a>(s: &'a SystemProperty, ctx: &EvalContext<'a>) -> Result<Value<'a>, EvalError> {
    let props = &ctx.message.properties;
    let publish = &ctx.publish;
    let text = |s: &'a Option<String>| Value::from_str_opt(s.as_deref());
    let ttl_millis = || {
        props.time_to_live.map_or(i64::MAX, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    };
    Ok(match s {
        SystemProperty::MessageId => text(&props.message_id),
        SystemProperty::CorrelationId => text(&props.correlation_id),
        SystemProperty::Label => text(&props.subject),
        SystemProperty::To => text(&props.to),
        SystemProperty::ReplyTo => text(&props.reply_to),
        SystemProperty::ReplyToSessionId => text(&props.reply_to_session_id),
        SystemProperty::SessionId => text(&props.session_id),
        SystemProperty::ContentType => text(&props.content_type),
        SystemProperty::PartitionKey => text(&props.partition_key),
        SystemProperty::ViaPartitionKey => Value::from_str_opt(publish.via_partition_key),
        SystemProperty::ScheduledEnqueueTimeUtc => Value::DateTime(
            props.scheduled_enqueue_time.map_or(DATETIME_MIN_MILLIS, |t| t.as_millis()),
        ),
        SystemProperty::TimeToLive => Value::TimeSpan(ttl_millis()),
        SystemProperty::ForcePersistence => Value::Bool(false),
        SystemProperty::EnqueuedTimeUtc => Value::DateTime(publish.enqueued_time.as_millis()),
        SystemProperty::SequenceNumber => Value::Int(publish.sequence_number.0.into()),
        SystemProperty::EnqueuedSequenceNumber => {
            Value::Int(publish.enqueued_sequence_number.0.into())
        }
        SystemProperty::DeliveryCount => Value::Int(publish.delivery_count.into()),
        SystemProperty::Size => Value::Int(publish.size.into()),
        SystemProperty::ExpiresAtUtc => Value::DateTime(
            publish.enqueued_time.as_millis().saturating_add(ttl_millis()).min(DATETIME_MAX_MILLIS),
        ),
        SystemProperty::State => Value::Int(publish.state.code().into()),
        SystemProperty::DeadLetterSource => Value::from_str_opt(publish.dead_letter_source),
        SystemProperty::LockedUntilUtc | SystemProperty::LockToken => Value::Null,
        SystemProperty::Unknown(name) => return Err(unknown_system(name)),
    })
}
