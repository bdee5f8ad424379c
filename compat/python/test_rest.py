"""The REST data plane with plain HTTP requests (no SDK): every call and its error codes, as
http.md A describes them, then a scrape of ``/metrics`` showing the counters moved.

Tokens are signed here the way the SDKs sign them: HMAC-SHA256 with the key's text over
``quote_plus(uri) + "\\n" + expiry``.
"""

import base64
import hashlib
import hmac
import json
import re
import time
import urllib.parse

import requests

from helpers import queue

KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"


def sas(uri: str, key: str = KEY, lifetime: int = 3600) -> str:
    encoded = urllib.parse.quote_plus(uri)
    expiry = str(int(time.time()) + lifetime)
    digest = hmac.new(key.encode(), f"{encoded}\n{expiry}".encode(), hashlib.sha256).digest()
    signature = urllib.parse.quote_plus(base64.b64encode(digest).decode())
    return f"SharedAccessSignature sr={encoded}&sig={signature}&se={expiry}&skn={KEY_NAME}"


class Rest:
    def __init__(self, base: str):
        self.base = base
        self.session = requests.Session()

    def call(self, method: str, path: str, token: str = None, **kwargs):
        headers = kwargs.pop("headers", {})
        headers.setdefault("Authorization", token or sas(self.base + path))
        return self.session.request(method, self.base + path, headers=headers, timeout=30, **kwargs)


def test_every_data_plane_call_and_its_errors(http_url):
    rest = Rest(http_url)
    q = queue("rest")

    # Send one message: 201, with system and custom properties.
    sent = rest.call(
        "POST",
        f"/{q}/messages",
        data=b"hello",
        headers={
            "Content-Type": "text/plain",
            "BrokerProperties": json.dumps({"Label": "greeting", "MessageId": "rest-1"}),
            "Priority": '"High"',
            "Attempt": "3",
        },
    )
    assert sent.status_code == 201, sent.text

    # Peek-lock: 201, body, BrokerProperties, custom properties, absolute Location.
    locked = rest.call("POST", f"/{q}/messages/head?timeout=10")
    assert locked.status_code == 201, locked.text
    assert locked.content == b"hello"
    assert locked.headers["Content-Type"] == "text/plain"
    props = json.loads(locked.headers["BrokerProperties"])
    assert props["Label"] == "greeting" and props["MessageId"] == "rest-1"
    assert props["DeliveryCount"] == 1 and props["State"] == "Active"
    assert props["LockedUntilUtc"].endswith(" GMT")
    assert locked.headers["Priority"] == '"High"'
    assert locked.headers["Attempt"] == "3"
    location = locked.headers["Location"]
    assert location == f"{http_url}/{q}/messages/{props['SequenceNumber']}/{props['LockToken']}"
    lock_path = location[len(http_url):]

    assert rest.call("POST", lock_path).status_code == 200  # renew
    assert rest.call("PUT", lock_path).status_code == 200  # unlock
    assert rest.call("DELETE", lock_path).status_code == 404  # that lock is gone

    again = rest.call("POST", f"/{q}/messages/head?timeout=10")
    assert again.status_code == 201
    assert json.loads(again.headers["BrokerProperties"])["DeliveryCount"] == 2
    lock_path = again.headers["Location"][len(http_url):]
    assert rest.call("DELETE", lock_path).status_code == 200  # complete
    assert rest.call("DELETE", lock_path).status_code == 404  # completed already
    assert rest.call("POST", lock_path).status_code == 404  # renew a lost lock

    # Batch send, then receive-and-delete: 200 without lock fields, then 204 when empty.
    batch = [
        {"Body": "one", "BrokerProperties": {"Label": "b"}, "UserProperties": {"n": 1}},
        {"Body": "two", "BrokerProperties": {"TimeToLiveTimeSpan": "0.00:05:00"}},
    ]
    sent = rest.call(
        "POST",
        f"/{q}/messages",
        data=json.dumps(batch),
        headers={"Content-Type": "application/vnd.microsoft.servicebus.json"},
    )
    assert sent.status_code == 201, sent.text
    first = rest.call("DELETE", f"/{q}/messages/head?timeout=10")
    assert first.status_code == 200 and first.content == b"one"
    assert "LockToken" not in json.loads(first.headers["BrokerProperties"])
    assert first.headers["n"] == "1"
    second = rest.call("DELETE", f"/{q}/messages/head?timeout=10")
    assert second.content == b"two"
    assert json.loads(second.headers["BrokerProperties"])["TimeToLive"] == 300
    empty = rest.call("DELETE", f"/{q}/messages/head?timeout=1")
    assert empty.status_code == 204
    assert rest.call("POST", f"/{q}/messages/head?timeout=0").status_code == 204

    # Errors.
    def status(method, path, **kwargs):
        response = rest.call(method, path, **kwargs)
        assert "<Error>" in response.text or response.status_code == 204, response.text
        return response.status_code

    assert status("POST", "/py-no-such-queue/messages", data=b"x") == 410
    assert status("DELETE", "/py-no-such-queue/messages/head?timeout=0") == 410
    assert status("POST", f"/{q}/messages", data=b"x", token=sas(http_url, key="wrong")) == 401
    assert status("POST", f"/{q}/messages", data=b"x", token=sas(http_url, lifetime=-60)) == 401
    assert status("POST", f"/{q}/messages", data=b"x", token="garbage") == 401
    assert status("POST", f"/{q}/messages", data=b"x", headers={"BrokerProperties": "{oops"}) == 400
    assert (
        status(
            "POST",
            f"/{q}/messages",
            data=b"[{",
            headers={"Content-Type": "application/vnd.microsoft.servicebus.json"},
        )
        == 400
    )
    assert status("POST", f"/{q}/messages/head?timeout=soon") == 400
    assert status("DELETE", f"/{q}/messages/1/not-a-lock-token") == 400
    assert status("PUT", f"/{q}/messages/1/00000000-0000-4000-8000-000000000000") == 404
    # Over the queue's 256 KiB message size: 403 (Service Bus's code); over the HTTP body
    # limit (4 MiB): 413.
    assert status("POST", f"/{q}/messages", data=b"x" * (300 * 1024)) == 403
    assert status("POST", f"/{q}/messages", data=b"x" * (5 * 1024 * 1024)) == 413


