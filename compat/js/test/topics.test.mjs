// Topics and subscriptions through the official ServiceBusClient (AMQP): a send to a topic
// reaches every subscription, each receiver settles its own copy, a subscription's dead-letter
// queue, a receiver on the topic itself is refused, and ServiceBusRuleManager's createRule /
// listRules / deleteRule on a subscription's $management node.
//
// Each test creates its own topic (`js-topic-<what>-<random>`) with ServiceBusAdministrationClient
// (ATOM over HTTPS) and deletes it afterwards.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";

import { ServiceBusAdministrationClient } from "@azure/service-bus";

import {
  QUICK_MS,
  TEST_TIMEOUT_MS,
  adminConnectionString,
  receiveN,
  receiveNone,
  timed,
  withClient,
} from "../lib/env.mjs";

const opts = { timeout: TEST_TIMEOUT_MS };
/** Peek-lock without automatic lock renewal (as lib/env.mjs's lockReceiver, for a subscription). */
const lockOptions = { receiveMode: "peekLock", maxAutoLockRenewalDurationInMs: 0 };

function admin() {
  return new ServiceBusAdministrationClient(adminConnectionString());
}

/** Runs `fn(topic)` on a fresh topic with `subscriptions`, deleted afterwards. */
async function withTopic(what, subscriptions, fn) {
  const client = admin();
  const topic = `js-topic-${what}-${randomBytes(4).toString("hex")}`;
  await client.createTopic(topic);
  try {
    for (const sub of subscriptions) await client.createSubscription(topic, sub);
    return await fn(topic);
  } finally {
    await client.deleteTopic(topic).catch(() => {});
  }
}

test("a message sent to a topic reaches every subscription, each settles its own copy", opts, () =>
  withTopic("fanout", ["s1", "s2"], (topic) =>
    withClient(async (client) => {
      const sender = client.createSender(topic);
      await sender.sendMessages({ body: "hello", messageId: "fan-1", subject: "greeting" });
      for (const sub of ["s1", "s2"]) {
        const receiver = client.createReceiver(topic, sub, lockOptions);
        const [message] = await receiveN(receiver, 1);
        assert.ok(message, `${sub} got a copy`);
        assert.equal(message.body, "hello");
        assert.equal(message.messageId, "fan-1");
        assert.equal(message.subject, "greeting");
        await receiver.completeMessage(message);
        assert.deepEqual(await receiveNone(receiver, 1000), [], `${sub} holds nothing more`);
        await receiver.close();
      }
      // createReceiver(topic, sub) in its two-argument form, as the docs show it.
      await sender.sendMessages({ body: "again" });
      const receiver = client.createReceiver(topic, "s2", { receiveMode: "receiveAndDelete" });
      const [again] = await receiveN(receiver, 1);
      assert.equal(again?.body, "again");
    }),
  ),
);

test("a subscription's dead-letter queue", opts, () =>
  withTopic("dlq", ["s1", "s2"], (topic) =>
    withClient(async (client) => {
      await client.createSender(topic).sendMessages({ body: "doomed", messageId: "dlq-1" });
      const receiver = client.createReceiver(topic, "s1", lockOptions);
      const [message] = await receiveN(receiver, 1);
      assert.ok(message, "s1 got a copy");
      await receiver.deadLetterMessage(message, {
        deadLetterReason: "bad",
        deadLetterErrorDescription: "a test",
      });
      const dlq = client.createReceiver(topic, "s1", {
        subQueueType: "deadLetter",
        receiveMode: "peekLock",
      });
      const [dead] = await receiveN(dlq, 1);
      assert.ok(dead, "the copy is in s1's dead-letter queue");
      assert.equal(dead.body, "doomed");
      assert.equal(dead.deadLetterReason, "bad");
      assert.equal(dead.deadLetterErrorDescription, "a test");
      await dlq.completeMessage(dead);
      // s2's copy was never touched.
      const other = client.createReceiver(topic, "s2", { receiveMode: "receiveAndDelete" });
      const [copy] = await receiveN(other, 1);
      assert.equal(copy?.messageId, "dlq-1");
    }),
  ),
);

