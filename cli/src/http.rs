//! A small HTTP/1.1 client for the management API: one connection per request (plain or
//! TLS), a SAS token in `Authorization`, the whole answer read into memory.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::connection::Endpoints;
use crate::error::{CliError, Context, ErrorKind, Result};
use crate::tls::Tls;

/// The answer to a request.
#[derive(Debug)]
pub struct Response {
    /// The HTTP status code.
    pub status: u16,
    /// The body as text (lossy UTF-8).
    pub body: String,
}

/// The management endpoint's client.
#[derive(Debug, Clone)]
pub struct HttpClient {
    endpoints: Endpoints,
    tls: Option<Tls>,
}

impl HttpClient {
    /// A client of `endpoints.http`; `tls` is used when that endpoint is HTTPS.
    pub fn new(endpoints: Endpoints, tls: Tls) -> Self {
        let tls = endpoints.http.tls.then_some(tls);
        HttpClient { endpoints, tls }
    }

    /// Sends `method` to `path_and_query` (starting with `/`) with `body` (ATOM XML) and the
    /// extra `headers`; answers whatever status the server gives.
    pub async fn request(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<String>,
        headers: &[(&str, &str)],
    ) -> Result<Response> {
        let http = &self.endpoints.http;
        let address = format!("{}:{}", http.host, http.port);
        let what = || format!("{method} {}{path_and_query}", http.base());
        let tcp = crate::timed(TcpStream::connect(&address), || {
            format!("connecting to {address} for {}", what())
        })
        .await?
        .context(ErrorKind::Connection, || format!("connecting to {address} for {}", what()))?;
        let host_header = if (http.tls && http.port == 443) || (!http.tls && http.port == 80) {
            http.host.clone()
        } else {
            address.clone()
        };
        let mut builder = Request::builder()
            .method(method.clone())
            .uri(path_and_query)
            .header(HOST, host_header)
            .header(AUTHORIZATION, self.endpoints.credentials.token(&self.audience()));
        if body.is_some() {
            builder = builder.header(CONTENT_TYPE, "application/atom+xml;type=entry;charset=utf-8");
        }
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .context(ErrorKind::Usage, what)?;
        let exchange = async {
            match &self.tls {
                Some(tls) => {
                    let stream = tls.connect(&http.host, tcp).await?;
                    send(TokioIo::new(stream), request)
                        .await
                        .map_err(|e| CliError::new(ErrorKind::Connection, what()).with_source(e))
                }
                None => send(TokioIo::new(tcp), request)
                    .await
                    .map_err(|e| CliError::new(ErrorKind::Connection, what()).with_source(e)),
            }
        };
        match tokio::time::timeout(crate::TIMEOUT, exchange).await {
            Ok(response) => response,
            Err(_) => Err(CliError::new(
                ErrorKind::Connection,
                format!("{}: no answer within {} s", what(), crate::TIMEOUT.as_secs()),
            )),
        }
    }
}

impl HttpClient {
    /// The audience of the management API's tokens: the namespace as an https URL, as the
    /// Service Bus administration clients sign it.
    fn audience(&self) -> String {
        format!("https://{}/", self.endpoints.host)
    }
}

/// One request on a fresh connection over `io`.
async fn send<T>(io: T, request: Request<Full<Bytes>>) -> Result<Response, hyper::Error>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await?;
    let driver = tokio::spawn(connection);
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    driver.abort();
    Ok(Response { status, body: String::from_utf8_lossy(&body).into_owned() })
}
