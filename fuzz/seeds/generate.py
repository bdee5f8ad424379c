#!/usr/bin/env python3
"""Writes the hand-built seeds of ironbus's fuzz targets into fuzz/seeds/<target>/.

The AMQP seeds are frames, messages and requests shaped as the Service Bus SDKs send them
(field sets from /work/shared/protocol and the SDKs' wire traces: SASL PLAIN and MSSBCBS,
open/begin/attach to a queue and to $cbs / $management, flow, transfers with every message
section, batch envelopes, put-token and management requests). They are encoded here with a
small AMQP 1.0 type encoder, so the seeds need nothing but python3. The HTTP seeds are an ATOM
QueueDescription with every field the SDKs send, BrokerProperties and custom-property headers
as the REST documentation gives them, and SAS tokens signed as the SDKs sign them.

Run from anywhere: python3 fuzz/seeds/generate.py
"""

import base64
import hashlib
import hmac
import os
import struct
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))


# --- AMQP 1.0 type encoding (amqp-core-types §1.6) -------------------------------------------

class Sym(str):
    pass


class Described:
    def __init__(self, code, value):
        self.code, self.value = code, value


class Ulong(int):
    pass


class Uint(int):
    pass


class Ubyte(int):
    pass


class Ushort(int):
    pass


class Long(int):
    pass


class Ts(int):
    pass


class Uuid(bytes):
    pass


class Array(list):
    def __init__(self, ctor, items):
        super().__init__(items)
        self.ctor = ctor


def enc(v):
    if v is None:
        return b"\x40"
    if isinstance(v, bool):
        return b"\x41" if v else b"\x42"
    if isinstance(v, Described):
        return b"\x00" + enc(Ulong(v.code)) + enc(v.value)
    if isinstance(v, Ulong):
        if v == 0:
            return b"\x44"
        if v < 256:
            return b"\x53" + bytes([v])
        return b"\x80" + struct.pack(">Q", v)
    if isinstance(v, Uint):
        if v == 0:
            return b"\x43"
        if v < 256:
            return b"\x52" + bytes([v])
        return b"\x70" + struct.pack(">I", v)
    if isinstance(v, Ubyte):
        return b"\x50" + bytes([v])
    if isinstance(v, Ushort):
        return b"\x60" + struct.pack(">H", v)
    if isinstance(v, Ts):
        return b"\x83" + struct.pack(">q", v)
    if isinstance(v, Long):
        if -128 <= v < 128:
            return b"\x55" + struct.pack(">b", v)
        return b"\x81" + struct.pack(">q", v)
    if isinstance(v, int):
        if -128 <= v < 128:
            return b"\x54" + struct.pack(">b", v)
        return b"\x71" + struct.pack(">i", v)
    if isinstance(v, float):
        return b"\x82" + struct.pack(">d", v)
    if isinstance(v, Uuid):
        return b"\x98" + bytes(v)
    if isinstance(v, Sym):
        return variable(0xa3, v.encode())
    if isinstance(v, str):
        return variable(0xa1, v.encode())
    if isinstance(v, (bytes, bytearray)):
        return variable(0xa0, bytes(v))
    if isinstance(v, Array):
        body = b"".join(enc(i)[1:] for i in v)
        return b"\xf0" + struct.pack(">II", len(body) + 5, len(v)) + v.ctor + body
    if isinstance(v, list):
        if not v:
            return b"\x45"
        body = b"".join(enc(i) for i in v)
        return b"\xd0" + struct.pack(">II", len(body) + 4, len(v)) + body
    if isinstance(v, dict):
        body = b"".join(enc(k) + enc(x) for k, x in v.items())
        return b"\xd1" + struct.pack(">II", len(body) + 4, 2 * len(v)) + body
    raise TypeError(type(v))


def variable(short_code, b):
    """A binary, string or symbol: the 1-byte-length code, or its 4-byte-length sibling."""
    if len(b) < 256:
        return bytes([short_code, len(b)]) + b
    return bytes([short_code + 0x10]) + struct.pack(">I", len(b)) + b


def frame(body, kind=0, channel=0):
    return struct.pack(">IBBH", 8 + len(body), 2, kind, channel) + body


def perf(code, fields, payload=b"", channel=0):
    return frame(enc(Described(code, fields)) + payload, 0, channel)


def sasl(code, fields):
    return frame(enc(Described(code, fields)), 1, 0)


