//! The ATOM documents of Service Bus's management API, read and written as a small element
//! tree ([`Element`]) rather than typed structs: what the CLI shows, exports and updates is the
//! description's elements by name, in the order the broker wrote them, so an update changes
//! only what was asked and sends back everything else as it came (unknown elements included).
//!
//! Reading uses roxmltree (namespace-aware, no DTDs). Writing puts description elements in the
//! connect namespace unprefixed, `i:` for XMLSchema-instance attributes, and declares any other
//! namespace on the element that uses it.

use std::fmt::Write as _;

use crate::error::{CliError, Result};

/// The Atom namespace.
pub const ATOM_NS: &str = "http://www.w3.org/2005/Atom";
/// The namespace of Service Bus descriptions.
pub const CONNECT_NS: &str = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect";
/// XMLSchema-instance (`i:type`, `i:nil`).
pub const XSI_NS: &str = "http://www.w3.org/2001/XMLSchema-instance";
/// ironbus's extension elements (`PartitionCount`).
pub const IRONBUS_NS: &str = "urn:ironbus:servicebus:extensions";
/// The api-version of every request.
pub const API_VERSION: &str = "2021-05";

/// The kinds of entity the management API describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A queue (`QueueDescription`).
    Queue,
    /// A topic (`TopicDescription`).
    Topic,
    /// A subscription of a topic (`SubscriptionDescription`).
    Subscription,
    /// A rule of a subscription (`RuleDescription`).
    Rule,
}

impl Kind {
    /// The description element's name.
    pub fn element(self) -> &'static str {
        match self {
            Kind::Queue => "QueueDescription",
            Kind::Topic => "TopicDescription",
            Kind::Subscription => "SubscriptionDescription",
            Kind::Rule => "RuleDescription",
        }
    }

    /// The kind's name for people (`queue`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Queue => "queue",
            Kind::Topic => "topic",
            Kind::Subscription => "subscription",
            Kind::Rule => "rule",
        }
    }

    /// The writable elements in the order Service Bus's schema has them (the order a create
    /// or an update must send them in).
    pub fn schema_order(self) -> &'static [&'static str] {
        match self {
            Kind::Queue => &[
                "LockDuration",
                "MaxSizeInMegabytes",
                "RequiresDuplicateDetection",
                "RequiresSession",
                "DefaultMessageTimeToLive",
                "DeadLetteringOnMessageExpiration",
                "DuplicateDetectionHistoryTimeWindow",
                "MaxDeliveryCount",
                "EnableBatchedOperations",
                "AuthorizationRules",
                "Status",
                "ForwardTo",
                "UserMetadata",
                "AutoDeleteOnIdle",
                "EnablePartitioning",
                "ForwardDeadLetteredMessagesTo",
                "EnableExpress",
                "MaxMessageSizeInKilobytes",
                "PartitionCount",
            ],
            Kind::Topic => &[
                "DefaultMessageTimeToLive",
                "MaxSizeInMegabytes",
                "RequiresDuplicateDetection",
                "DuplicateDetectionHistoryTimeWindow",
                "EnableBatchedOperations",
                "AuthorizationRules",
                "Status",
                "UserMetadata",
                "SupportOrdering",
                "AutoDeleteOnIdle",
                "EnablePartitioning",
                "EnableExpress",
                "MaxMessageSizeInKilobytes",
                "PartitionCount",
            ],
            Kind::Subscription => &[
                "LockDuration",
                "RequiresSession",
                "DefaultMessageTimeToLive",
                "DeadLetteringOnMessageExpiration",
                "DeadLetteringOnFilterEvaluationExceptions",
                "DefaultRuleDescription",
                "MaxDeliveryCount",
                "EnableBatchedOperations",
                "Status",
                "ForwardTo",
                "UserMetadata",
                "ForwardDeadLetteredMessagesTo",
                "AutoDeleteOnIdle",
            ],
            Kind::Rule => &["Filter", "Action", "Name"],
        }
    }

    /// Elements the broker computes, never sent back.
    fn read_only(name: &str) -> bool {
        matches!(
            name,
            "SizeInBytes"
                | "MessageCount"
                | "CreatedAt"
                | "UpdatedAt"
                | "AccessedAt"
                | "CountDetails"
                | "EntityAvailabilityStatus"
                | "SubscriptionCount"
                | "IsAnonymousAccessible"
        )
    }
}

