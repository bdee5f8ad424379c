// The REST data plane with plain fetch (no SDK), and /metrics after the traffic. The full list of
// calls and error codes is in the Python suite's test_rest.py; this checks the same server from a
// second HTTP stack, signing tokens the way the JS admin client does (full URL, lower-cased).

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { test } from "node:test";

import { TEST_TIMEOUT_MS, httpUrl, httpUrls, queue } from "../lib/env.mjs";

const opts = { timeout: TEST_TIMEOUT_MS };

function sas(url, key = "SAS_KEY_VALUE") {
  const sr = encodeURIComponent(url.toLowerCase()).toLowerCase();
  const se = Math.floor(Date.now() / 1000) + 300;
  const sig = encodeURIComponent(createHmac("sha256", key).update(`${sr}\n${se}`).digest("base64"));
  return `SharedAccessSignature sig=${sig}&se=${se}&skn=RootManageSharedAccessKey&sr=${sr}`;
}

async function call(method, path, { body, headers = {} } = {}) {
  const url = httpUrl() + path;
  return fetch(url, { method, body, headers: { Authorization: sas(url), ...headers } });
}

test("REST send, peek-lock, complete, receive-and-delete, errors", opts, async () => {
  const q = queue("rest");
  let r = await call("POST", `/${q}/messages`, {
    body: "from js",
    headers: { BrokerProperties: JSON.stringify({ MessageId: "js-1" }), color: "blue" },
  });
  assert.equal(r.status, 201, await r.text());
  r = await call("POST", `/${q}/messages/head?timeout=10`);
  assert.equal(r.status, 201);
  assert.equal(await r.text(), "from js");
  assert.equal(r.headers.get("color"), '"blue"');
  const props = JSON.parse(r.headers.get("brokerproperties"));
  assert.equal(props.MessageId, "js-1");
  const lock = new URL(r.headers.get("location"));
  assert.equal(lock.pathname, `/${q}/messages/${props.SequenceNumber}/${props.LockToken}`);
  assert.equal((await call("DELETE", lock.pathname)).status, 200);
  assert.equal((await call("DELETE", lock.pathname)).status, 404);
  assert.equal((await call("DELETE", `/${q}/messages/head?timeout=0`)).status, 204);
  assert.equal((await call("POST", "/js-no-such-queue/messages", { body: "x" })).status, 410);
  const url = `${httpUrl()}/${q}/messages`;
  r = await fetch(url, { method: "POST", body: "x", headers: { Authorization: sas(url, "wrong") } });
  assert.equal(r.status, 401);
  r = await call("POST", `/${q}/messages`, { body: "x", headers: { BrokerProperties: "[" } });
  assert.equal(r.status, 400);
  assert.match(await r.text(), /BrokerProperties/);
});

function metricSum(text, name) {
  let total = 0;
  for (const line of text.split("\n")) {
    const match = line.match(/^([a-z_]+)(\{[^}]*\})? (\S+)$/);
    if (match && match[1] === name) total += Number(match[3]);
  }
  return total;
}

// Every server's /metrics, one after the other: in a cluster a message is counted by the node
// that runs its partition, a request by the node it came to (each series has `node`).
async function scrape() {
  const texts = [];
  for (const url of httpUrls()) texts.push(await (await fetch(`${url}/metrics`)).text());
  return texts.join("\n");
}

test("/metrics counters move with traffic", opts, async () => {
  const q = queue("metrics");
  const before = await scrape();
  for (let i = 0; i < 2; i++) {
    assert.equal((await call("POST", `/${q}/messages`, { body: `m${i}` })).status, 201);
    assert.equal((await call("DELETE", `/${q}/messages/head?timeout=5`)).status, 200);
  }
  const after = await scrape();
  for (const name of [
    "ironbus_broker_messages_incoming_total",
    "ironbus_broker_messages_outgoing_total",
    "ironbus_http_requests_total",
  ]) {
    assert.ok(metricSum(after, name) >= metricSum(before, name) + 2, name);
  }
  // (a cluster node's series carry `node` first).
  assert.match(
    after,
    /ironbus_http_request_duration_seconds_bucket\{(node="[^"]*",)?operation="send",le="0.001"\}/,
  );
});
