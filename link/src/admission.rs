//! Admission: the server's check of a call's credentials, before it reads the body.
//!
//! Pure apart from one mutex: [`Admission::admit`] takes the server's clock as an argument, so
//! the rules are tested without a runtime or a network.
//!
//! **Invariant:** a nonce is remembered only once its signature checked, so a peer without the
//! secret cannot fill the memory of nonces; what is remembered is bounded by
//! [`MAX_REMEMBERED_NONCES`] (beyond it calls are refused as busy, not admitted unchecked).

use std::collections::BTreeSet;
use std::sync::Mutex;

use hyper::HeaderMap;

use crate::wire::{Credentials, CLOCK_WINDOW};
use crate::Secret;

/// The most nonces a server remembers: a window's worth of calls at about 8,000 calls a
/// second; each costs some 40 bytes.
pub(crate) const MAX_REMEMBERED_NONCES: usize = 1 << 20;

/// Why a call was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Bad credentials (401); the reason goes back to the caller.
    Credentials(&'static str),
    /// Too many nonces to remember (503).
    Busy,
}

/// The server's admission state: the secret and the nonces seen within the clock window.
#[derive(Debug)]
pub(crate) struct Admission {
    secret: Secret,
    seen: Mutex<SeenNonces>,
}

impl Admission {
    pub(crate) fn new(secret: Secret) -> Self {
        Self::with_capacity(secret, MAX_REMEMBERED_NONCES)
    }

    fn with_capacity(secret: Secret, capacity: usize) -> Self {
        Self { secret, seen: Mutex::new(SeenNonces { nonces: BTreeSet::new(), capacity }) }
    }

    pub(crate) fn secret(&self) -> &Secret {
        &self.secret
    }

    /// Checks a call to `method` with `headers` at the server's clock `now_ms`: the credentials
    /// present and well-formed, the timestamp within the window, the signature right, the
    /// nonce new. On success the nonce is remembered and the credentials returned; the caller
    /// still has to check the body against [`Credentials::body_sha256`].
    pub(crate) fn admit(
        &self,
        method: &str,
        headers: &HeaderMap,
        now_ms: u64,
    ) -> Result<Credentials, Refusal> {
        let (credentials, signature) = Credentials::read(headers).map_err(Refusal::Credentials)?;
        let window = u64::try_from(CLOCK_WINDOW.as_millis()).unwrap_or(u64::MAX);
        if credentials.timestamp_ms.abs_diff(now_ms) > window {
            return Err(Refusal::Credentials("timestamp outside the clock window"));
        }
        if !credentials.verify(&self.secret, method, &signature) {
            return Err(Refusal::Credentials("bad signature"));
        }
        let mut seen = self.seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        seen.forget_before(now_ms.saturating_sub(window));
        seen.remember(credentials.timestamp_ms, credentials.nonce)?;
        Ok(credentials)
    }
}

/// The nonces of admitted calls, keyed by their timestamp so that those out of the window go
/// in one split.
#[derive(Debug)]
struct SeenNonces {
    nonces: BTreeSet<(u64, [u8; 16])>,
    capacity: usize,
}

impl SeenNonces {
    /// Forgets the nonces of calls stamped before `oldest_ms`: their timestamps are refused now.
    fn forget_before(&mut self, oldest_ms: u64) {
        self.nonces = self.nonces.split_off(&(oldest_ms, [0; 16]));
    }

    fn remember(&mut self, timestamp_ms: u64, nonce: [u8; 16]) -> Result<(), Refusal> {
        if self.nonces.contains(&(timestamp_ms, nonce)) {
            return Err(Refusal::Credentials("replayed call"));
        }
        if self.nonces.len() >= self.capacity {
            return Err(Refusal::Busy);
        }
        self.nonces.insert((timestamp_ms, nonce));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PeerId;

    const SECRET: &[u8] = b"the cluster secret, 32 bytes long";

    fn admission() -> Admission {
        Admission::new(Secret::new(SECRET.to_vec()).unwrap())
    }

    fn signed(secret: &[u8], method: &str, timestamp_ms: u64, nonce: u8) -> HeaderMap {
        let mut credentials = Credentials::new(PeerId::new("node-a").unwrap(), b"body");
        credentials.timestamp_ms = timestamp_ms;
        credentials.nonce = [nonce; 16];
        let mut headers = HeaderMap::new();
        credentials.write(&Secret::new(secret.to_vec()).unwrap(), method, &mut headers);
        headers
    }

    const NOW: u64 = 1_700_000_000_000;

    #[test]
    fn a_signed_fresh_call_is_admitted_once() {
        let admission = admission();
        let headers = signed(SECRET, "send", NOW, 1);
        let credentials = admission.admit("send", &headers, NOW).unwrap();
        assert_eq!(credentials.node.as_str(), "node-a");
        assert_eq!(
            admission.admit("send", &headers, NOW + 1_000),
            Err(Refusal::Credentials("replayed call"))
        );
    }

    #[test]
    fn the_clock_window_is_sixty_seconds_either_way() {
        let admission = admission();
        for (offset, admitted) in
            [(-60_000, true), (60_000, true), (-60_001, false), (60_001, false)]
        {
            let stamp = NOW.checked_add_signed(offset).unwrap();
            let result = admission.admit("send", &signed(SECRET, "send", stamp, 2), NOW);
            assert_eq!(result.is_ok(), admitted, "offset {offset}");
        }
    }

    #[test]
    fn a_wrong_key_or_method_is_refused_and_not_remembered() {
        let admission = admission();
        let other = b"another secret, also long enough";
        assert_eq!(
            admission.admit("send", &signed(other, "send", NOW, 3), NOW),
            Err(Refusal::Credentials("bad signature"))
        );
        assert_eq!(
            admission.admit("settle", &signed(SECRET, "send", NOW, 3), NOW),
            Err(Refusal::Credentials("bad signature"))
        );
        assert!(admission.seen.lock().unwrap().nonces.is_empty());
        assert!(admission.admit("send", &signed(SECRET, "send", NOW, 3), NOW).is_ok());
    }

    #[test]
    fn nonces_are_forgotten_once_their_timestamp_is_refused_anyway() {
        let admission = admission();
        admission.admit("send", &signed(SECRET, "send", NOW, 4), NOW).unwrap();
        // Within the window the nonce is remembered ...
        let later = NOW + 60_000;
        assert!(admission.admit("send", &signed(SECRET, "send", NOW, 4), later).is_err());
        // ... and once its timestamp falls out, the clock check refuses it instead.
        let after = NOW + 60_001;
        admission.admit("send", &signed(SECRET, "send", after, 5), after).unwrap();
        assert_eq!(admission.seen.lock().unwrap().nonces.len(), 1);
        assert_eq!(
            admission.admit("send", &signed(SECRET, "send", NOW, 4), after),
            Err(Refusal::Credentials("timestamp outside the clock window"))
        );
    }

    #[test]
    fn a_full_memory_refuses_as_busy() {
        let admission = Admission::with_capacity(Secret::new(SECRET.to_vec()).unwrap(), 2);
        admission.admit("send", &signed(SECRET, "send", NOW, 6), NOW).unwrap();
        admission.admit("send", &signed(SECRET, "send", NOW, 7), NOW).unwrap();
        assert_eq!(
            admission.admit("send", &signed(SECRET, "send", NOW, 8), NOW),
            Err(Refusal::Busy)
        );
        // Room again once the window has moved on.
        let after = NOW + 60_001;
        assert!(admission.admit("send", &signed(SECRET, "send", after, 8), after).is_ok());
    }
}
