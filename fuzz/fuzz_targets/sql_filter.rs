#![no_main]
//! SQL filter and rule-action text from a rule's creation request (AMQP `add-rule`, ATOM PUT):
//! `SqlFilter::parse` and `SqlRuleAction::parse` on the input as UTF-8. Whatever compiles is
//! printed, compiled again (it must give the same tree), evaluated against a fixed message and,
//! for actions, applied to a copy of it. Nothing may panic (deep nesting is refused with an
//! error, not a stack overflow).

use std::time::Duration;

use ironbus_core::filter::{
    EvalContext, ParameterValue, Parameters, PublishInfo, SqlFilter, SqlRuleAction,
};
use ironbus_core::{Message, PropertyValue, SequenceNumber, Timestamp};

libfuzzer_sys::fuzz_target!(|data: &[u8]| sql_filter(data));

fn sql_filter(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parameters = Parameters::from([
        ("@p".to_owned(), ParameterValue::Value(PropertyValue::Int(5))),
        ("@s".to_owned(), ParameterValue::Value(PropertyValue::String("x".into()))),
        (
            "@when".to_owned(),
            ParameterValue::Value(PropertyValue::Timestamp(Timestamp::from_millis(
                1_603_324_800_000,
            ))),
        ),
        ("@span".to_owned(), ParameterValue::TimeSpan(Duration::from_secs(3600))),
    ]);
    let message = message();
    let publish = PublishInfo {
        enqueued_time: Timestamp::from_millis(1_700_000_000_000),
        sequence_number: SequenceNumber(42),
        size: 100,
        ..PublishInfo::default()
    };
    let ctx = EvalContext::with_publish(&message, publish);

    if let Ok(filter) = SqlFilter::parse(text, &parameters) {
        let printed = filter.to_string();
        if printed.chars().count() <= ironbus_core::filter::MAX_EXPRESSION_CHARS {
            let again = SqlFilter::parse(&printed, &parameters)
                .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?} is refused: {e}"));
            assert_eq!(again.predicate(), filter.predicate(), "{text:?} printed as {printed:?}");
        }
        let _ = filter.evaluate(&ctx);
    }
    if let Ok(action) = SqlRuleAction::parse(text, &parameters) {
        let printed = action.to_string();
        if printed.chars().count() <= ironbus_core::filter::MAX_EXPRESSION_CHARS {
            let again = SqlRuleAction::parse(&printed, &parameters)
                .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?} is refused: {e}"));
            assert_eq!(again.statements(), action.statements(), "{text:?} printed as {printed:?}");
        }
        let mut copy = message.clone();
        let _ = action.apply(&mut copy, &publish);
    }
}

fn message() -> Message {
    let mut m = Message::new(&b"body"[..]);
    m.properties.message_id = Some("id-1".into());
    m.properties.correlation_id = Some("abc-1".into());
    m.properties.subject = Some("servicebus".into());
    m.properties.time_to_live = Some(Duration::from_secs(60));
    for (k, v) in [
        ("color", PropertyValue::String("red".into())),
        ("quantity", PropertyValue::Int(10)),
        ("big", PropertyValue::ULong(u64::MAX)),
        ("ratio", PropertyValue::Double(2.5)),
        ("flag", PropertyValue::Bool(true)),
        ("nothing", PropertyValue::Null),
        ("when", PropertyValue::Timestamp(Timestamp::from_millis(1_603_324_800_000))),
    ] {
        m.application_properties.insert(k.to_owned(), v);
    }
    m
}
