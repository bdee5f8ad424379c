//! A queue's description in ATOM: the `<QueueDescription>` element of an entry (with the
//! queue's runtime counts) and the parsing of a PUT body's description.
//!
//! Output is written as text in the one shape both admin clients accept: unprefixed
//! description elements, `CountDetails` with exactly one `xmlns:d2p1` attribute and prefixed
//! children. An update that omits a field fixed at creation keeps its value ([`Omitted`]).

use ironbus_core::{QueueDescription, QueueInfo, QueueRuntime};

use crate::atom::authorization;
use crate::atom::{
    self, availability, bool_text, entry_document, forward_element, forward_target, optional,
    Field, CONNECT_NS, IRONBUS_NS, XSI_NS,
};
use crate::error::HttpError;
use crate::timefmt::{iso8601, xml_duration};

/// A queue's `<entry>`: description and runtime view together (the admin clients read both
/// from the same GET). `base` is `scheme://host[:port]` as the client addressed us.
pub fn entry(base: &str, info: &QueueInfo, runtime: Option<&QueueRuntime>) -> String {
    entry_document(&entry_element(base, info, runtime, true))
}

pub(crate) fn entry_element(
    base: &str,
    info: &QueueInfo,
    runtime: Option<&QueueRuntime>,
    declare_ns: bool,
) -> String {
    let description = description_element(base, info, runtime);
    atom::entry_element(
        base,
        &info.name,
        &info.name,
        info.created_at,
        info.updated_at,
        &description,
        declare_ns,
    )
}

/// The `<QueueDescription>` element, runtime counts included.
fn description_element(base: &str, info: &QueueInfo, runtime: Option<&QueueRuntime>) -> String {
    let d = &info.description;
    let (created, updated) = (iso8601(info.created_at), iso8601(info.updated_at));
    let count = |f: fn(&QueueRuntime) -> u64| runtime.map_or(0, f);
    format!(
        concat!(
            r#"<QueueDescription xmlns="{connect}" xmlns:i="{xsi}">"#,
            "<LockDuration>{lock}</LockDuration>",
            "<MaxSizeInMegabytes>{max_size}</MaxSizeInMegabytes>",
            "<RequiresDuplicateDetection>{dedup}</RequiresDuplicateDetection>",
            "<RequiresSession>{session}</RequiresSession>",
            "<DefaultMessageTimeToLive>{ttl}</DefaultMessageTimeToLive>",
            "<DeadLetteringOnMessageExpiration>{dl_exp}</DeadLetteringOnMessageExpiration>",
            "<DuplicateDetectionHistoryTimeWindow>{window}</DuplicateDetectionHistoryTimeWindow>",
            "<MaxDeliveryCount>{max_delivery}</MaxDeliveryCount>",
            "<EnableBatchedOperations>{batched}</EnableBatchedOperations>",
            "<SizeInBytes>{size}</SizeInBytes>",
            "<MessageCount>{messages}</MessageCount>",
            "<IsAnonymousAccessible>false</IsAnonymousAccessible>",
            "{rules}",
            "<Status>{status}</Status>",
            "{forward_to}{user_metadata}",
            "<CreatedAt>{created}</CreatedAt><UpdatedAt>{updated}</UpdatedAt>",
            "<AccessedAt>{updated}</AccessedAt>",
            "<SupportOrdering>true</SupportOrdering>",
            "{count_details}",
            "<AutoDeleteOnIdle>{auto_delete}</AutoDeleteOnIdle>",
            "<EnablePartitioning>{partitioned}</EnablePartitioning>",
            "<EntityAvailabilityStatus>{availability}</EntityAvailabilityStatus>",
            "{forward_dl}",
            "<EnableExpress>{express}</EnableExpress>",
            "<MaxMessageSizeInKilobytes>{max_message}</MaxMessageSizeInKilobytes>",
            r#"<PartitionCount xmlns="{ironbus}">{partitions}</PartitionCount>"#,
            "</QueueDescription>"
        ),
        created = created,
        updated = updated,
        connect = CONNECT_NS,
        xsi = XSI_NS,
        lock = xml_duration(d.lock_duration),
        // All partitions together, as Service Bus reports it.
        max_size = d.total_max_size_in_megabytes(),
        dedup = bool_text(d.requires_duplicate_detection),
        session = bool_text(d.requires_session),
        ttl = xml_duration(d.default_message_time_to_live),
        dl_exp = bool_text(d.dead_lettering_on_message_expiration),
        window = xml_duration(d.duplicate_detection_history_time_window),
        max_delivery = d.max_delivery_count,
        batched = bool_text(d.enable_batched_operations),
        size = count(|r| r.size_in_bytes),
        messages = count(|r| r.total_message_count),
        rules = authorization::element(&d.authorization_rules, info.created_at, info.updated_at),
        status = d.status.as_str(),
        forward_to = forward_element(base, "ForwardTo", d.forward_to.as_deref()),
        user_metadata = optional("UserMetadata", d.user_metadata.as_deref()),
        count_details = atom::count_details(
            count(|r| r.active_message_count),
            count(|r| r.dead_letter_message_count),
            count(|r| r.scheduled_message_count),
            count(|r| r.transfer_message_count),
            count(|r| r.transfer_dead_letter_message_count),
        ),
        auto_delete = xml_duration(d.auto_delete_on_idle),
        express = bool_text(d.enable_express),
        partitioned = bool_text(d.enable_partitioning),
        availability = availability(runtime),
        forward_dl = forward_element(
            base,
            "ForwardDeadLetteredMessagesTo",
            d.forward_dead_lettered_messages_to.as_deref()
        ),
        max_message = d.max_message_size_in_kilobytes,
        ironbus = IRONBUS_NS,
        partitions = d.partitions(),
    )
}

