"""Message sessions through the official SDK: session queues created by the admin client (ATOM,
``requires_session=True``), session receivers by id and ``NEXT_AVAILABLE_SESSION`` (AMQP source
filter ``com.microsoft:session-filter``), messages of one session only and in order, session
state and lock renewal (``$management``), the next-available timeout and a session locked
elsewhere.

Each test creates its own queue, named ``py-sessions-<what>-<random>``, and deletes it after.
"""

import datetime
import uuid

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import (
    OperationTimeoutError,
    SessionCannotBeLockedError,
)

from helpers import body_text, receive_n


@pytest.fixture
def session_queue(admin):
    name = f"py-sessions-{uuid.uuid4().hex[:8]}"
    created = admin.create_queue(name, requires_session=True)
    assert created.requires_session is True
    yield name
    try:
        admin.delete_queue(name)
    except ResourceNotFoundError:
        pass


@pytest.fixture
def no_retry_client(connection_string):
    """A client that does not retry: the SDK retries both errors below (0.8 s x 2^n backoff)."""
    with ServiceBusClient.from_connection_string(connection_string, retry_total=0) as sb_client:
        yield sb_client


def send(client, queue, session_id, bodies):
    with client.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage(b, session_id=session_id) for b in bodies])


def test_session_queue_is_created_with_requires_session(admin, session_queue):
    assert admin.get_queue(session_queue).requires_session is True


def test_receiver_by_session_id_gets_that_session_in_order(client, session_queue):
    send(client, session_queue, "a", [f"a{i}" for i in range(5)])
    send(client, session_queue, "b", [f"b{i}" for i in range(3)])
    with client.get_queue_receiver(session_queue, session_id="a", max_wait_time=5) as receiver:
        assert receiver.session.session_id == "a"
        now = datetime.datetime.now(datetime.timezone.utc)
        locked_until = receiver.session.locked_until_utc
        assert locked_until is not None and locked_until > now
        received = receive_n(receiver, 5)
        assert [body_text(m) for m in received] == [f"a{i}" for i in range(5)]
        assert all(m.session_id == "a" for m in received)
        for m in received:
            receiver.complete_message(m)
    with client.get_queue_receiver(
        session_queue, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5
    ) as receiver:
        assert receiver.session.session_id == "b"
        received = receive_n(receiver, 3)
        assert [body_text(m) for m in received] == ["b0", "b1", "b2"]
        for m in received:
            receiver.complete_message(m)


def test_session_state_and_lock_renewal(client, session_queue):
    send(client, session_queue, "s", ["x"])
    with client.get_queue_receiver(session_queue, session_id="s", max_wait_time=5) as receiver:
        session = receiver.session
        assert session.get_state() is None
        session.set_state(b"checkpoint-1")
        assert session.get_state() == b"checkpoint-1"
        before = session.locked_until_utc
        renewed = session.renew_lock()
        assert renewed >= before
        session.set_state(None)
        assert session.get_state() is None
        [message] = receive_n(receiver, 1)
        receiver.complete_message(message)


def test_next_available_times_out_without_sessions(no_retry_client, session_queue):
    receiver = no_retry_client.get_queue_receiver(
        session_queue, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=2
    )
    with pytest.raises(OperationTimeoutError):
        with receiver:
            receiver.receive_messages(max_wait_time=2)


def test_a_session_held_elsewhere_cannot_be_locked(client, no_retry_client, session_queue):
    send(client, session_queue, "held", ["x"])
    with client.get_queue_receiver(session_queue, session_id="held", max_wait_time=5):
        other = no_retry_client.get_queue_receiver(
            session_queue, session_id="held", max_wait_time=2
        )
        with pytest.raises(SessionCannotBeLockedError):
            with other:
                other.receive_messages(max_wait_time=2)


def test_session_peek_and_deferred_messages(client, session_queue):
    send(client, session_queue, "d", ["d0", "d1"])
    send(client, session_queue, "other", ["o"])
    with client.get_queue_receiver(session_queue, session_id="d", max_wait_time=5) as receiver:
        peeked = receiver.peek_messages(max_message_count=10)
        assert [body_text(m) for m in peeked] == ["d0", "d1"]
        first, second = receive_n(receiver, 2)
        receiver.defer_message(first)
        receiver.complete_message(second)
        [deferred] = receiver.receive_deferred_messages([first.sequence_number])
        assert body_text(deferred) == "d0"
        assert deferred.session_id == "d"
        receiver.complete_message(deferred)
        assert receiver.peek_messages(max_message_count=10) == []


def test_session_subscription(admin, client):
    topic = f"py-sessions-topic-{uuid.uuid4().hex[:8]}"
    admin.create_topic(topic)
    try:
        admin.create_subscription(topic, "s", requires_session=True)
        assert admin.get_subscription(topic, "s").requires_session is True
        with client.get_topic_sender(topic) as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}", session_id="t") for i in range(3)])
        with client.get_subscription_receiver(
            topic, "s", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5
        ) as receiver:
            assert receiver.session.session_id == "t"
            received = receive_n(receiver, 3)
            assert [body_text(m) for m in received] == ["m0", "m1", "m2"]
            for m in received:
                receiver.complete_message(m)
            receiver.session.set_state(b"done")
            assert receiver.session.get_state() == b"done"
    finally:
        admin.delete_topic(topic)
