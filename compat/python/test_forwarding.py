"""Auto-forwarding through the official SDK: the admin client (ATOM over HTTPS) creates queues and
subscriptions with ``forward_to`` / ``forward_dead_lettered_messages_to``; ``ServiceBusClient``
sends to the source and receives from the destination (AMQP).

Covers part D's checklist of ../shared/protocol/topics-sessions-transactions.md: a missing
destination and a session-enabled source forwarding to a queue are refused; a forwarded message keeps its identity and
properties, gets a new sequence number and carries its original one as
``enqueued_sequence_number``; a forwarding source cannot be received from or peeked; a chain
longer than four hops dead-letters with ``MaxTransferHopCountExceeded``; dead letters travel with
ForwardDeadLetteredMessagesTo and keep their source and reason; a subscription forwards into a
session queue (a message without SessionId is dead-lettered at the subscription); the partition
key survives between partitioned queues; destination duplicate detection applies.

Each test creates its own entities, named ``py-fwd-<what>-<random>``, and deletes them after.
"""

import datetime
import uuid

import pytest
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusClient, ServiceBusMessage
from azure.servicebus import ServiceBusSubQueue
from azure.servicebus.exceptions import ServiceBusError

from helpers import body_text, partition_of, receive_n, receive_none

HOP_LIMIT_REASON = "MaxTransferHopCountExceeded"


def fresh(what: str) -> str:
    return f"py-fwd-{what}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def entities(admin):
    """Records the queues and topics a test creates and deletes them after it, sources first."""
    created = []
    yield created
    for kind, name in reversed(created):
        try:
            (admin.delete_queue if kind == "queue" else admin.delete_topic)(name)
        except ResourceNotFoundError:
            pass


def make_queue(admin, entities, what, **properties):
    name = fresh(what)
    admin.create_queue(name, **properties)
    entities.append(("queue", name))
    return name


@pytest.fixture
def no_retry_client(connection_string):
    with ServiceBusClient.from_connection_string(connection_string, retry_total=0) as sb_client:
        yield sb_client


def test_missing_destination_and_session_source_are_refused(admin, entities):
    with pytest.raises(HttpResponseError) as missing:
        admin.create_queue(fresh("missing"), forward_to=fresh("nowhere"))
    assert missing.value.status_code == 400
    assert "40400" in str(missing.value)
    destination = make_queue(admin, entities, "dst")
    with pytest.raises(HttpResponseError) as session:
        admin.create_queue(fresh("session"), requires_session=True, forward_to=destination)
    assert session.value.status_code == 400
    # An update naming a missing destination is refused the same way.
    source = make_queue(admin, entities, "src")
    props = admin.get_queue(source)
    props.forward_to = fresh("nowhere")
    with pytest.raises(HttpResponseError) as update:
        admin.update_queue(props)
    assert update.value.status_code == 400


def test_forwarded_message_keeps_identity_and_gets_a_new_sequence_number(
    admin, entities, client
):
    destination = make_queue(admin, entities, "dst")
    # Three direct messages first, so that the destination's sequence numbers run ahead of the
    # fresh source's: the forwarded message is the source's first (1) and the destination's 4th.
    with client.get_queue_sender(destination) as sender:
        sender.send_messages([ServiceBusMessage(f"direct-{i}") for i in range(3)])
    with client.get_queue_receiver(destination, max_wait_time=5) as receiver:
        for m in receive_n(receiver, 3):
            receiver.complete_message(m)
    source = make_queue(admin, entities, "src", forward_to=destination)
    described = admin.get_queue(source)
    assert described.forward_to is not None and described.forward_to.endswith(destination)
    message = ServiceBusMessage(
        "hello",
        message_id="m-1",
        correlation_id="c-1",
        subject="s",
        content_type="text/plain",
        reply_to="r",
        to="t",
        time_to_live=datetime.timedelta(minutes=30),
        application_properties={"k": "v", "n": 7},
    )
    with client.get_queue_sender(source) as sender:
        sender.send_messages(message)
    with client.get_queue_receiver(destination, max_wait_time=10) as receiver:
        received = receive_n(receiver, 1)
        assert len(received) == 1
        got = received[0]
        assert body_text(got) == "hello"
        assert (got.message_id, got.correlation_id, got.subject) == ("m-1", "c-1", "s")
        assert (got.content_type, got.reply_to, got.to) == ("text/plain", "r", "t")
        assert got.time_to_live == datetime.timedelta(minutes=30)
        assert got.application_properties[b"k"] == b"v"
        assert got.application_properties[b"n"] == 7
        assert got.delivery_count == 0
        assert got.sequence_number == 4
        assert got.enqueued_sequence_number == 1
        receiver.complete_message(got)
    runtime = admin.get_queue_runtime_properties(source)
    assert runtime.active_message_count == 0
    assert runtime.transfer_message_count == 0


def test_forwarding_source_cannot_be_received_from_or_peeked(
    admin, entities, no_retry_client
):
    destination = make_queue(admin, entities, "dst")
    source = make_queue(admin, entities, "src", forward_to=destination)
    with pytest.raises(ServiceBusError) as refused:
        with no_retry_client.get_queue_receiver(source, max_wait_time=2) as receiver:
            receiver.receive_messages(max_message_count=1, max_wait_time=2)
    assert "auto-forwarding" in str(refused.value)
    with pytest.raises(ServiceBusError):
        with no_retry_client.get_queue_receiver(source) as receiver:
            receiver.peek_messages(max_message_count=1)
    # The destination is an ordinary queue: direct sends and receives work.
    with no_retry_client.get_queue_sender(destination) as sender:
        sender.send_messages(ServiceBusMessage("direct"))
    with no_retry_client.get_queue_receiver(destination, max_wait_time=5) as receiver:
        assert [body_text(m) for m in receive_n(receiver, 1)] == ["direct"]


