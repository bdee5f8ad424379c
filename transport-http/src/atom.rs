//! The ATOM documents of the management API: queue entries and feeds as both admin clients
//! parse them (http.md B.4–B.9), and the parsing of the descriptions they send.
//!
//! Output is written as text in the one shape both clients accept: unprefixed Atom and
//! description elements, `CountDetails` with exactly one `xmlns:d2p1` attribute and prefixed
//! children. Input is parsed namespace-aware and order-insensitive with roxmltree (which refuses
//! DTDs, so no entity expansion); read-only and unknown elements are ignored.

use std::time::Duration;

use ironbus_core::{
    Availability, EntityStatus, QueueDescription, QueueInfo, QueueRuntime, Timestamp,
};

use crate::error::HttpError;
use crate::timefmt::{iso8601, parse_xml_duration, xml_duration};

pub const ATOM_NS: &str = "http://www.w3.org/2005/Atom";
pub const CONNECT_NS: &str = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect";
pub const XSI_NS: &str = "http://www.w3.org/2001/XMLSchema-instance";
pub const COUNT_NS: &str = "http://schemas.microsoft.com/netservices/2011/06/servicebus";
/// The namespace of ironbus's own description elements (`PartitionCount`).
pub const IRONBUS_NS: &str = "urn:ironbus:servicebus:extensions";
/// The api-version shown in ids and links.
const API_VERSION: &str = "2021-05";

pub const ENTRY_CONTENT_TYPE: &str = "application/atom+xml;type=entry;charset=utf-8";
pub const FEED_CONTENT_TYPE: &str = "application/atom+xml;type=feed;charset=utf-8";

/// Escapes text for XML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 cannot carry at all are dropped rather than breaking the document.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => {}
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes each segment of an entity path for a URL (keeping the `/` separators).
pub fn url_path(name: &str) -> String {
    use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
    const SEGMENT: &AsciiSet =
        &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');
    name.split('/')
        .map(|s| utf8_percent_encode(s, SEGMENT).to_string())
        .collect::<Vec<_>>()
        .join("/")
}

