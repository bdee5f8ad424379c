#!/usr/bin/env python3
"""Captures what the official Service Bus SDKs send and turns it into fuzz seeds.

A recording proxy sits between the compat suites (compat/python, compat/js) and a running
ironbus: every byte a client sends passes through it unchanged and is kept, per connection.
Nothing in the broker changes. Listeners:

- AMQP (plain) -> the server's AMQP port: the messaging clients (IRONBUS_CONNECTION_STRING).
- AMQP over TLS, terminated here with the server's development certificate
  (<data-dir>/tls) -> the server's plain AMQP port (IRONBUS_TLS_CONNECTION_STRING).
- HTTPS, terminated here the same way -> the server's plain HTTP port: the admin clients
  (IRONBUS_ADMIN_CONNECTION_STRING), which speak HTTPS only.
- HTTP (plain) -> the server's HTTP port: the REST tests (IRONBUS_HTTP_URL).

Afterwards the client->server streams are cut into what each fuzz target reads:

- amqp_frame: every frame after a protocol header (size = the first 4 bytes), one seed per
  frame shape (type, performative, which fields are set), and each connection's opening
  frames (up to 4 KiB) as one stream;
- amqp_message: transfer payloads (multi-frame deliveries joined) on links to queues, topics
  and subscriptions;
- amqp_request: transfer payloads on links to `$management` and `$cbs`;
- sas_token: the tokens of `$cbs` put-token requests and of HTTP Authorization headers;
- sql_filter: SQL filter and action text from ATOM rule descriptions and add-rule requests;
- atom_description: the bodies of ATOM PUTs;
- rest_properties: REST sends as the target reads them (BrokerProperties, NUL, the custom
  property headers `name:value` each followed by NUL, the body) and batch-send bodies.

Seeds are deduplicated (by content, then by shape), capped at 64 KiB each and about 100 per
target, and written as fuzz/seeds/<target>/sdk-<suite>-<what>-<hash>; earlier sdk-* seeds are
replaced, hand-built ones kept. Usage (from the workspace root, after `cargo build -p ironbus`
and one `cargo xtask compat` so that the SDKs are installed):

    python3 fuzz/capture/capture.py                  # python and js suites, write seeds
    python3 fuzz/capture/capture.py --suites python -- -k peek
    python3 fuzz/capture/capture.py --raw /tmp/raw   # also keep the raw streams

Needs python3 only (the suites need their SDKs, as `cargo xtask compat` installs them).
"""

import argparse
import asyncio
import hashlib
import json
import os
import re
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import html

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEEDS = os.path.join(ROOT, "fuzz", "seeds")
SAS_KEY = "SAS_KEY_VALUE"
MAX_SEED = 64 * 1024
MAX_PER_TARGET = 100
STREAM_PREFIX = 4096


# --- the recording proxy ------------------------------------------------------------------------

class Recorder:
    """Keeps every connection's client->server bytes, by listener kind."""

    def __init__(self):
        self.lock = threading.Lock()
        self.suite = None  # the suite running now: a connection is tagged when it opens
        self.streams = []  # (suite, kind, bytes)

    def add(self, suite, kind, data):
        with self.lock:
            self.streams.append((suite, kind, bytes(data)))


async def pump(reader, writer, record=None):
    try:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            if record is not None:
                record.extend(chunk)
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError, asyncio.IncompleteReadError):
        pass
    finally:
        try:
            writer.close()
        except (ConnectionError, OSError, RuntimeError):
            pass


def proxy_handler(kind, upstream, recorder):
    async def handle(client_reader, client_writer):
        suite = recorder.suite
        try:
            server_reader, server_writer = await asyncio.open_connection(*upstream)
        except OSError:
            client_writer.close()
            return
        record = bytearray()
        await asyncio.gather(
            pump(client_reader, server_writer, record), pump(server_reader, client_writer)
        )
        recorder.add(suite, kind, record)

    return handle


