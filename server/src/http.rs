//! The HTTP side of the server: its command-line options, the Prometheus exporter, TLS (a
//! self-signed development certificate or the operator's own), and the testing-only fault
//! injection that lets the compat suites make one partition unavailable.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use ironbus_core::auth::Authorizer;
use ironbus_core::testing::FaultyStore;
use ironbus_core::types::PartitionId;
use ironbus_core::{Broker, Store, Timestamp};
use ironbus_transport_http::limits::ConnectionLimits;
use ironbus_transport_http::{FaultHook, HttpConfig, HttpTransport, MetricsRender};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The HTTP listeners' options.
#[derive(Debug, Args)]
pub struct HttpArgs {
    /// Where the plain HTTP listener binds (REST, management, /health, /metrics), or `off`.
    #[arg(long, env = "IRONBUS_HTTP_ADDR", default_value = "127.0.0.1:5300")]
    http_addr: String,
    /// Where the HTTPS listener binds (REST and management; the admin SDKs only speak HTTPS), or
    /// `off`. Without --tls-cert/--tls-key it serves a development certificate for localhost,
    /// generated on first start under <data-dir>/tls.
    #[arg(long, env = "IRONBUS_HTTPS_ADDR", default_value = "127.0.0.1:5301")]
    https_addr: String,
    /// PEM certificate chain for the HTTPS listener (with --tls-key).
    #[arg(long, env = "IRONBUS_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for the HTTPS listener (with --tls-cert).
    #[arg(long, env = "IRONBUS_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Testing only: wrap the store in a fault injector and serve
    /// `POST /$ironbus/faults?entity=..&partition=..&available=..` on the plain listener.
    #[arg(long, env = "IRONBUS_TESTING_FAULT_INJECTION", hide = true)]
    testing_fault_injection: bool,
}

fn parse_addr(flag: &str, value: &str) -> Result<Option<SocketAddr>> {
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
    pub fn addrs(&self) -> Result<Vec<SocketAddr>> {
        Ok([parse_addr("http-addr", &self.http_addr)?, parse_addr("https-addr", &self.https_addr)?]
            .into_iter()
            .flatten()
            .collect())
    }

    /// Wraps every store in a fault injector when testing asked for one.
    pub fn wrap_stores(&self, stores: Vec<Arc<dyn Store>>) -> WrappedStores {
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
pub type WrappedStores = (Vec<Arc<dyn Store>>, Option<Vec<Arc<FaultyStore>>>);

/// Installs the Prometheus recorder (histograms with explicit buckets) and returns what renders
/// `/metrics`. Call before the broker opens, so its metric descriptions are recorded.
pub fn install_metrics() -> Result<MetricsRender> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(ironbus_core::metrics::STORE_WRITE_DURATION_SECONDS.to_owned()),
            ironbus_core::metrics::STORE_WRITE_BUCKETS,
        )
        .context("store write buckets")?
        .set_buckets_for_metric(
            Matcher::Full(ironbus_transport_http::metrics::REQUEST_DURATION_SECONDS.to_owned()),
            ironbus_transport_http::metrics::REQUEST_DURATION_BUCKETS,
        )
        .context("http request buckets")?
        .install_recorder()
        .context("installing the Prometheus recorder")?;
    // The exporter keeps histogram samples until rendered; run its upkeep now and then.
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(Arc::new(move || handle.render()))
}