# --- messages ---------------------------------------------------------------------------------

LOCK = Uuid(bytes(range(16)))


def message(body_sections, app=None, props=None, annotations=None, header=True, footer=False):
    out = b""
    if header:
        out += enc(Described(0x70, [True, Ubyte(4), Uint(60000), False, Uint(0)]))
    if annotations is not None:
        out += enc(Described(0x72, annotations))
    if props is not None:
        out += enc(Described(0x73, props))
    if app is not None:
        out += enc(Described(0x74, app))
    out += b"".join(body_sections)
    if footer:
        out += enc(Described(0x78, {Sym("x-footer"): "f"}))
    return out


def data(b):
    return enc(Described(0x75, b))


def value(v):
    return enc(Described(0x77, v))


def sequence(items):
    return enc(Described(0x76, items))


PROPS = [
    "7b5c4a2e0f9d4c1a8e3b6d5f4a3c2b1a",  # message-id
    b"user",                              # user-id
    "queue",                              # to
    "subject",                            # subject
    "reply-queue",                        # reply-to
    "correlation",                        # correlation-id
    Sym("application/json"),              # content-type
    None,                                 # content-encoding
    Ts(1_900_000_000_000),                # absolute-expiry-time
    Ts(1_700_000_000_000),                # creation-time
    "session-1",                          # group-id
    None,                                 # group-sequence
    "reply-session",                      # reply-to-group-id
]

APP = {
    "string": "text",
    "int": 42,
    "long": Long(1 << 40),
    "double": 2.5,
    "bool": True,
    "null": None,
    "uuid": Uuid(bytes(16)),
    "time": Ts(1_700_000_000_000),
    "binary": b"\x00\x01",
}

ANNOTATIONS = {
    Sym("x-opt-partition-key"): "session-1",
    Sym("x-opt-scheduled-enqueue-time"): Ts(1_800_000_000_000),
    Sym("x-opt-custom"): "c",
}

MESSAGES = {
    "minimal_data": message([data(b"hello")], header=False),
    "full_data": message([data(b"hello"), data(b" world")], APP, PROPS, ANNOTATIONS, footer=True),
    "amqp_value_string": message([value("body text")], {"k": "v"}, PROPS[:4]),
    "amqp_value_map": message([value({"a": 1, "b": [1, 2, "x"]})], None, ["id-2"]),
    "amqp_sequence": message([sequence([1, "two", 3.0]), sequence([None])], APP),
    "uuid_message_id": message([data(b"x")], None, [Uuid(bytes(range(16))), None, "q"]),
    "ulong_message_id": message([data(b"x")], None, [Ulong(77)]),
    "empty_body": message([], None, ["no-body"]),
}


def batch(inner):
    return message([data(m) for m in inner], None, PROPS[:1], header=False)


MESSAGES["batch_two"] = batch([MESSAGES["minimal_data"], MESSAGES["full_data"]])
MESSAGES["batch_one"] = batch([MESSAGES["amqp_value_string"]])


# --- requests ---------------------------------------------------------------------------------

def request(operation, body, message_id="req-1", extra=None):
    app = {"operation": operation}
    app.update(extra or {})
    return message([value(body)], app, [message_id, None, "$management", None, "reply-to-link"], header=False)


KEY = b"SAS_KEY_VALUE"


def sas_token(uri, se, name="RootManageSharedAccessKey", key=KEY):
    sr = urllib.parse.quote_plus(uri)
    sig = base64.b64encode(hmac.new(key, f"{sr}\n{se}".encode(), hashlib.sha256).digest()).decode()
    return (f"SharedAccessSignature sr={sr}&sig={urllib.parse.quote_plus(sig)}"
            f"&se={se}&skn={name}")


TOKEN = sas_token("sb://localhost/queue", 1_800_000_000)

