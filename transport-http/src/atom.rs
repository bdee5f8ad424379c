//! The ATOM documents of the management API (http.md B.4–B.9): the entry and feed envelopes
//! every entity kind shares, `$namespaceinfo`, and the dispatch of a PUT body to its kind's
//! parser. Each kind's description — its XML out and in — lives in its own module beside this
//! one ([`queue`], [`topic`], [`subscription`], [`rule`]), and a queue's or topic's
//! `<AuthorizationRules>` in [`authorization`].
//!
//! Before a description reaches the core it passes two checks here: its api-version
//! ([`check_api_version`]), and a MaxMessageSizeInKilobytes within the namespace tier's range
//! ([`fit_to_tier`]; an update may send back the entity's current size).
//!
//! Output is written as text in the one shape both clients accept: unprefixed Atom and
//! description elements, `CountDetails` with exactly one `xmlns:d2p1` attribute and prefixed
//! children. Input is parsed namespace-aware and order-insensitive with roxmltree (which refuses
//! DTDs, so no entity expansion); read-only and unknown elements are ignored.

pub mod authorization;
pub mod queue;
pub mod rule;
pub mod subscription;
pub mod topic;

use ironbus_core::{
    Availability, EntityDescription, EntityKind, QueueDescription, QueueRuntime, RuleDescription,
    SubscriptionDescription, Tier, Timestamp, TopicDescription,
};

use crate::error::HttpError;
use crate::timefmt::iso8601;

pub use queue::Omitted;

pub const ATOM_NS: &str = "http://www.w3.org/2005/Atom";
pub const CONNECT_NS: &str = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect";
pub const XSI_NS: &str = "http://www.w3.org/2001/XMLSchema-instance";
pub const COUNT_NS: &str = "http://schemas.microsoft.com/netservices/2011/06/servicebus";
/// The namespace of ironbus's own description elements (`PartitionCount`).
pub const IRONBUS_NS: &str = "urn:ironbus:servicebus:extensions";
/// The api-version shown in ids and links.
pub(crate) const API_VERSION: &str = "2021-05";
/// The first api-version whose schema has `MaxMessageSizeInKilobytes` (large messages).
pub(crate) const LARGE_MESSAGES_API_VERSION: &str = "2021-05";

/// Refuses a description that uses an element its request's `api-version` does not know, as
/// Service Bus does: `MaxMessageSizeInKilobytes` needs 2021-05 or later (with 2017-04 a queue
/// asking for 1024 KB is a 400). A request without an api-version, or with one not of the
/// `YYYY-MM[-suffix]` form, is not judged; nor is an update that sends back the entity's
/// current value (`echoed`): a get then update with 2017-04 echoes what the get read.
pub fn check_api_version(
    api_version: Option<&str>,
    omitted: &Omitted,
    echoed: bool,
) -> Result<(), HttpError> {
    let (Some(version), Some(element), false) = (api_version, omitted.since_2021_05, echoed) else {
        return Ok(());
    };
    let date = version.get(..7).filter(|d| {
        d.bytes().enumerate().all(|(i, b)| if i == 4 { b == b'-' } else { b.is_ascii_digit() })
    });
    match date {
        Some(date) if date < LARGE_MESSAGES_API_VERSION => Err(HttpError::bad_request(format!(
            "SubCode=40000. {element} is not supported by api-version {version}: it needs \
             api-version {LARGE_MESSAGES_API_VERSION} or later"
        ))),
        _ => Ok(()),
    }
}

/// Holds a queue's or topic's MaxMessageSizeInKilobytes to what the namespace's tier allows:
/// a value the body gives must be in the tier's range, unless it is the entity's `current` one
/// (an update sending back what it read); a new entity that gives none gets the tier's default.
/// A Standard namespace refuses anything but 256 with 400 SubCode=40000, as Microsoft's
/// recording of azure-servicebus's test_mgmt_queue_create_with_queue_description shows for 1024.
pub fn fit_to_tier(
    tier: Tier,
    described: &mut Described,
    omitted: &Omitted,
    current: Option<u64>,
) -> Result<(), HttpError> {
    let size = match described {
        Described::Queue(d) => &mut d.max_message_size_in_kilobytes,
        Described::Topic(d) => &mut d.max_message_size_in_kilobytes,
        Described::Subscription(..) | Described::Rule(_) => return Ok(()),
    };
    if omitted.max_message_size {
        if current.is_none() {
            *size = tier.default_max_message_size_kb();
        }
        return Ok(());
    }
    let range = tier.max_message_sizes_kb();
    if range.contains(size) || current == Some(*size) {
        return Ok(());
    }
    if tier == Tier::Premium {
        return Err(HttpError::bad_request(format!(
            "SubCode=40000. Bad Request. The value of MaxMessageSizeInKilobytes, {size}, is out \
             of range: MaxMessageSizeInKilobytes must be between {} and {}",
            range.start(),
            range.end()
        )));
    }
    let allowed = if range.start() == range.end() {
        format!("only {}", range.start())
    } else {
        format!("{} to {}", range.start(), range.end())
    };
    Err(HttpError::bad_request(format!(
        "SubCode=40000. Bad Request. MaxMessageSizeInKilobytes {size} is not available in the \
         {} tier, which takes {allowed}",
        tier.as_str()
    )))
}

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
    // `$` stays as is (`/Rules/$Default`), as the service and JS spell it.
    const SEGMENT: &AsciiSet =
        &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~').remove(b'$');
    name.split('/')
        .map(|s| utf8_percent_encode(s, SEGMENT).to_string())
        .collect::<Vec<_>>()
        .join("/")
}

