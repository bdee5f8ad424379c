//! The catalogue: every metric ironbus records, with its kind, help text, unit, labels and, for
//! histograms, explicit buckets. Names are API (vector's instrumentation spec treats them so):
//!
//! - `ironbus_<subsystem>_<what>_<unit>[_total]`, lowercase snake case, the subsystem one of
//!   [`SUBSYSTEMS`];
//! - base units only (`_seconds`, `_bytes`), and a name that carries a unit has that
//!   [`Unit`]; `_total` on counters and only on counters;
//! - histograms measure seconds or bytes, with explicit, ascending buckets;
//! - labels only from bounded sets ([`BOUNDED_LABELS`]), and `entity` (a subscription's path)
//!   only on the `ironbus_broker_subscription_*` counters, which the core records only when
//!   `BrokerOptions::metrics_entity_labels` is on.
//!
//! The tests below check these rules over the whole catalogue, and that every name constant of
//! the core and the transports is catalogued (and nothing else).

use ironbus_core::metrics as core;
use ironbus_transport_http::metrics as http;
use metrics::Unit;

use crate::amqp;

/// The first word after `ironbus_`: where a metric comes from.
pub const SUBSYSTEMS: &[&str] = &["broker", "forward", "store", "http", "amqp"];

/// Labels whose values come from small fixed sets.
pub const BOUNDED_LABELS: &[&str] = &["entity_kind", "outcome", "reason", "operation", "transport"];

/// What kind of metric a catalogue entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

/// One catalogue entry.
#[derive(Debug, Clone, Copy)]
pub struct MetricDef {
    pub name: &'static str,
    pub kind: MetricKind,
    pub help: &'static str,
    /// What one unit of its value is ([`Unit::Count`] for counts of things).
    pub unit: Unit,
    pub labels: &'static [&'static str],
    /// A histogram's bucket bounds, ascending; empty for counters and gauges.
    pub buckets: &'static [f64],
}

impl MetricDef {
    const fn new(name: &'static str, kind: MetricKind, unit: Unit, help: &'static str) -> Self {
        MetricDef { name, kind, help, unit, labels: &[], buckets: &[] }
    }

    const fn labels(self, labels: &'static [&'static str]) -> Self {
        MetricDef { labels, ..self }
    }

    const fn unit(self, unit: Unit) -> Self {
        MetricDef { unit, ..self }
    }

    const fn buckets(self, buckets: &'static [f64]) -> Self {
        MetricDef { buckets, ..self }
    }
}

const fn counter(name: &'static str, help: &'static str) -> MetricDef {
    MetricDef::new(name, MetricKind::Counter, Unit::Count, help)
}

const fn gauge(name: &'static str, help: &'static str) -> MetricDef {
    MetricDef::new(name, MetricKind::Gauge, Unit::Count, help)
}

const fn histogram(name: &'static str, unit: Unit, help: &'static str) -> MetricDef {
    MetricDef::new(name, MetricKind::Histogram, unit, help)
}

/// A store write: a tenth of a millisecond (memory, relaxed) to a second (a stalled disk).
const STORE_WRITE_BUCKETS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0];

