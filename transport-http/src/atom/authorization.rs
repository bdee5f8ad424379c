//! A queue's or topic's `<AuthorizationRules>`: shared access keys scoped to the entity, in and
//! out of ATOM (Service Bus's `SharedAccessAuthorizationRule`):
//!
//! ```xml
//! <AuthorizationRules>
//!   <AuthorizationRule i:type="SharedAccessAuthorizationRule">
//!     <ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue>
//!     <Rights><AccessRights>Listen</AccessRights><AccessRights>Send</AccessRights></Rights>
//!     <CreatedTime>…</CreatedTime><ModifiedTime>…</ModifiedTime>
//!     <KeyName>app</KeyName><PrimaryKey>…</PrimaryKey><SecondaryKey>…</SecondaryKey>
//!   </AuthorizationRule>
//! </AuthorizationRules>
//! ```
//!
//! A rule without a key gets a generated one (256 random bits, base64), as Service Bus does.

use base64::Engine as _;
use ironbus_core::auth::{
    AuthorizationRule, Right, Rights, MAX_AUTHORIZATION_RULES, MAX_KEY_LEN, MAX_KEY_NAME_LEN,
};
use ironbus_core::Timestamp;

use crate::atom::escape;
use crate::error::HttpError;
use crate::timefmt::iso8601;

/// The most `AccessRights` elements one rule may list (three rights, a few repeats tolerated).
const MAX_ACCESS_RIGHTS: usize = 8;

