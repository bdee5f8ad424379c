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
        LinkRequest::DeleteMessages {
            queue: SubQueue::DeadLetter,
            max: 4000,
            before: Timestamp::from_millis(77),
            session: None,
        },
        LinkRequest::DeleteMessages {
            queue: SubQueue::Main,
            max: 1,
            before: Timestamp::MAX,
            session: Some(Arc::from("s1")),
        },
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
        LinkRequest::AcceptSession { session: Some(Arc::from("s1")), mode: ReceiveMode::PeekLock },
        LinkRequest::AcceptSession { session: None, mode: ReceiveMode::ReceiveAndDelete },
        LinkRequest::SessionPull { holder: 41, max: 7 },
        LinkRequest::DetachSession { holder: 41 },
        LinkRequest::RenewSession { holder: 41 },
        LinkRequest::SessionState { session: Arc::from("s1"), holder: Some(41), set: None },
        LinkRequest::SessionState {
            session: Arc::from(""),
            holder: None,
            set: Some(Some(Bytes::from("state"))),
        },
        LinkRequest::SessionState { session: Arc::from("s2"), holder: None, set: Some(None) },
        LinkRequest::ListSessions {
            updated_after: Some(Timestamp::from_millis(5)),
            after: Some("s0".into()),
            max: 10,
        },
        LinkRequest::ListSessions { updated_after: None, after: None, max: 0 },
        LinkRequest::PeekSession { session: Arc::from("s1"), from: SequenceNumber(3), max: 4 },
        LinkRequest::ReceiveDeferredSession {
            holder: 41,
            sequence_numbers: vec![SequenceNumber(6), SequenceNumber(7)],
            mode: ReceiveMode::PeekLock,
        },
    ]
}

fn sample_received() -> ReceivedMessage {
    let token = LockToken::generate(PartitionId(3));
    ReceivedMessage {
        message: Arc::new(Message::new("body").with_session_id("s1")),
        broker: BrokerProperties {
            sequence_number: SequenceNumber(4),
            enqueued_sequence_number: SequenceNumber(4),
            enqueued_time: Timestamp::from_millis(9),
            partition_id: PartitionId(3),
            delivery_count: 1,
            state: MessageState::Active,
            expires_at: Timestamp::MAX,
            dead_letter_source: None,
            dead_letter_reason: None,
            dead_letter_error_description: None,
        },
        lock: Some(MessageLock { token, locked_until: Timestamp::from_millis(99) }),
    }
}

/// Every session reply, errors included.
fn session_replies() -> Vec<LinkReply> {
    vec![
        LinkReply::SessionAccepted(Some(RemoteGrant {
            session: Arc::from("s1"),
            locked_until: Timestamp::from_millis(1000),
            holder: 41,
        })),
        LinkReply::SessionAccepted(None),
        LinkReply::SessionMessages { messages: vec![sample_received()], lost: false },
        LinkReply::SessionMessages { messages: vec![], lost: true },
        LinkReply::SessionState(Some(Bytes::from("state"))),
        LinkReply::SessionState(None),
        LinkReply::Sessions(vec!["a".into(), "b".into()]),
        LinkReply::SessionFailed(SessionError::Timeout(std::time::Duration::from_millis(1500))),
        LinkReply::SessionFailed(SessionError::CannotBeLocked { session: "s1".into() }),
        LinkReply::SessionFailed(SessionError::LockLost),
        LinkReply::SessionFailed(SessionError::Broker(BrokerError::MessageLockLost)),
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
        LinkReply::Deleted(4000),
        LinkReply::Counts(PartitionCounts {
            active: 1,
            deferred: 2,
            scheduled: 3,
            dead_lettered: 4,
            transfer: 5,
            transfer_dead_lettered: 6,
            send_via: 7,
            size_bytes: 8,
            incoming_total: 9,
            outgoing_total: 10,
        }),
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
fn session_replies_round_trip_and_every_truncation_is_an_error() {
    for reply in session_replies() {
        let bytes = encode_reply(&reply);
        let back = decode_reply(&bytes).expect("decodes");
        assert_eq!(format!("{back:?}"), format!("{reply:?}"));
        for cut in 0..bytes.len() {
            assert!(decode_reply(&bytes[..cut]).is_err(), "{reply:?} cut at {cut}");
        }
    }
}

#[test]
fn a_session_list_count_larger_than_the_reply_reserves_nothing() {
    let mut bytes = encode_reply(&LinkReply::Sessions(vec![])).to_vec();
    let count_at = bytes.len() - 4;
    bytes[count_at..].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(decode_reply(&bytes).is_err());
    let mut bytes =
        encode_reply(&LinkReply::SessionMessages { messages: vec![], lost: false }).to_vec();
    let count_at = bytes.len() - 4;
    bytes[count_at..].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(decode_reply(&bytes).is_err());
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
