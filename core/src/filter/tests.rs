//! The contract's test table (sql-filter.md §12, one named test per case), creation errors,
//! three-valued logic, actions, correlation filters, and property tests: the printer's output
//! parses back to the same tree, and no input makes the parser or evaluator panic.

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::message::{ApplicationProperties, MessageProperties};

// ---------------------------------------------------------------------------------------------
// Helpers

fn s(v: &str) -> PropertyValue {
    PropertyValue::String(v.to_owned())
}

fn msg(props: &[(&str, PropertyValue)]) -> Message {
    let mut m = Message::new(&b"body"[..]);
    for (k, v) in props {
        m.application_properties.insert((*k).to_owned(), v.clone());
    }
    m
}

fn sys(set: impl FnOnce(&mut MessageProperties)) -> Message {
    let mut m = msg(&[]);
    set(&mut m.properties);
    m
}

fn no_params() -> Parameters {
    Parameters::new()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    Match,
    NoMatch,
    /// An evaluation error with this exception type.
    Error(&'static str),
}

fn check_with(expr: &str, params: &Parameters, message: &Message, expect: Expect) {
    let filter = SqlFilter::parse(expr, params).unwrap_or_else(|e| panic!("{expr}: {e}"));
    let got = Filter::Sql(filter).evaluate(&EvalContext::new(message));
    match (expect, got) {
        (Expect::Match, Ok(true)) | (Expect::NoMatch, Ok(false)) => {}
        (Expect::Error(name), Err(e)) if e.exception_type() == name => {}
        (expect, got) => panic!("{expr}: expected {expect:?}, got {got:?}"),
    }
}

fn check(expr: &str, message: &Message, expect: Expect) {
    check_with(expr, &no_params(), message, expect)
}

fn tri(expr: &str, message: &Message) -> Tri {
    let filter = SqlFilter::parse(expr, &no_params()).unwrap_or_else(|e| panic!("{expr}: {e}"));
    filter.evaluate(&EvalContext::new(message)).unwrap()
}

fn parse_error(expr: &str) -> FilterError {
    match SqlFilter::parse(expr, &no_params()) {
        Ok(f) => panic!("{expr:?} parsed as {:?}", f.predicate()),
        Err(e) => e,
    }
}

fn action_error(text: &str) -> FilterError {
    match SqlRuleAction::parse(text, &no_params()) {
        Ok(a) => panic!("{text:?} parsed as {:?}", a.statements()),
        Err(e) => e,
    }
}

/// One `#[test]` per row of §12: `name: expression, message => expectation;`.
macro_rules! table {
    ($($name:ident: $expr:expr, $message:expr => $expect:expr;)*) => {
        $(
            #[test]
            fn $name() {
                check($expr, &$message, $expect);
            }
        )*
    };
}

use Expect::{Error, Match, NoMatch};
use PropertyValue::{Double, Int, Null, UInt};

// ---------------------------------------------------------------------------------------------
// §12: filters

table! {
    case_01_equal_string: "color = 'red'", msg(&[("color", s("red"))]) => Match;
    case_02_string_compare_is_case_sensitive: "color = 'red'", msg(&[("color", s("Red"))]) => NoMatch;
    case_03_property_names_are_case_insensitive:
        "Color = 'yellow'", msg(&[("color", s("yellow"))]) => Match;
    case_04_user_scope: "user.color = 'red'", msg(&[("color", s("red"))]) => Match;
    case_05_sys_label_is_subject:
        "sys.Label = 'yellow'", sys(|p| p.subject = Some("yellow".into())) => Match;
    case_06_sys_names_are_case_insensitive:
        "sys.label ='yellow'", sys(|p| p.subject = Some("yellow".into())) => Match;
    case_07_and_both_true: "Color = 'blue' and Quantity = 10",
        msg(&[("color", s("blue")), ("quantity", Int(10))]) => Match;
    case_08_and_one_false: "Color = 'blue' and Quantity = 10",
        msg(&[("color", s("blue")), ("quantity", Int(5))]) => NoMatch;
    case_09_or_one_true: "Color = 'blue' or Quantity = 10",
        msg(&[("color", s("red")), ("quantity", Int(10))]) => Match;
    case_10_uint_equals_integer_constant: "quantity = 10", msg(&[("quantity", UInt(10))]) => Match;
    case_11_double_equals_integer_constant:
        "quantity = 10", msg(&[("quantity", Double(10.0))]) => Match;
    case_12_integer_greater_than_decimal:
        "MessageProperty > 2.08", msg(&[("MessageProperty", Int(3))]) => Match;
    case_13_string_against_number_is_unknown_not_error:
        "quantity = '10'", msg(&[("quantity", Int(10))]) => NoMatch;
    case_14_missing_property_is_unknown: "missing = 1", msg(&[]) => NoMatch;
    case_15_not_unknown_is_unknown: "NOT (missing = 1)", msg(&[]) => NoMatch;
    case_16_unknown_or_true: "missing = 1 OR color = 'red'", msg(&[("color", s("red"))]) => Match;
    case_17_unknown_and_true: "missing = 1 AND color = 'red'", msg(&[("color", s("red"))]) => NoMatch;
    case_18_missing_is_null: "missing IS NULL", msg(&[]) => Match;
    case_19_null_value_is_null: "color IS NULL", msg(&[("color", Null)]) => Match;
    case_20_is_not_null: "color IS NOT NULL", msg(&[("color", s("red"))]) => Match;
    case_21_exists_present: "EXISTS(color)", msg(&[("color", s("red"))]) => Match;
    case_22_exists_missing: "EXISTS(color)", msg(&[]) => NoMatch;
    case_23_exists_with_null_value: "EXISTS(color)", msg(&[("color", Null)]) => Match;
    case_24_not_exists: "NOT EXISTS(color)", msg(&[]) => Match;
    case_25_like_on_label:
        "sys.Label LIKE '%bus%'", sys(|p| p.subject = Some("servicebus".into())) => Match;
    case_26_like_is_case_sensitive:
        "sys.Label LIKE '%bus%'", sys(|p| p.subject = Some("BUS".into())) => NoMatch;
    case_27_underscore_one_char_match: "name LIKE 'a_c'", msg(&[("name", s("abc"))]) => Match;
    case_27_underscore_one_char_no: "name LIKE 'a_c'", msg(&[("name", s("abbc"))]) => NoMatch;
    case_28_escape_match: r"name LIKE 'ABC\%' ESCAPE '\'", msg(&[("name", s("ABC%"))]) => Match;
    case_28_escape_no: r"name LIKE 'ABC\%' ESCAPE '\'", msg(&[("name", s("ABCD"))]) => NoMatch;
    case_29_not_like_match: "name NOT LIKE 'a%'", msg(&[("name", s("bcd"))]) => Match;
    case_29_not_like_missing: "name NOT LIKE 'a%'", msg(&[]) => NoMatch;
    case_30_in_list: "StoreId IN ('Store1','Store2','Store3')",
        msg(&[("StoreId", s("Store2"))]) => Match;
    case_31_sys_to_in_or: "sys.To IN ('Store5','Store6') OR StoreId = 'Store8'",
        sys(|p| p.to = Some("Store6".into())) => Match;
    case_32_not_in_missing: "StoreId NOT IN ('Store1','Store2')", msg(&[]) => NoMatch;
    case_33_modulo: "quantity % 3 = 1", msg(&[("quantity", Int(10))]) => Match;
    case_34_integer_division: "quantity / 3 = 3", msg(&[("quantity", Int(10))]) => Match;
    case_35_double_division: "quantity / 4.0 = 2.5", msg(&[("quantity", Int(10))]) => Match;
    case_36_subtraction: "MessageProperty1 - MessageProperty2 = 80",
        msg(&[("MessageProperty1", Int(100)), ("MessageProperty2", Int(20))]) => Match;
    case_37_unary_minus: "-quantity < 0", msg(&[("quantity", Int(10))]) => Match;
    case_38_string_concatenation: "first + last = 'JohnDoe'",
        msg(&[("first", s("John")), ("last", s("Doe"))]) => Match;
    case_39_delimited_identifier: "[Property With Space] = 'x'",
        msg(&[("Property With Space", s("x"))]) => Match;
    case_40_quoted_identifier: "\"Contoso & Northwind\" = 'x'",
        msg(&[("Contoso & Northwind", s("x"))]) => Match;
    case_41_doubled_quote: "name = 'O''Brien'", msg(&[("name", s("O'Brien"))]) => Match;
    case_42_approximate_constant: "a = 101.5E5", msg(&[("a", Int(10_150_000))]) => Match;
    case_43_one_equals_one: "1=1", msg(&[]) => Match;
    case_43_one_equals_zero: "1=0", msg(&[]) => NoMatch;
    case_43_one_greater_than_one: "1>1", msg(&[]) => NoMatch;
    case_44_boolean_constant: "flag = TRUE", msg(&[("flag", PropertyValue::Bool(true))]) => Match;
    case_47_sys_correlation_id_like: "sys.CorrelationId LIKE 'abc-%'",
        sys(|p| p.correlation_id = Some("abc-1".into())) => Match;
    case_48_unset_sys_property_is_null: "sys.To IS NULL", msg(&[]) => Match;
    case_49_unknown_sys_property_fails: "sys.NoSuchProp = 1", msg(&[]) => Error("FilterException");
    case_50_property_function: "property('color') = 'red'", msg(&[("color", s("red"))]) => Match;
    case_51_integer_division_by_zero:
        "quantity / 0 = 1", msg(&[("quantity", Int(10))]) => Error("DivideByZeroException");
    case_52_escape_longer_than_one_character:
        "name LIKE 'a%' ESCAPE '!!'", msg(&[("name", s("abc"))]) => Error("FilterException");
}

/// 2020-10-22T00:00:00Z in milliseconds.
const OCT_22_2020: i64 = 1_603_324_800_000;
const HOUR: i64 = 3_600_000;

fn timestamp(ms: i64) -> PropertyValue {
    PropertyValue::Timestamp(crate::types::Timestamp::from_millis(ms))
}

#[test]
fn case_45_datetime_parameter() {
    let params =
        Parameters::from([("@dtParam".to_owned(), timestamp(OCT_22_2020 + 24 * HOUR).into())]);
    let m = msg(&[("DateTimeMp", timestamp(OCT_22_2020))]);
    check_with("DateTimeMp < @dtParam", &params, &m, Match);
}

#[test]
fn case_46_datetime_difference_against_timespan_parameter() {
    let params = Parameters::from([(
        "@timespan".to_owned(),
        ParameterValue::TimeSpan(Duration::from_secs(2 * 3600)),
    )]);
    let m = msg(&[
        ("DateTimeMp1", timestamp(OCT_22_2020)),
        ("DateTimeMp2", timestamp(OCT_22_2020 + HOUR)),
    ]);
    check_with("(DateTimeMp2-DateTimeMp1) <= @timespan", &params, &m, Match);
    let m = msg(&[
        ("DateTimeMp1", timestamp(OCT_22_2020)),
        ("DateTimeMp2", timestamp(OCT_22_2020 + 3 * HOUR)),
    ]);
    check_with("(DateTimeMp2-DateTimeMp1) <= @timespan", &params, &m, NoMatch);
}

#[test]
fn case_53_invalid_filters_are_refused_at_creation() {
    for text in ["color == 'red'", "color =", "EXISTS color", "a = 1 b = 2", "foo.bar = 1"] {
        assert_eq!(parse_error(text).kind, FilterErrorKind::Syntax, "{text}");
    }
}

// ---------------------------------------------------------------------------------------------
// §12: actions

fn apply(action: &str, message: &mut Message) -> ActionEffect {
    SqlRuleAction::parse(action, &no_params())
        .unwrap_or_else(|e| panic!("{action}: {e}"))
        .apply(message, &PublishInfo::default())
        .unwrap_or_else(|e| panic!("{action}: {e}"))
}

fn props(pairs: &[(&str, PropertyValue)]) -> ApplicationProperties {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
}

/// A correlation filter's properties, in the order given.
fn pairs(pairs: &[(&str, PropertyValue)]) -> Vec<(String, PropertyValue)> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
}