/// The `<AuthorizationRules>` element of an entity created at `created` and last changed at
/// `updated` (the rules carry no times of their own); `<AuthorizationRules/>` without rules.
pub(crate) fn element(
    rules: &[AuthorizationRule],
    created: Timestamp,
    updated: Timestamp,
) -> String {
    if rules.is_empty() {
        return "<AuthorizationRules/>".to_owned();
    }
    let mut out = String::from("<AuthorizationRules>");
    for rule in rules {
        out.push_str(r#"<AuthorizationRule i:type="SharedAccessAuthorizationRule">"#);
        out.push_str("<ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue>");
        out.push_str("<Rights>");
        for right in [Right::Manage, Right::Send, Right::Listen] {
            if rule.rights.allows(right) {
                out.push_str(&format!("<AccessRights>{right}</AccessRights>"));
            }
        }
        out.push_str("</Rights>");
        out.push_str(&format!(
            "<CreatedTime>{}</CreatedTime><ModifiedTime>{}</ModifiedTime>",
            iso8601(created),
            iso8601(updated)
        ));
        out.push_str(&format!(
            "<KeyName>{}</KeyName><PrimaryKey>{}</PrimaryKey>",
            escape(&rule.key_name),
            escape(&rule.primary_key)
        ));
        if !rule.secondary_key.is_empty() {
            out.push_str(&format!("<SecondaryKey>{}</SecondaryKey>", escape(&rule.secondary_key)));
        }
        out.push_str("</AuthorizationRule>");
    }
    out.push_str("</AuthorizationRules>");
    out
}

/// Parses an `<AuthorizationRules>` element. Elements are matched by local name in any order;
/// `ClaimType`, `ClaimValue` and the times are read-only and ignored.
///
/// # Behavior
/// 400 for more than [`MAX_AUTHORIZATION_RULES`] rules (counted before anything is kept), a rule
/// without `KeyName` or `Rights`, an unknown right, more than [`MAX_ACCESS_RIGHTS`] rights, or a
/// key name or key longer than Service Bus allows. A missing or empty `PrimaryKey` is generated.
pub(crate) fn parse(element: roxmltree::Node<'_, '_>) -> Result<Vec<AuthorizationRule>, HttpError> {
    let bad =
        |reason: String| HttpError::bad_request(format!("invalid AuthorizationRules: {reason}"));
    let items = element.children().filter(|n| n.is_element());
    if items.clone().count() > MAX_AUTHORIZATION_RULES {
        return Err(bad(format!("an entity has at most {MAX_AUTHORIZATION_RULES} rules")));
    }
    let mut rules = Vec::new();
    for item in items {
        if item.tag_name().name() != "AuthorizationRule" {
            return Err(bad(format!("unexpected element {}", item.tag_name().name())));
        }
        let (mut key_name, mut primary, mut secondary, mut rights) = (None, None, None, None);
        for field in item.children().filter(|n| n.is_element()) {
            let text = field.text().unwrap_or("").trim();
            match field.tag_name().name() {
                "KeyName" => key_name = Some(checked(text, MAX_KEY_NAME_LEN, "KeyName")?),
                "PrimaryKey" => primary = Some(checked(text, MAX_KEY_LEN, "PrimaryKey")?),
                "SecondaryKey" => secondary = Some(checked(text, MAX_KEY_LEN, "SecondaryKey")?),
                "Rights" => rights = Some(parse_rights(field)?),
                _ => {}
            }
        }
        let key_name = key_name.filter(|n| !n.is_empty());
        let key_name = key_name.ok_or_else(|| bad("every rule needs a KeyName".into()))?;
        let rights = rights.ok_or_else(|| bad(format!("rule {key_name} has no Rights")))?;
        let primary = primary.filter(|k| !k.is_empty()).unwrap_or_else(generated_key);
        rules.push(AuthorizationRule::new(
            key_name,
            primary,
            secondary.unwrap_or_default(),
            rights,
        ));
    }
    Ok(rules)
}

/// `text` as an owned string, unless it is longer than `max` characters.
fn checked(text: &str, max: usize, what: &str) -> Result<String, HttpError> {
    if text.chars().count() > max {
        return Err(HttpError::bad_request(format!(
            "invalid AuthorizationRules: {what} is longer than {max} characters"
        )));
    }
    Ok(text.to_owned())
}

/// `<Rights><AccessRights>Listen</AccessRights>…</Rights>`.
fn parse_rights(rights: roxmltree::Node<'_, '_>) -> Result<Rights, HttpError> {
    let items = rights.children().filter(|n| n.is_element());
    if items.clone().count() > MAX_ACCESS_RIGHTS {
        return Err(HttpError::bad_request(format!(
            "invalid AuthorizationRules: a rule lists at most {MAX_ACCESS_RIGHTS} AccessRights"
        )));
    }
    let mut all = Rights::NONE;
    for item in items {
        let text = item.text().unwrap_or("").trim();
        let right: Right = text
            .parse()
            .map_err(|e| HttpError::bad_request(format!("invalid AuthorizationRules: {e}")))?;
        all = all.with(right);
    }
    Ok(all)
}

/// A fresh key: 256 random bits in base64, like the keys Service Bus generates.
fn generated_key() -> String {
    let mut bytes = [0u8; 32];
    bytes[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    bytes[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::atom::CONNECT_NS;

    fn parse_text(inner: &str) -> Result<Vec<AuthorizationRule>, HttpError> {
        let xml = format!(
            r#"<AuthorizationRules xmlns="{CONNECT_NS}" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">{inner}</AuthorizationRules>"#
        );
        let doc = roxmltree::Document::parse(&xml).unwrap();
        parse(doc.root_element())
    }

    /// What azure-servicebus 7.15 serializes for an `AuthorizationRule` (element order of its
    /// model).
    const PYTHON_RULE: &str = r#"<AuthorizationRule i:type="SharedAccessAuthorizationRule"><ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue><Rights><AccessRights>Manage</AccessRights><AccessRights>Listen</AccessRights><AccessRights>Send</AccessRights></Rights><KeyName>test_key</KeyName><PrimaryKey>p+k/ey=</PrimaryKey><SecondaryKey>s-key</SecondaryKey></AuthorizationRule>"#;

    #[test]
    fn rules_round_trip_through_the_element() {
        let rules = parse_text(PYTHON_RULE).unwrap();
        assert_eq!(rules, [AuthorizationRule::new("test_key", "p+k/ey=", "s-key", Rights::MANAGE)]);
        let out = element(&rules, Timestamp::from_millis(0), Timestamp::from_millis(1000));
        assert_eq!(out.matches("<AccessRights>").count(), 3, "{out}");
        assert!(out.contains("<KeyName>test_key</KeyName>"), "{out}");
        let with_ns = out.replacen(
            "<AuthorizationRules>",
            &format!(r#"<AuthorizationRules xmlns="{CONNECT_NS}" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">"#),
            1,
        );
        let doc = roxmltree::Document::parse(&with_ns).unwrap();
        assert_eq!(parse(doc.root_element()).unwrap(), rules);
        assert_eq!(
            element(&[], Timestamp::from_millis(0), Timestamp::from_millis(0)),
            "<AuthorizationRules/>"
        );
    }

    #[test]
    fn a_missing_primary_key_is_generated() {
        let rules = parse_text(
            "<AuthorizationRule><KeyName>k</KeyName><Rights><AccessRights>Listen</AccessRights></Rights></AuthorizationRule>",
        )
        .unwrap();
        assert_eq!(rules[0].rights, Rights::LISTEN);
        assert_eq!(rules[0].primary_key.len(), 44, "{}", rules[0].primary_key);
        assert!(rules[0].secondary_key.is_empty());
    }

    #[test]
    fn bad_rules_are_bad_requests() {
        let rule = |inner: &str| format!("<AuthorizationRule>{inner}</AuthorizationRule>");
        let listen = "<Rights><AccessRights>Listen</AccessRights></Rights>";
        let cases = [
            rule(listen),
            rule(&format!("<KeyName></KeyName>{listen}")),
            rule("<KeyName>k</KeyName>"),
            rule("<KeyName>k</KeyName><Rights><AccessRights>Read</AccessRights></Rights>"),
            rule(&format!(
                "<KeyName>k</KeyName><Rights>{}</Rights>",
                "<AccessRights>Send</AccessRights>".repeat(9)
            )),
            rule(&format!("<KeyName>{}</KeyName>{listen}", "n".repeat(257))),
            rule(&format!(
                "<KeyName>k</KeyName><PrimaryKey>{}</PrimaryKey>{listen}",
                "k".repeat(257)
            )),
            rule(&format!(
                "<KeyName>k</KeyName><SecondaryKey>{}</SecondaryKey>{listen}",
                "k".repeat(257)
            )),
            rule(&format!("<KeyName>k</KeyName>{listen}")).repeat(13),
            format!("<Other/>{}", rule(&format!("<KeyName>k</KeyName>{listen}"))),
        ];
        for inner in cases {
            let error = parse_text(&inner).unwrap_err();
            assert_eq!(error.status.as_u16(), 400, "{inner}");
            assert!(error.detail.contains("AuthorizationRules"), "{}", error.detail);
        }
    }
}