def metric_sum(text: str, name: str, **labels) -> float:
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{name}(\{{[^}}]*\}})? (\S+)$", line)
        if not match:
            continue
        if all(f'{k}="{v}"' in (match.group(1) or "") for k, v in labels.items()):
            total += float(match.group(2))
    return total


def scrape(urls: list) -> str:
    """Every server's /metrics, one after the other: in a cluster a message is counted by the
    node that runs its partition, a request by the node it came to (each series has `node`)."""
    texts = []
    for url in urls:
        response = requests.get(f"{url}/metrics", timeout=10)
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        texts.append(response.text)
    return "\n".join(texts)


def test_metrics_move_with_traffic(http_url, http_urls):
    rest = Rest(http_url)
    q = queue("metrics")
    before = scrape(http_urls)
    for i in range(3):
        assert rest.call("POST", f"/{q}/messages", data=f"m{i}".encode()).status_code == 201
    for _ in range(3):
        assert rest.call("DELETE", f"/{q}/messages/head?timeout=5").status_code == 200
    after = scrape(http_urls)

    incoming = "ironbus_broker_messages_incoming_total"
    assert metric_sum(after, incoming) >= metric_sum(before, incoming) + 3
    outgoing = "ironbus_broker_messages_outgoing_total"
    assert metric_sum(after, outgoing) >= metric_sum(before, outgoing) + 3
    sends = metric_sum(after, "ironbus_http_requests_total", operation="send", outcome="2xx")
    assert sends >= metric_sum(before, "ironbus_http_requests_total", operation="send", outcome="2xx") + 3
    # Histograms come with explicit buckets.
    # (a cluster node's series carry `node` first).
    send_bucket = r'ironbus_http_request_duration_seconds_bucket\{(node="[^"]*",)?operation="send",le="0.005"\}'
    assert re.search(send_bucket, after), "no send duration bucket at 0.005 s"
    assert "ironbus_store_write_duration_seconds_bucket" in after
