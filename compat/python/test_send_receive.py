"""Sending (single, list, batch), receiving in both modes, completing, property round trips."""

import datetime
import uuid

from azure.servicebus import ServiceBusMessage, ServiceBusMessageState, ServiceBusReceiveMode

from helpers import body_bytes, body_text, peek_all, queue, receive_n, receive_none


def test_single_send_peek_lock_receive(client):
    name = queue("send-single")
    with client.get_queue_sender(name) as sender:
        sender.send_messages(ServiceBusMessage("hello ironbus", message_id="single-1"))
    with client.get_queue_receiver(name) as receiver:
        messages = receive_n(receiver, 1)
        assert len(messages) == 1
        message = messages[0]
        assert body_text(message) == "hello ironbus"
        assert message.message_id == "single-1"
        assert message.sequence_number is not None and message.sequence_number >= 1
        assert message.delivery_count == 0
        assert message.lock_token is not None
        assert message.locked_until_utc is not None
        assert message.enqueued_time_utc is not None
        now = datetime.datetime.now(datetime.timezone.utc)
        assert message.locked_until_utc > now
        assert abs((now - message.enqueued_time_utc).total_seconds()) < 60
        assert message.state == ServiceBusMessageState.ACTIVE
        receiver.complete_message(message)
        assert receive_none(receiver, 1.0) == []


def test_batch_send(client):
    name = queue("send-batch")
    with client.get_queue_sender(name) as sender:
        # A list is sent as one batch transfer (message format 0x80013700).
        sender.send_messages([ServiceBusMessage(f"list-{i}") for i in range(5)])
        batch = sender.create_message_batch()
        for i in range(5):
            batch.add_message(ServiceBusMessage(f"batch-{i}", application_properties={"i": i}))
        assert len(batch) == 5
        sender.send_messages(batch)
    expected = {f"list-{i}" for i in range(5)} | {f"batch-{i}" for i in range(5)}
    with client.get_queue_receiver(name) as receiver:
        messages = receive_n(receiver, len(expected))
        bodies = [body_text(m) for m in messages]
        assert sorted(bodies) == sorted(expected)
        sequence_numbers = [m.sequence_number for m in messages]
        assert len(set(sequence_numbers)) == len(sequence_numbers), "sequence numbers are unique"
        for message in messages:
            text = body_text(message)
            if text.startswith("batch-"):
                assert message.application_properties[b"i"] == int(text.split("-")[1])
            receiver.complete_message(message)
        # A batch is split in order: sequence numbers follow the order of the messages in it.
        in_order = [body_text(m) for m in sorted(messages, key=lambda m: m.sequence_number)]
        assert [b for b in in_order if b.startswith("list-")] == [f"list-{i}" for i in range(5)]
        assert [b for b in in_order if b.startswith("batch-")] == [f"batch-{i}" for i in range(5)]
        assert receive_none(receiver, 1.0) == []


def test_receive_and_delete(client):
    name = queue("receive-and-delete")
    with client.get_queue_sender(name) as sender:
        sender.send_messages([ServiceBusMessage(f"rad-{i}") for i in range(3)])
    with client.get_queue_receiver(
        name, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
    ) as receiver:
        messages = receive_n(receiver, 3)
        assert sorted(body_text(m) for m in messages) == ["rad-0", "rad-1", "rad-2"]
        for message in messages:
            assert message.lock_token is None, "receive-and-delete deliveries carry no lock"
    # Deleted at delivery: nothing left to peek or receive.
    with client.get_queue_receiver(name) as receiver:
        assert peek_all(receiver) == []
        assert receive_none(receiver, 1.5) == []


def test_complete_removes_message(client):
    name = queue("complete")
    with client.get_queue_sender(name) as sender:
        sender.send_messages(ServiceBusMessage("complete-me"))
    with client.get_queue_receiver(name) as receiver:
        messages = receive_n(receiver, 1)
        assert [body_text(m) for m in messages] == ["complete-me"]
        receiver.complete_message(messages[0])
        assert receive_none(receiver, 2.0) == []
        assert peek_all(receiver) == []


def test_message_properties_round_trip(client):
    name = queue("app-properties")
    moment = datetime.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=datetime.timezone.utc)
    an_id = uuid.UUID("12345678-1234-5678-9abc-def012345678")
    properties = {
        "str": "text value",
        "int": 42,
        "negative": -7,
        # The SDK encodes every Python int as an AMQP int: 2**31 and above cannot be sent.
        "int-max": 2**31 - 1,
        "float": 3.5,
        "true": True,
        "false": False,
        "uuid": an_id,
        "time": moment,
        "none": None,
    }
    payload = bytes(range(256))
    with client.get_queue_sender(name) as sender:
        sender.send_messages(
            ServiceBusMessage(
                payload,
                application_properties=properties,
                message_id="props-1",
                correlation_id="corr-1",
                subject="the-subject",
                content_type="application/octet-stream",
                reply_to="reply-queue",
                to="somewhere",
            )
        )
    with client.get_queue_receiver(name) as receiver:
        messages = receive_n(receiver, 1)
        assert len(messages) == 1
        message = messages[0]
        assert body_bytes(message) == payload
        assert message.message_id == "props-1"
        assert message.correlation_id == "corr-1"
        assert message.subject == "the-subject"
        assert message.content_type == "application/octet-stream"
        assert message.reply_to == "reply-queue"
        assert message.to == "somewhere"
        # Received application properties have bytes keys and bytes strings (SDK behaviour).
        got = message.application_properties
        assert got[b"str"] == b"text value"
        assert got[b"int"] == 42 and not isinstance(got[b"int"], bool)
        assert got[b"negative"] == -7
        assert got[b"int-max"] == 2**31 - 1
        assert got[b"float"] == 3.5
        assert got[b"true"] is True
        assert got[b"false"] is False
        assert got[b"uuid"] == an_id
        # A timestamp comes back as milliseconds since the epoch.
        assert got[b"time"] == int(moment.timestamp() * 1000)
        assert b"none" in got and got[b"none"] is None
        receiver.complete_message(message)
