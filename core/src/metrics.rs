//! The names of the metrics the core records through the `metrics` facade. Names are API:
//! `ironbus_<subsystem>_<what>_<unit>[_total]`, base units, `_total` on counters only, labels
//! only from bounded sets. Each constant's doc names its labels.
//!
//! The catalogue of every metric (kind, help, unit, labels, histogram buckets), its naming
//! test and the exporter live in the `ironbus-metrics` crate, which also checks that every
//! name here is catalogued. The core never depends on an exporter.
//!
//! The `ironbus_broker_subscription_*` counters carry the subscription's path as their
//! `entity` label and are recorded only when [`BrokerOptions::metrics_entity_labels`](crate::BrokerOptions) is on (one
//! series per subscription: up to 2,000 per topic times 10,000 topics).

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
/// Queues, topics and subscriptions deleted for being idle for their AutoDeleteOnIdle. Label:
/// `entity_kind`.
pub const ENTITIES_AUTO_DELETED_TOTAL: &str = "ironbus_broker_entities_auto_deleted_total";
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
