//! ironbus-cluster: which node of a cluster serves which partition (`CLUSTER.md` §2).
//!
//! Nodes share the namespace store (store 0). Each node keeps a **member row** there, renewed
//! every renew interval with a new heartbeat; each partition has an **owner row** naming the
//! node that claimed it last and the **token** of that claim. Every round a node decides,
//! purely from what it read (the table of the private `decide` module), what to
//! hand over, release, claim and forget, then does it and tells its [`Host`] — the broker —
//! to [acquire](Host::acquire) or [release](Host::release) partitions and where each one is
//! [routed](Host::route).
//!
//! - **Membership and liveness.** A node is *alive* while its heartbeat has changed within its
//!   lease, measured on the **observer's own clock** since it first saw the current value; a
//!   new observer counts every row alive until it has watched it for a lease. `CLUSTER.md`
//!   asked for leases on the database's clock (`now()`): but the `Store` trait has no clock,
//!   and comparing a deadline written by one machine with another machine's clock makes
//!   safety depend on their skew. By observation only durations on one clock are compared.
//!   Member rows of nodes silent for ten leases are deleted.
//! - **Desired owner:** rendezvous hashing ([`desired_owner`]) over the live nodes that are not
//!   leaving, once that set has stayed the same for `settle` (one renew interval): a join or a
//!   departure moves about 1/n of the partitions.
//! - **Claim:** the owner row and the claim counter's next value in one batch, guarded by both
//!   as read; the host then moves the partition's fence to the token (the core's
//!   `ironbus_core::fence`) and rebuilds. A `Conflict` means another node acted first.
//! - **Hand-over:** an owner whose partition's desired owner is another live node has its host
//!   release it, then marks the row released; the desired owner claims it in its next round,
//!   without waiting for any lease. [`Ownership::leave`] hands over everything.
//! - **Self-demotion:** a node whose renewals have failed for `demote_after` (3/5 of the lease)
//!   has its host release everything, writing nothing, and claims again once renewals succeed.
//!
//! **Architecture Invariant:** safety rests on the fence, never on a timer: tokens come from
//! one counter that only grows, one per claim, so a partition's tokens only grow and no two
//! claims share one; the fence refuses every write of an owner but the latest.
//!
//! **Architecture Invariant:** a node claims a partition only as its desired owner, while it
//! renews, and only when the owner row is absent, released, its own, or held by a node it has
//! watched without a heartbeat for a whole lease on its own clock. It marks a row released
//! only after its host stopped serving the partition.
//!
//! **Architecture Invariant:** no two machines' clocks are compared; every duration is read
//! on one node's [`Clock`](ironbus_core::Clock), so tests drive a `ManualClock` and never sleep.
//!
//! **Architecture Invariant:** the cluster's keys start with the tag `c`, which no key of the
//! core starts with (`keys.rs`, checked by a test); it depends on `ironbus-core` only and
//! names no concrete store.
//!
//! # Map
//!
//! - [`Ownership`] runs a [`Member`] round after round; [`Member::round`] is one round, for
//!   tests and simulations.
//! - [`Host`] is what the broker implements; [`PartitionRef`] and [`Route`] are what it is told.
//! - [`Config`] and [`NodeId`]: who the node is and its timings.
//! - Private: `keys` and `rows` (the records), `liveness` (observation), `settle` (the
//!   debounce), `decide` (the rules of a round), `rendezvous` (desired owners).

mod config;
mod decide;
mod host;
mod keys;
mod liveness;
mod member;
mod ownership;
mod rendezvous;
mod rows;
mod settle;
#[cfg(test)]
mod tests;

pub use config::{Config, ConfigError, NodeId};
pub use host::{Host, HostError, PartitionRef, Route};
pub use member::Member;
pub use ownership::{LeaveError, Ownership, Poke};
pub use rendezvous::{desired_owner, weight};
