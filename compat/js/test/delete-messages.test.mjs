// Batch delete (com.microsoft:batch-delete-messages) with the SDK's 7.10 beta, installed beside
// 7.9.5 as `service-bus-beta`: receiver.deleteMessages({ maxMessageCount, beforeEnqueueTime })
// and receiver.purgeMessages() on a queue, its dead-letter queue and a session; locked
// messages stay, messages enqueued at or after the cutoff stay, a purge of more than one
// batch (4,000) loops until done.

import assert from "node:assert/strict";
import { test } from "node:test";

import { ServiceBusClient } from "service-bus-beta";

import { TEST_TIMEOUT_MS, connectionString, peekAll, queue, seq, sleep } from "../lib/env.mjs";

const opts = { timeout: TEST_TIMEOUT_MS };
const lockOptions = { receiveMode: "peekLock", maxAutoLockRenewalDurationInMs: 0 };

/** Runs `fn` with a beta client of its own, closed afterwards. */
async function withBetaClient(fn) {
  const client = new ServiceBusClient(connectionString());
  try {
    return await fn(client);
  } finally {
    await client.close();
  }
}

async function sendBodies(client, name, bodies, extra = {}) {
  const sender = client.createSender(name);
  try {
    let batch = await sender.createMessageBatch();
    for (const body of bodies) {
      const message = { body, ...extra };
      // At most 1,000 per send: a PostgreSQL store (the cluster runs) takes 9,999 records in
      // one transaction, and a send of n messages writes about 3n.
      if (batch.count >= 1000 || !batch.tryAddMessage(message)) {
        await sender.sendMessages(batch);
        batch = await sender.createMessageBatch();
        assert.ok(batch.tryAddMessage(message), "one message fits an empty batch");
      }
    }
    if (batch.count > 0) await sender.sendMessages(batch);
  } finally {
    await sender.close();
  }
}

test("deleteMessages takes the oldest messages before the cutoff, never locked ones", opts, () =>
  withBetaClient(async (client) => {
    const name = queue("delete-messages");
    await sendBodies(client, name, ["old-1", "old-2", "old-3"]);
    // Enqueued times are the server's milliseconds: keep clear of the cutoff on both sides.
    await sleep(1100);
    const cutoff = new Date();
    await sleep(1100);
    await sendBodies(client, name, ["new-1", "new-2"]);
    const receiver = client.createReceiver(name, lockOptions);
    const before = (maxMessageCount) =>
      receiver.deleteMessages({ maxMessageCount, beforeEnqueueTime: cutoff });

    assert.equal(await before(2), 2);
    const left = await peekAll(receiver);
    assert.deepEqual(
      left.map((m) => m.body),
      ["old-3", "new-1", "new-2"],
      "the oldest went first",
    );
    assert.equal(await before(10), 1);
    assert.equal(await before(10), 0);

    const [locked] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10000 });
    assert.equal(locked?.body, "new-1");
    assert.equal(await receiver.purgeMessages(), 1, "the locked message is not eligible");
    assert.deepEqual((await peekAll(receiver)).map(seq), [seq(locked)]);
    await receiver.completeMessage(locked);

    await assert.rejects(
      receiver.deleteMessages({ maxMessageCount: 4001 }),
      (error) => /out of range|argument/i.test(`${error.code} ${error.message}`),
    );
    await receiver.close();
  }));

test("purgeMessages on the dead-letter queue deletes the dead letters only", opts, () =>
  withBetaClient(async (client) => {
    const name = queue("delete-dead-letters");
    await sendBodies(client, name, ["a", "b", "c"]);
    const receiver = client.createReceiver(name, lockOptions);
    const received = [];
    while (received.length < 2) {
      const wanted = 2 - received.length;
      received.push(...(await receiver.receiveMessages(wanted, { maxWaitTimeInMs: 10000 })));
    }
    for (const message of received) await receiver.deadLetterMessage(message);
    const dlq = client.createReceiver(name, { ...lockOptions, subQueueType: "deadLetter" });

    assert.equal(await dlq.purgeMessages(), 2);

    assert.deepEqual(await peekAll(dlq), []);
    assert.deepEqual((await peekAll(receiver)).map((m) => m.body), ["c"]);
    assert.equal(await receiver.purgeMessages(), 1);
    await dlq.close();
    await receiver.close();
  }));

test("purgeMessages deletes more than one batch of 4,000", opts, () =>
  withBetaClient(async (client) => {
    const name = queue("purge-messages");
    const bodies = Array.from({ length: 4500 }, (_, i) => `m${i}`);
    await sendBodies(client, name, bodies);
    const receiver = client.createReceiver(name, lockOptions);

    assert.equal(await receiver.purgeMessages(), 4500);

    assert.deepEqual(await receiver.peekMessages(10), []);
    await receiver.close();
  }));

test("a session receiver's deleteMessages keeps to its session", opts, () =>
  withBetaClient(async (client) => {
    const name = queue("delete-sessions");
    await sendBodies(client, name, ["s1-a", "s1-b"], { sessionId: "s1" });
    await sendBodies(client, name, ["s2-a"], { sessionId: "s2" });
    const s1 = await client.acceptSession(name, "s1", lockOptions);

    assert.equal(await s1.deleteMessages({ maxMessageCount: 100 }), 2);
    assert.deepEqual(await s1.peekMessages(10), []);
    await s1.close();

    const s2 = await client.acceptSession(name, "s2", lockOptions);
    const [message] = await s2.receiveMessages(1, { maxWaitTimeInMs: 10000 });
    assert.equal(message?.body, "s2-a");
    await s2.completeMessage(message);
    await s2.close();
  }));