#[test]
fn action_a1_set_keeps_the_integer_type() {
    let mut m = msg(&[("quantity", Int(10))]);
    let effect = apply("SET quantity = quantity / 2;", &mut m);
    assert_eq!(m.application_properties, props(&[("quantity", Int(5))]));
    assert!(m.application_properties_modified);
    assert_eq!(
        effect,
        ActionEffect { application_properties_changed: true, system_properties_changed: false }
    );
}

#[test]
fn action_a2_set_keeps_the_existing_key_spelling() {
    let mut m = msg(&[("priority", s("low"))]);
    apply("SET Priority = 'high'", &mut m);
    assert_eq!(m.application_properties, props(&[("priority", s("high"))]));
}

#[test]
fn action_a3_set_remove_and_sys_correlation_id() {
    let mut m = msg(&[("quantity", Int(10)), ("priority", s("x"))]);
    let effect = apply(
        "SET quantity = quantity / 2; REMOVE priority;SET sys.CorrelationId = 'low';",
        &mut m,
    );
    assert_eq!(m.application_properties, props(&[("quantity", Int(5))]));
    assert_eq!(m.properties.correlation_id.as_deref(), Some("low"));
    assert!(effect.system_properties_changed && effect.application_properties_changed);
}

#[test]
fn action_a4_set_sys_label() {
    let mut m = sys(|p| p.subject = Some("x".into()));
    let effect = apply("SET sys.Label = 'SalesEvent'", &mut m);
    assert_eq!(m.properties.subject.as_deref(), Some("SalesEvent"));
    assert!(effect.system_properties_changed);
    assert!(!effect.application_properties_changed);
    assert!(!m.application_properties_modified);
}

