//! The console's sign-in: sessions held in memory, their cookie, the CSRF token and the
//! same-origin check every write passes.
//!
//! **Invariants:** a session is created only from a namespace policy's name and key verified
//! by the HTTP transport's `Authorizer` (the key is never stored, logged or echoed); its id and
//! its CSRF token carry 154 random bits each (a v4 UUID and part of another), the id only in an
//! `HttpOnly; SameSite=Strict` cookie; a session expires after [`IDLE_TIMEOUT`] unused and
//! after [`MAX_LIFETIME`] in any case; CSRF tokens are compared in constant time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, HeaderValue};
use ironbus_core::auth::{Right, Rights};

use crate::service::Listener;

/// The cookie that carries a session's id.
pub(crate) const COOKIE: &str = "ironbus_console";
/// The request header that carries a session's CSRF token on every write.
pub(crate) const CSRF_HEADER: &str = "x-ironbus-csrf";
/// A session unused this long is signed out.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// A session lasts at most this long, used or not.
pub(crate) const MAX_LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);
/// At most this many sessions are held; signing in past it drops the oldest.
const MAX_SESSIONS: usize = 4096;

/// A signed-in user: the policy they signed in with and what it allows.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub(crate) policy: String,
    pub(crate) rights: Rights,
    pub(crate) csrf: String,
    /// The namespace the session was opened in (`None`: the default one).
    pub(crate) namespace: Option<String>,
    created: Instant,
    last_used: Instant,
}

impl Session {
    /// The rights as Service Bus names them, strongest first.
    pub(crate) fn right_names(&self) -> Vec<&'static str> {
        [(Right::Manage, "Manage"), (Right::Send, "Send"), (Right::Listen, "Listen")]
            .into_iter()
            .filter(|(right, _)| self.rights.allows(*right))
            .map(|(_, name)| name)
            .collect()
    }
}

/// The sessions of one HTTP transport (both listeners).
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
}

/// 154 random bits as 40 hex digits: a v4 UUID's 122 random bits and 32 of another's.
fn random_token() -> String {
    let a = uuid::Uuid::new_v4().simple().to_string();
    let b = uuid::Uuid::new_v4().simple().to_string();
    format!("{a}{}", &b[..8])
}

impl Sessions {
    /// Opens a session for `policy`; returns its id and the session.
    pub(crate) fn open(
        &self,
        policy: String,
        rights: Rights,
        namespace: Option<String>,
    ) -> (String, Session) {
        let now = Instant::now();
        let id = random_token();
        let session = Session {
            policy,
            rights,
            csrf: random_token(),
            namespace,
            created: now,
            last_used: now,
        };
        let mut by_id = self.lock();
        by_id.retain(|_, s| alive(s, now));
        if by_id.len() >= MAX_SESSIONS {
            if let Some(oldest) =
                by_id.iter().min_by_key(|(_, s)| s.last_used).map(|(k, _)| k.clone())
            {
                by_id.remove(&oldest);
            }
        }
        by_id.insert(id.clone(), session.clone());
        (id, session)
    }

    /// The live session whose id the request's cookie carries, marked used now.
    pub(crate) fn find(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers)?;
        let now = Instant::now();
        let mut by_id = self.lock();
        match by_id.get_mut(id) {
            Some(session) if alive(session, now) => {
                session.last_used = now;
                Some(session.clone())
            }
            Some(_) => {
                by_id.remove(id);
                None
            }
            None => None,
        }
    }

    /// Signs out the session the request's cookie carries, if any.
    pub(crate) fn close(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers) {
            self.lock().remove(id);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.by_id.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn alive(session: &Session, now: Instant) -> bool {
    now.duration_since(session.last_used) < IDLE_TIMEOUT
        && now.duration_since(session.created) < MAX_LIFETIME
}

/// The session id in the request's `Cookie` header(s).
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// The `Set-Cookie` value of a session (`id`), or of its removal (`None`).
pub(crate) fn set_cookie(id: Option<&str>, listener: Listener) -> HeaderValue {
    let secure = if listener == Listener::Tls { "; Secure" } else { "" };
    let value = match id {
        Some(id) => format!(
            "{COOKIE}={id}; Path=/$console; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
            MAX_LIFETIME.as_secs()
        ),
        None => format!("{COOKIE}=; Path=/$console; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
    };
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Whether `given` is `expected`, compared in constant time (for equal lengths; the length of
/// a token is no secret).
pub(crate) fn tokens_equal(expected: &str, given: &str) -> bool {
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

/// Why a write is refused as cross-site, or `None` when it comes from the console's own
/// origin: an `Origin` header naming this listener's scheme and the request's `Host`, or,
/// without `Origin`, `Sec-Fetch-Site: same-origin`. A request with neither is refused.
pub(crate) fn cross_site(headers: &HeaderMap, listener: Listener) -> Option<String> {
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(origin) = text(header::ORIGIN) {
        let scheme = match listener {
            Listener::Plain => "http",
            Listener::Tls => "https",
        };
        let host = text(header::HOST).unwrap_or("");
        let expected = format!("{scheme}://{host}");
        return if !host.is_empty() && origin.eq_ignore_ascii_case(&expected) {
            None
        } else {
            Some(format!("the request's Origin {origin:?} is not the console's ({expected:?})"))
        };
    }
    match headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        Some("same-origin") => None,
        Some(site) => Some(format!("the request is {site}, not same-origin")),
        None => Some("a write needs an Origin or Sec-Fetch-Site header".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn same_origin_writes_pass_and_others_are_named() {
        let ok = headers(&[("host", "localhost:5300"), ("origin", "http://localhost:5300")]);
        assert_eq!(cross_site(&ok, Listener::Plain), None);
        assert!(cross_site(&ok, Listener::Tls).is_some());
        let evil = headers(&[("host", "localhost:5300"), ("origin", "http://evil.example")]);
        assert!(cross_site(&evil, Listener::Plain).unwrap().contains("evil.example"));
        let fetch = headers(&[("sec-fetch-site", "same-origin")]);
        assert_eq!(cross_site(&fetch, Listener::Plain), None);
        let cross = headers(&[("sec-fetch-site", "cross-site")]);
        assert!(cross_site(&cross, Listener::Plain).is_some());
        assert!(cross_site(&HeaderMap::new(), Listener::Plain).is_some());
    }

    #[test]
    fn sessions_are_found_by_cookie_and_closed() {
        let sessions = Sessions::default();
        let (id, session) = sessions.open("p".into(), Rights::LISTEN, None);
        assert_eq!(id.len(), 40);
        assert_ne!(id, session.csrf);
        let mut request = HeaderMap::new();
        let value = format!("other=1; {COOKIE}={id}");
        request.insert(header::COOKIE, HeaderValue::from_str(&value).unwrap());
        assert_eq!(sessions.find(&request).unwrap().right_names(), ["Listen"]);
        sessions.close(&request);
        assert!(sessions.find(&request).is_none());
        assert!(
            tokens_equal("abc", "abc") && !tokens_equal("abc", "abd") && !tokens_equal("a", "ab")
        );
    }

    #[test]
    fn the_cookie_is_secure_on_the_tls_listener_only() {
        let plain = set_cookie(Some("x"), Listener::Plain);
        let tls = set_cookie(Some("x"), Listener::Tls);
        assert!(plain.to_str().unwrap().contains("HttpOnly; SameSite=Strict"));
        assert!(!plain.to_str().unwrap().contains("Secure"));
        assert!(tls.to_str().unwrap().ends_with("; Secure"));
    }
}