pub(crate) fn bool_text(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

/// An `<entry>` around one description: the Atom envelope every kind shares. `base` is
/// `scheme://host[:port]` as the client addressed us; `path` the entity's whole path (with
/// `Subscriptions` / `Rules` capitalised: JS reads names from the `<id>`); `title` its own name
/// (what Python and .NET read); `description` the kind's `<…Description>` element.
#[allow(clippy::too_many_arguments)]
pub(crate) fn entry_element(
    base: &str,
    path: &str,
    title: &str,
    created: Timestamp,
    updated: Timestamp,
    description: &str,
    declare_ns: bool,
) -> String {
    let href = format!("{base}/{}?api-version={API_VERSION}", url_path(path));
    format!(
        concat!(
            r#"<entry{ns}>"#,
            "<id>{href}</id>",
            r#"<title type="text">{title}</title>"#,
            "<published>{created}</published><updated>{updated}</updated>",
            "<author><name>ironbus</name></author>",
            r#"<link rel="self" href="{href}"/>"#,
            r#"<content type="application/xml">"#,
            "{description}",
            "</content></entry>"
        ),
        ns = if declare_ns { format!(r#" xmlns="{ATOM_NS}""#) } else { String::new() },
        href = escape(&href),
        title = escape(title),
        created = iso8601(created),
        updated = iso8601(updated),
        description = description,
    )
}

/// A standalone entry document.
pub(crate) fn entry_document(element: &str) -> String {
    let mut out = String::from(r#"<?xml version="1.0" encoding="utf-8"?>"#);
    out.push_str(element);
    out
}

/// A feed: one page of a listing of entities of `kind`, their entries already written (by the
/// kind's `entry_element`, without their own namespace declaration). `path` is the listing's
/// path as the client spelled it (e.g. `$Resources/queues`); `more` says whether entries remain
/// after this page, which is the only case with a second (`next`) link: Python follows the
/// second link whenever there are exactly two.
#[allow(clippy::too_many_arguments)]
pub(crate) fn feed(
    base: &str,
    path: &str,
    kind: EntityKind,
    skip: usize,
    top: usize,
    entries: &[String],
    more: bool,
    now: Timestamp,
) -> String {
    let title = match kind {
        EntityKind::Queue => "Queues",
        EntityKind::Topic => "Topics",
        EntityKind::Subscription => "Subscriptions",
        EntityKind::Rule => "Rules",
    };
    let link = |skip: usize| {
        escape(&format!("{base}/{path}?$skip={skip}&$top={top}&api-version={API_VERSION}"))
    };
    let mut out = format!(
        concat!(
            r#"<?xml version="1.0" encoding="utf-8"?>"#,
            r#"<feed xmlns="{ns}"><title type="text">{title}</title><id>{id}</id>"#,
            "<updated>{now}</updated>",
            r#"<link rel="self" href="{id}"/>"#
        ),
        ns = ATOM_NS,
        title = title,
        id = link(skip),
        now = iso8601(now)
    );
    if more {
        out.push_str(&format!(r#"<link rel="next" href="{}"/>"#, link(skip + entries.len())));
    }
    for entry in entries {
        out.push_str(entry);
    }
    out.push_str("</feed>");
    out
}

/// The namespace root's document (`GET /`), as Service Bus answers it: an empty feed of
/// "Publicly Listed Services".
pub fn namespace_root(now: Timestamp) -> String {
    format!(
        concat!(
            r#"<?xml version="1.0" encoding="utf-8"?>"#,
            r#"<feed xmlns="{ns}"><title type="text">Publicly Listed Services</title>"#,
            r#"<subtitle type="text">This is the list of publicly-listed services currently "#,
            "available.</subtitle><id>uuid:{id};id=1</id><updated>{now}</updated>",
            "<generator>Service Bus 1.1</generator></feed>"
        ),
        ns = ATOM_NS,
        id = uuid::Uuid::new_v4(),
        now = iso8601(now),
    )
}

/// The `$namespaceinfo` entry.
pub fn namespace_info(base: &str, namespace: &str, created: Timestamp, tier: Tier) -> String {
    // A Premium namespace has messaging units (ironbus reports one); Standard has none.
    let units = match tier {
        Tier::Standard => r#"<MessagingUnits i:nil="true"/>"#,
        Tier::Premium => "<MessagingUnits>1</MessagingUnits>",
    };
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
            "<MessagingSKU>{sku}</MessagingSKU>{units}",
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
        sku = tier.as_str(),
        units = units,
    )
}

/// A partitioned queue's or topic's MaxSizeInMegabytes as an update gives it. Service Bus
/// gives each partition the size and reports all of them together (MaxSizeInMegabytes times
/// the partitions: 16,384 for 1,024 and 16), and clients send back what they read: that total
/// keeps each partition's current size. Any other value is each partition's, as on creation.
pub fn fit_partitioned_size(described: &mut Described, current: &EntityDescription) {
    let (size, each, total) = match (described, current) {
        (Described::Queue(d), EntityDescription::Queue(c)) => {
            (&mut d.max_size_in_megabytes, c.max_size_in_megabytes, c.total_max_size_in_megabytes())
        }
        (Described::Topic(d), EntityDescription::Topic(c)) => {
            (&mut d.max_size_in_megabytes, c.max_size_in_megabytes, c.total_max_size_in_megabytes())
        }
        _ => return,
    };
    if *size == total {
        *size = each;
    }
}

/// What a PUT body describes.
#[derive(Debug)]
pub enum Described {
    Queue(QueueDescription),
    Topic(TopicDescription),
    /// A subscription, and the rule its creation names (`DefaultRuleDescription`), if any.
    Subscription(SubscriptionDescription, Option<(String, RuleDescription)>),
    Rule(RuleDescription),
}

impl Described {
    /// The kind described.
    pub fn entity_kind(&self) -> EntityKind {
        match self {
            Described::Queue(_) => EntityKind::Queue,
            Described::Topic(_) => EntityKind::Topic,
            Described::Subscription(..) => EntityKind::Subscription,
            Described::Rule(_) => EntityKind::Rule,
        }
    }

    /// The MaxMessageSizeInKilobytes of a queue or topic described.
    pub fn max_message_size(&self) -> Option<u64> {
        match self {
            Described::Queue(d) => Some(d.max_message_size_in_kilobytes),
            Described::Topic(d) => Some(d.max_message_size_in_kilobytes),
            Described::Subscription(..) | Described::Rule(_) => None,
        }
    }

    /// The kind's name, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Described::Queue(_) => "queue",
            Described::Topic(_) => "topic",
            Described::Subscription(..) => "subscription",
            Described::Rule(_) => "rule",
        }
    }

    /// The description an update body gives an entity now described by `current`: the body's,
    /// except that a property fixed at creation which the body left out ([`Omitted`]) keeps
    /// its current value (Python and JS re-send what they read, but other clients send only what
    /// they change). `Err` names the body's kind when it is not `current`'s.
    pub fn into_update(
        self,
        current: &EntityDescription,
        omitted: &Omitted,
    ) -> Result<EntityDescription, &'static str> {
        /// Each named field the body left out takes its current value.
        macro_rules! keep_fixed {
            ($d:ident, $current:ident: $($field:ident),+) => {
                $(if omitted.$field {
                    $d.$field = $current.$field;
                })+
            };
        }
        Ok(match (self, current) {
            (Described::Queue(mut d), EntityDescription::Queue(current)) => {
                keep_fixed!(d, current: enable_partitioning, partition_count, requires_session,
                    requires_duplicate_detection);
                EntityDescription::Queue(d)
            }
            (Described::Topic(mut d), EntityDescription::Topic(current)) => {
                keep_fixed!(d, current: enable_partitioning, partition_count,
                    requires_duplicate_detection);
                EntityDescription::Topic(d)
            }
            (Described::Subscription(mut d, _), EntityDescription::Subscription(current)) => {
                keep_fixed!(d, current: requires_session);
                EntityDescription::Subscription(d)
            }
            (Described::Rule(d), EntityDescription::Rule(_)) => EntityDescription::Rule(d),
            (described, _) => return Err(described.kind()),
        })
    }
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
        .find(|n| {
            n.is_element()
                && matches!(
                    n.tag_name().name(),
                    "QueueDescription"
                        | "TopicDescription"
                        | "SubscriptionDescription"
                        | "RuleDescription"
                )
        })
        .ok_or_else(|| {
            HttpError::bad_request(
                "the request body has no QueueDescription, TopicDescription, \
                 SubscriptionDescription or RuleDescription inside an Atom entry",
            )
        })?;
    match description.tag_name().name() {
        "QueueDescription" => {
            let (d, omitted) = queue::parse(description)?;
            Ok((Described::Queue(d), omitted))
        }
        "TopicDescription" => {
            let (d, omitted) = topic::parse(description)?;
            Ok((Described::Topic(d), omitted))
        }
        "SubscriptionDescription" => {
            let (d, rule, omitted) = subscription::parse(description)?;
            Ok((Described::Subscription(d, rule), omitted))
        }
        _ => Ok((Described::Rule(rule::parse(description)?), Omitted::default())),
    }
}

/// One description field being parsed: its name and trimmed text, with the conversions every
/// kind's parser uses; errors are 400s naming the field.
pub(crate) struct Field<'a> {
    pub name: &'a str,
    pub value: &'a str,
}

impl<'a> Field<'a> {
    pub(crate) fn of(node: roxmltree::Node<'a, '_>) -> Self {
        Field { name: node.tag_name().name(), value: node.text().unwrap_or("").trim() }
    }

    pub(crate) fn error(&self, e: &str) -> HttpError {
        HttpError::bad_request(format!("invalid {} {:?}: {e}", self.name, self.value))
    }

    pub(crate) fn boolean(&self) -> Result<bool, HttpError> {
        match self.value.to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(self.error("expected true or false")),
        }
    }

    pub(crate) fn duration(&self) -> Result<std::time::Duration, HttpError> {
        crate::timefmt::parse_xml_duration(self.value)
            .ok_or_else(|| self.error("expected an ISO 8601 duration"))
    }

    pub(crate) fn number<T: std::str::FromStr>(&self) -> Result<T, HttpError> {
        number(self.value).map_err(|e| self.error(e))
    }

    pub(crate) fn status(&self) -> Result<ironbus_core::EntityStatus, HttpError> {
        use ironbus_core::EntityStatus;
        Ok(match self.value {
            "Active" => EntityStatus::Active,
            "Disabled" => EntityStatus::Disabled,
            "SendDisabled" => EntityStatus::SendDisabled,
            "ReceiveDisabled" => EntityStatus::ReceiveDisabled,
            _ => {
                return Err(self.error("expected Active, Disabled, SendDisabled or ReceiveDisabled"))
            }
        })
    }

    /// Optional text: empty is none.
    pub(crate) fn text(&self) -> Option<String> {
        (!self.value.is_empty()).then(|| self.value.to_owned())
    }
}

