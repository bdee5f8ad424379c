//! What both transports ask the broker while checking a SAS token: the authorization rules of
//! the entity a token or request is about (see [`crate::auth`] for the checks themselves).

use crate::address::{Address, EntityPath};
use crate::auth::AuthorizationRule;
use crate::broker::Broker;
use crate::entity::EntityDescription;
use crate::error::Result;

/// The queue or topic `path` belongs to (a subscription's or rule's topic), and its
/// authorization rules.
///
/// # Behavior
/// - Fails with [`EntityNotFound`](crate::BrokerError::EntityNotFound) when `path` itself does
///   not exist (a subscription of an existing topic included), so that `$cbs` can refuse a
///   token for an entity that is not there, as Service Bus does.
/// - A queue or topic without rules gives an empty list.
pub async fn entity_rules(
    broker: &Broker,
    path: &EntityPath,
) -> Result<(EntityPath, Vec<AuthorizationRule>)> {
    broker.get_entity(path).await?;
    let mut top = path.clone();
    while let Some(parent) = top.parent() {
        top = parent;
    }
    let rules = match broker.get_entity(&top).await?.description {
        EntityDescription::Queue(d) => d.authorization_rules,
        EntityDescription::Topic(d) => d.authorization_rules,
        EntityDescription::Subscription(_) | EntityDescription::Rule(_) => Vec::new(),
    };
    Ok((top, rules))
}

/// The entity a token's audience (or any address) names: `q`, `q/$DeadLetterQueue`,
/// `t/Subscriptions/s/$management` all name an entity; the namespace root, a malformed path
/// and names starting with `$` (`$cbs`, `$management`, `$Resources`: entity names start with a
/// letter or digit) name none.
pub fn named_entity(audience: &str) -> Option<EntityPath> {
    let entity = Address::parse(audience).ok()?.entity_address().entity.clone();
    (!entity.key().starts_with('$')).then_some(entity)
}
