//! `rule`: list, show, create, update and delete a subscription's rules over the management
//! API (`schema/rule.json`, `schema/rule-list.json`). A rule shows as its `config.json` form.

use serde_json::{json, Value as Json};

use crate::args::{RuleAction, RuleOptions};
use crate::atom::Kind;
use crate::error::{CliError, Result};
use crate::management::{rule_path, subscription_path};
use crate::message::{parse_property, simple_json};
use crate::output::{self, Table};
use crate::rules::{Filter, Rule};
use crate::Target;

/// Runs `rule <action>`.
pub(crate) async fn run(target: &Target, action: RuleAction) -> Result<()> {
    let management = target.management();
    match action {
        RuleAction::List { topic, subscription } => {
            let entries = management
                .list(Kind::Rule, Some(&subscription_path(&topic, &subscription)))
                .await?;
            let rules = entries.iter().map(Rule::from_entry).collect::<Result<Vec<_>>>()?;
            let json =
                Json::Array(rules.iter().map(|r| rule_json(&topic, &subscription, r)).collect());
            output::emit(target.format, &json, || {
                let mut table = Table::new(&["NAME", "FILTER", "ACTION"]);
                for r in &rules {
                    table.row(vec![
                        r.name.clone(),
                        filter_text(&r.filter),
                        r.action.clone().unwrap_or_else(|| "-".into()),
                    ]);
                }
                if table.is_empty() {
                    "no rules\n".to_owned()
                } else {
                    table.render()
                }
            });
        }
        RuleAction::Show { topic, subscription, name } => {
            let rule =
                Rule::from_entry(&management.get(&rule_path(&topic, &subscription, &name)).await?)?;
            show(target, &topic, &subscription, &rule, None);
        }
        RuleAction::Create { topic, subscription, name, rule } => {
            let filter = filter(&rule)?
                .ok_or_else(|| CliError::usage("a rule needs --sql or a --correlation-* filter"))?;
            let action = rule.action.clone().filter(|a| !a.trim().is_empty());
            let new = Rule { name: name.clone(), filter, action };
            let path = rule_path(&topic, &subscription, &name);
            let stored = Rule::from_entry(&management.put(&path, &new.to_entry(), false).await?)?;
            show(target, &topic, &subscription, &stored, Some("created"));
        }
        RuleAction::Update { topic, subscription, name, rule } => {
            let path = rule_path(&topic, &subscription, &name);
            let mut current = Rule::from_entry(&management.get(&path).await?)?;
            if let Some(f) = filter(&rule)? {
                current.filter = f;
            }
            if let Some(a) = &rule.action {
                current.action = Some(a.clone()).filter(|a| !a.trim().is_empty());
            }
            let stored =
                Rule::from_entry(&management.put(&path, &current.to_entry(), true).await?)?;
            show(target, &topic, &subscription, &stored, Some("updated"));
        }
        RuleAction::Delete { topic, subscription, name } => {
            let path = rule_path(&topic, &subscription, &name);
            management.delete(&path).await?;
            let json = json!({ "deleted": path, "kind": "rule" });
            output::emit(target.format, &json, || format!("deleted rule {path}\n"));
        }
    }
    Ok(())
}

/// The filter the flags describe, if any.
fn filter(o: &RuleOptions) -> Result<Option<Filter>> {
    if let Some(sql) = &o.sql {
        return Ok(Some(Filter::Sql(sql.clone())));
    }
    let fields: Vec<(String, String)> = [
        ("CorrelationId", &o.correlation_id),
        ("MessageId", &o.correlation_message_id),
        ("To", &o.correlation_to),
        ("ReplyTo", &o.correlation_reply_to),
        ("Label", &o.correlation_subject),
        ("SessionId", &o.correlation_session_id),
        ("ReplyToSessionId", &o.correlation_reply_to_session_id),
        ("ContentType", &o.correlation_content_type),
    ]
    .into_iter()
    .filter_map(|(name, value)| value.as_ref().map(|v| (name.to_owned(), v.clone())))
    .collect();
    let properties = o
        .correlation_properties
        .iter()
        .map(|p| parse_property(p).map(|(k, v)| (k, simple_json(&v))))
        .collect::<Result<Vec<_>>>()?;
    if fields.is_empty() && properties.is_empty() {
        return Ok(None);
    }
    Ok(Some(Filter::Correlation { fields, properties }))
}

fn filter_text(filter: &Filter) -> String {
    match filter {
        Filter::Sql(sql) => format!("sql: {sql}"),
        Filter::Correlation { fields, properties } => {
            let parts: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .chain(properties.iter().map(|(k, v)| match v {
                    Json::String(s) => format!("{k}={s}"),
                    other => format!("{k}={other}"),
                }))
                .collect();
            format!("correlation: {}", parts.join(", "))
        }
    }
}

fn rule_json(topic: &str, subscription: &str, rule: &Rule) -> Json {
    json!({
        "name": rule.name,
        "path": rule_path(topic, subscription, &rule.name),
        "rule": rule.to_config(),
    })
}

fn show(target: &Target, topic: &str, subscription: &str, rule: &Rule, verb: Option<&str>) {
    let json = rule_json(topic, subscription, rule);
    output::emit(target.format, &json, || match verb {
        Some(v) => format!("{v} rule {}\n", rule_path(topic, subscription, &rule.name)),
        None => {
            let mut table = Table::new(&["PROPERTY", "VALUE"]);
            table.row(vec!["Name".into(), rule.name.clone()]);
            table.row(vec!["Filter".into(), filter_text(&rule.filter)]);
            table.row(vec!["Action".into(), rule.action.clone().unwrap_or_else(|| "-".into())]);
            table.render()
        }
    });
}
