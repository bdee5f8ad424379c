// Sending (single, array, batch), receiving in both modes, completing, property round trips.

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
  withClient,
} from "../lib/env.mjs";

const opts = { timeout: TEST_TIMEOUT_MS };

test("single send, peek-lock receive, complete", opts, () =>
  withClient(async (client) => {
    const name = queue("send-single");
    const sender = client.createSender(name);
    await sender.sendMessages({ body: "hello ironbus", messageId: "single-1" });
    const receiver = lockReceiver(client, name);
    const messages = await receiveN(receiver, 1);
    assert.equal(messages.length, 1);
    const [message] = messages;
    assert.equal(message.body, "hello ironbus");
    assert.equal(message.messageId, "single-1");
    assert.ok(message.sequenceNumber.greaterThanOrEqual(1), `sequence number ${seq(message)}`);
    assert.equal(message.deliveryCount, 0);
    assert.ok(message.lockToken, "peek-lock deliveries carry a lock token");
    assert.match(message.lockToken, /^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$/);
    assert.ok(message.lockedUntilUtc instanceof Date);
    assert.ok(message.lockedUntilUtc.getTime() > Date.now(), "locked until a future time");
    assert.ok(message.enqueuedTimeUtc instanceof Date);
    assert.ok(Math.abs(Date.now() - message.enqueuedTimeUtc.getTime()) < 60000);
    assert.equal(message.state, "active");
    await receiver.completeMessage(message);
    assert.deepEqual(await receiveNone(receiver, 1000), []);
  }));

test("batch send: array and createMessageBatch", opts, () =>
  withClient(async (client) => {
    const name = queue("send-batch");
    const sender = client.createSender(name);
    // An array is sent as one batch transfer (message format 0x80013700).
    await sender.sendMessages([0, 1, 2, 3, 4].map((i) => ({ body: `array-${i}` })));
    const batch = await sender.createMessageBatch();
    for (let i = 0; i < 5; i++) {
      assert.ok(batch.tryAddMessage({ body: `batch-${i}`, applicationProperties: { i } }));
    }
    assert.equal(batch.count, 5);
    await sender.sendMessages(batch);

    const receiver = lockReceiver(client, name);
    const messages = await receiveN(receiver, 10);
    const expected = [0, 1, 2, 3, 4].flatMap((i) => [`array-${i}`, `batch-${i}`]);
    assert.deepEqual(messages.map((m) => m.body).sort(), expected.sort());
    assert.equal(new Set(messages.map(seq)).size, messages.length, "sequence numbers are unique");
    // A batch is split in order: sequence numbers follow the order of the messages in it.
    const inOrder = [...messages].sort((a, b) => a.sequenceNumber.compare(b.sequenceNumber));
    const bodies = inOrder.map((m) => m.body);
    for (const prefix of ["array-", "batch-"]) {
      assert.deepEqual(
        bodies.filter((b) => b.startsWith(prefix)),
        [0, 1, 2, 3, 4].map((i) => `${prefix}${i}`),
      );
    }
    for (const message of messages) {
      if (message.body.startsWith("batch-")) {
        assert.equal(message.applicationProperties.i, Number(message.body.split("-")[1]));
      }
      await receiver.completeMessage(message);
    }
    assert.deepEqual(await receiveNone(receiver, 1000), []);
  }));

test("receive-and-delete", opts, () =>
  withClient(async (client) => {
    const name = queue("receive-and-delete");
    await client.createSender(name).sendMessages([0, 1, 2].map((i) => ({ body: `rad-${i}` })));
    const receiver = client.createReceiver(name, { receiveMode: "receiveAndDelete" });
    const messages = await receiveN(receiver, 3);
    assert.deepEqual(messages.map((m) => m.body).sort(), ["rad-0", "rad-1", "rad-2"]);
    for (const message of messages) {
      assert.equal(message.lockToken, undefined, "receive-and-delete deliveries carry no lock");
    }
    await receiver.close();
    // Deleted at delivery: nothing left to peek or receive.
    const check = lockReceiver(client, name);
    assert.deepEqual(await peekAll(check), []);
    assert.deepEqual(await receiveNone(check, 1500), []);
  }));

