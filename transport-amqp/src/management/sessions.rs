//! The session operations (`com.microsoft:renew-session-lock`, `get-session-state`,
//! `set-session-state`, `get-message-sessions`): not built yet.

use crate::error::WireError;

use super::Outcome;

pub(super) fn execute() -> Result<Outcome, WireError> {
    Err(WireError::not_implemented("sessions are not implemented by ironbus yet"))
}
