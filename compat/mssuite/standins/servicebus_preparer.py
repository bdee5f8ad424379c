"""ironbus's stand-in for the suite's ``servicebus_preparer`` (which provisions a resource group,
a namespace and its entities through Azure Resource Manager).

The same decorators, with the same parameters, hand the tests the same keyword arguments; the
entities are created through ironbus's admin API (the official ``ServiceBusAdministrationClient``
over the HTTPS listener) and deleted after the test. The namespace is ironbus itself: its name is
the HTTPS listener's host name and ``SERVICEBUS_ENDPOINT_SUFFIX`` is ``:<https-port>``, so
``f"{servicebus_namespace.name}{SERVICEBUS_ENDPOINT_SUFFIX}"`` reaches the admin API over HTTPS,
and AMQP clients given that name use TLS on port 5671, as against Service Bus.

Namespace authorization rules are the policies ``cargo xtask compat`` declares at start-up (one
each for Listen, Send and Manage); queue authorization rules are added to the queue's
``AuthorizationRules`` through the admin API.
"""

import base64
import datetime
import functools
import secrets
from typing import Any, Dict, Iterable, List, Optional

import ironbus_target
from azure.core.exceptions import ResourceNotFoundError
from devtools_testutils import AzureMgmtPreparer, AzureTestError, FakeResource, ResourceGroupPreparer
from devtools_testutils.resource_testcase import RESOURCE_GROUP_PARAM

SERVICEBUS_DEFAULT_AUTH_RULE_NAME = ironbus_target.KEY_NAME
SERVICEBUS_NAMESPACE_PARAM = "servicebus_namespace"
SERVICEBUS_TOPIC_PARAM = "servicebus_topic"
SERVICEBUS_SUBSCRIPTION_PARAM = "servicebus_subscription"
SERVICEBUS_QUEUE_PARAM = "servicebus_queue"
SERVICEBUS_AUTHORIZATION_RULE_PARAM = "servicebus_authorization_rule"
SERVICEBUS_QUEUE_AUTHORIZATION_RULE_PARAM = "servicebus_queue_authorization_rule"
SERVICEBUS_ENDPOINT_SUFFIX = ironbus_target.endpoint_suffix()
LOCATION = "westus"

# The standing entities of a live run's environment (``sb_env_loader.ServiceBusPreparer``).
ENV_QUEUE = "mssuite-queue"
ENV_SESSION_QUEUE = "mssuite-session-queue"
ENV_TOPIC = "mssuite-topic"
ENV_SUBSCRIPTION = "mssuite-subscription"
ENV_SESSION_ID = "mssuite-session"


def environment() -> Dict[str, str]:
    """What ``sb_env_loader.ServiceBusPreparer`` hands a test, its entities created if missing."""
    with ironbus_target.admin_client() as admin:
        _ensure(admin.get_queue, admin.create_queue, ENV_QUEUE)
        _ensure(
            admin.get_queue,
            functools.partial(admin.create_queue, requires_session=True),
            ENV_SESSION_QUEUE,
        )
        if _ensure(admin.get_topic, admin.create_topic, ENV_TOPIC):
            _ensure(
                functools.partial(admin.get_subscription, ENV_TOPIC),
                functools.partial(admin.create_subscription, ENV_TOPIC),
                ENV_SUBSCRIPTION,
            )
    key_name, key = ironbus_target.KEY_NAME, ironbus_target.shared_access_key()
    return {
        "servicebus_connection_str": ironbus_target.connection_string(),
        "servicebus_fully_qualified_namespace": ironbus_target.fully_qualified_namespace(),
        "servicebus_topic_name": ENV_TOPIC,
        "servicebus_subscription_name": ENV_SUBSCRIPTION,
        "servicebus_queue_name": ENV_QUEUE,
        "servicebus_sas_policy": key_name,
        "servicebus_sas_key": key,
        "servicebus_session_queue_name": ENV_SESSION_QUEUE,
        "servicebus_session_id": ENV_SESSION_ID,
        # Service Bus's environment has a policy on the session queue; ironbus has the root key.
        "servicebus_session_queue_sas_policy": key_name,
        "servicebus_session_queue_sas_key": key,
    }


