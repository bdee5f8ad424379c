// Peek-lock settlement: abandon, defer, dead-letter, lock renewal and lock expiry.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  TEST_TIMEOUT_MS,
  lockReceiver,
  peekAll,
  queue,
  receiveN,
  receiveNone,
  seq,
  sleep,
  timed,
  withClient,
} from "../lib/env.mjs";

const opts = { timeout: TEST_TIMEOUT_MS };

test("abandon increments the delivery count", opts, () =>
  withClient(async (client) => {
    const name = queue("abandon");
    await client.createSender(name).sendMessages({ body: "abandon-me" });
    const receiver = lockReceiver(client, name);

    const [first] = await receiveN(receiver, 1);
    assert.ok(first, "first delivery");
    assert.equal(first.deliveryCount, 0);
    await receiver.abandonMessage(first);

    const [second] = await receiveN(receiver, 1);
    assert.ok(second, "second delivery");
    assert.equal(seq(second), seq(first));
    assert.equal(second.deliveryCount, 1);
    await receiver.abandonMessage(second);

    const [third] = await receiveN(receiver, 1);
    assert.ok(third, "third delivery");
    assert.equal(third.deliveryCount, 2);
    assert.equal(third.body, "abandon-me");
    await receiver.completeMessage(third);
    assert.deepEqual(await receiveNone(receiver, 1000), []);
  }));

test("defer, receive deferred by sequence number, complete", opts, () =>
  withClient(async (client) => {
    const name = queue("defer");
    await client.createSender(name).sendMessages({ body: "defer-me" });
    const receiver = lockReceiver(client, name);
    const [message] = await receiveN(receiver, 1);
    assert.ok(message);
    const sequenceNumber = message.sequenceNumber;
    await receiver.deferMessage(message);

    // A deferred message is only reachable by its sequence number.
    assert.deepEqual(await receiveNone(receiver, 2000), []);
    const peeked = await peekAll(receiver);
    assert.deepEqual(peeked.map(seq), [seq(message)]);
    assert.equal(peeked[0].state, "deferred");

    const deferred = await receiver.receiveDeferredMessages(sequenceNumber);
    assert.equal(deferred.length, 1);
    assert.equal(seq(deferred[0]), seq(message));
    assert.equal(deferred[0].body, "defer-me");
    assert.ok(deferred[0].lockToken);
    assert.equal(deferred[0].state, "deferred");
    // Settled through the management node (update-disposition): no link delivery here.
    await receiver.completeMessage(deferred[0]);

    assert.deepEqual(await peekAll(receiver), []);
    const { error } = await timed(() => receiver.receiveDeferredMessages(sequenceNumber));
    assert.equal(error?.code, "MessageNotFound", String(error));
  }));

test("dead-letter with reason and description, then read it from the DLQ", opts, () =>
  withClient(async (client) => {
    const name = queue("dead-letter");
    await client.createSender(name).sendMessages({ body: "dead-letter-me", messageId: "dlq-1" });
    const receiver = lockReceiver(client, name);
    const [message] = await receiveN(receiver, 1);
    assert.ok(message);
    await receiver.deadLetterMessage(message, {
      deadLetterReason: "TestReason",
      deadLetterErrorDescription: "dead-lettered by the compat suite",
    });
    assert.deepEqual(await receiveNone(receiver, 1500), []);

    const dlq = lockReceiver(client, name, { subQueueType: "deadLetter" });
    const [dead] = await receiveN(dlq, 1);
    assert.ok(dead, "the message is in the dead-letter queue");
    assert.equal(dead.body, "dead-letter-me");
    assert.equal(dead.messageId, "dlq-1");
    assert.equal(seq(dead), seq(message));
    assert.equal(dead.deadLetterReason, "TestReason");
    assert.equal(dead.deadLetterErrorDescription, "dead-lettered by the compat suite");
    await dlq.completeMessage(dead);
    assert.deepEqual(await receiveNone(dlq, 1000), []);
  }));

test("renew lock moves lockedUntilUtc forward", opts, () =>
  withClient(async (client) => {
    // LockDuration PT5S: the message is completed after its original lock would have expired.
    const name = queue("renew-lock");
    await client.createSender(name).sendMessages({ body: "renew-me" });
    const receiver = lockReceiver(client, name);
    const [message] = await receiveN(receiver, 1);
    assert.ok(message);
    const original = message.lockedUntilUtc.getTime();
    await sleep(2500);
    const renewed = await receiver.renewMessageLock(message);
    assert.ok(renewed instanceof Date);
    assert.ok(renewed.getTime() - original >= 2000, `renewed ${renewed.toISOString()}`);
    assert.equal(message.lockedUntilUtc.getTime(), renewed.getTime());
    // Past the original expiry, within the renewed lock.
    await sleep(3500);
    await receiver.completeMessage(message);
    assert.deepEqual(await receiveNone(receiver, 1000), []);
  }));

test("lock expiry redelivers, then dead-letters at MaxDeliveryCount", opts, () =>
  withClient(async (client) => {
    // LockDuration PT5S, MaxDeliveryCount 2.
    const name = queue("lock-expiry");
    await client.createSender(name).sendMessages({ body: "let-my-lock-expire" });
    const receiver = lockReceiver(client, name);
    const [first] = await receiveN(receiver, 1);
    assert.ok(first);
    assert.equal(first.deliveryCount, 0);
    const lockedAt = Date.now();
    // Not settled: the lock expires and the message is delivered again, not before.
    const [second] = await receiveN(receiver, 1, 20000);
    const waited = Date.now() - lockedAt;
    assert.ok(second, "redelivered after the lock expired");
    assert.equal(seq(second), seq(first));
    assert.equal(second.deliveryCount, 1);
    assert.ok(waited >= 3500, `redelivered after ${waited} ms, before the 5 s lock expired`);

    // The second lock expires too: delivery count reaches MaxDeliveryCount -> dead-lettered.
    // (The receiver stays open meanwhile, so its link's fate plays no part.)
    const dlq = lockReceiver(client, name, { subQueueType: "deadLetter" });
    const [dead] = await receiveN(dlq, 1, 20000);
    assert.ok(dead, "dead-lettered after the last lock expired");
    assert.equal(seq(dead), seq(first));
    assert.equal(dead.body, "let-my-lock-expire");
    assert.equal(dead.deadLetterReason, "MaxDeliveryCountExceeded");
    await dlq.completeMessage(dead);
    assert.deepEqual(await receiveNone(receiver, 1000), []);
    assert.deepEqual(await peekAll(receiver), []);
  }));
