//! Entity descriptions: Service Bus's queue properties, their defaults and their validation;
//! topics, subscriptions and rules in `topic` (re-exported here).
//!
//! Entity names follow Service Bus's rules ([`validate_entity_name`]); [`NamespaceLimits`]
//! holds the namespace quotas (queues and topics count against the entity quota). Some
//! properties are kept and reported but not acted on: EnableExpress. AutoDeleteOnIdle is
//! acted on by `broker/idle.rs`.

pub(crate) mod topic;

pub use topic::{
    CorrelationFilter, RuleAction, RuleDescription, RuleFilter, SubscriptionDescription,
    TopicDescription, DEFAULT_RULE_NAME, MAX_ACTION_STATEMENTS, MAX_CORRELATION_FILTERS_PER_TOPIC,
    MAX_EXPRESSION_LEN, MAX_SQL_FILTERS_PER_TOPIC, MAX_SUBSCRIPTIONS_PER_TOPIC,
    MAX_SUBSCRIPTION_OR_RULE_NAME_LEN,
};

use std::time::Duration;

use crate::auth::{validate_rules, AuthorizationRule};
use crate::error::{BrokerError, Result};

/// Service Bus's "infinite" time span (`TimeSpan.MaxValue`), the default message TTL.
pub const TIME_SPAN_MAX: Duration = Duration::from_millis(922_337_203_685_477);

/// Whether an entity accepts sends and receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EntityStatus {
    #[default]
    Active,
    Disabled,
    SendDisabled,
    ReceiveDisabled,
}

impl EntityStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EntityStatus::Active => "Active",
            EntityStatus::Disabled => "Disabled",
            EntityStatus::SendDisabled => "SendDisabled",
            EntityStatus::ReceiveDisabled => "ReceiveDisabled",
        }
    }

    pub fn can_send(self) -> bool {
        matches!(self, EntityStatus::Active | EntityStatus::ReceiveDisabled)
    }

    pub fn can_receive(self) -> bool {
        matches!(self, EntityStatus::Active | EntityStatus::SendDisabled)
    }
}

/// A queue's properties, with Service Bus's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueDescription {
    /// How long a peek-lock delivery stays locked. 60 s; 5 s to 5 min.
    pub lock_duration: Duration,
    /// Deliveries after which a message is dead-lettered. 10; at least 1.
    pub max_delivery_count: u32,
    /// The TTL of messages that set none, and the cap of those that do. Infinite by default.
    pub default_message_time_to_live: Duration,
    /// Expired messages go to the dead-letter queue (else they are dropped).
    pub dead_lettering_on_message_expiration: bool,
    /// Drop messages whose MessageId was seen within the history window. Fixed at creation.
    pub requires_duplicate_detection: bool,
    /// 10 min; 20 s to 7 days.
    pub duplicate_detection_history_time_window: Duration,
    /// Receivers must accept a session. Fixed at creation.
    pub requires_session: bool,
    /// Spread the queue over [`QueueDescription::partition_count`] partitions. Fixed at creation.
    pub enable_partitioning: bool,
    /// Number of partitions when partitioning is on (16 by default). Fixed at creation.
    pub partition_count: u16,
    /// The most each of the queue's partitions may hold, in MiB (1024 by default): as in
    /// Service Bus, a partitioned queue holds (and reports) this times its partition count
    /// ([`QueueDescription::total_max_size_in_megabytes`]).
    pub max_size_in_megabytes: u64,
    /// The largest message the queue accepts, in KiB. 256 by default.
    pub max_message_size_in_kilobytes: u64,
    /// Auto-forward destination: a queue or topic of the namespace (see `broker/forwarding.rs`).
    pub forward_to: Option<String>,
    /// Auto-forward destination of dead-lettered messages.
    pub forward_dead_lettered_messages_to: Option<String>,
    pub enable_batched_operations: bool,
    pub status: EntityStatus,
    pub user_metadata: Option<String>,
    /// Shared access keys scoped to this queue (ATOM `AuthorizationRules`).
    pub authorization_rules: Vec<AuthorizationRule>,
    /// The idle time after which the queue is deleted: 5 min to never (the default,
    /// [`TIME_SPAN_MAX`]). What counts as use: `broker/idle.rs`.
    pub auto_delete_on_idle: Duration,
    /// Service Bus's express entities (held in memory before they are stored). Kept and
    /// reported as set; ironbus stores every message the same way.
    pub enable_express: bool,
}

