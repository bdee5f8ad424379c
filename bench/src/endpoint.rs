//! Where to connect and how to authenticate: one connection and one session per producer or
//! consumer.

use anyhow::{bail, Context, Result};
use fe2o3_amqp::{
    connection::ConnectionHandle, sasl_profile::SaslProfile, session::SessionHandle, Connection,
    Session,
};

use crate::cbs;

/// The broker, as given by `--url`, `--sasl-plain` and `--cbs-key`.
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// The URL without credentials (fe2o3-amqp would take them from the URL without
    /// percent-decoding them, so they are taken out and passed as a SASL profile).
    url: String,
    /// The URL to show: credentials replaced by `***`.
    shown: String,
    host: String,
    /// `host:port` to connect the socket to.
    host_port: String,
    auth: Auth,
}

#[derive(Debug)]
enum Auth {
    Anonymous,
    Plain {
        username: String,
        password: String,
    },
    /// SASL ANONYMOUS, then a `$cbs` put-token signed with this key.
    Cbs {
        key: String,
    },
}

/// How `--client wire` logs in.
#[derive(Debug)]
pub(crate) enum Login<'a> {
    Anonymous,
    Plain { username: &'a str, password: &'a str },
}

/// A connection with one session on it.
#[derive(Debug)]
pub(crate) struct Link {
    pub connection: ConnectionHandle<()>,
    pub session: SessionHandle<()>,
}

impl Endpoint {
    pub(crate) fn new(url: &str, sasl_plain: Option<&str>, cbs_key: Option<&str>) -> Result<Self> {
        let parts = split_url(url)?;
        let from_url = match parts.userinfo {
            Some(userinfo) => Some(credentials(userinfo, true).context("credentials in --url")?),
            None => None,
        };
        let from_flag = match sasl_plain {
            Some(pair) => Some(credentials(pair, false).context("--sasl-plain")?),
            None => None,
        };
        let auth = match (from_url, from_flag, cbs_key) {
            (Some(_), Some(_), _) => bail!("credentials given both in --url and --sasl-plain"),
            (Some(_), None, Some(_)) => {
                bail!("--cbs-key authenticates anonymously: drop the credentials from --url")
            }
            (Some((username, password)), None, None) | (None, Some((username, password)), _) => {
                Auth::Plain { username, password }
            }
            (None, None, Some(key)) => Auth::Cbs { key: key.to_owned() },
            (None, None, None) => Auth::Anonymous,
        };
        let without_credentials = format!("{}://{}{}", parts.scheme, parts.host_port, parts.rest);
        let shown = match parts.userinfo {
            Some(_) => format!("{}://***@{}{}", parts.scheme, parts.host_port, parts.rest),
            None => without_credentials.clone(),
        };
        Ok(Endpoint {
            url: without_credentials,
            shown,
            host: host_of(parts.host_port),
            host_port: parts.host_port.to_owned(),
            auth,
        })
    }

    /// The URL for reports, without a password.
    pub(crate) fn shown_url(&self) -> &str {
        &self.shown
    }

    /// `host:port` to connect to.
    pub(crate) fn host_port(&self) -> &str {
        &self.host_port
    }

    /// The host name, for the open frame and SASL.
    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    /// The SASL login, for clients that do no `$cbs`.
    pub(crate) fn login(&self) -> Result<Login<'_>> {
        match &self.auth {
            Auth::Anonymous => Ok(Login::Anonymous),
            Auth::Plain { username, password } => Ok(Login::Plain { username, password }),
            Auth::Cbs { .. } => bail!("$cbs (--cbs-key) needs --client fe2o3"),
        }
    }

    /// Opens a connection (container id `container_id`) and a session on it; in CBS mode also
    /// puts a token for `address` before returning.
    pub(crate) async fn connect(&self, container_id: &str, address: &str) -> Result<Link> {
        let profile = match &self.auth {
            Auth::Anonymous | Auth::Cbs { .. } => SaslProfile::Anonymous,
            Auth::Plain { username, password } => {
                SaslProfile::Plain { username: username.clone(), password: password.clone() }
            }
        };
        // Our own socket, so Nagle's algorithm can be turned off: with it, the small flow and
        // disposition frames wait for delayed ACKs and every broker looks slow.
        let stream = tokio::net::TcpStream::connect(&self.host_port)
            .await
            .with_context(|| format!("connecting to {}", self.url))?;
        stream.set_nodelay(true).context("setting TCP_NODELAY")?;
        let mut connection = Connection::builder()
            .container_id(container_id)
            .hostname(self.host.as_str())
            .sasl_profile(profile)
            .open_with_stream(stream)
            .await
            .with_context(|| format!("opening a connection to {}", self.shown))?;
        let mut session = Session::begin(&mut connection).await.context("beginning a session")?;
        if let Auth::Cbs { key } = &self.auth {
            let audience = cbs::audience(&self.host, address);
            cbs::put_token(&mut session, &audience, key, container_id)
                .await
                .with_context(|| format!("$cbs put-token for {audience}"))?;
        }
        Ok(Link { connection, session })
    }
}

