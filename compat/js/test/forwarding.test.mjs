// Auto-forwarding through the official SDK: ServiceBusAdministrationClient (ATOM over HTTPS)
// creates queues with `forwardTo` / `forwardDeadLetteredMessagesTo`; ServiceBusClient (AMQP) sends
// to the source and receives from the destination. A missing destination is refused; a forwarded
// message keeps its identity and carries its original sequence number
// (`enqueuedSequenceNumber`); a receiver on a forwarding source is refused; dead letters travel
// with their reason; the partition key survives between partitioned queues.
//
// Each test creates its own queues (`js-fwd-<what>-<random>`) and deletes them afterwards.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";

import { ServiceBusAdministrationClient } from "@azure/service-bus";

import {
  QUICK_MS,
  TEST_TIMEOUT_MS,
  adminConnectionString,
  partitionOf,
  receiveN,
  seq,
  timed,
  withClient,
} from "../lib/env.mjs";

const opts = { timeout: TEST_TIMEOUT_MS };
const lockOptions = { receiveMode: "peekLock", maxAutoLockRenewalDurationInMs: 0 };

function fresh(what) {
  return `js-fwd-${what}-${randomBytes(4).toString("hex")}`;
}

/** Runs `fn(make)` where `make(what, options)` creates a queue; deletes them all afterwards. */
async function withQueues(fn) {
  const admin = new ServiceBusAdministrationClient(adminConnectionString());
  const created = [];
  const make = async (what, options = {}) => {
    const name = fresh(what);
    await admin.createQueue(name, options);
    created.push(name);
    return name;
  };
  try {
    return await fn(make, admin);
  } finally {
    for (const name of created.reverse()) await admin.deleteQueue(name).catch(() => {});
  }
}

test("a forward to a missing destination is refused with 400", opts, () =>
  withQueues(async (make, admin) => {
    await assert.rejects(
      admin.createQueue(fresh("src"), { forwardTo: fresh("nowhere") }),
      (error) => error.statusCode === 400 && /40400/.test(String(error.message)),
    );
    const destination = await make("dst");
    await assert.rejects(
      admin.createQueue(fresh("session"), { requiresSession: true, forwardTo: destination }),
      (error) => error.statusCode === 400,
    );
  }),
);

test("a forwarded message keeps its identity and its original sequence number", opts, () =>
  withQueues((make) =>
    withClient(async (client) => {
      const destination = await make("dst");
      // Two direct messages first: the destination's sequence numbers run ahead of the source's.
      await client.createSender(destination).sendMessages([{ body: "d0" }, { body: "d1" }]);
      const direct = client.createReceiver(destination, lockOptions);
      for (const m of await receiveN(direct, 2)) await direct.completeMessage(m);
      await direct.close();
      const source = await make("src", { forwardTo: destination });
      await client.createSender(source).sendMessages({
        body: "hello",
        messageId: "fwd-1",
        correlationId: "corr",
        subject: "subj",
        applicationProperties: { color: "red", n: 3 },
      });
      const receiver = client.createReceiver(destination, lockOptions);
      const [message] = await receiveN(receiver, 1);
      assert.ok(message, "the message reached the destination");
      assert.equal(message.body, "hello");
      assert.equal(message.messageId, "fwd-1");
      assert.equal(message.correlationId, "corr");
      assert.equal(message.subject, "subj");
      assert.deepEqual(message.applicationProperties, { color: "red", n: 3 });
      assert.equal(message.deliveryCount, 0);
      assert.equal(seq(message), "3");
      assert.equal(Number(message.enqueuedSequenceNumber), 1);
      await receiver.completeMessage(message);
    }),
  ),
);

test("a receiver on a forwarding source is refused", opts, () =>
  withQueues((make) =>
    withClient(async (client) => {
      const destination = await make("dst");
      const source = await make("src", { forwardTo: destination });
      const receiver = client.createReceiver(source, lockOptions);
      const { error, tookMs } = await timed(() =>
        receiver.receiveMessages(1, { maxWaitTimeInMs: 2000 }),
      );
      assert.ok(error, "receiving from a forwarding source fails");
      assert.ok(tookMs < QUICK_MS, `refused quickly (${tookMs} ms)`);
      assert.match(String(error.message), /forward/i);
    }),
  ),
);

test("dead letters are forwarded with their reason and source", opts, () =>
  withQueues((make) =>
    withClient(async (client) => {
      const deadLetters = await make("dlq-dst");
      const source = await make("src", { forwardDeadLetteredMessagesTo: deadLetters });
      await client.createSender(source).sendMessages({ body: "bad", messageId: "bad-1" });
      const receiver = client.createReceiver(source, lockOptions);
      const [message] = await receiveN(receiver, 1);
      assert.ok(message);
      await receiver.deadLetterMessage(message, {
        deadLetterReason: "broken",
        deadLetterErrorDescription: "why",
      });
      const forwarded = client.createReceiver(deadLetters, lockOptions);
      const [dead] = await receiveN(forwarded, 1);
      assert.ok(dead, "the dead letter reached the forward target");
      assert.equal(dead.messageId, "bad-1");
      assert.equal(dead.deadLetterReason, "broken");
      assert.equal(dead.deadLetterErrorDescription, "why");
      assert.ok(String(dead.deadLetterSource).includes(source), `source ${dead.deadLetterSource}`);
      await forwarded.completeMessage(dead);
      // The source's dead-letter queue forwards: like a forwarding main queue, no receivers.
      const dlq = client.createReceiver(source, { subQueueType: "deadLetter", ...lockOptions });
      const { error } = await timed(() => dlq.receiveMessages(1, { maxWaitTimeInMs: 2000 }));
      assert.ok(error, "receiving from a forwarding dead-letter queue fails");
      assert.match(String(error.message), /auto-forwarding/);
    }),
  ),
);

test("the partition key survives between partitioned queues", opts, () =>
  withQueues((make) =>
    withClient(async (client) => {
      const destination = await make("pdst", { enablePartitioning: true });
      const source = await make("psrc", { enablePartitioning: true, forwardTo: destination });
      const sender = client.createSender(source);
      const keys = ["a", "b", "c", "d", "e"];
      for (const key of keys) {
        for (let n = 0; n < 3; n++) {
          await sender.sendMessages({ body: `${key}/${n}`, partitionKey: key });
        }
      }
      const receiver = client.createReceiver(destination, lockOptions);
      const received = await receiveN(receiver, keys.length * 3);
      assert.equal(received.length, keys.length * 3);
      const partitions = new Map();
      for (const m of received) {
        assert.equal(m.partitionKey, String(m.body).split("/")[0]);
        const set = partitions.get(m.partitionKey) ?? new Set();
        set.add(partitionOf(m.sequenceNumber));
        partitions.set(m.partitionKey, set);
        await receiver.completeMessage(m);
      }
      for (const [key, set] of partitions) assert.equal(set.size, 1, `key ${key}: one partition`);
    }),
  ),
);
