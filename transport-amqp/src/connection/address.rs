//! What a link's terminus address names: the node path (scheme and host stripped) and the node
//! it resolves to (an entity, `$cbs`, or an entity's `$management`).

use ironbus_core::address::{Address, AddressError, PathShape};
use ironbus_core::EntityAddress;

use crate::error::WireError;

/// A node a link is attached to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Node {
    Entity(EntityAddress),
    Cbs,
    Management(EntityAddress),
    /// A transaction coordinator (a coordinator target, no address).
    Coordinator,
}

pub use ironbus_core::address::node_path;

/// What a node path names: `$cbs`, or what the core's address grammar ([`Address::parse`])
/// makes of it.
pub(super) fn resolve(path: &str) -> Result<Node, WireError> {
    if path.eq_ignore_ascii_case("$cbs") {
        return Ok(Node::Cbs);
    }
    let address = Address::parse(path).map_err(|e| match e {
        AddressError::NotImplemented { .. } => WireError::not_implemented(e.to_string()),
        AddressError::Empty | AddressError::Malformed { .. } => {
            WireError::bad_request(e.to_string())
        }
    })?;
    // Queues, topics and subscriptions (and their sub-queues and management nodes) are
    // nodes; a rule is not.
    if address.entity_address().entity.shape() == PathShape::Rule {
        return Err(WireError::not_found(path));
    }
    Ok(match address {
        Address::Entity(entity) => Node::Entity(entity),
        Address::Management(entity) => Node::Management(entity),
    })
}

/// A node's address as Service Bus names it in errors: `sb://<host>/<path>`, the host the one
/// the client's Open named, else the one in the link's `address`, else `localhost`.
pub(super) fn entity_url(hostname: Option<&str>, address: &str, path: &str) -> String {
    let from_address = address
        .split_once("://")
        .map(|(_, rest)| rest.split('/').next().unwrap_or(""))
        .map(|authority| authority.rsplit('@').next().unwrap_or(authority))
        .map(|host| host.split(':').next().unwrap_or(host))
        .filter(|host| !host.is_empty());
    let host = hostname.or(from_address).unwrap_or("localhost");
    format!("sb://{host}/{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_paths_strip_scheme_and_host() {
        let cases = [
            ("amqps://localhost:5672/q", "q"),
            ("amqps://ns.servicebus.windows.net/Q/$DeadLetterQueue", "Q/$DeadLetterQueue"),
            ("q", "q"),
            ("/q/", "q"),
            ("q/$management", "q/$management"),
            ("$cbs", "$cbs"),
            ("sb://host", ""),
        ];
        for (address, path) in cases {
            assert_eq!(node_path(address), path, "{address}");
        }
    }

    #[test]
    fn entity_urls_name_the_host_the_client_connected_to() {
        assert_eq!(entity_url(Some("ns.example"), "q", "q"), "sb://ns.example/q");
        assert_eq!(
            entity_url(None, "amqps://ns.example:5671/q/$DeadLetterQueue", "q/$DeadLetterQueue"),
            "sb://ns.example/q/$DeadLetterQueue"
        );
        assert_eq!(entity_url(Some("h"), "amqps://other/q", "q"), "sb://h/q");
        assert_eq!(entity_url(None, "q", "q"), "sb://localhost/q");
    }

    #[test]
    fn nodes_resolve_by_path() {
        assert_eq!(resolve("$cbs").unwrap(), Node::Cbs);
        assert_eq!(resolve("q/$management").unwrap(), Node::Management(EntityAddress::parse("q")));
        assert_eq!(
            resolve("q/$DeadLetterQueue/$Management").unwrap(),
            Node::Management(EntityAddress::parse("q/$DeadLetterQueue"))
        );
        assert_eq!(resolve("q").unwrap(), Node::Entity(EntityAddress::parse("q")));
        assert_eq!(
            resolve("amqps://h:5671/Q/$deadletterqueue").unwrap(),
            Node::Entity(EntityAddress::parse("q/$DeadLetterQueue"))
        );
        let refused = |path: &str| resolve(path).unwrap_err().condition;
        assert_eq!(
            resolve("t/subscriptions/S").unwrap(),
            Node::Entity(EntityAddress::parse("t/Subscriptions/S"))
        );
        assert_eq!(
            resolve("t/Subscriptions/s/$DeadLetterQueue").unwrap(),
            Node::Entity(EntityAddress::parse("t/Subscriptions/s/$DeadLetterQueue"))
        );
        assert_eq!(
            resolve("t/Subscriptions/s/$management").unwrap(),
            Node::Management(EntityAddress::parse("t/Subscriptions/s"))
        );
        assert_eq!(refused("t/Subscriptions/s/Rules/r"), "amqp:not-found");
        assert_eq!(refused("q/$Transfer"), "amqp:not-implemented");
        assert_eq!(
            resolve("q/$Transfer/$DeadLetterQueue").unwrap(),
            Node::Entity(EntityAddress::parse("q/$Transfer/$DeadLetterQueue"))
        );
        assert_eq!(refused("sb://host/"), "com.microsoft:argument-error");
    }
}
