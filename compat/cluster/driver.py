"""The load of ``cargo xtask cluster``: the official Python SDK against every node of a cluster.

Started by the task (``xtask/src/cluster/driver.rs``) with the Python suite's venv::

    driver.py --endpoints 127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3 --queue cluster \\
        --partition-keys K0,K1,...,K15 [--producers 3] [--consumers 3] [--rate 40] [--quiet 12]

- Producer ``k`` connects to endpoint ``k mod n`` and sends messages with MessageIds
  ``p<k>-<n>``, one at a time; a failed send is retried with the same MessageId until it is
  acknowledged (the queue's duplicate detection drops the copy of a send that was stored
  although its acknowledgement was lost). ``--rate``: messages per second per producer (0: as
  fast as it goes).
- Consumer ``c`` connects to endpoint ``c mod n``, receives in peek-lock mode and completes.
- Every attempt, acknowledgement, delivery and completion goes to the ledger (``ledger.py``,
  which also defines the verdict).

Commands, one per line on stdin; each gets exactly one JSON line on stdout:

- ``probe HOST:PORT``: through that node, send one message to every partition of the queue
  (partition ``p`` by PartitionKey ``K<p>`` of ``--partition-keys``; MessageId
  ``probe<round>-<p>``, retried until acknowledged, and counted by the ledger like any other),
  all partitions at once; answers ``{"event": "probe", "seconds": S, "partitions": [s0, ...]}``
  with the seconds from the command to each partition's first acknowledged send (``null``: not
  within ``--probe-timeout``) and ``S`` their maximum;
- ``stats``: ``{"event": "stats", ...}``, the ledger's running totals;
- ``stop`` (or the end of stdin): producers finish their current message, consumers drain until
  no delivery came for ``--quiet`` seconds (longer than the queue's lock, so that a message whose
  lock or completion was lost comes back first), and the driver prints the verdict
  ``{"event": "verdict", "sent": ..., "received": ..., "lost": ..., "duplicated": ..., ...}``
  (with ``errors``: every exception the SDK raised, by operation and type, judged retriable or
  not by :func:`retriable`) and exits.

It prints ``{"event": "ready"}`` once its threads run. Errors and progress go to stderr.
"""

import argparse
import datetime
import json
import os
import sys
import threading
import time
from typing import List, Optional

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.exceptions import (
    MessageAlreadySettled,
    MessageLockLostError,
    ServiceBusError,
)

from ledger import Ledger

SAS_KEY_NAME = "RootManageSharedAccessKey"
# Seconds one send may take before it counts as failed and is tried again.
SEND_TIMEOUT = 10.0
# Seconds one probe send may take: short, so that a probe notices soon when a partition is back.
PROBE_SEND_TIMEOUT = 2.0
# Pause after a failed operation before the next try.
RETRY_PAUSE = 0.2
# Messages a consumer asks for at once, and how long it waits for them.
RECEIVE_BATCH = 20
RECEIVE_WAIT = 1.0
# After `stop`, how long producers may try to get their last message acknowledged.
STOP_SEND_DEADLINE = 60.0
# After `stop`, the longest drain, whatever still arrives.
DRAIN_DEADLINE = 180.0