/// An XML element: name, namespace, attributes, text or children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    /// The local name.
    pub name: String,
    /// The namespace URI (empty: none).
    pub namespace: String,
    /// Attributes: namespace URI, local name, value.
    pub attributes: Vec<(String, String, String)>,
    /// Namespace declarations an attribute value needs (`i:type="d6p1:string"`): prefix, URI.
    pub declarations: Vec<(String, String)>,
    /// The text, for an element without children.
    pub text: String,
    /// The child elements.
    pub children: Vec<Element>,
}

impl Element {
    /// A text element in the connect namespace.
    pub fn text(name: &str, text: impl Into<String>) -> Self {
        Element {
            name: name.to_owned(),
            namespace: CONNECT_NS.to_owned(),
            attributes: Vec::new(),
            declarations: Vec::new(),
            text: text.into(),
            children: Vec::new(),
        }
    }

    /// An element in the connect namespace with `children`.
    pub fn parent(name: &str, children: Vec<Element>) -> Self {
        Element { children, ..Element::text(name, "") }
    }

    /// Adds an `i:type` attribute.
    pub fn typed(mut self, xsi_type: &str) -> Self {
        self.attributes.push((XSI_NS.to_owned(), "type".to_owned(), xsi_type.to_owned()));
        self
    }

    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// The text of the first child named `name`, if it has text.
    pub fn child_text(&self, name: &str) -> Option<&str> {
        self.child(name).filter(|c| c.children.is_empty() && !c.is_nil()).map(|c| c.text.as_str())
    }

