"""ironbus's stand-in for ``devtools_testutils``, the Azure SDK team's internal test kit.

It supplies only what the ``azure-servicebus`` test suite imports, and only so that the tests run
live against ironbus: the test-case base classes, the recording decorators and sanitizers (there
is no recording: pass-throughs and no-ops), ``get_credential()`` (the SDK's shared-key credential
for the root key) and the preparers, which hand each test the names and connection strings it asks
for, creating entities through ironbus's admin API. It never skips a test and never touches an
assertion.
"""

import functools
import inspect
from collections import namedtuple
from typing import Any, Callable, Dict, Iterable

import ironbus_target

from .resource_testcase import RESOURCE_GROUP_PARAM
from .sanitizers import (  # noqa: F401 - re-exported, as the real kit does
    add_general_regex_sanitizer,
    add_oauth_response_sanitizer,
    add_remove_header_sanitizer,
    set_custom_default_matcher,
)

FakeResource = namedtuple("FakeResource", ["name", "id"])


class AzureTestError(Exception):
    pass


class ReservedResourceNameError(AzureTestError):
    pass


class AzureRecordedTestCase:
    """Base class of the recorded tests; here every run is live."""

    @property
    def is_live(self) -> bool:
        return True


class AzureMgmtRecordedTestCase(AzureRecordedTestCase):
    pass


def get_credential(**kwargs: Any):
    """The credential the tests authenticate with: the root key's shared-key credential."""
    return ironbus_target.credential(is_async=kwargs.get("is_async", False))


def get_region_override(default: str = "westus") -> str:
    return default


def recorded_by_proxy(test: Callable) -> Callable:
    """No recording: calls the test with the keyword arguments it declares."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> Any:
        return test(*args, **trimmed(test, kwargs))

    return run


def trimmed(fn: Callable, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """``kwargs`` without the names ``fn`` (seen through its wrappers) cannot take; all of them for a
    preparer or a function with ``**kwargs``."""
    if getattr(fn, "__is_preparer", False):
        return dict(kwargs)
    parameters = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return dict(kwargs)
    names = {p.name for p in parameters}
    return {name: value for name, value in kwargs.items() if name in names}


class AzureMgmtPreparer:
    """A decorator that creates a resource before the test and removes it after.

    Subclasses implement ``create_resource(name, **kwargs) -> dict`` (merged into the test's keyword
    arguments), ``remove_resource(name, **kwargs)`` and ``parameter_names()`` (the names it
    supplies, hidden from pytest so it does not look for fixtures of those names).
    """

    def __init__(
        self,
        name_prefix: str = "",
        random_name_length: int = 24,
        disable_recording: bool = True,
        playback_fake_resource: Any = None,
        client_kwargs: Any = None,
        random_name_enabled: bool = False,
        **_ignored: Any,
    ):
        self.name_prefix = name_prefix
        self.random_name_length = random_name_length
        self.random_name_enabled = random_name_enabled
        self.resource_moniker = name_prefix
        self.resource = None
        self.test_class_instance = None

    # The real kit's knobs; nothing to do for a live run against ironbus.
    def set_cache(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    @property
    def is_live(self) -> bool:
        return True

    @property
    def moniker(self) -> str:
        return self.resource_moniker

    def create_random_name(self) -> str:
        return ironbus_target.random_name(self.name_prefix, self.random_name_length)

    def parameter_names(self) -> Iterable[str]:
        return ()

    def create_resource(self, name: str, **kwargs: Any) -> Dict[str, Any]:
        return {}

    def remove_resource(self, name: str, **kwargs: Any) -> None:
        pass

    def __call__(self, fn: Callable) -> Callable:
        def wrapper(test_class_instance: Any, **kwargs: Any) -> Any:
            self.test_class_instance = test_class_instance
            name = self.create_random_name()
            kwargs.update(self.create_resource(name, **kwargs) or {})
            try:
                return fn(test_class_instance, **trimmed(fn, kwargs))
            finally:
                self.remove_resource(name, **kwargs)

        functools.update_wrapper(wrapper, fn)
        supplied = set(self.parameter_names())
        signature = inspect.signature(fn)
        wrapper.__signature__ = signature.replace(
            parameters=[p for p in signature.parameters.values() if p.name not in supplied]
        )
        setattr(wrapper, "__is_preparer", True)
        return wrapper


class ResourceGroupPreparer(AzureMgmtPreparer):
    """A resource group: a name only (ironbus has no Azure Resource Manager)."""

    def __init__(
        self,
        name_prefix: str = "",
        use_cache: bool = False,
        random_name_length: int = 75,
        parameter_name: str = RESOURCE_GROUP_PARAM,
        parameter_name_for_location: str = "location",
        location: str = "westus",
        **kwargs: Any,
    ):
        super().__init__(name_prefix, random_name_length, **kwargs)
        self.parameter_name = parameter_name
        self.parameter_name_for_location = parameter_name_for_location
        self.location = location

    def parameter_names(self) -> Iterable[str]:
        return (self.parameter_name, self.parameter_name_for_location)

    def create_resource(self, name: str, **kwargs: Any) -> Dict[str, Any]:
        self.resource = FakeResource(name=name, id=f"/resourceGroups/{name}")
        return {self.parameter_name: self.resource, self.parameter_name_for_location: self.location}


CachedResourceGroupPreparer = functools.partial(ResourceGroupPreparer, use_cache=True)
RandomNameResourceGroupPreparer = functools.partial(ResourceGroupPreparer, random_name_enabled=True)


class PowerShellPreparer(AzureMgmtPreparer):
    """The environment of a live run (the real kit reads it from variables the pipeline's ARM
    template set). For ``servicebus`` every value the suite's ``sb_env_loader`` declares comes from
    ironbus: the root connection string and key, the namespace's fully qualified name, and a queue,
    a session queue, a topic and a subscription, created through the admin API when missing (the
    management tests clear all queues and topics)."""

    def __init__(self, directory: str, **defaults: Any):
        super().__init__("", 24)
        self.directory = directory
        self.defaults = defaults

    def parameter_names(self) -> Iterable[str]:
        return tuple(self.defaults)

    def create_resource(self, name: str, **kwargs: Any) -> Dict[str, Any]:
        if self.directory != "servicebus":
            raise AzureTestError(f"the ironbus stand-in only knows the `servicebus` environment")
        import servicebus_preparer

        values = servicebus_preparer.environment()
        unknown = sorted(set(self.defaults) - set(values))
        if unknown:
            raise AzureTestError(f"the ironbus stand-in has no value for {unknown}")
        return {key: values[key] for key in self.defaults}
