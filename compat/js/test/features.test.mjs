// Entity features: peek, scheduling, TTL, duplicate detection, partitioned queues.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  TEST_TIMEOUT_MS,
  lockReceiver,
  partitionOf,
  peekAll,
  queue,
  receiveN,
  receiveNone,
  seq,
  sleep,
  withClient,
} from "../lib/env.mjs";

const opts = { timeout: TEST_TIMEOUT_MS };

test("peek", opts, () =>
  withClient(async (client) => {
    const name = queue("peek");
    const sender = client.createSender(name);
    for (let i = 0; i < 5; i++) await sender.sendMessages({ body: `peek-${i}` });
    const receiver = lockReceiver(client, name);

    // The SDK's own continuation (kept per client and entity): a first plain peek starts at the
    // beginning, the next one continues after the last message peeked.
    const firstTwo = await receiver.peekMessages(2);
    const following = await receiver.peekMessages(10);
    assert.deepEqual(
      [...firstTwo, ...following].map((m) => m.body),
      [0, 1, 2, 3, 4].map((i) => `peek-${i}`),
    );
    assert.equal(firstTwo.length, 2);

    const peeked = await peekAll(receiver);
    assert.deepEqual(peeked.map((m) => m.body), [0, 1, 2, 3, 4].map((i) => `peek-${i}`));
    assert.deepEqual(peeked.map(seq), [...firstTwo, ...following].map(seq));
    for (const message of peeked) {
      assert.ok(message.sequenceNumber.greaterThanOrEqual(1), `sequence number ${seq(message)}`);
      assert.equal(message.state, "active");
      assert.ok(message.enqueuedTimeUtc instanceof Date);
    }
    for (let i = 1; i < peeked.length; i++) {
      assert.ok(
        peeked[i].sequenceNumber.greaterThan(peeked[i - 1].sequenceNumber),
        "strictly increasing",
      );
    }

    // From a sequence number in the middle.
    const tail = await peekAll(receiver, peeked[3].sequenceNumber);
    assert.deepEqual(tail.map(seq), peeked.slice(3).map(seq));

    // Peeking neither locks nor counts as a delivery.
    const received = await receiveN(receiver, 5);
    assert.deepEqual(received.map(seq).sort(), peeked.map(seq).sort());
    for (const message of received) {
      assert.equal(message.deliveryCount, 0);
      await receiver.completeMessage(message);
    }
    assert.deepEqual(await peekAll(receiver), []);
  }));

test("schedule and cancel", opts, () =>
  withClient(async (client) => {
    const name = queue("schedule");
    const at = new Date(Date.now() + 6000);
    const sender = client.createSender(name);
    const [kept] = await sender.scheduleMessages({ body: "scheduled-kept" }, at);
    const [cancelled] = await sender.scheduleMessages({ body: "scheduled-cancelled" }, at);
    assert.ok(kept.greaterThanOrEqual(1) && cancelled.greaterThanOrEqual(1));
    assert.ok(!kept.equals(cancelled));
    await sender.cancelScheduledMessages(cancelled);

    const receiver = lockReceiver(client, name);
    // Scheduled messages are peekable (state scheduled); the cancelled one is gone.
    const peeked = await peekAll(receiver);
    assert.deepEqual(peeked.map(seq), [kept.toString()]);
    assert.equal(peeked[0].state, "scheduled");

    const early = await receiveNone(receiver, 2500);
    if (Date.now() < at.getTime() - 500) {
      assert.deepEqual(early, [], "a scheduled message was delivered before its time");
    }

    const messages = await receiveN(receiver, 1, 20000);
    const arrived = Date.now();
    assert.deepEqual(messages.map((m) => m.body), ["scheduled-kept"]);
    const [message] = messages;
    assert.ok(arrived >= at.getTime() - 500, "not delivered before its time");
    assert.equal(seq(message), kept.toString());
    assert.ok(message.scheduledEnqueueTimeUtc instanceof Date);
    assert.ok(Math.abs(message.scheduledEnqueueTimeUtc.getTime() - at.getTime()) < 1000);
    await receiver.completeMessage(message);

    // The cancelled message never arrives.
    assert.deepEqual(await receiveNone(receiver, 2000), []);
    assert.deepEqual(await peekAll(receiver), []);
  }));

test("TTL expiry drops the message", opts, () =>
  withClient(async (client) => {
    // DeadLetteringOnMessageExpiration false: an expired message just disappears.
    const name = queue("ttl");
    const sender = client.createSender(name);
    await sender.sendMessages({ body: "short-lived", timeToLive: 1000 });
    await sender.sendMessages({ body: "long-lived" });
    await sleep(2500);
    const receiver = lockReceiver(client, name);
    // Enqueued first, expired: the first message received is the one sent second.
    const messages = await receiveN(receiver, 1);
    assert.deepEqual(messages.map((m) => m.body), ["long-lived"]);
    await receiver.completeMessage(messages[0]);
    assert.deepEqual(await receiveNone(receiver, 1500), []);
    assert.deepEqual(await peekAll(receiver), []);
    const dlq = lockReceiver(client, name, { subQueueType: "deadLetter" });
    assert.deepEqual(await receiveNone(dlq, 1000), []);
  }));

