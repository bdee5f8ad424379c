//! Topics, subscriptions and rules: Service Bus's properties, defaults and validation.
//!
//! A subscription receives like a queue, so the core runs it as one: [`SubscriptionDescription::
//! effective`] gives the [`QueueDescription`] its partitions work with (lock duration, delivery
//! count and expiry from the subscription; partitioning, sizes and the TTL cap from its topic),
//! and [`TopicDescription::effective`] the one the topic's publishing side works with
//! (duplicate detection, partitioning, sizes, status).

use std::time::Duration;

use super::{check_range, EntityStatus, QueueDescription, DEFAULT_PARTITION_COUNT, TIME_SPAN_MAX};
use crate::auth::AuthorizationRule;
use crate::error::{BrokerError, Result};
pub use crate::filter::CorrelationFilter;
use crate::message::PropertyValue;

/// The rule every new subscription gets unless its creation names another.
pub const DEFAULT_RULE_NAME: &str = "$Default";
/// Subscriptions per topic (Service Bus, every tier).
pub const MAX_SUBSCRIPTIONS_PER_TOPIC: usize = 2_000;
/// SQL filters (including True and False filters) per topic.
pub const MAX_SQL_FILTERS_PER_TOPIC: usize = 2_000;
/// Correlation filters per topic.
pub const MAX_CORRELATION_FILTERS_PER_TOPIC: usize = 100_000;
/// The longest SQL filter or action expression, in characters.
pub const MAX_EXPRESSION_LEN: usize = 1_024;
/// The most SET / REMOVE statements one rule action may hold.
pub const MAX_ACTION_STATEMENTS: usize = 32;
/// The longest subscription or rule name.
pub const MAX_SUBSCRIPTION_OR_RULE_NAME_LEN: usize = 50;

/// A topic's properties, with Service Bus's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicDescription {
    /// The TTL of messages that set none, and the cap of those that do.
    pub default_message_time_to_live: Duration,
    /// The most each partition may hold, in MiB (see [`QueueDescription::max_size_in_megabytes`]).
    pub max_size_in_megabytes: u64,
    /// Fixed at creation.
    pub requires_duplicate_detection: bool,
    pub duplicate_detection_history_time_window: Duration,
    pub enable_batched_operations: bool,
    /// Refuse a message no subscription takes (`com.microsoft:no-matching-subscription`)
    /// instead of discarding it.
    pub filtering_messages_before_publishing: bool,
    pub status: EntityStatus,
    pub user_metadata: Option<String>,
    pub support_ordering: bool,
    /// The idle time after which the topic (and its subscriptions) is deleted: 5 min to never
    /// (the default); a use of any of its subscriptions is a use of it (`broker/idle.rs`).
    pub auto_delete_on_idle: Duration,
    /// Fixed at creation; every subscription has the same partitions.
    pub enable_partitioning: bool,
    pub partition_count: u16,
    pub max_message_size_in_kilobytes: u64,
    /// Stored and echoed (a Premium option with no behaviour here).
    pub enable_subscription_partitioning: bool,
    /// Stored and echoed.
    pub enable_express: bool,
    /// Shared access keys scoped to this topic and its subscriptions (ATOM
    /// `AuthorizationRules`).
    pub authorization_rules: Vec<AuthorizationRule>,
}

impl Default for TopicDescription {
    fn default() -> Self {
        TopicDescription {
            default_message_time_to_live: TIME_SPAN_MAX,
            max_size_in_megabytes: 1024,
            requires_duplicate_detection: false,
            duplicate_detection_history_time_window: Duration::from_secs(600),
            enable_batched_operations: true,
            filtering_messages_before_publishing: false,
            status: EntityStatus::Active,
            user_metadata: None,
            support_ordering: true,
            auto_delete_on_idle: TIME_SPAN_MAX,
            enable_partitioning: false,
            partition_count: DEFAULT_PARTITION_COUNT,
            max_message_size_in_kilobytes: 256,
            enable_subscription_partitioning: false,
            enable_express: false,
            authorization_rules: Vec::new(),
        }
    }
}

impl TopicDescription {
    /// The description the topic's partitions publish with: the topic's own fields, on a
    /// queue's (a topic holds no receivable messages, so the receive-side fields are moot).
    pub fn effective(&self) -> QueueDescription {
        QueueDescription {
            default_message_time_to_live: self.default_message_time_to_live,
            requires_duplicate_detection: self.requires_duplicate_detection,
            duplicate_detection_history_time_window: self.duplicate_detection_history_time_window,
            enable_partitioning: self.enable_partitioning,
            partition_count: self.partition_count,
            max_size_in_megabytes: self.max_size_in_megabytes,
            max_message_size_in_kilobytes: self.max_message_size_in_kilobytes,
            enable_batched_operations: self.enable_batched_operations,
            status: self.status,
            user_metadata: self.user_metadata.clone(),
            ..QueueDescription::default()
        }
    }

