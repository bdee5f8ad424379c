// AMQP over TLS and over WebSockets with the official SDK, as against Service Bus.
//
// - TLS: a connection string without UseDevelopmentEmulator (IRONBUS_TLS_CONNECTION_STRING,
//   `sb://localhost:<amqps port>/`; the SDK takes the port from the Endpoint), the development
//   CA trusted through NODE_EXTRA_CA_CERTS (set by `cargo xtask compat`).
// - WebSockets: `webSocketOptions: { webSocket: WebSocket }` (the `ws` package; Node 20 has no
//   global WebSocket) to `wss://localhost:<https port>/$servicebus/websocket`, the port from the
//   admin connection string's Endpoint.
//
// Each round trip sends a small and a 200 KB message (larger than a TLS record, an AMQP frame
// and a WebSocket message) and peeks over `$management` on the same connection.

import assert from "node:assert/strict";
import { test } from "node:test";

import { ServiceBusClient } from "@azure/service-bus";
import WebSocket from "ws";

import {
  TEST_TIMEOUT_MS,
  adminConnectionString,
  lockReceiver,
  queue,
  receiveN,
  receiveNone,
  withClient,
} from "../lib/env.mjs";

const opts = { timeout: TEST_TIMEOUT_MS };
const LARGE = Buffer.from(Array.from({ length: 200000 }, (_, i) => i % 251));

function tlsConnectionString() {
  const value = (process.env.IRONBUS_TLS_CONNECTION_STRING ?? "").trim();
  if (!value) {
    throw new Error("IRONBUS_TLS_CONNECTION_STRING is not set: run `cargo xtask compat js`");
  }
  return value;
}

async function roundTrip(client, name) {
  const sender = client.createSender(name);
  await sender.sendMessages({ body: "small", messageId: "small" });
  await sender.sendMessages({ body: LARGE, messageId: "large" });
  const receiver = lockReceiver(client, name);
  const peeked = await receiver.peekMessages(10);
  assert.deepEqual(peeked.map((m) => m.messageId).sort(), ["large", "small"]);
  const messages = await receiveN(receiver, 2);
  const byId = new Map(messages.map((m) => [m.messageId, m]));
  assert.deepEqual([...byId.keys()].sort(), ["large", "small"]);
  assert.equal(byId.get("small").body, "small");
  assert.ok(Buffer.from(byId.get("large").body).equals(LARGE), "the 200 KB body round-trips");
  for (const message of messages) await receiver.completeMessage(message);
  assert.deepEqual(await receiveNone(receiver, 1000), []);
}

test("TLS with a connection string without UseDevelopmentEmulator", opts, () => {
  const connection = tlsConnectionString();
  assert.ok(!connection.includes("UseDevelopmentEmulator"));
  assert.match(connection, /^Endpoint=sb:\/\/localhost:\d+\//);
  return withClient((client) => roundTrip(client, queue("tls")), { connection });
});

test("AMQP over WebSockets on the HTTPS port", opts, () =>
  withClient((client) => roundTrip(client, queue("websocket")), {
    connection: adminConnectionString(),
    options: { webSocketOptions: { webSocket: WebSocket } },
  }));
