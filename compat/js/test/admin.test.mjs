// The official ServiceBusAdministrationClient (ATOM over HTTPS, trusting ironbus's development
// CA through NODE_EXTRA_CA_CERTS) against ironbus: queue create / get / update / list / delete,
// partitioned and not, runtime properties while messages are queued, the namespace, and the
// limited availability status of a queue whose partition is down.
//
// Each test creates its own queues (`js-admin-<what>-<random>`) and deletes them.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";

import { ServiceBusAdministrationClient } from "@azure/service-bus";

import {
  TEST_TIMEOUT_MS,
  adminConnectionString,
  httpUrl,
  httpUrls,
  sleep,
  withClient,
} from "../lib/env.mjs";

const opts = { timeout: TEST_TIMEOUT_MS };

function fresh(what) {
  return `js-admin-${what}-${randomBytes(4).toString("hex")}`;
}

function admin() {
  return new ServiceBusAdministrationClient(adminConnectionString());
}

test("queue lifecycle: create, get, update, list, delete", opts, async () => {
  const client = admin();
  const name = fresh("life");
  const created = await client.createQueue(name, { maxDeliveryCount: 5, lockDuration: "PT30S" });
  assert.equal(created.name, name);
  assert.equal(created.maxDeliveryCount, 5);
  assert.equal(created.lockDuration, "PT30S");
  assert.equal(created.enablePartitioning, false);

  await assert.rejects(client.createQueue(name), (e) => e.code === "MessageEntityAlreadyExistsError");

  const props = await client.getQueue(name);
  assert.equal(props.status, "Active");
  props.maxDeliveryCount = 7;
  await client.updateQueue(props);
  const updated = await client.getQueue(name);
  assert.equal(updated.maxDeliveryCount, 7);
  assert.equal(updated.lockDuration, "PT30S");

  const names = [];
  for await (const queue of client.listQueues()) names.push(queue.name);
  assert.ok(names.includes(name), `${name} listed`);
  assert.ok(names.includes("js-send-single"), "declared queues listed");
  // Paging by hand: one per page, every queue exactly once.
  const paged = [];
  for await (const page of client.listQueues().byPage({ maxPageSize: 7 })) {
    assert.ok(page.length <= 7);
    paged.push(...page.map((q) => q.name));
  }
  assert.deepEqual([...paged].sort(), [...names].sort());

  assert.equal(await client.queueExists(name), true);
  await client.deleteQueue(name);
  assert.equal(await client.queueExists(name), false);
  await assert.rejects(client.getQueue(name), (e) => e.code === "MessageEntityNotFoundError");
  await assert.rejects(client.deleteQueue(name), (e) => e.code === "MessageEntityNotFoundError");
});

test("missing and existing entities are answered in Service Bus's words", opts, async () => {
  const client = admin();
  const name = fresh("words");
  await assert.rejects(
    client.deleteQueue(name),
    (e) =>
      e.code === "MessageEntityNotFoundError" &&
      e.message.includes(`:Queue:${name}' could not be found.`) &&
      e.message.includes("TrackingId:"),
  );
  await client.createQueue(name);
  await assert.rejects(
    client.createQueue(name),
    (e) =>
      e.code === "MessageEntityAlreadyExistsError" &&
      e.message.includes(`:Queue:${name}' already exists.`) &&
      e.message.includes("SubCode=40900"),
  );
  await client.deleteQueue(name);
});

test("a partitioned queue reports its 16 partitions' size and keeps it through updates", opts, async () => {
  const client = admin();
  const name = fresh("psize");
  const created = await client.createQueue(name, {
    enablePartitioning: true,
    maxSizeInMegabytes: 1024,
  });
  assert.equal(created.maxSizeInMegabytes, 16384);
  const props = await client.getQueue(name);
  assert.equal(props.maxSizeInMegabytes, 16384);
  props.maxDeliveryCount = 4;
  const updated = await client.updateQueue(props);
  assert.equal(updated.maxSizeInMegabytes, 16384);
  assert.equal((await client.getQueue(name)).maxSizeInMegabytes, 16384);
  await client.deleteQueue(name);
});

