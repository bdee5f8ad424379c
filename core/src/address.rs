//! Addresses: what a client names when it sends, receives or manages. The only parser of the
//! address grammar; both transports resolve their paths here.
//!
//! ```text
//! [scheme://host[:port]]/ entity [/ sub-queue] [/$management] [/]
//! entity    = name                                    a queue or a topic (a name may contain '/')
//!           | topic "/Subscriptions/" name            a subscription
//!           | topic "/Subscriptions/" name "/Rules/" name   a rule of a subscription
//! sub-queue = "$DeadLetterQueue" | "$Transfer" | "$Transfer/$DeadLetterQueue"
//! ```
//!
//! Keywords (`Subscriptions`, `Rules`, `$DeadLetterQueue`, `$Transfer`, `$management`) match in
//! any casing; names keep the casing they were given for display and compare case-insensitively
//! ([`EntityPath::key`]). Percent-decoding is the transport's business: a path arrives here
//! decoded. The scheme and authority of a URI are stripped by `uri_path`, which token
//! audiences use too, with their own reading of queries, schemes and escapes. Names are not
//! validated here (a path that names no entity is simply not found); creation validates them
//! ([`crate::description::validate_entity_name`]).
//!
//! [`Address::parse`] takes a URI (`sb://`, `amqps://`, with a host) or a bare path and returns
//! an entity's (sub-)queue ([`Address::Entity`]) or its `$management` node
//! ([`Address::Management`]), each an [`EntityAddress`]. `$Transfer/$DeadLetterQueue` is the
//! transfer dead-letter queue; `$Transfer` alone (the forwarder's transfer queue) is recognised
//! and refused as not addressable ([`AddressError::NotImplemented`]).
//! [`EntityPath::parse_listing`] names the parent of a listing path (`{topic}/Subscriptions`,
//! `{topic}/Subscriptions/{name}/Rules`).
//!
//! **Architecture Invariant:** no other code parses `$DeadLetterQueue`, `$Transfer`,
//! `Subscriptions`, `Rules` or `$management`: the AMQP transport resolves a terminus address
//! and the HTTP transport what is left of a request path after its own keywords through this
//! module.
//!
//! **Architecture Invariant:** a `Subscriptions` segment after the first one always starts a
//! subscription path, so a queue or topic name never contains one: queue, topic, subscription
//! and rule paths can share one key space without colliding.

use std::borrow::Cow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::str::FromStr;

use crate::auth::percent;
use crate::types::SubQueue;

/// The dead-letter sub-queue's segment.
pub const DEAD_LETTER_QUEUE: &str = "$DeadLetterQueue";
/// The transfer sub-queue's segment (the transfer dead-letter queue is `$Transfer/$DeadLetterQueue`).
pub const TRANSFER: &str = "$Transfer";
/// The suffix of an entity's management node.
pub const MANAGEMENT: &str = "$management";
/// The keyword between a topic and a subscription name.
pub const SUBSCRIPTIONS: &str = "Subscriptions";
/// The keyword between a subscription and a rule name.
pub const RULES: &str = "Rules";

/// Why a path is not an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// Nothing is left once the scheme, host and slashes are gone.
    #[error("empty address")]
    Empty,
    /// A well-formed address of something ironbus does not build yet (transfer queues).
    #[error("{path}: {what} are not implemented by ironbus yet")]
    NotImplemented { path: String, what: &'static str },
    /// The path breaks the grammar (a `Subscriptions` without a name, a sub-queue of a rule, a
    /// sub-queue where an entity was expected, …).
    #[error("{path}: {reason}")]
    Malformed { path: String, reason: &'static str },
}

impl AddressError {
    fn malformed(path: &str, reason: &'static str) -> Self {
        AddressError::Malformed { path: path.to_owned(), reason }
    }
}

/// What an [`EntityPath`] names, as far as its shape tells: a bare name is a queue or a topic
/// (only the namespace knows which).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PathShape {
    /// `name`: a queue or a topic.
    QueueOrTopic,
    /// `topic/Subscriptions/name`.
    Subscription,
    /// `topic/Subscriptions/subscription/Rules/name`.
    Rule,
}

