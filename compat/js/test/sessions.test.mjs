// Message sessions through the official ServiceBusClient: a session queue created with
// requiresSession over ATOM, acceptSession and acceptNextSession (AMQP source filter
// com.microsoft:session-filter) get their session only and in order, getSessionState /
// setSessionState and renewSessionLock on $management, the next-available timeout and a session
// locked elsewhere.
//
// Each test creates its own queue (`js-sessions-<random>`) and deletes it afterwards.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";

import { ServiceBusAdministrationClient } from "@azure/service-bus";

import { TEST_TIMEOUT_MS, adminConnectionString, receiveN, withClient } from "../lib/env.mjs";

const opts = { timeout: TEST_TIMEOUT_MS };
const lockOptions = { receiveMode: "peekLock", maxAutoLockRenewalDurationInMs: 0 };

/** Runs `fn(queue)` on a fresh session queue, deleted afterwards. */
async function withSessionQueue(fn) {
  const admin = new ServiceBusAdministrationClient(adminConnectionString());
  const queue = `js-sessions-${randomBytes(4).toString("hex")}`;
  const created = await admin.createQueue(queue, { requiresSession: true });
  assert.equal(created.requiresSession, true);
  try {
    return await fn(queue);
  } finally {
    await admin.deleteQueue(queue).catch(() => {});
  }
}

async function send(client, queue, sessionId, bodies) {
  const sender = client.createSender(queue);
  await sender.sendMessages(bodies.map((body) => ({ body, sessionId })));
  await sender.close();
}

test("acceptSession and acceptNextSession get their session only, in order", opts, () =>
  withSessionQueue((queue) =>
    withClient(async (client) => {
      await send(client, queue, "a", ["a0", "a1", "a2", "a3"]);
      await send(client, queue, "b", ["b0", "b1"]);
      const a = await client.acceptSession(queue, "a", lockOptions);
      assert.equal(a.sessionId, "a");
      assert.ok(a.sessionLockedUntilUtc > new Date(), "locked-until is in the future");
      const fromA = await receiveN(a, 4);
      assert.deepEqual(
        fromA.map((m) => m.body),
        ["a0", "a1", "a2", "a3"],
      );
      assert.ok(fromA.every((m) => m.sessionId === "a"));
      for (const m of fromA) await a.completeMessage(m);
      const next = await client.acceptNextSession(queue, lockOptions);
      assert.equal(next.sessionId, "b");
      const fromB = await receiveN(next, 2);
      assert.deepEqual(
        fromB.map((m) => m.body),
        ["b0", "b1"],
      );
      for (const m of fromB) await next.completeMessage(m);
      await next.close();
      await a.close();
    }),
  ),
);

test("session state and lock renewal on the management node", opts, () =>
  withSessionQueue((queue) =>
    withClient(async (client) => {
      await send(client, queue, "s", ["x"]);
      const receiver = await client.acceptSession(queue, "s", lockOptions);
      const before = receiver.sessionLockedUntilUtc;
      const renewed = await receiver.renewSessionLock();
      assert.ok(renewed >= before, `renewed ${renewed} >= ${before}`);
      await receiver.setSessionState("checkpoint-1");
      const state = await receiver.getSessionState();
      const text = Buffer.isBuffer(state) ? state.toString() : String(state);
      assert.ok(text.includes("checkpoint-1"), `state ${text}`);
      const [message] = await receiveN(receiver, 1);
      await receiver.completeMessage(message);
      await receiver.close();
    }),
  ),
);

test("acceptNextSession without an available session times out", opts, () =>
  withSessionQueue((queue) =>
    withClient(
      async (client) => {
        const started = Date.now();
        await assert.rejects(client.acceptNextSession(queue, lockOptions), (err) => {
          assert.equal(err.code, "ServiceTimeout", `${err.code}: ${err.message}`);
          return true;
        });
        assert.ok(Date.now() - started < 15000, "answered near the client's timeout");
      },
      { options: { retryOptions: { timeoutInMs: 3000, maxRetries: 0 } } },
    ),
  ),
);

test("a session held by another receiver cannot be locked", opts, () =>
  withSessionQueue((queue) =>
    withClient(async (client) => {
      await send(client, queue, "held", ["x"]);
      const holder = await client.acceptSession(queue, "held", lockOptions);
      await assert.rejects(client.acceptSession(queue, "held", lockOptions), (err) => {
        assert.equal(err.code, "SessionCannotBeLocked", `${err.code}: ${err.message}`);
        return true;
      });
      await holder.close();
    }),
  ),
);

test("peek and deferred messages within a session", opts, () =>
  withSessionQueue((queue) =>
    withClient(async (client) => {
      await send(client, queue, "d", ["d0", "d1"]);
      await send(client, queue, "other", ["o"]);
      const receiver = await client.acceptSession(queue, "d", lockOptions);
      const peeked = await receiver.peekMessages(10);
      assert.deepEqual(
        peeked.map((m) => m.body),
        ["d0", "d1"],
      );
      const [first, second] = await receiveN(receiver, 2);
      await receiver.deferMessage(first);
      await receiver.completeMessage(second);
      const [deferred] = await receiver.receiveDeferredMessages([first.sequenceNumber]);
      assert.equal(deferred.body, "d0");
      assert.equal(deferred.sessionId, "d");
      await receiver.completeMessage(deferred);
      await receiver.close();
    }),
  ),
);
