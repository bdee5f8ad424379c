"""Helpers shared by the Python compatibility tests.

Queue names: every test uses its own queue, named ``py-<name>``. The queues and their properties
are declared in one list in ``xtask/src/compat.rs`` (``cargo xtask compat config`` prints the
generated emulator-format config.json), which creates the same set for the JS suite as
``js-<name>``.
"""

import time
from typing import Callable, List, Optional

from azure.servicebus import ServiceBusReceivedMessage, ServiceBusReceiver

PREFIX = "py-"

# Partition id of a sequence number on a partitioned entity: ironbus keeps it in the top 16 bits.
PARTITION_SHIFT = 48


def queue(name: str) -> str:
    """The queue this suite declared as ``name``."""
    return PREFIX + name


def body_bytes(message: ServiceBusReceivedMessage) -> bytes:
    """The message body: the concatenated data sections."""
    body = message.body
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    return b"".join(body)


def body_text(message: ServiceBusReceivedMessage) -> str:
    return body_bytes(message).decode("utf-8")


def partition_of(sequence_number: int) -> int:
    return sequence_number >> PARTITION_SHIFT


def receive_n(
    receiver: ServiceBusReceiver,
    count: int,
    timeout: float = 15.0,
) -> List[ServiceBusReceivedMessage]:
    """Receives until ``count`` messages arrived or ``timeout`` seconds passed.

    One ``receive_messages`` call may return fewer messages than asked for (the SDK stops shortly
    after the first one arrives), so keep asking until the deadline.
    """
    deadline = time.monotonic() + timeout
    received: List[ServiceBusReceivedMessage] = []
    while len(received) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        batch = receiver.receive_messages(
            max_message_count=count - len(received), max_wait_time=max(remaining, 0.5)
        )
        received.extend(batch)
    return received


def receive_none(
    receiver: ServiceBusReceiver, wait: float = 2.0
) -> List[ServiceBusReceivedMessage]:
    """Receives for ``wait`` seconds; the caller asserts that the result is empty."""
    return receiver.receive_messages(max_message_count=10, max_wait_time=wait)


def peek_all(receiver: ServiceBusReceiver, from_sequence_number: int = 1, limit: int = 1000):
    """Peeks from ``from_sequence_number`` (explicitly: the SDK's default continues after the last
    message this receiver saw) until the queue has no more messages."""
    peeked: List[ServiceBusReceivedMessage] = []
    next_sequence_number = from_sequence_number
    while len(peeked) < limit:
        batch = receiver.peek_messages(
            max_message_count=min(100, limit - len(peeked)), sequence_number=next_sequence_number
        )
        if not batch:
            break
        peeked.extend(batch)
        next_sequence_number = batch[-1].sequence_number + 1
    return peeked


def timed(action: Callable[[], object]) -> "tuple[Optional[Exception], float]":
    """Runs ``action``; returns the exception it raised (or None) and the seconds it took."""
    start = time.monotonic()
    try:
        action()
    except Exception as error:  # noqa: BLE001 - the caller asserts on the exception's type
        return error, time.monotonic() - start
    return None, time.monotonic() - start
