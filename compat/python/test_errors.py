"""Errors the SDK must recognise: unknown entity, wrong key, oversize message.

Each must come back as the right exception, and quickly: a broker that never answers would make the
SDK wait out its own 60 s operation timeout.
"""

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
)

from helpers import body_bytes, queue, receive_n, timed

QUICK = 15.0  # seconds

# A refusal that never arrives fails the test at this deadline instead of the suite's 60 s.
pytestmark = pytest.mark.timeout(30)


def test_unknown_entity_fails_authentication_as_on_service_bus(connection_string):
    # Not in the generated config. Service Bus refuses the $cbs put-token for an audience naming
    # an entity that does not exist (status 404), before any link is attached, and the SDK raises
    # its authentication error (issue 17, divergence 4; the suite's test_sb_client_bad_entity).
    name = queue("no-such-queue")
    # The SDK retries authentication errors (with back-off); don't.
    client = ServiceBusClient.from_connection_string(connection_string, retry_total=0)

    def send():
        # Entering the context manager already puts the token and attaches the link.
        with client.get_queue_sender(name) as sender:
            sender.send_messages(ServiceBusMessage("lost"), timeout=30)

    error, took = timed(send)
    assert isinstance(error, ServiceBusAuthenticationError), repr(error)
    assert took < QUICK, f"the sender took {took:.1f}s to fail"

    def receive():
        with client.get_queue_receiver(name) as receiver:
            receiver.receive_messages(max_message_count=1, max_wait_time=5)

    error, took = timed(receive)
    client.close()
    assert isinstance(error, ServiceBusAuthenticationError), repr(error)
    assert took < QUICK, f"the receiver took {took:.1f}s to fail"


def test_wrong_key_is_refused(bad_key_connection_string):
    # SharedAccessKey=wrong: the $cbs put-token is refused (the SDK would retry it; don't).
    def send():
        with ServiceBusClient.from_connection_string(
            bad_key_connection_string, retry_total=0
        ) as bad_client:
            with bad_client.get_queue_sender(queue("wrong-key")) as sender:
                sender.send_messages(ServiceBusMessage("forbidden"), timeout=30)

    error, took = timed(send)
    assert isinstance(error, (ServiceBusAuthenticationError, ServiceBusAuthorizationError)), repr(
        error
    )
    assert took < QUICK, f"the refusal took {took:.1f}s"


def test_oversize_message_is_refused(client):
    # MaxMessageSizeInKilobytes 256 on this queue.
    name = queue("oversize")
    with client.get_queue_sender(name) as sender:
        error, took = timed(
            lambda: sender.send_messages(ServiceBusMessage(b"x" * (300 * 1024)), timeout=30)
        )
        assert isinstance(error, MessageSizeExceededError), repr(error)
        assert took < QUICK, f"the refusal took {took:.1f}s"
        # The link still works, and a message under the limit goes through.
        fits = bytes(range(256)) * 800  # 200 KiB
        sender.send_messages(ServiceBusMessage(fits))
    with client.get_queue_receiver(
        name, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
    ) as receiver:
        messages = receive_n(receiver, 1)
        assert len(messages) == 1
        assert body_bytes(messages[0]) == fits
