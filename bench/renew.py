"""Lock renewals from several threads of one sync azure-servicebus receiver, as the SDK's
AutoLockRenewer makes them: sends MESSAGES messages to QUEUE, receives them all in peek-lock, then
renews each lock once from a pool of THREADS threads sharing the receiver's connection. Prints one
JSON line: renewals per second and the latency percentiles of one renewal.

    python bench/renew.py CONNECTION_STRING QUEUE MESSAGES THREADS
"""

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from azure.servicebus import ServiceBusClient, ServiceBusMessage


def main() -> None:
    connection_string, queue, messages, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    with ServiceBusClient.from_connection_string(connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(messages)])
        with client.get_queue_receiver(queue) as receiver:
            received = []
            while len(received) < messages:
                received.extend(
                    receiver.receive_messages(max_message_count=messages - len(received), max_wait_time=5)
                )
            latencies = []

            def renew(message) -> None:
                started = time.perf_counter()
                receiver.renew_message_lock(message)
                latencies.append(time.perf_counter() - started)

            started = time.perf_counter()
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(renew, received))
            elapsed = time.perf_counter() - started
            for message in received:
                receiver.complete_message(message)
    latencies.sort()

    def percentile(p: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(len(latencies) * p))] * 1000, 2)

    print(json.dumps({
        "threads": threads,
        "renewals": messages,
        "per_s": round(messages / elapsed, 1),
        "p50_ms": percentile(0.5),
        "p90_ms": percentile(0.9),
        "max_ms": round(latencies[-1] * 1000, 2),
    }))


if __name__ == "__main__":
    main()
