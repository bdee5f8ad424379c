//! What core's test binaries share: a guard against a hung operation, and entity paths and
//! addresses from their text.

use std::future::Future;
use std::time::Duration;

use ironbus_core::address::{EntityAddress, EntityPath};

/// Long enough for any operation of these tests on a loaded machine; an operation that takes
/// longer has hung.
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(10);

/// Awaits `future`, failing the test if it hangs.
#[allow(dead_code, reason = "not every test binary uses it")]
pub(crate) async fn guard<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(HANG_GUARD, future).await.expect("operation hung")
}

/// The entity path `p` (a queue, topic, subscription or rule).
#[allow(dead_code, reason = "not every test binary uses it")]
pub(crate) fn path(p: &str) -> EntityPath {
    EntityPath::parse(p).expect(p)
}

/// The address of the entity `p` itself (its main queue).
#[allow(dead_code, reason = "not every test binary uses it")]
pub(crate) fn addr(p: &str) -> EntityAddress {
    EntityAddress::from(path(p))
}