/// The create-only fields a body left out, so an update can keep the current values; and the
/// newest schema element it gave, for the api-version check ([`atom::check_api_version`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Omitted {
    pub enable_partitioning: bool,
    pub partition_count: bool,
    pub requires_session: bool,
    pub requires_duplicate_detection: bool,
    /// `MaxMessageSizeInKilobytes` (writable, but its range depends on the namespace's tier).
    pub max_message_size: bool,
    /// An element the body gave that only api-version 2021-05 and later know
    /// (`MaxMessageSizeInKilobytes`).
    pub since_2021_05: Option<&'static str>,
}

impl Omitted {
    /// Where a parser starts: every create-only field left out, no newer element given.
    pub(crate) fn all() -> Self {
        Omitted {
            enable_partitioning: true,
            partition_count: true,
            requires_session: true,
            requires_duplicate_detection: true,
            max_message_size: true,
            since_2021_05: None,
        }
    }

    /// Notes that a queue's or topic's body gives the element `name`, if it is one of those
    /// tracked here.
    pub(crate) fn given(&mut self, name: &str) {
        match name {
            "EnablePartitioning" => self.enable_partitioning = false,
            "PartitionCount" => self.partition_count = false,
            "RequiresSession" => self.requires_session = false,
            "RequiresDuplicateDetection" => self.requires_duplicate_detection = false,
            "MaxMessageSizeInKilobytes" => {
                self.max_message_size = false;
                self.since_2021_05 = Some("MaxMessageSizeInKilobytes");
            }
            _ => {}
        }
    }
}

