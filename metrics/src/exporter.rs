//! [`PrometheusExporter`]: `metrics-exporter-prometheus` as the process's recorder, set up
//! from the catalogue, and the exposition text for `/metrics`.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ironbus_transport_amqp::AmqpStats;
use ironbus_transport_http::MetricsRender;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

use crate::catalogue::{MetricKind, CATALOGUE};

/// How often histogram samples are folded into their buckets between scrapes (else they pile
/// up until the next render).
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Why the exporter could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The recorder could not be built or installed (another recorder is installed already).
    #[error("installing the Prometheus recorder: {0}")]
    Recorder(#[from] BuildError),
    /// The thread that folds histogram samples could not start.
    #[error("starting the metrics upkeep thread: {0}")]
    Upkeep(#[from] std::io::Error),
}

/// The Prometheus recorder of the process, and what renders its exposition text. Cheap to
/// clone; every clone renders the same metrics.
#[derive(Clone)]
pub struct PrometheusExporter {
    handle: PrometheusHandle,
    /// AMQP listeners whose counters are published at every render.
    amqp: Arc<Mutex<Vec<Arc<AmqpStats>>>>,
}

impl fmt::Debug for PrometheusExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrometheusExporter").finish_non_exhaustive()
    }
}

impl PrometheusExporter {
    /// A Prometheus builder with every catalogued histogram's buckets, for a binary that
    /// configures the exporter further or installs the recorder itself (then wrap its handle
    /// with [`PrometheusExporter::from_handle`] and call [`describe`](crate::describe)).
    pub fn builder() -> Result<PrometheusBuilder, BuildError> {
        CATALOGUE.iter().filter(|def| def.kind == MetricKind::Histogram).try_fold(
            PrometheusBuilder::new(),
            |builder, def| {
                builder.set_buckets_for_metric(Matcher::Full(def.name.to_owned()), def.buckets)
            },
        )
    }

    /// Installs the recorder as the process's global `metrics` recorder, with every
    /// catalogued histogram's buckets and every help text, and starts a thread that folds
    /// histogram samples every few seconds. Call it once, before the broker opens: what is
    /// recorded before a recorder is installed is lost.
    pub fn install() -> Result<Self, InstallError> {
        Self::install_labelled(&[])
    }

    /// [`install`](Self::install), every series also labelled with `labels` (a cluster node's
    /// `node`, so that one Prometheus can scrape every node).
    pub fn install_labelled(labels: &[(&str, &str)]) -> Result<Self, InstallError> {
        let builder = labels
            .iter()
            .fold(Self::builder()?, |b, (key, value)| b.add_global_label(*key, *value));
        let handle = builder.install_recorder()?;
        crate::describe();
        let upkeep = handle.clone();
        std::thread::Builder::new().name("ironbus-metrics-upkeep".into()).spawn(move || loop {
            std::thread::sleep(UPKEEP_INTERVAL);
            upkeep.run_upkeep();
        })?;
        Ok(Self::from_handle(handle))
    }

    /// Renders through the handle of a recorder built and installed by the caller.
    pub fn from_handle(handle: PrometheusHandle) -> Self {
        Self { handle, amqp: Arc::default() }
    }

    /// Publishes an AMQP listener's counters ([`crate::amqp`]) at every render, summed with
    /// those of the other listeners watched.
    pub fn watch_amqp(&self, stats: Arc<AmqpStats>) {
        self.amqp.lock().unwrap_or_else(PoisonError::into_inner).push(stats);
    }

    /// The Prometheus exposition text of every metric recorded so far.
    pub fn render(&self) -> String {
        {
            let amqp = self.amqp.lock().unwrap_or_else(PoisonError::into_inner);
            if !amqp.is_empty() {
                crate::amqp::record(amqp.iter().map(|stats| &**stats));
            }
        }
        self.handle.render()
    }

    /// [`PrometheusExporter::render`] as the HTTP transport takes it
    /// (`HttpConfig::metrics`).
    pub fn render_fn(&self) -> MetricsRender {
        let exporter = self.clone();
        Arc::new(move || exporter.render())
    }
}
