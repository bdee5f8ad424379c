//! The HTTP side of the server: its command-line options, the listeners (the HTTPS one with its
//! certificate from [`crate::tls`]), and AMQP over WebSockets handed to the AMQP transport.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Args;
use ironbus_core::Tier;
use ironbus_transport_amqp::StreamSender;
use ironbus_transport_http::{HttpConfig, HttpTransport, WebSocketHook};

use crate::tls::Certificate;
use crate::ServerError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum TierArg {
    Standard,
    Premium,
}

/// The HTTP listeners' options.
#[derive(Debug, Args)]
pub struct HttpArgs {
    /// Where the plain HTTP listener binds (REST, management, /health, /metrics), or `off`.
    #[arg(long, env = "IRONBUS_HTTP_ADDR", default_value = "127.0.0.1:5300")]
    http_addr: String,
    /// Where the HTTPS listener binds (REST, management and AMQP over WebSockets; the admin SDKs
    /// only speak HTTPS), or `off`. Its certificate: see --tls-cert.
    #[arg(long, env = "IRONBUS_HTTPS_ADDR", default_value = "127.0.0.1:5301")]
    https_addr: String,
    /// The namespace's tier, as the management API reports and enforces it: `standard`
    /// (entities take messages up to 256 KB, as Microsoft's emulator) or `premium` (entities
    /// may be given MaxMessageSizeInKilobytes 1024, the default, to 102400).
    #[arg(long, env = "IRONBUS_TIER", value_enum, default_value_t = TierArg::Standard)]
    tier: TierArg,
    /// The web console under /$console/ on the HTTP and HTTPS listeners: `on` (the default)
    /// or `off`. It signs people in with a shared access policy's name and key.
    #[arg(long, env = "IRONBUS_CONSOLE", value_enum, default_value_t = Switch::On)]
    console: Switch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Switch {
    On,
    Off,
}

/// A listener's address, `host:port`, or `None` for `off`; `flag` names the option in errors.
pub fn parse_addr(flag: &str, value: &str) -> Result<Option<SocketAddr>, ServerError> {
    if value.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    value.parse().map(Some).map_err(|source| ServerError::Address {
        flag: flag.to_owned(),
        value: value.to_owned(),
        source,
    })
}

impl HttpArgs {
    /// The addresses that will be served, for the loopback check of the development key.
    pub fn addrs(&self) -> Result<Vec<SocketAddr>, ServerError> {
        Ok([parse_addr("http-addr", &self.http_addr)?, parse_addr("https-addr", &self.https_addr)?]
            .into_iter()
            .flatten()
            .collect())
    }

    /// Where the HTTPS listener binds, unless it is off.
    pub fn https_addr(&self) -> Result<Option<SocketAddr>, ServerError> {
        parse_addr("https-addr", &self.https_addr)
    }

    /// Whether the web console is served (`--console`).
    pub fn console(&self) -> bool {
        self.console == Switch::On
    }

    /// The namespace's tier (`--tier`).
    pub fn tier(&self) -> Tier {
        match self.tier {
            TierArg::Standard => Tier::Standard,
            TierArg::Premium => Tier::Premium,
        }
    }
}

/// Binds the HTTP listeners `args` asks for with `config` (the HTTPS one with `certificate`,
/// ALPN `http/1.1`; the console as `--console` says); `None` when both are off.
pub async fn bind(
    args: &HttpArgs,
    certificate: Option<&Certificate>,
    mut config: HttpConfig,
) -> Result<Option<HttpTransport>, ServerError> {
    config.console = args.console();
    let plain = parse_addr("http-addr", &args.http_addr)?;
    let tls_addr = parse_addr("https-addr", &args.https_addr)?;
    if plain.is_none() && tls_addr.is_none() {
        return Ok(None);
    }
    let tls = match (tls_addr, certificate) {
        (Some(addr), Some(certificate)) => Some((addr, certificate.server_config(&[b"http/1.1"])?)),
        (Some(_), None) => return Err(ServerError::MissingCertificate),
        (None, _) => None,
    };
    let transport = HttpTransport::bind(plain, tls, config)
        .await
        .map_err(|source| ServerError::BindHttp { http: plain, https: tls_addr, source })?;
    Ok(Some(transport))
}

/// AMQP over WebSockets: each connection the HTTP listeners upgrade on `/$servicebus/websocket`
/// is handed to the AMQP transport, which serves it under its own connection limits.
pub fn websocket_hook(streams: StreamSender) -> WebSocketHook {
    Arc::new(move |socket, peer| {
        if !streams.send(socket, peer) {
            tracing::debug!(%peer, "websocket dropped: the AMQP transport takes no more");
        }
    })
}

#[cfg(test)]
mod websocket_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_can_be_switched_off() {
        assert_eq!(parse_addr("x", "off").unwrap(), None);
        assert!(parse_addr("x", "127.0.0.1:5300").unwrap().is_some());
        assert!(parse_addr("x", "nonsense").is_err());
    }
}
