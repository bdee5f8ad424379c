//! What a link's terminus address names: the node path (scheme and host stripped) and the node
//! it resolves to (an entity, `$cbs`, or an entity's `$management`).

use ironbus_core::EntityAddress;

use crate::error::WireError;

/// A node a link is attached to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Node {
    Entity(EntityAddress),
    Cbs,
    Management(EntityAddress),
}

/// The node path of a terminus address: scheme and host stripped, no surrounding slashes.
pub fn node_path(address: &str) -> String {
    let rest = match address.find("://") {
        Some(i) => {
            let after = &address[i + 3..];
            after.find('/').map_or("", |j| &after[j..])
        }
        None => address,
    };
    rest.trim_matches('/').to_owned()
}

/// What a node path names.
pub(super) fn resolve(path: &str) -> Result<Node, WireError> {
    if path.eq_ignore_ascii_case("$cbs") {
        return Ok(Node::Cbs);
    }
    if let Some(entity) = strip_suffix_ignore_case(path, "/$management") {
        return Ok(Node::Management(EntityAddress::parse(entity)));
    }
    if path.to_ascii_lowercase().contains("/$transfer/")
        || path.to_ascii_lowercase().contains("/subscriptions/")
    {
        return Err(WireError::not_implemented(format!(
            "{path}: topics, subscriptions and transfer queues are not implemented by ironbus yet"
        )));
    }
    if path.is_empty() {
        return Err(WireError::bad_request("empty address"));
    }
    Ok(Node::Entity(EntityAddress::parse(path)))
}

fn strip_suffix_ignore_case<'a>(s: &'a str, suffix: &str) -> Option<&'a str> {
    let cut = s.len().checked_sub(suffix.len())?;
    (s.is_char_boundary(cut) && s[cut..].eq_ignore_ascii_case(suffix)).then(|| &s[..cut])
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
    fn nodes_resolve_by_path() {
        assert_eq!(resolve("$cbs").unwrap(), Node::Cbs);
        assert_eq!(resolve("q/$management").unwrap(), Node::Management(EntityAddress::parse("q")));
        assert_eq!(
            resolve("q/$DeadLetterQueue/$Management").unwrap(),
            Node::Management(EntityAddress::parse("q/$DeadLetterQueue"))
        );
        assert_eq!(resolve("q").unwrap(), Node::Entity(EntityAddress::parse("q")));
        assert!(resolve("t/Subscriptions/s").is_err());
    }
}
