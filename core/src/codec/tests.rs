//! The stored format's promise: records written by version 1 stay readable, and truncated or
//! unknown records are corruption, never a panic.

use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::message::{Message, MessageProperties, MessageState, PropertyValue};
use crate::types::{SequenceNumber, Timestamp};

/// Records as version 1 wrote them, byte for byte. A store holds such records for ever: a
/// new version of a layout must leave these decoding to the same values.
const META_V1: &[u8] = b"\
    \x01\x05\x00\x00\x00\x00\x00\x00\x00\x00\xa8\xda\x76\x9b\x01\x00\x00\x4d\x00\x00\x00\x02\
    \x00\x00\x00\x01\x80\x96\x11\x77\x9b\x01\x00\x00\x00\x01\x18\x00\x00\x00\x4d\x61\x78\x44\
    \x65\x6c\x69\x76\x65\x72\x79\x43\x6f\x75\x6e\x74\x45\x78\x63\x65\x65\x64\x65\x64\x01\x04\
    \x00\x00\x00\x67\x6f\x6e\x65\x01\x00\x00\x00\x01\x00\x00\x00\x6b\x08\xff\xff\xff\xff";
const BODY_V1: &[u8] = b"\
    \x01\x01\x02\x00\x00\x00\x6d\x31\x00\x00\x01\x01\x00\x00\x00\x63\x00\x00\x00\x00\x00\x01\
    \x30\x75\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x6e\x09\x07\x00\x00\
    \x00\x00\x00\x00\x00\x01\x08\x00\x00\x00\x52\x41\x57\x3a\x62\x6f\x64\x79\x01\x04\x00\x00\
    \x00\x04\x00\x00\x00\x00";
const PARTITION_V1: &[u8] = b"\x01\x2a\x00\x00\x00\x00\x00\x00\x00";
const DEDUP_V1: &[u8] = b"\x01\x60\x92\xdb\x76\x9b\x01\x00\x00";
/// A message partition's record with its main queue's floor: counter 42, floor 7.
const PARTITION_RECORD_V2: &[u8] =
    b"\x02\x2a\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00\x00";

#[test]
fn a_partition_record_of_either_version_gives_its_counter_and_floor() {
    assert_eq!(decode_partition_record(PARTITION_V1).unwrap(), (42, 0), "version 1 has no floor");
    assert_eq!(decode_partition_record(PARTITION_RECORD_V2).unwrap(), (42, 7));
    assert_eq!(&encode_partition_record(42, 7)[..], PARTITION_RECORD_V2);
    let mut future = PARTITION_RECORD_V2.to_vec();
    future[0] = 3;
    assert!(decode_partition_record(&future).is_err());
    assert!(decode_partition_record(&PARTITION_RECORD_V2[..9]).is_err(), "cut short");
    // The namespace's counters stay version 1, which their guards compare byte for byte.
    assert!(decode_partition(PARTITION_RECORD_V2).is_err());
}

#[test]
fn records_written_by_version_1_stay_readable() {
    let meta = MessageMeta {
        enqueued_sequence_number: SequenceNumber(5),
        enqueued_time: Timestamp::from_millis(1_767_225_600_000),
        size: 77,
        delivery_count: 2,
        state: MessageState::Deferred,
        expires_at: Timestamp::from_millis(1_767_229_200_000),
        dead_letter_source: None,
        dead_letter_reason: Some("MaxDeliveryCountExceeded".into()),
        dead_letter_error_description: Some("gone".into()),
        modified_properties: [("k".to_owned(), PropertyValue::Int(-1))].into(),
        ..Default::default()
    };
    assert_eq!(decode_meta(META_V1).unwrap(), meta);

    let raw = Bytes::from_static(b"RAW:body");
    let body = Message {
        properties: MessageProperties {
            message_id: Some("m1".into()),
            correlation_id: Some("c".into()),
            time_to_live: Some(Duration::from_secs(30)),
            ..MessageProperties::default()
        },
        application_properties: [("n".to_owned(), PropertyValue::Long(7))].into(),
        body: raw.slice(4..),
        raw: Some(raw),
        application_properties_modified: false,
        forwarded: None,
    };
    assert_eq!(decode_body(BODY_V1).unwrap(), body);
    assert_eq!(decode_partition(PARTITION_V1).unwrap(), 42);
    assert_eq!(decode_dedup(DEDUP_V1).unwrap(), Timestamp::from_millis(1_767_225_660_000));

    // Today's encoders still write version 1; when one moves on, its line goes, not the
    // decoding above.
    assert_eq!(&encode_meta(&meta)[..], META_V1);
    assert_eq!(&encode_body(&body)[..], BODY_V1);
    assert_eq!(&encode_partition(42)[..], PARTITION_V1);
    assert_eq!(&encode_dedup(Timestamp::from_millis(1_767_225_660_000))[..], DEDUP_V1);
}

#[test]
fn message_records_of_an_unknown_version_are_corruption() {
    for golden in [META_V1, BODY_V1, PARTITION_V1, DEDUP_V1] {
        let mut future = golden.to_vec();
        future[0] = 0xfe;
        assert!(decode_meta(&future).is_err());
        assert!(decode_body(&future).is_err());
        assert!(decode_partition(&future).is_err());
        assert!(decode_dedup(&future).is_err());
    }
    assert!(decode_meta(&[]).is_err());
    assert!(decode_body(&[]).is_err());
}

#[test]
fn truncated_or_unknown_records_are_corruption_not_panics() {
    let body = encode_body(&Message::new("x"));
    for cut in 0..body.len() {
        assert!(decode_body(&body[..cut]).is_err(), "cut at {cut}");
    }
    let meta = encode_meta(&MessageMeta::default());
    for cut in 0..meta.len() {
        assert!(decode_meta(&meta[..cut]).is_err(), "cut at {cut}");
    }
    assert!(decode_body(&[9, 0, 0]).is_err());
    assert!(decode_meta(&[9, 0, 0]).is_err());
    assert!(decode_entity(&[]).is_err());
}