def log(text: str) -> None:
    """A line of driver.log, stamped with UTC time like the nodes' logs."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-3]
    sys.stderr.write(f"[{now}] {text}\n")
    sys.stderr.flush()


def ambiguous(error: BaseException) -> bool:
    """Whether a failed completion may have been applied all the same: not when the SDK refused
    before sending (its handler was shut down: a ValueError) or the broker answered that the lock
    is lost or the message settled; otherwise (a dropped connection, a time-out, a node that lost
    its way to the partition's owner) it may have."""
    return not isinstance(error, (ValueError, MessageLockLostError, MessageAlreadySettled))


def retriable(error: BaseException) -> bool:
    """Whether an exception is one a client should retry: the SDK's own judgement for its
    errors (``ServiceBusError``'s ``retryable``, which its retry policy follows); a time-out or a
    dropped connection from the standard library; nothing else."""
    if isinstance(error, ServiceBusError):
        return bool(getattr(error, "_retryable", False))
    return isinstance(error, (TimeoutError, ConnectionError))


def reply(event: str, **fields) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def connection_string(endpoint: str, key: str) -> str:
    return (
        f"Endpoint=sb://{endpoint};SharedAccessKeyName={SAS_KEY_NAME};SharedAccessKey={key};"
        "UseDevelopmentEmulator=true"
    )


def describe(error: BaseException) -> str:
    text = str(error).replace("\n", " ")
    return f"{type(error).__name__}: {text[:200]}"


class Link:
    """A client and one sender or receiver on one node, opened when first needed and reopened
    after a failure. The SDK does not retry (``retry_total=0``): the driver does, so that the
    ledger sees every failure and a retried send keeps its MessageId."""

    def __init__(self, endpoint: str, args, receiver: bool = False):
        self.endpoint = endpoint
        self.args = args
        self.receiver = receiver
        self.client = None
        self.handler = None

    def get(self):
        if self.handler is None:
            self.client = ServiceBusClient.from_connection_string(
                connection_string(self.endpoint, self.args.key), retry_total=0
            )
            if self.receiver:
                self.handler = self.client.get_queue_receiver(
                    self.args.queue,
                    receive_mode=ServiceBusReceiveMode.PEEK_LOCK,
                    prefetch_count=0,
                )
            else:
                self.handler = self.client.get_queue_sender(self.args.queue)
        return self.handler

    def close(self) -> None:
        for closable in (self.handler, self.client):
            try:
                if closable is not None:
                    closable.close()
            except Exception:  # noqa: BLE001 - closing a broken link may fail as it likes
                pass
        self.handler = None
        self.client = None


class Driver:
    def __init__(self, args) -> None:
        self.args = args
        self.ledger = Ledger()
        self.stopping = threading.Event()
        self.give_up = threading.Event()
        self.finished = threading.Event()
        self.probe_round = 0
        self.producers: List[threading.Thread] = []
        self.consumers: List[threading.Thread] = []

    def start(self) -> None:
        endpoints = self.args.endpoints
        for k in range(self.args.producers):
            endpoint = endpoints[k % len(endpoints)]
            thread = threading.Thread(
                target=self.produce, args=(k, endpoint), name=f"producer-{k}", daemon=True
            )
            self.producers.append(thread)
        for c in range(self.args.consumers):
            endpoint = endpoints[c % len(endpoints)]
            thread = threading.Thread(
                target=self.consume, args=(c, endpoint), name=f"consumer-{c}", daemon=True
            )
            self.consumers.append(thread)
        for thread in self.consumers + self.producers:
            thread.start()

    def produce(self, k: int, endpoint: str) -> None:
        link = Link(endpoint, self.args)
        pause = 1.0 / self.args.rate if self.args.rate > 0 else 0.0
        n = 0
        next_send = time.monotonic()
        while not self.stopping.is_set():
            message_id = f"p{k}-{n}"
            if not self.send_until_acknowledged(link, message_id, f"producer {k} via {endpoint}"):
                break
            n += 1
            if pause:
                next_send += pause
                delay = next_send - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                else:
                    next_send = time.monotonic()
        link.close()
        log(f"producer {k} via {endpoint}: stopped after {n} messages")

    def send_until_acknowledged(self, link: Link, message_id: str, who: str) -> bool:
        """Sends until acknowledged; False when told to give up first."""
        self.ledger.attempt(message_id)
        failures = 0
        while True:
            try:
                message = ServiceBusMessage(f"cluster {message_id}", message_id=message_id)
                link.get().send_messages(message, timeout=SEND_TIMEOUT)
                self.ledger.acknowledge(message_id)
                if failures:
                    log(f"{who}: {message_id} acknowledged after {failures} failed tries")
                return True
            except Exception as error:  # noqa: BLE001 - every failure is retried
                failures += 1
                self.ledger.send_failed()
                self.ledger.error("send", type(error).__name__, retriable(error))
                if failures <= 3 or failures % 25 == 0:
                    log(f"{who}: send {message_id} failed (try {failures}): {describe(error)}")
                link.close()
                if self.give_up.is_set():
                    log(f"{who}: gave up on {message_id}")
                    return False
                time.sleep(RETRY_PAUSE)

    def consume(self, c: int, endpoint: str) -> None:
        link = Link(endpoint, self.args, receiver=True)
        failures = 0
        while not self.finished.is_set():
            try:
                receiver = link.get()
                batch = receiver.receive_messages(
                    max_message_count=RECEIVE_BATCH, max_wait_time=RECEIVE_WAIT
                )
                failures = 0
            except Exception as error:  # noqa: BLE001 - reconnect and go on
                failures += 1
                self.ledger.receive_failed()
                self.ledger.error("receive", type(error).__name__, retriable(error))
                if failures <= 3 or failures % 25 == 0:
                    log(f"consumer {c} via {endpoint}: receive failed: {describe(error)}")
                link.close()
                time.sleep(RETRY_PAUSE)
                continue
            for message in batch:
                message_id = str(message.message_id)
                self.ledger.deliver(message_id, message.sequence_number)
                started = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S.%f")
                try:
                    receiver.complete_message(message)
                    self.ledger.complete(message_id)
                except Exception as error:  # noqa: BLE001 - the message comes back
                    self.ledger.complete_failed(message_id, ambiguous(error))
                    self.ledger.error("complete", type(error).__name__, retriable(error))
                    partition = (message.sequence_number or 0) >> 48
                    log(f"consumer {c} via {endpoint}: complete {message_id} (partition "
                        f"{partition}, started {started[:-3]}) failed"
                        f"{' ambiguously' if ambiguous(error) else ''}: {describe(error)}")
        link.close()

    def probe(self, endpoint: str) -> dict:
        """Sends one message to every partition through `endpoint`; seconds until each took one."""
        self.probe_round += 1
        round_no = self.probe_round
        keys = self.args.partition_keys
        started = time.monotonic()
        seconds: List[Optional[float]] = [None] * len(keys)
        failures = [0] * len(keys)

        def one(partition: int) -> None:
            message_id = f"probe{round_no}-{partition}"
            self.ledger.attempt(message_id)
            link = Link(endpoint, self.args)
            while time.monotonic() - started < self.args.probe_timeout:
                try:
                    message = ServiceBusMessage(
                        f"probe {message_id}",
                        message_id=message_id,
                        partition_key=keys[partition],
                    )
                    link.get().send_messages(message, timeout=PROBE_SEND_TIMEOUT)
                    self.ledger.acknowledge(message_id)
                    seconds[partition] = round(time.monotonic() - started, 3)
                    break
                except Exception as error:  # noqa: BLE001 - tried again until the timeout
                    failures[partition] += 1
                    self.ledger.error("send", type(error).__name__, retriable(error))
                    if failures[partition] == 1:
                        log(f"probe {round_no} via {endpoint}: partition {partition}: "
                            f"{describe(error)}")
                    link.close()
                    time.sleep(0.1)
            link.close()

        threads = [threading.Thread(target=one, args=(p,), daemon=True) for p in range(len(keys))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(self.args.probe_timeout + PROBE_SEND_TIMEOUT + 5)
        done = [s for s in seconds if s is not None]
        longest = max(done) if len(done) == len(keys) else None
        log(f"probe {round_no} via {endpoint}: every partition after {longest} s "
            f"(failed tries: {sum(failures)})")
        return {
            "round": round_no,
            "via": endpoint,
            "seconds": longest,
            "partitions": seconds,
            "failures": failures,
        }

    def stop(self) -> dict:
        """Stops the producers, drains, and returns the verdict."""
        stopped = time.monotonic()
        self.stopping.set()
        log("stop: producers finish their current message")
        for thread in self.producers:
            thread.join(max(0.0, STOP_SEND_DEADLINE - (time.monotonic() - stopped)))
        if any(thread.is_alive() for thread in self.producers):
            self.give_up.set()
            for thread in self.producers:
                thread.join(SEND_TIMEOUT + 5)
        log(f"stop: producers done; draining until {self.args.quiet} s without a delivery")
        drain_started = time.monotonic()
        while True:
            quiet = min(self.ledger.quiet_for(), time.monotonic() - drain_started)
            if quiet >= self.args.quiet:
                break
            if time.monotonic() - drain_started > DRAIN_DEADLINE:
                log("stop: the drain's deadline passed with deliveries still coming")
                break
            time.sleep(0.2)
        self.finished.set()
        for thread in self.consumers:
            thread.join(RECEIVE_WAIT + SEND_TIMEOUT)
        report = self.ledger.verdict()
        report["drain_seconds"] = round(time.monotonic() - drain_started, 1)
        report["producers_gave_up"] = self.give_up.is_set()
        return report


def parse(argv: List[str]):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--endpoints", required=True, type=lambda s: s.split(","),
                        help="HOST:PORT of every node's AMQP listener, comma-separated")
    parser.add_argument("--queue", required=True)
    parser.add_argument("--partition-keys", required=True, type=lambda s: s.split(","),
                        help="a PartitionKey for each partition, in partition order")
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--consumers", type=int, default=3)
    parser.add_argument("--rate", type=float, default=40.0,
                        help="messages per second per producer (0: unlimited)")
    parser.add_argument("--quiet", type=float, default=12.0,
                        help="seconds without a delivery that end the drain")
    parser.add_argument("--probe-timeout", type=float, default=60.0)
    parser.add_argument("--key", default="SAS_KEY_VALUE")
    return parser.parse_args(argv)


def main() -> None:
    args = parse(sys.argv[1:])
    driver = Driver(args)
    driver.start()
    reply("ready", producers=args.producers, consumers=args.consumers)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "probe" and len(words) == 2:
            reply("probe", **driver.probe(words[1]))
        elif words[0] == "stats":
            reply("stats", **driver.ledger.counts())
        elif words[0] == "stop":
            break
        else:
            reply("error", message=f"unknown command {line.strip()!r}")
    reply("verdict", **driver.stop())
    # The SDK's threads and sockets may linger on a dead node: leave at once.
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