/// `<CountDetails>` as both clients read it (http.md B.8).
pub(crate) fn count_details(
    active: u64,
    dead: u64,
    scheduled: u64,
    transfer: u64,
    transfer_dead: u64,
) -> String {
    format!(
        concat!(
            r#"<CountDetails xmlns:d2p1="{count_ns}">"#,
            "<d2p1:ActiveMessageCount>{active}</d2p1:ActiveMessageCount>",
            "<d2p1:DeadLetterMessageCount>{dead}</d2p1:DeadLetterMessageCount>",
            "<d2p1:ScheduledMessageCount>{scheduled}</d2p1:ScheduledMessageCount>",
            "<d2p1:TransferMessageCount>{transfer}</d2p1:TransferMessageCount>",
            "<d2p1:TransferDeadLetterMessageCount>{transfer_dead}</d2p1:TransferDeadLetterMessageCount>",
            "</CountDetails>",
        ),
        count_ns = COUNT_NS,
        active = active,
        dead = dead,
        scheduled = scheduled,
        transfer = transfer,
        transfer_dead = transfer_dead,
    )
}

/// An optional text element: absent when `value` is none.
pub(crate) fn optional(element: &str, value: Option<&str>) -> String {
    match value {
        Some(v) => format!("<{element}>{}</{element}>", escape(v)),
        None => String::new(),
    }
}