class Proxy:
    """Runs the listeners on an event loop in a thread of its own."""

    def __init__(self, recorder):
        self.recorder = recorder
        self.loop = asyncio.new_event_loop()
        self.servers = []
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def listen(self, kind, upstream, tls=None):
        async def start():
            server = await asyncio.start_server(
                proxy_handler(kind, upstream, self.recorder), "127.0.0.1", 0, ssl=tls
            )
            self.servers.append(server)
            return server.sockets[0].getsockname()[1]

        return asyncio.run_coroutine_threadsafe(start(), self.loop).result()

    def stop(self):
        async def close():
            for server in self.servers:
                server.close()
            await asyncio.sleep(1.0)  # lets open connections finish and be recorded

        asyncio.run_coroutine_threadsafe(close(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


# --- the server and the suites ------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"capture: nothing listens on port {port} after {seconds} s")


def compat_config():
    out = subprocess.run(
        ["cargo", "xtask", "compat", "config"], cwd=ROOT, check=True, capture_output=True
    )
    return out.stdout


def find_tls_files(tls_dir):
    """The development certificate chain and key the server generated."""
    names = sorted(os.listdir(tls_dir))
    keys = [n for n in names if "key" in n and n.endswith(".pem") and "ca" not in n]
    certs = [n for n in names if n.endswith(".pem") and n not in keys and n != "ca.pem"
             and "ca-key" not in n]
    if not keys or not certs:
        raise SystemExit(f"capture: no certificate and key in {tls_dir}: {names}")
    return os.path.join(tls_dir, certs[0]), os.path.join(tls_dir, keys[0])


def run_suites(suites, env, extra, log_dir=None):
    for suite in suites:
        if suite == "python":
            cwd = os.path.join(ROOT, "compat", "python")
            cmd = [os.path.join(cwd, ".venv", "bin", "python"), "-m", "pytest", "-q", *extra]
        elif suite == "js":
            cwd = os.path.join(ROOT, "compat", "js")
            cmd = ["node", "--test", "--test-force-exit", *extra]
        else:
            raise SystemExit(f"capture: unknown suite {suite}")
        print(f"capture: suite {suite}: {' '.join(cmd)}", file=sys.stderr)
        start = time.time()
        try:
            result = subprocess.run(cmd, cwd=cwd, env=env, timeout=900,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            output = result.stdout.decode(errors="replace")
            if log_dir:
                with open(os.path.join(log_dir, f"suite-{suite}.log"), "w") as f:
                    f.write(output)
            tail = output.strip().splitlines()[-3:]
            print(f"capture: suite {suite} exited {result.returncode} after "
                  f"{time.time() - start:.0f} s: {' / '.join(tail)}", file=sys.stderr)
        except subprocess.TimeoutExpired:
            print(f"capture: suite {suite} timed out (kept what was captured)", file=sys.stderr)


def capture(args):
    work = tempfile.mkdtemp(prefix="ironbus-capture-")
    data_dir = os.path.join(work, "data")
    config = os.path.join(work, "config.json")
    with open(config, "wb") as f:
        f.write(compat_config())
    ports = {name: free_port() for name in ("amqp", "amqps", "http", "https")}
    log = open(os.path.join(work, "ironbus.log"), "wb")
    server = subprocess.Popen(
        [args.server, "--store", "memory", "--data-dir", data_dir, "--config", config,
         "--testing-fault-injection",
         "--amqp-addr", f"127.0.0.1:{ports['amqp']}", "--amqps-addr", f"127.0.0.1:{ports['amqps']}",
         "--http-addr", f"127.0.0.1:{ports['http']}", "--https-addr", f"127.0.0.1:{ports['https']}"],
        stdout=log, stderr=subprocess.STDOUT)
    recorder = Recorder()
    proxy = None
    try:
        for port in ports.values():
            wait_listening(port)
        tls_dir = os.path.join(data_dir, "tls")
        cert, key = find_tls_files(tls_dir)
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(cert, key)
        proxy = Proxy(recorder)
        amqp = proxy.listen("amqp", ("127.0.0.1", ports["amqp"]))
        amqps = proxy.listen("amqp", ("127.0.0.1", ports["amqp"]), tls)
        https = proxy.listen("http", ("127.0.0.1", ports["http"]), tls)
        http = proxy.listen("http", ("127.0.0.1", ports["http"]))
        key_part = f"SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={SAS_KEY}"
        env = dict(os.environ)
        env.update({
            "IRONBUS_CONNECTION_STRING":
                f"Endpoint=sb://127.0.0.1:{amqp};{key_part};UseDevelopmentEmulator=true",
            "IRONBUS_ADMIN_CONNECTION_STRING": f"Endpoint=sb://localhost:{https};{key_part}",
            "IRONBUS_TLS_CONNECTION_STRING": f"Endpoint=sb://localhost:{amqps}/;{key_part}",
            "IRONBUS_HTTP_URL": f"http://127.0.0.1:{http}",
            "IRONBUS_CA_CERT": os.path.join(tls_dir, "ca.pem"),
            "NODE_EXTRA_CA_CERTS": os.path.join(tls_dir, "ca.pem"),
            "PYTHONDONTWRITEBYTECODE": "1",
        })
        for suite in args.suites.split(","):
            recorder.suite = suite
            run_suites([suite], env, args.extra, args.raw)
    finally:
        if proxy is not None:
            proxy.stop()
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        shutil.rmtree(work, ignore_errors=True)
    return recorder.streams


# --- AMQP 1.0 decoding (just enough to cut streams up) ------------------------------------------

class Described:
    def __init__(self, descriptor, value):
        self.descriptor, self.value = descriptor, value


class Symbol(str):
    pass


FIXED = {0x50: 1, 0x51: 1, 0x52: 1, 0x53: 1, 0x54: 1, 0x55: 1, 0x56: 1, 0x60: 2, 0x61: 2,
         0x70: 4, 0x71: 4, 0x72: 4, 0x73: 4, 0x74: 4, 0x80: 8, 0x81: 8, 0x82: 8, 0x83: 8,
         0x84: 8, 0x94: 16, 0x98: 16}
UNSIGNED = {0x50: "B", 0x52: "B", 0x53: "B", 0x60: ">H", 0x70: ">I", 0x80: ">Q"}


def decode(buf, pos):
    code = buf[pos]
    pos += 1
    if code == 0x00:
        descriptor, pos = decode(buf, pos)
        value, pos = decode(buf, pos)
        return Described(descriptor, value), pos
    if code in (0x40, 0x45):
        return (None if code == 0x40 else []), pos
    if code in (0x41, 0x42):
        return code == 0x41, pos
    if code in (0x43, 0x44):
        return 0, pos
    if code in FIXED:
        raw = buf[pos:pos + FIXED[code]]
        if len(raw) != FIXED[code]:
            raise ValueError("short")
        value = raw
        if code in UNSIGNED:
            value = struct.unpack(UNSIGNED[code], raw)[0]
        elif code == 0x56:
            value = raw[0] != 0
        return value, pos + FIXED[code]
    if code in (0xA0, 0xA1, 0xA3, 0xB0, 0xB1, 0xB3):
        width = 1 if code < 0xB0 else 4
        size = int.from_bytes(buf[pos:pos + width], "big")
        pos += width
        raw = bytes(buf[pos:pos + size])
        if len(raw) != size:
            raise ValueError("short")
        pos += size
        if code in (0xA1, 0xB1):
            return raw.decode("utf-8", "replace"), pos
        if code in (0xA3, 0xB3):
            return Symbol(raw.decode("ascii", "replace")), pos
        return raw, pos
    if code in (0xC0, 0xC1, 0xD0, 0xD1):
        width = 1 if code < 0xD0 else 4
        size = int.from_bytes(buf[pos:pos + width], "big")
        count = int.from_bytes(buf[pos + width:pos + 2 * width], "big")
        end = pos + width + size
        pos += 2 * width
        items = []
        for _ in range(count):
            item, pos = decode(buf, pos)
            items.append(item)
        if pos != end:
            raise ValueError("bad compound size")
        if code in (0xC1, 0xD1):
            return dict(zip(map(key_of, items[0::2]), items[1::2])), pos
        return items, pos
    if code in (0xE0, 0xF0):
        width = 1 if code == 0xE0 else 4
        size = int.from_bytes(buf[pos:pos + width], "big")
        return ("array",), pos + width + size
    raise ValueError(f"constructor {code:#x}")


def key_of(value):
    return value if isinstance(value, (str, int, bytes, type(None))) else repr(value)


def descriptor_code(value):
    if isinstance(value, Described) and isinstance(value.descriptor, int):
        return value.descriptor
    return None


def frames(stream):
    """(protocol header or None, frame bytes) for every frame of a client->server stream."""
    pos = 0
    while pos < len(stream):
        if stream[pos:pos + 4] == b"AMQP":
            yield stream[pos:pos + 8], None
            pos += 8
            continue
        if len(stream) - pos < 8:
            return
        size = int.from_bytes(stream[pos:pos + 4], "big")
        if size < 8 or pos + size > len(stream):
            return
        yield None, stream[pos:pos + size]
        pos += size


def performative(frame):
    """(type, performative code, fields, payload) of one frame, or None."""
    doff, kind = frame[4], frame[5]
    body = frame[doff * 4:]
    if not body:
        return kind, None, [], b""  # an empty (heartbeat) frame
    try:
        value, end = decode(body, 0)
    except (ValueError, IndexError, struct.error):
        return None
    fields = value.value if isinstance(value, Described) and isinstance(value.value, list) else []
    return kind, descriptor_code(value), fields, bytes(body[end:])


def sections(payload):
    """The (descriptor code, value) sections of a message payload."""
    out, pos = [], 0
    while pos < len(payload):
        value, pos = decode(payload, pos)
        out.append((descriptor_code(value), value.value if isinstance(value, Described) else value))
    return out


def field(fields, index):
    return fields[index] if index < len(fields) else None


# --- cutting the streams into seeds -------------------------------------------------------------

class Seeds:
    """Candidate seeds per target: deduplicated by content, grouped by a shape key."""

    def __init__(self):
        self.by_target = {}

    def add(self, target, suite, what, data, shape=None):
        if isinstance(data, str):
            data = data.encode()
        if not data or len(data) > MAX_SEED:
            return
        entries = self.by_target.setdefault(target, {})
        digest = hashlib.sha1(data).hexdigest()
        if digest not in entries:
            entries[digest] = (suite, safe(what), shape if shape is not None else what, data)

    def pick(self, target):
        """At most MAX_PER_TARGET: one of every shape first (smallest), then others round-robin."""
        groups = {}
        for digest, (suite, what, shape, data) in sorted(self.by_target.get(target, {}).items()):
            groups.setdefault(repr(shape), []).append((len(data), digest, suite, what, data))
        for group in groups.values():
            group.sort()
        chosen, round_ = [], 0
        while len(chosen) < MAX_PER_TARGET:
            added = False
            for shape in sorted(groups):
                if round_ < len(groups[shape]) and len(chosen) < MAX_PER_TARGET:
                    chosen.append(groups[shape][round_])
                    added = True
            if not added or round_ >= 3:  # at most 4 of one shape
                break
            round_ += 1
        return chosen


def safe(text):
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(text)).strip("-")[:40] or "x"


PERFORMATIVES = {0x10: "open", 0x11: "begin", 0x12: "attach", 0x13: "flow", 0x14: "transfer",
                 0x15: "disposition", 0x16: "detach", 0x17: "end", 0x18: "close",
                 0x40: "sasl-mechanisms", 0x41: "sasl-init", 0x42: "sasl-challenge",
                 0x43: "sasl-response", 0x44: "sasl-outcome"}
SECTION_NAMES = {0x70: "h", 0x71: "da", 0x72: "ma", 0x73: "p", 0x74: "ap", 0x75: "data",
                 0x76: "seq", 0x77: "value", 0x78: "f"}


def cut_amqp(seeds, suite, stream):
    links = {}      # (channel, handle) -> target address of a link the client sends on
    pending = {}    # (channel, handle) -> bytearray of a delivery in progress
    prefix = bytearray()
    prefix_done = False
    for header, frame in frames(stream):
        if header is not None:
            if prefix:
                seeds.add("amqp_frame", suite, "stream", bytes(prefix), ("stream", len(prefix) // 512))
            prefix = bytearray()
            prefix_done = False
            continue
        if not prefix_done:
            if len(prefix) + len(frame) <= STREAM_PREFIX:
                prefix.extend(frame)
            else:
                prefix_done = True
        decoded = performative(frame)
        if decoded is None:
            continue
        kind, code, fields, payload = decoded
        channel = int.from_bytes(frame[6:8], "big")
        name = PERFORMATIVES.get(code, "empty" if code is None else f"{code:#x}")
        present = tuple(i for i, f in enumerate(fields) if f is not None)
        seeds.add("amqp_frame", suite, name, frame, (kind, code, present, bool(payload)))
        if code == 0x12 and field(fields, 2) is False:  # attach, role sender
            target = field(fields, 6)
            address = field(target.value, 0) if isinstance(target, Described) and target.value else None
            links[(channel, field(fields, 1))] = str(address or "")
        elif code == 0x14:
            key = (channel, field(fields, 0))
            pending.setdefault(key, bytearray()).extend(payload)
            if not field(fields, 5):  # more
                message = bytes(pending.pop(key))
                message_format = field(fields, 3) or 0
                classify_message(seeds, suite, links.get(key, ""), message, message_format)
    if prefix:
        seeds.add("amqp_frame", suite, "stream", bytes(prefix), ("stream", len(prefix) // 512))


def classify_message(seeds, suite, address, payload, message_format):
    try:
        parts = sections(payload)
    except (ValueError, IndexError, struct.error):
        parts = []
    app = next((v for c, v in parts if c == 0x74 and isinstance(v, dict)), {})
    operation = app.get("operation")
    if address.endswith("$management") or address.endswith("$cbs") or operation is not None:
        op = str(operation or "none").replace("com.microsoft:", "")
        seeds.add("amqp_request", suite, op, payload, (op, len(payload) // 256))
        body = next((v for c, v in parts if c == 0x77), None)
        if op == "put-token" and isinstance(body, str):
            seeds.add("sas_token", suite, "cbs", body, ("cbs", str(app.get("type"))))
        for text in expressions(body):
            seeds.add("sql_filter", suite, "add-rule", text, ("amqp", text[:12]))
        return
    shape = (tuple(SECTION_NAMES.get(c, "?") for c, _ in parts), message_format,
             tuple(sorted(map(str, app))[:3]))
    what = "batch" if message_format else "-".join(shape[0]) or "empty"
    seeds.add("amqp_message", suite, what, payload, shape)


def expressions(value):
    """Every string under an `expression` key (sql-filter, sql-rule-action) in a decoded body."""
    if isinstance(value, Described):
        value = value.value
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "expression" and isinstance(v, str):
                yield v
            else:
                yield from expressions(v)
    elif isinstance(value, list):
        for v in value:
            yield from expressions(v)


def http_requests(stream):
    """(method, target, headers [(name, value)], body) for each request of a client stream."""
    pos = 0
    while True:
        end = stream.find(b"\r\n\r\n", pos)
        if end < 0:
            return
        lines = stream[pos:end].decode("latin-1").split("\r\n")
        try:
            method, target, _ = lines[0].split(" ", 2)
        except ValueError:
            return
        headers = [tuple(p.strip() for p in line.split(":", 1)) for line in lines[1:] if ":" in line]
        lower = {k.lower(): v for k, v in headers}
        pos = end + 4
        if "chunked" in lower.get("transfer-encoding", "").lower():
            body = bytearray()
            while True:
                line_end = stream.find(b"\r\n", pos)
                if line_end < 0:
                    return
                size = int(stream[pos:line_end].split(b";")[0] or b"0", 16)
                pos = line_end + 2
                body.extend(stream[pos:pos + size])
                pos += size + 2
                if size == 0:
                    break
            body = bytes(body)
        else:
            size = int(lower.get("content-length", "0") or 0)
            body = stream[pos:pos + size]
            pos += size
        yield method, target, headers, body
        if lower.get("upgrade"):
            return


# Headers that are not custom message properties on a REST send.
STANDARD_HEADERS = {
    "host", "content-length", "content-type", "authorization", "user-agent", "accept",
    "accept-encoding", "connection", "brokerproperties", "transfer-encoding", "expect",
    "traceparent", "tracestate", "request-id", "accept-language", "cache-control",
}


def cut_http(seeds, suite, stream):
    for method, target, headers, body in http_requests(stream):
        lower = {k.lower(): v for k, v in headers}
        auth = lower.get("authorization") or lower.get("servicebusauthorization")
        if auth:
            seeds.add("sas_token", suite, "http", auth, ("http", method))
        path = target.split("?")[0].lower()
        if method == "PUT" and body.lstrip().startswith(b"<"):
            kinds = re.findall(rb"<(\w*Description)\b", body)
            kind = kinds[0].decode() if kinds else "entry"
            tags = tuple(sorted(set(re.findall(rb"<(\w+)", body))))
            seeds.add("atom_description", suite, kind, body, (kind, hash(tags) % 1000))
            for element in (b"SqlExpression",):
                for text in re.findall(rb"<%s>(.*?)</%s>" % (element, element), body, re.S):
                    expression = html.unescape(text.decode("utf-8", "replace"))
                    seeds.add("sql_filter", suite, "atom", expression, ("atom", expression[:12]))
        if method == "POST" and path.endswith("/messages"):
            custom = [(k, v) for k, v in headers
                      if k.lower() not in STANDARD_HEADERS and not k.lower().startswith("x-ms-")]
            if "vnd.microsoft.servicebus.json" in lower.get("content-type", ""):
                seeds.add("rest_properties", suite, "batch", body, ("batch",))
                continue
            text = lower.get("brokerproperties", "").encode("latin-1") + b"\0"
            for k, v in custom:
                text += f"{k}:{v}".encode("latin-1") + b"\0"
            text += body
            shape = ("single", bool(lower.get("brokerproperties")), len(custom) > 0)
            seeds.add("rest_properties", suite, "send", text, shape + (len(text) // 128,))
            if lower.get("brokerproperties"):
                seeds.add("rest_properties", suite, "properties",
                          lower["brokerproperties"].encode("latin-1"), ("bp",))


def write_seeds(seeds, out_dir):
    summary = {}
    for target in sorted(seeds.by_target):
        directory = os.path.join(out_dir, target)
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):
            if name.startswith("sdk-"):
                os.remove(os.path.join(directory, name))
        chosen = seeds.pick(target)
        for _, digest, suite, what, data in chosen:
            with open(os.path.join(directory, f"sdk-{suite}-{what}-{digest[:8]}"), "wb") as f:
                f.write(data)
        summary[target] = (len(seeds.by_target[target]), len(chosen), sum(len(c[4]) for c in chosen))
    return summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", default=os.path.join(ROOT, "target", "debug", "ironbus"))
    parser.add_argument("--suites", default="python,js", help="comma-separated: python, js")
    parser.add_argument("--out", default=SEEDS, help="where the <target>/sdk-* seeds go")
    parser.add_argument("--raw", help="also write every captured stream into this directory")
    parser.add_argument("--from-raw", help="cut the streams of an earlier --raw instead of capturing")
    parser.add_argument("extra", nargs="*", help="after --: arguments for the suite's runner")
    args = parser.parse_args()

    if args.raw:
        os.makedirs(args.raw, exist_ok=True)
    if args.from_raw:
        streams = []
        for name in sorted(os.listdir(args.from_raw)):
            suite, kind, _ = name.split("-", 2)
            with open(os.path.join(args.from_raw, name), "rb") as f:
                streams.append((suite, kind, f.read()))
    else:
        streams = capture(args)
    if args.raw:
        for i, (suite, kind, data) in enumerate(streams):
            with open(os.path.join(args.raw, f"{suite}-{kind}-{i:05}"), "wb") as f:
                f.write(data)
    seeds = Seeds()
    for suite, kind, data in streams:
        short = {"python": "py", "js": "js"}.get(suite, suite)
        if kind == "amqp":
            cut_amqp(seeds, short, data)
        else:
            cut_http(seeds, short, data)
    total = sum(len(d) for _, _, d in streams)
    print(f"capture: {len(streams)} connections, {total} bytes from clients", file=sys.stderr)
    for target, (found, kept, size) in write_seeds(seeds, args.out).items():
        print(f"capture: {target}: {found} distinct, {kept} kept ({size} bytes)", file=sys.stderr)
    print(json.dumps({"connections": len(streams), "bytes": total}))


if __name__ == "__main__":
    main()
