//! ironbus-metrics: the one catalogue of every metric ironbus records, and the Prometheus
//! exporter that serves them on `/metrics`, so that a binary of your own gets ironbus's
//! metrics in a few lines:
//!
//! ```no_run
//! # async fn example(
//! #     amqp: ironbus_transport_amqp::AmqpTransport,
//! #     http: &mut ironbus_transport_http::HttpConfig,
//! # ) -> Result<(), ironbus_metrics::InstallError> {
//! // Before the broker opens, so that nothing it records is lost.
//! let metrics = ironbus_metrics::PrometheusExporter::install()?;
//! metrics.watch_amqp(amqp.stats());
//! http.metrics = Some(metrics.render_fn());
//! # Ok(())
//! # }
//! ```
//!
//! - [`catalogue`]: [`CATALOGUE`], each metric's kind, help text, unit, labels and (histograms)
//!   buckets; [`describe`] registers the help texts with the installed recorder. Its tests hold
//!   the naming rules and check that every name the core and the transports record with is
//!   catalogued.
//! - [`amqp`]: the AMQP listener's metrics, which its transport keeps in plain atomics
//!   ([`AmqpStats`](ironbus_transport_amqp::AmqpStats)) and the exporter publishes when it
//!   renders.
//! - [`PrometheusExporter`]: installs `metrics-exporter-prometheus` as the process's recorder,
//!   every catalogued histogram with its buckets, and renders the exposition text.
//!
//! **Architecture Invariant:** this is the only crate of the workspace that knows an exporter.
//! The core and the transports record through the `metrics` facade only, under name constants
//! of their own (`ironbus_core::metrics`, `ironbus_transport_http::metrics`), which this crate
//! catalogues; a test here fails on a name that is not catalogued.

pub mod amqp;
pub mod catalogue;
mod exporter;

pub use crate::catalogue::{describe, MetricDef, MetricKind, CATALOGUE};
pub use crate::exporter::{InstallError, PrometheusExporter};
