//! A subscription's rules, compiled once and evaluated per published message: which copies of
//! a message the subscription takes (Service Bus's rule semantics, see
//! `topics-sessions-transactions.md` A.3).
//!
//! - no rules: no copy;
//! - rules without an action that match: together **one** unmodified copy;
//! - each matching rule with an action: one more copy, the action applied, with the
//!   application property `RuleName` set to the rule's name;
//! - a filter or action that fails to evaluate: one copy for the dead-letter queue (with the
//!   failure as its reason), whatever the other rules say.
//!
//! Rules are evaluated in name order, so copies come out in a deterministic order.

use std::sync::Arc;

use crate::description::{RuleDescription, RuleFilter};
use crate::error::{BrokerError, Result};
use crate::filter::{
    EvalContext, Filter, ParameterValue, Parameters, PublishInfo, SqlFilter, SqlRuleAction,
};
use crate::message::{Message, PropertyValue};

/// One compiled rule.
#[derive(Debug)]
pub(crate) struct CompiledRule {
    name: String,
    filter: Filter,
    action: Option<SqlRuleAction>,
}

/// A subscription's rules, compiled, in name order.
#[derive(Debug, Default)]
pub(crate) struct RuleSet {
    rules: Vec<CompiledRule>,
}

/// What one message comes to in one subscription.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Route {
    /// Whether a rule without an action matched: one unmodified copy.
    pub(crate) plain: bool,
    /// One modified copy per matching rule with an action.
    pub(crate) actions: Vec<Message>,
    /// A filter or action failed: the dead-letter reason and description.
    pub(crate) failure: Option<(String, String)>,
}

impl Route {
    /// Whether the subscription takes anything of the message.
    pub(crate) fn takes_any(&self) -> bool {
        self.plain || !self.actions.is_empty() || self.failure.is_some()
    }
}

impl RuleSet {
    /// Compiles rules given by name (any order). An invalid expression is an error naming it.
    pub(crate) fn compile(rules: &[(String, RuleDescription)]) -> Result<Arc<RuleSet>> {
        let mut compiled = Vec::with_capacity(rules.len());
        for (name, rule) in rules {
            compiled.push(compile_rule(name, rule)?);
        }
        compiled.sort_by_key(|r| r.name.to_lowercase());
        Ok(Arc::new(RuleSet { rules: compiled }))
    }

    /// The copies of `message` this subscription takes. Evaluation borrows from the message
    /// and allocates nothing per rule; a matching action rule copies the message to change it.
    pub(crate) fn route(&self, message: &Message, publish: PublishInfo<'_>) -> Route {
        let context = EvalContext::with_publish(message, publish);
        let mut route = Route::default();
        for rule in &self.rules {
            let matched = match rule.filter.evaluate(&context) {
                Ok(matched) => matched,
                Err(error) => return failed(&rule.name, &error),
            };
            if !matched {
                continue;
            }
            match &rule.action {
                None => route.plain = true,
                Some(action) => {
                    let mut copy = message.clone();
                    match action.apply_for_rule(&rule.name, &mut copy, &publish) {
                        Ok(effect) => {
                            if effect.system_properties_changed {
                                // The transport's kept encoding no longer says what the
                                // message is: it encodes the copy from its fields.
                                copy.raw = None;
                            }
                            route.actions.push(copy);
                        }
                        Err(error) => return failed(&rule.name, &error),
                    }
                }
            }
        }
        route
    }
}

/// The route of a message whose rule `name` failed: one dead-letter copy, nothing else.
fn failed(name: &str, error: &crate::filter::EvalError) -> Route {
    Route {
        failure: Some((
            error.exception_type().to_owned(),
            format!("rule '{name}': {}", error.description()),
        )),
        ..Route::default()
    }
}

/// Compiles one rule, checking it as a rule creation does: an expression Service Bus would
/// refuse is an [`BrokerError::InvalidArgument`] carrying the parser's message.
pub(crate) fn compile_rule(name: &str, rule: &RuleDescription) -> Result<CompiledRule> {
    rule.validate()?;
    let filter = match &rule.filter {
        RuleFilter::True => Filter::True,
        RuleFilter::False => Filter::False,
        RuleFilter::Sql { expression, parameters } => Filter::Sql(
            SqlFilter::parse(expression, &parameters_of(parameters))
                .map_err(|e| BrokerError::invalid("SqlExpression", e.to_string()))?,
        ),
        RuleFilter::Correlation(c) => Filter::Correlation(c.clone()),
    };
    let action = match &rule.action {
        None => None,
        Some(action) => Some(
            SqlRuleAction::parse(&action.expression, &parameters_of(&action.parameters))
                .map_err(|e| BrokerError::invalid("SqlRuleAction", e.to_string()))?,
        ),
    };
    Ok(CompiledRule { name: name.to_owned(), filter, action })
}

