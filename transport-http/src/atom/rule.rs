//! A rule's description in ATOM: `<RuleDescription>` with its filter and action, and the
//! parsing of a rule (also the `DefaultRuleDescription` of a subscription PUT).
//!
//! The shapes both clients need (http.md B.7): `i:type` attributes resolved by namespace on
//! input and written with `i` bound to XMLSchema-instance on output; filter and action type
//! values unprefixed (`SqlFilter`, not `d2p1:SqlFilter`); parameter and property values typed
//! `d6p1:<xsd type>` (a four-character prefix: JS drops the first five characters).

use ironbus_core::{
    CorrelationFilter, EntityInfo, PropertyValue, RuleAction, RuleDescription, RuleFilter,
    Timestamp,
};

use crate::atom::{self, entry_document, escape, optional, CONNECT_NS, XSI_NS};
use crate::error::HttpError;
use crate::timefmt::{iso8601, parse_iso8601_zoned, parse_xml_duration, xml_duration};

const XSD_NS: &str = "http://www.w3.org/2001/XMLSchema";

/// A rule's `<entry>`.
pub fn entry(base: &str, info: &EntityInfo, rule: &RuleDescription) -> String {
    entry_document(&entry_element(base, info, rule, true))
}

pub(crate) fn entry_element(
    base: &str,
    info: &EntityInfo,
    rule: &RuleDescription,
    declare_ns: bool,
) -> String {
    let name = info.path.name();
    let description = format!(
        r#"<RuleDescription xmlns="{CONNECT_NS}" xmlns:i="{XSI_NS}">{}</RuleDescription>"#,
        body(rule, name, info.created_at)
    );
    atom::entry_element(
        base,
        info.path.as_str(),
        name,
        info.created_at,
        info.updated_at,
        &description,
        declare_ns,
    )
}

/// The children of a `<RuleDescription>` (or a `<DefaultRuleDescription>`): Filter, Action,
/// CreatedAt, Name.
pub(crate) fn body(rule: &RuleDescription, name: &str, created: Timestamp) -> String {
    let sql = |kind: &str, expression: &str, parameters: &[(String, PropertyValue)]| {
        format!(
            concat!(
                r#"i:type="{kind}"><SqlExpression>{expression}</SqlExpression>"#,
                "<CompatibilityLevel>20</CompatibilityLevel>{parameters}",
            ),
            kind = kind,
            expression = escape(expression),
            parameters = key_values("Parameters", parameters),
        )
    };
    let filter = match &rule.filter {
        RuleFilter::True => format!("<Filter {}</Filter>", sql("TrueFilter", "1=1", &[])),
        RuleFilter::False => format!("<Filter {}</Filter>", sql("FalseFilter", "1>1", &[])),
        RuleFilter::Sql { expression, parameters } => {
            format!("<Filter {}</Filter>", sql("SqlFilter", expression, parameters))
        }
        RuleFilter::Correlation(c) => format!(
            r#"<Filter i:type="CorrelationFilter">{}{}{}{}{}{}{}{}{}</Filter>"#,
            optional("CorrelationId", c.correlation_id.as_deref()),
            optional("MessageId", c.message_id.as_deref()),
            optional("To", c.to.as_deref()),
            optional("ReplyTo", c.reply_to.as_deref()),
            optional("Label", c.subject.as_deref()),
            optional("SessionId", c.session_id.as_deref()),
            optional("ReplyToSessionId", c.reply_to_session_id.as_deref()),
            optional("ContentType", c.content_type.as_deref()),
            key_values("Properties", &c.properties),
        ),
    };
    let action = match &rule.action {
        None => r#"<Action i:type="EmptyRuleAction"/>"#.to_owned(),
        Some(a) => format!(
            "<Action {}<RequiresPreprocessing>false</RequiresPreprocessing></Action>",
            sql("SqlRuleAction", &a.expression, &a.parameters)
        ),
    };
    format!(
        "{filter}{action}<CreatedAt>{}</CreatedAt><Name>{}</Name>",
        iso8601(created),
        escape(name)
    )
}

