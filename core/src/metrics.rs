//! The metrics catalogue: every metric the core emits, with its help text. Names are API:
//! `ironbus_<subsystem>_<what>_<unit>[_total]`, base units, `_total` on counters only, labels
//! only from bounded sets. The server installs an exporter; the core only uses the `metrics`
//! facade. The one entity label, `entity` on the `ironbus_broker_subscription_*` counters, is
//! bounded by the quotas (2,000 subscriptions per topic).

/// Messages accepted by the broker (duplicates excluded). Label: `entity_kind` (queue; topic
/// for its scheduled messages; subscription for each copy a subscription takes).
pub const MESSAGES_INCOMING_TOTAL: &str = "ironbus_broker_messages_incoming_total";
/// Messages handed to receivers (locked or received-and-deleted). Label: `entity_kind`.
pub const MESSAGES_OUTGOING_TOTAL: &str = "ironbus_broker_messages_outgoing_total";
/// Settlements of locked messages. Label: `outcome` (complete, abandon, release, defer,
/// dead_letter).
pub const SETTLEMENTS_TOTAL: &str = "ironbus_broker_settlements_total";
/// Messages moved to a dead-letter queue. Label: `reason` (MaxDeliveryCountExceeded,
/// TTLExpiredException, client, filter: a subscription's rule failed to evaluate).
pub const DEAD_LETTERED_TOTAL: &str = "ironbus_broker_dead_lettered_total";
/// Expired messages dropped (entities without dead-lettering on expiration).
pub const MESSAGES_EXPIRED_TOTAL: &str = "ironbus_broker_messages_expired_total";
/// Sends dropped as duplicates by duplicate detection.
pub const DUPLICATES_DROPPED_TOTAL: &str = "ironbus_broker_duplicates_dropped_total";
/// Message locks that expired before settlement.
pub const LOCK_EXPIRATIONS_TOTAL: &str = "ironbus_broker_lock_expirations_total";
/// Messages published to a topic that no subscription took (accepted and discarded).
pub const MESSAGES_UNMATCHED_TOTAL: &str = "ironbus_broker_messages_unmatched_total";
/// Copies of published messages a subscription did not take: its rules did not match, it has
/// no rules, or its status does not take messages (one per message and subscription).
pub const MESSAGES_FILTERED_OUT_TOTAL: &str = "ironbus_broker_messages_filtered_out_total";
/// Copies a subscription took from its topic. Label: `entity` (the subscription's path).
pub const SUBSCRIPTION_MESSAGES_INCOMING_TOTAL: &str =
    "ironbus_broker_subscription_messages_incoming_total";
/// Messages a subscription handed to receivers. Label: `entity`.
pub const SUBSCRIPTION_MESSAGES_OUTGOING_TOTAL: &str =
    "ironbus_broker_subscription_messages_outgoing_total";
/// Messages published to its topic that a subscription did not take. Label: `entity`.
pub const SUBSCRIPTION_MESSAGES_FILTERED_OUT_TOTAL: &str =
    "ironbus_broker_subscription_messages_filtered_out_total";
/// Messages a subscription moved to its dead-letter queue. Labels: `entity`, `reason` (as
/// [`DEAD_LETTERED_TOTAL`]).
pub const SUBSCRIPTION_DEAD_LETTERED_TOTAL: &str =
    "ironbus_broker_subscription_dead_lettered_total";
