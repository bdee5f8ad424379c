//! Where time comes from. Every rule with a deadline (TTL, locks, scheduling, duplicate-detection
//! windows) reads [`Clock::now`] and waits with [`Clock::sleep_until`], so tests drive time by
//! hand with [`ManualClock`] instead of sleeping.
//!
//! **Architecture Invariant:** no rule reads the system time or sleeps. Enforced:
//! `core/clippy.toml` disallows `Instant::now`, `SystemTime::now` and the sleeps of tokio and
//! std, so clippy with `-D warnings` (`cargo xtask ci`) fails on one; the system clock itself,
//! the store-write duration metric and test scratch names carry an `#[allow]` with the reason.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::types::Timestamp;

/// A future returned by [`Clock::sleep_until`].
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A source of wall-clock time (UTC, millisecond precision).
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;

    /// Completes once [`Clock::now`] is at or after `deadline`.
    fn sleep_until(&self, deadline: Timestamp) -> Sleep;
}

/// The real clock: the system's UTC time, waiting with tokio's timer.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

#[allow(clippy::disallowed_methods, reason = "the system clock is where wall time enters the core")]
impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Timestamp::from_millis(since_epoch.as_millis() as i64)
    }

    fn sleep_until(&self, deadline: Timestamp) -> Sleep {
        let wait = deadline.saturating_since(self.now());
        Box::pin(async move {
            if !wait.is_zero() {
                // Wake a millisecond late rather than early: the deadline is then surely past.
                tokio::time::sleep(wait + Duration::from_millis(1)).await;
            }
        })
    }
}

/// A clock that only moves when told to. Sleepers wake when [`ManualClock::advance`] or
/// [`ManualClock::set`] passes their deadline.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: watch::Sender<Timestamp>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self { now: watch::Sender::new(start) }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.now.send_modify(|now| *now = now.saturating_add(by));
    }

    /// Sets the clock to `to` (which may be in the past).
    pub fn set(&self, to: Timestamp) {
        self.now.send_replace(to);
    }
}

impl Default for ManualClock {
    /// A clock standing at 2026-01-01T00:00:00Z.
    fn default() -> Self {
        Self::new(Timestamp::from_millis(1_767_225_600_000))
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.borrow()
    }

    fn sleep_until(&self, deadline: Timestamp) -> Sleep {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            // The sender lives as long as the clock; if it is gone, time can no longer pass.
            if rx.wait_for(|now| *now >= deadline).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}
