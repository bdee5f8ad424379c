use std::time::Duration;

use super::*;
use crate::message::PropertyValue;

#[test]
fn entity_record_round_trips() {
    let record = EntityRecord {
        id: 42,
        name: "Orders".into(),
        description: EntityDescription::Queue(QueueDescription {
            enable_partitioning: true,
            forward_to: Some("other".into()),
            status: EntityStatus::SendDisabled,
            ..Default::default()
        }),
        created_at: Timestamp::from_millis(1),
        updated_at: Timestamp::from_millis(2),
    };
    assert_eq!(decode_entity(&encode_entity(&record)).unwrap(), record);
}

#[test]
fn a_queue_that_sets_auto_delete_or_express_is_version_3_and_others_keep_their_bytes() {
    use crate::auth::{AuthorizationRule, Rights};
    let plain = EntityRecord {
        id: 9,
        name: "q".into(),
        description: EntityDescription::Queue(QueueDescription::default()),
        created_at: Timestamp::from_millis(1),
        updated_at: Timestamp::from_millis(2),
    };
    for rules in [vec![], vec![AuthorizationRule::new("send", "p", "s", Rights::SEND)]] {
        let mut record = plain.clone();
        let EntityDescription::Queue(d) = &mut record.description else { unreachable!() };
        d.authorization_rules = rules;
        d.auto_delete_on_idle = Duration::from_secs(600);
        d.enable_express = true;
        let bytes = encode_entity(&record);
        assert_eq!(bytes[0], ENTITY_VERSION_3);
        assert_eq!(decode_entity(&bytes).unwrap(), record);
        // Version 1's fields come first, byte for byte, then the rules and the duration.
        let v1 = encode_entity(&plain);
        assert_eq!(bytes[1..v1.len()], v1[1..]);
        for len in 0..bytes.len() {
            assert!(decode_entity(&bytes[..len]).is_err(), "truncated to {len}");
        }
    }
    // Only queues carry it.
    let mut topic = encode_entity(&EntityRecord {
        description: EntityDescription::Topic(TopicDescription::default()),
        ..plain.clone()
    })
    .to_vec();
    topic[0] = ENTITY_VERSION_3;
    topic.extend_from_slice(&0u32.to_le_bytes());
    topic.extend_from_slice(&600_000u64.to_le_bytes());
    topic.push(1);
    assert!(decode_entity(&topic).is_err());
}

#[test]
fn entity_records_with_authorization_rules_are_version_2_and_without_stay_version_1() {
    use crate::auth::{AuthorizationRule, Rights};
    let plain = EntityRecord {
        id: 7,
        name: "q".into(),
        description: EntityDescription::Queue(QueueDescription::default()),
        created_at: Timestamp::from_millis(1),
        updated_at: Timestamp::from_millis(2),
    };
    let v1 = encode_entity(&plain);
    assert_eq!(v1[0], V1, "no rules: written as before");
    assert_eq!(decode_entity(&v1).unwrap(), plain);

    let rules = vec![
        AuthorizationRule::new("send", "p1", "s1", Rights::SEND),
        AuthorizationRule::new("all", "p2", "", Rights::MANAGE),
        AuthorizationRule::new("listen", "p3", "s3", Rights::LISTEN.with(Right::Send)),
    ];
    let queue = EntityRecord {
        description: EntityDescription::Queue(QueueDescription {
            authorization_rules: rules.clone(),
            ..Default::default()
        }),
        ..plain.clone()
    };
    let topic = EntityRecord {
        description: EntityDescription::Topic(TopicDescription {
            authorization_rules: rules,
            ..Default::default()
        }),
        ..plain.clone()
    };
    for record in [queue, topic] {
        let bytes = encode_entity(&record);
        assert_eq!(bytes[0], ENTITY_VERSION_2);
        assert_eq!(decode_entity(&bytes).unwrap(), record);
        // The version-1 part is byte for byte the record without rules.
        let mut without = record.clone();
        match &mut without.description {
            EntityDescription::Queue(d) => d.authorization_rules.clear(),
            EntityDescription::Topic(d) => d.authorization_rules.clear(),
            _ => unreachable!(),
        }
        assert_eq!(bytes[1..encode_entity(&without).len()], encode_entity(&without)[1..]);
        // Every truncation is corruption, never a panic.
        for len in 0..bytes.len() {
            assert!(decode_entity(&bytes[..len]).is_err(), "truncated to {len}");
        }
    }
    // A rule count larger than the record can hold is refused before allocating.
    let mut huge = encode_entity(&plain).to_vec();
    huge[0] = ENTITY_VERSION_2;
    huge.extend_from_slice(&u32::MAX.to_le_bytes());
    let error = decode_entity(&huge).unwrap_err();
    assert!(error.to_string().contains("do not fit"), "{error}");
    let mut unknown = encode_entity(&plain).to_vec();
    unknown[0] = 4;
    assert!(decode_entity(&unknown).is_err());
}

