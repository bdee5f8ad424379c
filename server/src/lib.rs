//! ironbus: the default server as a library, so that a binary of your own (another store, fewer
//! transports, your own flags) is assembled from the same pieces as the `ironbus` binary.
//!
//! - [`start`] assembles the default server from its [`Args`]: the stores, the broker, the
//!   entities of a config file, the AMQP (and AMQPS) listener, the HTTP and HTTPS listeners
//!   with `/metrics`; [`Server::serve_until`] serves it until [`shutdown_requested`]. The
//!   `ironbus` binary is those three calls.
//! - [`Server`]: a broker and the transports serving it, for binaries that bind their own.
//! - [`config`]: Microsoft's emulator `config.json` (entities, policies, the namespace's name).
//! - [`policies`]: the root policy (`--sas-key`, or the development key on loopback only) and
//!   the namespace's other policies.
//! - [`stores`]: RocksDB, PostgreSQL or memory stores from [`stores::StoreArgs`].
//! - [`tls`]: the one certificate of every TLS listener (the operator's, or a generated
//!   development CA and `localhost` certificate).
//! - [`http`]: the HTTP listeners' flags and binding, and AMQP over WebSockets handed to the
//!   AMQP transport.
//! - [`output`]: the log (text, coloured only on a terminal, or JSON) and the start-up banner.
//! - [`cluster`]: `--cluster`: the node's part in partition ownership and the internal link.
//! - `faults` (feature `fault-injection`, testing only): `--testing-fault-injection`, which the
//!   compat suites use to make one partition unavailable.
//!
//! `examples/custom.rs` shows a binary of its own: RocksDB, AMQP and `/metrics` in a few lines;
//! `examples/embedded.rs` the engine alone, in-process.
//!
//! Errors: [`ServerError`] says what failed to start or serve — a flag, a file, the config, a
//! store, TLS, a listener, the broker, the signal handlers — with the path or address, and the
//! error underneath as its `source`; [`config::ConfigError`] says what in a config file is wrong
//! and where (`queue orders: LockDuration must be a string`). Their messages are for an
//! operator: print the whole source chain, as the `ironbus` binary does.

pub mod args;
pub mod cluster;
pub mod config;
mod error;
#[cfg(feature = "fault-injection")]
pub mod faults;
pub mod http;
pub mod output;
pub mod policies;
mod server;
mod start;
pub mod stores;
pub mod tls;

pub use crate::args::Args;
pub use crate::error::ServerError;
pub use crate::server::{shutdown_requested, Server};
pub use crate::start::{start, Started};
