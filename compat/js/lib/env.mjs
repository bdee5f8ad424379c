// Helpers shared by the JS compatibility tests.
//
// Queue names: every test uses its own queue, named `js-<name>`. The queues and their properties
// are declared in one list in xtask/src/compat.rs (`cargo xtask compat config` prints the generated
// emulator-format config.json), which creates the same set for the Python suite as `py-<name>`.
//
// The connection string comes from IRONBUS_CONNECTION_STRING (`cargo xtask compat js` starts a
// server and sets it).

import { ServiceBusClient } from "@azure/service-bus";
import Long from "long";

export { Long };

export const ENV_VAR = "IRONBUS_CONNECTION_STRING";
export const PREFIX = "js-";
/** A refusal must come back within this many milliseconds (the SDK's own timeout is 60 s). */
export const QUICK_MS = 15000;
/** Per-test deadline for node's test runner. */
export const TEST_TIMEOUT_MS = 60000;

/** Partition id of a sequence number on a partitioned entity: its top 16 bits (ironbus). */
export function partitionOf(sequenceNumber) {
  return Long.fromValue(sequenceNumber).shiftRightUnsigned(48).toNumber();
}

/** The queue this suite declared as `name`. */
export function queue(name) {
  return PREFIX + name;
}

export function connectionString() {
  const value = (process.env[ENV_VAR] ?? "").trim();
  if (!value) {
    throw new Error(`${ENV_VAR} is not set: run the suite with \`cargo xtask compat js\``);
  }
  return value;
}

/** The connection string with its SharedAccessKey replaced by `key`. */
export function withKey(connection, key) {
  let replaced = false;
  const parts = connection
    .split(";")
    .filter((part) => part.trim() !== "")
    .map((part) => {
      const name = part.slice(0, part.indexOf("=")).trim();
      if (name.toLowerCase() === "sharedaccesskey") {
        replaced = true;
        return `SharedAccessKey=${key}`;
      }
      return part;
    });
  if (!replaced) throw new Error(`${ENV_VAR} has no SharedAccessKey to replace`);
  return parts.join(";");
}

/**
 * Runs `fn` with a client of its own, closed afterwards whatever happens. `fn` gets `timeoutMs`
 * (a little less than the test runner's deadline): past it the client is closed under it, so a
 * stuck test cannot keep connections (and the test process) alive.
 */
export async function withClient(
  fn,
  { connection = connectionString(), options, timeoutMs = TEST_TIMEOUT_MS - 5000 } = {},
) {
  const client = new ServiceBusClient(connection, options);
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`the test body was still running after ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([fn(client), deadline]);
  } finally {
    clearTimeout(timer);
    // Bounded, and an unref'd timer: it must not keep the process alive by itself.
    const giveUp = new Promise((resolve) => setTimeout(resolve, 5000).unref());
    await Promise.race([client.close(), giveUp]);
  }
}

/** Peek-lock receiver without automatic lock renewal, so lock times are the broker's alone. */
export function lockReceiver(client, name, options = {}) {
  return client.createReceiver(name, {
    receiveMode: "peekLock",
    maxAutoLockRenewalDurationInMs: 0,
    ...options,
  });
}

/**
 * Receives until `count` messages arrived or `timeoutMs` passed (one receiveMessages call may
 * return fewer messages than asked for).
 */
export async function receiveN(receiver, count, timeoutMs = 15000) {
  const deadline = Date.now() + timeoutMs;
  const received = [];
  while (received.length < count) {
    const remaining = deadline - Date.now();
    if (remaining <= 0) break;
    const batch = await receiver.receiveMessages(count - received.length, {
      maxWaitTimeInMs: Math.max(remaining, 500),
    });
    received.push(...batch);
  }
  return received;
}

/** Receives for `waitMs`; the caller asserts that the result is empty. */
export async function receiveNone(receiver, waitMs = 2000) {
  return receiver.receiveMessages(10, { maxWaitTimeInMs: waitMs });
}

/** Peeks from `from` (a sequence number, default 1) until the queue has no more messages. */
export async function peekAll(receiver, from = 1, limit = 1000) {
  const peeked = [];
  let next = Long.fromValue(from);
  while (peeked.length < limit) {
    const batch = await receiver.peekMessages(Math.min(100, limit - peeked.length), {
      fromSequenceNumber: next,
    });
    if (batch.length === 0) break;
    peeked.push(...batch);
    next = Long.fromValue(batch[batch.length - 1].sequenceNumber).add(1);
  }
  return peeked;
}

/** Sequence numbers as decimal strings: comparable with ===, usable as Set/Map keys. */
export function seq(message) {
  return Long.fromValue(message.sequenceNumber).toString();
}

/** Runs `action`; returns the error it threw (or undefined) and the milliseconds it took. */
export async function timed(action) {
  const start = Date.now();
  try {
    await action();
    return { error: undefined, tookMs: Date.now() - start };
  } catch (error) {
    return { error, tookMs: Date.now() - start };
  }
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The admin client's connection string: the HTTPS listener (IRONBUS_ADMIN_CONNECTION_STRING). */
export function adminConnectionString() {
  const value = (process.env.IRONBUS_ADMIN_CONNECTION_STRING ?? "").trim();
  if (!value) {
    throw new Error("IRONBUS_ADMIN_CONNECTION_STRING is not set: run `cargo xtask compat js`");
  }
  return value;
}

/** The plain HTTP listener: REST, /health, /metrics, the testing fault endpoint. */
export function httpUrl() {
  const value = (process.env.IRONBUS_HTTP_URL ?? "").trim();
  if (!value) throw new Error("IRONBUS_HTTP_URL is not set: run `cargo xtask compat js`");
  return value.replace(/\/+$/, "");
}

/**
 * Every server's plain HTTP listener, `httpUrl()` first: one server, or every node of a cluster
 * (IRONBUS_HTTP_URLS, separated by spaces). A fault is injected where the partition runs, and a
 * metric counted there.
 */
export function httpUrls() {
  const first = httpUrl();
  const others = (process.env.IRONBUS_HTTP_URLS ?? "")
    .split(/\s+/)
    .filter((url) => url !== "")
    .map((url) => url.replace(/\/+$/, ""));
  return [first, ...others.filter((url) => url !== first)];
}