/// The path of an entity: a queue or topic name, a subscription, or a rule. Compares, hashes
/// and is stored by its lowercase [`key`](EntityPath::key); displays as given (with keywords in
/// their canonical casing).
#[derive(Clone)]
pub struct EntityPath {
    text: String,
    key: String,
    shape: PathShape,
    /// The length of the parent's text (topic of a subscription, subscription of a rule).
    parent_len: usize,
}

impl EntityPath {
    /// Parses a path that names an entity itself: no sub-queue, no `$management`.
    pub fn parse(path: &str) -> Result<EntityPath, AddressError> {
        match Address::parse(path)? {
            Address::Entity(EntityAddress { entity, queue: SubQueue::Main }) => Ok(entity),
            Address::Entity(_) => {
                Err(AddressError::malformed(path, "a sub-queue is not an entity of its own"))
            }
            Address::Management(_) => {
                Err(AddressError::malformed(path, "a management node is not an entity"))
            }
        }
    }

    /// The path of a listing: `topic/Subscriptions` lists a topic's subscriptions,
    /// `topic/Subscriptions/name/Rules` a subscription's rules. Returns the parent and the shape
    /// of what is listed; `None` if `path` is not such a listing.
    pub fn parse_listing(path: &str) -> Option<(EntityPath, PathShape)> {
        let path = uri_path(path, UriReading::ADDRESS);
        let trimmed = path.trim_matches('/');
        let (parent, last) = trimmed.rsplit_once('/')?;
        let parent = EntityPath::parse(parent).ok()?;
        match parent.shape {
            PathShape::QueueOrTopic if last.eq_ignore_ascii_case(SUBSCRIPTIONS) => {
                Some((parent, PathShape::Subscription))
            }
            PathShape::Subscription if last.eq_ignore_ascii_case(RULES) => {
                Some((parent, PathShape::Rule))
            }
            _ => None,
        }
    }

    /// A path of shape [`PathShape::QueueOrTopic`] from segments that hold no keyword.
    fn from_segments(path: &str, segments: &[&str]) -> Result<EntityPath, AddressError> {
        let empty = || AddressError::malformed(path, "a name in the path is empty");
        let Some(at) =
            (1..segments.len()).find(|&i| segments[i].eq_ignore_ascii_case(SUBSCRIPTIONS))
        else {
            return Ok(EntityPath::new(segments.join("/"), PathShape::QueueOrTopic, 0));
        };
        let topic = segments[..at].join("/");
        if segments[..at].iter().any(|s| s.is_empty()) {
            return Err(empty());
        }
        match segments[at + 1..] {
            [name] if !name.is_empty() => Ok(EntityPath::new(
                format!("{topic}/{SUBSCRIPTIONS}/{name}"),
                PathShape::Subscription,
                topic.len(),
            )),
            [name, rules, rule] if rules.eq_ignore_ascii_case(RULES) => {
                if name.is_empty() || rule.is_empty() {
                    return Err(empty());
                }
                let subscription = format!("{topic}/{SUBSCRIPTIONS}/{name}");
                let parent_len = subscription.len();
                Ok(EntityPath::new(
                    format!("{subscription}/{RULES}/{rule}"),
                    PathShape::Rule,
                    parent_len,
                ))
            }
            [] => Err(AddressError::malformed(path, "Subscriptions must be followed by a name")),
            _ => Err(AddressError::malformed(
                path,
                "expected {topic}/Subscriptions/{name} or {topic}/Subscriptions/{name}/Rules/{rule}",
            )),
        }
    }

    fn new(text: String, shape: PathShape, parent_len: usize) -> Self {
        EntityPath { key: text.to_lowercase(), text, shape, parent_len }
    }

    /// A path taken as it is, without looking for keywords: for names read back from records
    /// written before every name was parsed, and for lookups of paths that do not parse.
    pub(crate) fn verbatim(text: &str) -> Self {
        EntityPath::new(text.to_owned(), PathShape::QueueOrTopic, 0)
    }

    /// The path as given (keywords in canonical casing).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The canonical (lowercase) form: what lookups, uniqueness and storage use.
    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn shape(&self) -> PathShape {
        self.shape
    }

