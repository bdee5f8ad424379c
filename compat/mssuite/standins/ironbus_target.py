"""Where the ironbus under test is, read from the environment ``cargo xtask compat mssuite`` sets.

Shared by the ``devtools_testutils`` stand-in and the ``servicebus_preparer`` stand-in:

- ``IRONBUS_CONNECTION_STRING``: the AMQP listener, plain AMQP (``UseDevelopmentEmulator=true``).
  Handed to the tests wherever they ask for a connection string.
- ``IRONBUS_ADMIN_CONNECTION_STRING``: ``Endpoint=sb://localhost:<https-port>;...``, the HTTPS
  listener. Its host (and its port, unless it is 443) are the "fully qualified namespace" the
  tests get, so the tests' own ``ServiceBusAdministrationClient(fully_qualified_namespace,
  credential)`` reaches ironbus's admin API. ``cargo xtask compat mssuite`` binds HTTPS to 443
  and AMQPS to 5671, Service Bus's ports: the name is then plain ``localhost``, and an AMQP client
  given it connects with TLS to 5671 (with WebSockets, to 443), as against Service Bus. (A port
  in the name would send the AMQP clients to the HTTPS listener.)
- ``IRONBUS_POLICIES``: the namespace policies beyond the root key, ``name:key:rights`` joined by
  ``;`` (the namespace authorization-rule preparer hands them out).
- ``IRONBUS_CA_CERT``: the development CA of the HTTPS listener (the harness also exports it as
  ``REQUESTS_CA_BUNDLE``, which the tests' admin clients use through azure-core).
"""

import os
import uuid
from typing import Dict

KEY_NAME = "RootManageSharedAccessKey"


def _required(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise RuntimeError(f"{name} is not set: run the suite with `cargo xtask compat mssuite`")
    return value


def _fields(connection_string: str) -> Dict[str, str]:
    fields = {}
    for part in connection_string.split(";"):
        name, sep, value = part.partition("=")
        if sep:
            fields[name.strip().lower()] = value.strip()
    return fields


def connection_string() -> str:
    """The namespace's root connection string (plain AMQP to ironbus)."""
    return _required("IRONBUS_CONNECTION_STRING")


def admin_connection_string() -> str:
    return _required("IRONBUS_ADMIN_CONNECTION_STRING")


def policies():
    """The namespace policies beyond the root key (``IRONBUS_POLICIES``, ``name:key:rights`` joined
    by ``;``), as ``(name, key, rights)``."""
    entries = [e for e in os.environ.get("IRONBUS_POLICIES", "").split(";") if e.strip()]
    return [tuple(entry.split(":", 2)) for entry in entries]


def ca_cert() -> str:
    return _required("IRONBUS_CA_CERT")


def shared_access_key() -> str:
    return _fields(connection_string())["sharedaccesskey"]


def host() -> str:
    """The host name of the namespace: the name the HTTPS listener's certificate carries."""
    return _endpoint_host_port()[0]


def endpoint_suffix() -> str:
    """What follows the namespace's name in its fully qualified name: ``:<https-port>``, or nothing
    when the HTTPS listener is on 443."""
    port = _endpoint_host_port()[1]
    return "" if port in ("", "443") else ":" + port


def fully_qualified_namespace() -> str:
    return host() + endpoint_suffix()


def _endpoint_host_port():
    endpoint = _fields(admin_connection_string())["endpoint"]
    authority = endpoint.split("//", 1)[-1].split("/", 1)[0]
    name, _, port = authority.rpartition(":")
    return name, port


def admin_client():
    """The official admin client over ironbus's HTTPS listener, trusting its development CA."""
    from azure.servicebus.management import ServiceBusAdministrationClient

    return ServiceBusAdministrationClient.from_connection_string(
        admin_connection_string(), connection_verify=ca_cert()
    )


def credential(is_async: bool = False):
    """The SDK's own shared-key credential for the root key."""
    if is_async:
        from azure.servicebus.aio._base_handler_async import ServiceBusSharedKeyCredential as Async

        return Async(KEY_NAME, shared_access_key())
    from azure.servicebus._base_handler import ServiceBusSharedKeyCredential

    return ServiceBusSharedKeyCredential(KEY_NAME, shared_access_key())


def random_name(prefix: str, length: int = 24) -> str:
    """A fresh entity name: ``prefix`` (cut so the whole name fits ``length``) and 8 hex digits."""
    suffix = uuid.uuid4().hex[:8]
    return prefix[: max(0, length - len(suffix))] + suffix
