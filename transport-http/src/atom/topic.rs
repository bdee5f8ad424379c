//! A topic's description in ATOM: the `<TopicDescription>` element of an entry (with the
//! topic's runtime figures) and the parsing of a PUT body's description (http.md B.6). Same
//! shape rules as [`queue`](super::queue).

use ironbus_core::{EntityInfo, TopicDescription, TopicRuntime};

use crate::atom::authorization;
use crate::atom::{
    self, bool_text, count_details, entry_document, optional, Field, Omitted, CONNECT_NS,
    IRONBUS_NS, XSI_NS,
};
use crate::error::HttpError;
use crate::timefmt::{iso8601, xml_duration};

/// A topic's `<entry>`: description and runtime figures together.
pub fn entry(
    base: &str,
    info: &EntityInfo,
    d: &TopicDescription,
    runtime: Option<&TopicRuntime>,
) -> String {
    entry_document(&entry_element(base, info, d, runtime, true))
}

pub(crate) fn entry_element(
    base: &str,
    info: &EntityInfo,
    d: &TopicDescription,
    runtime: Option<&TopicRuntime>,
    declare_ns: bool,
) -> String {
    let path = info.path.as_str();
    let description = description_element(info, d, runtime);
    atom::entry_element(
        base,
        path,
        path,
        info.created_at,
        info.updated_at,
        &description,
        declare_ns,
    )
}

fn description_element(
    info: &EntityInfo,
    d: &TopicDescription,
    runtime: Option<&TopicRuntime>,
) -> String {
    let (created, updated) = (iso8601(info.created_at), iso8601(info.updated_at));
    let count = |f: fn(&TopicRuntime) -> u64| runtime.map_or(0, f);
    format!(
        concat!(
            r#"<TopicDescription xmlns="{connect}" xmlns:i="{xsi}">"#,
            "<DefaultMessageTimeToLive>{ttl}</DefaultMessageTimeToLive>",
            "<MaxSizeInMegabytes>{max_size}</MaxSizeInMegabytes>",
            "<RequiresDuplicateDetection>{dedup}</RequiresDuplicateDetection>",
            "<DuplicateDetectionHistoryTimeWindow>{window}</DuplicateDetectionHistoryTimeWindow>",
            "<EnableBatchedOperations>{batched}</EnableBatchedOperations>",
            "<SizeInBytes>{size}</SizeInBytes>",
            "<FilteringMessagesBeforePublishing>{filtering}</FilteringMessagesBeforePublishing>",
            "<IsAnonymousAccessible>false</IsAnonymousAccessible>",
            "{rules}",
            "<Status>{status}</Status>",
            "{user_metadata}",
            "<CreatedAt>{created}</CreatedAt><UpdatedAt>{updated}</UpdatedAt>",
            "<AccessedAt>{updated}</AccessedAt>",
            "<SupportOrdering>{ordering}</SupportOrdering>",
            "{count_details}",
            "<SubscriptionCount>{subscriptions}</SubscriptionCount>",
            "<SqlFilterCount>{sql_filters}</SqlFilterCount>",
            "<CorrelationFilterCount>{correlation_filters}</CorrelationFilterCount>",
            "<AutoDeleteOnIdle>{auto_delete}</AutoDeleteOnIdle>",
            "<EnablePartitioning>{partitioned}</EnablePartitioning>",
            "<EntityAvailabilityStatus>Available</EntityAvailabilityStatus>",
            "<EnableSubscriptionPartitioning>{sub_partitioning}</EnableSubscriptionPartitioning>",
            "<EnableExpress>{express}</EnableExpress>",
            "<MaxMessageSizeInKilobytes>{max_message}</MaxMessageSizeInKilobytes>",
            r#"<PartitionCount xmlns="{ironbus}">{partitions}</PartitionCount>"#,
            "</TopicDescription>"
        ),
        connect = CONNECT_NS,
        xsi = XSI_NS,
        ttl = xml_duration(d.default_message_time_to_live),
        // All partitions together, as Service Bus reports it.
        max_size = d.total_max_size_in_megabytes(),
        dedup = bool_text(d.requires_duplicate_detection),
        window = xml_duration(d.duplicate_detection_history_time_window),
        batched = bool_text(d.enable_batched_operations),
        size = count(|r| r.size_in_bytes),
        filtering = bool_text(d.filtering_messages_before_publishing),
        rules = authorization::element(&d.authorization_rules, info.created_at, info.updated_at),
        status = d.status.as_str(),
        user_metadata = optional("UserMetadata", d.user_metadata.as_deref()),
        created = created,
        updated = updated,
        ordering = bool_text(d.support_ordering),
        count_details = count_details(0, 0, count(|r| r.scheduled_message_count), 0, 0),
        subscriptions = count(|r| r.subscription_count),
        sql_filters = count(|r| r.sql_filter_count),
        correlation_filters = count(|r| r.correlation_filter_count),
        auto_delete = xml_duration(d.auto_delete_on_idle),
        partitioned = bool_text(d.enable_partitioning),
        sub_partitioning = bool_text(d.enable_subscription_partitioning),
        express = bool_text(d.enable_express),
        max_message = d.max_message_size_in_kilobytes,
        ironbus = IRONBUS_NS,
        partitions = d.partitions(),
    )
}