    /// The number of partitions: `partition_count` when partitioned, else 1.
    pub fn partitions(&self) -> u16 {
        self.effective().partitions()
    }

    /// The most the whole topic may hold, in MiB: MaxSizeInMegabytes for each partition.
    pub fn total_max_size_in_megabytes(&self) -> u64 {
        self.max_size_in_megabytes.saturating_mul(u64::from(self.partitions()))
    }

    pub fn validate(&self) -> Result<()> {
        self.effective().validate()?;
        super::validate_authorization_rules(&self.authorization_rules)?;
        check_range(
            "AutoDeleteOnIdle",
            self.auto_delete_on_idle,
            Duration::from_secs(300),
            TIME_SPAN_MAX,
        )
    }

    /// Checks that `updated` may replace `self`: the properties fixed at creation are unchanged.
    pub fn validate_update(&self, updated: &TopicDescription) -> Result<()> {
        updated.validate()?;
        self.effective().validate_update(&updated.effective())
    }
}

/// A subscription's properties, with Service Bus's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionDescription {
    pub lock_duration: Duration,
    /// Fixed at creation.
    pub requires_session: bool,
    pub default_message_time_to_live: Duration,
    pub dead_lettering_on_message_expiration: bool,
    /// A copy whose filter or action fails to evaluate goes to the dead-letter queue (else it
    /// is dropped for this subscription).
    pub dead_lettering_on_filter_evaluation_exceptions: bool,
    pub max_delivery_count: u32,
    pub enable_batched_operations: bool,
    pub status: EntityStatus,
    /// Auto-forward destination (see `QueueDescription::forward_to`).
    pub forward_to: Option<String>,
    /// Auto-forward destination (see `QueueDescription::forward_to`).
    pub forward_dead_lettered_messages_to: Option<String>,
    pub user_metadata: Option<String>,
    /// The idle time after which the subscription is deleted: 5 min to never (the default);
    /// a publish to its topic is no use of it (`broker/idle.rs`).
    pub auto_delete_on_idle: Duration,
}

impl Default for SubscriptionDescription {
    fn default() -> Self {
        SubscriptionDescription {
            lock_duration: Duration::from_secs(60),
            requires_session: false,
            default_message_time_to_live: TIME_SPAN_MAX,
            dead_lettering_on_message_expiration: false,
            dead_lettering_on_filter_evaluation_exceptions: true,
            max_delivery_count: 10,
            enable_batched_operations: true,
            status: EntityStatus::Active,
            forward_to: None,
            forward_dead_lettered_messages_to: None,
            user_metadata: None,
            auto_delete_on_idle: TIME_SPAN_MAX,
        }
    }
}

impl SubscriptionDescription {
    /// The queue a subscription behaves as under `topic`: its own receive-side fields, the
    /// topic's partitioning and sizes, and a TTL cap that is the smaller of the two defaults.
    pub fn effective(&self, topic: &TopicDescription) -> QueueDescription {
        QueueDescription {
            lock_duration: self.lock_duration,
            max_delivery_count: self.max_delivery_count,
            default_message_time_to_live: self
                .default_message_time_to_live
                .min(topic.default_message_time_to_live),
            dead_lettering_on_message_expiration: self.dead_lettering_on_message_expiration,
            requires_duplicate_detection: false,
            requires_session: self.requires_session,
            enable_partitioning: topic.enable_partitioning,
            partition_count: topic.partition_count,
            max_size_in_megabytes: topic.max_size_in_megabytes,
            max_message_size_in_kilobytes: topic.max_message_size_in_kilobytes,
            forward_to: self.forward_to.clone(),
            forward_dead_lettered_messages_to: self.forward_dead_lettered_messages_to.clone(),
            enable_batched_operations: self.enable_batched_operations,
            status: self.status,
            user_metadata: self.user_metadata.clone(),
            ..QueueDescription::default()
        }
    }

    /// Whether the topic hands this subscription new messages (Active and ReceiveDisabled).
    pub fn takes_messages(&self) -> bool {
        self.status.can_send()
    }

    pub fn validate(&self) -> Result<()> {
        self.effective(&TopicDescription::default()).validate()?;
        check_range(
            "AutoDeleteOnIdle",
            self.auto_delete_on_idle,
            Duration::from_secs(300),
            TIME_SPAN_MAX,
        )
    }

    pub fn validate_update(&self, updated: &SubscriptionDescription) -> Result<()> {
        updated.validate()?;
        if self.requires_session != updated.requires_session {
            return Err(BrokerError::InvalidOperation(
                "RequiresSession cannot be changed after the entity is created".into(),
            ));
        }
        Ok(())
    }
}

/// A rule's filter, as created (compiled by [`crate::filter`] when the rule is used).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum RuleFilter {
    /// Matches every message (`1=1`).
    #[default]
    True,
    /// Matches no message (`1=0`).
    False,
    /// A SQL filter expression and its `@parameters` (names include the `@`).
    Sql {
        expression: String,
        parameters: Vec<(String, PropertyValue)>,
    },
    Correlation(CorrelationFilter),
}

