//! Entity kinds: what the namespace holds — queues, topics, their subscriptions and the
//! subscriptions' rules, in one namespace, key space and record shape.
//!
//! **Architecture Invariant:** every entity of every kind is one record under its
//! [`EntityPath`]'s key, which carries its kind; code that acts on an entity matches the kind
//! exhaustively, so a new kind shows every place that must decide what it means for it.

use crate::address::{EntityPath, PathShape};
use crate::description::{
    QueueDescription, RuleDescription, SubscriptionDescription, TopicDescription,
};
use crate::types::Timestamp;

/// The kind of an entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntityKind {
    Queue,
    Topic,
    /// A topic's subscription: `{topic}/Subscriptions/{name}`.
    Subscription,
    /// A subscription's rule: `{topic}/Subscriptions/{name}/Rules/{rule}`.
    Rule,
}

impl EntityKind {
    /// Lowercase, for messages and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            EntityKind::Queue => "queue",
            EntityKind::Topic => "topic",
            EntityKind::Subscription => "subscription",
            EntityKind::Rule => "rule",
        }
    }

    /// Whether an entity of this kind can live at a path of that shape.
    pub fn fits(self, shape: PathShape) -> bool {
        match self {
            EntityKind::Queue | EntityKind::Topic => shape == PathShape::QueueOrTopic,
            EntityKind::Subscription => shape == PathShape::Subscription,
            EntityKind::Rule => shape == PathShape::Rule,
        }
    }

    /// Whether the kind counts against the namespace's entity quota (queues and topics do;
    /// subscriptions and rules count against their parent's limits).
    pub fn counts_toward_namespace_quota(self) -> bool {
        match self {
            EntityKind::Queue | EntityKind::Topic => true,
            EntityKind::Subscription | EntityKind::Rule => false,
        }
    }

    /// Whether the broker builds entities of this kind (all are built).
    pub fn is_implemented(self) -> bool {
        match self {
            EntityKind::Queue | EntityKind::Topic | EntityKind::Subscription | EntityKind::Rule => {
                true
            }
        }
    }
}

/// An entity's kind with its kind-specific description.
#[derive(Debug, Clone, PartialEq)]
pub enum EntityDescription {
    Queue(QueueDescription),
    Topic(TopicDescription),
    Subscription(SubscriptionDescription),
    Rule(RuleDescription),
}

impl EntityDescription {
    pub fn kind(&self) -> EntityKind {
        match self {
            EntityDescription::Queue(_) => EntityKind::Queue,
            EntityDescription::Topic(_) => EntityKind::Topic,
            EntityDescription::Subscription(_) => EntityKind::Subscription,
            EntityDescription::Rule(_) => EntityKind::Rule,
        }
    }
}

/// An entity's description and bookkeeping, as management returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct EntityInfo {
    pub path: EntityPath,
    pub description: EntityDescription,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl EntityInfo {
    pub fn kind(&self) -> EntityKind {
        self.description.kind()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_fit_the_shapes_of_their_paths() {
        let shape = |p: &str| EntityPath::parse(p).unwrap().shape();
        assert!(EntityKind::Queue.fits(shape("a/b")));
        assert!(EntityKind::Topic.fits(shape("a/b")));
        assert!(!EntityKind::Queue.fits(shape("t/Subscriptions/s")));
        assert!(EntityKind::Subscription.fits(shape("t/Subscriptions/s")));
        assert!(!EntityKind::Subscription.fits(shape("t")));
        assert!(EntityKind::Rule.fits(shape("t/Subscriptions/s/Rules/r")));
        assert!(!EntityKind::Rule.fits(shape("t/Subscriptions/s")));
    }

    #[test]
    fn descriptions_name_their_kind() {
        let cases = [
            (EntityDescription::Queue(QueueDescription::default()), EntityKind::Queue),
            (EntityDescription::Topic(TopicDescription::default()), EntityKind::Topic),
            (
                EntityDescription::Subscription(SubscriptionDescription::default()),
                EntityKind::Subscription,
            ),
            (EntityDescription::Rule(RuleDescription::default()), EntityKind::Rule),
        ];
        for (description, kind) in cases {
            assert_eq!(description.kind(), kind);
            assert!(kind.is_implemented());
        }
    }
}
