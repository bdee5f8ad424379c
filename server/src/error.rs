//! [`ServerError`]: why the server could not start or serve, by what failed — a flag, a file,
//! the config, a store, TLS, a listener, the broker, the signal handlers — with the path or the
//! address a person needs and the error underneath as its source.

use std::net::{AddrParseError, SocketAddr};
use std::path::PathBuf;

use ironbus_core::auth::PolicyError;
use ironbus_core::{BrokerError, StoreError};

use crate::config::ConfigError;
use crate::tls::TlsError;

/// Why the server could not start or serve. Its message says what failed and where; the cause
/// underneath is its [`source`](std::error::Error::source), so print the whole chain (as the
/// `ironbus` binary does).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// A listener's address flag (`--{flag}`) is neither `host:port` nor `off`.
    #[error("--{flag} {value:?}: expected host:port or off")]
    Address { flag: String, value: String, source: AddrParseError },
    /// The public development key would be served on `addr`, which is not a loopback address.
    #[error(
        "refusing to listen on {addr} with the public development key: set --sas-key (or \
         IRONBUS_SAS_KEY) to serve a non-loopback address"
    )]
    DevelopmentKeyExposed { addr: SocketAddr },
    /// The shared access policies (root, `--policy`, the config's) do not make a namespace.
    #[error(transparent)]
    Policies(PolicyError),
    /// The config file cannot be read.
    #[error("reading config {}", path.display())]
    ReadConfig { path: PathBuf, source: std::io::Error },
    /// The config file is wrong, or an entity it declares could not be created.
    #[error("config {}", path.display())]
    Config { path: PathBuf, source: Box<ConfigError> },
    /// A store's directory cannot be created.
    #[error("creating {}", path.display())]
    CreateDir { path: PathBuf, source: std::io::Error },
    /// A store does not open.
    #[error("opening the RocksDB store in {}", path.display())]
    OpenStore { path: PathBuf, source: StoreError },
    /// `--store postgres` without `--postgres-url`.
    #[error("--store postgres needs --postgres-url (or IRONBUS_POSTGRES_URL)")]
    MissingPostgresUrl,
    /// A PostgreSQL store does not open: the database cannot be reached, refuses the
    /// connection, or its table cannot be created.
    #[error("opening the PostgreSQL store (table {table}); check --postgres-url")]
    OpenPostgres { table: String, source: StoreError },
    /// The broker does not open on its stores (recovery failed).
    #[error("opening the broker")]
    OpenBroker(#[source] BrokerError),
    /// The TLS listeners' certificate cannot be read, generated or used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A TLS listener is asked for without a certificate.
    #[error("the HTTPS listener needs the TLS certificate")]
    MissingCertificate,
    /// An AMQP listener (`AMQP` or `AMQP TLS`) cannot listen on `addr` (in use, not local, …).
    #[error("binding the {listener} listener on {addr}")]
    Bind { listener: &'static str, addr: SocketAddr, source: std::io::Error },
    /// The HTTP listeners (`http` and `https`, `None`: off) cannot listen.
    #[error("binding the HTTP listeners (HTTP {}, HTTPS {})", or_off(http), or_off(https))]
    BindHttp { http: Option<SocketAddr>, https: Option<SocketAddr>, source: std::io::Error },
    /// Ctrl-C or SIGTERM cannot be waited for; `action` says which step failed.
    /// A cluster flag is missing or wrong.
    #[error("cluster: {0}")]
    Cluster(String),

    #[error("{action}")]
    Signal { action: &'static str, source: std::io::Error },
}

/// An optional listener's address, or `off`.
fn or_off(addr: &Option<SocketAddr>) -> String {
    addr.map_or_else(|| "off".to_owned(), |addr| addr.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_what_failed_and_sources_say_why() {
        let http = Some("127.0.0.1:5300".parse().unwrap());
        let source = std::io::ErrorKind::AddrInUse.into();
        let error = ServerError::BindHttp { http, https: None, source };
        assert_eq!(
            error.to_string(),
            "binding the HTTP listeners (HTTP 127.0.0.1:5300, HTTPS off)"
        );
        let source = std::error::Error::source(&error).expect("the cause");
        let source = source.downcast_ref::<std::io::Error>().expect("an io::Error");
        assert_eq!(source.kind(), std::io::ErrorKind::AddrInUse);
    }
}
