//! A subscription's description in ATOM: the `<SubscriptionDescription>` element of an entry
//! (with the subscription's message counts) and the parsing of a PUT body's description,
//! including an embedded `DefaultRuleDescription` (http.md B.6).

use ironbus_core::description::DEFAULT_RULE_NAME;
use ironbus_core::{EntityInfo, QueueRuntime, RuleDescription, SubscriptionDescription};

use crate::atom::{
    self, availability, bool_text, count_details, entry_document, forward_element, optional, rule,
    Field, Omitted, CONNECT_NS, XSI_NS,
};
use crate::error::HttpError;
use crate::timefmt::{iso8601, xml_duration};

/// A subscription's `<entry>`. `base` is `scheme://host[:port]` as the client addressed us.
pub fn entry(
    base: &str,
    info: &EntityInfo,
    d: &SubscriptionDescription,
    runtime: Option<&QueueRuntime>,
) -> String {
    entry_document(&entry_element(base, info, d, runtime, true))
}

pub(crate) fn entry_element(
    base: &str,
    info: &EntityInfo,
    d: &SubscriptionDescription,
    runtime: Option<&QueueRuntime>,
    declare_ns: bool,
) -> String {
    let description = description_element(base, info, d, runtime);
    atom::entry_element(
        base,
        info.path.as_str(),
        info.path.name(),
        info.created_at,
        info.updated_at,
        &description,
        declare_ns,
    )
}

fn description_element(
    base: &str,
    info: &EntityInfo,
    d: &SubscriptionDescription,
    runtime: Option<&QueueRuntime>,
) -> String {
    let (created, updated) = (iso8601(info.created_at), iso8601(info.updated_at));
    let count = |f: fn(&QueueRuntime) -> u64| runtime.map_or(0, f);
    format!(
        concat!(
            r#"<SubscriptionDescription xmlns="{connect}" xmlns:i="{xsi}">"#,
            "<LockDuration>{lock}</LockDuration>",
            "<RequiresSession>{session}</RequiresSession>",
            "<DefaultMessageTimeToLive>{ttl}</DefaultMessageTimeToLive>",
            "<DeadLetteringOnMessageExpiration>{dl_exp}</DeadLetteringOnMessageExpiration>",
            "<DeadLetteringOnFilterEvaluationExceptions>{dl_filter}</DeadLetteringOnFilterEvaluationExceptions>",
            "<MessageCount>{messages}</MessageCount>",
            "<MaxDeliveryCount>{max_delivery}</MaxDeliveryCount>",
            "<EnableBatchedOperations>{batched}</EnableBatchedOperations>",
            "<Status>{status}</Status>",
            "{forward_to}",
            "<CreatedAt>{created}</CreatedAt><UpdatedAt>{updated}</UpdatedAt>",
            "<AccessedAt>{updated}</AccessedAt>",
            "{count_details}",
            "{user_metadata}",
            "{forward_dl}",
            "<AutoDeleteOnIdle>{auto_delete}</AutoDeleteOnIdle>",
            "<EntityAvailabilityStatus>{availability}</EntityAvailabilityStatus>",
            "</SubscriptionDescription>"
        ),
        connect = CONNECT_NS,
        xsi = XSI_NS,
        lock = xml_duration(d.lock_duration),
        session = bool_text(d.requires_session),
        ttl = xml_duration(d.default_message_time_to_live),
        dl_exp = bool_text(d.dead_lettering_on_message_expiration),
        dl_filter = bool_text(d.dead_lettering_on_filter_evaluation_exceptions),
        messages = count(|r| r.total_message_count),
        max_delivery = d.max_delivery_count,
        batched = bool_text(d.enable_batched_operations),
        status = d.status.as_str(),
        forward_to = forward_element(base, "ForwardTo", d.forward_to.as_deref()),
        created = created,
        updated = updated,
        count_details = count_details(
            count(|r| r.active_message_count),
            count(|r| r.dead_letter_message_count),
            count(|r| r.scheduled_message_count),
            count(|r| r.transfer_message_count),
            count(|r| r.transfer_dead_letter_message_count),
        ),
        user_metadata = optional("UserMetadata", d.user_metadata.as_deref()),
        forward_dl = forward_element(
            base,
            "ForwardDeadLetteredMessagesTo",
            d.forward_dead_lettered_messages_to.as_deref()
        ),
        auto_delete = xml_duration(d.auto_delete_on_idle),
        availability = availability(runtime),
    )
}

