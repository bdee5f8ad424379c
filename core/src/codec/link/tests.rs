//! The link's encoding: round trips, and malformed calls refused without a panic.

use proptest::prelude::*;

use super::*;
use crate::message::ApplicationProperties;

fn sample_requests() -> Vec<LinkRequest> {
    let message = Arc::new(Message::new("body").with_message_id("m1"));
    let token = LockToken::generate(PartitionId(3));
    let transfer = TransferId { source: 7, sequence_number: SequenceNumber(9) };
    vec![
        LinkRequest::Send(vec![message.clone(), message.clone()]),
        LinkRequest::Transfer(vec![(transfer, message)]),
        LinkRequest::ForgetTransfers(vec![transfer]),
        LinkRequest::Cancel(vec![SequenceNumber(1), SequenceNumber(2)]),
        LinkRequest::Settle {
            queue: SubQueue::DeadLetter,
            items: vec![
                (token, Disposition::Complete),
                (
                    token,
                    Disposition::DeadLetter {
                        reason: Some("why".into()),
                        description: None,
                        properties: ApplicationProperties::default(),
                    },
                ),
            ],
        },
        LinkRequest::RenewLock { queue: SubQueue::Main, token },
        LinkRequest::ReceiveDeferred {
            queue: SubQueue::Main,
            sequence_numbers: vec![SequenceNumber(4)],
            mode: ReceiveMode::ReceiveAndDelete,
        },
        LinkRequest::Peek { queue: SubQueue::Main, from: SequenceNumber(0), max: 10 },
        LinkRequest::Counts,
        LinkRequest::Pull { queue: SubQueue::Main, mode: ReceiveMode::PeekLock, max: 5 },
        LinkRequest::Commit(vec![
            Work::Send(Arc::new(Message::new("in a transaction"))),
            Work::Schedule(SequenceNumber(8), Arc::new(Message::new("later"))),
            Work::Cancel(vec![SequenceNumber(2)]),
            Work::Settle { queue: SubQueue::Main, token, disposition: Disposition::Complete },
            Work::SessionState { session: Arc::from("s1"), state: Some(Bytes::from("x")) },
        ]),
        LinkRequest::Reserve(3),
        LinkRequest::Unreserve(vec![SequenceNumber(5)]),
        LinkRequest::Stats,
    ]
}

#[test]
fn requests_round_trip_and_every_truncation_is_an_error() {
    let at = PartitionRef { entity: 12, partition: 3 };
    for request in sample_requests() {
        let bytes = encode_request(at, 99, &request);
        let (back_at, lane, back) = decode_request(&bytes).expect("decodes");
        assert_eq!((back_at, lane), (at, 99));
        assert_eq!(format!("{back:?}"), format!("{request:?}"));
        for cut in 0..bytes.len() {
            assert!(decode_request(&bytes[..cut]).is_err(), "{request:?} cut at {cut}");
        }
    }
}

#[test]
fn replies_round_trip_errors_included() {
    let replies = [
        LinkReply::Sent(vec![SendOutcome::Enqueued(SequenceNumber(3)), SendOutcome::Duplicate]),
        LinkReply::Settled(vec![Ok(()), Err(BrokerError::MessageLockLost)]),
        LinkReply::Renewed(Timestamp::from_millis(1234)),
        LinkReply::Stats(vec![(
            4,
            2,
            LaneStats {
                available: true,
                deliverable: [1, 2, 3, 4, 5],
                size_bytes: 6,
                ready_sessions: 7,
            },
        )]),
        LinkReply::Failed(BrokerError::PartitionUnavailable {
            entity: "q".into(),
            partition: PartitionId(2),
        }),
        LinkReply::Failed(BrokerError::EntityDisabled {
            entity: "q".into(),
            status: "SendDisabled",
        }),
        LinkReply::Failed(BrokerError::InvalidArgument {
            field: "SessionId",
            reason: "too long".into(),
        }),
    ];
    for reply in replies {
        let back = decode_reply(&encode_reply(&reply)).expect("decodes");
        assert_eq!(format!("{back:?}"), format!("{reply:?}"));
    }
}

#[test]
fn a_count_larger_than_the_call_reserves_nothing() {
    let mut bytes =
        encode_request(PartitionRef { entity: 1, partition: 0 }, 1, &LinkRequest::Cancel(vec![]))
            .to_vec();
    let count_at = bytes.len() - 4;
    bytes[count_at..].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(decode_request(&bytes).is_err());
}

proptest! {
    #[test]
    fn any_bytes_decode_or_fail_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_request(&bytes);
        let _ = decode_reply(&bytes);
        let mut versioned = bytes.clone();
        versioned.insert(0, LINK_V1);
        let _ = decode_request(&versioned);
        let _ = decode_reply(&versioned);
    }
}
