//! The rule operations of a subscription (`com.microsoft:add-rule`, `remove-rule`,
//! `enumerate-rules`): not built yet.

use crate::error::WireError;

use super::Outcome;

pub(super) fn execute() -> Result<Outcome, WireError> {
    Err(WireError::not_implemented(
        "topics, subscriptions and rules are not implemented by ironbus yet",
    ))
}