/// The rule a subscription PUT names: its name (default `$Default`) and description.
pub type DefaultRule = Option<(String, RuleDescription)>;

/// Parses a `<SubscriptionDescription>` element, and its `DefaultRuleDescription` if any.
pub(crate) fn parse(
    description: roxmltree::Node<'_, '_>,
) -> Result<(SubscriptionDescription, DefaultRule, Omitted), HttpError> {
    let mut d = SubscriptionDescription::default();
    let mut default_rule = None;
    let mut omitted = Omitted::all();
    for child in description.children().filter(|n| n.is_element()) {
        let f = Field::of(child);
        match f.name {
            "LockDuration" => d.lock_duration = f.duration()?,
            "RequiresSession" => {
                d.requires_session = f.boolean()?;
                omitted.requires_session = false;
            }
            "DefaultMessageTimeToLive" => d.default_message_time_to_live = f.duration()?,
            "DeadLetteringOnMessageExpiration" => {
                d.dead_lettering_on_message_expiration = f.boolean()?
            }
            "DeadLetteringOnFilterEvaluationExceptions" => {
                d.dead_lettering_on_filter_evaluation_exceptions = f.boolean()?
            }
            "MaxDeliveryCount" => d.max_delivery_count = f.number()?,
            "EnableBatchedOperations" => d.enable_batched_operations = f.boolean()?,
            "Status" => d.status = f.status()?,
            "ForwardTo" => d.forward_to = atom::forward_target(f.value),
            "ForwardDeadLetteredMessagesTo" => {
                d.forward_dead_lettered_messages_to = atom::forward_target(f.value)
            }
            "UserMetadata" => d.user_metadata = f.text(),
            "AutoDeleteOnIdle" => d.auto_delete_on_idle = f.duration()?,
            "DefaultRuleDescription" => {
                let name = rule::name(child).unwrap_or_else(|| DEFAULT_RULE_NAME.to_owned());
                default_rule = Some((name, rule::parse(child)?));
            }
            // Read-only, runtime and unknown elements are ignored.
            _ => {}
        }
    }
    Ok((d, default_rule, omitted))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ironbus_core::{EntityDescription, EntityPath, EntityStatus, RuleFilter, Timestamp};

    use super::*;
    use crate::atom::{parse_description, Described, ATOM_NS};

    #[test]
    fn an_entry_round_trips_and_ids_spell_subscriptions_with_a_capital() {
        let d = SubscriptionDescription {
            lock_duration: Duration::from_secs(30),
            max_delivery_count: 3,
            status: EntityStatus::ReceiveDisabled,
            forward_to: Some("q".into()),
            user_metadata: Some("meta".into()),
            ..Default::default()
        };
        let info = EntityInfo {
            path: EntityPath::parse("t/subscriptions/s1").unwrap(),
            description: EntityDescription::Subscription(d.clone()),
            created_at: Timestamp::from_millis(0),
            updated_at: Timestamp::from_millis(0),
        };
        let xml = entry("https://h", &info, &d, None);
        assert!(xml.contains("<id>https://h/t/Subscriptions/s1?api-version"), "{xml}");
        assert!(xml.contains(r#"<title type="text">s1</title>"#));
        assert!(xml.contains("<ForwardTo>sb://h/q</ForwardTo>"));
        let Described::Subscription(parsed, None) = parse_description(xml.as_bytes()).unwrap().0
        else {
            panic!()
        };
        assert_eq!(parsed, d);
    }

    #[test]
    fn a_default_rule_description_is_parsed_with_its_name() {
        let body = format!(
            r#"<entry xmlns="{ATOM_NS}"><content><SubscriptionDescription xmlns="{CONNECT_NS}" xmlns:i="{XSI_NS}"><LockDuration>PT45S</LockDuration><DefaultRuleDescription><Filter i:type="FalseFilter"><SqlExpression>1&gt;1</SqlExpression></Filter><Action i:type="EmptyRuleAction"/><Name>first</Name></DefaultRuleDescription></SubscriptionDescription></content></entry>"#
        );
        let Described::Subscription(d, Some((name, rule))) =
            parse_description(body.as_bytes()).unwrap().0
        else {
            panic!()
        };
        assert_eq!(d.lock_duration, Duration::from_secs(45));
        assert_eq!(name, "first");
        assert_eq!(rule.filter, RuleFilter::False);
    }
}
