//! Where the broker is and how to reach it: the Service Bus connection string
//! ([`ConnectionString`]) and the two endpoints derived from it ([`Endpoints`]): AMQP for
//! messages, HTTP for management (ATOM).
//!
//! With `UseDevelopmentEmulator=true` both are plain: AMQP on the Endpoint's port (5672 by
//! default), HTTP on port 5300 (ironbus's plain HTTP listener, the emulator's management
//! port). Without it both use TLS, as against Azure Service Bus: AMQPS on the Endpoint's port
//! (5671 by default), HTTPS on 443. `--http-endpoint` names the management endpoint instead.

use std::str::FromStr;

use crate::error::{CliError, Result};
use crate::sas::Credentials;

/// The emulator's connection string, the default.
pub const EMULATOR_CONNECTION_STRING: &str = "Endpoint=sb://localhost;SharedAccessKeyName=\
     RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true";

/// The plain HTTP port of ironbus (and the emulator's management port).
pub const EMULATOR_HTTP_PORT: u16 = 5300;

/// A parsed Service Bus connection string:
/// `Endpoint=sb://host[:port][/];SharedAccessKeyName=..;SharedAccessKey=..[;UseDevelopmentEmulator=true]`
/// (or `SharedAccessSignature=<token>` instead of the key). Keys are case-insensitive.
#[derive(Debug, Clone)]
pub struct ConnectionString {
    /// The namespace's host name.
    pub host: String,
    /// The Endpoint's port, if it names one.
    pub port: Option<u16>,
    /// What signs requests.
    pub credentials: Credentials,
    /// `EntityPath`, if given.
    pub entity_path: Option<String>,
    /// `UseDevelopmentEmulator=true`: plain AMQP and HTTP.
    pub emulator: bool,
}

impl FromStr for ConnectionString {
    type Err = CliError;

    fn from_str(text: &str) -> Result<Self> {
        let (mut endpoint, mut name, mut key, mut signature) = (None, None, None, None);
        let (mut entity_path, mut emulator) = (None, false);
        let parts = text.split(';').map(str::trim).filter(|p| !p.is_empty());
        for (n, part) in parts.enumerate() {
            // The part itself is not shown: it may be a key.
            let Some((k, v)) = part.split_once('=') else {
                return Err(CliError::usage(format!(
                    "part {} of the connection string is not `Key=Value`",
                    n + 1
                )));
            };
            match k.trim().to_ascii_lowercase().as_str() {
                "endpoint" => endpoint = Some(v.trim().to_owned()),
                "sharedaccesskeyname" => name = Some(v.to_owned()),
                "sharedaccesskey" => key = Some(v.to_owned()),
                "sharedaccesssignature" => signature = Some(v.to_owned()),
                "entitypath" => entity_path = Some(v.to_owned()),
                "usedevelopmentemulator" => emulator = v.trim().eq_ignore_ascii_case("true"),
                _ => {} // Other keys (TransportType, ...) do not concern this tool.
            }
        }
        let endpoint =
            endpoint.ok_or_else(|| CliError::usage("the connection string has no Endpoint"))?;
        let (host, port) = endpoint_host(&endpoint)?;
        let credentials = match (name, key, signature) {
            (_, _, Some(token)) => Credentials::Token(token),
            (Some(name), Some(key), None) => Credentials::Key { name, key },
            _ => {
                return Err(CliError::usage(
                    "the connection string needs SharedAccessKeyName and SharedAccessKey, or \
                     SharedAccessSignature",
                ))
            }
        };
        Ok(ConnectionString { host, port, credentials, entity_path, emulator })
    }
}

/// The host and port of `sb://host[:port][/...]` (any scheme is taken, as the SDKs do).
fn endpoint_host(endpoint: &str) -> Result<(String, Option<u16>)> {
    let after = endpoint.split_once("://").map_or(endpoint, |(_, rest)| rest);
    let authority = after.split('/').next().unwrap_or_default();
    let (host, port) = split_host_port(authority)
        .ok_or_else(|| CliError::usage(format!("the Endpoint `{endpoint}` has a bad port")))?;
    if host.is_empty() {
        return Err(CliError::usage(format!("the Endpoint `{endpoint}` has no host")));
    }
    Ok((host.to_owned(), port))
}

/// `host[:port]` (IPv6 in brackets) into its parts; `None` for a port that is not a number.
fn split_host_port(authority: &str) -> Option<(&str, Option<u16>)> {
    let colon = if authority.starts_with('[') {
        authority.find(']').and_then(|end| authority[end..].find(':').map(|c| c + end))
    } else {
        authority.rfind(':')
    };
    match colon {
        Some(at) => Some((&authority[..at], Some(authority[at + 1..].parse().ok()?))),
        None => Some((authority, None)),
    }
}

/// The management endpoint: `http[s]://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpEndpoint {
    /// Whether to speak TLS.
    pub tls: bool,
    /// The host to connect to and to name in `Host` and in TLS.
    pub host: String,
    /// The port.
    pub port: u16,
}

impl HttpEndpoint {
    /// `http[s]://host:port`.
    pub fn base(&self) -> String {
        format!("{}://{}:{}", if self.tls { "https" } else { "http" }, self.host, self.port)
    }
}

impl FromStr for HttpEndpoint {
    type Err = CliError;