    /// The value of the attribute `name` in namespace `namespace`.
    pub fn attribute(&self, namespace: &str, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(ns, n, _)| ns == namespace && n == name)
            .map(|(_, _, v)| v.as_str())
    }

    /// Whether the element is `i:nil="true"`.
    pub fn is_nil(&self) -> bool {
        self.attribute(XSI_NS, "nil") == Some("true")
    }

    /// Sets the text of the child `name`, inserting it where `order` puts it when missing.
    pub fn set(&mut self, name: &str, text: impl Into<String>, order: &[&str]) {
        self.put(Element::text(name, text), order);
    }

    /// Replaces the child named like `element`, or inserts it where `order` puts it.
    pub fn put(&mut self, element: Element, order: &[&str]) {
        if let Some(existing) = self.children.iter_mut().find(|c| c.name == element.name) {
            *existing = element;
            return;
        }
        let rank = |n: &str| order.iter().position(|o| *o == n);
        let at = match rank(&element.name) {
            Some(mine) => self
                .children
                .iter()
                .position(|c| rank(&c.name).is_some_and(|theirs| theirs > mine))
                .unwrap_or(self.children.len()),
            None => self.children.len(),
        };
        self.children.insert(at, element);
    }

    /// Removes the child named `name`.
    pub fn remove(&mut self, name: &str) {
        self.children.retain(|c| c.name != name);
    }

    /// Writes the element as XML; `parent_ns` is the default namespace in scope.
    fn write(&self, out: &mut String, parent_ns: &str) {
        let _ = write!(out, "<{}", self.name);
        if self.namespace != parent_ns {
            let _ = write!(out, r#" xmlns="{}""#, escape(&self.namespace));
        }
        for (prefix, uri) in &self.declarations {
            let _ = write!(out, r#" xmlns:{prefix}="{}""#, escape(uri));
        }
        for (ns, name, value) in &self.attributes {
            let prefix = if ns == XSI_NS { "i:" } else { "" };
            let _ = write!(out, r#" {prefix}{name}="{}""#, escape(value));
        }
        if self.children.is_empty() && self.text.is_empty() {
            out.push_str("/>");
            return;
        }
        out.push('>');
        out.push_str(&escape(&self.text));
        for child in &self.children {
            child.write(out, &self.namespace);
        }
        let _ = write!(out, "</{}>", self.name);
    }

    fn from_node(node: roxmltree::Node<'_, '_>) -> Self {
        let mut attributes = Vec::new();
        let mut declarations = Vec::new();
        for a in node.attributes() {
            let ns = a.namespace().unwrap_or_default().to_owned();
            if ns == XSI_NS && a.name() == "type" {
                if let Some((prefix, _)) = a.value().split_once(':') {
                    if let Some(uri) = node.lookup_namespace_uri(Some(prefix)) {
                        declarations.push((prefix.to_owned(), uri.to_owned()));
                    }
                }
            }
            attributes.push((ns, a.name().to_owned(), a.value().to_owned()));
        }
        let children: Vec<Element> =
            node.children().filter(|c| c.is_element()).map(Element::from_node).collect();
        let text = if children.is_empty() {
            node.children().filter_map(|c| c.text()).collect::<String>()
        } else {
            String::new()
        };
        Element {
            name: node.tag_name().name().to_owned(),
            namespace: node.tag_name().namespace().unwrap_or_default().to_owned(),
            attributes,
            declarations,
            text,
            children,
        }
    }
}

/// One entity as the management API describes it: its name (the entry's title) and its
/// description element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entity's own name (a subscription's or rule's name without its parents).
    pub name: String,
    /// The kind, from the description element.
    pub kind: Kind,
    /// The `<…Description>` element.
    pub description: Element,
}

impl Entry {
    /// A new description of `kind` with `children`, for a create.
    pub fn new(kind: Kind, name: &str, children: Vec<Element>) -> Self {
        Entry {
            name: name.to_owned(),
            kind,
            description: Element::parent(kind.element(), children),
        }
    }

    /// The PUT body for this description: read-only elements left out.
    pub fn to_put_body(&self) -> String {
        let mut description = self.description.clone();
        description.children.retain(|c| !Kind::read_only(&c.name));
        description.namespace = CONNECT_NS.to_owned();
        let mut out = format!(
            r#"<?xml version="1.0" encoding="utf-8"?><entry xmlns="{ATOM_NS}"><content type="application/xml">"#
        );
        let start = out.len();
        description.write(&mut out, ATOM_NS);
        // The description declares `i` for the `i:` attributes anywhere below it.
        let after_name = start + 1 + description.name.len();
        out.insert_str(after_name, &format!(r#" xmlns:i="{XSI_NS}""#));
        out.push_str("</content></entry>");
        out
    }

    /// The text of the description's child `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.description.child_text(name)
    }

    /// A count of `CountDetails` (`ActiveMessageCount`, ...), 0 when absent.
    pub fn count(&self, name: &str) -> u64 {
        self.description
            .child("CountDetails")
            .and_then(|c| c.child_text(name))
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    }

    /// A number element, 0 when absent.
    pub fn number(&self, name: &str) -> u64 {
        self.get(name).and_then(|t| t.trim().parse().ok()).unwrap_or(0)
    }

    /// A boolean element, false when absent.
    pub fn flag(&self, name: &str) -> bool {
        self.get(name).is_some_and(|t| t.trim().eq_ignore_ascii_case("true"))
    }
}

/// What a GET answered: one entry, or a feed of them (with whether a next page exists).
#[derive(Debug)]
pub enum Document {
    /// One `<entry>`.
    Entry(Entry),
    /// A `<feed>`: its entries, and whether it links to a next page.
    Feed(Vec<Entry>, bool),
}

/// Parses an ATOM entry or feed.
pub fn parse(xml: &str) -> Result<Document> {
    let doc = roxmltree::Document::parse(xml).map_err(|e| {
        CliError::protocol("the management API answered XML that does not parse").with_source(e)
    })?;
    let root = doc.root_element();
    match root.tag_name().name() {
        "entry" => Ok(Document::Entry(entry(root)?)),
        "feed" => {
            let entries = root
                .children()
                .filter(|c| c.has_tag_name((ATOM_NS, "entry")))
                .map(entry)
                .collect::<Result<Vec<_>>>()?;
            let next = root
                .children()
                .any(|c| c.has_tag_name((ATOM_NS, "link")) && c.attribute("rel") == Some("next"));
            Ok(Document::Feed(entries, next))
        }
        other => Err(CliError::protocol(format!("expected an ATOM entry or feed, got <{other}>"))),
    }
}

fn entry(node: roxmltree::Node<'_, '_>) -> Result<Entry> {
    let name = node
        .children()
        .find(|c| c.has_tag_name((ATOM_NS, "title")))
        .and_then(|t| t.text())
        .unwrap_or_default()
        .to_owned();
    let description = node
        .children()
        .find(|c| c.has_tag_name((ATOM_NS, "content")))
        .and_then(|c| c.children().find(|d| d.is_element()))
        .ok_or_else(|| CliError::protocol(format!("the entry of `{name}` has no description")))?;
    let kind = match description.tag_name().name() {
        "QueueDescription" => Kind::Queue,
        "TopicDescription" => Kind::Topic,
        "SubscriptionDescription" => Kind::Subscription,
        "RuleDescription" => Kind::Rule,
        other => return Err(CliError::protocol(format!("unexpected description <{other}>"))),
    };
    Ok(Entry { name, kind, description: Element::from_node(description) })
}

/// Escapes text for XML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUEUE: &str = r#"<?xml version="1.0" encoding="utf-8"?><entry xmlns="http://www.w3.org/2005/Atom"><title type="text">orders</title><content type="application/xml"><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><LockDuration>PT1M</LockDuration><MaxDeliveryCount>10</MaxDeliveryCount><SizeInBytes>42</SizeInBytes><Status>Active</Status><ForwardTo i:nil="true"/><CountDetails xmlns:d2p1="http://schemas.microsoft.com/netservices/2011/06/servicebus"><d2p1:ActiveMessageCount>3</d2p1:ActiveMessageCount><d2p1:DeadLetterMessageCount>1</d2p1:DeadLetterMessageCount></CountDetails><EnablePartitioning>true</EnablePartitioning><PartitionCount xmlns="urn:ironbus:servicebus:extensions">4</PartitionCount></QueueDescription></content></entry>"#;

    #[test]
    fn an_entry_reads_its_fields_and_counts() {
        let Document::Entry(entry) = parse(QUEUE).unwrap() else { panic!("an entry") };
        assert_eq!((entry.name.as_str(), entry.kind), ("orders", Kind::Queue));
        assert_eq!(entry.get("LockDuration"), Some("PT1M"));
        assert_eq!(entry.get("ForwardTo"), None, "nil");
        assert_eq!(
            (entry.count("ActiveMessageCount"), entry.count("DeadLetterMessageCount")),
            (3, 1)
        );
        assert_eq!((entry.number("SizeInBytes"), entry.number("PartitionCount")), (42, 4));
        assert!(entry.flag("EnablePartitioning"));
    }

    #[test]
    fn a_put_body_leaves_out_read_only_elements_and_keeps_namespaces() {
        let Document::Entry(mut entry) = parse(QUEUE).unwrap() else { panic!("an entry") };
        entry.description.set("MaxDeliveryCount", "5", Kind::Queue.schema_order());
        entry.description.set("RequiresSession", "true", Kind::Queue.schema_order());
        let body = entry.to_put_body();
        assert!(!body.contains("SizeInBytes") && !body.contains("CountDetails"), "{body}");
        let Document::Entry(again) = parse(&body).unwrap() else { panic!("an entry") };
        assert_eq!(again.get("MaxDeliveryCount"), Some("5"));
        assert_eq!(again.number("PartitionCount"), 4);
        let partition = again.description.child("PartitionCount").unwrap();
        assert_eq!(partition.namespace, IRONBUS_NS);
        let names: Vec<&str> = again.description.children.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "LockDuration",
                "RequiresSession",
                "MaxDeliveryCount",
                "Status",
                "ForwardTo",
                "EnablePartitioning",
                "PartitionCount"
            ],
            "inserted in schema order"
        );
        assert!(again.description.child("ForwardTo").unwrap().is_nil());
    }

    #[test]
    fn a_feed_lists_its_entries_and_its_next_page() {
        let feed = format!(
            r#"<feed xmlns="{ATOM_NS}"><title>Queues</title><link rel="next" href="x"/>{}</feed>"#,
            QUEUE.trim_start_matches(r#"<?xml version="1.0" encoding="utf-8"?>"#)
        );
        let Document::Feed(entries, next) = parse(&feed).unwrap() else { panic!("a feed") };
        assert_eq!(entries.len(), 1);
        assert!(next);
        assert!(parse("<nope/>").is_err());
        assert!(parse("not xml").is_err());
    }

    #[test]
    fn typed_attributes_keep_the_namespace_their_value_names() {
        let xml = format!(
            r#"<entry xmlns="{ATOM_NS}"><title>r</title><content><RuleDescription xmlns="{CONNECT_NS}" xmlns:i="{XSI_NS}"><Filter i:type="CorrelationFilter"><Properties><KeyValueOfstringanyType><Key>k</Key><Value xmlns:d6p1="http://www.w3.org/2001/XMLSchema" i:type="d6p1:string">v</Value></KeyValueOfstringanyType></Properties></Filter><Name>r</Name></RuleDescription></content></entry>"#
        );
        let Document::Entry(rule) = parse(&xml).unwrap() else { panic!("an entry") };
        let body = rule.to_put_body();
        assert!(body.contains(r#"<Value xmlns:d6p1="http://www.w3.org/2001/XMLSchema" i:type="d6p1:string">v</Value>"#), "{body}");
        assert!(matches!(parse(&body).unwrap(), Document::Entry(_)));
    }
}