    /// The topic of a subscription, the subscription of a rule; none for a queue or topic.
    pub fn parent(&self) -> Option<EntityPath> {
        match self.shape {
            PathShape::QueueOrTopic => None,
            PathShape::Subscription | PathShape::Rule => {
                let parent = &self.text[..self.parent_len];
                let segments: Vec<&str> = parent.split('/').collect();
                EntityPath::from_segments(parent, &segments).ok()
            }
        }
    }

    /// The entity's own name: the whole path of a queue or topic, the last segment of a
    /// subscription or rule.
    pub fn name(&self) -> &str {
        match self.shape {
            PathShape::QueueOrTopic => &self.text,
            PathShape::Subscription | PathShape::Rule => {
                self.text.rsplit_once('/').map_or(self.text.as_str(), |(_, name)| name)
            }
        }
    }
}

impl PartialEq for EntityPath {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for EntityPath {}

impl Hash for EntityPath {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key.hash(state);
    }
}

impl fmt::Debug for EntityPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

impl fmt::Display for EntityPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// An entity path reads as the text it displays, so it goes wherever a name (`&str`) goes.
impl Deref for EntityPath {
    type Target = str;

    fn deref(&self) -> &str {
        &self.text
    }
}

impl AsRef<str> for EntityPath {
    fn as_ref(&self) -> &str {
        &self.text
    }
}

impl FromStr for EntityPath {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EntityPath::parse(s)
    }
}

/// What a data-plane operation addresses: an entity and one of its sub-queues.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EntityAddress {
    pub entity: EntityPath,
    pub queue: SubQueue,
}

impl EntityAddress {
    /// Parses an address leniently: a path that is not an entity's address (a management
    /// node, a transfer queue, a malformed subscription) is kept whole as a name that no entity
    /// has, so operations on it fail with "not found" as they did before addresses were
    /// parsed. Transports resolve with [`Address::parse`], which says why a path is refused.
    pub fn parse(path: &str) -> Self {
        match Address::parse(path) {
            Ok(Address::Entity(address)) => address,
            _ => EntityAddress {
                entity: EntityPath::verbatim(uri_path(path, UriReading::ADDRESS).trim_matches('/')),
                queue: SubQueue::Main,
            },
        }
    }
}

impl FromStr for EntityAddress {
    type Err = AddressError;

    /// Parses strictly: a management node is refused.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match Address::parse(s)? {
            Address::Entity(address) => Ok(address),
            Address::Management(_) => Err(AddressError::malformed(
                s,
                "a management node is not a queue to send to or receive from",
            )),
        }
    }
}

impl From<&str> for EntityAddress {
    fn from(path: &str) -> Self {
        EntityAddress::parse(path)
    }
}

impl From<EntityPath> for EntityAddress {
    fn from(entity: EntityPath) -> Self {
        EntityAddress { entity, queue: SubQueue::Main }
    }
}

impl fmt::Display for EntityAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.queue {
            SubQueue::Main => write!(f, "{}", self.entity),
            SubQueue::DeadLetter => write!(f, "{}/{DEAD_LETTER_QUEUE}", self.entity),
            // Send-via transfers wait in the transfer queue as far as clients can tell.
            SubQueue::Transfer | SubQueue::SendVia => write!(f, "{}/{TRANSFER}", self.entity),
            SubQueue::TransferDeadLetter => {
                write!(f, "{}/{TRANSFER}/{DEAD_LETTER_QUEUE}", self.entity)
            }
        }
    }
}

/// A parsed address: an entity's (sub-)queue, or the management node in front of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Address {
    /// `path[/sub-queue]`: messages are sent to or received from it.
    Entity(EntityAddress),
    /// `path[/sub-queue]/$management`: requests about it.
    Management(EntityAddress),
}

