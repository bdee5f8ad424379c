//! What the server writes for the person or the program reading its output: the log (text,
//! coloured only on a terminal, or one JSON object per line for a log shipper) and the start-up
//! banner (where each listener is, the connection strings, the CA a client must trust).

use std::fmt::Write as _;
use std::io::IsTerminal;

use crate::Started;

/// How log events are written to standard output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per event for a person; colours only when standard output is a terminal and
    /// `NO_COLOR` is not set.
    #[default]
    Text,
    /// One JSON object per event and line (`timestamp`, `level`, `fields`, `target`), for log
    /// shippers; the banner is an event too.
    Json,
}

/// Installs the process's log subscriber: `RUST_LOG` filters (default `info`), `format` shapes.
/// Call once, before anything logs.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => builder.with_ansi(colours_wanted()).init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

/// Colour escape codes only for a person at a terminal who has not asked for none
/// (<https://no-color.org>).
fn colours_wanted() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

impl Started {
    /// The start-up banner: a few lines saying where each listener is, what to connect with
    /// and what to trust. Every connection string is a line of its own starting `Endpoint=`,
    /// for a script to pick up.
    pub fn banner(&self) -> String {
        let mut out = format!("ironbus {} is ready.\n", env!("CARGO_PKG_VERSION"));
        let mut line = |what: &str, value: String| {
            let _ = writeln!(out, "  {what:<11}{value}");
        };
        line("AMQP", format!("amqp://{}", self.amqp_addr));
        if let Some(addr) = self.amqps_addr {
            line("AMQPS", format!("amqps://{addr}"));
        }
        if let Some(addr) = self.http_addr {
            line("HTTP", format!("http://{addr}  (management, REST, /metrics)"));
        }
        if let Some(addr) = self.https_addr {
            line("HTTPS", format!("https://{addr}  (management, REST, AMQP over WebSockets)"));
        }
        if let Some(addr) = self.link_addr {
            line("Cluster", format!("{addr}  (the nodes' internal link)"));
        }
        if let Some(ca) = &self.trusted_ca {
            line("Trust", format!("{}  (the TLS listeners' CA)", ca.display()));
            line("", "e.g. Python connection_verify=<it>, Node NODE_EXTRA_CA_CERTS=<it>".into());
        }
        out.push_str("Connection strings:\n");
        for connection_string in self.connection_strings() {
            out.push_str(&connection_string);
            out.push('\n');
        }
        out
    }

    /// Writes the banner: as text on standard output, or as one log event when the log is JSON
    /// (so that every line of the output parses).
    pub fn announce(&self, format: LogFormat) {
        match format {
            LogFormat::Text => {
                #[allow(clippy::print_stdout, reason = "the banner is for people to read")]
                {
                    print!("{}", self.banner());
                }
            }
            LogFormat::Json => tracing::info!(
                amqp = %self.amqp_addr,
                amqps = ?self.amqps_addr,
                http = ?self.http_addr,
                https = ?self.https_addr,
                trust = ?self.trusted_ca,
                connection_strings = ?self.connection_strings(),
                "ironbus is ready"
            ),
        }
    }
}