/// Binds the HTTP listeners; `None` when both are off.
#[allow(clippy::too_many_arguments, reason = "each is one piece of the server's assembly")]
pub async fn bind(
    args: &HttpArgs,
    data_dir: &Path,
    authorizer: Arc<Authorizer>,
    broker: &Broker,
    faults: Option<Vec<Arc<FaultyStore>>>,
    metrics: MetricsRender,
    namespace: Option<String>,
    limits: ConnectionLimits,
) -> Result<Option<HttpTransport>> {
    let plain = parse_addr("http-addr", &args.http_addr)?;
    let tls_addr = parse_addr("https-addr", &args.https_addr)?;
    if plain.is_none() && tls_addr.is_none() {
        return Ok(None);
    }
    let tls = match tls_addr {
        Some(addr) => Some((addr, Arc::new(tls_config(args, data_dir)?))),
        None => None,
    };
    let mut config = HttpConfig::new(authorizer);
    if let Some(namespace) = namespace {
        config.namespace = namespace;
    }
    config.started_at = broker.clock().now().max(Timestamp::from_millis(0));
    config.metrics = Some(metrics);
    config.limits = limits;
    config.faults = faults.map(|faulty| fault_hook(broker.clone(), faulty));
    let transport = HttpTransport::bind(plain, tls, config)
        .await
        .with_context(|| format!("binding the HTTP listeners ({plain:?}, {tls_addr:?})"))?;
    Ok(Some(transport))
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

/// The HTTPS listener's TLS configuration: the operator's certificate, or the development one.
fn tls_config(args: &HttpArgs, data_dir: &Path) -> Result<rustls::ServerConfig> {
    let (cert, key) = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => (cert.clone(), key.clone()),
        _ => development_certificate(data_dir)?,
    };
    let chain = CertificateDer::pem_file_iter(&cert)
        .with_context(|| format!("reading {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing the certificates in {}", cert.display()))?;
    if chain.is_empty() {
        bail!("{} holds no PEM certificate", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(&key)
        .with_context(|| format!("reading the private key {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("the TLS certificate and key do not fit together")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The development certificate under `<data_dir>/tls`, created on first start: a CA
/// (`ca.pem`, what clients trust) and a server certificate for `localhost` and `127.0.0.1`
/// signed by it (`cert.pem`, `key.pem`). Returns the server certificate's and key's paths.
fn development_certificate(data_dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let dir = data_dir.join("tls");
    let (ca_path, cert_path, key_path) =
        (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"));
    if !(ca_path.is_file() && cert_path.is_file() && key_path.is_file()) {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let (ca, cert, key) = generate_development_certificate()?;
        std::fs::write(&ca_path, ca).with_context(|| format!("writing {}", ca_path.display()))?;
        std::fs::write(&cert_path, cert)
            .with_context(|| format!("writing {}", cert_path.display()))?;
        write_private(&key_path, &key)?;
        tracing::info!(ca = %ca_path.display(), "generated a development TLS certificate for localhost");
    }
    #[allow(clippy::print_stdout, reason = "people need the path to trust the certificate")]
    {
        println!(
            "HTTPS development certificate authority: {} (trust it: Python connection_verify=..., \
             Node NODE_EXTRA_CA_CERTS=...)",
            ca_path.display()
        );
    }
    Ok((cert_path, key_path))
}

fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).with_context(|| format!("writing {}", path.display()))?;
    file.write_all(text.as_bytes()).with_context(|| format!("writing {}", path.display()))
}

/// (CA PEM, server certificate chain PEM, server key PEM).
fn generate_development_certificate() -> Result<(String, String, String)> {
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    let mut ca_name = DistinguishedName::new();
    ca_name.push(DnType::CommonName, "ironbus development CA");
    ca_params.distinguished_name = ca_name;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate()?;
    let ca = ca_params.self_signed(&ca_key)?;

    let mut params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, "localhost");
    params.distinguished_name = name;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca, &ca_key)?;
    Ok((ca.pem(), format!("{}{}", cert.pem(), ca.pem()), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_development_certificate_loads_into_rustls() {
        let dir = std::env::temp_dir().join(format!("ironbus-tls-test-{}", std::process::id()));
        let args = HttpArgs {
            http_addr: "off".into(),
            https_addr: "127.0.0.1:0".into(),
            tls_cert: None,
            tls_key: None,
            testing_fault_injection: false,
        };
        tls_config(&args, &dir).unwrap();
        let ca = std::fs::read_to_string(dir.join("tls/ca.pem")).unwrap();
        // A second start reuses the files.
        tls_config(&args, &dir).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("tls/ca.pem")).unwrap(), ca);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn addresses_can_be_switched_off() {
        assert_eq!(parse_addr("x", "off").unwrap(), None);
        assert!(parse_addr("x", "127.0.0.1:5300").unwrap().is_some());
        assert!(parse_addr("x", "nonsense").is_err());
    }
}
