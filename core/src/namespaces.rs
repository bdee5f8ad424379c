//! [`Namespaces`]: the namespaces one server serves, each a [`Broker`] of its own, and the host
//! names that select them.
//!
//! A client addresses a namespace by its host name, as it addresses a Service Bus namespace
//! (`<name>.servicebus.windows.net`): the AMQP open's `hostname`, the HTTP `Host` header, or the
//! host of a SAS token's audience. The first label of a host of several labels names the
//! namespace (`test-42.localhost` → `test-42`); a host of one label (`localhost`), an IP
//! address, or a first label that names no namespace this server serves (and may not create)
//! selects the **default** namespace, which is what a server of one namespace serves for every
//! host. With on-demand creation on, a first label that is a valid namespace name and names no
//! namespace yet creates one (through the [`OpenNamespace`] the server gave), with its own
//! entities, quotas and counts, kept in the server's stores under the namespace's key prefix
//! ([`PrefixedStore`](crate::store::PrefixedStore)), so it outlives a restart and is opened
//! again at its first use.
//!
//! Invariant: one broker per namespace name; a name is opened at most once (on-demand opens are
//! serialized), and the default namespace is never opened here.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use crate::{Broker, BrokerError, Result};

/// Opens the broker of a namespace by its name (its stores, clock and limits are the server's
/// choice).
pub type OpenNamespace =
    Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = Result<Broker>> + Send>> + Send + Sync>;

/// The most namespaces on-demand creation makes: a client cannot exhaust the server by
/// addressing endless host names.
pub const MAX_NAMESPACES: usize = 1_000;

/// The namespaces of one server. Cheap to clone.
#[derive(Clone)]
pub struct Namespaces {
    inner: Arc<Inner>,
}

struct Inner {
    default_name: String,
    default: Broker,
    named: Mutex<HashMap<String, Broker>>,
    /// Set when namespaces may be created on first use; held while one opens.
    on_demand: Option<(OpenNamespace, tokio::sync::Mutex<()>)>,
}

impl fmt::Debug for Namespaces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Namespaces")
            .field("default", &self.inner.default_name)
            .field("named", &self.names())
            .field("on_demand", &self.inner.on_demand.is_some())
            .finish()
    }
}

impl Namespaces {
    /// One namespace, `default_name`, served for every host.
    pub fn single(default_name: impl Into<String>, default: Broker) -> Self {
        Self::new(default_name, default, HashMap::new(), None)
    }

    /// The default namespace, the namespaces declared beside it, and `on_demand` to create the
    /// others on first use (`None`: only these are served).
    pub fn new(
        default_name: impl Into<String>,
        default: Broker,
        declared: HashMap<String, Broker>,
        on_demand: Option<OpenNamespace>,
    ) -> Self {
        let named = declared.into_iter().map(|(name, b)| (name.to_ascii_lowercase(), b)).collect();
        Namespaces {
            inner: Arc::new(Inner {
                default_name: default_name.into().to_ascii_lowercase(),
                default,
                named: Mutex::new(named),
                on_demand: on_demand.map(|open| (open, tokio::sync::Mutex::new(()))),
            }),
        }
    }

    /// The default namespace's name.
    pub fn default_name(&self) -> &str {
        &self.inner.default_name
    }

    /// The default namespace's broker.
    pub fn default_broker(&self) -> &Broker {
        &self.inner.default
    }