REQUESTS = {
    "put_token": request("put-token", TOKEN, extra={
        "type": "servicebus.windows.net:sastoken", "name": "sb://localhost/queue",
        "expiration": Ts(1_800_000_000_000)}),
    "peek": request("com.microsoft:peek-message",
                    {"from-sequence-number": Long(1), "message-count": 10},
                    extra={"associated-link-name": "receiver-1"}),
    "renew_lock": request("com.microsoft:renew-lock",
                          {"lock-tokens": Array(b"\x98", [LOCK, LOCK])}),
    "receive_by_sequence_number": request(
        "com.microsoft:receive-by-sequence-number",
        {"sequence-numbers": Array(b"\x81", [Long(1), Long(2)]),
         "receiver-settle-mode": Uint(1)}),
    "update_disposition": request(
        "com.microsoft:update-disposition",
        {"disposition-status": "suspended", "lock-tokens": Array(b"\x98", [LOCK]),
         "properties-to-modify": {"k": "v", "n": 1}}),
    "schedule_message": request(
        "com.microsoft:schedule-message",
        {"messages": [{"message-id": "m1", "message": MESSAGES["minimal_data"]}]},
        message_id=Uuid(bytes(16))),
    "cancel_scheduled": request(
        "com.microsoft:cancel-scheduled-message",
        {"sequence-numbers": Array(b"\x81", [Long(5)])}, message_id=Ulong(9)),
    "get_session_state": request("com.microsoft:get-session-state", {"session-id": "s"}),
}


# --- frames -----------------------------------------------------------------------------------

def attach(name, handle, role, source, target):
    return perf(0x12, [name, Uint(handle), role, Ubyte(0), Ubyte(0),
                       [source] if source is not None else None,
                       [target] if target is not None else None,
                       None, None, Uint(0), Ulong(262144)], channel=0)


def transfer(handle, delivery_id, payload, fmt=0, more=False):
    return perf(0x14, [Uint(handle), Uint(delivery_id), b"\x00\x00\x00\x01", Uint(fmt), False,
                       more], payload)


OPEN = perf(0x10, ["client-container", "localhost", Uint(262144), Ushort(4999), Uint(60000)])
BEGIN = perf(0x11, [None, Uint(0), Uint(5000), Uint(5000), Uint(255)])
FLOW = perf(0x13, [Uint(0), Uint(5000), Uint(0), Uint(5000), Uint(0), Uint(0), Uint(100)])
DISPOSITION = perf(0x15, [True, Uint(0), Uint(3), True, Described(0x24, [])])
DETACH = perf(0x16, [Uint(0), True, Described(0x1d, [Sym("amqp:not-found"), "gone"])])
END = perf(0x17, [])
CLOSE = perf(0x18, [])
HEARTBEAT = struct.pack(">IBBH", 8, 2, 0, 0)

FRAMES = {
    "sasl_plain": sasl(0x41, [Sym("PLAIN"), b"\x00RootManageSharedAccessKey\x00SAS_KEY_VALUE",
                              "localhost"]),
    "sasl_mssbcbs": sasl(0x41, [Sym("MSSBCBS"), b"", "localhost"]),
    "sasl_anonymous": sasl(0x41, [Sym("ANONYMOUS")]),
    "sasl_mechanisms": sasl(0x40, [Array(b"\xa3", [Sym("PLAIN"), Sym("ANONYMOUS")])]),
    "sasl_outcome": sasl(0x44, [Ubyte(0)]),
    "session_send": OPEN + BEGIN + attach("sender-1", 0, False, None, "queue") + FLOW
    + transfer(0, 0, MESSAGES["full_data"]) + DISPOSITION + HEARTBEAT + DETACH + END + CLOSE,
    "session_receive": OPEN + BEGIN + attach("receiver-1", 1, True, "queue/$deadletterqueue", None)
    + FLOW + DISPOSITION + END,
    "cbs": OPEN + BEGIN + attach("cbs-sender", 0, False, None, "$cbs")
    + attach("cbs-receiver", 1, True, "$cbs", "cbs-client") + transfer(0, 0, REQUESTS["put_token"]),
    "management": OPEN + BEGIN + attach("mgmt", 0, False, None, "queue/$management")
    + transfer(0, 0, REQUESTS["peek"]),
    "multi_frame_transfer": OPEN + BEGIN + transfer(0, 1, MESSAGES["full_data"][:40], more=True)
    + transfer(0, 1, MESSAGES["full_data"][40:]),
    "batch_transfer": OPEN + BEGIN + transfer(0, 2, MESSAGES["batch_two"], fmt=0x80013700),
}


# --- HTTP -------------------------------------------------------------------------------------

def entry(inner):
    return ('<?xml version="1.0" encoding="utf-8"?>'
            '<entry xmlns="http://www.w3.org/2005/Atom"><title type="text">q</title>'
            '<content type="application/xml">' + inner + '</content></entry>').encode()


