"""The ledger of ``cargo xtask cluster``'s driver: what was sent, what came back, and the verdict.

The driver records four kinds of events, from any thread:

- ``attempt(id)``: a send of message ``id`` is about to be tried (the first try or a retry; a
  retry keeps the MessageId, so duplicate detection drops the copy of a send that was stored
  although its acknowledgement was lost);
- ``acknowledge(id)``: a send of ``id`` returned without error;
- ``deliver(id, sequence_number)``: a consumer received ``id`` in peek-lock mode;
- ``complete(id)``: completing that delivery returned without error;
- ``complete_failed(id, ambiguous)``: completing it failed. Not ``ambiguous`` (the SDK refused
  before sending, the broker answered that the lock is lost): the message must come back, and
  completing it then is not a duplicate. ``ambiguous`` (the connection dropped, a time-out, the
  node forwarding the completion lost its owner): the broker may have applied it.

Besides, ``error(operation, name, retriable)`` counts every exception the SDK raised, by
operation (``send``, ``receive``, ``complete``), exception type and whether the driver judged it
retriable (the SDK's own ``retryable`` flag on its ``ServiceBusError``\ s; a time-out or dropped
connection from the standard library counts as retriable, anything else not). The verdict lists
them (``errors``) and counts the kinds judged not retriable (``non_retriable_errors``): for
information, since a scenario decides which it tolerates.

The verdict (:func:`verdict`), over distinct MessageIds:

- ``sent``: acknowledged;
- ``received``: completed at least once;
- ``lost``: acknowledged but never completed, and no completion of it failed ambiguously — a
  failure;
- ``unsettled``: acknowledged, never completed, but a completion of it failed ambiguously and it
  never came back: consistent with that completion having been applied, so allowed, and listed
  (``unsettled_ids``) since it is also what a lost message would look like;
- ``duplicated``: completed successfully two or more times — a failure (a message received
  again after a failed completion is not a duplicate unless completed twice);
- ``unknown``: completed but never sent by this driver, not even attempted — a failure;
- ``unconfirmed``: completed, attempted, never acknowledged (the client never learnt that the
  broker stored it: allowed, since a send's outcome is unknown when its acknowledgement is lost);
- ``redelivered``: delivered more than once (a completion that failed, a lock lost with its
  node): allowed, for information;
- ``returned_after_completion``: delivered again after a successful completion: for
  information (the broker lost a completion it acknowledged; ``duplicated`` counts it if the
  second completion succeeded too).

This module uses the standard library alone: ``python3 -m unittest test_ledger`` in this
directory tests it without the SDK, and ``cargo xtask cluster`` runs that first.
"""

import threading
import time
from collections import Counter
from typing import Dict, Iterable, List, Optional, Set

# How many ids of each failing kind a verdict lists (the counts are always complete).
LISTED = 50

# A partitioned entity's sequence number holds the partition id in its top 16 bits.
PARTITION_SHIFT = 48


