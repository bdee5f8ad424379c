"""AMQP over TLS and over WebSockets with the official SDK, as against Service Bus.

* TLS: a connection string without ``UseDevelopmentEmulator``
  (``IRONBUS_TLS_CONNECTION_STRING``, ``sb://localhost:<amqps port>/``), the development CA
  trusted through ``connection_verify``. The SDK always dials 5671 for such a string, so the test
  names the suite's port with ``custom_endpoint_address`` (what the SDK offers for proxies and
  private endpoints; it keeps the TLS name ``localhost``).
* WebSockets: ``TransportType.AmqpOverWebsocket`` to ``wss://localhost:<https port>/$servicebus/websocket``
  (the SDK's default port is 443; ``custom_endpoint_address`` names the HTTPS listener's).

Each round trip sends a small and a 200 KB message (larger than a TLS record, a frame and a
WebSocket message of the SDK) and uses ``$management`` (peek) on the same kind of connection.
"""

import os
import time
from urllib.parse import urlparse

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType
from azure.servicebus.exceptions import ServiceBusConnectionError

from helpers import body_bytes, body_text, queue, receive_n, receive_none

TLS_ENV_VAR = "IRONBUS_TLS_CONNECTION_STRING"
ADMIN_ENV_VAR = "IRONBUS_ADMIN_CONNECTION_STRING"
CA_ENV_VAR = "IRONBUS_CA_CERT"
LARGE = bytes(i % 251 for i in range(200_000))


def _required(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        pytest.fail(f"{name} is not set: run the suite with `cargo xtask compat python`")
    return value


def _endpoint(connection_string: str):
    """The Endpoint's URL of a connection string."""
    for part in connection_string.split(";"):
        name, _, value = part.partition("=")
        if name.strip().lower() == "endpoint":
            return urlparse(value.strip())
    pytest.fail(f"no Endpoint in {connection_string!r}")


def _round_trip(client: ServiceBusClient, name: str) -> None:
    with client.get_queue_sender(name) as sender:
        sender.send_messages(ServiceBusMessage("small", message_id="small"))
        sender.send_messages(ServiceBusMessage(LARGE, message_id="large"))
    with client.get_queue_receiver(name) as receiver:
        peeked = receiver.peek_messages(max_message_count=10)
        assert sorted(m.message_id for m in peeked) == ["large", "small"]
        messages = receive_n(receiver, 2)
        by_id = {m.message_id: m for m in messages}
        assert sorted(by_id) == ["large", "small"]
        assert body_text(by_id["small"]) == "small"
        assert body_bytes(by_id["large"]) == LARGE
        for message in messages:
            receiver.complete_message(message)
        assert receive_none(receiver, 1.0) == []


def test_tls_connection_string_without_the_emulator_flag():
    connection = _required(TLS_ENV_VAR)
    assert "UseDevelopmentEmulator" not in connection
    endpoint = _endpoint(connection)
    assert endpoint.hostname == "localhost"
    with ServiceBusClient.from_connection_string(
        connection,
        connection_verify=_required(CA_ENV_VAR),
        custom_endpoint_address=f"sb://localhost:{endpoint.port}",
        transport_type=TransportType.Amqp,
    ) as client:
        _round_trip(client, queue("tls"))


def test_tls_certificate_not_trusted_is_refused_quickly():
    """Without the development CA the SDK's certificate check fails; no message is sent."""
    endpoint = _endpoint(_required(TLS_ENV_VAR))
    with ServiceBusClient.from_connection_string(
        _required(TLS_ENV_VAR),
        custom_endpoint_address=f"sb://localhost:{endpoint.port}",
        transport_type=TransportType.Amqp,
        retry_total=0,
    ) as client:
        started = time.monotonic()
        with pytest.raises(ServiceBusConnectionError) as raised:
            with client.get_queue_sender(queue("tls")) as sender:
                sender.send_messages(ServiceBusMessage("never"))
        assert time.monotonic() - started < 15
        assert "CERTIFICATE_VERIFY_FAILED" in repr(raised.value) or "certificate" in repr(
            raised.value
        ).lower(), repr(raised.value)


def test_amqp_over_websockets():
    connection = _required(ADMIN_ENV_VAR)
    endpoint = _endpoint(connection)
    with ServiceBusClient.from_connection_string(
        connection,
        connection_verify=_required(CA_ENV_VAR),
        custom_endpoint_address=f"sb://localhost:{endpoint.port}",
        transport_type=TransportType.AmqpOverWebsocket,
    ) as client:
        _round_trip(client, queue("websocket"))