    /// The names of the namespaces served besides the default one, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.named().keys().cloned().collect();
        names.sort();
        names
    }

    /// Every broker besides the default one.
    pub fn brokers(&self) -> Vec<(String, Broker)> {
        self.named().iter().map(|(n, b)| (n.clone(), b.clone())).collect()
    }

    fn named(&self) -> std::sync::MutexGuard<'_, HashMap<String, Broker>> {
        self.inner.named.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The namespace `host` selects without creating one: `None` for the default namespace.
    /// A name that on-demand creation would create counts as selected.
    pub fn name_for_host(&self, host: &str) -> Option<String> {
        let label = first_label(host)?;
        if label == self.inner.default_name {
            return None;
        }
        let known = self.named().contains_key(&label);
        (known || (self.inner.on_demand.is_some() && valid_name(&label))).then_some(label)
    }

    /// Whether a SAS `token` may be used on namespace `current` (`None`: the default): the host
    /// of the URI it is for must select the same namespace (a token for a bare path fits any).
    /// The error says which namespace the token is for.
    pub fn token_fits(
        &self,
        token: &str,
        current: Option<&str>,
    ) -> std::result::Result<(), String> {
        let Ok(Some(host)) = crate::auth::token_host(token) else { return Ok(()) };
        let for_namespace = self.name_for_host(&host);
        if for_namespace.as_deref() == current {
            return Ok(());
        }
        let default = self.default_name();
        Err(format!(
            "the token is for namespace '{}', and this request is to namespace '{}'",
            for_namespace.as_deref().unwrap_or(default),
            current.unwrap_or(default)
        ))
    }

    /// The namespace `host` selects (the default for `None`), created when it does not exist
    /// and on-demand creation is on. Returns its name (`None`: the default) and broker.
    pub async fn resolve(&self, host: Option<&str>) -> Result<(Option<String>, Broker)> {
        let Some(name) = host.and_then(|h| self.name_for_host(h)) else {
            return Ok((None, self.inner.default.clone()));
        };
        if let Some(broker) = self.named().get(&name) {
            return Ok((Some(name), broker.clone()));
        }
        let Some((open, opening)) = &self.inner.on_demand else {
            return Ok((None, self.inner.default.clone()));
        };
        let _one_at_a_time = opening.lock().await;
        if let Some(broker) = self.named().get(&name) {
            return Ok((Some(name), broker.clone()));
        }
        if self.named().len() >= MAX_NAMESPACES {
            return Err(BrokerError::QuotaExceeded(format!(
                "this server serves {MAX_NAMESPACES} namespaces, the most it creates on demand"
            )));
        }
        let broker = open(name.clone()).await?;
        tracing::info!(namespace = %name, "namespace created on first use");
        self.named().insert(name.clone(), broker.clone());
        Ok((Some(name), broker))
    }

    /// Shuts every namespace's broker down, the default one included.
    pub fn shutdown(&self) {
        for (_, broker) in self.brokers() {
            broker.shutdown();
        }
        self.inner.default.shutdown();
    }
}

/// The first label of a host name of several labels, lower case, its port removed; `None` for
/// an IP address or a host of one label.
fn first_label(host: &str) -> Option<String> {
    let host = host.trim().trim_end_matches('.');
    if host.starts_with('[') || host.parse::<IpAddr>().is_ok() {
        return None;
    }
    let host = host.rsplit_once(':').map_or(host, |(h, port)| {
        if port.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            host
        }
    });
    if host.parse::<IpAddr>().is_ok() {
        return None;
    }
    let (label, _) = host.split_once('.')?;
    Some(label.to_ascii_lowercase())
}

/// Whether `name` may name a namespace: 1 to 50 letters, digits and hyphens, starting with a
/// letter and not ending with a hyphen (Service Bus asks for 6 to 50; tests like short names).
pub fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=50).contains(&bytes.len())
        && bytes[0].is_ascii_alphabetic()
        && !name.ends_with('-')
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-')
        && name != "localhost"
}

#[cfg(test)]
mod tests {
    use super::{first_label, valid_name};

    #[test]
    fn the_first_label_of_a_host_of_several_labels_names_the_namespace() {
        assert_eq!(first_label("test-42.localhost").as_deref(), Some("test-42"));
        assert_eq!(first_label("Test-42.LocalHost:5672").as_deref(), Some("test-42"));
        assert_eq!(first_label("ns.servicebus.windows.net.").as_deref(), Some("ns"));
        for default in
            ["localhost", "localhost:5672", "127.0.0.1", "127.0.0.1:5300", "[::1]:443", "::1", ""]
        {
            assert_eq!(first_label(default), None, "{default}");
        }
        assert!(valid_name("test-42") && valid_name("a") && valid_name("ns1"));
        for bad in ["", "1ns", "ns-", "n_s", "localhost", &"n".repeat(51)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
