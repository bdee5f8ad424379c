"""The async recording decorator: a pass-through, as ``recorded_by_proxy``."""

import functools
from typing import Any, Callable

from . import trimmed


def recorded_by_proxy_async(test: Callable) -> Callable:
    @functools.wraps(test)
    async def run(*args: Any, **kwargs: Any) -> Any:
        return await test(*args, **trimmed(test, kwargs))

    return run