fn parameters_of(parameters: &[(String, PropertyValue)]) -> Parameters {
    parameters.iter().map(|(k, v)| (k.clone(), ParameterValue::from(v.clone()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::description::{CorrelationFilter, RuleAction};
    use crate::types::{SequenceNumber, Timestamp};

    fn sql(expression: &str) -> RuleFilter {
        RuleFilter::Sql { expression: expression.into(), parameters: vec![] }
    }

    fn rule(filter: RuleFilter, action: Option<&str>) -> RuleDescription {
        RuleDescription {
            filter,
            action: action.map(|a| RuleAction { expression: a.into(), parameters: vec![] }),
        }
    }

    fn route(rules: &[(&str, RuleDescription)], message: &Message) -> Route {
        let rules: Vec<(String, RuleDescription)> =
            rules.iter().map(|(n, r)| ((*n).to_owned(), r.clone())).collect();
        let published = PublishInfo {
            enqueued_time: Timestamp::from_millis(0),
            sequence_number: SequenceNumber(1),
            size: message.size() as u64,
            ..PublishInfo::default()
        };
        RuleSet::compile(&rules).unwrap().route(message, published)
    }

    fn labelled(label: &str) -> Message {
        let mut m = Message::new("body");
        m.properties.subject = Some(label.into());
        m
    }

    #[test]
    fn no_rules_take_nothing() {
        assert!(!route(&[], &labelled("x")).takes_any());
    }

    #[test]
    fn matching_rules_without_action_make_one_copy() {
        let rules =
            [("a", rule(sql("sys.Label = 'x'"), None)), ("b", rule(RuleFilter::True, None))];
        let r = route(&rules, &labelled("x"));
        assert!(r.plain);
        assert!(r.actions.is_empty());
        let rules = [("a", rule(sql("sys.Label = 'x'"), None))];
        assert!(!route(&rules, &labelled("y")).takes_any());
    }

    #[test]
    fn each_matching_action_rule_makes_its_own_changed_copy() {
        let rules = [
            ("plain", rule(RuleFilter::True, None)),
            ("one", rule(RuleFilter::True, Some("SET n = 1"))),
            ("two", rule(sql("sys.Label = 'x'"), Some("SET n = 2; SET sys.Label = 'changed'"))),
            ("other", rule(sql("sys.Label = 'nope'"), Some("SET n = 3"))),
        ];
        let mut m = labelled("x");
        m.raw = Some(bytes::Bytes::from_static(b"kept"));
        let r = route(&rules, &m);
        assert!(r.plain);
        assert_eq!(r.actions.len(), 2, "{r:?}");
        // Name order: "one" before "two".
        let names: Vec<_> =
            r.actions.iter().map(|c| c.application_properties.get("RuleName").cloned()).collect();
        assert_eq!(
            names,
            [Some(PropertyValue::String("one".into())), Some(PropertyValue::String("two".into()))]
        );
        assert_eq!(r.actions[0].application_properties.get("n"), Some(&PropertyValue::Long(1)));
        assert!(r.actions[0].application_properties_modified);
        assert!(r.actions[0].raw.is_some(), "only application properties changed");
        assert_eq!(r.actions[1].properties.subject.as_deref(), Some("changed"));
        assert!(r.actions[1].raw.is_none(), "a changed system property drops the kept encoding");
    }

    #[test]
    fn a_failing_filter_sends_one_copy_to_the_dead_letter_queue() {
        let rules = [("a", rule(RuleFilter::True, None)), ("b", rule(sql("n / 0 = 1"), None))];
        let r = route(&rules, &labelled("x").with_property("n", PropertyValue::Long(4)));
        assert!(!r.plain);
        let (reason, description) = r.failure.expect("a failure");
        assert_eq!(reason, "DivideByZeroException");
        assert!(description.contains("'b'"), "{description}");
    }

    #[test]
    fn correlation_filters_match_named_fields_and_properties() {
        let filter = RuleFilter::Correlation(CorrelationFilter {
            subject: Some("x".into()),
            properties: vec![("color".into(), PropertyValue::String("red".into()))],
            ..Default::default()
        });
        let rules = [("c", rule(filter, None))];
        let red = labelled("x").with_property("color", PropertyValue::String("red".into()));
        assert!(route(&rules, &red).plain);
        let blue = labelled("x").with_property("color", PropertyValue::String("blue".into()));
        assert!(!route(&rules, &blue).takes_any());
    }

    #[test]
    fn invalid_expressions_are_refused_at_creation_with_the_parsers_message() {
        let err = compile_rule("r", &rule(sql("color = "), None)).unwrap_err();
        match err {
            BrokerError::InvalidArgument { field: "SqlExpression", reason } => {
                assert!(
                    reason.contains("There was an error parsing the SQL expression"),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(compile_rule("r", &rule(RuleFilter::True, Some("SET"))).is_err());
    }
}