/// Parses a `<QueueDescription>` element. Omitted writable fields take Service Bus's defaults;
/// [`Omitted`] says which create-only fields were left out.
pub(crate) fn parse(
    description: roxmltree::Node<'_, '_>,
) -> Result<(QueueDescription, Omitted), HttpError> {
    let mut d = QueueDescription::default();
    let mut omitted = Omitted::all();
    for child in description.children().filter(|n| n.is_element()) {
        let f = Field::of(child);
        omitted.given(f.name);
        match f.name {
            "LockDuration" => d.lock_duration = f.duration()?,
            "MaxSizeInMegabytes" => d.max_size_in_megabytes = f.number()?,
            "RequiresDuplicateDetection" => d.requires_duplicate_detection = f.boolean()?,
            "RequiresSession" => d.requires_session = f.boolean()?,
            "DefaultMessageTimeToLive" => d.default_message_time_to_live = f.duration()?,
            "AutoDeleteOnIdle" => d.auto_delete_on_idle = f.duration()?,
            "EnableExpress" => d.enable_express = f.boolean()?,
            "DeadLetteringOnMessageExpiration" => {
                d.dead_lettering_on_message_expiration = f.boolean()?
            }
            "DuplicateDetectionHistoryTimeWindow" => {
                d.duplicate_detection_history_time_window = f.duration()?
            }
            "MaxDeliveryCount" => d.max_delivery_count = f.number()?,
            "EnableBatchedOperations" => d.enable_batched_operations = f.boolean()?,
            "Status" => d.status = f.status()?,
            "ForwardTo" => d.forward_to = forward_target(f.value),
            "ForwardDeadLetteredMessagesTo" => {
                d.forward_dead_lettered_messages_to = forward_target(f.value)
            }
            "UserMetadata" => d.user_metadata = f.text(),
            "AuthorizationRules" => d.authorization_rules = authorization::parse(child)?,
            "EnablePartitioning" => d.enable_partitioning = f.boolean()?,
            "PartitionCount" => d.partition_count = f.number()?,
            "MaxMessageSizeInKilobytes" => d.max_message_size_in_kilobytes = f.number()?,
            // Read-only and runtime elements (CountDetails, CreatedAt, ...) are ignored.
            _ => {}
        }
    }
    Ok((d, omitted))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ironbus_core::{EntityStatus, Timestamp};

    use super::*;
    use crate::atom::{parse_description, Described, ATOM_NS, CONNECT_NS, XSI_NS};

    fn entry(inner: &str) -> String {
        format!(
            r#"<?xml version="1.0" encoding="utf-8"?><entry xmlns="{ATOM_NS}"><content type="application/xml"><QueueDescription xmlns="{CONNECT_NS}" xmlns:i="{XSI_NS}">{inner}</QueueDescription></content></entry>"#
        )
    }

    fn queue(body: &str) -> Result<(QueueDescription, Omitted), HttpError> {
        match parse_description(body.as_bytes())? {
            (Described::Queue(d), omitted) => Ok((d, omitted)),
            (other, _) => panic!("parsed as {}", other.kind()),
        }
    }

    #[test]
    fn description_fields_parse_in_any_order_and_junk_is_ignored() {
        let (d, omitted) = queue(&entry(
            "<MaxDeliveryCount>3</MaxDeliveryCount><CountDetails><x>1</x></CountDetails>\
             <LockDuration>PT45S</LockDuration><EnablePartitioning>true</EnablePartitioning>\
             <ForwardTo>sb://localhost:5300/dest</ForwardTo><Unknown>?</Unknown>\
             <PartitionCount xmlns=\"urn:ironbus:servicebus:extensions\">4</PartitionCount>\
             <Status>SendDisabled</Status><UserMetadata>m &amp; n</UserMetadata>",
        ))
        .unwrap();
        assert_eq!(d.max_delivery_count, 3);
        assert_eq!(d.lock_duration, Duration::from_secs(45));
        assert!(d.enable_partitioning);
        assert_eq!(d.partition_count, 4);
        assert_eq!(d.forward_to.as_deref(), Some("dest"));
        assert_eq!(d.status, EntityStatus::SendDisabled);
        assert_eq!(d.user_metadata.as_deref(), Some("m & n"));
        assert!(!omitted.enable_partitioning && !omitted.partition_count);
        assert!(omitted.requires_session);
    }

    #[test]
    fn malformed_bodies_are_bad_requests_with_a_reason() {
        for (body, wants) in [
            ("", "empty"),
            ("<entry", "malformed XML"),
            ("<entry><content/></entry>", "no QueueDescription"),
            ("\u{0}\u{1}garbage", "malformed XML"),
            (r#"<!DOCTYPE x [<!ENTITY a "aaaaaaaa">]><entry>&a;</entry>"#, "malformed XML"),
        ] {
            let e = parse_description(body.as_bytes()).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{body}");
            assert!(e.detail.contains(wants), "{body}: {}", e.detail);
        }
        // Deep nesting (within the 4 MiB body limit) is refused, not a stack overflow.
        let deep = format!("{}{}", "<a>".repeat(500_000), "</a>".repeat(500_000));
        assert_eq!(parse_description(deep.as_bytes()).unwrap_err().status.as_u16(), 400);
        let bad_utf8 = parse_description(&[0xff, 0xfe, b'<']).unwrap_err();
        assert_eq!(bad_utf8.status.as_u16(), 400);
        for inner in [
            "<LockDuration>soon</LockDuration>",
            "<MaxDeliveryCount>-1</MaxDeliveryCount>",
            "<RequiresSession>yes</RequiresSession>",
            "<Status>Sleeping</Status>",
            "<PartitionCount>99999</PartitionCount>",
        ] {
            let e = queue(&entry(inner)).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{inner}");
        }
    }

    #[test]
    fn an_entry_round_trips_through_the_parser() {
        let description = QueueDescription {
            lock_duration: Duration::from_secs(30),
            enable_partitioning: true,
            partition_count: 4,
            user_metadata: Some("<meta>".into()),
            ..QueueDescription::default()
        };
        let info = QueueInfo {
            name: "a/b".into(),
            description: description.clone(),
            created_at: Timestamp::from_millis(0),
            updated_at: Timestamp::from_millis(1000),
        };
        let xml = super::entry("https://localhost:5301", &info, None);
        assert!(xml.contains("<id>https://localhost:5301/a/b?api-version=2021-05</id>"));
        assert!(xml.contains(r#"<CountDetails xmlns:d2p1=""#));
        // Four partitions of 1024 MiB each, reported together; sent back, they stay 1024 each.
        assert!(xml.contains("<MaxSizeInMegabytes>4096</MaxSizeInMegabytes>"), "{xml}");
        let (parsed, _) = queue(&xml).unwrap();
        let mut described = Described::Queue(parsed);
        let current = ironbus_core::EntityDescription::Queue(description.clone());
        crate::atom::fit_partitioned_size(&mut described, &current);
        match described {
            Described::Queue(parsed) => assert_eq!(parsed, description),
            other => panic!("{}", other.kind()),
        }
    }
}
