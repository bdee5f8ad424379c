"""A fresh namespace per test (issue 28 item 14).

A server started with ``--namespaces-on-demand`` creates a namespace the first time a client
addresses it by host name: ``Endpoint=sb://test-42.localhost:<port>`` is namespace ``test-42``,
with its own entities, counts and quotas. The ``fresh_namespace`` fixture below is the whole
recipe: a new name per test, the server's connection string with that host, and the admin and
messaging clients of the official SDK made from it, unmodified.

``*.localhost`` resolves to the loopback address where the resolver follows RFC 6761
(systemd-resolved, macOS, browsers); glibc's does not, so the fixture maps those names to
127.0.0.1 inside the test process (an ``/etc/hosts`` line per name does the same system-wide).
"""

import os
import re
import socket
import uuid

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusAuthenticationError
from azure.servicebus.management import ServiceBusAdministrationClient

pytestmark = pytest.mark.skipif(
    os.environ.get("IRONBUS_NAMESPACES_ON_DEMAND") != "1",
    reason="the server was not started with --namespaces-on-demand (a cluster serves one namespace)",
)


@pytest.fixture
def localhost_names(monkeypatch):
    """Resolve ``<anything>.localhost`` to 127.0.0.1, as RFC 6761 resolvers do."""
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if isinstance(host, str) and host.endswith(".localhost"):
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def with_host(connection_string: str, host: str, port: int = None) -> str:
    """The connection string with its endpoint's host (and port) replaced."""

    def replace(match):
        return f"Endpoint=sb://{host}:{port or match.group(2)}"

    return re.sub(r"Endpoint=sb://([^:/;]+):(\d+)/?", replace, connection_string, count=1)


class Namespace:
    def __init__(self, name: str, connection_string: str, https_port: int):
        self.name = name
        self.connection_string = with_host(connection_string, f"{name}.localhost")
        self.admin_connection_string = with_host(connection_string, f"{name}.localhost", https_port)

    def admin(self) -> ServiceBusAdministrationClient:
        # The admin client always speaks HTTPS; the development certificate names `localhost`
        # only, so its name check cannot pass for `<name>.localhost` (a certificate given with
        # --tls-cert that names the hosts can).
        return ServiceBusAdministrationClient.from_connection_string(
            self.admin_connection_string, connection_verify=False
        )

    def client(self) -> ServiceBusClient:
        return ServiceBusClient.from_connection_string(self.connection_string)


@pytest.fixture
def fresh_namespace(connection_string, localhost_names):
    """A namespace of its own for this test: created on the first request that addresses it."""
    admin = os.environ["IRONBUS_ADMIN_CONNECTION_STRING"]
    port = int(re.search(r"Endpoint=sb://[^:/;]+:(\d+)", admin).group(1))
    return lambda: Namespace(f"test-{uuid.uuid4().hex[:12]}", connection_string, port)


def test_each_test_gets_a_namespace_of_its_own(fresh_namespace, connection_string):
    first, second = fresh_namespace(), fresh_namespace()
    for namespace in (first, second):
        with namespace.admin() as admin:
            admin.create_queue("orders", max_delivery_count=3)
            assert [q.name for q in admin.list_queues()] == ["orders"]
    with first.client() as client, client.get_queue_sender("orders") as sender:
        sender.send_messages([ServiceBusMessage(f"first {i}") for i in range(3)])
    with second.client() as client, client.get_queue_sender("orders") as sender:
        sender.send_messages(ServiceBusMessage("second"))

    # Same queue name, separate queues and counts.
    with first.admin() as admin:
        assert admin.get_queue_runtime_properties("orders").active_message_count == 3
    with second.admin() as admin:
        assert admin.get_queue_runtime_properties("orders").active_message_count == 1
    with second.client() as client, client.get_queue_receiver("orders", max_wait_time=5) as r:
        received = r.receive_messages(max_message_count=5, max_wait_time=5)
        assert [str(m) for m in received] == ["second"]
        for message in received:
            r.complete_message(message)
    # The default namespace (the server's connection string) has no queue "orders": the SDK
    # reports the put-token for a missing entity as an authentication error, as against Azure.
    with ServiceBusClient.from_connection_string(connection_string) as client:
        with pytest.raises(ServiceBusAuthenticationError):
            with client.get_queue_sender("orders") as sender:
                sender.send_messages(ServiceBusMessage("nowhere"))


def test_deleting_in_one_namespace_leaves_the_others(fresh_namespace):
    first, second = fresh_namespace(), fresh_namespace()
    for namespace in (first, second):
        with namespace.admin() as admin:
            admin.create_topic("events")
            admin.create_subscription("events", "all")
    with first.admin() as admin:
        admin.delete_topic("events")
        with pytest.raises(ResourceNotFoundError):
            admin.get_topic("events")
    with second.admin() as admin:
        assert admin.get_subscription("events", "all").name == "all"


def test_a_token_for_one_namespace_does_not_open_another(fresh_namespace):
    first, second = fresh_namespace(), fresh_namespace()
    with first.admin() as admin:
        admin.create_queue("q")
    with second.admin() as admin:
        admin.create_queue("q")
    # The SDK signs for the namespace it is told; connecting to another host with that token
    # is refused.
    from azure.core.credentials import AzureSasCredential
    from azure.servicebus._base_handler import _generate_sas_token

    token = _generate_sas_token(
        f"sb://{first.name}.localhost/q", "RootManageSharedAccessKey", "SAS_KEY_VALUE"
    ).token
    endpoint = f"{second.name}.localhost"
    port = int(re.search(r"Endpoint=sb://[^:]+:(\d+)", second.connection_string).group(1))
    client = ServiceBusClient(
        f"{endpoint}:{port}",
        AzureSasCredential(token if isinstance(token, str) else token.decode()),
        use_tls=False,
    )
    with client:
        with pytest.raises(ServiceBusAuthenticationError):
            with client.get_queue_sender("q") as sender:
                sender.send_messages(ServiceBusMessage("with the wrong namespace's token"))
