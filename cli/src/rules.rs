//! A subscription's rule as the CLI handles it: [`Rule`] — a SQL, correlation, true or false
//! filter and an optional SQL action — read from and written to its ATOM `<RuleDescription>`,
//! and to and from the `Properties` of a rule in the emulator's `config.json`.

use serde_json::{json, Map, Value as Json};

use crate::atom::{Element, Entry, Kind, XSI_NS};
use crate::error::{CliError, Result};

/// XML Schema's namespace, for typed correlation property values.
const XSD_NS: &str = "http://www.w3.org/2001/XMLSchema";

/// The system properties a correlation filter matches, in schema order (config names them the
/// same, `Label` also as `Subject`).
pub const CORRELATION_FIELDS: [&str; 8] = [
    "CorrelationId",
    "MessageId",
    "To",
    "ReplyTo",
    "Label",
    "SessionId",
    "ReplyToSessionId",
    "ContentType",
];

/// A rule's filter.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// A SQL expression over the message's properties.
    Sql(String),
    /// Equality on system properties (by name) and application properties.
    Correlation {
        /// System properties, by their [`CORRELATION_FIELDS`] name.
        fields: Vec<(String, String)>,
        /// Application properties and the values they must have.
        properties: Vec<(String, Json)>,
    },
}

/// A rule: its name, filter and optional SQL action.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The rule's name.
    pub name: String,
    /// Its filter.
    pub filter: Filter,
    /// Its SQL action, if any.
    pub action: Option<String>,
}