impl Default for QueueDescription {
    fn default() -> Self {
        Self {
            lock_duration: Duration::from_secs(60),
            max_delivery_count: 10,
            default_message_time_to_live: TIME_SPAN_MAX,
            dead_lettering_on_message_expiration: false,
            requires_duplicate_detection: false,
            duplicate_detection_history_time_window: Duration::from_secs(600),
            requires_session: false,
            enable_partitioning: false,
            partition_count: DEFAULT_PARTITION_COUNT,
            max_size_in_megabytes: 1024,
            max_message_size_in_kilobytes: 256,
            forward_to: None,
            forward_dead_lettered_messages_to: None,
            enable_batched_operations: true,
            status: EntityStatus::Active,
            user_metadata: None,
            authorization_rules: Vec::new(),
            auto_delete_on_idle: TIME_SPAN_MAX,
            enable_express: false,
        }
    }
}

/// A queue's or topic's authorization rules, checked as [`validate_rules`] does.
pub(crate) fn validate_authorization_rules(rules: &[AuthorizationRule]) -> Result<()> {
    validate_rules(rules).map_err(|e| BrokerError::invalid("AuthorizationRules", e.to_string()))
}

/// Partitions of a partitioned entity unless told otherwise.
pub const DEFAULT_PARTITION_COUNT: u16 = 16;
/// The most partitions one entity may have.
pub const MAX_PARTITION_COUNT: u16 = 128;
/// The longest entity name.
pub const MAX_ENTITY_NAME_LEN: usize = 260;

impl QueueDescription {
    /// The number of partitions the queue has: `partition_count` when partitioned, else 1.
    pub fn partitions(&self) -> u16 {
        if self.enable_partitioning {
            self.partition_count
        } else {
            1
        }
    }

    /// The most the whole queue may hold, in MiB: MaxSizeInMegabytes for each partition, what
    /// Service Bus reports as a partitioned entity's MaxSizeInMegabytes (16,384 for 1,024 MiB
    /// and 16 partitions).
    pub fn total_max_size_in_megabytes(&self) -> u64 {
        self.max_size_in_megabytes.saturating_mul(u64::from(self.partitions()))
    }

    /// The most the whole queue may hold, in bytes: what its size quota checks.
    pub fn max_size_bytes(&self) -> u64 {
        self.total_max_size_in_megabytes().saturating_mul(1024 * 1024)
    }

    /// Largest message in bytes.
    pub fn max_message_size(&self) -> usize {
        (self.max_message_size_in_kilobytes as usize).saturating_mul(1024)
    }

    /// Checks every field; the first violation is returned.
    pub fn validate(&self) -> Result<()> {
        check_range(
            "LockDuration",
            self.lock_duration,
            Duration::from_secs(5),
            Duration::from_secs(300),
        )?;
        if self.max_delivery_count == 0 {
            return Err(BrokerError::invalid("MaxDeliveryCount", "must be at least 1"));
        }
        check_range(
            "DefaultMessageTimeToLive",
            self.default_message_time_to_live,
            Duration::from_secs(1),
            TIME_SPAN_MAX,
        )?;
        check_range(
            "DuplicateDetectionHistoryTimeWindow",
            self.duplicate_detection_history_time_window,
            Duration::from_secs(20),
            Duration::from_secs(7 * 24 * 3600),
        )?;
        check_range(
            "AutoDeleteOnIdle",
            self.auto_delete_on_idle,
            Duration::from_secs(300),
            TIME_SPAN_MAX,
        )?;
        if self.enable_partitioning && !(1..=MAX_PARTITION_COUNT).contains(&self.partition_count) {
            return Err(BrokerError::invalid(
                "PartitionCount",
                format!(
                    "must be between 1 and {MAX_PARTITION_COUNT}, got {}",
                    self.partition_count
                ),
            ));
        }
        if !(1..=81_920).contains(&self.max_size_in_megabytes) {
            return Err(BrokerError::invalid(
                "MaxSizeInMegabytes",
                format!("must be between 1 and 81920, got {}", self.max_size_in_megabytes),
            ));
        }
        if !(1..=102_400).contains(&self.max_message_size_in_kilobytes) {
            return Err(BrokerError::invalid(
                "MaxMessageSizeInKilobytes",
                format!("must be between 1 and 102400, got {}", self.max_message_size_in_kilobytes),
            ));
        }
        for (field, target) in [
            ("ForwardTo", &self.forward_to),
            ("ForwardDeadLetteredMessagesTo", &self.forward_dead_lettered_messages_to),
        ] {
            if let Some(target) = target {
                // A name, or an absolute URI naming one (`sb://host/name`).
                let name = match target.split_once("://") {
                    Some((_, rest)) => rest.split_once('/').map_or("", |(_, p)| p),
                    None => target,
                };
                validate_entity_name(name.trim_matches('/')).map_err(|e| match e {
                    BrokerError::InvalidArgument { reason, .. } => {
                        BrokerError::InvalidArgument { field, reason }
                    }
                    other => other,
                })?;
            }
        }
        if let Some(meta) = &self.user_metadata {
            if meta.len() > 1024 {
                return Err(BrokerError::invalid(
                    "UserMetadata",
                    "must be at most 1024 characters",
                ));
            }
        }
        validate_authorization_rules(&self.authorization_rules)
    }