#[test]
fn action_a5_statements_see_earlier_changes() {
    let mut m = msg(&[("OriginalEventType", s("a"))]);
    apply("SET EventType = OriginalEventType; REMOVE OriginalEventType;", &mut m);
    assert_eq!(m.application_properties, props(&[("EventType", s("a"))]));
}

#[test]
fn action_a6_statement_without_set_is_refused_with_service_bus_text() {
    let e = action_error("EventType = 'x'");
    assert_eq!(
        e.to_string(),
        "There was an error parsing the SQL expression. [Token line=1, column=0, Token in \
         error= EventType, Additional details= syntax error, unexpected IDENTIFIER, expecting \
         SET, or REMOVE]"
    );
}

#[test]
fn action_a7_unknown_value_sets_null() {
    let mut m = msg(&[]);
    apply("SET x = missing + 1", &mut m);
    assert_eq!(m.application_properties, props(&[("x", Null)]));
}

#[test]
fn action_a8_copy_carries_the_rule_name() {
    let action = SqlRuleAction::parse("SET a = 1", &no_params()).unwrap();
    let mut m = msg(&[]);
    action.apply_for_rule("myRule", &mut m, &PublishInfo::default()).unwrap();
    assert_eq!(
        m.application_properties,
        props(&[("RuleName", s("myRule")), ("a", PropertyValue::Long(1))])
    );
    assert!(m.application_properties_modified);
}

// ---------------------------------------------------------------------------------------------
// Actions beyond the table

#[test]
fn action_new_integer_is_long_and_new_key_keeps_its_spelling() {
    let mut m = msg(&[]);
    apply("SET NewKey = 7", &mut m);
    assert_eq!(m.application_properties, props(&[("NewKey", PropertyValue::Long(7))]));
}

#[test]
fn action_unqualified_correlation_id_is_an_application_property() {
    let mut m = msg(&[]);
    let effect = apply("Set CorrelationId = 'newValue'", &mut m);
    assert_eq!(m.application_properties, props(&[("CorrelationId", s("newValue"))]));
    assert_eq!(m.properties.correlation_id, None);
    assert!(!effect.system_properties_changed);
}

#[test]
fn action_statements_without_semicolons() {
    let mut m = msg(&[("b", Int(1))]);
    apply("SET a = 1 SET c = 'x' REMOVE b", &mut m);
    assert_eq!(m.application_properties, props(&[("a", PropertyValue::Long(1)), ("c", s("x"))]));
}

#[test]
fn action_remove_missing_is_a_no_op() {
    let mut m = msg(&[("a", Int(1))]);
    let effect = apply("REMOVE nothing", &mut m);
    assert!(!effect.application_properties_changed);
    assert!(!m.application_properties_modified);
}

#[test]
fn action_remove_is_case_insensitive() {
    let mut m = msg(&[("Priority", Int(1))]);
    apply("REMOVE priority", &mut m);
    assert!(m.application_properties.is_empty());
}

#[test]
fn action_sys_message_id_from_newid_and_ttl_from_parameter() {
    let params =
        Parameters::from([("@ttl".to_owned(), ParameterValue::TimeSpan(Duration::from_secs(60)))]);
    let action =
        SqlRuleAction::parse("SET sys.MessageId = newid(); SET sys.TimeToLive = @ttl", &params)
            .unwrap();
    let mut m = msg(&[]);
    let effect = action.apply(&mut m, &PublishInfo::default()).unwrap();
    assert!(effect.system_properties_changed);
    let id = m.properties.message_id.clone().unwrap();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
    assert_eq!(m.properties.time_to_live, Some(Duration::from_secs(60)));
}

#[test]
fn action_on_read_only_or_unknown_sys_property_fails() {
    for (text, kind) in [
        ("SET sys.SequenceNumber = 1", EvalErrorKind::ReadOnlySystemProperty),
        ("SET sys.EnqueuedTimeUtc = 1", EvalErrorKind::ReadOnlySystemProperty),
        ("REMOVE sys.Label", EvalErrorKind::ReadOnlySystemProperty),
        ("SET sys.Nope = 1", EvalErrorKind::UnknownSystemProperty),
        ("SET a = 1 / 0", EvalErrorKind::DivideByZero),
    ] {
        let action = SqlRuleAction::parse(text, &no_params()).unwrap();
        let err = action.apply(&mut msg(&[]), &PublishInfo::default()).unwrap_err();
        assert_eq!(err.kind(), kind, "{text}");
    }
}

