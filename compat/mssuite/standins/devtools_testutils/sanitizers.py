"""The real kit registers these with its recording proxy; without recordings they do nothing."""

from typing import Any


def add_remove_header_sanitizer(**_kwargs: Any) -> None:
    pass


def add_general_regex_sanitizer(**_kwargs: Any) -> None:
    pass


def add_oauth_response_sanitizer(**_kwargs: Any) -> None:
    pass


def set_custom_default_matcher(**_kwargs: Any) -> None:
    pass
