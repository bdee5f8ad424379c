"""``get_random_bytes``, the one helper of the real kit's perf framework the tests use."""

import os


def get_random_bytes(size: int) -> bytes:
    return os.urandom(size)