class Ledger:
    """Thread-safe record of sends and receipts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.attempted: Set[str] = set()
        self.acknowledged: Set[str] = set()
        self.deliveries: Counter = Counter()
        self.completions: Counter = Counter()
        self.partition: Dict[str, int] = {}
        self.returned_after_completion: Set[str] = set()
        self.ambiguous_completions: Set[str] = set()
        self.failed_sends = 0
        self.failed_completions = 0
        self.failed_receives = 0
        self.errors: Counter = Counter()
        self.last_delivery = time.monotonic()

    def attempt(self, message_id: str) -> None:
        with self._lock:
            self.attempted.add(message_id)

    def acknowledge(self, message_id: str) -> None:
        with self._lock:
            self.acknowledged.add(message_id)

    def send_failed(self) -> None:
        with self._lock:
            self.failed_sends += 1

    def receive_failed(self) -> None:
        with self._lock:
            self.failed_receives += 1

    def error(self, operation: str, name: str, retriable: bool) -> None:
        with self._lock:
            self.errors[(operation, name, retriable)] += 1

    def deliver(self, message_id: str, sequence_number: Optional[int]) -> None:
        with self._lock:
            self.last_delivery = time.monotonic()
            self.deliveries[message_id] += 1
            if self.completions[message_id] > 0:
                self.returned_after_completion.add(message_id)
            if sequence_number is not None:
                self.partition[message_id] = sequence_number >> PARTITION_SHIFT

    def complete(self, message_id: str) -> None:
        with self._lock:
            self.completions[message_id] += 1

    def complete_failed(self, message_id: str, ambiguous: bool) -> None:
        with self._lock:
            self.failed_completions += 1
            if ambiguous:
                self.ambiguous_completions.add(message_id)

    def quiet_for(self) -> float:
        """Seconds since the last delivery."""
        with self._lock:
            return time.monotonic() - self.last_delivery

    def counts(self) -> dict:
        """Running totals, for progress lines."""
        with self._lock:
            return {
                "sent": len(self.acknowledged),
                "received": sum(1 for n in self.completions.values() if n > 0),
                "failed_sends": self.failed_sends,
                "failed_completions": self.failed_completions,
                "failed_receives": self.failed_receives,
            }

    def verdict(self) -> dict:
        with self._lock:
            report = verdict(
                self.attempted,
                self.acknowledged,
                self.deliveries,
                self.completions,
                self.ambiguous_completions,
            )
            duplicated = report.get("duplicated_ids", [])
            report["duplicated_partitions"] = sorted(
                {self.partition[i] for i in duplicated if i in self.partition}
            )
            report["returned_after_completion"] = len(self.returned_after_completion)
            if self.returned_after_completion:
                returned = sorted(self.returned_after_completion, key=_natural)[:LISTED]
                report["returned_after_completion_ids"] = returned
            report["failed_sends"] = self.failed_sends
            report["failed_completions"] = self.failed_completions
            report["failed_receives"] = self.failed_receives
            report["errors"] = errors(self.errors)
            report["non_retriable_errors"] = sum(
                count for (_, _, retriable), count in self.errors.items() if not retriable
            )
            return report


def verdict(
    attempted: Iterable[str],
    acknowledged: Iterable[str],
    deliveries: Dict[str, int],
    completions: Dict[str, int],
    ambiguous_completions: Iterable[str] = (),
) -> dict:
    """The verdict over the recorded ids (see the module's documentation)."""
    attempted = set(attempted)
    acknowledged = set(acknowledged)
    completed = {i for i, n in completions.items() if n > 0}
    never_completed = acknowledged - completed
    unsettled = sorted(never_completed & set(ambiguous_completions), key=_natural)
    lost = sorted(never_completed - set(unsettled), key=_natural)
    duplicated = sorted((i for i, n in completions.items() if n > 1), key=_natural)
    unknown = sorted(completed - attempted - acknowledged, key=_natural)
    unconfirmed = completed & (attempted - acknowledged)
    redelivered = sum(1 for n in deliveries.values() if n > 1)
    report = {
        "sent": len(acknowledged),
        "received": len(completed),
        "lost": len(lost),
        "duplicated": len(duplicated),
        "unknown": len(unknown),
        "unconfirmed": len(unconfirmed),
        "unsettled": len(unsettled),
        "redelivered": redelivered,
    }
    for name, ids in (
        ("lost_ids", lost),
        ("duplicated_ids", duplicated),
        ("unknown_ids", unknown),
        ("unsettled_ids", unsettled),
    ):
        if ids:
            report[name] = ids[:LISTED]
    report["passed"] = not (lost or duplicated or unknown)
    return report


def errors(counted: Dict[tuple, int]) -> List[dict]:
    """The counted exceptions, most frequent first."""
    listed = sorted(counted.items(), key=lambda item: (-item[1], item[0]))
    return [
        {"operation": operation, "error": name, "retriable": retriable, "count": count}
        for (operation, name, retriable), count in listed
    ]


def _natural(message_id: str) -> List[object]:
    """Sorts ``p1-10`` after ``p1-9``."""
    parts: List[object] = []
    number = ""
    text = ""
    for char in message_id:
        if char.isdigit():
            if text:
                parts.append(text)
                text = ""
            number += char
        else:
            if number:
                parts.append(int(number))
                number = ""
            text += char
    if text:
        parts.append(text)
    if number:
        parts.append(int(number))
    return [(0, p) if isinstance(p, int) else (1, p) for p in parts]