/// An HTTP request: sub-millisecond management up to a full long poll.
const REQUEST_DURATION_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Every metric ironbus records.
pub const CATALOGUE: &[MetricDef] = &[
    // The broker (ironbus-core).
    counter(core::MESSAGES_INCOMING_TOTAL, "Messages accepted by the broker, duplicates excluded")
        .labels(&["entity_kind"]),
    counter(core::MESSAGES_OUTGOING_TOTAL, "Messages handed to receivers").labels(&["entity_kind"]),
    counter(core::SETTLEMENTS_TOTAL, "Settlements of locked messages by outcome")
        .labels(&["outcome"]),
    counter(core::DEAD_LETTERED_TOTAL, "Messages moved to a dead-letter queue by reason")
        .labels(&["reason"]),
    counter(core::MESSAGES_EXPIRED_TOTAL, "Expired messages dropped"),
    counter(core::DUPLICATES_DROPPED_TOTAL, "Sends dropped by duplicate detection"),
    counter(core::LOCK_EXPIRATIONS_TOTAL, "Message locks that expired before settlement"),
    counter(
        core::ENTITIES_AUTO_DELETED_TOTAL,
        "Entities deleted for being idle for their AutoDeleteOnIdle, by kind",
    )
    .labels(&["entity_kind"]),
    counter(
        core::MESSAGES_UNMATCHED_TOTAL,
        "Messages published to a topic that no subscription took",
    ),
    counter(
        core::MESSAGES_FILTERED_OUT_TOTAL,
        "Copies of published messages that a subscription did not take",
    ),
    counter(
        core::SUBSCRIPTION_MESSAGES_INCOMING_TOTAL,
        "Copies a subscription took from its topic",
    )
    .labels(&["entity"]),
    counter(
        core::SUBSCRIPTION_MESSAGES_OUTGOING_TOTAL,
        "Messages a subscription handed to receivers",
    )
    .labels(&["entity"]),
    counter(
        core::SUBSCRIPTION_MESSAGES_FILTERED_OUT_TOTAL,
        "Messages published to its topic that a subscription did not take",
    )
    .labels(&["entity"]),
    counter(
        core::SUBSCRIPTION_DEAD_LETTERED_TOTAL,
        "Messages a subscription moved to its dead-letter queue by reason",
    )
    .labels(&["entity", "reason"]),
    counter(core::SESSIONS_ACCEPTED_TOTAL, "Sessions locked by a receiver"),
    gauge(core::SESSIONS_LOCKED, "Sessions held by a receiver now"),
    counter(
        core::SESSION_LOCK_LOSSES_TOTAL,
        "Session locks lost (expired, or dropped by a partition rebuild)",
    ),
    counter(core::TRANSACTIONS_TOTAL, "Transactions ended, by outcome").labels(&["outcome"]),
    gauge(core::PARTITIONS_UNAVAILABLE, "Partitions whose store cannot serve them"),
    // Auto-forwarding (ironbus-core).
    counter(core::FORWARD_MESSAGES_TOTAL, "Messages auto-forwarding moved into their destination"),
    counter(core::FORWARD_FAILURES_TOTAL, "Transfers that could not be made, by reason")
        .labels(&["reason"]),
    counter(
        core::FORWARD_REDELIVERIES_TOTAL,
        "Transfers sent again that their destination had stored already",
    ),
    gauge(core::FORWARD_TRANSFER_QUEUE_MESSAGES, "Messages waiting in transfer queues"),
    // The partitions' stores (ironbus-core).
    counter(
        core::BODIES_READ_TOTAL,
        "Message bodies read back from the store because they were not cached",
    ),
    counter(
        core::STORE_WRITTEN_BYTES_TOTAL,
        "Bytes of keys and values partitions wrote to their stores",
    )
    .unit(Unit::Bytes),
    histogram(
        core::STORE_WRITE_DURATION_SECONDS,
        Unit::Seconds,
        "Duration of one partition's store write",
    )
    .buckets(STORE_WRITE_BUCKETS),
    // The HTTP transport.
    counter(http::REQUESTS_TOTAL, "HTTP requests answered, by operation and status class")
        .labels(&["operation", "outcome"]),
    histogram(
        http::REQUEST_DURATION_SECONDS,
        Unit::Seconds,
        "Time to answer an HTTP request, long polls included",
    )
    .labels(&["operation"])
    .buckets(REQUEST_DURATION_BUCKETS),
    counter(
        http::CONNECTIONS_REFUSED_TOTAL,
        "HTTP connections refused by --max-connections or --max-connections-per-ip",
    ),
    // The AMQP transport (published from its AmqpStats).
    gauge(amqp::CONNECTIONS_OPEN, "AMQP connections served now, WebSocket ones included"),
    counter(
        amqp::CONNECTIONS_REFUSED_TOTAL,
        "AMQP connections refused by --max-connections or --max-connections-per-ip",
    ),
    gauge(amqp::WRITE_BUFFERED_BYTES, "Bytes AMQP connections have waiting to be written")
        .unit(Unit::Bytes),
    counter(
        amqp::SLOW_READER_CLOSES_TOTAL,
        "AMQP connections closed because the client did not read",
    ),
];

/// The catalogue entry of `name`.
pub fn find(name: &str) -> Option<&'static MetricDef> {
    CATALOGUE.iter().find(|def| def.name == name)
}

