//! `ironbus-cli`: the command line for operators of a Service Bus namespace — ironbus, the
//! emulator, or Azure Service Bus itself. The `ironbus` binary runs it as its subcommands
//! (`ironbus overview`, `ironbus send ...`); a binary of one's own embeds [`Command`] and
//! calls [`run`].
//!
//! It is a client only: management goes over the ATOM API on HTTP(S) ([`management`]),
//! messages over AMQP with a `$cbs` token per entity ([`amqp`]), both signed with SAS from a
//! connection string ([`connection`], [`sas`]). Results print as tables, or as one JSON
//! document with `--output json` ([`output`]; shapes in `cli/schema/`).
//!
//! **Invariants:** every failure ends the process with a non-zero code and one message on
//! stderr naming what failed and the broker's answer (HTTP status and text, AMQP condition
//! and description); nothing is printed as a result that the broker did not answer; keys never
//! appear in output or errors.

pub mod amqp;
pub mod args;
pub mod atom;
mod commands;
pub mod connection;
pub mod error;
pub mod http;
pub mod management;
pub mod message;
pub mod output;
pub mod rules;
pub mod sas;
pub mod time;
pub mod tls;
pub mod view;

use std::process::ExitCode;

pub use args::{Command, Global};
pub use error::{CliError, ErrorKind};

use connection::{ConnectionString, Endpoints, HttpEndpoint};
use error::Result;
use http::HttpClient;
use management::Management;
use tls::{Tls, TlsOptions};

/// Runs one command to its end; prints its result, or its error on stderr. Answers the
/// process's exit code: 0 on success, 2 for a usage error, 1 for any other failure.
pub async fn run(command: Command) -> ExitCode {
    match commands::run(command).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            output::note(&format!("error: {}", error.chain()));
            ExitCode::from(error.kind().exit_code())
        }
    }
}

/// How long one network step (a connection, a request and its answer) may take before the
/// command gives up with an error saying so.
pub const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `future`, or a [`ErrorKind::Connection`] error naming `what()` after [`TIMEOUT`].
pub(crate) async fn timed<T>(
    future: impl std::future::Future<Output = T>,
    what: impl FnOnce() -> String,
) -> Result<T> {
    tokio::time::timeout(TIMEOUT, future).await.map_err(|_| {
        CliError::new(
            ErrorKind::Connection,
            format!("{}: no answer within {} s", what(), TIMEOUT.as_secs()),
        )
    })
}

/// What a command works against: the endpoints, TLS and the output format.
#[derive(Debug, Clone)]
pub struct Target {
    /// Where and how to connect.
    pub endpoints: Endpoints,
    /// The TLS settings of both endpoints.
    pub tls: Tls,
    /// How to print.
    pub format: output::Format,
}

impl Target {
    /// The target the global flags describe.
    pub fn new(global: &Global) -> Result<Self> {
        let connection: ConnectionString = global.connection_string.parse()?;
        let http = global.http_endpoint.as_deref().map(str::parse::<HttpEndpoint>).transpose()?;
        let endpoints = Endpoints::new(&connection, http);
        let tls =
            Tls::new(&TlsOptions { ca_file: global.ca_file.clone(), insecure: global.insecure })?;
        Ok(Target { endpoints, tls, format: global.output })
    }

    /// The management (ATOM) client.
    pub fn management(&self) -> Management {
        Management::new(HttpClient::new(self.endpoints.clone(), self.tls.clone()))
    }

    /// A connected AMQP client.
    pub async fn amqp(&self) -> Result<amqp::AmqpClient> {
        amqp::AmqpClient::connect(&self.endpoints, &self.tls).await
    }
}