/// Sessions locked by a receiver (accepted by id or as the next available).
pub const SESSIONS_ACCEPTED_TOTAL: &str = "ironbus_broker_sessions_accepted_total";
/// Sessions held by a receiver now.
pub const SESSIONS_LOCKED: &str = "ironbus_broker_sessions_locked";
/// Session locks lost: expired without renewal, or dropped when a partition rebuilt its state.
pub const SESSION_LOCK_LOSSES_TOTAL: &str = "ironbus_broker_session_lock_losses_total";
/// Messages auto-forwarding moved into their destination (transfers answered as stored or as
/// a duplicate by duplicate detection).
pub const FORWARD_MESSAGES_TOTAL: &str = "ironbus_forward_messages_forwarded_total";
/// Transfers that could not be made. Label: `reason` (destination_missing: deleted or not
/// found, unavailable: a partition could not serve, the message stays and is tried again;
/// full, disabled, refused, hop_limit: the message was dead-lettered at the source).
pub const FORWARD_FAILURES_TOTAL: &str = "ironbus_forward_transfer_failures_total";
/// Transfers a destination had stored already (sent again after a crash or a failed write),
/// answered without a second copy.
pub const FORWARD_REDELIVERIES_TOTAL: &str = "ironbus_forward_transfer_redeliveries_total";
/// Messages waiting in transfer queues now.
pub const FORWARD_TRANSFER_QUEUE_MESSAGES: &str = "ironbus_forward_transfer_queue_messages";
/// Transactions ended. Label: `outcome` (commit; rollback: asked for, or its controller or
/// connection went away; timeout: past two minutes; failed: refused at commit — an operation
/// of it failed, a lock was lost, the store or a quota refused the write).
pub const TRANSACTIONS_TOTAL: &str = "ironbus_broker_transactions_total";
/// Partitions currently unavailable (their store cannot serve them).
pub const PARTITIONS_UNAVAILABLE: &str = "ironbus_broker_partitions_unavailable";
/// Message bodies read back from the store (not in the body cache when delivered or peeked).
pub const BODIES_READ_TOTAL: &str = "ironbus_store_bodies_read_total";
/// Bytes of keys and values partitions wrote to their stores (puts; deletes count their keys).
pub const STORE_WRITTEN_BYTES_TOTAL: &str = "ironbus_store_written_bytes_total";
/// Time one partition's store write took, in seconds.
pub const STORE_WRITE_DURATION_SECONDS: &str = "ironbus_store_write_duration_seconds";

/// Measures how long something took, for a duration histogram.
///
/// The one place the core reads the monotonic clock: what it measures is only reported, never
/// decided on (rules take their time from the `Clock`, see `core/clippy.toml`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stopwatch(std::time::Instant);

impl Stopwatch {
    #[allow(clippy::disallowed_methods, reason = "a duration metric, never an input to a rule")]
    pub(crate) fn start() -> Self {
        Stopwatch(std::time::Instant::now())
    }

    /// Seconds since [`Stopwatch::start`].
    pub(crate) fn seconds(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}

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
    pub labels: &'static [&'static str],
}

/// Every metric the core emits.
pub const CATALOGUE: &[MetricDef] = &[
    MetricDef {
        name: MESSAGES_INCOMING_TOTAL,
        kind: MetricKind::Counter,
        help: "Messages accepted by the broker, duplicates excluded",
        labels: &["entity_kind"],
    },
    MetricDef {
        name: MESSAGES_OUTGOING_TOTAL,
        kind: MetricKind::Counter,
        help: "Messages handed to receivers",
        labels: &["entity_kind"],
    },
    MetricDef {
        name: SETTLEMENTS_TOTAL,
        kind: MetricKind::Counter,
        help: "Settlements of locked messages by outcome",
        labels: &["outcome"],
    },
    MetricDef {
        name: DEAD_LETTERED_TOTAL,
        kind: MetricKind::Counter,
        help: "Messages moved to a dead-letter queue by reason",
        labels: &["reason"],
    },
    MetricDef {
        name: MESSAGES_EXPIRED_TOTAL,
        kind: MetricKind::Counter,
        help: "Expired messages dropped",
        labels: &[],
    },
    MetricDef {
        name: DUPLICATES_DROPPED_TOTAL,
        kind: MetricKind::Counter,
        help: "Sends dropped by duplicate detection",
        labels: &[],
    },
    MetricDef {
        name: LOCK_EXPIRATIONS_TOTAL,
        kind: MetricKind::Counter,
        help: "Message locks that expired before settlement",
        labels: &[],
    },
    MetricDef {
        name: MESSAGES_UNMATCHED_TOTAL,
        kind: MetricKind::Counter,
        help: "Messages published to a topic that no subscription took",
        labels: &[],
    },
    MetricDef {
        name: MESSAGES_FILTERED_OUT_TOTAL,
        kind: MetricKind::Counter,
        help: "Copies of published messages that a subscription did not take",
        labels: &[],
    },
    MetricDef {
        name: SUBSCRIPTION_MESSAGES_INCOMING_TOTAL,
        kind: MetricKind::Counter,
        help: "Copies a subscription took from its topic",
        labels: &["entity"],
    },
    MetricDef {
        name: SUBSCRIPTION_MESSAGES_OUTGOING_TOTAL,
        kind: MetricKind::Counter,
        help: "Messages a subscription handed to receivers",
        labels: &["entity"],
    },
    MetricDef {
        name: SUBSCRIPTION_MESSAGES_FILTERED_OUT_TOTAL,
        kind: MetricKind::Counter,
        help: "Messages published to its topic that a subscription did not take",
        labels: &["entity"],
    },
    MetricDef {
        name: SUBSCRIPTION_DEAD_LETTERED_TOTAL,
        kind: MetricKind::Counter,
        help: "Messages a subscription moved to its dead-letter queue by reason",
        labels: &["entity", "reason"],
    },
    MetricDef {
        name: SESSIONS_ACCEPTED_TOTAL,
        kind: MetricKind::Counter,
        help: "Sessions locked by a receiver",
        labels: &[],
    },
    MetricDef {
        name: SESSIONS_LOCKED,
        kind: MetricKind::Gauge,
        help: "Sessions held by a receiver now",
        labels: &[],
    },
    MetricDef {
        name: SESSION_LOCK_LOSSES_TOTAL,
        kind: MetricKind::Counter,
        help: "Session locks lost (expired, or dropped by a partition rebuild)",
        labels: &[],
    },
    MetricDef {
        name: FORWARD_MESSAGES_TOTAL,
        kind: MetricKind::Counter,
        help: "Messages auto-forwarding moved into their destination",
        labels: &[],
    },
    MetricDef {
        name: FORWARD_FAILURES_TOTAL,
        kind: MetricKind::Counter,
        help: "Transfers that could not be made, by reason",
        labels: &["reason"],
    },
    MetricDef {
        name: FORWARD_REDELIVERIES_TOTAL,
        kind: MetricKind::Counter,
        help: "Transfers sent again that their destination had stored already",
        labels: &[],
    },
    MetricDef {
        name: TRANSACTIONS_TOTAL,
        kind: MetricKind::Counter,
        help: "Transactions ended, by outcome",
        labels: &["outcome"],
    },
    MetricDef {
        name: FORWARD_TRANSFER_QUEUE_MESSAGES,
        kind: MetricKind::Gauge,
        help: "Messages waiting in transfer queues",
        labels: &[],
    },
    MetricDef {
        name: PARTITIONS_UNAVAILABLE,
        kind: MetricKind::Gauge,
        help: "Partitions whose store cannot serve them",
        labels: &[],
    },
    MetricDef {
        name: BODIES_READ_TOTAL,
        kind: MetricKind::Counter,
        help: "Message bodies read back from the store because they were not cached",
        labels: &[],
    },
    MetricDef {
        name: STORE_WRITTEN_BYTES_TOTAL,
        kind: MetricKind::Counter,
        help: "Bytes of keys and values partitions wrote to their stores",
        labels: &[],
    },
    MetricDef {
        name: STORE_WRITE_DURATION_SECONDS,
        kind: MetricKind::Histogram,
        help: "Duration of one partition's store write",
        labels: &[],
    },
];

