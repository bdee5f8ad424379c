//! The AMQP listener's metrics. The transport keeps them in [`AmqpStats`], plain atomics that
//! cost its hot path nothing more; [`record`] publishes them through the `metrics` facade, which the
//! [`PrometheusExporter`](crate::PrometheusExporter) does before every render.

use ironbus_transport_amqp::AmqpStats;
use std::sync::atomic::Ordering::Relaxed;

/// AMQP connections served now (WebSocket ones included).
pub const CONNECTIONS_OPEN: &str = "ironbus_amqp_connections_open";
/// AMQP connections refused by a connection limit.
pub const CONNECTIONS_REFUSED_TOTAL: &str = "ironbus_amqp_connections_refused_total";
/// Bytes AMQP connections have waiting to be written, over all connections.
pub const WRITE_BUFFERED_BYTES: &str = "ironbus_amqp_write_buffered_bytes";
/// AMQP connections closed because the client did not read what it was sent.
pub const SLOW_READER_CLOSES_TOTAL: &str = "ironbus_amqp_slow_reader_closes_total";

/// Publishes what the listeners behind `stats` count, summed: gauges set to the sums, counters
/// raised to them.
pub fn record<'a>(stats: impl IntoIterator<Item = &'a AmqpStats>) {
    let (mut open, mut refused, mut buffered, mut slow) = (0u64, 0u64, 0u64, 0u64);
    for s in stats {
        open += s.connections.load(Relaxed) as u64;
        refused += s.refused.load(Relaxed);
        buffered += s.write_buffered.load(Relaxed) as u64;
        slow += s.slow_reader_closes.load(Relaxed);
    }
    metrics::gauge!(CONNECTIONS_OPEN).set(open as f64);
    metrics::counter!(CONNECTIONS_REFUSED_TOTAL).absolute(refused);
    metrics::gauge!(WRITE_BUFFERED_BYTES).set(buffered as f64);
    metrics::counter!(SLOW_READER_CLOSES_TOTAL).absolute(slow);
}