impl Address {
    /// The address grammar (see the module docs): a full URI (`sb://host/q`,
    /// `amqps://host:5671/q/$DeadLetterQueue`) or a bare path, with any surrounding slashes.
    pub fn parse(input: &str) -> Result<Address, AddressError> {
        let path = uri_path(input, UriReading::ADDRESS);
        let path = path.trim_matches('/');
        if path.is_empty() {
            return Err(AddressError::Empty);
        }
        let mut segments: Vec<&str> = path.split('/').collect();
        let is = |segments: &[&str], back: usize, word: &str| {
            segments.len() > back + 1
                && segments[segments.len() - 1 - back].eq_ignore_ascii_case(word)
        };
        let management = is(&segments, 0, MANAGEMENT);
        if management {
            segments.pop();
        }
        let not_implemented = |what| AddressError::NotImplemented { path: path.to_owned(), what };
        let queue = if is(&segments, 1, TRANSFER) && is(&segments, 0, DEAD_LETTER_QUEUE) {
            segments.truncate(segments.len() - 2);
            SubQueue::TransferDeadLetter
        } else if is(&segments, 0, TRANSFER) {
            return Err(not_implemented("transfer queues"));
        } else if is(&segments, 0, DEAD_LETTER_QUEUE) {
            segments.pop();
            SubQueue::DeadLetter
        } else {
            SubQueue::Main
        };
        let entity = EntityPath::from_segments(path, &segments)?;
        if entity.shape == PathShape::Rule && (queue != SubQueue::Main || management) {
            return Err(AddressError::malformed(
                path,
                "a rule has no queue and no management node",
            ));
        }
        let address = EntityAddress { entity, queue };
        Ok(if management { Address::Management(address) } else { Address::Entity(address) })
    }

    /// The entity's (sub-)queue the address is about.
    pub fn entity_address(&self) -> &EntityAddress {
        match self {
            Address::Entity(address) | Address::Management(address) => address,
        }
    }
}

impl FromStr for Address {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Address::parse(s)
    }
}

/// How [`uri_path`] reads a URI. Addresses and token audiences both name entities by URI or bare
/// path but come from different places, so they are read differently; each difference is a
/// field here, and each reading ([`UriReading::ADDRESS`], [`UriReading::AUDIENCE`]) says why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UriReading {
    /// Cut the input at its first `?` or `#` before looking for a scheme.
    pub(crate) cut_query: bool,
    /// Count only an RFC 3986 scheme (`ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`) before
    /// `://`; when false, whatever comes before the first `://` is taken as a scheme.
    pub(crate) strict_scheme: bool,
    /// Percent-decode the path of a URI once, keeping it as it is when it does not decode (a
    /// malformed escape, or bytes that are not UTF-8). A bare path is never decoded.
    pub(crate) decode: bool,
}

impl UriReading {
    /// Link addresses and request paths ([`Address::parse`], [`EntityAddress::parse`],
    /// [`EntityPath::parse_listing`]).
    /// - No decoding: they arrive decoded (percent-decoding is the transport's business, see the
    ///   module docs), and decoding twice would change a name that holds a `%`.
    /// - No query: the address grammar has none. A `?` or `#` that gets here stays in the name,
    ///   which then names no entity, rather than silently addressing a shorter one.
    /// - No scheme check: addresses have always dropped whatever precedes the first `://`
    ///   (`1x://host/q` names `q`); checking would change what such an address names.
    pub(crate) const ADDRESS: UriReading =
        UriReading { cut_query: false, strict_scheme: false, decode: false };

    /// A SAS token's audience (its `sr`, already decoded once as a token parameter) and the
    /// paths an audience is compared with ([`crate::auth::Audience`]).
    /// - Query cut: clients sign whole request URLs (`?api-version=…`, `?timeout=5`), and the
    ///   query must not change which entity the token is for.
    /// - Path decoded: some clients escape the path inside the URI they sign
    ///   (`https://host/%24Resources/Queues`); every spelling must name the same entity.
    /// - Scheme checked: only a real `scheme://` makes a URI, so a text that merely contains
    ///   `://` is compared as the bare path it is.
    pub(crate) const AUDIENCE: UriReading =
        UriReading { cut_query: true, strict_scheme: true, decode: true };
}

