//! Clusters of [`Member`](crate::Member)s in one process, sharing one memory store, driven
//! round by round on one `ManualClock`: each node has its own fake host (which claims the
//! core's real fence) and its own fault-injecting view of the store.

mod harness;
mod scenarios;
mod simulation;
