//! TLS for every listener that speaks it (HTTPS with AMQP over WebSockets, AMQPS): one
//! certificate, the operator's (`--tls-cert`/`--tls-key`) or a development one generated on
//! first start under `<data-dir>/tls` (a CA, `ca.pem`, that clients trust, and a certificate for
//! `localhost` and `127.0.0.1` signed by it). Each listener gets its own `rustls::ServerConfig`
//! of that certificate, differing only in ALPN.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Why the TLS listeners' certificate cannot be read, generated or used; each names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    #[error("reading {}", path.display())]
    ReadCertificates { path: PathBuf, source: pem::Error },
    #[error("parsing the certificates in {}", path.display())]
    ParseCertificates { path: PathBuf, source: pem::Error },
    #[error("{} holds no PEM certificate", path.display())]
    NoCertificate { path: PathBuf },
    #[error("reading the private key {}", path.display())]
    ReadKey { path: PathBuf, source: pem::Error },
    /// The directory of the development certificate cannot be created.
    #[error("creating {}", path.display())]
    CreateDir { path: PathBuf, source: std::io::Error },
    /// A file of the development certificate cannot be written.
    #[error("writing {}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("generating the development certificate")]
    Generate(#[source] rcgen::Error),
    #[error("TLS protocol versions")]
    ProtocolVersions(#[source] rustls::Error),
    #[error("the TLS certificate and key do not fit together")]
    KeyMismatch(#[source] rustls::Error),
}

/// The TLS listeners' certificate options.
#[derive(Debug, Args)]
pub struct TlsArgs {
    /// PEM certificate chain of the TLS listeners, HTTPS and AMQPS (with --tls-key). Without
    /// it they serve a development certificate for localhost, generated on first start under
    /// `<data-dir>/tls` (clients trust `<data-dir>/tls/ca.pem`).
    #[arg(long, env = "IRONBUS_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of the TLS listeners (with --tls-cert).
    #[arg(long, env = "IRONBUS_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// The certificate chain and key every TLS listener serves, read once.
#[derive(Debug)]
pub struct Certificate {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl TlsArgs {
    /// Reads the operator's certificate, or the development one (created if missing).
    pub fn load(&self, data_dir: &Path) -> Result<Certificate, TlsError> {
        let (cert, key) = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => (cert.clone(), key.clone()),
            _ => development_certificate(data_dir)?,
        };
        let chain = match CertificateDer::pem_file_iter(&cert) {
            Ok(chain) => chain.collect::<Result<Vec<_>, _>>(),
            Err(source) => return Err(TlsError::ReadCertificates { path: cert, source }),
        };
        let chain = match chain {
            Ok(chain) if chain.is_empty() => return Err(TlsError::NoCertificate { path: cert }),
            Ok(chain) => chain,
            Err(source) => return Err(TlsError::ParseCertificates { path: cert, source }),
        };
        let key = PrivateKeyDer::from_pem_file(&key)
            .map_err(|source| TlsError::ReadKey { path: key, source })?;
        Ok(Certificate { chain, key })
    }

    /// The development CA clients trust (`<data-dir>/tls/ca.pem`), unless the operator serves
    /// a certificate of their own.
    pub fn development_ca(&self, data_dir: &Path) -> Option<PathBuf> {
        self.tls_cert.is_none().then(|| data_dir.join(DEVELOPMENT_DIR).join("ca.pem"))
    }
}

/// The development certificate's directory under the data directory.
const DEVELOPMENT_DIR: &str = "tls";

impl Certificate {
    /// A server configuration of this certificate offering the ALPN protocols `alpn` (none:
    /// clients that ask for none, as the AMQP SDKs, are served either way).
    pub fn server_config(&self, alpn: &[&[u8]]) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsError::ProtocolVersions)?
            .with_no_client_auth()
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(TlsError::KeyMismatch)?;
        config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
        Ok(Arc::new(config))
    }
}

/// The development certificate under `<data_dir>/tls`, created on first start: a CA
/// (`ca.pem`, what clients trust) and a server certificate for `localhost` and `127.0.0.1`
/// signed by it (`cert.pem`, `key.pem`). Returns the server certificate's and key's paths.
fn development_certificate(data_dir: &Path) -> Result<(PathBuf, PathBuf), TlsError> {
    let dir = data_dir.join(DEVELOPMENT_DIR);
    let (ca_path, cert_path, key_path) =
        (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"));
    if !(ca_path.is_file() && cert_path.is_file() && key_path.is_file()) {
        if let Err(source) = std::fs::create_dir_all(&dir) {
            return Err(TlsError::CreateDir { path: dir, source });
        }
        let (ca, cert, key) = generate_development_certificate().map_err(TlsError::Generate)?;
        write(&ca_path, &ca, false)?;
        write(&cert_path, &cert, false)?;
        write(&key_path, &key, true)?;
        tracing::info!(ca = %ca_path.display(), "generated a development TLS certificate for localhost");
    }
    Ok((cert_path, key_path))
}

/// Writes `text` to `path`; a `private` file (the key) is readable by its owner only.
fn write(path: &Path, text: &str, private: bool) -> Result<(), TlsError> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if private {
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    options
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|source| TlsError::Write { path: path.to_owned(), source })
}

/// (CA PEM, server certificate chain PEM, server key PEM).
fn generate_development_certificate() -> Result<(String, String, String), rcgen::Error> {
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
        let args = TlsArgs { tls_cert: None, tls_key: None };
        let certificate = args.load(&dir).unwrap();
        certificate.server_config(&[b"http/1.1"]).unwrap();
        certificate.server_config(&[]).unwrap();
        let ca = std::fs::read_to_string(dir.join("tls/ca.pem")).unwrap();
        // A second start reuses the files.
        args.load(&dir).unwrap().server_config(&[]).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("tls/ca.pem")).unwrap(), ca);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_certificate_file_is_an_error_naming_it() {
        let args = TlsArgs {
            tls_cert: Some("/nonexistent/ironbus-cert.pem".into()),
            tls_key: Some("/nonexistent/ironbus-key.pem".into()),
        };
        let error = format!("{:#}", args.load(Path::new("/nonexistent")).unwrap_err());
        assert!(error.contains("ironbus-cert.pem"), "{error}");
    }
}