/// `<EntityAvailabilityStatus>`'s text for a queue's or subscription's runtime figures:
/// `Limited` while a partition cannot serve, else (or without figures) `Available`.
pub(crate) fn availability(runtime: Option<&QueueRuntime>) -> &'static str {
    match runtime.map(|r| r.availability) {
        Some(Availability::Limited) => "Limited",
        _ => "Available",
    }
}

/// A forwarding target's element (`ForwardTo`, `ForwardDeadLetteredMessagesTo`) as Service Bus
/// writes it whatever the api-version: `sb://host[:port]/name`, the host that of `base` (the
/// `https://` or `http://` base the client addressed); absent when there is no target.
pub(crate) fn forward_element(base: &str, element: &str, target: Option<&str>) -> String {
    match target {
        Some(t) => format!("<{element}>{}</{element}>", escape(&forward_url(base, t))),
        None => String::new(),
    }
}

/// `sb://host[:port]/target` for the host of `base` (`scheme://host[:port]`).
pub(crate) fn forward_url(base: &str, target: &str) -> String {
    let host = base.split_once("://").map_or(base, |(_, host)| host);
    format!("sb://{host}/{target}")
}

pub(crate) fn number<T: std::str::FromStr>(value: &str) -> Result<T, &'static str> {
    value.parse().map_err(|_| "expected a whole number in range")
}