test("complete removes the message", opts, () =>
  withClient(async (client) => {
    const name = queue("complete");
    await client.createSender(name).sendMessages({ body: "complete-me" });
    const receiver = lockReceiver(client, name);
    const messages = await receiveN(receiver, 1);
    assert.deepEqual(messages.map((m) => m.body), ["complete-me"]);
    await receiver.completeMessage(messages[0]);
    assert.deepEqual(await receiveNone(receiver, 2000), []);
    assert.deepEqual(await peekAll(receiver), []);
  }));

test("message and application properties round-trip", opts, () =>
  withClient(async (client) => {
    const name = queue("app-properties");
    const moment = new Date(Date.UTC(2024, 4, 6, 7, 8, 9, 123));
    const payload = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const applicationProperties = {
      str: "text value",
      int: 42,
      negative: -7,
      big: 2 ** 40,
      float: 3.5,
      true: true,
      false: false,
      date: moment,
      none: null,
    };
    await client.createSender(name).sendMessages({
      body: payload,
      applicationProperties,
      messageId: "props-1",
      correlationId: "corr-1",
      subject: "the-subject",
      contentType: "application/octet-stream",
      replyTo: "reply-queue",
      to: "somewhere",
    });
    // skipConvertingDate: by default the SDK turns received Date properties into numbers; keep
    // them as decoded, so a timestamp that lost its type (e.g. re-encoded as long) shows.
    const receiver = lockReceiver(client, name, {
      skipParsingBodyAsJson: true,
      skipConvertingDate: true,
    });
    const messages = await receiveN(receiver, 1);
    assert.equal(messages.length, 1);
    const [message] = messages;
    assert.ok(Buffer.isBuffer(message.body));
    assert.ok(payload.equals(message.body), "binary body round-trips");
    assert.equal(message.messageId, "props-1");
    assert.equal(message.correlationId, "corr-1");
    assert.equal(message.subject, "the-subject");
    assert.equal(message.contentType, "application/octet-stream");
    assert.equal(message.replyTo, "reply-queue");
    assert.equal(message.to, "somewhere");
    const got = message.applicationProperties;
    assert.equal(got.str, "text value");
    assert.equal(got.int, 42);
    assert.equal(got.negative, -7);
    assert.equal(got.big, 2 ** 40);
    assert.equal(got.float, 3.5);
    assert.equal(got.true, true);
    assert.equal(got.false, false);
    assert.ok(got.date instanceof Date, `date came back as ${typeof got.date}: not a timestamp`);
    assert.equal(got.date.getTime(), moment.getTime());
    assert.ok("none" in got);
    assert.equal(got.none, null);
    await receiver.completeMessage(message);
  }));

test("a message with a footer (rhea writes it before the body) arrives whole", opts, () =>
  withClient(async (client) => {
    const name = queue("footer");
    const sender = client.createSender(name);
    await sender.sendMessages({
      body: "with a footer",
      bodyType: "value",
      footer: { "x-check": "f1" },
      applicationProperties: { kept: 1 },
    });
    await sender.sendMessages({ body: Buffer.from("data body"), bodyType: "data", footer: { n: 2 } });
    const receiver = lockReceiver(client, name);
    const messages = await receiveN(receiver, 2);
    assert.equal(messages.length, 2);
    const [first, second] = messages;
    assert.equal(first.body, "with a footer");
    assert.equal(first.applicationProperties.kept, 1);
    assert.deepEqual(first._rawAmqpMessage.footer, { "x-check": "f1" });
    assert.equal(Buffer.from(second.body).toString(), "data body");
    assert.deepEqual(second._rawAmqpMessage.footer, { n: 2 });
    for (const m of messages) await receiver.completeMessage(m);
  }));