test("a receiver on a topic itself is refused", opts, () =>
  withTopic("refused", ["s1"], (topic) =>
    withClient(async (client) => {
      const receiver = client.createReceiver(topic);
      const { error, tookMs } = await timed(() =>
        receiver.receiveMessages(1, { maxWaitTimeInMs: 2000 }),
      );
      assert.ok(error, "receiving from a topic fails");
      assert.ok(tookMs < QUICK_MS, `refused quickly (${tookMs} ms)`);
      assert.match(String(error.message), /subscription/i);
    }),
  ),
);

test("rule manager: createRule, listRules by page, deleteRule", opts, () =>
  withTopic("rules", ["s1"], (topic) =>
    withClient(async (client) => {
      const rules = client.createRuleManager(topic, "s1");
      await rules.createRule(
        "sqlRule",
        { sqlExpression: "color = 'red'" },
        { sqlExpression: "SET priority = 'high'" },
      );
      await rules.createRule("correlationRule", {
        correlationId: "cid",
        subject: "label",
        applicationProperties: { color: "blue" },
      });

      const names = [];
      for await (const page of rules.listRules().byPage({ maxPageSize: 1 })) {
        assert.equal(page.length, 1, "one rule per page");
        names.push(page[0].name);
      }
      assert.deepEqual(names, ["$Default", "correlationRule", "sqlRule"]);

      const all = [];
      for await (const rule of rules.listRules()) all.push(rule);
      const byName = Object.fromEntries(all.map((r) => [r.name, r]));
      assert.equal(byName.$Default.filter.sqlExpression, "1=1");
      assert.equal(byName.sqlRule.filter.sqlExpression, "color = 'red'");
      assert.equal(byName.sqlRule.action.sqlExpression, "SET priority = 'high'");
      assert.equal(byName.correlationRule.filter.correlationId, "cid");
      assert.equal(byName.correlationRule.filter.subject, "label");
      assert.equal(byName.correlationRule.filter.applicationProperties?.color, "blue");
      assert.equal(byName.correlationRule.action.sqlExpression, undefined);

      // In Service Bus's words, which the SDK's own tests match.
      await assert.rejects(
        rules.createRule("sqlRule", { sqlExpression: "1=1" }),
        (e) =>
          e.code === "MessagingEntityAlreadyExists" &&
          /The messaging entity '.*sqlRule' already exists\./.test(e.message),
      );
      await assert.rejects(
        rules.deleteRule("noSuchRule"),
        (e) => e.code === "MessagingEntityNotFound",
      );

      // $Default is an ordinary rule: removed, and re-added as a TrueRuleFilter.
      await rules.deleteRule("$Default");
      await rules.createRule("$Default", { sqlExpression: "1=1" });
      const again = [];
      for await (const rule of rules.listRules()) again.push(rule.name);
      assert.deepEqual(again, ["$Default", "correlationRule", "sqlRule"]);
    }),
  ),
);

test("with every rule removed a message reaches nobody", opts, () =>
  withTopic("norules", ["s1"], (topic) =>
    withClient(async (client) => {
      const rules = client.createRuleManager(topic, "s1");
      const names = [];
      for await (const rule of rules.listRules()) names.push(rule.name);
      assert.deepEqual(names, ["$Default"]);
      await rules.deleteRule("$Default");
      // (Listing an empty rule set is not checked here: @azure/service-bus 7.9.5's listRules
      // throws a TypeError on an empty first page, whatever the broker answers.)

      await client.createSender(topic).sendMessages({ body: "nobody" });
      const receiver = client.createReceiver(topic, "s1", { receiveMode: "receiveAndDelete" });
      assert.deepEqual(await receiveNone(receiver, 1500), []);

      // A True rule again: the next message is routed.
      await rules.createRule("all", { sqlExpression: "1=1" });
      await client.createSender(topic).sendMessages({ body: "somebody" });
      const [message] = await receiveN(receiver, 1);
      assert.equal(message?.body, "somebody");
    }),
  ),
);