    /// Checks that `updated` may replace `self`: the properties fixed at creation are unchanged.
    pub fn validate_update(&self, updated: &QueueDescription) -> Result<()> {
        updated.validate()?;
        let fixed = [
            ("EnablePartitioning", self.enable_partitioning != updated.enable_partitioning),
            ("PartitionCount", self.partitions() != updated.partitions()),
            ("RequiresSession", self.requires_session != updated.requires_session),
            (
                "RequiresDuplicateDetection",
                self.requires_duplicate_detection != updated.requires_duplicate_detection,
            ),
        ];
        for (field, changed) in fixed {
            if changed {
                return Err(BrokerError::InvalidOperation(format!(
                    "{field} cannot be changed after the entity is created"
                )));
            }
        }
        Ok(())
    }
}

pub(crate) fn check_range(
    field: &'static str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<()> {
    if value < min || value > max {
        return Err(BrokerError::invalid(
            field,
            format!("must be between {min:?} and {max:?}, got {value:?}"),
        ));
    }
    Ok(())
}

/// Checks an entity name against Service Bus's rules: 1 to 260 characters among letters, digits,
/// `.`, `-`, `_` and `/`; no leading, trailing or doubled `/`.
pub fn validate_entity_name(name: &str) -> Result<()> {
    let invalid =
        |reason: &str| Err(BrokerError::invalid("EntityName", format!("{name:?}: {reason}")));
    if name.is_empty() {
        return invalid("must not be empty");
    }
    if name.chars().count() > MAX_ENTITY_NAME_LEN {
        return invalid("must be at most 260 characters");
    }
    if let Some(c) =
        name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/')))
    {
        return invalid(&format!("character {c:?} is not allowed (letters, digits, . - _ / are)"));
    }
    if name.starts_with('/') || name.ends_with('/') || name.contains("//") {
        return invalid("must not start or end with '/' or contain '//'");
    }
    Ok(())
}

/// A namespace's tier, as the management API reports it (`$namespaceinfo`'s MessagingSKU):
/// it decides the largest message an entity may be set to take.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Tier {
    /// Messages up to 256 KB; an entity cannot be given another MaxMessageSizeInKilobytes.
    #[default]
    Standard,
    /// MaxMessageSizeInKilobytes from 1,024 (the default) to 102,400.
    Premium,
}

impl Tier {
    /// The MessagingSKU name.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Standard => "Standard",
            Tier::Premium => "Premium",
        }
    }

    /// The MaxMessageSizeInKilobytes values an entity of this tier may be given.
    pub fn max_message_sizes_kb(self) -> std::ops::RangeInclusive<u64> {
        match self {
            Tier::Standard => 256..=256,
            Tier::Premium => 1024..=102_400,
        }
    }

    /// The MaxMessageSizeInKilobytes of an entity created without one.
    pub fn default_max_message_size_kb(self) -> u64 {
        *self.max_message_sizes_kb().start()
    }
}

/// Namespace-wide limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceLimits {
    /// Entities (queues and topics) per namespace. Service Bus: 10,000.
    pub max_entities: usize,
    /// Partitioned entities per namespace. Service Bus: 100.
    pub max_partitioned_entities: usize,
}