#[test]
fn action_limits_32_statements_and_1024_characters() {
    let ok = vec!["SET a = 1"; MAX_ACTION_STATEMENTS].join("; ");
    assert_eq!(SqlRuleAction::parse(&ok, &no_params()).unwrap().statements().len(), 32);
    let over = vec!["SET a = 1"; MAX_ACTION_STATEMENTS + 1].join("; ");
    assert_eq!(action_error(&over).kind, FilterErrorKind::TooManyStatements);

    let long = format!("SET a = '{}'", "x".repeat(MAX_EXPRESSION_CHARS - 10));
    assert_eq!(long.chars().count(), MAX_EXPRESSION_CHARS);
    assert!(SqlRuleAction::parse(&long, &no_params()).is_ok());
    let longer = format!("SET a = '{}'", "x".repeat(MAX_EXPRESSION_CHARS - 9));
    assert_eq!(action_error(&longer).kind, FilterErrorKind::TooLong);
}

#[test]
fn action_empty_or_only_semicolons_is_refused() {
    for text in [
        "",
        ";",
        "  ",
        "SET",
        "SET a",
        "SET a =",
        "REMOVE",
        "SET SET = 1",
        "SET a = 1;;",
        "; SET a = 1",
    ] {
        assert_eq!(action_error(text).kind, FilterErrorKind::Syntax, "{text:?}");
    }
}

#[test]
fn action_set_to_a_condition_is_refused() {
    assert_eq!(action_error("SET a = b = 1").kind, FilterErrorKind::Syntax);
    assert_eq!(action_error("SET a = (b = 1)").kind, FilterErrorKind::Syntax);
}

// ---------------------------------------------------------------------------------------------
// Creation errors

#[test]
fn error_reports_line_and_zero_based_column() {
    let e = parse_error("a = 1 AND\n  b == 2");
    assert_eq!((e.line, e.column, e.token.as_str()), (2, 5, "="));
    assert_eq!(
        e.to_string(),
        "There was an error parsing the SQL expression. [Token line=2, column=5, Token in \
         error= =, Additional details= syntax error, unexpected '=', expecting a constant, a \
         property, a parameter, a function, or '(']"
    );
}

#[test]
fn error_after_a_complete_predicate_expects_and_or() {
    let e = parse_error("a = 1 b = 2");
    assert_eq!((e.column, e.token.as_str()), (6, "b"));
    assert_eq!(e.details, "syntax error, unexpected IDENTIFIER, expecting AND, or OR");
}

#[test]
fn error_filter_length_limit() {
    let ok = format!("a = '{}'", "x".repeat(MAX_EXPRESSION_CHARS - 6));
    assert_eq!(ok.chars().count(), MAX_EXPRESSION_CHARS);
    assert!(SqlFilter::parse(&ok, &no_params()).is_ok());
    let e = parse_error(&format!("a = '{}'", "x".repeat(MAX_EXPRESSION_CHARS - 5)));
    assert_eq!(e.kind, FilterErrorKind::TooLong);
    assert!(e.details.contains("1025"), "{}", e.details);
    // Characters, not bytes.
    let wide = format!("a = '{}'", "é".repeat(MAX_EXPRESSION_CHARS - 6));
    assert!(SqlFilter::parse(&wide, &no_params()).is_ok());
}

#[test]
fn error_unknown_parameter() {
    let e = parse_error("a = @missing");
    assert_eq!(e.kind, FilterErrorKind::UnknownParameter);
    assert_eq!((e.column, e.token.as_str()), (4, "@missing"));
}

#[test]
fn parameters_match_case_insensitively_with_or_without_at() {
    let params = Parameters::from([
        ("@StringParam".to_owned(), s("orders").into()),
        ("count".to_owned(), PropertyValue::Int(3).into()),
    ]);
    let m = msg(&[("kind", s("orders")), ("n", Int(3))]);
    check_with("kind = @stringparam AND n = @COUNT", &params, &m, Match);
}

#[test]
fn error_value_where_a_condition_is_needed() {
    for text in [
        "TRUE",
        "flag",
        "1",
        "a AND b = 1",
        "a = 1 OR 2",
        "NOT a",
        "(a = 1) = TRUE",
        "a = b = c",
        "a IS NULL = TRUE",
        "1 IS NULL",
        "a + 1 IS NULL",
        "(a = 1) + 1 = 2",
        "EXISTS(a) = TRUE",
        "a IN (b = 1)",
    ] {
        assert_eq!(parse_error(text).kind, FilterErrorKind::Syntax, "{text}");
    }
}

#[test]
fn error_syntax_outside_the_language() {
    for text in [
        "a BETWEEN 1 AND 2",
        "a = 0x10",
        "a = 1 /* comment */",
        "a || b = 'x'",
        "a = .5",
        "a = 1e",
        "a = 'unterminated",
        "[unterminated = 1",
        "[] = 1",
        "a = 9223372036854775808",
        "a = 1E999",
        "a = @",
        "a = 1;",
        "x.y.z = 1",
        "sys. = 1",
        "nofunc(1) = 1",
        "newid(1) = 1",
        "a IN ()",
        "a IN 1",
        "a LIKE",
        "a IS 1",
        "EXISTS(1)",
        "AND = 1",
        "a = 1 AND",
        "(a = 1",
        "a = 1)",
        "",
        "   ",
        "a ! b",
        "a = 1 ESCAPE 'x'",
    ] {
        assert_eq!(parse_error(text).kind, FilterErrorKind::Syntax, "{text:?}");
    }
}

#[test]
fn error_nesting_deeper_than_the_bound() {
    let ok = format!("{}a = 1{}", "(".repeat(MAX_NESTING - 1), ")".repeat(MAX_NESTING - 1));
    assert!(SqlFilter::parse(&ok, &no_params()).is_ok());
    for text in [
        format!("{}a = 1{}", "(".repeat(500), ")".repeat(500)),
        format!("{}a = 1", "NOT ".repeat(200)),
        format!("a = {}1", "-".repeat(1000)),
        format!("a = {}1{}", "p(".repeat(300), ")".repeat(300)),
        "(".repeat(1024),
    ] {
        assert_eq!(parse_error(&text).kind, FilterErrorKind::TooDeep, "{}", &text[..20]);
    }
}

#[test]
fn keywords_and_functions_are_case_insensitive_and_scope_words_stay_names() {
    let m = msg(&[("p", Int(1)), ("sys", Int(2)), ("user", Int(3)), ("color", s("red"))]);
    check("p = 1 aNd sys = 2 AND user = 3 and P('color') = 'red'", &m, Match);
    check(
        "Exists(color) and color Like 'r%' AND color In ('red') And color iS Not nUll",
        &m,
        Match,
    );
    check("NEWID() <> Newid() AND TRUE = true", &m, Match);
}