test("TTL expiry dead-letters when DeadLetteringOnMessageExpiration is on", opts, () =>
  withClient(async (client) => {
    const name = queue("ttl-dlq");
    await client
      .createSender(name)
      .sendMessages({ body: "expires-into-dlq", messageId: "ttl-1", timeToLive: 1000 });
    await sleep(2500);
    const receiver = lockReceiver(client, name);
    assert.deepEqual(await receiveNone(receiver, 1500), []);
    const dlq = lockReceiver(client, name, { subQueueType: "deadLetter" });
    const [dead] = await receiveN(dlq, 1, 10000);
    assert.ok(dead, "the expired message is in the dead-letter queue");
    assert.equal(dead.body, "expires-into-dlq");
    assert.equal(dead.messageId, "ttl-1");
    assert.equal(dead.deadLetterReason, "TTLExpiredException");
    await dlq.completeMessage(dead);
  }));

test("duplicate detection", opts, () =>
  withClient(async (client) => {
    // RequiresDuplicateDetection: the second send of a MessageId inside the window is dropped.
    const name = queue("dedup");
    const sender = client.createSender(name);
    await sender.sendMessages({ body: "first", messageId: "dup-1" });
    await sender.sendMessages({ body: "second", messageId: "dup-1" });
    await sender.sendMessages({ body: "other", messageId: "dup-2" });
    await sender.sendMessages([{ body: "in-batch", messageId: "dup-2" }]);
    const receiver = lockReceiver(client, name);
    const messages = await receiveN(receiver, 2);
    assert.deepEqual(messages.map((m) => m.body).sort(), ["first", "other"]);
    for (const message of messages) await receiver.completeMessage(message);
    assert.deepEqual(await receiveNone(receiver, 1500), []);
  }));

test("partitioned queue: keys pick a partition, sequence numbers carry it", opts, () =>
  withClient(async (client) => {
    // EnablePartitioning true, PartitionCount 16, no sessions required.
    const name = queue("partitioned");
    const sender = client.createSender(name);
    const expected = new Map(); // body -> key (null when keyless)
    for (let i = 0; i < 3; i++) {
      await sender.sendMessages({ body: `pk-a-${i}`, partitionKey: "pk-a" });
      expected.set(`pk-a-${i}`, "pk-a");
    }
    const batch = await sender.createMessageBatch();
    for (let i = 0; i < 3; i++) {
      assert.ok(batch.tryAddMessage({ body: `pk-b-${i}`, partitionKey: "pk-b" }));
      expected.set(`pk-b-${i}`, "pk-b");
    }
    await sender.sendMessages(batch);
    for (let i = 0; i < 3; i++) {
      await sender.sendMessages({ body: `session-${i}`, sessionId: "sess-1" });
      expected.set(`session-${i}`, "sess-1");
    }
    for (let i = 0; i < 16; i++) {
      await sender.sendMessages({ body: `keyless-${i}` });
      expected.set(`keyless-${i}`, null);
    }

    const receiver = lockReceiver(client, name);
    const messages = await receiveN(receiver, expected.size, 30000);
    const byBody = new Map(messages.map((m) => [m.body, m]));
    assert.deepEqual([...byBody.keys()].sort(), [...expected.keys()].sort());
    assert.equal(messages.length, expected.size, "every message is received, once");
    assert.equal(new Set(messages.map(seq)).size, messages.length, "sequence numbers are unique");

    const partitions = new Map(); // key -> Set of partitions
    for (const [body, key] of expected) {
      const message = byBody.get(body);
      const partition = partitionOf(message.sequenceNumber);
      assert.ok(partition >= 0 && partition < 16, `${body}: sequence number ${seq(message)}`);
      if (!partitions.has(key)) partitions.set(key, new Set());
      partitions.get(key).add(partition);
      if (key === "pk-a" || key === "pk-b") assert.equal(message.partitionKey, key);
      if (key === "sess-1") assert.equal(message.sessionId, "sess-1");
    }
    for (const key of ["pk-a", "pk-b", "sess-1"]) {
      assert.equal(partitions.get(key).size, 1, `${key} spread over ${[...partitions.get(key)]}`);
    }
    assert.ok(
      partitions.get(null).size >= 4,
      `keyless sends used partitions ${[...partitions.get(null)]}`,
    );
    for (const message of messages) await receiver.completeMessage(message);
    assert.deepEqual(await receiveNone(receiver, 1000), []);
  }));

test("partitioned queue with duplicate detection: MessageId picks the partition", opts, () =>
  withClient(async (client) => {
    const name = queue("partitioned-dedup");
    const sender = client.createSender(name);
    for (let i = 0; i < 10; i++) {
      await sender.sendMessages({ body: `mid-${i}`, messageId: `mid-${i}` });
    }
    await sender.sendMessages({ body: "mid-0 again", messageId: "mid-0" });
    await sender.sendMessages({ body: "mid-3 again", messageId: "mid-3" });
    const receiver = lockReceiver(client, name);
    const messages = await receiveN(receiver, 10);
    messages.push(...(await receiveNone(receiver, 1500)));
    const ids = [...Array(10).keys()].map((i) => `mid-${i}`).sort();
    assert.deepEqual(messages.map((m) => m.body).sort(), ids);
    assert.deepEqual(messages.map((m) => m.messageId).sort(), ids);
    const partitions = new Set(messages.map((m) => partitionOf(m.sequenceNumber)));
    for (const p of partitions) assert.ok(p >= 0 && p < 16);
    assert.ok(partitions.size >= 2, `ten message ids all landed on partitions ${[...partitions]}`);
    for (const message of messages) await receiver.completeMessage(message);
  }));