#[test]
fn topic_subscription_and_rule_records_round_trip() {
    let descriptions = [
        EntityDescription::Topic(TopicDescription {
            requires_duplicate_detection: true,
            enable_partitioning: true,
            partition_count: 4,
            filtering_messages_before_publishing: true,
            user_metadata: Some("m".into()),
            status: EntityStatus::ReceiveDisabled,
            ..Default::default()
        }),
        EntityDescription::Subscription(SubscriptionDescription {
            requires_session: true,
            forward_to: Some("q".into()),
            dead_lettering_on_filter_evaluation_exceptions: false,
            status: EntityStatus::Disabled,
            ..Default::default()
        }),
        EntityDescription::Rule(RuleDescription::default()),
        EntityDescription::Rule(RuleDescription { filter: RuleFilter::False, action: None }),
        EntityDescription::Rule(RuleDescription {
            filter: RuleFilter::Sql {
                expression: "color = @c".into(),
                parameters: vec![("@c".into(), PropertyValue::String("red".into()))],
            },
            action: Some(RuleAction {
                expression: "SET n = @n".into(),
                parameters: vec![
                    ("@n".into(), PropertyValue::Long(7)),
                    // ATOM's naive dateTime and duration (property types 17 and 18).
                    ("@at".into(), PropertyValue::LocalTimestamp(Timestamp::from_millis(9))),
                    ("@span".into(), PropertyValue::TimeSpan(-60_000)),
                ],
            }),
        }),
        EntityDescription::Rule(RuleDescription {
            filter: RuleFilter::Correlation(CorrelationFilter {
                correlation_id: Some("c".into()),
                subject: Some("l".into()),
                properties: vec![
                    ("b".into(), PropertyValue::Int(1)),
                    ("a".into(), PropertyValue::Bool(true)),
                ],
                ..Default::default()
            }),
            action: None,
        }),
    ];
    for description in descriptions {
        let record = EntityRecord {
            id: 7,
            name: "t/Subscriptions/s".into(),
            description,
            created_at: Timestamp::from_millis(1),
            updated_at: Timestamp::from_millis(2),
        };
        let bytes = encode_entity(&record);
        assert_eq!(decode_entity(&bytes).unwrap(), record);
        // A truncated record is corruption, never a panic.
        for cut in 0..bytes.len() {
            assert!(decode_entity(&bytes[..cut]).is_err());
        }
    }
}

#[test]
fn every_entity_kind_round_trips_with_its_kind() {
    let kinds = [
        EntityDescription::Queue(QueueDescription::default()),
        EntityDescription::Topic(TopicDescription::default()),
        EntityDescription::Subscription(SubscriptionDescription::default()),
        EntityDescription::Rule(RuleDescription::default()),
    ];
    for description in kinds {
        let record = EntityRecord {
            id: 3,
            name: "t/Subscriptions/s".into(),
            description,
            created_at: Timestamp::from_millis(5),
            updated_at: Timestamp::from_millis(6),
        };
        assert_eq!(decode_entity(&encode_entity(&record)).unwrap(), record);
    }
}

/// A queue record exactly as the encoder before entity kinds wrote it (version 1, kind 1):
/// it still loads, and a queue is still written with the same bytes.
#[test]
fn queue_records_written_before_entity_kinds_still_load() {
    let written = "010700000000000000060000004f7264657273e80300000000000\
                   0d0070000000000000130750000000000000500000080ee3600000000000101c0d40100\
                   00000000000104000008000000000000000400000000000001040000004465737400000\
                   201010000006d";
    let written: Vec<u8> = (0..written.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&written[i..i + 2], 16).unwrap())
        .collect();
    let record = EntityRecord {
        id: 7,
        name: "Orders".into(),
        description: EntityDescription::Queue(QueueDescription {
            lock_duration: Duration::from_secs(30),
            max_delivery_count: 5,
            default_message_time_to_live: Duration::from_secs(3600),
            dead_lettering_on_message_expiration: true,
            requires_duplicate_detection: true,
            duplicate_detection_history_time_window: Duration::from_secs(120),
            requires_session: false,
            enable_partitioning: true,
            partition_count: 4,
            max_size_in_megabytes: 2048,
            max_message_size_in_kilobytes: 1024,
            forward_to: Some("Dest".into()),
            forward_dead_lettered_messages_to: None,
            enable_batched_operations: false,
            status: EntityStatus::SendDisabled,
            user_metadata: Some("m".into()),
            authorization_rules: Vec::new(),
            auto_delete_on_idle: crate::description::TIME_SPAN_MAX,
            enable_express: false,
        }),
        created_at: Timestamp::from_millis(1000),
        updated_at: Timestamp::from_millis(2000),
    };
    assert_eq!(decode_entity(&written).unwrap(), record);
    assert_eq!(encode_entity(&record).as_ref(), written.as_slice());
}
