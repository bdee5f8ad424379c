"""The official ``ServiceBusAdministrationClient`` (ATOM over HTTPS) against ironbus: queue
create / get / update / list / delete, partitioned and not, runtime properties while messages
are queued, the namespace, and the limited availability status of a queue whose partition is
down.

Each test creates its own queues, named ``py-admin-<what>-<random>`` so that reruns against the
same server do not collide, and deletes them at the end.
"""

import datetime
import time
import uuid

import pytest
import requests
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.servicebus import ServiceBusClient, ServiceBusMessage


def fresh(what: str) -> str:
    return f"py-admin-{what}-{uuid.uuid4().hex[:8]}"


def test_queue_lifecycle(admin):
    name = fresh("life")
    created = admin.create_queue(
        name, max_delivery_count=5, lock_duration=datetime.timedelta(seconds=30)
    )
    assert created.name == name
    assert created.max_delivery_count == 5
    assert created.lock_duration == datetime.timedelta(seconds=30)
    assert created.enable_partitioning is False

    with pytest.raises(ResourceExistsError):
        admin.create_queue(name)

    props = admin.get_queue(name)
    assert props.max_delivery_count == 5
    assert props.requires_session is False
    assert props.status == "Active"
    props.max_delivery_count = 7
    props.default_message_time_to_live = datetime.timedelta(hours=2)
    admin.update_queue(props)
    updated = admin.get_queue(name)
    assert updated.max_delivery_count == 7
    assert updated.default_message_time_to_live == datetime.timedelta(hours=2)
    assert updated.lock_duration == datetime.timedelta(seconds=30)

    names = [q.name for q in admin.list_queues()]
    assert name in names
    # Declared by the compat config: the list spans all of them.
    assert "py-send-single" in names

    admin.delete_queue(name)
    with pytest.raises(ResourceNotFoundError):
        admin.get_queue(name)
    with pytest.raises(ResourceNotFoundError):
        admin.delete_queue(name)


def test_partitioned_queue(admin):
    name = fresh("part")
    created = admin.create_queue(name, enable_partitioning=True)
    assert created.enable_partitioning is True
    props = admin.get_queue(name)
    assert props.enable_partitioning is True
    # An update re-sends the description; partitioning stays.
    props.max_delivery_count = 3
    admin.update_queue(props)
    assert admin.get_queue(name).enable_partitioning is True
    # ... and cannot be switched off: the core refuses, 400.
    props.enable_partitioning = False
    with pytest.raises(HttpResponseError) as refused:
        admin.update_queue(props)
    assert refused.value.status_code == 400
    admin.delete_queue(name)


def test_invalid_settings_are_refused_with_400(admin):
    with pytest.raises(HttpResponseError) as refused:
        admin.create_queue(fresh("bad"), lock_duration=datetime.timedelta(seconds=1))
    assert refused.value.status_code == 400
    assert "LockDuration" in str(refused.value)


def test_runtime_properties_count_queued_messages(admin, connection_string):
    name = fresh("runtime")
    admin.create_queue(name)
    with ServiceBusClient.from_connection_string(connection_string) as client:
        with client.get_queue_sender(name) as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(3)])
    runtime = admin.get_queue_runtime_properties(name)
    assert runtime.name == name
    assert runtime.active_message_count == 3
    assert runtime.total_message_count == 3
    assert runtime.dead_letter_message_count == 0
    assert runtime.scheduled_message_count == 0
    assert runtime.size_in_bytes > 0
    assert runtime.created_at_utc is not None
    listed = {q.name: q for q in admin.list_queues_runtime_properties()}
    assert listed[name].active_message_count == 3
    admin.delete_queue(name)


def test_namespace_properties(admin):
    namespace = admin.get_namespace_properties()
    assert namespace.messaging_sku == "Standard"
    # The namespace of the config the server was started with (`cargo xtask compat`).
    assert namespace.name == "sbemulatorns"


def test_limited_status_when_a_partition_is_unavailable(admin, http_url, http_urls):
    name = fresh("limited")
    admin.create_queue(name, enable_partitioning=True)
    assert str(admin.get_queue(name).availability_status) in ("Available", "EntityAvailabilityStatus.AVAILABLE")

    def fault(available: bool):
        # On every server: in a cluster only the node that runs the partition holds its store.
        for url in http_urls:
            response = requests.post(
                f"{url}/$ironbus/faults",
                params={"entity": name, "partition": "3", "available": str(available).lower()},
                timeout=10,
            )
            assert response.status_code == 200, response.text

    fault(False)
    try:
        status = admin.get_queue(name).availability_status
        assert status == "Limited", status
        health = requests.get(f"{http_url}/health", timeout=10)
        assert health.status_code == 503
        limited = {e["name"]: e for e in health.json()["limited_entities"]}
        assert limited[name]["unavailable_partitions"] == [3]
    finally:
        fault(True)
    deadline = time.monotonic() + 15
    while admin.get_queue(name).availability_status != "Available":
        assert time.monotonic() < deadline, "the partition never came back"
        time.sleep(0.2)
    admin.delete_queue(name)


def test_admin_over_plain_http_with_the_emulator_workaround(http_url):
    """Microsoft's emulator sample points the Python admin client at plain HTTP by overriding
    its base URL; the token it signs still says ``https://``, which ironbus accepts."""
    import os

    from azure.servicebus.management import ServiceBusAdministrationClient

    client = ServiceBusAdministrationClient.from_connection_string(
        os.environ["IRONBUS_ADMIN_CONNECTION_STRING"]
    )
    client._impl._client._base_url = http_url  # noqa: SLF001 - the documented workaround
    with client:
        name = fresh("plain")
        client.create_queue(name)
        assert client.get_queue(name).name == name
        assert name in [q.name for q in client.list_queues()]
        client.delete_queue(name)