/// Registers every catalogued metric's help text and unit with the installed recorder
/// ([`PrometheusExporter::install`](crate::PrometheusExporter::install) does).
pub fn describe() {
    for def in CATALOGUE {
        match def.kind {
            MetricKind::Counter => metrics::describe_counter!(def.name, def.unit, def.help),
            MetricKind::Gauge => metrics::describe_gauge!(def.name, def.unit, def.help),
            MetricKind::Histogram => metrics::describe_histogram!(def.name, def.unit, def.help),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The rules a catalogue entry breaks (none: empty).
    fn violations(def: &MetricDef) -> Vec<String> {
        let n = def.name;
        let mut found = Vec::new();
        let mut fail = |rule: &str| found.push(format!("{n}: {rule}"));
        let Some(rest) = n.strip_prefix("ironbus_") else {
            return vec![format!("{n}: the ironbus_ prefix")];
        };
        if !n.chars().all(|c| c.is_ascii_lowercase() || c == '_') || n.contains("__") {
            fail("lowercase snake case");
        }
        if !SUBSYSTEMS.iter().any(|s| rest.split('_').next() == Some(*s)) {
            fail("ironbus_<subsystem>_ with a known subsystem");
        }
        if n.split('_').count() < 4 {
            fail("ironbus_<subsystem>_<what>_<unit>");
        }
        if n.ends_with("_total") != (def.kind == MetricKind::Counter) {
            fail("_total on counters, and only on them");
        }
        let base = n.strip_suffix("_total").unwrap_or(n);
        for word in ["ms", "milliseconds", "us", "microseconds", "minutes", "hours", "kb", "mb"] {
            if base.split('_').any(|w| w == word) {
                fail("base units only (seconds, bytes)");
            }
        }
        let named = [("_seconds", Unit::Seconds), ("_bytes", Unit::Bytes)];
        for (suffix, unit) in named {
            if base.ends_with(suffix) != (def.unit == unit) {
                fail("a name ends with its unit (_seconds, _bytes), and only then has that unit");
            }
        }
        if !matches!(def.unit, Unit::Count | Unit::Seconds | Unit::Bytes) {
            fail("unit count, seconds or bytes");
        }
        if def.kind == MetricKind::Histogram {
            if def.unit == Unit::Count {
                fail("histograms measure seconds or bytes");
            }
            let ascending = def.buckets.windows(2).all(|w| w[0] < w[1]);
            if def.buckets.is_empty() || !ascending || def.buckets[0] <= 0.0 {
                fail("a histogram has explicit, positive, ascending buckets");
            }
        } else if !def.buckets.is_empty() {
            fail("only histograms have buckets");
        }
        for label in def.labels {
            let per_entity = *label == "entity" && n.starts_with("ironbus_broker_subscription_");
            if !BOUNDED_LABELS.contains(label) && !per_entity {
                fail(&format!("label {label} is not from a bounded set"));
            }
        }
        if def.help.is_empty() || def.help.ends_with('.') {
            fail("a help text, without a trailing period");
        }
        found
    }

    #[test]
    fn catalogued_metrics_follow_the_naming_rules() {
        let found: Vec<String> = CATALOGUE.iter().flat_map(violations).collect();
        assert!(found.is_empty(), "naming rules broken:\n  {}", found.join("\n  "));
    }

    #[test]
    fn names_that_break_the_rules_are_reported() {
        let ok = counter("ironbus_amqp_connections_refused_total", "Refused");
        assert!(violations(&ok).is_empty(), "{:?}", violations(&ok));
        let broken = [
            gauge("ironbus_amqp_connections", "Too short"),
            gauge("ironbus_amqp_connections_open_total", "A gauge with _total"),
            counter("ironbus_amqp_slow_reader_closes", "A counter without _total"),
            counter("ironbus_queue_messages_sent_total", "An unknown subsystem"),
            counter("ironbus_Broker_messages_total", "Not snake case"),
            histogram("ironbus_store_write_duration_ms", Unit::Milliseconds, "Not a base unit"),
            histogram("ironbus_store_write_duration_seconds", Unit::Seconds, "No buckets"),
            gauge("ironbus_amqp_write_buffered_bytes", "Bytes in the name, counted as a count"),
            gauge("ironbus_broker_queue_messages", "An unbounded label").labels(&["entity"]),
            counter("ironbus_broker_messages_total", "Buckets on a counter").buckets(&[1.0]),
        ];
        for def in broken {
            assert!(!violations(&def).is_empty(), "{} passes the rules", def.name);
        }
    }

    #[test]
    fn catalogue_names_are_unique() {
        let names: BTreeSet<_> = CATALOGUE.iter().map(|d| d.name).collect();
        assert_eq!(names.len(), CATALOGUE.len());
    }

    /// Every `"ironbus_…"` string literal in `source`.
    fn metric_names(source: &str) -> BTreeSet<&str> {
        source
            .split('"')
            .skip(1)
            .step_by(2)
            .filter(|s| {
                s.starts_with("ironbus_") && s.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            })
            .collect()
    }

    /// The files whose constants name the metrics recorded through the facade.
    const NAME_SOURCES: &[(&str, &str)] = &[
        ("core/src/metrics.rs", include_str!("../../core/src/metrics.rs")),
        ("transport-http/src/metrics.rs", include_str!("../../transport-http/src/metrics.rs")),
        ("metrics/src/amqp.rs", include_str!("amqp.rs")),
    ];

    #[test]
    fn every_name_the_core_and_the_transports_record_with_is_catalogued() {
        let mut named = BTreeSet::new();
        for (file, source) in NAME_SOURCES {
            let names = metric_names(source);
            assert!(!names.is_empty(), "{file} names no metric: is the list stale?");
            for name in &names {
                assert!(find(name).is_some(), "{file}: {name} is not in the catalogue");
            }
            named.extend(names);
        }
        for def in CATALOGUE {
            assert!(named.contains(def.name), "{} is catalogued but no crate names it", def.name);
        }
    }
}
