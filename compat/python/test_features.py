"""Entity features: peek, scheduling, TTL, duplicate detection, partitioned queues."""

import datetime
import time

from azure.servicebus import ServiceBusMessage, ServiceBusMessageState, ServiceBusSubQueue

from helpers import body_text, partition_of, peek_all, queue, receive_n, receive_none

UTC = datetime.timezone.utc


def test_peek(client):
    name = queue("peek")
    with client.get_queue_sender(name) as sender:
        for i in range(5):
            sender.send_messages(ServiceBusMessage(f"peek-{i}"))
    with client.get_queue_receiver(name) as receiver:
        peeked = peek_all(receiver)
        assert [body_text(m) for m in peeked] == [f"peek-{i}" for i in range(5)]
        sequence_numbers = [m.sequence_number for m in peeked]
        assert all(s >= 1 for s in sequence_numbers), sequence_numbers
        assert sequence_numbers == sorted(set(sequence_numbers)), "strictly increasing"
        for message in peeked:
            assert message.state == ServiceBusMessageState.ACTIVE
            assert message.enqueued_time_utc is not None

        # The SDK's own continuation: a second plain peek continues after the last peeked one.
        first_two = receiver.peek_messages(max_message_count=2, sequence_number=sequence_numbers[0])
        assert [m.sequence_number for m in first_two] == sequence_numbers[:2]
        following = receiver.peek_messages(max_message_count=10)
        assert [m.sequence_number for m in following] == sequence_numbers[2:]

        # From a sequence number in the middle.
        tail = peek_all(receiver, from_sequence_number=sequence_numbers[3])
        assert [m.sequence_number for m in tail] == sequence_numbers[3:]

        # Peeking neither locks nor counts as a delivery.
        received = receive_n(receiver, 5)
        assert sorted(m.sequence_number for m in received) == sequence_numbers
        assert all(m.delivery_count == 0 for m in received)
        for message in received:
            receiver.complete_message(message)
        assert peek_all(receiver) == []


def test_schedule_and_cancel(client):
    name = queue("schedule")
    at = datetime.datetime.now(UTC) + datetime.timedelta(seconds=6)
    with client.get_queue_sender(name) as sender:
        [kept] = sender.schedule_messages(ServiceBusMessage("scheduled-kept"), at)
        [cancelled] = sender.schedule_messages(ServiceBusMessage("scheduled-cancelled"), at)
        assert kept >= 1 and cancelled >= 1 and kept != cancelled
        sender.cancel_scheduled_messages(cancelled)
    with client.get_queue_receiver(name) as receiver:
        # Scheduled messages are peekable (state scheduled); the cancelled one is gone.
        peeked = peek_all(receiver)
        assert [m.sequence_number for m in peeked] == [kept]
        assert peeked[0].state == ServiceBusMessageState.SCHEDULED

        early = receive_none(receiver, 2.5)
        if datetime.datetime.now(UTC) < at - datetime.timedelta(seconds=0.5):
            assert early == [], "a scheduled message was delivered before its time"

        messages = receive_n(receiver, 1, timeout=20)
        arrived = datetime.datetime.now(UTC)
        assert [body_text(m) for m in messages] == ["scheduled-kept"]
        message = messages[0]
        assert arrived >= at - datetime.timedelta(seconds=0.5)
        assert message.sequence_number == kept
        assert message.scheduled_enqueue_time_utc is not None
        assert abs((message.scheduled_enqueue_time_utc - at).total_seconds()) < 1.0
        receiver.complete_message(message)

        # The cancelled message never arrives.
        assert receive_none(receiver, 2.0) == []
        assert peek_all(receiver) == []