/// Parses a `<TopicDescription>` element. Omitted writable fields take Service Bus's defaults;
/// [`Omitted`] says which create-only fields were left out.
pub(crate) fn parse(
    description: roxmltree::Node<'_, '_>,
) -> Result<(TopicDescription, Omitted), HttpError> {
    let mut d = TopicDescription::default();
    let mut omitted = Omitted::all();
    for child in description.children().filter(|n| n.is_element()) {
        let f = Field::of(child);
        omitted.given(f.name);
        match f.name {
            "DefaultMessageTimeToLive" => d.default_message_time_to_live = f.duration()?,
            "MaxSizeInMegabytes" => d.max_size_in_megabytes = f.number()?,
            "RequiresDuplicateDetection" => d.requires_duplicate_detection = f.boolean()?,
            "DuplicateDetectionHistoryTimeWindow" => {
                d.duplicate_detection_history_time_window = f.duration()?
            }
            "EnableBatchedOperations" => d.enable_batched_operations = f.boolean()?,
            "FilteringMessagesBeforePublishing" => {
                d.filtering_messages_before_publishing = f.boolean()?
            }
            "Status" => d.status = f.status()?,
            "UserMetadata" => d.user_metadata = f.text(),
            "AuthorizationRules" => d.authorization_rules = authorization::parse(child)?,
            "SupportOrdering" => d.support_ordering = f.boolean()?,
            "AutoDeleteOnIdle" => d.auto_delete_on_idle = f.duration()?,
            "EnablePartitioning" => d.enable_partitioning = f.boolean()?,
            "PartitionCount" => d.partition_count = f.number()?,
            "EnableSubscriptionPartitioning" => d.enable_subscription_partitioning = f.boolean()?,
            "EnableExpress" => d.enable_express = f.boolean()?,
            "MaxMessageSizeInKilobytes" => d.max_message_size_in_kilobytes = f.number()?,
            // Read-only and runtime elements (SizeInBytes, CountDetails, SubscriptionCount,
            // CreatedAt, ...) and unknown ones are ignored.
            _ => {}
        }
    }
    Ok((d, omitted))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ironbus_core::{EntityDescription, EntityPath, Timestamp};

    use super::*;
    use crate::atom::{parse_description, Described};

    #[test]
    fn an_entry_round_trips_through_the_parser() {
        let d = TopicDescription {
            default_message_time_to_live: Duration::from_secs(3600),
            requires_duplicate_detection: true,
            enable_partitioning: true,
            partition_count: 4,
            filtering_messages_before_publishing: true,
            user_metadata: Some("m & n".into()),
            max_size_in_megabytes: 2048,
            ..TopicDescription::default()
        };
        let info = EntityInfo {
            path: EntityPath::parse("t/x").unwrap(),
            description: EntityDescription::Topic(d.clone()),
            created_at: Timestamp::from_millis(0),
            updated_at: Timestamp::from_millis(1000),
        };
        let xml = entry("https://h", &info, &d, None);
        assert!(xml.contains("<id>https://h/t/x?api-version=2021-05</id>"), "{xml}");
        assert!(xml.contains("<SubscriptionCount>0</SubscriptionCount>"));
        // Four partitions of 2048 MiB each, reported together; sent back, they stay 2048 each.
        assert!(xml.contains("<MaxSizeInMegabytes>8192</MaxSizeInMegabytes>"), "{xml}");
        let (mut described, omitted) = parse_description(xml.as_bytes()).unwrap();
        crate::atom::fit_partitioned_size(&mut described, &info.description);
        match (described, omitted) {
            (Described::Topic(parsed), omitted) => {
                assert_eq!(parsed, d);
                assert!(!omitted.enable_partitioning && !omitted.requires_duplicate_detection);
            }
            (other, _) => panic!("{}", other.kind()),
        }
    }
}
