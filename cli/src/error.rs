//! [`CliError`]: what went wrong, as one message for a person, with a [`ErrorKind`] that
//! decides the exit code. Errors from the broker carry its answer: the HTTP status and text
//! of the management API, or the AMQP condition and description.

use std::fmt;

/// What kind of failure an error is; [`ErrorKind::exit_code`] maps it to the process's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The command line or its input is wrong (exit code 2).
    Usage,
    /// The broker could not be reached, or the connection broke.
    Connection,
    /// The broker answered with an error (HTTP status or AMQP condition).
    Refused,
    /// The entity, message or session does not exist.
    NotFound,
    /// A local file or stream could not be read or written.
    Io,
    /// The broker's answer could not be understood.
    Protocol,
    /// The operator declined a confirmation, or it could not be asked.
    Declined,
    /// The command exists but this version does not do it yet.
    NotImplemented,
}

impl ErrorKind {
    /// The exit code for this kind: 2 for usage errors, 1 otherwise.
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorKind::Usage => 2,
            _ => 1,
        }
    }
}

/// One failure of a command: a message for a person and, optionally, the error that caused it.
#[derive(Debug)]
pub struct CliError {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// The CLI's result type.
pub type Result<T, E = CliError> = std::result::Result<T, E>;

impl CliError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        CliError { kind, message: message.into(), source: None }
    }

    /// A usage error: the command line or its input is wrong.
    pub fn usage(message: impl Into<String>) -> Self {
        CliError::new(ErrorKind::Usage, message)
    }

    /// The broker's answer could not be understood.
    pub fn protocol(message: impl Into<String>) -> Self {
        CliError::new(ErrorKind::Protocol, message)
    }

    /// The broker refused.
    pub fn refused(message: impl Into<String>) -> Self {
        CliError::new(ErrorKind::Refused, message)
    }

    /// Something this version does not do yet.
    pub fn not_implemented(what: &str) -> Self {
        CliError::new(ErrorKind::NotImplemented, format!("{what} is not implemented yet"))
    }

    /// Adds the error that caused this one.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message and every source below it, joined by `: ` (what the CLI prints).
    pub fn chain(&self) -> String {
        let mut text = self.message.clone();
        let mut next = std::error::Error::source(self);
        while let Some(cause) = next {
            let part = cause.to_string();
            if !text.ends_with(&part) {
                text.push_str(": ");
                text.push_str(&part);
            }
            next = cause.source();
        }
        text
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Adds context to a failing `Result`: `.context(kind, || "doing what")`.
pub(crate) trait Context<T> {
    /// Wraps the error as the source of a [`CliError`] of `kind` saying `what()`.
    fn context(self, kind: ErrorKind, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for std::result::Result<T, E> {
    fn context(self, kind: ErrorKind, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| CliError::new(kind, what()).with_source(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_names_every_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let error = CliError::new(ErrorKind::Io, "reading body.txt").with_source(io);
        assert_eq!(error.chain(), "reading body.txt: no such file");
        assert_eq!(error.kind().exit_code(), 1);
        assert_eq!(CliError::usage("bad").kind().exit_code(), 2);
    }
}
