"""What Service Bus does with the bytes of a message, as Microsoft's own azure-servicebus suite
records it (issue 17, divergences 1, 2, 3 and 5), through the official SDK.

Each test creates its own queue over the admin API and deletes it afterwards.
"""

import datetime
import uuid
from decimal import Decimal

import pytest
from azure.core.exceptions import HttpResponseError
from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.amqp import AmqpAnnotatedMessage
from azure.servicebus.management import ApiVersion, ServiceBusAdministrationClient

from conftest import ADMIN_ENV_VAR, CA_ENV_VAR, _required
from helpers import body_bytes

LOCK_TOKEN = b"x-opt-lock-token"


@pytest.fixture
def fresh_queue(admin):
    name = f"py-wire-{uuid.uuid4().hex[:12]}"
    admin.create_queue(name)
    try:
        yield name
    finally:
        admin.delete_queue(name)


def receive_one(client, queue_name, mode=ServiceBusReceiveMode.PEEK_LOCK):
    """One message, completed when locked; with the lock token it had (settling clears it)."""
    with client.get_queue_receiver(queue_name, receive_mode=mode, max_wait_time=10) as receiver:
        received = receiver.receive_messages(max_message_count=1, max_wait_time=10)
        assert len(received) == 1
        message = received[0]
        token = message.lock_token
        if mode == ServiceBusReceiveMode.PEEK_LOCK:
            receiver.complete_message(message)
        return message, token


def test_delivery_annotations_sent_after_the_body_reach_the_receiver(client, fresh_queue):
    # The SDK's encoder writes the delivery-annotations section last, after the body.
    message = AmqpAnnotatedMessage(data_body=[b"aa", b"bb"], delivery_annotations={"k": "v"})
    with client.get_queue_sender(fresh_queue) as sender:
        sender.send_messages(message)
    received, token = receive_one(client, fresh_queue)
    annotations = received.raw_amqp_message.delivery_annotations
    assert annotations[b"k"] == b"v"
    assert annotations[LOCK_TOKEN] == token
    assert body_bytes(received) == b"aabb"


def test_a_received_message_can_be_sent_and_scheduled_again(client, fresh_queue):
    with client.get_queue_sender(fresh_queue) as sender:
        sender.send_messages(ServiceBusMessage("again", application_properties={"n": 1}))
        first, first_token = receive_one(client, fresh_queue)
        # It carries our x-opt-lock-token in its delivery annotations, written last.
        sender.send_messages(first)
        second, second_token = receive_one(client, fresh_queue)
        at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)
        sender.schedule_messages(second, at)
        third, third_token = receive_one(client, fresh_queue)
    for message, token in ((second, second_token), (third, third_token)):
        assert str(message) == "again"
        assert message.application_properties[b"n"] == 1
        assert message.raw_amqp_message.delivery_annotations[LOCK_TOKEN] == token
    assert len({first_token, second_token, third_token}) == 3


def backcompat_message():
    # test_message.py's test_message_backcompat_*_databody message.
    return ServiceBusMessage(
        body="hello",
        application_properties={"prop": "test"},
        session_id="id_session",
        message_id="id_message",
        time_to_live=datetime.timedelta(seconds=30),
        content_type="content type",
        correlation_id="correlation",
        subject="github",
        partition_key="id_session",
        to="forward to",
        reply_to="reply to",
        reply_to_session_id="reply to session",
    )


def test_receive_and_delete_delivery_has_service_bus_shape(client, fresh_queue):
    with client.get_queue_sender(fresh_queue) as sender:
        sender.send_messages(backcompat_message())
    received, _ = receive_one(client, fresh_queue, ServiceBusReceiveMode.RECEIVE_AND_DELETE)
    legacy = received.message
    assert legacy.delivery_annotations == {}
    assert legacy.delivery_tag is None, "a settled delivery has an empty tag"
    assert sorted(legacy.annotations) == [
        b"x-opt-enqueued-time",
        b"x-opt-partition-key",
        b"x-opt-sequence-number",
    ]
    # The size the suite recorded against Service Bus.
    assert legacy.get_message_encoded_size() == 263


def test_peek_lock_delivery_has_service_bus_shape(client, fresh_queue):
    with client.get_queue_sender(fresh_queue) as sender:
        sender.send_messages(backcompat_message())
    received, _ = receive_one(client, fresh_queue)
    legacy = received.message
    assert list(legacy.delivery_annotations) == [LOCK_TOKEN]
    assert sorted(legacy.annotations) == [
        b"x-opt-enqueued-time",
        b"x-opt-locked-until",
        b"x-opt-partition-key",
        b"x-opt-sequence-number",
    ]
    assert legacy.get_message_encoded_size() == 333


def test_deferred_message_says_so(client, fresh_queue):
    with client.get_queue_sender(fresh_queue) as sender:
        sender.send_messages(ServiceBusMessage("later"))
    with client.get_queue_receiver(fresh_queue, max_wait_time=10) as receiver:
        (message,) = receiver.receive_messages(max_message_count=1, max_wait_time=10)
        assert b"x-opt-message-state" not in message.raw_amqp_message.annotations
        receiver.defer_message(message)
        (deferred,) = receiver.receive_deferred_messages([message.sequence_number])
        assert deferred.raw_amqp_message.annotations[b"x-opt-message-state"] == 1
        receiver.complete_message(deferred)


def test_a_decimal_property_comes_back_as_the_same_decimal(client, fresh_queue):
    properties = {"prop": "test", "decimalprop": Decimal("1.2345"), "negative": Decimal("-7.5")}
    with client.get_queue_sender(fresh_queue) as sender:
        sender.send_messages(ServiceBusMessage("hello", application_properties=properties))
    with client.get_queue_receiver(fresh_queue, max_wait_time=10) as receiver:
        (peeked,) = receiver.peek_messages(max_message_count=1)
        assert peeked.application_properties[b"decimalprop"] == Decimal("1.2345")
    received, _ = receive_one(client, fresh_queue, ServiceBusReceiveMode.RECEIVE_AND_DELETE)
    assert received.application_properties[b"decimalprop"] == Decimal("1.2345")
    assert received.application_properties[b"negative"] == Decimal("-7.5")
    assert received.application_properties[b"prop"] == b"test"


def test_max_message_size_needs_api_version_2021_05():
    name = f"py-wire-{uuid.uuid4().hex[:12]}"
    old = ServiceBusAdministrationClient.from_connection_string(
        _required(ADMIN_ENV_VAR), connection_verify=_required(CA_ENV_VAR), api_version=ApiVersion.V2017_04
    )
    with old:
        with pytest.raises(HttpResponseError) as refused:
            old.create_queue(name, max_message_size_in_kilobytes=1024)
        assert refused.value.status_code == 400
        assert "MaxMessageSizeInKilobytes" in str(refused.value)
        old.create_queue(name)
        old.delete_queue(name)