impl Rule {
    /// The rule an ATOM entry describes (a true filter reads as SQL `1=1`, false as `1=0`).
    pub fn from_entry(entry: &Entry) -> Result<Self> {
        let d = &entry.description;
        let filter = d
            .child("Filter")
            .ok_or_else(|| CliError::protocol(format!("rule `{}` has no Filter", entry.name)))?;
        let kind = filter.attribute(XSI_NS, "type").unwrap_or("SqlFilter");
        let kind = kind.rsplit(':').next().unwrap_or(kind);
        let filter = match kind {
            "TrueFilter" => Filter::Sql("1=1".to_owned()),
            "FalseFilter" => Filter::Sql("1=0".to_owned()),
            "CorrelationFilter" => {
                let fields = CORRELATION_FIELDS
                    .iter()
                    .filter_map(|f| filter.child_text(f).map(|v| ((*f).to_owned(), v.to_owned())))
                    .collect();
                let properties = filter
                    .child("Properties")
                    .map(|p| {
                        p.children
                            .iter()
                            .filter_map(|kv| {
                                let key = kv.child_text("Key")?.to_owned();
                                let value = kv.child("Value")?;
                                let kind = value.attribute(XSI_NS, "type").unwrap_or("");
                                Some((
                                    key,
                                    typed_value(
                                        kind.rsplit(':').next().unwrap_or(kind),
                                        &value.text,
                                    ),
                                ))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                Filter::Correlation { fields, properties }
            }
            _ => Filter::Sql(filter.child_text("SqlExpression").unwrap_or("1=1").to_owned()),
        };
        let action = d
            .child("Action")
            .filter(|a| {
                !a.attribute(XSI_NS, "type").is_some_and(|t| t.ends_with("EmptyRuleAction"))
            })
            .and_then(|a| a.child_text("SqlExpression"))
            .map(str::to_owned);
        Ok(Rule { name: entry.name.clone(), filter, action })
    }

    /// The rule's `<RuleDescription>` entry, for a PUT.
    pub fn to_entry(&self) -> Entry {
        let filter = match &self.filter {
            Filter::Sql(sql) => {
                Element::parent("Filter", vec![Element::text("SqlExpression", sql.clone())])
                    .typed("SqlFilter")
            }
            Filter::Correlation { fields, properties } => {
                let mut children: Vec<Element> = CORRELATION_FIELDS
                    .iter()
                    .filter_map(|f| {
                        fields
                            .iter()
                            .find(|(n, _)| n == f)
                            .map(|(n, v)| Element::text(n, v.clone()))
                    })
                    .collect();
                if !properties.is_empty() {
                    let pairs = properties
                        .iter()
                        .map(|(k, v)| {
                            let (kind, text) = xsd_value(v);
                            let mut value =
                                Element::text("Value", text).typed(&format!("d6p1:{kind}"));
                            value.declarations.push(("d6p1".to_owned(), XSD_NS.to_owned()));
                            Element::parent(
                                "KeyValueOfstringanyType",
                                vec![Element::text("Key", k.clone()), value],
                            )
                        })
                        .collect();
                    children.push(Element::parent("Properties", pairs));
                }
                Element::parent("Filter", children).typed("CorrelationFilter")
            }
        };
        let mut children = vec![filter];
        if let Some(action) = &self.action {
            children.push(
                Element::parent("Action", vec![Element::text("SqlExpression", action.clone())])
                    .typed("SqlRuleAction"),
            );
        }
        children.push(Element::text("Name", self.name.clone()));
        Entry::new(Kind::Rule, &self.name, children)
    }

    /// The rule's `Properties` in `config.json`.
    pub fn to_config(&self) -> Json {
        let mut props = Map::new();
        match &self.filter {
            Filter::Sql(sql) => {
                props.insert("FilterType".into(), json!("Sql"));
                props.insert("SqlFilter".into(), json!({ "SqlExpression": sql }));
            }
            Filter::Correlation { fields, properties } => {
                let mut c: Map<String, Json> =
                    fields.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
                if !properties.is_empty() {
                    c.insert(
                        "Properties".into(),
                        Json::Object(properties.iter().cloned().collect()),
                    );
                }
                props.insert("FilterType".into(), json!("Correlation"));
                props.insert("CorrelationFilter".into(), Json::Object(c));
            }
        }
        if let Some(action) = &self.action {
            props.insert("Action".into(), json!({ "SqlExpression": action }));
        }
        Json::Object(props)
    }

    /// The rule `name` whose config `Properties` are `props` (none: a true filter).
    pub fn from_config(name: &str, props: Option<&Json>) -> Result<Self> {
        let bad = |what: &str| CliError::usage(format!("rule `{name}`: {what}"));
        let sql = |v: Option<&Json>, what: &str| {
            v.and_then(|s| s.get("SqlExpression"))
                .and_then(Json::as_str)
                .map(str::to_owned)
                .ok_or_else(|| bad(&format!("{what} needs a SqlExpression")))
        };
        let Some(props) = props else {
            return Ok(Rule {
                name: name.to_owned(),
                filter: Filter::Sql("1=1".into()),
                action: None,
            });
        };
        let filter = match props.get("FilterType").and_then(Json::as_str) {
            None => Filter::Sql("1=1".into()),
            Some(t) if t.eq_ignore_ascii_case("Sql") => {
                Filter::Sql(sql(props.get("SqlFilter"), "SqlFilter")?)
            }
            Some(t) if t.eq_ignore_ascii_case("Correlation") => {
                let c = props
                    .get("CorrelationFilter")
                    .and_then(Json::as_object)
                    .ok_or_else(|| bad("FilterType Correlation needs a CorrelationFilter"))?;
                let mut fields = Vec::new();
                let mut properties = Vec::new();
                for (key, value) in c {
                    let key = if key == "Subject" { "Label" } else { key.as_str() };
                    if key == "Properties" {
                        let map = value
                            .as_object()
                            .ok_or_else(|| bad("CorrelationFilter.Properties must be an object"))?;
                        properties = map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                    } else if CORRELATION_FIELDS.contains(&key) {
                        let text = value
                            .as_str()
                            .ok_or_else(|| bad(&format!("{key} must be a string")))?;
                        fields.push((key.to_owned(), text.to_owned()));
                    } else {
                        return Err(bad(&format!("unknown correlation filter property {key}")));
                    }
                }
                Filter::Correlation { fields, properties }
            }
            Some(other) => {
                return Err(bad(&format!("FilterType {other:?} is not Sql or Correlation")))
            }
        };
        let action = match props.get("Action") {
            None | Some(Json::Null) => None,
            Some(a) => Some(sql(Some(a), "Action")?),
        };
        Ok(Rule { name: name.to_owned(), filter, action })
    }

    /// The rule with its filter and action in a canonical form, for comparing.
    pub fn normalized(&self) -> Rule {
        let mut rule = self.clone();
        if let Filter::Correlation { fields, properties } = &mut rule.filter {
            fields.sort();
            properties.sort_by(|a, b| a.0.cmp(&b.0));
        }
        if let Filter::Sql(sql) = &mut rule.filter {
            *sql = sql.trim().to_owned();
        }
        rule
    }
}

/// A correlation property value's XML Schema type and text.
fn xsd_value(value: &Json) -> (&'static str, String) {
    match value {
        Json::Bool(b) => ("boolean", b.to_string()),
        Json::Number(n) if n.is_i64() => match n.as_i64().and_then(|i| i32::try_from(i).ok()) {
            Some(i) => ("int", i.to_string()),
            None => ("long", n.to_string()),
        },
        Json::Number(n) => ("double", n.to_string()),
        Json::String(s) => ("string", s.clone()),
        other => ("string", other.to_string()),
    }
}

/// A typed XML value as JSON.
fn typed_value(kind: &str, text: &str) -> Json {
    match kind {
        "boolean" => Json::Bool(text == "true"),
        "int" | "long" | "short" | "byte" | "unsignedInt" | "unsignedLong" | "unsignedShort"
        | "unsignedByte" => {
            text.parse::<i64>().map(Json::from).unwrap_or_else(|_| Json::String(text.to_owned()))
        }
        "double" | "float" | "decimal" => text
            .parse::<f64>()
            .ok()
            .and_then(|f| serde_json::Number::from_f64(f).map(Json::Number))
            .unwrap_or_else(|| Json::String(text.to_owned())),
        _ => Json::String(text.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::atom::{parse, Document};

    fn round_trip(rule: &Rule) -> Rule {
        let Document::Entry(entry) = parse(&rule.to_entry().to_put_body()).unwrap() else {
            panic!("an entry")
        };
        Rule::from_entry(&Entry { name: rule.name.clone(), ..entry }).unwrap()
    }

    #[test]
    fn sql_and_correlation_rules_survive_atom_and_config() {
        let sql = Rule {
            name: "red".into(),
            filter: Filter::Sql("color = 'red'".into()),
            action: Some("SET seen = 1".into()),
        };
        assert_eq!(round_trip(&sql), sql);
        assert_eq!(Rule::from_config("red", Some(&sql.to_config())).unwrap(), sql);
        let correlation = Rule {
            name: "c".into(),
            filter: Filter::Correlation {
                fields: vec![("Label".into(), "greeting".into())],
                properties: vec![
                    ("n".into(), json!(5)),
                    ("s".into(), json!("x")),
                    ("b".into(), json!(true)),
                ],
            },
            action: None,
        };
        assert_eq!(round_trip(&correlation), correlation);
        let from_config = Rule::from_config("c", Some(&correlation.to_config())).unwrap();
        assert_eq!(from_config.normalized(), correlation.normalized(), "JSON sorts the properties");
    }

    #[test]
    fn a_rule_without_properties_is_a_true_filter_and_bad_ones_are_refused() {
        assert_eq!(Rule::from_config("$Default", None).unwrap().filter, Filter::Sql("1=1".into()));
        assert!(Rule::from_config("r", Some(&json!({"FilterType": "Nope"}))).is_err());
        assert!(Rule::from_config("r", Some(&json!({"FilterType": "Sql"}))).is_err());
        let subject = json!({"FilterType": "Correlation", "CorrelationFilter": {"Subject": "s"}});
        let rule = Rule::from_config("r", Some(&subject)).unwrap();
        assert_eq!(
            rule.filter,
            Filter::Correlation { fields: vec![("Label".into(), "s".into())], properties: vec![] }
        );
    }
}