impl RuleFilter {
    /// Whether the filter counts as a SQL filter against the topic's quota (True and False
    /// filters are SQL filters to Service Bus).
    pub fn is_sql(&self) -> bool {
        !matches!(self, RuleFilter::Correlation(_))
    }
}

/// A rule's action: a SQL action expression and its parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleAction {
    pub expression: String,
    pub parameters: Vec<(String, PropertyValue)>,
}

/// A subscription rule: a filter and an optional action. Its name is its path's last segment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleDescription {
    pub filter: RuleFilter,
    pub action: Option<RuleAction>,
}

impl RuleDescription {
    /// Checks the rule: expression lengths here; the expressions themselves are checked by
    /// compiling them (`crate::topic::CompiledRule::compile`).
    pub fn validate(&self) -> Result<()> {
        if let RuleFilter::Sql { expression, .. } = &self.filter {
            check_expression("SqlExpression", expression)?;
        }
        if let Some(action) = &self.action {
            check_expression("SqlRuleAction", &action.expression)?;
        }
        Ok(())
    }
}

fn check_expression(field: &'static str, expression: &str) -> Result<()> {
    let len = expression.chars().count();
    if len > MAX_EXPRESSION_LEN {
        return Err(BrokerError::invalid(
            field,
            format!(
                "the expression is {len} characters long; at most {MAX_EXPRESSION_LEN} are allowed"
            ),
        ));
    }
    Ok(())
}

/// Checks a subscription or rule name (the last segment of its path): 1 to 50 characters.
pub(crate) fn validate_child_name(field: &'static str, name: &str) -> Result<()> {
    let len = name.chars().count();
    if len == 0 || len > MAX_SUBSCRIPTION_OR_RULE_NAME_LEN {
        return Err(BrokerError::invalid(
            field,
            format!("{name:?} must be 1 to {MAX_SUBSCRIPTION_OR_RULE_NAME_LEN} characters long"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_service_bus() {
        let t = TopicDescription::default();
        assert_eq!(t.max_message_size_in_kilobytes, 256);
        assert!(!t.filtering_messages_before_publishing);
        assert!(t.validate().is_ok());
        let s = SubscriptionDescription::default();
        assert_eq!(s.lock_duration, Duration::from_secs(60));
        assert_eq!(s.max_delivery_count, 10);
        assert!(s.dead_lettering_on_filter_evaluation_exceptions);
        assert!(s.validate().is_ok());
        assert_eq!(RuleDescription::default().filter, RuleFilter::True);
    }

    #[test]
    fn a_subscription_runs_as_a_queue_with_its_topics_partitions_and_the_smaller_ttl() {
        let topic = TopicDescription {
            enable_partitioning: true,
            partition_count: 4,
            default_message_time_to_live: Duration::from_secs(100),
            ..Default::default()
        };
        let sub = SubscriptionDescription {
            default_message_time_to_live: Duration::from_secs(1000),
            lock_duration: Duration::from_secs(30),
            ..Default::default()
        };
        let q = sub.effective(&topic);
        assert_eq!(q.partitions(), 4);
        assert_eq!(q.default_message_time_to_live, Duration::from_secs(100));
        assert_eq!(q.lock_duration, Duration::from_secs(30));
        assert!(!q.requires_duplicate_detection);
    }

    #[test]
    fn fields_are_validated() {
        let bad_topic = TopicDescription { max_size_in_megabytes: 0, ..Default::default() };
        assert!(matches!(
            bad_topic.validate(),
            Err(BrokerError::InvalidArgument { field: "MaxSizeInMegabytes", .. })
        ));
        let bad_sub =
            SubscriptionDescription { lock_duration: Duration::from_secs(1), ..Default::default() };
        assert!(matches!(
            bad_sub.validate(),
            Err(BrokerError::InvalidArgument { field: "LockDuration", .. })
        ));
        let long = RuleDescription {
            filter: RuleFilter::Sql { expression: "a".repeat(1025), parameters: vec![] },
            action: None,
        };
        assert!(long.validate().is_err());
        assert!(validate_child_name("SubscriptionName", &"s".repeat(50)).is_ok());
        assert!(validate_child_name("SubscriptionName", &"s".repeat(51)).is_err());
    }

    #[test]
    fn fixed_fields_cannot_change() {
        let topic = TopicDescription { requires_duplicate_detection: true, ..Default::default() };
        let changed = TopicDescription::default();
        assert!(matches!(topic.validate_update(&changed), Err(BrokerError::InvalidOperation(_))));
        let sub = SubscriptionDescription { requires_session: true, ..Default::default() };
        assert!(sub.validate_update(&SubscriptionDescription::default()).is_err());
    }
}
