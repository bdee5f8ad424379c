//! The TLS client configuration of both endpoints (AMQPS, HTTPS): the public CAs by default
//! (Azure Service Bus), the CAs of `--ca-file` instead (ironbus's development CA), or no
//! verification at all with `--insecure` (for a quick look only: anyone on the path can read
//! and change the traffic).

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::error::{CliError, Context, ErrorKind, Result};

/// How to trust the broker's certificate.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// PEM certificates of the CAs to trust instead of the public ones.
    pub ca_file: Option<PathBuf>,
    /// Trust any certificate.
    pub insecure: bool,
}

/// A TLS connector built from [`TlsOptions`].
#[derive(Clone)]
pub struct Tls {
    connector: TlsConnector,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

impl Tls {
    /// The connector `options` describe.
    pub fn new(options: &TlsOptions) -> Result<Self> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .context(ErrorKind::Usage, || "setting up TLS".to_owned())?;
        let config = if options.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth()
        } else {
            let mut roots = RootCertStore::empty();
            match &options.ca_file {
                Some(path) => {
                    let shown = path.display().to_string();
                    for cert in CertificateDer::pem_file_iter(path)
                        .context(ErrorKind::Io, || format!("reading the CA file {shown}"))?
                    {
                        let cert = cert.context(ErrorKind::Usage, || {
                            format!("reading a certificate of the CA file {shown}")
                        })?;
                        roots.add(cert).context(ErrorKind::Usage, || {
                            format!("a certificate of the CA file {shown}")
                        })?;
                    }
                    if roots.is_empty() {
                        return Err(CliError::usage(format!(
                            "the CA file {shown} holds no certificate"
                        )));
                    }
                }
                None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        };
        Ok(Tls { connector: TlsConnector::from(Arc::new(config)) })
    }

    /// Runs the TLS handshake on `stream` for the server named `host`.
    pub async fn connect(&self, host: &str, stream: TcpStream) -> Result<TlsStream<TcpStream>> {
        let name = ServerName::try_from(host.to_owned())
            .context(ErrorKind::Usage, || format!("`{host}` is not a valid TLS server name"))?;
        self.connector.connect(name, stream).await.context(ErrorKind::Connection, || {
            format!(
                "TLS handshake with {host} (for ironbus's development certificate pass \
                 --ca-file <data-dir>/tls/ca.pem)"
            )
        })
    }
}

/// `--insecure`: accepts any certificate, but still checks the handshake's signatures.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