def _ensure(get, create, name: str) -> bool:
    """Creates the entity unless it exists; False when ironbus refused to create it (the test then
    fails where it uses it)."""
    try:
        get(name)
        return True
    except ResourceNotFoundError:
        pass
    try:
        create(name)
        return True
    except Exception as error:  # noqa: BLE001 - e.g. an entity kind ironbus does not have yet
        print(f"ironbus stand-in: could not create `{name}`: {error}")
        return False


def _duration(value: Any) -> Any:
    """``PT30S``-style durations as the admin client's timedelta."""
    if isinstance(value, str) and value.startswith("PT") and value.endswith("S"):
        return datetime.timedelta(seconds=int(value[2:-1]))
    return value


class ServiceBusResourceGroupPreparer(ResourceGroupPreparer):
    def __init__(self, name_prefix: str = "", use_cache: bool = False, **kwargs: Any):
        kwargs.setdefault("random_name_length", 75)
        super().__init__(name_prefix, use_cache, **kwargs)


class ServiceBusNamespacePreparer(AzureMgmtPreparer):
    """The namespace: ironbus, with the root key."""

    def __init__(
        self,
        name_prefix: str = "",
        use_cache: bool = False,
        sku: str = "Standard",
        location: str = LOCATION,
        parameter_name: str = SERVICEBUS_NAMESPACE_PARAM,
        resource_group_parameter_name: str = RESOURCE_GROUP_PARAM,
        **kwargs: Any,
    ):
        super().__init__(name_prefix, 24, **kwargs)
        self.parameter_name = parameter_name

    def parameter_names(self) -> Iterable[str]:
        p = self.parameter_name
        return (p, f"{p}_connection_string", f"{p}_key_name", f"{p}_primary_key")

    def create_resource(self, name: str, **kwargs: Any) -> Dict[str, Any]:
        host = ironbus_target.host()
        self.resource = FakeResource(name=host, id=host)
        p = self.parameter_name
        return {
            p: self.resource,
            f"{p}_connection_string": ironbus_target.connection_string(),
            f"{p}_key_name": ironbus_target.KEY_NAME,
            f"{p}_primary_key": ironbus_target.shared_access_key(),
        }


class _EntityPreparer(AzureMgmtPreparer):
    """An entity created through the admin API under a fresh name, deleted after the test."""

    def __init__(self, name_prefix: str = "", parameter_name: str = "", **kwargs: Any):
        for unused in (
            "use_cache",
            "resource_group_parameter_name",
            "servicebus_namespace_parameter_name",
            "servicebus_topic_parameter_name",
            "servicebus_queue_parameter_name",
        ):
            kwargs.pop(unused, None)
        super().__init__(name_prefix, 24, random_name_enabled=True, **kwargs)
        self.parameter_name = parameter_name
        self.created: Optional[str] = None

    def parameter_names(self) -> Iterable[str]:
        return (self.parameter_name,)

    def create_resource(self, name: str, **kwargs: Any) -> Dict[str, Any]:
        with ironbus_target.admin_client() as admin:
            self.create(admin, name, **kwargs)
        self.created = name
        self.resource = FakeResource(name=name, id=name)
        return {self.parameter_name: self.resource}

    def remove_resource(self, name: str, **kwargs: Any) -> None:
        if self.created != name:
            return
        self.created = None
        with ironbus_target.admin_client() as admin:
            try:
                self.delete(admin, name, **kwargs)
            except ResourceNotFoundError:
                pass

    def create(self, admin, name: str, **kwargs: Any) -> None:
        raise NotImplementedError

    def delete(self, admin, name: str, **kwargs: Any) -> None:
        raise NotImplementedError