impl Default for NamespaceLimits {
    fn default() -> Self {
        Self { max_entities: 10_000, max_partitioned_entities: 100 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut QueueDescription)) -> QueueDescription {
        let mut d = QueueDescription::default();
        f(&mut d);
        d
    }

    #[test]
    fn defaults_match_service_bus() {
        let d = QueueDescription::default();
        assert_eq!(d.lock_duration, Duration::from_secs(60));
        assert_eq!(d.max_delivery_count, 10);
        assert_eq!(d.duplicate_detection_history_time_window, Duration::from_secs(600));
        assert_eq!(d.max_message_size_in_kilobytes, 256);
        assert_eq!(d.partition_count, 16);
        assert_eq!(d.partitions(), 1);
        assert!(d.validate().is_ok());
    }

    #[test]
    fn each_field_is_validated() {
        let secs = Duration::from_secs;
        let cases: Vec<(&str, QueueDescription, Option<&str>)> = vec![
            ("lock 5s ok", with(|d| d.lock_duration = secs(5)), None),
            ("lock 5min ok", with(|d| d.lock_duration = secs(300)), None),
            ("lock 4s", with(|d| d.lock_duration = secs(4)), Some("LockDuration")),
            ("lock 6min", with(|d| d.lock_duration = secs(301)), Some("LockDuration")),
            ("max delivery 0", with(|d| d.max_delivery_count = 0), Some("MaxDeliveryCount")),
            (
                "ttl 0",
                with(|d| d.default_message_time_to_live = Duration::ZERO),
                Some("DefaultMessageTimeToLive"),
            ),
            (
                "dedup 19s",
                with(|d| d.duplicate_detection_history_time_window = secs(19)),
                Some("DuplicateDetectionHistoryTimeWindow"),
            ),
            ("dedup 20s ok", with(|d| d.duplicate_detection_history_time_window = secs(20)), None),
            (
                "dedup 7d ok",
                with(|d| d.duplicate_detection_history_time_window = secs(7 * 86400)),
                None,
            ),
            (
                "dedup 7d+1s",
                with(|d| d.duplicate_detection_history_time_window = secs(7 * 86400 + 1)),
                Some("DuplicateDetectionHistoryTimeWindow"),
            ),
            (
                "partitions 0",
                with(|d| {
                    d.enable_partitioning = true;
                    d.partition_count = 0
                }),
                Some("PartitionCount"),
            ),
            (
                "partitions 129",
                with(|d| {
                    d.enable_partitioning = true;
                    d.partition_count = 129
                }),
                Some("PartitionCount"),
            ),
            ("size 0", with(|d| d.max_size_in_megabytes = 0), Some("MaxSizeInMegabytes")),
            (
                "message size 0",
                with(|d| d.max_message_size_in_kilobytes = 0),
                Some("MaxMessageSizeInKilobytes"),
            ),
            ("forward bad", with(|d| d.forward_to = Some("a b".into())), Some("ForwardTo")),
        ];
        for (name, desc, field) in cases {
            match (desc.validate(), field) {
                (Ok(()), None) => {}
                (Err(BrokerError::InvalidArgument { field: got, .. }), Some(want)) => {
                    assert_eq!(got, want, "{name}")
                }
                (got, want) => panic!("{name}: got {got:?}, want error on {want:?}"),
            }
        }
    }

    #[test]
    fn partitioning_is_immutable_after_creation() {
        let created = with(|d| d.enable_partitioning = true);
        for updated in [
            with(|d| d.enable_partitioning = false),
            with(|d| {
                d.enable_partitioning = true;
                d.partition_count = 8
            }),
            with(|d| {
                d.enable_partitioning = true;
                d.requires_session = true
            }),
        ] {
            assert!(matches!(
                created.validate_update(&updated),
                Err(BrokerError::InvalidOperation(_))
            ));
        }
        let ok = with(|d| {
            d.enable_partitioning = true;
            d.lock_duration = Duration::from_secs(30)
        });
        assert!(created.validate_update(&ok).is_ok());
    }

    #[test]
    fn entity_names_follow_service_bus_rules() {
        for ok in ["q", "orders.eu-west_1", "a/b/c", &"x".repeat(260)] {
            assert!(validate_entity_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "$x", "/a", "a/", "a//b", "é", &"x".repeat(261)] {
            assert!(validate_entity_name(bad).is_err(), "{bad}");
        }
    }
}