def test_a_chain_longer_than_four_hops_dead_letters_at_the_fifth_entity(
    admin, entities, client
):
    # q1 -> q2 -> q3 -> q4 -> q5 -> q6: four hops bring the message to q5; the fifth is refused.
    chain = [make_queue(admin, entities, "hop6")]
    for index in range(5):
        chain.append(make_queue(admin, entities, f"hop{5 - index}", forward_to=chain[-1]))
    chain.reverse()  # chain[0] is q1, chain[5] is q6
    with client.get_queue_sender(chain[0]) as sender:
        sender.send_messages(ServiceBusMessage("far", message_id="far-1"))
    with client.get_queue_receiver(
        chain[4], sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=10
    ) as receiver:
        received = receive_n(receiver, 1)
        assert [m.message_id for m in received] == ["far-1"]
        assert received[0].dead_letter_reason == HOP_LIMIT_REASON
        receiver.complete_message(received[0])
    with client.get_queue_receiver(chain[5], max_wait_time=2) as receiver:
        assert receive_none(receiver) == []


def test_dead_letters_are_forwarded_with_their_source_and_reason(
    admin, entities, client, no_retry_client
):
    dead_letters = make_queue(admin, entities, "dlq-dst")
    source = make_queue(admin, entities, "src", forward_dead_lettered_messages_to=dead_letters)
    with client.get_queue_sender(source) as sender:
        sender.send_messages(ServiceBusMessage("bad", message_id="bad-1"))
    with client.get_queue_receiver(source, max_wait_time=5) as receiver:
        received = receive_n(receiver, 1)
        assert len(received) == 1
        receiver.dead_letter_message(received[0], reason="broken", error_description="why")
    with client.get_queue_receiver(dead_letters, max_wait_time=10) as receiver:
        received = receive_n(receiver, 1)
        assert [m.message_id for m in received] == ["bad-1"]
        got = received[0]
        assert got.dead_letter_reason == "broken"
        assert got.dead_letter_error_description == "why"
        assert got.dead_letter_source is not None and source in got.dead_letter_source
        receiver.complete_message(got)
    # The source's dead-letter queue forwards: like a forwarding main queue, it has no receivers.
    with pytest.raises(ServiceBusError) as refused:
        with no_retry_client.get_queue_receiver(
            source, sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=2
        ) as receiver:
            receiver.receive_messages(max_message_count=1, max_wait_time=2)
    assert "auto-forwarding" in str(refused.value)


def test_subscription_forwards_into_a_session_queue(admin, entities, client):
    sessions = make_queue(admin, entities, "sessions", requires_session=True)
    topic = fresh("topic")
    admin.create_topic(topic)
    entities.append(("topic", topic))
    admin.create_subscription(topic, "s", forward_to=sessions)
    with client.get_topic_sender(topic) as sender:
        sender.send_messages(ServiceBusMessage("with", session_id="a"))
        sender.send_messages(ServiceBusMessage("without"))
    with client.get_queue_receiver(
        sessions, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=10
    ) as receiver:
        assert receiver.session.session_id == "a"
        received = receive_n(receiver, 1)
        assert [body_text(m) for m in received] == ["with"]
        receiver.complete_message(received[0])
    with client.get_subscription_receiver(
        topic, "s", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=10
    ) as receiver:
        received = receive_n(receiver, 1)
        assert [body_text(m) for m in received] == ["without"]
        receiver.complete_message(received[0])


def test_partition_key_survives_between_partitioned_queues(admin, entities, client):
    destination = make_queue(admin, entities, "pdst", enable_partitioning=True)
    source = make_queue(admin, entities, "psrc", enable_partitioning=True, forward_to=destination)
    keys = [f"key-{i}" for i in range(6)]
    with client.get_queue_sender(source) as sender:
        for key in keys:
            for n in range(3):
                sender.send_messages(ServiceBusMessage(f"{key}/{n}", partition_key=key))
    with client.get_queue_receiver(destination, max_wait_time=10) as receiver:
        received = receive_n(receiver, len(keys) * 3)
        assert len(received) == len(keys) * 3
        partitions = {}
        for m in received:
            assert m.partition_key == body_text(m).split("/")[0]
            partitions.setdefault(m.partition_key, set()).add(partition_of(m.sequence_number))
            receiver.complete_message(m)
        # Every message of one key landed in one partition of the destination.
        assert all(len(p) == 1 for p in partitions.values()), partitions


def test_destination_duplicate_detection_applies(admin, entities, client):
    destination = make_queue(
        admin,
        entities,
        "dedup",
        requires_duplicate_detection=True,
        duplicate_detection_history_time_window=datetime.timedelta(minutes=5),
    )
    source = make_queue(admin, entities, "src", forward_to=destination)
    with client.get_queue_sender(source) as sender:
        sender.send_messages(ServiceBusMessage("one", message_id="same"))
        sender.send_messages(ServiceBusMessage("two", message_id="same"))
    with client.get_queue_receiver(destination, max_wait_time=5) as receiver:
        received = receive_n(receiver, 2, timeout=6)
        assert [body_text(m) for m in received] == ["one"]
        receiver.complete_message(received[0])