class ServiceBusQueuePreparer(_EntityPreparer):
    def __init__(
        self,
        name_prefix: str = "",
        use_cache: bool = False,
        requires_duplicate_detection: bool = False,
        dead_lettering_on_message_expiration: bool = False,
        requires_session: bool = False,
        enable_partitioning: bool = False,
        lock_duration: str = "PT30S",
        parameter_name: str = SERVICEBUS_QUEUE_PARAM,
        **kwargs: Any,
    ):
        super().__init__(name_prefix, parameter_name, **kwargs)
        self.options = {
            "requires_duplicate_detection": requires_duplicate_detection,
            "dead_lettering_on_message_expiration": dead_lettering_on_message_expiration,
            "requires_session": requires_session,
            "enable_partitioning": enable_partitioning,
            "lock_duration": _duration(lock_duration),
        }

    def create(self, admin, name: str, **kwargs: Any) -> None:
        admin.create_queue(name, **self.options)

    def delete(self, admin, name: str, **kwargs: Any) -> None:
        admin.delete_queue(name)


class ServiceBusTopicPreparer(_EntityPreparer):
    def __init__(
        self,
        name_prefix: str = "",
        use_cache: bool = False,
        parameter_name: str = SERVICEBUS_TOPIC_PARAM,
        **kwargs: Any,
    ):
        super().__init__(name_prefix, parameter_name, **kwargs)

    def create(self, admin, name: str, **kwargs: Any) -> None:
        admin.create_topic(name)

    def delete(self, admin, name: str, **kwargs: Any) -> None:
        admin.delete_topic(name)


class ServiceBusSubscriptionPreparer(_EntityPreparer):
    def __init__(
        self,
        name_prefix: str = "",
        use_cache: bool = False,
        parameter_name: str = SERVICEBUS_SUBSCRIPTION_PARAM,
        servicebus_topic_parameter_name: str = SERVICEBUS_TOPIC_PARAM,
        requires_session: bool = False,
        lock_duration: str = "PT60S",
        **kwargs: Any,
    ):
        super().__init__(name_prefix, parameter_name, **kwargs)
        self.topic_parameter_name = servicebus_topic_parameter_name
        self.options = {"requires_session": requires_session, "lock_duration": _duration(lock_duration)}

    def _topic(self, kwargs: Dict[str, Any]) -> str:
        topic = kwargs.get(self.topic_parameter_name)
        if topic is None:
            raise AzureTestError("a subscription needs @ServiceBusTopicPreparer before it")
        return topic.name

    def create(self, admin, name: str, **kwargs: Any) -> None:
        admin.create_subscription(self._topic(kwargs), name, **self.options)

    def delete(self, admin, name: str, **kwargs: Any) -> None:
        admin.delete_subscription(self._topic(kwargs), name)


def _rights(access_rights: Optional[List[Any]]) -> frozenset:
    """The rights a preparer asks for (azure-mgmt-servicebus's ``AccessRights``, by value), Manage
    standing for all three, as on Service Bus."""
    names = {str(getattr(r, "value", r)).lower() for r in access_rights or ("manage",)}
    return frozenset({"manage", "send", "listen"}) if "manage" in names else frozenset(names)


def _connection_string(key_name: str, key: str, entity: Optional[str] = None) -> str:
    """A connection string as Service Bus's portal hands it: the namespace by host name (AMQP over
    TLS on 5671), no ``UseDevelopmentEmulator``."""
    fields = [
        f"Endpoint=sb://{ironbus_target.fully_qualified_namespace()}/",
        f"SharedAccessKeyName={key_name}",
        f"SharedAccessKey={key}",
    ]
    if entity:
        fields.append(f"EntityPath={entity}")
    return ";".join(fields)