#[test]
fn sys_subject_is_an_alias_of_label() {
    check("sys.Subject = 'x'", &sys(|p| p.subject = Some("x".into())), Match);
}

// ---------------------------------------------------------------------------------------------
// Three-valued logic

const T: &str = "1 = 1";
const F: &str = "1 = 0";
const U: &str = "missing = 1";

fn truth(expr: &str) -> Tri {
    tri(expr, &msg(&[]))
}

#[test]
fn three_valued_and_or_follow_the_docs_tables() {
    use Tri::{False as Fa, True as Tr, Unknown as Un};
    let values = [(T, Tr), (F, Fa), (U, Un)];
    let and = [[Tr, Fa, Un], [Fa, Fa, Fa], [Un, Fa, Un]];
    let or = [[Tr, Tr, Tr], [Tr, Fa, Un], [Tr, Un, Un]];
    for (i, (l, _)) in values.iter().enumerate() {
        for (j, (r, _)) in values.iter().enumerate() {
            assert_eq!(truth(&format!("({l}) AND ({r})")), and[i][j], "{l} AND {r}");
            assert_eq!(truth(&format!("({l}) OR ({r})")), or[i][j], "{l} OR {r}");
        }
    }
    for (p, v) in values {
        assert_eq!(truth(&format!("NOT ({p})")), !v, "NOT {p}");
    }
}

#[test]
fn three_valued_predicates_on_unknown() {
    assert_eq!(truth("missing IN (1, 2)"), Tri::Unknown);
    assert_eq!(truth("missing NOT IN (1, 2)"), Tri::Unknown);
    assert_eq!(truth("1 IN (missing, 2)"), Tri::False, "unknown items do not make IN unknown");
    assert_eq!(truth("1 IN (missing, 1)"), Tri::True);
    assert_eq!(truth("missing LIKE 'a%'"), Tri::Unknown);
    assert_eq!(truth("'a' LIKE missing"), Tri::Unknown);
    assert_eq!(truth("'a' LIKE 'a' ESCAPE missing"), Tri::Unknown);
    assert_eq!(truth("missing IS NULL"), Tri::True);
    assert_eq!(truth("missing IS NOT NULL"), Tri::False);
    assert_eq!(truth("1 = NULL"), Tri::Unknown);
    assert_eq!(truth("NULL = NULL"), Tri::Unknown);
    assert_eq!(truth("missing + 1 = 1"), Tri::Unknown);
    assert_eq!(truth("-missing = 1"), Tri::Unknown);
}

#[test]
fn mismatched_kinds_are_unknown() {
    let m = msg(&[
        ("b", PropertyValue::Bool(true)),
        ("g", PropertyValue::Uuid(uuid::Uuid::nil())),
        ("bin", PropertyValue::Binary(bytes::Bytes::from_static(b"x"))),
        ("c", PropertyValue::Char('x')),
    ]);
    for expr in ["b = 1", "b > FALSE", "g = 'x'", "bin = 'x'", "c = 'x'", "'a' < 1", "b - 1 = 0"] {
        assert_eq!(tri(expr, &m), Tri::Unknown, "{expr}");
    }
    assert_eq!(tri("b <> FALSE", &m), Tri::True);
    assert_eq!(tri("EXISTS(bin) AND bin IS NOT NULL", &m), Tri::True);
}

// ---------------------------------------------------------------------------------------------
// Values, arithmetic, system properties

#[test]
fn integers_of_every_width_compare_exactly() {
    let m = msg(&[
        ("big", PropertyValue::ULong(u64::MAX)),
        ("b", PropertyValue::UByte(7)),
        ("s", PropertyValue::Short(-7)),
        ("f", PropertyValue::Float(0.5)),
    ]);
    check("big > 9223372036854775807", &m, Match);
    check("b = 7 AND s = -7 AND b + s = 0 AND f = 0.5 AND f * 2 = 1", &m, Match);
}

#[test]
fn arithmetic_follows_csharp() {
    let m = msg(&[]);
    for expr in [
        "-7 / 2 = -3",
        "-7 % 3 = -1",
        "7 % -3 = 1",
        "9223372036854775807 + 1 < 0",
        "1 / 0.0 > 1E300",
        "2 + 3 * 4 = 14",
        "(2 + 3) * 4 = 20",
        "10 - 2 - 3 = 5",
        "'a' + 1 = 'a1'",
        "+2 = 2",
        "-(-2) = 2",
    ] {
        check(expr, &m, Match);
    }
    check("1 % 0 = 0", &m, Error("DivideByZeroException"));
    assert_eq!(truth("+'a' = 'a'"), Tri::Unknown);
}

#[test]
fn not_binds_looser_than_comparison_and_and_tighter_than_or() {
    let m = msg(&[("a", Int(1)), ("b", Int(2)), ("c", Int(3))]);
    check("NOT a = 2 AND b = 2", &m, Match);
    check("a = 9 AND b = 9 OR c = 3", &m, Match);
    check("a = 9 AND (b = 9 OR c = 3)", &m, NoMatch);
}

#[test]
fn like_patterns() {
    for (text, pattern, escape, expected) in [
        ("", "", None, true),
        ("", "%", None, true),
        ("abc", "%", None, true),
        ("abc", "a%c", None, true),
        ("abc", "%b%", None, true),
        ("abc", "%%c", None, true),
        ("abc", "___", None, true),
        ("abc", "__", None, false),
        ("abc", "ab", None, false),
        ("aXbXc", "a%b%c", None, true),
        ("aXbXd", "a%b%c", None, false),
        ("ünïcødé", "ü_ï%é", None, true),
        ("a_c", "a!_c", Some('!'), true),
        ("abc", "a!_c", Some('!'), false),
        ("a!", "a!", Some('!'), true),
        ("[ab]", "[ab]", None, true),
    ] {
        assert_eq!(value::like(text, pattern, escape), expected, "{text:?} LIKE {pattern:?}");
    }
}

