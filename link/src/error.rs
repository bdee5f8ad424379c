//! The errors of a call: [`LinkError`] for the caller, [`CallError`] for a handler.

/// Why a [`LinkClient::call`](crate::LinkClient::call) failed. Match on the variant; the text
/// fields are for logs only.
///
/// [`Unreachable`](Self::Unreachable), [`Timeout`](Self::Timeout) and
/// [`ConnectionLost`](Self::ConnectionLost) are retriable
/// ([`is_retriable`](Self::is_retriable)): a caller forwarding a partition's command maps them
/// to "partition unavailable". After `Timeout` or `ConnectionLost` the peer may or may not have
/// run the call (its answer was lost), so a retried command must be safe to repeat.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// No connection could be made (refused, no route, TLS or HTTP/2 handshake failed), or
    /// the peer is shutting down or too busy to take the call. The call did not run.
    #[error("peer unreachable: {reason}")]
    Unreachable {
        /// What failed.
        reason: String,
    },
    /// No answer within [`LinkConfig::call_timeout`](crate::LinkConfig::call_timeout).
    #[error("call timed out")]
    Timeout,
    /// The connection broke while the call was under way.
    #[error("connection lost: {reason}")]
    ConnectionLost {
        /// What broke.
        reason: String,
    },
    /// The peer refused the call's credentials: another cluster secret, a clock more than a
    /// minute apart, or a replayed call. The handler did not run. Not retriable: the
    /// configuration (or the clocks) must change first.
    #[error("peer refused the call: {reason}")]
    Refused {
        /// The peer's reason, as it gave it.
        reason: String,
    },
    /// The request body is over the receiving side's
    /// [`LinkConfig::max_request_bytes`](crate::LinkConfig::max_request_bytes). The handler
    /// did not run.
    #[error("request body over the {} limit", limit.map_or("peer's".to_owned(), |l| format!("{l}-byte")))]
    TooLarge {
        /// The limit, when known: the client's own when it refused to send; `None` when the
        /// peer refused (it does not say its limit).
        limit: Option<usize>,
    },
    /// The peer's handler answered with its own error.
    #[error("remote error {code}: {message}")]
    Remote {
        /// The handler's error code, for the caller to branch on.
        code: String,
        /// The handler's message.
        message: String,
    },
    /// Something no well-behaved peer does: an unknown status, a reply over
    /// [`LinkConfig::max_reply_bytes`](crate::LinkConfig::max_reply_bytes), a reply whose
    /// signature does not check, a method name outside the grammar.
    #[error("link protocol error: {reason}")]
    Protocol {
        /// What was wrong.
        reason: String,
    },
}

impl LinkError {
    /// Whether trying again later may succeed without changing anything: true for
    /// [`Unreachable`](Self::Unreachable), [`Timeout`](Self::Timeout) and
    /// [`ConnectionLost`](Self::ConnectionLost).
    pub fn is_retriable(&self) -> bool {
        matches!(self, Self::Unreachable { .. } | Self::Timeout | Self::ConnectionLost { .. })
    }

    pub(crate) fn unreachable(reason: impl ToString) -> Self {
        Self::Unreachable { reason: reason.to_string() }
    }

    pub(crate) fn connection_lost(reason: impl ToString) -> Self {
        Self::ConnectionLost { reason: reason.to_string() }
    }

    pub(crate) fn protocol(reason: impl ToString) -> Self {
        Self::Protocol { reason: reason.to_string() }
    }
}

/// A [`Handler`](crate::Handler)'s own error, carried to the caller as
/// [`LinkError::Remote`] with the same code and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct CallError {
    /// A short machine-readable code (at most [`CallError::MAX_CODE_BYTES`] bytes of ASCII
    /// letters, digits, `.`, `_` or `-`; other codes travel as [`CallError::INVALID_CODE`]).
    pub code: String,
    /// A message for people.
    pub message: String,
}

impl CallError {
    /// The most bytes a code may have.
    pub const MAX_CODE_BYTES: usize = 64;
    /// The code a caller receives when the handler panicked.
    pub const HANDLER_PANICKED: &'static str = "link.handler-panicked";
    /// The code a caller receives when the handler's code was outside the grammar.
    pub const INVALID_CODE: &'static str = "link.invalid-code";

    /// An error with `code` and `message`.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self { code: code.into(), message: message.into() }
    }

    pub(crate) fn code_is_valid(code: &str) -> bool {
        !code.is_empty()
            && code.len() <= Self::MAX_CODE_BYTES
            && code.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transport_failures_are_retriable() {
        let retriable = [
            LinkError::unreachable("refused"),
            LinkError::Timeout,
            LinkError::connection_lost("reset"),
        ];
        assert!(retriable.iter().all(LinkError::is_retriable));
        let final_ = [
            LinkError::Refused { reason: "bad signature".into() },
            LinkError::TooLarge { limit: Some(1) },
            LinkError::Remote { code: "c".into(), message: "m".into() },
            LinkError::protocol("status 418"),
        ];
        assert!(!final_.iter().any(LinkError::is_retriable));
    }

    #[test]
    fn codes_follow_the_grammar() {
        assert!(CallError::code_is_valid("partition.unavailable"));
        assert!(CallError::code_is_valid(CallError::HANDLER_PANICKED));
        assert!(!CallError::code_is_valid(""));
        assert!(!CallError::code_is_valid("with space"));
        assert!(!CallError::code_is_valid(&"c".repeat(65)));
    }
}