test("forward targets read back as sb:// addresses", opts, async () => {
  const client = admin();
  const destination = fresh("fwd-dest");
  const source = fresh("fwd-src");
  await client.createQueue(destination);
  try {
    const created = await client.createQueue(source, {
      forwardTo: destination,
      forwardDeadLetteredMessagesTo: destination,
    });
    for (const props of [created, await client.getQueue(source)]) {
      for (const target of [props.forwardTo, props.forwardDeadLetteredMessagesTo]) {
        assert.match(target, /^sb:\/\/[^/]+\//, target);
        assert.ok(target.endsWith(`/${destination}`), target);
      }
    }
    // Sent back as read, the targets stay.
    const props = await client.getQueue(source);
    props.maxDeliveryCount = 3;
    await client.updateQueue(props);
    assert.ok((await client.getQueue(source)).forwardTo.endsWith(`/${destination}`));
  } finally {
    await client.deleteQueue(source).catch(() => {});
    await client.deleteQueue(destination);
  }
});

test("the namespace root answers 200", opts, async () => {
  const root = await fetch(`${httpUrl()}/`);
  assert.equal(root.status, 200);
  const body = await root.text();
  assert.ok(body.includes("<feed"), body);
});

test("partitioned queue keeps partitioning through updates", opts, async () => {
  const client = admin();
  const name = fresh("part");
  const created = await client.createQueue(name, { enablePartitioning: true });
  assert.equal(created.enablePartitioning, true);
  const props = await client.getQueue(name);
  props.maxDeliveryCount = 3;
  await client.updateQueue(props);
  assert.equal((await client.getQueue(name)).enablePartitioning, true);
  props.enablePartitioning = false;
  await assert.rejects(client.updateQueue(props), (e) => e.statusCode === 400);
  await client.deleteQueue(name);
});

test("runtime properties count queued messages", opts, async () => {
  const client = admin();
  const name = fresh("runtime");
  await client.createQueue(name);
  await withClient(async (sb) => {
    const sender = sb.createSender(name);
    await sender.sendMessages([{ body: "a" }, { body: "b" }, { body: "c" }]);
    await sender.close();
  });
  const runtime = await client.getQueueRuntimeProperties(name);
  assert.equal(runtime.name, name);
  assert.equal(runtime.activeMessageCount, 3);
  assert.equal(runtime.totalMessageCount, 3);
  assert.equal(runtime.deadLetterMessageCount, 0);
  assert.ok(runtime.sizeInBytes > 0);
  assert.ok(runtime.createdAt instanceof Date);
  const namespace = await client.getNamespaceProperties();
  assert.equal(namespace.messagingSku, "Standard");
  await client.deleteQueue(name);
});

test("limited status while a partition is unavailable", opts, async () => {
  const client = admin();
  const name = fresh("limited");
  await client.createQueue(name, { enablePartitioning: true });
  assert.equal((await client.getQueue(name)).availabilityStatus, "Available");
  // On every server: in a cluster only the node that runs the partition holds its store.
  const fault = async (available) => {
    for (const base of httpUrls()) {
      const url = `${base}/$ironbus/faults?entity=${name}&partition=5&available=${available}`;
      const response = await fetch(url, { method: "POST" });
      assert.equal(response.status, 200, await response.text());
    }
  };
  await fault(false);
  try {
    assert.equal((await client.getQueue(name)).availabilityStatus, "Limited");
    const health = await fetch(`${httpUrl()}/health`);
    assert.equal(health.status, 503);
    const body = await health.json();
    assert.ok(body.limited_entities.some((e) => e.name === name));
  } finally {
    await fault(true);
  }
  const deadline = Date.now() + 15000;
  while ((await client.getQueue(name)).availabilityStatus !== "Available") {
    assert.ok(Date.now() < deadline, "the partition never came back");
    await sleep(200);
  }
  await client.deleteQueue(name);
});