#[test]
fn system_properties_read_message_and_publish_values() {
    let mut m = msg(&[]);
    m.properties = MessageProperties {
        message_id: Some("m1".into()),
        session_id: Some("s1".into()),
        partition_key: Some("pk".into()),
        reply_to: Some("r".into()),
        reply_to_session_id: Some("rs".into()),
        content_type: Some("application/json".into()),
        time_to_live: Some(Duration::from_secs(60)),
        ..MessageProperties::default()
    };
    let publish = PublishInfo {
        enqueued_time: crate::types::Timestamp::from_millis(OCT_22_2020),
        sequence_number: crate::types::SequenceNumber(42),
        size: 512,
        ..PublishInfo::default()
    };
    let ctx = EvalContext::with_publish(&m, publish);
    for expr in [
        "sys.MessageId = 'm1' AND sys.SessionId = 's1' AND sys.PartitionKey = 'pk'",
        "sys.ReplyTo = 'r' AND sys.ReplyToSessionId = 'rs'",
        "sys.ContentType LIKE 'application/%'",
        "sys.SequenceNumber = 42 AND sys.Size > 500 AND sys.DeliveryCount = 0 AND sys.State = 0",
        "sys.EnqueuedTimeUtc < sys.ExpiresAtUtc",
        "sys.ExpiresAtUtc - sys.EnqueuedTimeUtc = sys.TimeToLive",
        "sys.LockToken IS NULL AND sys.DeadLetterSource IS NULL AND sys.To IS NULL",
        "EXISTS(sys.To) AND sys.ForcePersistence = FALSE",
        "sys.ScheduledEnqueueTimeUtc < sys.EnqueuedTimeUtc",
    ] {
        let f = SqlFilter::parse(expr, &no_params()).unwrap();
        assert_eq!(f.evaluate(&ctx), Ok(Tri::True), "{expr}");
    }
    let bad = SqlFilter::parse("EXISTS(sys.Bogus)", &no_params()).unwrap();
    assert_eq!(bad.evaluate(&ctx).unwrap_err().kind(), EvalErrorKind::UnknownSystemProperty);
    // Every known sys name evaluates (no FilterException).
    for p in SystemProperty::all() {
        let f = SqlFilter::parse(&format!("sys.{} IS NULL", p.name()), &no_params()).unwrap();
        assert!(f.evaluate(&ctx).is_ok(), "{}", p.name());
    }
}

#[test]
fn case_insensitive_lookup_prefers_the_exact_key_then_the_first_in_order() {
    let m = msg(&[("Color", s("b")), ("color", s("a")), ("COLOR", s("c"))]);
    check("color = 'a'", &m, Match);
    // Else the first in byte order: COLOR < Color < color.
    check("cOLOR = 'c'", &m, Match);
}

#[test]
fn unicode_property_names_match_ignoring_case() {
    check("ÉTÉ = 1", &msg(&[("été", Int(1))]), Match);
}

#[test]
fn evaluation_error_carries_type_and_description() {
    let f = SqlFilter::parse("sys.NoSuchProp = 1", &no_params()).unwrap();
    let e = f.evaluate(&EvalContext::new(&msg(&[]))).unwrap_err();
    assert_eq!(e.exception_type(), "FilterException");
    assert_eq!(e.description(), "sys.NoSuchProp is not a system property");
}

#[test]
fn filter_true_false_and_expression_text() {
    let m = msg(&[]);
    let ctx = EvalContext::new(&m);
    assert_eq!(Filter::True.evaluate(&ctx), Ok(true));
    assert_eq!(Filter::False.evaluate(&ctx), Ok(false));
    let f = SqlFilter::parse("Color  =  'x' or 1=1", &no_params()).unwrap();
    assert_eq!(f.expression(), "Color  =  'x' or 1=1");
    assert_eq!(f.to_string(), "Color = 'x' OR 1 = 1");
}

// ---------------------------------------------------------------------------------------------
// Correlation filters

#[test]
fn correlation_every_set_field_must_match_exactly() {
    let filter = CorrelationFilter {
        correlation_id: Some("abc".into()),
        subject: Some("Important".into()),
        ..CorrelationFilter::default()
    };
    let mut m = sys(|p| {
        p.correlation_id = Some("abc".into());
        p.subject = Some("Important".into());
    });
    assert!(filter.matches(&m));
    m.properties.subject = Some("important".into());
    assert!(!filter.matches(&m), "case-sensitive");
    m.properties.subject = None;
    assert!(!filter.matches(&m), "a set field needs the message's field");
}

type FilterField = fn(&mut CorrelationFilter) -> &mut Option<String>;
type MessageField = fn(&mut MessageProperties) -> &mut Option<String>;

#[test]
fn correlation_each_system_field() {
    let fields: [(FilterField, MessageField); 8] = [
        (|f| &mut f.correlation_id, |p| &mut p.correlation_id),
        (|f| &mut f.message_id, |p| &mut p.message_id),
        (|f| &mut f.to, |p| &mut p.to),
        (|f| &mut f.reply_to, |p| &mut p.reply_to),
        (|f| &mut f.subject, |p| &mut p.subject),
        (|f| &mut f.session_id, |p| &mut p.session_id),
        (|f| &mut f.reply_to_session_id, |p| &mut p.reply_to_session_id),
        (|f| &mut f.content_type, |p| &mut p.content_type),
    ];
    for (i, (filter_field, message_field)) in fields.iter().enumerate() {
        let mut filter = CorrelationFilter::default();
        *filter_field(&mut filter) = Some("v".into());
        let mut m = msg(&[]);
        assert!(!filter.matches(&m), "field {i}");
        *message_field(&mut m.properties) = Some("v".into());
        assert!(filter.matches(&m), "field {i}");
        *message_field(&mut m.properties) = Some("w".into());
        assert!(!filter.matches(&m), "field {i}");
    }
}

#[test]
fn correlation_properties_case_insensitive_keys_typed_values() {
    let filter = CorrelationFilter {
        properties: pairs(&[
            ("Color", s("blue")),
            ("n", Int(1)),
            ("ok", PropertyValue::Bool(true)),
        ]),
        ..CorrelationFilter::default()
    };
    let m = msg(&[("color", s("blue")), ("N", UInt(1)), ("ok", PropertyValue::Bool(true))]);
    assert!(filter.matches(&m));
    let m = msg(&[("color", s("Blue")), ("N", UInt(1)), ("ok", PropertyValue::Bool(true))]);
    assert!(!filter.matches(&m), "values are case-sensitive");
    let m = msg(&[("color", s("blue")), ("ok", PropertyValue::Bool(true))]);
    assert!(!filter.matches(&m), "a missing property does not match");
    let m = msg(&[("color", s("blue")), ("N", s("1")), ("ok", PropertyValue::Bool(true))]);
    assert!(!filter.matches(&m), "no cross-kind equality");
}

