"""Peek-lock settlement: abandon, defer, dead-letter, lock renewal and lock expiry."""

import time

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusMessageState,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import MessageNotFoundError

from helpers import body_text, peek_all, queue, receive_n, receive_none


def test_abandon_increments_delivery_count(client):
    name = queue("abandon")
    with client.get_queue_sender(name) as sender:
        sender.send_messages(ServiceBusMessage("abandon-me"))
    with client.get_queue_receiver(name) as receiver:
        first = receive_n(receiver, 1)
        assert len(first) == 1 and first[0].delivery_count == 0
        receiver.abandon_message(first[0])

        second = receive_n(receiver, 1)
        assert len(second) == 1
        assert second[0].sequence_number == first[0].sequence_number
        assert second[0].delivery_count == 1
        receiver.abandon_message(second[0])

        third = receive_n(receiver, 1)
        assert len(third) == 1 and third[0].delivery_count == 2
        assert body_text(third[0]) == "abandon-me"
        receiver.complete_message(third[0])
        assert receive_none(receiver, 1.0) == []


def test_defer_then_receive_deferred_and_complete(client, connection_string):
    name = queue("defer")
    with client.get_queue_sender(name) as sender:
        sender.send_messages(ServiceBusMessage("defer-me"))
    with client.get_queue_receiver(name) as receiver:
        messages = receive_n(receiver, 1)
        assert len(messages) == 1
        sequence_number = messages[0].sequence_number
        receiver.defer_message(messages[0])

        # A deferred message is only reachable by its sequence number.
        assert receive_none(receiver, 2.0) == []
        peeked = peek_all(receiver)
        assert [m.sequence_number for m in peeked] == [sequence_number]
        assert peeked[0].state == ServiceBusMessageState.DEFERRED

        deferred = receiver.receive_deferred_messages([sequence_number])
        assert len(deferred) == 1
        message = deferred[0]
        assert message.sequence_number == sequence_number
        assert body_text(message) == "defer-me"
        assert message.lock_token is not None
        assert message.state == ServiceBusMessageState.DEFERRED
        # Settled through the management node (update-disposition): no link delivery here.
        receiver.complete_message(message)

        assert peek_all(receiver) == []
    # Gone for good. (The SDK retries MessageNotFoundError by default: don't wait for that.)
    with ServiceBusClient.from_connection_string(connection_string, retry_total=0) as no_retry:
        with no_retry.get_queue_receiver(name) as receiver:
            with pytest.raises(MessageNotFoundError):
                receiver.receive_deferred_messages([sequence_number], timeout=20)


def test_dead_letter_with_reason_then_read_dlq(client):
    name = queue("dead-letter")
    with client.get_queue_sender(name) as sender:
        sender.send_messages(ServiceBusMessage("dead-letter-me", message_id="dlq-1"))
    with client.get_queue_receiver(name) as receiver:
        messages = receive_n(receiver, 1)
        assert len(messages) == 1
        receiver.dead_letter_message(
            messages[0], reason="TestReason", error_description="dead-lettered by the compat suite"
        )
        assert receive_none(receiver, 1.5) == []
    with client.get_queue_receiver(name, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        dead = receive_n(dlq, 1)
        assert len(dead) == 1
        message = dead[0]
        assert body_text(message) == "dead-letter-me"
        assert message.message_id == "dlq-1"
        assert message.sequence_number == messages[0].sequence_number
        assert message.dead_letter_reason == "TestReason"
        assert message.dead_letter_error_description == "dead-lettered by the compat suite"
        dlq.complete_message(message)
        assert receive_none(dlq, 1.0) == []


def test_renew_lock_moves_locked_until(client):
    # LockDuration PT5S: the message is completed after its original lock would have expired.
    name = queue("renew-lock")
    with client.get_queue_sender(name) as sender:
        sender.send_messages(ServiceBusMessage("renew-me"))
    with client.get_queue_receiver(name) as receiver:
        messages = receive_n(receiver, 1)
        assert len(messages) == 1
        message = messages[0]
        original = message.locked_until_utc
        time.sleep(2.5)
        renewed = receiver.renew_message_lock(message)
        assert renewed > original
        assert (renewed - original).total_seconds() >= 2.0
        assert message.locked_until_utc == renewed
        # Past the original expiry, within the renewed lock.
        time.sleep(3.5)
        receiver.complete_message(message)
        assert receive_none(receiver, 1.0) == []


def test_lock_expiry_redelivers_then_dead_letters(client):
    # LockDuration PT5S, MaxDeliveryCount 2.
    name = queue("lock-expiry")
    with client.get_queue_sender(name) as sender:
        sender.send_messages(ServiceBusMessage("let-my-lock-expire"))
    with client.get_queue_receiver(name) as receiver:
        first = receive_n(receiver, 1)
        assert len(first) == 1 and first[0].delivery_count == 0
        locked_at = time.monotonic()
        # Not settled: the lock expires and the message is delivered again, not before.
        second = receive_n(receiver, 1, timeout=20)
        waited = time.monotonic() - locked_at
        assert len(second) == 1
        assert second[0].sequence_number == first[0].sequence_number
        assert second[0].delivery_count == 1
        assert waited >= 3.5, f"redelivered after {waited:.1f}s, before the 5 s lock expired"
        # The second lock expires too: delivery count reaches MaxDeliveryCount -> dead-lettered.
        # (The receiver stays open meanwhile, so its link's fate plays no part.)
        with client.get_queue_receiver(name, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            dead = receive_n(dlq, 1, timeout=20)
            assert len(dead) == 1
            assert dead[0].sequence_number == first[0].sequence_number
            assert body_text(dead[0]) == "let-my-lock-expire"
            assert dead[0].dead_letter_reason == "MaxDeliveryCountExceeded"
            dlq.complete_message(dead[0])
        assert receive_none(receiver, 1.0) == []
        assert peek_all(receiver) == []