/// `<Parameters>` / `<Properties>`: `KeyValueOfstringanyType` items with typed values.
fn key_values(element: &str, items: &[(String, PropertyValue)]) -> String {
    let mut out = format!("<{element}>");
    for (key, value) in items {
        out.push_str("<KeyValueOfstringanyType><Key>");
        out.push_str(&escape(key));
        out.push_str("</Key>");
        out.push_str(&typed_value(value));
        out.push_str("</KeyValueOfstringanyType>");
    }
    out.push_str(&format!("</{element}>"));
    out
}

fn typed_value(value: &PropertyValue) -> String {
    let (xsd, text) = match value {
        PropertyValue::Null => return r#"<Value i:nil="true"/>"#.to_owned(),
        PropertyValue::Bool(b) => ("boolean", b.to_string()),
        PropertyValue::UByte(v) => ("int", v.to_string()),
        PropertyValue::UShort(v) => ("int", v.to_string()),
        PropertyValue::Byte(v) => ("int", v.to_string()),
        PropertyValue::Short(v) => ("int", v.to_string()),
        PropertyValue::Int(v) => ("int", v.to_string()),
        PropertyValue::UInt(v) => ("long", v.to_string()),
        PropertyValue::Long(v) => ("long", v.to_string()),
        PropertyValue::ULong(v) => ("long", v.to_string()),
        PropertyValue::Float(v) => ("double", v.to_string()),
        PropertyValue::Double(v) => ("double", v.to_string()),
        PropertyValue::Char(c) => ("string", c.to_string()),
        PropertyValue::Timestamp(t) => ("dateTime", iso8601(*t)),
        // Without a zone, as it was given.
        PropertyValue::LocalTimestamp(t) => {
            ("dateTime", iso8601(*t).trim_end_matches('Z').to_owned())
        }
        PropertyValue::TimeSpan(ms) => {
            let length = xml_duration(std::time::Duration::from_millis(ms.unsigned_abs()));
            ("duration", if *ms < 0 { format!("-{length}") } else { length })
        }
        PropertyValue::Uuid(u) => ("string", u.to_string()),
        PropertyValue::Binary(b) => ("string", String::from_utf8_lossy(b).into_owned()),
        PropertyValue::String(s) => ("string", s.clone()),
    };
    format!(r#"<Value xmlns:d6p1="{XSD_NS}" i:type="d6p1:{xsd}">{}</Value>"#, escape(&text))
}

/// The `i:type` value of an element, without any prefix.
fn xsi_type<'a>(node: roxmltree::Node<'a, '_>) -> Option<&'a str> {
    node.attribute((XSI_NS, "type")).map(|t| t.rsplit(':').next().unwrap_or(t))
}

fn child<'a, 'i>(node: roxmltree::Node<'a, 'i>, name: &str) -> Option<roxmltree::Node<'a, 'i>> {
    node.children().find(|n| n.is_element() && n.tag_name().name() == name)
}

fn child_text(node: roxmltree::Node<'_, '_>, name: &str) -> Option<String> {
    child(node, name).map(|n| n.text().unwrap_or("").to_owned())
}

/// Parses a `<RuleDescription>` (or `<DefaultRuleDescription>`): its filter (none → True) and
/// action (none or `EmptyRuleAction` → none). The name element, if any, is not part of the
/// description (see [`name`]).
pub(crate) fn parse(description: roxmltree::Node<'_, '_>) -> Result<RuleDescription, HttpError> {
    let filter = match child(description, "Filter") {
        None => RuleFilter::True,
        Some(filter) => parse_filter(filter)?,
    };
    let action = match child(description, "Action") {
        None => None,
        Some(action) => match xsi_type(action) {
            Some("EmptyRuleAction") => None,
            Some("SqlRuleAction") | None => match child_text(action, "SqlExpression") {
                Some(expression) => Some(RuleAction {
                    expression,
                    parameters: parse_key_values(child(action, "Parameters"))?,
                }),
                None => None,
            },
            Some(other) => {
                return Err(HttpError::bad_request(format!(
                    "unknown rule action type {other:?}: expected SqlRuleAction or EmptyRuleAction"
                )))
            }
        },
    };
    Ok(RuleDescription { filter, action })
}

/// The `<Name>` a rule description carries, if any.
pub(crate) fn name(description: roxmltree::Node<'_, '_>) -> Option<String> {
    child_text(description, "Name").map(|n| n.trim().to_owned()).filter(|n| !n.is_empty())
}

fn parse_filter(filter: roxmltree::Node<'_, '_>) -> Result<RuleFilter, HttpError> {
    let kind = xsi_type(filter).or_else(|| {
        // Untyped (JS ignores the type on output; a client may omit it on input): decide by the
        // presence of SqlExpression, as JS does.
        Some(if child(filter, "SqlExpression").is_some() {
            "SqlFilter"
        } else {
            "CorrelationFilter"
        })
    });
    Ok(match kind {
        Some("TrueFilter") => RuleFilter::True,
        Some("FalseFilter") => RuleFilter::False,
        Some("SqlFilter") => {
            let expression = child_text(filter, "SqlExpression").unwrap_or_default();
            let parameters = parse_key_values(child(filter, "Parameters"))?;
            if expression.trim().is_empty() {
                return Err(HttpError::bad_request("a SqlFilter needs a SqlExpression"));
            }
            RuleFilter::Sql { expression, parameters }
        }
        Some("CorrelationFilter") => {
            let text = |name: &str| child_text(filter, name).filter(|t| !t.is_empty());
            RuleFilter::Correlation(CorrelationFilter {
                correlation_id: text("CorrelationId"),
                message_id: text("MessageId"),
                to: text("To"),
                reply_to: text("ReplyTo"),
                subject: text("Label"),
                session_id: text("SessionId"),
                reply_to_session_id: text("ReplyToSessionId"),
                content_type: text("ContentType"),
                properties: parse_key_values(child(filter, "Properties"))?,
            })
        }
        other => {
            return Err(HttpError::bad_request(format!(
                "unknown filter type {:?}: expected SqlFilter, CorrelationFilter, TrueFilter or \
                 FalseFilter",
                other.unwrap_or("")
            )))
        }
    })
}

/// `KeyValueOfstringanyType` items (Python's own model calls them `KeyValueOfObjectType`).
fn parse_key_values(
    list: Option<roxmltree::Node<'_, '_>>,
) -> Result<Vec<(String, PropertyValue)>, HttpError> {
    let Some(list) = list else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for item in list.children().filter(|n| n.is_element()) {
        let key = child_text(item, "Key")
            .ok_or_else(|| HttpError::bad_request("a parameter or property has no Key"))?;
        let value = match child(item, "Value") {
            None => PropertyValue::Null,
            Some(v) => parse_value(&key, v)?,
        };
        out.push((key, value));
    }
    Ok(out)
}

fn parse_value(key: &str, node: roxmltree::Node<'_, '_>) -> Result<PropertyValue, HttpError> {
    if node.attribute((XSI_NS, "nil")).is_some_and(|n| n == "true") {
        return Ok(PropertyValue::Null);
    }
    let text = node.text().unwrap_or("");
    let bad = |xsd: &str| {
        HttpError::bad_request(format!("the value of {key} is not a valid {xsd}: {text:?}"))
    };
    let t = text.trim();
    Ok(match xsi_type(node).unwrap_or("string") {
        "string" | "anyURI" | "guid" | "char" => PropertyValue::String(text.to_owned()),
        "duration" => {
            let (sign, length) = t.strip_prefix('-').map_or((1, t), |rest| (-1, rest));
            let length = parse_xml_duration(length).ok_or_else(|| bad("duration"))?;
            PropertyValue::TimeSpan(sign * i64::try_from(length.as_millis()).unwrap_or(i64::MAX))
        }
        "boolean" => match t.to_ascii_lowercase().as_str() {
            "true" => PropertyValue::Bool(true),
            "false" => PropertyValue::Bool(false),
            _ => return Err(bad("boolean")),
        },
        "int" | "short" | "byte" | "unsignedByte" | "unsignedShort" => {
            PropertyValue::Int(t.parse().map_err(|_| bad("int"))?)
        }
        "long" | "unsignedInt" | "unsignedLong" | "integer" => {
            PropertyValue::Long(t.parse().map_err(|_| bad("long"))?)
        }
        "double" | "float" | "decimal" => {
            PropertyValue::Double(t.parse().map_err(|_| bad("double"))?)
        }
        "dateTime" => {
            // A zone makes it an instant; without one it is .NET's DateTimeKind.Unspecified,
            // and is described back the same way.
            let (at, zoned) = parse_iso8601_zoned(t).ok_or_else(|| bad("dateTime"))?;
            if zoned {
                PropertyValue::Timestamp(at)
            } else {
                PropertyValue::LocalTimestamp(at)
            }
        }
        other => {
            return Err(HttpError::bad_request(format!(
                "the value of {key} has the unsupported type {other:?}"
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use ironbus_core::{EntityDescription, EntityPath};

    use super::*;
    use crate::atom::{parse_description, Described, ATOM_NS};

    fn round_trip(rule: RuleDescription) -> String {
        let info = EntityInfo {
            path: EntityPath::parse("t/Subscriptions/s/Rules/$Default").unwrap(),
            description: EntityDescription::Rule(rule.clone()),
            created_at: Timestamp::from_millis(0),
            updated_at: Timestamp::from_millis(0),
        };
        let xml = entry("https://h", &info, &rule);
        match parse_description(xml.as_bytes()).unwrap().0 {
            Described::Rule(parsed) => assert_eq!(parsed, rule, "{xml}"),
            other => panic!("{}", other.kind()),
        }
        xml
    }

    #[test]
    fn every_filter_and_action_round_trips() {
        let xml = round_trip(RuleDescription::default());
        assert!(xml.contains(r#"<Filter i:type="TrueFilter">"#));
        assert!(xml.contains(r#"<Action i:type="EmptyRuleAction"/>"#));
        assert!(xml.contains("<id>https://h/t/Subscriptions/s/Rules/$Default?api-version"));
        assert!(xml.contains(r#"<title type="text">$Default</title>"#));
        round_trip(RuleDescription { filter: RuleFilter::False, action: None });
        let xml = round_trip(RuleDescription {
            filter: RuleFilter::Sql {
                expression: "color = @c AND n > @n".into(),
                parameters: vec![
                    ("@c".into(), PropertyValue::String("red".into())),
                    ("@n".into(), PropertyValue::Int(5)),
                    ("@l".into(), PropertyValue::Long(1 << 40)),
                    ("@d".into(), PropertyValue::Double(1.5)),
                    ("@b".into(), PropertyValue::Bool(true)),
                    ("@t".into(), PropertyValue::Timestamp(Timestamp::from_millis(1_500))),
                ],
            },
            action: Some(RuleAction {
                expression: "SET x = @v".into(),
                parameters: vec![("@v".into(), PropertyValue::String("w".into()))],
            }),
        });
        assert!(xml.contains("n &gt; @n"));
        assert!(xml.contains(r#"i:type="d6p1:string">red</Value>"#));
        assert!(xml.contains(r#"<Action i:type="SqlRuleAction">"#));
        round_trip(RuleDescription {
            filter: RuleFilter::Correlation(CorrelationFilter {
                correlation_id: Some("c".into()),
                subject: Some("label".into()),
                content_type: Some("application/json".into()),
                properties: vec![("p".into(), PropertyValue::String("v".into()))],
                ..Default::default()
            }),
            action: None,
        });
    }

    #[test]
    fn date_times_keep_their_zone_or_its_absence_and_durations_stay_durations() {
        let value = |xsd: &str, text: &str| {
            let xml = format!(
                r#"<RuleDescription xmlns="{CONNECT_NS}" xmlns:i="{XSI_NS}"><Filter i:type="CorrelationFilter"><Properties><KeyValueOfstringanyType><Key>k</Key><Value xmlns:d6p1="{XSD_NS}" i:type="d6p1:{xsd}">{text}</Value></KeyValueOfstringanyType></Properties></Filter></RuleDescription>"#
            );
            let Described::Rule(rule) = parse_description(xml.as_bytes()).unwrap().0 else {
                panic!()
            };
            let RuleFilter::Correlation(c) = rule.filter else { panic!() };
            c.properties[0].1.clone()
        };
        let at = Timestamp::from_millis(1_593_947_533_000); // 2020-07-05T11:12:13Z
        assert_eq!(value("dateTime", "2020-07-05T11:12:13Z"), PropertyValue::Timestamp(at));
        assert_eq!(value("dateTime", "2020-07-05T13:12:13+02:00"), PropertyValue::Timestamp(at));
        assert_eq!(value("dateTime", "2020-07-05T11:12:13"), PropertyValue::LocalTimestamp(at));
        let day_and_a_bit = (26 * 3600 + 3 * 60) * 1000;
        assert_eq!(value("duration", "P1DT2H3M"), PropertyValue::TimeSpan(day_and_a_bit));
        assert_eq!(value("duration", "-PT1S"), PropertyValue::TimeSpan(-1000));
        // Described back as given: no zone added, a duration typed as one.
        let xml = round_trip(RuleDescription {
            filter: RuleFilter::Sql {
                expression: "a = @local AND b = @span AND c = @back".into(),
                parameters: vec![
                    ("@local".into(), PropertyValue::LocalTimestamp(at)),
                    ("@span".into(), PropertyValue::TimeSpan(day_and_a_bit)),
                    ("@back".into(), PropertyValue::TimeSpan(-1000)),
                ],
            },
            action: None,
        });
        assert!(xml.contains(r#"i:type="d6p1:dateTime">2020-07-05T11:12:13.000</Value>"#), "{xml}");
        assert!(xml.contains(r#"i:type="d6p1:duration">P1DT2H3M</Value>"#), "{xml}");
        assert!(xml.contains(r#"i:type="d6p1:duration">-PT1S</Value>"#), "{xml}");
    }

    #[test]
    fn client_request_shapes_parse() {
        // Python: xsi prefix bound on the entry; JS: p4 bound on the element, l28 value prefix.
        let python = format!(
            r#"<entry xmlns="{ATOM_NS}" xmlns:xsi="{XSI_NS}"><content><RuleDescription xmlns="{CONNECT_NS}"><Filter xsi:type="SqlFilter"><SqlExpression>a = @a</SqlExpression><CompatibilityLevel>20</CompatibilityLevel><Parameters><KeyValueOfstringanyType><Key>@a</Key><Value xmlns:xs="{XSD_NS}" xsi:type="xs:int">3</Value></KeyValueOfstringanyType></Parameters><RequiresPreprocessing>true</RequiresPreprocessing></Filter><Name>r</Name></RuleDescription></content></entry>"#
        );
        let js = format!(
            r#"<entry xmlns="{ATOM_NS}"><content><RuleDescription xmlns="{CONNECT_NS}"><Filter p4:type="CorrelationFilter" xmlns:p4="{XSI_NS}"><CorrelationId>c</CorrelationId><Properties><KeyValueOfstringanyType><Key>k</Key><Value p4:type="l28:double" xmlns:l28="{XSD_NS}" xmlns:p4="{XSI_NS}">2</Value></KeyValueOfstringanyType></Properties></Filter><Action p4:type="SqlRuleAction" xmlns:p4="{XSI_NS}"><SqlExpression>SET a = 1</SqlExpression></Action></RuleDescription></content></entry>"#
        );
        let Described::Rule(p) = parse_description(python.as_bytes()).unwrap().0 else { panic!() };
        assert_eq!(
            p.filter,
            RuleFilter::Sql {
                expression: "a = @a".into(),
                parameters: vec![("@a".into(), PropertyValue::Int(3))]
            }
        );
        let Described::Rule(j) = parse_description(js.as_bytes()).unwrap().0 else { panic!() };
        let RuleFilter::Correlation(c) = j.filter else { panic!() };
        assert_eq!(c.correlation_id.as_deref(), Some("c"));
        assert_eq!(c.properties, [("k".into(), PropertyValue::Double(2.0))]);
        assert_eq!(j.action.unwrap().expression, "SET a = 1");
        let bad = format!(
            r#"<RuleDescription xmlns="{CONNECT_NS}" xmlns:i="{XSI_NS}"><Filter i:type="NoSuchFilter"/></RuleDescription>"#
        );
        assert_eq!(parse_description(bad.as_bytes()).unwrap_err().status.as_u16(), 400);
    }
}