QUEUE_FIELDS = (
    '<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"'
    ' xmlns:i="http://www.w3.org/2001/XMLSchema-instance">'
    '<LockDuration>PT1M</LockDuration><MaxSizeInMegabytes>1024</MaxSizeInMegabytes>'
    '<RequiresDuplicateDetection>true</RequiresDuplicateDetection>'
    '<RequiresSession>false</RequiresSession>'
    '<DefaultMessageTimeToLive>P10675199DT2H48M5.4775807S</DefaultMessageTimeToLive>'
    '<DeadLetteringOnMessageExpiration>true</DeadLetteringOnMessageExpiration>'
    '<DuplicateDetectionHistoryTimeWindow>PT10M</DuplicateDetectionHistoryTimeWindow>'
    '<MaxDeliveryCount>10</MaxDeliveryCount><EnableBatchedOperations>true</EnableBatchedOperations>'
    '<AuthorizationRules/><Status>Active</Status>'
    '<ForwardTo>sb://localhost/other</ForwardTo>'
    '<ForwardDeadLetteredMessagesTo>dlq-target</ForwardDeadLetteredMessagesTo>'
    '<UserMetadata>meta &amp; data</UserMetadata><EnablePartitioning>false</EnablePartitioning>'
    '<PartitionCount>4</PartitionCount><MaxMessageSizeInKilobytes>256</MaxMessageSizeInKilobytes>'
    '<AutoDeleteOnIdle>P10675199DT2H48M5.4775807S</AutoDeleteOnIdle>'
    '</QueueDescription>')

ATOM = {
    "queue_full": entry(QUEUE_FIELDS),
    "queue_minimal": entry('<QueueDescription/>'),
    "queue_bare": QUEUE_FIELDS.encode(),
    "topic": entry('<TopicDescription><MaxSizeInMegabytes>1</MaxSizeInMegabytes></TopicDescription>'),
    "subscription": entry('<SubscriptionDescription><LockDuration>PT30S</LockDuration>'
                          '</SubscriptionDescription>'),
    "rule": entry('<RuleDescription><Filter i:type="SqlFilter" xmlns:i="x"><SqlExpression>a = 1'
                  '</SqlExpression></Filter></RuleDescription>'),
}

BROKER_PROPERTIES = (
    '{"MessageId":"m1","CorrelationId":"c","SessionId":"s","Label":"l","ReplyTo":"r",'
    '"ReplyToSessionId":"rs","To":"t","TimeToLive":60.5,'
    '"ScheduledEnqueueTimeUtc":"Sun, 06 Nov 1994 08:49:37 GMT","ForcePersistence":true}')

REST = {
    "single": (BROKER_PROPERTIES + '\0content-type:application/json\0priority:"high"\0count:3'
               '\0ratio:1.5\0flag:true\0when:"Sun, 06 Nov 1994 08:49:37 GMT"\0{"body":1}').encode(),
    "timespan": b'{"TimeToLiveTimeSpan":"1.02:03:04.5","PartitionKey":"p"}\0x-custom:plain',
    "session_and_key": b'{"SessionId":"a","PartitionKey":"b"}\0',
    "batch": ('[{"Body":"one","BrokerProperties":' + BROKER_PROPERTIES + ','
              '"UserProperties":{"a":1,"b":"x","c":true,"d":null,"e":2.5}},{"Body":"two"}]').encode(),
}

SAS = {
    "valid": TOKEN.encode(),
    "amqp_uri": sas_token("amqp://localhost/queue/$management", 1_800_000_000).encode(),
    "expired": sas_token("sb://localhost/", 1_000_000_000).encode(),
    "other_policy": sas_token("sb://localhost/q", 1_800_000_000, name="Listen%20Only").encode(),
    "wrong_key": sas_token("https://localhost/q?x=1", 1_800_000_000, key=b"other").encode(),
    "uri": b"sb://localhost/queue/subscriptions/s",
}


def write(target, seeds):
    directory = os.path.join(HERE, target)
    os.makedirs(directory, exist_ok=True)
    for name, content in seeds.items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(content)


write("amqp_frame", FRAMES)
write("amqp_message", MESSAGES)
write("amqp_request", REQUESTS)
write("atom_description", ATOM)
write("rest_properties", REST)
write("sas_token", SAS)