/// `sb://host:port/name`, `https://host/name` or a bare name → the entity name; empty → none.
pub(crate) fn forward_target(value: &str) -> Option<String> {
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

    #[test]
    fn api_versions_before_2021_05_refuse_max_message_size() {
        let large =
            Omitted { since_2021_05: Some("MaxMessageSizeInKilobytes"), ..Omitted::default() };
        let refused = check_api_version(Some("2017-04"), &large, false).unwrap_err();
        assert_eq!(refused.status.as_u16(), 400);
        assert!(refused.detail.contains("api-version 2017-04"), "{}", refused.detail);
        for fine in [Some("2021-05"), Some("2024-05"), Some("2021-05-preview"), None, Some("x")] {
            assert!(check_api_version(fine, &large, false).is_ok(), "{fine:?}");
        }
        assert!(check_api_version(Some("2017-04"), &Omitted::default(), false).is_ok());
        // An update sending back the entity's current value is what a get then update does.
        assert!(check_api_version(Some("2017-04"), &large, true).is_ok());
    }

    #[test]
    fn forward_targets_are_sb_urls_whatever_the_scheme_of_the_request() {
        for base in ["https://ns.example:5301", "http://ns.example:5301"] {
            assert_eq!(
                forward_element(base, "ForwardTo", Some("dest")),
                "<ForwardTo>sb://ns.example:5301/dest</ForwardTo>"
            );
        }
        assert_eq!(forward_element("https://h", "ForwardTo", None), "");
    }

    #[test]
    fn an_update_sending_a_partitioned_total_back_keeps_each_partitions_size() {
        let partitioned = QueueDescription {
            enable_partitioning: true,
            max_size_in_megabytes: 1024,
            ..QueueDescription::default()
        };
        let current = EntityDescription::Queue(partitioned.clone());
        for (given, kept) in [(16_384, 1024), (2048, 2048), (1024, 1024)] {
            let mut described = Described::Queue(QueueDescription {
                max_size_in_megabytes: given,
                ..partitioned.clone()
            });
            fit_partitioned_size(&mut described, &current);
            match described {
                Described::Queue(d) => assert_eq!(d.max_size_in_megabytes, kept, "{given}"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn feeds_link_next_only_while_entries_remain() {
        let now = Timestamp::from_millis(0);
        let queues = |top, more| {
            feed("https://h", "$Resources/queues", EntityKind::Queue, 0, top, &[], more, now)
        };
        let last = queues(100, false);
        assert_eq!(last.matches("<link ").count(), 1);
        assert!(last.contains(r#"<title type="text">Queues</title>"#), "{last}");
        let more = queues(1, true);
        assert_eq!(more.matches("<link ").count(), 2);
        assert!(more.contains(r#"rel="next" href="https://h/$Resources/queues?$skip=0&amp;$top=1"#));
    }

    #[test]
    fn the_description_element_decides_the_kind() {
        for (element, kind) in [
            ("QueueDescription", "queue"),
            ("TopicDescription", "topic"),
            ("SubscriptionDescription", "subscription"),
            ("RuleDescription", "rule"),
        ] {
            let body = format!(
                r#"<entry xmlns="{ATOM_NS}"><content><{element} xmlns="{CONNECT_NS}"/></content></entry>"#
            );
            assert_eq!(parse_description(body.as_bytes()).unwrap().0.kind(), kind);
        }
    }
}
