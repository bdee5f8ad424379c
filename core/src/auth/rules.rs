//! Entity authorization rules (a queue's or topic's `AuthorizationRules`), rights as text, and
//! the `name:key:rights` form of a namespace policy.
//!
//! An entity rule is a shared access key scoped to one queue or topic: a token signed with its
//! primary or secondary key is valid for that entity and everything below it (a topic's
//! subscriptions, sub-queues, `$management`), with the rule's rights — never for another entity
//! or the namespace.
//!
//! Rules live in their entity's description (`QueueDescription`, `TopicDescription`) and so in
//! its entity record (version 2 and later). They are validated here: at most 12 per entity,
//! key names and keys within Service Bus's lengths, at least one right, names unique whatever
//! their case.

use std::fmt;
use std::str::FromStr;

use super::{PolicyError, Right, Rights, SasPolicy};

/// The most authorization rules one queue or topic may have (Service Bus allows 12).
pub const MAX_AUTHORIZATION_RULES: usize = 12;
/// The longest key name of an authorization rule (Service Bus: 256 characters).
pub const MAX_KEY_NAME_LEN: usize = 256;
/// The longest key of an authorization rule (Service Bus: 256 characters).
pub const MAX_KEY_LEN: usize = 256;

/// A shared access authorization rule of a queue or topic (`SharedAccessAuthorizationRule` in
/// ATOM). Keys are used as text, like a namespace policy's. `Debug` redacts them.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthorizationRule {
    pub key_name: String,
    pub primary_key: String,
    /// Empty when the rule has no secondary key.
    pub secondary_key: String,
    pub rights: Rights,
}

impl AuthorizationRule {
    pub fn new(
        key_name: impl Into<String>,
        primary_key: impl Into<String>,
        secondary_key: impl Into<String>,
        rights: Rights,
    ) -> Self {
        Self {
            key_name: key_name.into(),
            primary_key: primary_key.into(),
            secondary_key: secondary_key.into(),
            rights,
        }
    }

    /// The keys a token may be signed with: the primary, and the secondary when there is one.
    pub(super) fn keys(&self) -> impl Iterator<Item = &str> {
        [self.primary_key.as_str(), self.secondary_key.as_str()]
            .into_iter()
            .filter(|key| !key.is_empty())
    }
}

impl fmt::Debug for AuthorizationRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthorizationRule")
            .field("key_name", &self.key_name)
            .field("keys", &"<redacted>")
            .field("rights", &self.rights)
            .finish()
    }
}

/// Checks an entity's rules as Service Bus does on create and update.
///
/// # Behavior
/// Refuses more than [`MAX_AUTHORIZATION_RULES`] rules, an empty or over-long key name, an
/// empty or over-long primary key, an over-long secondary key, no rights, and two rules whose
/// key names differ only in case.
pub fn validate_rules(rules: &[AuthorizationRule]) -> Result<(), PolicyError> {
    if rules.len() > MAX_AUTHORIZATION_RULES {
        return Err(PolicyError::Invalid(format!(
            "an entity has at most {MAX_AUTHORIZATION_RULES} authorization rules, not {}",
            rules.len()
        )));
    }
    for (i, rule) in rules.iter().enumerate() {
        let name = &rule.key_name;
        if name.is_empty() {
            return Err(PolicyError::EmptyName);
        }
        if name.chars().count() > MAX_KEY_NAME_LEN {
            return Err(PolicyError::Invalid(format!(
                "authorization rule key name is longer than {MAX_KEY_NAME_LEN} characters"
            )));
        }
        if rule.primary_key.is_empty() {
            return Err(PolicyError::EmptyKey { name: name.clone() });
        }
        if rule.primary_key.chars().count() > MAX_KEY_LEN
            || rule.secondary_key.chars().count() > MAX_KEY_LEN
        {
            return Err(PolicyError::Invalid(format!(
                "a key of authorization rule {name} is longer than {MAX_KEY_LEN} characters"
            )));
        }
        if rule.rights == Rights::NONE {
            return Err(PolicyError::Invalid(format!(
                "authorization rule {name} grants no rights: give Manage, Send or Listen"
            )));
        }
        if rules[..i].iter().any(|earlier| earlier.key_name.eq_ignore_ascii_case(name)) {
            return Err(PolicyError::Duplicate { name: name.clone() });
        }
    }
    Ok(())
}