/// Buckets for [`STORE_WRITE_DURATION_SECONDS`], for exporters that need them explicit.
pub const STORE_WRITE_BUCKETS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0];

/// Registers the catalogue's help texts with the installed recorder.
pub fn describe() {
    for def in CATALOGUE {
        match def.kind {
            MetricKind::Counter => metrics::describe_counter!(def.name, def.help),
            MetricKind::Gauge => metrics::describe_gauge!(def.name, def.help),
            MetricKind::Histogram => metrics::describe_histogram!(def.name, def.help),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `entity` (a subscription's path) is bounded by the namespace's quotas: at most 2,000
    /// subscriptions per topic and 10,000 topics; it is used on subscriptions' metrics only.
    const BOUNDED_LABELS: &[&str] =
        &["entity_kind", "outcome", "reason", "operation", "transport", "entity"];

    #[test]
    fn metric_names_follow_the_naming_rules() {
        for def in CATALOGUE {
            let n = def.name;
            assert!(n.starts_with("ironbus_"), "{n}: ironbus_ prefix");
            assert!(n.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{n}: snake case");
            assert_eq!(
                n.ends_with("_total"),
                def.kind == MetricKind::Counter,
                "{n}: _total on counters only"
            );
            assert!(n.split('_').count() >= 4, "{n}: ironbus_<subsystem>_<what>...");
            for unit in ["_ms", "_milliseconds", "_kb", "_mb"] {
                assert!(!n.contains(unit), "{n}: base units only");
            }
            if def.kind == MetricKind::Histogram {
                assert!(n.ends_with("_seconds") || n.ends_with("_bytes"), "{n}: histogram unit");
            }
            for label in def.labels {
                assert!(BOUNDED_LABELS.contains(label), "{n}: unbounded label {label}");
            }
        }
    }

    #[test]
    fn catalogue_names_are_unique() {
        let mut names: Vec<_> = CATALOGUE.iter().map(|d| d.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CATALOGUE.len());
    }
}