def test_ttl_expiry_drops_message(client):
    # DeadLetteringOnMessageExpiration false: an expired message just disappears.
    name = queue("ttl")
    with client.get_queue_sender(name) as sender:
        sender.send_messages(
            ServiceBusMessage("short-lived", time_to_live=datetime.timedelta(seconds=1))
        )
        sender.send_messages(ServiceBusMessage("long-lived"))
    time.sleep(2.5)
    with client.get_queue_receiver(name) as receiver:
        # Enqueued first, expired: the first message received is the one sent second.
        messages = receive_n(receiver, 1)
        assert [body_text(m) for m in messages] == ["long-lived"]
        receiver.complete_message(messages[0])
        assert receive_none(receiver, 1.5) == []
        assert peek_all(receiver) == []
    with client.get_queue_receiver(name, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        assert receive_none(dlq, 1.0) == []


def test_ttl_expiry_dead_letters_when_enabled(client):
    # DeadLetteringOnMessageExpiration true: an expired message moves to the DLQ.
    name = queue("ttl-dlq")
    with client.get_queue_sender(name) as sender:
        sender.send_messages(
            ServiceBusMessage(
                "expires-into-dlq", message_id="ttl-1", time_to_live=datetime.timedelta(seconds=1)
            )
        )
    time.sleep(2.5)
    with client.get_queue_receiver(name) as receiver:
        assert receive_none(receiver, 1.5) == []
    with client.get_queue_receiver(name, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        dead = receive_n(dlq, 1, timeout=10)
        assert len(dead) == 1
        assert body_text(dead[0]) == "expires-into-dlq"
        assert dead[0].message_id == "ttl-1"
        assert dead[0].dead_letter_reason == "TTLExpiredException"
        dlq.complete_message(dead[0])


def test_duplicate_detection(client):
    # RequiresDuplicateDetection: the second send of a MessageId inside the window is dropped.
    name = queue("dedup")
    with client.get_queue_sender(name) as sender:
        sender.send_messages(ServiceBusMessage("first", message_id="dup-1"))
        sender.send_messages(ServiceBusMessage("second", message_id="dup-1"))
        sender.send_messages(ServiceBusMessage("other", message_id="dup-2"))
        sender.send_messages([ServiceBusMessage("in-batch", message_id="dup-2")])
    with client.get_queue_receiver(name) as receiver:
        messages = receive_n(receiver, 2)
        assert sorted(body_text(m) for m in messages) == ["first", "other"]
        for message in messages:
            receiver.complete_message(message)
        assert receive_none(receiver, 1.5) == []


def test_partitioned_queue(client):
    # EnablePartitioning true, PartitionCount 16, no sessions required.
    name = queue("partitioned")
    expected = {}
    with client.get_queue_sender(name) as sender:
        for i in range(3):
            body = f"pk-a-{i}"
            sender.send_messages(ServiceBusMessage(body, partition_key="pk-a"))
            expected[body] = "pk-a"
        batch = sender.create_message_batch()
        for i in range(3):
            body = f"pk-b-{i}"
            batch.add_message(ServiceBusMessage(body, partition_key="pk-b"))
            expected[body] = "pk-b"
        sender.send_messages(batch)
        for i in range(3):
            body = f"session-{i}"
            sender.send_messages(ServiceBusMessage(body, session_id="sess-1"))
            expected[body] = "sess-1"
        for i in range(16):
            body = f"keyless-{i}"
            sender.send_messages(ServiceBusMessage(body))
            expected[body] = None
    with client.get_queue_receiver(name) as receiver:
        messages = receive_n(receiver, len(expected), timeout=30)
        by_body = {body_text(m): m for m in messages}
        assert sorted(by_body) == sorted(expected), "every message is received, once"
        sequence_numbers = [m.sequence_number for m in messages]
        assert len(set(sequence_numbers)) == len(sequence_numbers)

        partitions = {}
        for body, key in expected.items():
            message = by_body[body]
            partition = partition_of(message.sequence_number)
            assert 0 <= partition < 16, f"{body}: sequence number {message.sequence_number:#x}"
            partitions.setdefault(key, set()).add(partition)
            if key in ("pk-a", "pk-b"):
                assert message.partition_key == key
            if key == "sess-1":
                assert message.session_id == "sess-1"
        for key in ("pk-a", "pk-b", "sess-1"):
            assert len(partitions[key]) == 1, f"{key} spread over partitions {partitions[key]}"
        assert len(partitions[None]) >= 4, f"keyless sends used partitions {partitions[None]}"

        for message in messages:
            receiver.complete_message(message)
        assert receive_none(receiver, 1.0) == []


def test_partitioned_duplicate_detection_by_message_id(client):
    # Partitioned + RequiresDuplicateDetection: the MessageId picks the partition.
    name = queue("partitioned-dedup")
    with client.get_queue_sender(name) as sender:
        for i in range(10):
            sender.send_messages(ServiceBusMessage(f"mid-{i}", message_id=f"mid-{i}"))
        sender.send_messages(ServiceBusMessage("mid-0 again", message_id="mid-0"))
        sender.send_messages(ServiceBusMessage("mid-3 again", message_id="mid-3"))
    with client.get_queue_receiver(name) as receiver:
        messages = receive_n(receiver, 10)
        messages += receive_none(receiver, 1.5)
        assert sorted(body_text(m) for m in messages) == sorted(f"mid-{i}" for i in range(10))
        assert sorted(m.message_id for m in messages) == sorted(f"mid-{i}" for i in range(10))
        partitions = {partition_of(m.sequence_number) for m in messages}
        assert all(0 <= p < 16 for p in partitions)
        assert len(partitions) >= 2, f"ten message ids all landed on partitions {partitions}"
        for message in messages:
            receiver.complete_message(message)
