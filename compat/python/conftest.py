"""Fixtures of the Python compatibility suite.

The suite drives a running ironbus through the official ``azure-servicebus`` SDK, unmodified. The
connection string comes from ``IRONBUS_CONNECTION_STRING`` (``cargo xtask compat`` starts a server
with the queues these tests need and sets it), for example (one line)::

    Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=RootManageSharedAccessKey;
    SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true
"""

import os

import pytest
from azure.servicebus import ServiceBusClient

ENV_VAR = "IRONBUS_CONNECTION_STRING"


def with_key(connection_string: str, key: str) -> str:
    """The same connection string with its ``SharedAccessKey`` replaced by ``key``."""
    parts = [part for part in connection_string.split(";") if part.strip()]
    replaced = False
    for index, part in enumerate(parts):
        name, _, _ = part.partition("=")
        if name.strip().lower() == "sharedaccesskey":
            parts[index] = f"SharedAccessKey={key}"
            replaced = True
    if not replaced:
        raise ValueError(f"{ENV_VAR} has no SharedAccessKey to replace")
    return ";".join(parts)


@pytest.fixture(scope="session")
def connection_string() -> str:
    value = os.environ.get(ENV_VAR, "").strip()
    if not value:
        pytest.fail(f"{ENV_VAR} is not set: run the suite with `cargo xtask compat python`")
    return value


@pytest.fixture(scope="session")
def bad_key_connection_string(connection_string: str) -> str:
    return with_key(connection_string, "wrong")


@pytest.fixture
def client(connection_string: str):
    """A client of its own for each test (the SDK opens one connection per sender/receiver)."""
    with ServiceBusClient.from_connection_string(connection_string) as sb_client:
        yield sb_client


ADMIN_ENV_VAR = "IRONBUS_ADMIN_CONNECTION_STRING"
HTTP_ENV_VAR = "IRONBUS_HTTP_URL"
HTTP_ALL_ENV_VAR = "IRONBUS_HTTP_URLS"
CA_ENV_VAR = "IRONBUS_CA_CERT"


def _required(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        pytest.fail(f"{name} is not set: run the suite with `cargo xtask compat python`")
    return value


@pytest.fixture(scope="session")
def http_url() -> str:
    """The plain HTTP listener: REST data plane, /health, /metrics, the testing fault endpoint."""
    return _required(HTTP_ENV_VAR).rstrip("/")


@pytest.fixture(scope="session")
def http_urls(http_url: str) -> list:
    """Every server's plain HTTP listener, ``http_url`` first: one server, or every node of a
    cluster (``IRONBUS_HTTP_URLS``, separated by spaces). A fault is injected where the
    partition runs, and a metric counted there."""
    others = os.environ.get(HTTP_ALL_ENV_VAR, "").split()
    return [http_url] + [url.rstrip("/") for url in others if url.rstrip("/") != http_url]


@pytest.fixture
def admin():
    """The official admin client over the HTTPS listener, trusting ironbus's development CA."""
    from azure.servicebus.management import ServiceBusAdministrationClient

    client = ServiceBusAdministrationClient.from_connection_string(
        _required(ADMIN_ENV_VAR), connection_verify=_required(CA_ENV_VAR)
    )
    with client:
        yield client