#[test]
fn correlation_empty_matches_everything_and_null_matches_missing_or_null() {
    assert!(CorrelationFilter::default().is_empty());
    assert!(CorrelationFilter::default().matches(&msg(&[])));
    let filter =
        CorrelationFilter { properties: pairs(&[("x", Null)]), ..CorrelationFilter::default() };
    assert!(filter.matches(&msg(&[])));
    assert!(filter.matches(&msg(&[("x", Null)])));
    assert!(!filter.matches(&msg(&[("x", Int(1))])));
}

#[test]
fn correlation_filter_prints_as_the_equivalent_sql() {
    let filter = CorrelationFilter {
        reply_to: Some("johndoe@contoso.com".into()),
        subject: Some("Important".into()),
        properties: pairs(&[("color", s("Red"))]),
        ..CorrelationFilter::default()
    };
    let sql = filter.to_string();
    assert_eq!(
        sql,
        "sys.ReplyTo = 'johndoe@contoso.com' AND sys.Label = 'Important' AND color = 'Red'"
    );
    let sql = SqlFilter::parse(&sql, &no_params()).unwrap();
    let matching = {
        let mut m = msg(&[("Color", s("Red"))]);
        m.properties.reply_to = Some("johndoe@contoso.com".into());
        m.properties.subject = Some("Important".into());
        m
    };
    for m in [matching.clone(), msg(&[("color", s("Red"))]), {
        let mut m = matching;
        m.properties.subject = Some("x".into());
        m
    }] {
        let ctx = EvalContext::new(&m);
        assert_eq!(Filter::Correlation(filter.clone()).evaluate(&ctx), sql.matches(&ctx));
    }
    assert_eq!(CorrelationFilter::default().to_string(), "1=1");
}

// ---------------------------------------------------------------------------------------------
// Property tests: printing round-trips; nothing panics

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z][a-zA-Z0-9_]{0,6}",
        "[ -~]{1,8}",
        "\\PC{1,4}",
        Just("AND".to_owned()),
        Just("sys".to_owned()),
        Just("p".to_owned()),
        Just("SET".to_owned()),
    ]
}

fn property() -> impl Strategy<Value = Property> {
    prop_oneof![
        name().prop_map(Property::User),
        name().prop_map(|n| Property::System(SystemProperty::from_name(&n))),
        prop::sample::select(SystemProperty::all().collect::<Vec<_>>()).prop_map(Property::System),
    ]
}

fn literal() -> impl Strategy<Value = Literal> {
    prop_oneof![
        Just(Literal::Null),
        any::<bool>().prop_map(Literal::Bool),
        (0..=i64::MAX).prop_map(Literal::Integer),
        any::<f64>()
            .prop_filter("a finite, positive double", |d| d.is_finite() && d.is_sign_positive())
            .prop_map(Literal::Double),
        "\\PC{0,6}".prop_map(Literal::String),
        "[' ]{0,3}".prop_map(Literal::String),
    ]
}

fn test_parameters() -> Parameters {
    Parameters::from([
        ("@p1".to_owned(), PropertyValue::Int(5).into()),
        ("@when".to_owned(), timestamp(OCT_22_2020).into()),
        ("@span".to_owned(), ParameterValue::TimeSpan(Duration::from_secs(60))),
    ])
}

fn parameter() -> impl Strategy<Value = Expr> {
    let params: Vec<(String, Literal)> =
        test_parameters().iter().map(|(k, v)| (k.clone(), v.to_literal())).collect();
    prop::sample::select(params).prop_map(|(name, value)| Expr::Parameter(name, value))
}

fn arith_op() -> impl Strategy<Value = ArithOp> {
    prop::sample::select(vec![ArithOp::Add, ArithOp::Sub, ArithOp::Mul, ArithOp::Div, ArithOp::Mod])
}

fn compare_op() -> impl Strategy<Value = CompareOp> {
    prop::sample::select(vec![
        CompareOp::Eq,
        CompareOp::NotEq,
        CompareOp::Lt,
        CompareOp::Le,
        CompareOp::Gt,
        CompareOp::Ge,
    ])
}

fn expr() -> impl Strategy<Value = Expr> {
    let leaf = prop_oneof![
        literal().prop_map(Expr::Literal),
        parameter(),
        property().prop_map(Expr::Property),
        Just(Expr::NewId),
    ];
    leaf.prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| Expr::Negate(Box::new(e))),
            inner.clone().prop_map(|e| Expr::Plus(Box::new(e))),
            inner.clone().prop_map(|e| Expr::PropertyOf(Box::new(e))),
            (arith_op(), inner.clone(), inner).prop_map(|(op, l, r)| Expr::Arith(
                op,
                Box::new(l),
                Box::new(r)
            )),
        ]
    })
}

fn predicate() -> impl Strategy<Value = Predicate> {
    let leaf = prop_oneof![
        (compare_op(), expr(), expr()).prop_map(|(op, l, r)| Predicate::Compare(op, l, r)),
        (expr(), prop::collection::vec(expr(), 1..4), any::<bool>())
            .prop_map(|(expr, list, negated)| Predicate::In { expr, list, negated }),
        (expr(), expr(), prop::option::of(expr()), any::<bool>()).prop_map(
            |(expr, pattern, escape, negated)| Predicate::Like { expr, pattern, escape, negated }
        ),
        (property(), any::<bool>())
            .prop_map(|(property, negated)| Predicate::IsNull { property, negated }),
        property().prop_map(Predicate::Exists),
    ];
    leaf.prop_recursive(4, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 2..4).prop_map(Predicate::And),
            prop::collection::vec(inner.clone(), 2..4).prop_map(Predicate::Or),
            inner.prop_map(|p| Predicate::Not(Box::new(p))),
        ]
    })
}

fn statement() -> impl Strategy<Value = Statement> {
    prop_oneof![
        (property(), expr()).prop_map(|(p, e)| Statement::Set(p, e)),
        property().prop_map(Statement::Remove),
    ]
}