/// The path of a URI (`scheme://host[:port]/path` gives `/path`, `scheme://host` the empty
/// path); a bare path as it is. Shared by addresses and token audiences.
///
/// # Behavior
/// - The authority ends at the first `/` after `://`. Without `cut_query`, a `?` or `#` before
///   that `/` is part of the authority, after it part of the path.
/// - Surrounding `/` are kept: callers trim them.
/// - Borrows `input` unless decoding changed the path.
pub(crate) fn uri_path(input: &str, reading: UriReading) -> Cow<'_, str> {
    let input = if reading.cut_query {
        input.find(['?', '#']).map_or(input, |end| &input[..end])
    } else {
        input
    };
    match input.split_once("://") {
        Some((scheme, rest)) if !reading.strict_scheme || is_scheme(scheme) => {
            let path = rest.find('/').map_or("", |slash| &rest[slash..]);
            match reading.decode.then(|| percent::decode(path)).flatten() {
                Some(decoded) => decoded,
                None => Cow::Borrowed(path),
            }
        }
        _ => Cow::Borrowed(input),
    }
}

/// The node path of an address as a client gives it (a URI or a bare path): scheme and host
/// stripped, no surrounding slashes, nothing decoded — the address reading of `uri_path`,
/// for transports that keep the path a link was attached with.
pub fn node_path(address: &str) -> String {
    uri_path(address, UriReading::ADDRESS).trim_matches('/').to_owned()
}