class _AuthorizationRulePreparer(AzureMgmtPreparer):
    """A policy with the rights asked for, and its connection string."""

    def __init__(self, name_prefix: str = "", parameter_name: str = "", access_rights: Optional[List[Any]] = None, **kwargs: Any):
        for unused in (
            "use_cache",
            "resource_group_parameter_name",
            "servicebus_namespace_parameter_name",
            "servicebus_queue_parameter_name",
        ):
            kwargs.pop(unused, None)
        super().__init__(name_prefix, 24, random_name_enabled=True)
        self.parameter_name = parameter_name
        self.rights = _rights(access_rights)

    def parameter_names(self) -> Iterable[str]:
        return (self.parameter_name, f"{self.parameter_name}_connection_string")


class ServiceBusNamespaceAuthorizationRulePreparer(_AuthorizationRulePreparer):
    """Service Bus creates a namespace policy through Resource Manager; ironbus's namespace
    policies are declared when it starts (``cargo xtask compat`` declares one for Listen, Send and
    Manage, named in ``IRONBUS_POLICIES``). This hands the one whose rights are exactly those asked
    for, and raises if there is none."""

    def __init__(self, name_prefix: str = "", use_cache: bool = False, parameter_name: str = SERVICEBUS_AUTHORIZATION_RULE_PARAM, **kwargs: Any):
        super().__init__(name_prefix, parameter_name, **kwargs)

    def create_resource(self, name: str, **kwargs: Any) -> Dict[str, Any]:
        for entry in ironbus_target.policies():
            key_name, key, rights = entry
            if _rights(rights.split(",")) == self.rights:
                self.resource = FakeResource(name=key_name, id=key_name)
                return {
                    self.parameter_name: self.resource,
                    f"{self.parameter_name}_connection_string": _connection_string(key_name, key),
                }
        raise AzureTestError(f"no namespace policy in IRONBUS_POLICIES has the rights {sorted(self.rights)}")


class ServiceBusQueueAuthorizationRulePreparer(_AuthorizationRulePreparer):
    """A rule on the test's queue (its ``AuthorizationRules``), added through the admin API as
    Service Bus's Resource Manager adds it, with a fresh key."""

    def __init__(self, name_prefix: str = "", use_cache: bool = False, parameter_name: str = SERVICEBUS_QUEUE_AUTHORIZATION_RULE_PARAM, servicebus_queue_parameter_name: str = SERVICEBUS_QUEUE_PARAM, **kwargs: Any):
        super().__init__(name_prefix, parameter_name, **kwargs)
        self.queue_parameter_name = servicebus_queue_parameter_name

    def create_resource(self, name: str, **kwargs: Any) -> Dict[str, Any]:
        from azure.servicebus.management import AccessRights, AuthorizationRule

        queue = kwargs[self.queue_parameter_name].name
        key = base64.b64encode(secrets.token_bytes(32)).decode("ascii")
        rule = AuthorizationRule(
            type="SharedAccessAuthorizationRule",
            key_name=name,
            claim_type="SharedAccessKey",
            claim_value="None",
            rights=[AccessRights(r.capitalize()) for r in sorted(self.rights)],
            primary_key=key,
            secondary_key=base64.b64encode(secrets.token_bytes(32)).decode("ascii"),
        )
        with ironbus_target.admin_client() as admin:
            description = admin.get_queue(queue)
            description.authorization_rules = list(description.authorization_rules or []) + [rule]
            admin.update_queue(description)
        self.resource = FakeResource(name=name, id=name)
        return {
            self.parameter_name: self.resource,
            f"{self.parameter_name}_connection_string": _connection_string(name, key, queue),
        }


CachedServiceBusResourceGroupPreparer = functools.partial(
    ServiceBusResourceGroupPreparer, use_cache=True, random_name_enabled=True
)
CachedServiceBusNamespacePreparer = functools.partial(ServiceBusNamespacePreparer, use_cache=True)
CachedServiceBusQueuePreparer = functools.partial(ServiceBusQueuePreparer, use_cache=True)
CachedServiceBusTopicPreparer = functools.partial(ServiceBusTopicPreparer, use_cache=True)
CachedServiceBusSubscriptionPreparer = functools.partial(ServiceBusSubscriptionPreparer, use_cache=True)
