// Errors the SDK must recognise: unknown entity, wrong key, oversize message.
//
// Each must come back with the right `code`, and quickly: a broker that never answers would make
// the SDK wait out its own 60 s operation timeout.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  QUICK_MS,
  TEST_TIMEOUT_MS,
  connectionString,
  queue,
  receiveN,
  timed,
  withClient,
  withKey,
} from "../lib/env.mjs";

const opts = { timeout: TEST_TIMEOUT_MS };

test("unknown entity: MessagingEntityNotFound", opts, () =>
  withClient(async (client) => {
    // Not in the generated config: the broker refuses the link with amqp:not-found.
    const name = queue("no-such-queue");
    const sender = client.createSender(name);
    const sent = await timed(() => sender.sendMessages({ body: "lost" }));
    assert.equal(sent.error?.code, "MessagingEntityNotFound", String(sent.error));
    assert.ok(sent.tookMs < QUICK_MS, `the sender took ${sent.tookMs} ms to fail`);

    const receiver = client.createReceiver(name);
    const received = await timed(() => receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 }));
    assert.equal(received.error?.code, "MessagingEntityNotFound", String(received.error));
    assert.ok(received.tookMs < QUICK_MS, `the receiver took ${received.tookMs} ms to fail`);
    // Named by its full address, as Service Bus names it.
    for (const error of [sent.error, received.error]) {
      const words = `/${name}' could not be found.`;
      assert.ok(error.message.includes("The messaging entity 'sb://"), error.message);
      assert.ok(error.message.includes(words), error.message);
    }
  }));

test("wrong key: UnauthorizedAccess", opts, () =>
  withClient(
    async (client) => {
      // SharedAccessKey=wrong: the $cbs put-token is refused (the SDK would retry it; don't).
      const sender = client.createSender(queue("wrong-key"));
      const { error, tookMs } = await timed(() => sender.sendMessages({ body: "forbidden" }));
      assert.equal(error?.code, "UnauthorizedAccess", String(error));
      assert.ok(tookMs < QUICK_MS, `the refusal took ${tookMs} ms`);
    },
    {
      connection: withKey(connectionString(), "wrong"),
      options: { retryOptions: { maxRetries: 0, timeoutInMs: 30000 } },
    },
  ));

test("oversize message: MessageSizeExceeded", opts, () =>
  withClient(async (client) => {
    // MaxMessageSizeInKilobytes 256 on this queue.
    const name = queue("oversize");
    const sender = client.createSender(name);
    const { error, tookMs } = await timed(() =>
      sender.sendMessages({ body: Buffer.alloc(300 * 1024, 0x78) }),
    );
    assert.equal(error?.code, "MessageSizeExceeded", String(error));
    assert.ok(tookMs < QUICK_MS, `the refusal took ${tookMs} ms`);

    // The sender still works, and a message under the limit goes through.
    const fits = Buffer.alloc(200 * 1024);
    for (let i = 0; i < fits.length; i++) fits[i] = i % 256;
    await sender.sendMessages({ body: fits });
    const receiver = client.createReceiver(name, {
      receiveMode: "receiveAndDelete",
      skipParsingBodyAsJson: true,
    });
    const messages = await receiveN(receiver, 1);
    assert.equal(messages.length, 1);
    assert.ok(fits.equals(messages[0].body), "the 200 KiB body round-trips");
  }));