/// `Manage`, `Send` or `Listen`, in any casing.
impl FromStr for Right {
    type Err = PolicyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        [Right::Manage, Right::Send, Right::Listen]
            .into_iter()
            .find(|right| right.to_string().eq_ignore_ascii_case(text))
            .ok_or_else(|| {
                PolicyError::Invalid(format!(
                    "unknown right {text:?}: expected Manage, Send or Listen"
                ))
            })
    }
}

/// A list of rights separated by `,` or `|`, e.g. `Listen,Send`; at least one.
impl FromStr for Rights {
    type Err = PolicyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let rights = text
            .split([',', '|'])
            .map(str::parse::<Right>)
            .collect::<Result<Rights, PolicyError>>()?;
        if rights == Rights::NONE {
            return Err(PolicyError::Invalid("no rights given".into()));
        }
        Ok(rights)
    }
}

/// `name:key:rights`, e.g. `reader:s3cret:Listen` — how `--policy` names a namespace policy.
/// The key is everything between the first and the last `:`, so it may itself contain `:`.
impl FromStr for SasPolicy {
    type Err = PolicyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let form = || {
            PolicyError::Invalid(
                "expected name:key:rights, e.g. reader:s3cret:Listen or app:k:Listen,Send".into(),
            )
        };
        let (name, rest) = text.split_once(':').ok_or_else(form)?;
        let (key, rights) = rest.rsplit_once(':').ok_or_else(form)?;
        if name.is_empty() {
            return Err(PolicyError::EmptyName);
        }
        if key.is_empty() {
            return Err(PolicyError::EmptyKey { name: name.to_owned() });
        }
        Ok(SasPolicy::new(name, key, rights.parse()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rights_parse_from_text_in_any_casing() {
        let cases = [
            ("Listen", Some(Rights::LISTEN)),
            ("send", Some(Rights::SEND)),
            ("Listen,Send", Some(Rights::SEND.with(Right::Listen))),
            ("Send|Listen", Some(Rights::SEND.with(Right::Listen))),
            (" Manage ", Some(Rights::MANAGE)),
            ("Manage,Listen", Some(Rights::MANAGE)),
            ("", None),
            ("Read", None),
            ("Listen,", None),
        ];
        for (text, expected) in cases {
            assert_eq!(text.parse::<Rights>().ok(), expected, "{text:?}");
        }
    }

    #[test]
    fn policies_parse_from_name_key_rights() {
        let policy: SasPolicy = "reader:k:e:y=:Listen".parse().unwrap();
        assert_eq!(policy, SasPolicy::new("reader", "k:e:y=", Rights::LISTEN));
        let policy: SasPolicy = "app:key:Send,Listen".parse().unwrap();
        assert_eq!(policy.rights, Rights::SEND.with(Right::Listen));
        for bad in [
            "reader",
            "reader:TOPSECRET",
            ":TOPSECRET:Listen",
            "reader::Listen",
            "reader:TOPSECRET:Read",
        ] {
            let error = bad.parse::<SasPolicy>().unwrap_err();
            assert!(!error.to_string().contains("TOPSECRET"), "{bad}: leaks the key: {error}");
        }
    }

    #[test]
    fn rule_sets_are_validated() {
        let rule = |name: &str, key: &str, rights| AuthorizationRule::new(name, key, "", rights);
        let ok = rule("a", "k", Rights::LISTEN);
        let cases: Vec<(&str, Vec<AuthorizationRule>, bool)> = vec![
            ("none", vec![], true),
            ("one", vec![ok.clone()], true),
            ("empty name", vec![rule("", "k", Rights::SEND)], false),
            ("empty key", vec![rule("a", "", Rights::SEND)], false),
            ("no rights", vec![rule("a", "k", Rights::NONE)], false),
            ("long name", vec![rule(&"n".repeat(257), "k", Rights::SEND)], false),
            ("long key", vec![rule("a", &"k".repeat(257), Rights::SEND)], false),
            ("duplicate", vec![ok.clone(), rule("A", "k2", Rights::SEND)], false),
            (
                "thirteen",
                (0..13).map(|i| rule(&format!("r{i}"), "k", Rights::SEND)).collect(),
                false,
            ),
            ("twelve", (0..12).map(|i| rule(&format!("r{i}"), "k", Rights::SEND)).collect(), true),
        ];
        for (name, rules, valid) in cases {
            assert_eq!(validate_rules(&rules).is_ok(), valid, "{name}");
        }
    }

    #[test]
    fn debug_redacts_rule_keys() {
        let text =
            format!("{:?}", AuthorizationRule::new("r", "primary-k", "second-k", Rights::SEND));
        assert!(!text.contains("primary-k") && !text.contains("second-k"), "{text}");
    }
}
