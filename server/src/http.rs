//! The HTTP side of the server: its command-line options, the HTTPS listener (its certificate from [`crate::tls`], AMQP over WebSockets handed to the AMQP
//! transport), and the testing-only fault injection that lets the compat suites make one
//! partition unavailable.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use ironbus_core::auth::Authorizer;
use ironbus_core::testing::FaultyStore;
use ironbus_core::types::PartitionId;
use ironbus_core::{Broker, Store, Tier, Timestamp};
use ironbus_transport_amqp::StreamSender;
use ironbus_transport_http::limits::ConnectionLimits;
use ironbus_transport_http::{FaultHook, HttpConfig, HttpTransport, MetricsRender, WebSocketHook};

use crate::tls::Certificate;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum TierArg {
    Standard,
    Premium,
}

/// The HTTP listeners' options.
#[derive(Debug, Args)]
pub(crate) struct HttpArgs {
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
    /// Testing only: wrap the store in a fault injector and serve
    /// `POST /$ironbus/faults?entity=..&partition=..&available=..` on the plain listener.
    #[arg(long, env = "IRONBUS_TESTING_FAULT_INJECTION", hide = true)]
    testing_fault_injection: bool,
}

pub(crate) fn parse_addr(flag: &str, value: &str) -> Result<Option<SocketAddr>> {
    if value.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    value
        .parse()
        .map(Some)
        .with_context(|| format!("--{flag} {value:?}: expected host:port or off"))
}

impl HttpArgs {
    /// The addresses that will be served, for the loopback check of the development key.
    pub(crate) fn addrs(&self) -> Result<Vec<SocketAddr>> {
        Ok([parse_addr("http-addr", &self.http_addr)?, parse_addr("https-addr", &self.https_addr)?]
            .into_iter()
            .flatten()
            .collect())
    }

    /// Where the HTTPS listener binds, unless it is off.
    pub(crate) fn https_addr(&self) -> Result<Option<SocketAddr>> {
        parse_addr("https-addr", &self.https_addr)
    }

    /// Wraps every store in a fault injector when testing asked for one.
    pub(crate) fn wrap_stores(&self, stores: Vec<Arc<dyn Store>>) -> WrappedStores {
        if !self.testing_fault_injection {
            return (stores, None);
        }
        tracing::warn!("testing fault injection is on: never use this in production");
        let faulty: Vec<Arc<FaultyStore>> =
            stores.into_iter().map(|store| Arc::new(FaultyStore::new(store))).collect();
        (faulty.iter().map(|f| f.clone() as Arc<dyn Store>).collect(), Some(faulty))
    }
}

/// The stores the broker opens, and the fault injectors around them when testing asked.
pub(crate) type WrappedStores = (Vec<Arc<dyn Store>>, Option<Vec<Arc<FaultyStore>>>);

/// Binds the HTTP listeners; `None` when both are off.
#[allow(clippy::too_many_arguments, reason = "each is one piece of the server's assembly")]
pub(crate) async fn bind(
    args: &HttpArgs,
    certificate: Option<&Certificate>,
    authorizer: Arc<Authorizer>,
    broker: &Broker,
    faults: Option<Vec<Arc<FaultyStore>>>,
    metrics: MetricsRender,
    namespace: Option<String>,
    limits: ConnectionLimits,
    websocket: WebSocketHook,
) -> Result<Option<HttpTransport>> {
    let plain = parse_addr("http-addr", &args.http_addr)?;
    let tls_addr = parse_addr("https-addr", &args.https_addr)?;
    if plain.is_none() && tls_addr.is_none() {
        return Ok(None);
    }
    let tls = match (tls_addr, certificate) {
        (Some(addr), Some(certificate)) => Some((addr, certificate.server_config(&[b"http/1.1"])?)),
        (Some(_), None) => bail!("the HTTPS listener needs the TLS certificate"),
        (None, _) => None,
    };
    let mut config = HttpConfig::new(authorizer);
    if let Some(namespace) = namespace {
        config.namespace = namespace;
    }
    config.started_at = broker.clock().now().max(Timestamp::from_millis(0));
    config.tier = match args.tier {
        TierArg::Standard => Tier::Standard,
        TierArg::Premium => Tier::Premium,
    };
    config.metrics = Some(metrics);
    config.limits = limits;
    config.websocket = Some(websocket);
    config.faults = faults.map(|faulty| fault_hook(broker.clone(), faulty));
    let transport = HttpTransport::bind(plain, tls, config)
        .await
        .with_context(|| format!("binding the HTTP listeners ({plain:?}, {tls_addr:?})"))?;
    Ok(Some(transport))
}

/// AMQP over WebSockets: each connection the HTTP listeners upgrade on `/$servicebus/websocket`
/// is handed to the AMQP transport, which serves it under its own connection limits.
pub(crate) fn websocket_hook(streams: StreamSender) -> WebSocketHook {
    Arc::new(move |socket, peer| {
        if !streams.send(socket, peer) {
            tracing::debug!(%peer, "websocket dropped: the AMQP transport takes no more");
        }
    })
}

fn fault_hook(broker: Broker, faulty: Vec<Arc<FaultyStore>>) -> FaultHook {
    Arc::new(move |entity, partition, available| {
        let prefix = broker
            .partition_key_prefix(entity, PartitionId(partition))
            .map_err(|e| e.to_string())?;
        // Only the partition's own store holds keys under its prefix; the others ignore it.
        for store in &faulty {
            if available {
                store.heal_prefix(&prefix);
            } else {
                store.fail_prefix(prefix.to_vec());
            }
        }
        tracing::warn!(entity, partition, available, "testing fault injection");
        Ok(())
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