/// RFC 3986: `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`.
fn is_scheme(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(path: &str) -> EntityAddress {
        match Address::parse(path) {
            Ok(Address::Entity(address)) => address,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn queue_names_with_slashes_casing_and_surrounding_slashes() {
        let cases = [
            ("q", "q", SubQueue::Main),
            ("/q/", "q", SubQueue::Main),
            ("Orders/EU/2024", "Orders/EU/2024", SubQueue::Main),
            ("Orders/$DeadLetterQueue", "Orders", SubQueue::DeadLetter),
            ("orders/$deadletterqueue/", "orders", SubQueue::DeadLetter),
            ("a/b/$DEADLETTERQUEUE", "a/b", SubQueue::DeadLetter),
            ("sb://ns.servicebus.windows.net/Q", "Q", SubQueue::Main),
            ("amqps://localhost:5671/Q/$DeadLetterQueue", "Q", SubQueue::DeadLetter),
            ("https://localhost/a/b/", "a/b", SubQueue::Main),
            // A sub-queue keyword alone is a (strange) name, not a sub-queue of nothing.
            ("$DeadLetterQueue", "$DeadLetterQueue", SubQueue::Main),
            ("subscriptions/x", "subscriptions/x", SubQueue::Main),
        ];
        for (path, name, queue) in cases {
            let address = entity(path);
            assert_eq!(address.entity.as_str(), name, "{path}");
            assert_eq!(address.entity.shape(), PathShape::QueueOrTopic, "{path}");
            assert_eq!(address.queue, queue, "{path}");
        }
    }

    #[test]
    fn names_compare_by_key_and_display_as_given() {
        let a = EntityPath::parse("Orders").unwrap();
        let b = EntityPath::parse("/ORDERS/").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.key(), "orders");
        assert_eq!(a.to_string(), "Orders");
        assert_eq!(b.to_string(), "ORDERS");
        let set: std::collections::HashSet<EntityPath> = [a, b].into_iter().collect();
        assert_eq!(set.len(), 1);
        assert_eq!(entity("Q/$deadletterqueue").to_string(), "Q/$DeadLetterQueue");
    }

    #[test]
    fn subscriptions_and_rules_have_parents_and_names() {
        let sub = entity("Events/subscriptions/Audit/$DeadLetterQueue");
        assert_eq!(sub.entity.shape(), PathShape::Subscription);
        assert_eq!(sub.entity.as_str(), "Events/Subscriptions/Audit");
        assert_eq!(sub.entity.key(), "events/subscriptions/audit");
        assert_eq!(sub.entity.name(), "Audit");
        assert_eq!(sub.entity.parent().unwrap().as_str(), "Events");
        assert_eq!(sub.queue, SubQueue::DeadLetter);

        let nested = EntityPath::parse("a/b/SUBSCRIPTIONS/s").unwrap();
        assert_eq!(nested.parent().unwrap().as_str(), "a/b");

        let rule = EntityPath::parse("t/Subscriptions/s/rules/$Default").unwrap();
        assert_eq!(rule.shape(), PathShape::Rule);
        assert_eq!(rule.as_str(), "t/Subscriptions/s/Rules/$Default");
        assert_eq!(rule.name(), "$Default");
        let parent = rule.parent().unwrap();
        assert_eq!(parent.shape(), PathShape::Subscription);
        assert_eq!(parent.as_str(), "t/Subscriptions/s");
        assert_eq!(parent.parent().unwrap().as_str(), "t");
        assert!(EntityPath::parse("q").unwrap().parent().is_none());
    }

    #[test]
    fn management_nodes_are_told_apart() {
        let cases = [
            ("q/$management", "q", SubQueue::Main),
            ("q/$Management/", "q", SubQueue::Main),
            ("q/$DeadLetterQueue/$management", "q", SubQueue::DeadLetter),
            ("t/Subscriptions/s/$management", "t/Subscriptions/s", SubQueue::Main),
            ("amqps://host/a/b/$MANAGEMENT", "a/b", SubQueue::Main),
        ];
        for (path, name, queue) in cases {
            match Address::parse(path).unwrap() {
                Address::Management(address) => {
                    assert_eq!(address.entity.as_str(), name, "{path}");
                    assert_eq!(address.queue, queue, "{path}");
                }
                other => panic!("{path}: {other:?}"),
            }
        }
        // `$management` alone is a name, not the management node of nothing.
        assert!(matches!(Address::parse("$management"), Ok(Address::Entity(_))));
        assert!(EntityPath::parse("q/$management").is_err());
        assert!("q/$management".parse::<EntityAddress>().is_err());
    }

    #[test]
    fn transfer_queue_is_recognised_but_not_addressable() {
        for path in ["q/$Transfer", "t/Subscriptions/s/$Transfer", "q/$transfer/$management"] {
            assert!(
                matches!(Address::parse(path), Err(AddressError::NotImplemented { .. })),
                "{path}"
            );
        }
        let e = Address::parse("q/$Transfer").unwrap_err();
        assert!(e.to_string().contains("not implemented"), "{e}");
    }

    #[test]
    fn transfer_dead_letter_queue_is_addressable() {
        for (path, entity) in [
            ("q/$Transfer/$DeadLetterQueue", "q"),
            ("sb://host/Q/$transfer/$deadletterqueue", "Q"),
            ("t/Subscriptions/s/$Transfer/$DeadLetterQueue", "t/Subscriptions/s"),
        ] {
            let address: EntityAddress = path.parse().expect(path);
            assert_eq!(address.entity.as_str(), entity, "{path}");
            assert_eq!(address.queue, SubQueue::TransferDeadLetter, "{path}");
        }
        match Address::parse("q/$Transfer/$DeadLetterQueue/$management") {
            Ok(Address::Management(a)) => assert_eq!(a.queue, SubQueue::TransferDeadLetter),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn malformed_paths_are_refused_with_a_reason() {
        for path in ["", "/", "sb://host", "sb://host/"] {
            assert_eq!(Address::parse(path), Err(AddressError::Empty), "{path}");
        }
        for path in [
            "t/Subscriptions",
            "t/Subscriptions/$DeadLetterQueue",
            "t/Subscriptions/s/x",
            "t/Subscriptions/s/Rules",
            "t/Subscriptions/s/Rules/r/x",
            "t/Subscriptions/s/Rules/r/$DeadLetterQueue",
            "t/Subscriptions/s/Rules/r/$management",
            "t//Subscriptions/s",
        ] {
            assert!(
                matches!(Address::parse(path), Err(AddressError::Malformed { .. })),
                "{path}: {:?}",
                Address::parse(path)
            );
        }
        assert!(EntityPath::parse("q/$DeadLetterQueue").is_err());
    }

    #[test]
    fn listings_name_their_parent() {
        let (parent, shape) = EntityPath::parse_listing("/Events/subscriptions/").unwrap();
        assert_eq!((parent.as_str(), shape), ("Events", PathShape::Subscription));
        let (parent, shape) = EntityPath::parse_listing("t/Subscriptions/s/RULES").unwrap();
        assert_eq!((parent.as_str(), shape), ("t/Subscriptions/s", PathShape::Rule));
        for path in
            ["q", "Subscriptions", "q/Rules", "t/Subscriptions/s", "t/Subscriptions/s/Rules/r"]
        {
            assert!(EntityPath::parse_listing(path).is_none(), "{path}");
        }
    }

    #[test]
    fn lenient_parse_keeps_what_is_not_an_entity_address_whole() {
        assert_eq!(EntityAddress::parse("q/$DeadLetterQueue"), entity("q/$DeadLetterQueue"));
        let kept = EntityAddress::parse("/q/$Transfer/");
        assert_eq!((kept.entity.as_str(), kept.queue), ("q/$Transfer", SubQueue::Main));
        let kept = EntityAddress::from("q/$management");
        assert_eq!(kept.entity.as_str(), "q/$management");
    }

    #[test]
    fn uri_path_reads_addresses_and_audiences_apart() {
        // (input, as an address, as an audience)
        let cases = [
            // A bare path is kept as it is.
            ("q", "q", "q"),
            ("/q/", "/q/", "/q/"),
            ("", "", ""),
            // Scheme and authority go; the path keeps its slashes.
            ("sb://h/q", "/q", "/q"),
            ("amqps://h:5671/q/$management", "/q/$management", "/q/$management"),
            ("SB://H/Q", "/Q", "/Q"),
            ("x-1.y+z://h/q", "/q", "/q"),
            ("sb://h", "", ""),
            ("sb://h/", "/", "/"),
            ("sb://", "", ""),
            // Not an RFC 3986 scheme: only an address drops it.
            ("1bad://h/q", "/q", "1bad://h/q"),
            ("a b://h/q", "/q", "a b://h/q"),
            ("://h/q", "/q", "://h/q"),
            ("q/x://h/p", "/p", "q/x://h/p"),
            // Query and fragment: only an audience cuts them, before it looks for a scheme.
            ("sb://h/q?timeout=5", "/q?timeout=5", "/q"),
            ("sb://h/q#frag", "/q#frag", "/q"),
            ("q?x=1", "q?x=1", "q"),
            ("sb://h?x=/p", "/p", ""),
            ("q?x=sb://h/p", "/p", "q"),
            // Escapes: only an audience's URI path is decoded, once, and only if it decodes.
            ("https://h/%24resources/queues", "/%24resources/queues", "/$resources/queues"),
            ("https://h/%2524", "/%2524", "/%24"),
            ("https://h/a+b%20c", "/a+b%20c", "/a+b c"),
            ("https://h/bad%zz", "/bad%zz", "/bad%zz"),
            ("https://h/%24ok%zz", "/%24ok%zz", "/%24ok%zz"),
            ("https://h/%FF", "/%FF", "/%FF"),
            ("https://%24h/q", "/q", "/q"),
            ("%24q", "%24q", "%24q"),
        ];
        for (input, address, audience) in cases {
            assert_eq!(uri_path(input, UriReading::ADDRESS), address, "{input} as an address");
            assert_eq!(uri_path(input, UriReading::AUDIENCE), audience, "{input} as an audience");
        }
        // Nothing is copied unless something was decoded.
        assert!(matches!(uri_path("sb://h/%24q", UriReading::ADDRESS), Cow::Borrowed("/%24q")));
        assert!(matches!(uri_path("sb://h/q?x", UriReading::AUDIENCE), Cow::Borrowed("/q")));
    }

    #[test]
    fn addresses_are_neither_decoded_nor_cut_at_a_query() {
        let cases = [
            ("sb://h/%24q", "%24q"),
            ("q?x=1", "q?x=1"),
            ("sb://h/q#f/$DeadLetterQueue", "q#f"),
            ("1bad://h/q", "q"),
        ];
        for (path, name) in cases {
            assert_eq!(entity(path).entity.as_str(), name, "{path}");
            assert_eq!(EntityAddress::parse(path).entity.as_str(), name, "{path}");
        }
        let (parent, shape) = EntityPath::parse_listing("amqps://h:1/T/Subscriptions").unwrap();
        assert_eq!((parent.as_str(), shape), ("T", PathShape::Subscription));
        assert!(EntityPath::parse_listing("sb://h/t/Subscriptions?x").is_none());
    }
}