fn bool_text(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

/// A queue's `<entry>`: description and runtime view together (the admin clients read both
/// from the same GET). `base` is `scheme://host[:port]` as the client addressed us.
pub fn queue_entry(base: &str, info: &QueueInfo, runtime: Option<&QueueRuntime>) -> String {
    let mut out = String::from(r#"<?xml version="1.0" encoding="utf-8"?>"#);
    out.push_str(&queue_entry_element(base, info, runtime, true));
    out
}

fn queue_entry_element(
    base: &str,
    info: &QueueInfo,
    runtime: Option<&QueueRuntime>,
    declare_ns: bool,
) -> String {
    let d = &info.description;
    let href = format!("{base}/{}?api-version={API_VERSION}", url_path(&info.name));
    let (created, updated) = (iso8601(info.created_at), iso8601(info.updated_at));
    let count = |f: fn(&QueueRuntime) -> u64| runtime.map_or(0, f);
    let availability = match runtime.map(|r| r.availability) {
        Some(Availability::Limited) => "Limited",
        _ => "Available",
    };
    let forward = |target: &Option<String>, element: &str| match target {
        Some(t) => format!("<{element}>{}</{element}>", escape(&format!("{base}/{t}"))),
        None => String::new(),
    };
    let user_metadata = match &d.user_metadata {
        Some(m) => format!("<UserMetadata>{}</UserMetadata>", escape(m)),
        None => String::new(),
    };
    format!(
        concat!(
            r#"<entry{ns}>"#,
            "<id>{href}</id>",
            r#"<title type="text">{title}</title>"#,
            "<published>{created}</published><updated>{updated}</updated>",
            "<author><name>ironbus</name></author>",
            r#"<link rel="self" href="{href}"/>"#,
            r#"<content type="application/xml">"#,
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
            "<AuthorizationRules/>",
            "<Status>{status}</Status>",
            "{forward_to}{user_metadata}",
            "<CreatedAt>{created}</CreatedAt><UpdatedAt>{updated}</UpdatedAt>",
            "<AccessedAt>{updated}</AccessedAt>",
            "<SupportOrdering>true</SupportOrdering>",
            r#"<CountDetails xmlns:d2p1="{count_ns}">"#,
            "<d2p1:ActiveMessageCount>{active}</d2p1:ActiveMessageCount>",
            "<d2p1:DeadLetterMessageCount>{dead}</d2p1:DeadLetterMessageCount>",
            "<d2p1:ScheduledMessageCount>{scheduled}</d2p1:ScheduledMessageCount>",
            "<d2p1:TransferMessageCount>{transfer}</d2p1:TransferMessageCount>",
            "<d2p1:TransferDeadLetterMessageCount>{transfer_dead}</d2p1:TransferDeadLetterMessageCount>",
            "</CountDetails>",
            "<AutoDeleteOnIdle>{never}</AutoDeleteOnIdle>",
            "<EnablePartitioning>{partitioned}</EnablePartitioning>",
            "<EntityAvailabilityStatus>{availability}</EntityAvailabilityStatus>",
            "{forward_dl}",
            "<EnableExpress>false</EnableExpress>",
            "<MaxMessageSizeInKilobytes>{max_message}</MaxMessageSizeInKilobytes>",
            r#"<PartitionCount xmlns="{ironbus}">{partitions}</PartitionCount>"#,
            "</QueueDescription></content></entry>"
        ),
        ns = if declare_ns { format!(r#" xmlns="{ATOM_NS}""#) } else { String::new() },
        href = escape(&href),
        title = escape(&info.name),
        created = created,
        updated = updated,
        connect = CONNECT_NS,
        xsi = XSI_NS,
        lock = xml_duration(d.lock_duration),
        max_size = d.max_size_in_megabytes,
        dedup = bool_text(d.requires_duplicate_detection),
        session = bool_text(d.requires_session),
        ttl = xml_duration(d.default_message_time_to_live),
        dl_exp = bool_text(d.dead_lettering_on_message_expiration),
        window = xml_duration(d.duplicate_detection_history_time_window),
        max_delivery = d.max_delivery_count,
        batched = bool_text(d.enable_batched_operations),
        size = count(|r| r.size_in_bytes),
        messages = count(|r| r.total_message_count),
        status = d.status.as_str(),
        forward_to = forward(&d.forward_to, "ForwardTo"),
        user_metadata = user_metadata,
        count_ns = COUNT_NS,
        active = count(|r| r.active_message_count),
        dead = count(|r| r.dead_letter_message_count),
        scheduled = count(|r| r.scheduled_message_count),
        transfer = count(|r| r.transfer_message_count),
        transfer_dead = count(|r| r.transfer_dead_letter_message_count),
        never = crate::timefmt::TIME_SPAN_MAX_XML,
        partitioned = bool_text(d.enable_partitioning),
        availability = availability,
        forward_dl = forward(&d.forward_dead_lettered_messages_to, "ForwardDeadLetteredMessagesTo"),
        max_message = d.max_message_size_in_kilobytes,
        ironbus = IRONBUS_NS,
        partitions = d.partitions(),
    )
}

/// A feed of queues, one page of a listing. `path` is the listing's path as the client spelled
/// it (e.g. `$Resources/queues`); `more` says whether entries remain after this page, which is
/// the only case with a second (`next`) link: Python follows the second link whenever there are
/// exactly two.
pub fn queue_feed(
    base: &str,
    path: &str,
    skip: usize,
    top: usize,
    queues: &[(QueueInfo, Option<QueueRuntime>)],
    more: bool,
    now: Timestamp,
) -> String {
    let link = |skip: usize| {
        escape(&format!("{base}/{path}?$skip={skip}&$top={top}&api-version={API_VERSION}"))
    };
    let mut out = format!(
        concat!(
            r#"<?xml version="1.0" encoding="utf-8"?>"#,
            r#"<feed xmlns="{ns}"><title type="text">Queues</title><id>{id}</id>"#,
            "<updated>{now}</updated>",
            r#"<link rel="self" href="{id}"/>"#
        ),
        ns = ATOM_NS,
        id = link(skip),
        now = iso8601(now)
    );
    if more {
        out.push_str(&format!(r#"<link rel="next" href="{}"/>"#, link(skip + queues.len())));
    }
    for (info, runtime) in queues {
        out.push_str(&queue_entry_element(base, info, runtime.as_ref(), false));
    }
    out.push_str("</feed>");
    out
}

/// The `$namespaceinfo` entry.
pub fn namespace_info(base: &str, namespace: &str, created: Timestamp) -> String {
    format!(
        concat!(
            r#"<?xml version="1.0" encoding="utf-8"?>"#,
            r#"<entry xmlns="{ns}"><id>{base}/$namespaceinfo?api-version={api}</id>"#,
            r#"<title type="text">{name}</title><updated>{created}</updated>"#,
            "<author><name>{name}</name></author>",
            r#"<link rel="self" href="{base}/$namespaceinfo?api-version={api}"/>"#,
            r#"<content type="application/xml">"#,
            r#"<NamespaceInfo xmlns="{connect}" xmlns:i="{xsi}">"#,
            r#"<Alias i:nil="true"/><CreatedTime>{created}</CreatedTime>"#,
            "<MessagingSKU>Standard</MessagingSKU>",
            r#"<MessagingUnits i:nil="true"/>"#,
            "<ModifiedTime>{created}</ModifiedTime><Name>{name}</Name>",
            "<NamespaceType>Messaging</NamespaceType>",
            "</NamespaceInfo></content></entry>"
        ),
        ns = ATOM_NS,
        base = escape(base),
        api = API_VERSION,
        name = escape(namespace),
        created = iso8601(created),
        connect = CONNECT_NS,
        xsi = XSI_NS,
    )
}

/// What a PUT body describes.
#[derive(Debug)]
pub enum Described {
    Queue(QueueDescription),
    /// A topic, subscription or rule: not supported yet.
    Other(String),
}

/// The create-only fields a body left out, so an update can keep the current values.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Omitted {
    pub enable_partitioning: bool,
    pub partition_count: bool,
    pub requires_session: bool,
    pub requires_duplicate_detection: bool,
}

/// Parses a PUT body: an Atom `<entry>` whose `<content>` holds a description (or, leniently, a
/// bare description). Omitted writable fields take Service Bus's defaults.
pub fn parse_description(body: &[u8]) -> Result<(Described, Omitted), HttpError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| HttpError::bad_request("the request body is not UTF-8 text"))?;
    if text.trim().is_empty() {
        return Err(HttpError::bad_request("the request body is empty: expected an Atom entry"));
    }
    let doc = roxmltree::Document::parse(text)
        .map_err(|e| HttpError::bad_request(format!("malformed XML in the request body: {e}")))?;
    let description = doc
        .descendants()
        .find(|n| n.is_element() && n.tag_name().name().ends_with("Description"))
        .ok_or_else(|| {
            HttpError::bad_request("the request body has no QueueDescription inside an Atom entry")
        })?;
    let kind = description.tag_name().name();
    if kind != "QueueDescription" {
        return Ok((Described::Other(kind.to_owned()), Omitted::default()));
    }
    let mut d = QueueDescription::default();
    let mut omitted = Omitted {
        enable_partitioning: true,
        partition_count: true,
        requires_session: true,
        requires_duplicate_detection: true,
    };
    for child in description.children().filter(|n| n.is_element()) {
        let name = child.tag_name().name();
        let value = child.text().unwrap_or("").trim();
        let field = |e: &str| HttpError::bad_request(format!("invalid {name} {value:?}: {e}"));
        let boolean = || match value.to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(field("expected true or false")),
        };
        let duration = || -> Result<Duration, HttpError> {
            parse_xml_duration(value).ok_or_else(|| field("expected an ISO 8601 duration"))
        };
        match name {
            "LockDuration" => d.lock_duration = duration()?,
            "MaxSizeInMegabytes" => d.max_size_in_megabytes = number(value).map_err(field)?,
            "RequiresDuplicateDetection" => {
                d.requires_duplicate_detection = boolean()?;
                omitted.requires_duplicate_detection = false;
            }
            "RequiresSession" => {
                d.requires_session = boolean()?;
                omitted.requires_session = false;
            }
            "DefaultMessageTimeToLive" => d.default_message_time_to_live = duration()?,
            "DeadLetteringOnMessageExpiration" => {
                d.dead_lettering_on_message_expiration = boolean()?
            }
            "DuplicateDetectionHistoryTimeWindow" => {
                d.duplicate_detection_history_time_window = duration()?
            }
            "MaxDeliveryCount" => d.max_delivery_count = number(value).map_err(field)?,
            "EnableBatchedOperations" => d.enable_batched_operations = boolean()?,
            "Status" => {
                d.status = match value {
                    "Active" => EntityStatus::Active,
                    "Disabled" => EntityStatus::Disabled,
                    "SendDisabled" => EntityStatus::SendDisabled,
                    "ReceiveDisabled" => EntityStatus::ReceiveDisabled,
                    _ => {
                        return Err(field(
                            "expected Active, Disabled, SendDisabled or ReceiveDisabled",
                        ))
                    }
                }
            }
            "ForwardTo" => d.forward_to = forward_target(value),
            "ForwardDeadLetteredMessagesTo" => {
                d.forward_dead_lettered_messages_to = forward_target(value)
            }
            "UserMetadata" => d.user_metadata = (!value.is_empty()).then(|| value.to_owned()),
            "EnablePartitioning" => {
                d.enable_partitioning = boolean()?;
                omitted.enable_partitioning = false;
            }
            "PartitionCount" => {
                d.partition_count = number(value).map_err(field)?;
                omitted.partition_count = false;
            }
            "MaxMessageSizeInKilobytes" => {
                d.max_message_size_in_kilobytes = number(value).map_err(field)?
            }
            // Read-only, runtime and unsupported-but-harmless elements (AutoDeleteOnIdle,
            // EnableExpress, AuthorizationRules, CountDetails, CreatedAt, ...) are ignored.
            _ => {}
        }
    }
    Ok((Described::Queue(d), omitted))
}

fn number<T: std::str::FromStr>(value: &str) -> Result<T, &'static str> {
    value.parse().map_err(|_| "expected a whole number in range")
}

/// `sb://host:port/name`, `https://host/name` or a bare name → the entity name; empty → none.
fn forward_target(value: &str) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    let name = match value.split_once("://") {
        Some((_, rest)) => rest.split_once('/').map_or("", |(_, path)| path),
        None => value,
    };
    let name = name.trim_matches('/');
    (!name.is_empty()).then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(inner: &str) -> String {
        format!(
            r#"<?xml version="1.0" encoding="utf-8"?><entry xmlns="{ATOM_NS}"><content type="application/xml"><QueueDescription xmlns="{CONNECT_NS}" xmlns:i="{XSI_NS}">{inner}</QueueDescription></content></entry>"#
        )
    }

    fn queue(body: &str) -> Result<(QueueDescription, Omitted), HttpError> {
        match parse_description(body.as_bytes())? {
            (Described::Queue(d), omitted) => Ok((d, omitted)),
            (Described::Other(kind), _) => panic!("parsed as {kind}"),
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
    fn topics_are_recognized_as_not_queues() {
        let body = format!(
            r#"<entry xmlns="{ATOM_NS}"><content><TopicDescription xmlns="{CONNECT_NS}"/></content></entry>"#
        );
        assert!(matches!(
            parse_description(body.as_bytes()).unwrap().0,
            Described::Other(kind) if kind == "TopicDescription"
        ));
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
        let xml = queue_entry("https://localhost:5301", &info, None);
        assert!(xml.contains("<id>https://localhost:5301/a/b?api-version=2021-05</id>"));
        assert!(xml.contains(r#"<CountDetails xmlns:d2p1=""#));
        let (parsed, _) = queue(&xml).unwrap();
        assert_eq!(parsed, description);
    }

    #[test]
    fn feeds_link_next_only_while_entries_remain() {
        let now = Timestamp::from_millis(0);
        let last = queue_feed("https://h", "$Resources/queues", 0, 100, &[], false, now);
        assert_eq!(last.matches("<link ").count(), 1);
        let more = queue_feed("https://h", "$Resources/queues", 0, 1, &[], true, now);
        assert_eq!(more.matches("<link ").count(), 2);
        assert!(more.contains(r#"rel="next" href="https://h/$Resources/queues?$skip=0&amp;$top=1"#));
    }
}