/// A fixed message for evaluating whatever parses.
fn fuzz_message() -> Message {
    let mut m = msg(&[
        ("color", s("red")),
        ("n", Int(10)),
        ("big", PropertyValue::ULong(u64::MAX)),
        ("when", timestamp(OCT_22_2020)),
        ("AND", Null),
    ]);
    m.properties.subject = Some("subject".into());
    m
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn printed_filters_parse_back_to_the_same_tree(p in predicate()) {
        let text = p.to_string();
        prop_assume!(text.chars().count() <= MAX_EXPRESSION_CHARS);
        let parsed = SqlFilter::parse(&text, &test_parameters())
            .map_err(|e| TestCaseError::fail(format!("{text}\n{e}")))?;
        prop_assert_eq!(parsed.predicate(), &p, "{}", text);
        // And evaluation never panics.
        let m = fuzz_message();
        let _ = parsed.evaluate(&EvalContext::new(&m));
    }

    #[test]
    fn printed_actions_parse_back_to_the_same_statements(
        statements in prop::collection::vec(statement(), 1..5)
    ) {
        let text = statements.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
        prop_assume!(text.chars().count() <= MAX_EXPRESSION_CHARS);
        let parsed = SqlRuleAction::parse(&text, &test_parameters())
            .map_err(|e| TestCaseError::fail(format!("{text}\n{e}")))?;
        prop_assert_eq!(parsed.statements(), &statements[..], "{}", text);
        prop_assert_eq!(parsed.to_string(), text);
        let mut m = fuzz_message();
        let _ = parsed.apply(&mut m, &PublishInfo::default());
    }

    #[test]
    fn any_text_parses_or_fails_without_panicking(text in "\\PC{0,40}|[a-z()'\\[\\]@=<>!%_ .,;+*/-]{0,60}") {
        round_trip_if_valid(&text);
    }

    #[test]
    fn sql_like_token_soup_never_panics(
        words in prop::collection::vec(prop::sample::select(vec![
            "a", "sys.Label", "user.n", "(", ")", "=", "<>", "AND", "OR", "NOT", "IN", "LIKE",
            "ESCAPE", "IS", "NULL", "EXISTS", "TRUE", "1", "2.5", "'x'", ",", "+", "-", "*", "/",
            "%", "p(", "newid()", "@p1", "SET", "REMOVE", ";", "[a b]",
        ]), 0..24)
    ) {
        round_trip_if_valid(&words.join(" "));
    }

    #[test]
    fn like_agrees_with_a_naive_matcher(
        text in "[ab%_!é😀]{0,8}",
        pattern in "[ab%_!é😀]{0,6}",
        escape in prop::option::of(prop::sample::select(vec!['!', 'é', '%', '_'])),
    ) {
        prop_assert_eq!(
            value::like(&text, &pattern, escape),
            naive_like(&text.chars().collect::<Vec<_>>(), &pattern.chars().collect::<Vec<_>>(), escape),
            "{:?} LIKE {:?} ESCAPE {:?}", text, pattern, escape
        );
    }
}

/// Parses `text` as a filter and an action; whatever parses prints, re-parses to the same tree
/// and evaluates without panicking.
fn round_trip_if_valid(text: &str) {
    let params = test_parameters();
    let m = fuzz_message();
    if let Ok(f) = SqlFilter::parse(text, &params) {
        let printed = f.to_string();
        if printed.chars().count() <= MAX_EXPRESSION_CHARS {
            let again = SqlFilter::parse(&printed, &params)
                .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}: {e}"));
            assert_eq!(again.predicate(), f.predicate(), "{text:?} printed as {printed:?}");
        }
        let _ = f.evaluate(&EvalContext::new(&m));
    }
    if let Ok(a) = SqlRuleAction::parse(text, &params) {
        let printed = a.to_string();
        if printed.chars().count() <= MAX_EXPRESSION_CHARS {
            let again = SqlRuleAction::parse(&printed, &params)
                .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}: {e}"));
            assert_eq!(again.statements(), a.statements());
        }
        let _ = a.apply(&mut m.clone(), &PublishInfo::default());
    }
}

fn naive_like(t: &[char], p: &[char], escape: Option<char>) -> bool {
    match p.first() {
        None => t.is_empty(),
        Some(&c) if Some(c) == escape && p.len() > 1 => {
            t.first() == Some(&p[1]) && naive_like(&t[1..], &p[2..], escape)
        }
        Some(&c) if Some(c) == escape => {
            t.first() == Some(&c) && naive_like(&t[1..], &p[1..], escape)
        }
        Some('%') => (0..=t.len()).any(|i| naive_like(&t[i..], &p[1..], escape)),
        Some('_') => !t.is_empty() && naive_like(&t[1..], &p[1..], escape),
        Some(&c) => t.first() == Some(&c) && naive_like(&t[1..], &p[1..], escape),
    }
}

#[test]
fn longest_flat_chains_parse_print_and_evaluate() {
    // Left-associative chains are loops in the parser, not recursion: no nesting limit applies,
    // and the 1,024-character limit bounds the tree's depth.
    let sum = format!("a{} = 1", " + a".repeat(250));
    assert!(sum.chars().count() <= MAX_EXPRESSION_CHARS);
    let ors = vec!["a = 1"; 110].join(" OR ");
    let list = format!("a IN ({})", vec!["1"; 300].join(","));
    let m = msg(&[("a", Int(1))]);
    for text in [sum, ors, list] {
        round_trip_if_valid(&text);
        let f = SqlFilter::parse(&text, &no_params()).unwrap();
        assert!(f.evaluate(&EvalContext::new(&m)).is_ok());
    }
}

#[test]
fn printed_signs_do_not_nest_deeper_than_the_text_read() {
    // Found by the fuzz target: `-(-(…))` printed for `--…` went over the nesting limit.
    let text = format!("s = o * e * o {}d", "-".repeat(60));
    round_trip_if_valid(&text);
    let f = SqlFilter::parse("a = - -1 AND b = +-2 AND c = -(1 + 2)", &no_params()).unwrap();
    assert_eq!(f.to_string(), "a = - -1 AND b = + -2 AND c = -(1 + 2)");
}