    fn from_str(url: &str) -> Result<Self> {
        let bad =
            || CliError::usage(format!("--http-endpoint `{url}`: expected http[s]://host[:port]"));
        let (scheme, rest) = url.split_once("://").ok_or_else(bad)?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "http" => false,
            "https" => true,
            _ => return Err(bad()),
        };
        let authority = rest.split('/').next().unwrap_or_default();
        let (host, port) = split_host_port(authority).ok_or_else(bad)?;
        if host.is_empty() {
            return Err(bad());
        }
        Ok(HttpEndpoint {
            tls,
            host: host.to_owned(),
            port: port.unwrap_or(if tls { 443 } else { 80 }),
        })
    }
}

/// The AMQP endpoint: host, port, TLS or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpEndpoint {
    /// Whether to speak TLS (AMQPS).
    pub tls: bool,
    /// The host.
    pub host: String,
    /// The port.
    pub port: u16,
}

/// Both endpoints and the credentials, as the commands use them.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// The namespace's host name (the audience of tokens).
    pub host: String,
    /// Where messages go.
    pub amqp: AmqpEndpoint,
    /// Where management goes.
    pub http: HttpEndpoint,
    /// What signs requests.
    pub credentials: Credentials,
}

impl Endpoints {
    /// The endpoints a connection string implies, the management one overridden by `http`.
    pub fn new(connection: &ConnectionString, http: Option<HttpEndpoint>) -> Self {
        let tls = !connection.emulator;
        let amqp = AmqpEndpoint {
            tls,
            host: connection.host.clone(),
            port: connection.port.unwrap_or(if tls { 5671 } else { 5672 }),
        };
        let http = http.unwrap_or_else(|| HttpEndpoint {
            tls,
            host: connection.host.clone(),
            port: if tls { 443 } else { EMULATOR_HTTP_PORT },
        });
        Endpoints {
            host: connection.host.clone(),
            amqp,
            http,
            credentials: connection.credentials.clone(),
        }
    }

    /// The audience of a token for `path` (`sb://host/path`; the namespace for an empty path).
    pub fn audience(&self, path: &str) -> String {
        format!("sb://{}/{}", self.host, path.trim_start_matches('/'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_emulator_string_means_plain_amqp_and_http_on_the_emulator_ports() {
        let parsed: ConnectionString = EMULATOR_CONNECTION_STRING.parse().unwrap();
        assert!(parsed.emulator);
        assert_eq!((parsed.host.as_str(), parsed.port), ("localhost", None));
        let endpoints = Endpoints::new(&parsed, None);
        assert_eq!(
            endpoints.amqp,
            AmqpEndpoint { tls: false, host: "localhost".into(), port: 5672 }
        );
        assert_eq!(endpoints.http.base(), "http://localhost:5300");
        assert_eq!(endpoints.audience("q"), "sb://localhost/q");
    }

    #[test]
    fn without_the_emulator_flag_both_use_tls_on_service_bus_ports() {
        let text =
            "endpoint=sb://ns.servicebus.windows.net/;sharedaccesskeyname=p;sharedaccesskey=k=";
        let parsed: ConnectionString = text.parse().unwrap();
        assert!(!parsed.emulator);
        match &parsed.credentials {
            Credentials::Key { name, key } => {
                assert_eq!((name.as_str(), key.as_str()), ("p", "k="))
            }
            other => panic!("{other:?}"),
        }
        let endpoints = Endpoints::new(&parsed, None);
        assert_eq!(endpoints.amqp.port, 5671);
        assert!(endpoints.amqp.tls);
        assert_eq!(endpoints.http.base(), "https://ns.servicebus.windows.net:443");
    }

    #[test]
    fn the_endpoint_port_is_the_amqp_port_and_the_http_endpoint_can_be_named() {
        let text = "Endpoint=sb://127.0.0.1:6000;SharedAccessKeyName=a;SharedAccessKey=b;UseDevelopmentEmulator=true";
        let parsed: ConnectionString = text.parse().unwrap();
        let http: HttpEndpoint = "https://127.0.0.1:7000/".parse().unwrap();
        let endpoints = Endpoints::new(&parsed, Some(http));
        assert_eq!(endpoints.amqp.port, 6000);
        assert_eq!(
            endpoints.http,
            HttpEndpoint { tls: true, host: "127.0.0.1".into(), port: 7000 }
        );
    }

    #[test]
    fn a_signature_replaces_the_key_and_bad_strings_are_refused() {
        let text =
            "Endpoint=sb://h/;SharedAccessSignature=SharedAccessSignature sr=a&sig=b&se=1&skn=c";
        let parsed: ConnectionString = text.parse().unwrap();
        assert!(matches!(parsed.credentials, Credentials::Token(_)));
        for bad in [
            "SharedAccessKeyName=a;SharedAccessKey=b",
            "Endpoint=sb://h",
            "Endpoint=sb://h:x;SharedAccessKeyName=a;SharedAccessKey=b",
            "garbage",
        ] {
            assert!(bad.parse::<ConnectionString>().is_err(), "{bad}");
        }
        assert!("ftp://h".parse::<HttpEndpoint>().is_err());
        assert_eq!("http://[::1]:81".parse::<HttpEndpoint>().unwrap().port, 81);
    }
}