impl Link {
    /// Ends the session and closes the connection, reporting (not failing on) errors.
    pub(crate) async fn close(mut self, who: &str) {
        if let Err(err) = self.session.end().await {
            eprintln!("ironbus-bench: {who}: ending the session: {err}");
        }
        if let Err(err) = self.connection.close().await {
            eprintln!("ironbus-bench: {who}: closing the connection: {err}");
        }
    }
}

/// A URL cut into the pieces this tool cares about.
#[derive(Debug, PartialEq, Eq)]
struct UrlParts<'a> {
    scheme: &'a str,
    userinfo: Option<&'a str>,
    host_port: &'a str,
    /// Path, query and fragment, with their leading `/`, `?` or `#`.
    rest: &'a str,
}

fn split_url(url: &str) -> Result<UrlParts<'_>> {
    let (scheme, after) =
        url.split_once("://").with_context(|| format!("--url `{url}` has no scheme"))?;
    if scheme != "amqp" {
        bail!("--url scheme `{scheme}` is not supported (plain `amqp` only)");
    }
    let authority_end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (authority, rest) = after.split_at(authority_end);
    let (userinfo, host_port) = match authority.rsplit_once('@') {
        Some((userinfo, host_port)) => (Some(userinfo), host_port),
        None => (None, authority),
    };
    if host_port.is_empty() {
        bail!("--url `{url}` has no host");
    }
    Ok(UrlParts { scheme, userinfo, host_port, rest })
}

/// The host of `host[:port]`, IPv6 brackets kept.
fn host_of(host_port: &str) -> String {
    if host_port.starts_with('[') {
        if let Some(end) = host_port.find(']') {
            return host_port[..=end].to_owned();
        }
    }
    match host_port.rsplit_once(':') {
        Some((host, _port)) => host.to_owned(),
        None => host_port.to_owned(),
    }
}

/// `user:pass`, percent-decoded when it comes from a URL.
fn credentials(pair: &str, percent_encoded: bool) -> Result<(String, String)> {
    let (user, pass) = pair.split_once(':').context("expected USER:PASS")?;
    if percent_encoded {
        Ok((percent_decode(user)?, percent_decode(pass)?))
    } else {
        Ok((user.to_owned(), pass.to_owned()))
    }
}

fn percent_decode(text: &str) -> Result<String> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let hex = text.get(at + 1..at + 3).context("truncated %-escape")?;
            decoded.push(u8::from_str_radix(hex, 16).context("bad %-escape")?);
            at += 3;
        } else {
            decoded.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(decoded).context("credentials are not UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_without_credentials_is_anonymous() {
        let endpoint = Endpoint::new("amqp://127.0.0.1:5673", None, None).unwrap();
        assert!(matches!(endpoint.auth, Auth::Anonymous));
        assert_eq!(endpoint.url, "amqp://127.0.0.1:5673");
        assert_eq!(endpoint.host, "127.0.0.1");
    }

    #[test]
    fn url_credentials_are_decoded_and_hidden() {
        let endpoint = Endpoint::new("amqp://Root:a%2Bb%3D@localhost:5672/", None, None).unwrap();
        match &endpoint.auth {
            Auth::Plain { username, password } => {
                assert_eq!((username.as_str(), password.as_str()), ("Root", "a+b="));
            }
            other => panic!("expected PLAIN, got {other:?}"),
        }
        assert_eq!(endpoint.url, "amqp://localhost:5672/");
        assert_eq!(endpoint.shown_url(), "amqp://***@localhost:5672/");
    }

    #[test]
    fn sasl_plain_flag_is_taken_verbatim() {
        let endpoint =
            Endpoint::new("amqp://localhost", Some("RootManageSharedAccessKey:k+/="), None)
                .unwrap();
        match &endpoint.auth {
            Auth::Plain { username, password } => {
                assert_eq!(
                    (username.as_str(), password.as_str()),
                    ("RootManageSharedAccessKey", "k+/=")
                );
            }
            other => panic!("expected PLAIN, got {other:?}"),
        }
    }

    #[test]
    fn credentials_twice_are_refused() {
        assert!(Endpoint::new("amqp://a:b@localhost", Some("c:d"), None).is_err());
        assert!(Endpoint::new("amqp://a:b@localhost", None, Some("key")).is_err());
    }

    #[test]
    fn cbs_key_keeps_the_host_for_the_audience() {
        let endpoint = Endpoint::new("amqp://[::1]:5672", None, Some("key")).unwrap();
        assert!(matches!(endpoint.auth, Auth::Cbs { .. }));
        assert_eq!(endpoint.host, "[::1]");
    }

    #[test]
    fn other_schemes_are_refused() {
        assert!(Endpoint::new("amqps://localhost", None, None).is_err());
        assert!(Endpoint::new("localhost:5672", None, None).is_err());
    }
}
