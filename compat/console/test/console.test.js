// The web console in headless Chromium against a real ironbus server: sign in, browse 100
// entities, send, peek with message detail, resubmit a dead letter, purge behind the typed
// confirmation, edit a rule (a bad SQL filter refused where it is), and a Listen-only sign-in
// that cannot send or purge. Screenshots go to screenshots/.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import {
  launchBrowser, pageApi, READER_KEY, ROOT_KEY, screenshotPath, serveAssetsFromSource, signIn,
  startServer, until,
} from '../lib/harness.js';

let server;
let browser;
let page;

before(async () => {
  server = await startServer();
  browser = await launchBrowser();
  const context = await browser.newContext({ viewport: { width: 1366, height: 860 } });
  await serveAssetsFromSource(context);
  page = await context.newPage();
  page.on('pageerror', (err) => { throw err; });
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
});

test('a wrong key is refused on the sign-in page', async () => {
  await page.goto(server.console);
  await page.fill('#policy', 'RootManageSharedAccessKey');
  await page.fill('#key', 'not-the-key');
  await page.click('button[type=submit]');
  await page.waitForSelector('.field-error:has-text("wrong")');
  await page.screenshot({ path: screenshotPath('sign-in.png') });
});

test('sign in and browse 100 entities', async () => {
  await signIn(page, server.console, 'RootManageSharedAccessKey', ROOT_KEY);
  for (let i = 0; i < 100; i++) {
    const name = i % 10 === 0
      ? `orders/region-${String(i).padStart(3, '0')}/a-very-long-entity-name-that-does-not-fit-in-its-column-${i}`
      : `queue-${String(i).padStart(3, '0')}`;
    const r = await pageApi(page, 'POST', 'entities', { kind: 'queue', path: name });
    assert.equal(r.status, 201, JSON.stringify(r.body));
  }
  const topic = await pageApi(page, 'POST', 'entities', { kind: 'topic', path: 'events' });
  assert.equal(topic.status, 201);
  const sub = await pageApi(page, 'POST', 'entities', { kind: 'subscription', path: 'events/Subscriptions/audit' });
  assert.equal(sub.status, 201);
  await page.goto(server.console);
  await page.waitForSelector('#entities tbody tr[data-path]');
  assert.equal(await page.locator('#entities tbody tr').count(), 50);
  assert.match(await page.textContent('#count'), /^102 of 102$/);
  await page.click('button:has-text("Next")');
  assert.match(await page.textContent('#page'), /Page 2 of 3/);
  await page.fill('#filter', 'region');
  await until(page, () => document.querySelectorAll('#entities tbody tr').length === 10);
  await page.fill('#filter', '');
  await page.waitForSelector('#entities tbody tr:nth-child(50)');
  // Messages sent between two refreshes show as a rate in (nothing received: 0 out).
  for (let i = 0; i < 20; i++) {
    const sent = await pageApi(page, 'POST', 'messages?path=queue-003', { body: `m${i}` });
    assert.equal(sent.status, 201, JSON.stringify(sent.body));
  }
  const rate = await until(page, () => {
    const cell = document.querySelector('#entities tr[data-path="queue-003"] td[title^="Messages in"]');
    return cell && /^[1-9][0-9.,]* \/ 0$/.test(cell.textContent) && cell.textContent;
  }, null, 15_000);
  assert.match(rate, /^[0-9.,]+ \/ 0$/);
  await page.screenshot({ path: screenshotPath('dashboard.png'), fullPage: false });
});

test('send, peek and see a message in detail', async () => {
  await page.goto(`${server.console}#/entity/queue-001`);
  await page.click('#tab-send');
  await page.fill('#send-body', '{"order": 42, "items": ["a", "b"]}');
  await page.fill('#send-subject', 'order-created');
  await page.fill('#send-message-id', 'order-42');
  await page.fill('#send-props', 'region=eu\npriority=3');
  await page.click('#send-form button[type=submit]');
  await page.waitForSelector('#toast div:has-text("Sent 1 message")');
  await page.click('#tab-messages');
  await page.waitForSelector('#messages-main tbody tr[data-seq]');
  await until(page, () => document.querySelector('#count-active').textContent === '1');
  await page.click('#messages-main tbody tr[data-seq] button');
  await page.waitForSelector('#message-detail');
  const detail = await page.textContent('#message-detail');
  assert.match(detail, /order-42/);
  assert.match(detail, /order-created/);
  assert.match(await page.textContent('#app-props'), /region\s*eu \(string\)/);
  assert.match(await page.textContent('#body-view'), /"order": 42/);
  assert.doesNotMatch(await page.textContent('main > div:first-of-type'), /null|undefined|NaN/);
  await page.screenshot({ path: screenshotPath('entity.png') });
  await page.click('#body-hex');
  assert.match(await page.textContent('#body-view'), /^00000000  7b 22 6f 72/);
  await page.click('#body-text');
  await page.click('#body-json');
  await page.locator('#message-detail').screenshot({ path: screenshotPath('message-detail.png') });
});

test('resubmit a dead letter and purge behind the typed confirmation', async () => {
  // A queue whose messages dead-letter on expiry: one with a 1 s time to live.
  const created = await pageApi(page, 'POST', 'entities', { kind: 'queue', path: 'retry' });
  assert.equal(created.status, 201);
  const edited = await pageApi(page, 'PUT', 'entity?path=retry', { deadLetteringOnMessageExpiration: true });
  assert.equal(edited.status, 200, JSON.stringify(edited.body));
  for (const body of ['first', 'second']) {
    const r = await pageApi(page, 'POST', 'messages?path=retry', { body, messageId: `dead-${body}`, timeToLive: 1 });
    assert.equal(r.status, 201);
  }
  await page.goto(`${server.console}#/entity/retry?tab=deadletter`);
  await until(page, async () => {
    // Expired messages move to the dead-letter queue when the partition next looks at them.
    const r = await fetch('/$console/api/messages?path=retry&queue=deadletter');
    return (await r.json()).messages.length === 2;
  }, null, 20_000);
  await page.click('#tab-deadletter');
  await page.waitForSelector('#messages-deadletter tbody tr[data-seq]');
  assert.equal(await page.locator('#messages-deadletter tbody tr[data-seq]').count(), 2);
  assert.match(await page.textContent('#messages-deadletter'), /TTLExpiredException/);
  // Resubmit the first, removing it from the dead-letter queue.
  await page.locator('#messages-deadletter tbody tr[data-seq] input[type=checkbox]').first().check();
  await page.click('#resubmit');
  await page.waitForSelector('#toast div:has-text("Resubmitted 1 to retry, removed 1")');
  await until(page, () => document.querySelectorAll('#messages-deadletter tbody tr[data-seq]').length === 1);
  const active = await pageApi(page, 'GET', 'messages?path=retry');
  assert.deepEqual(active.body.messages.map((m) => m.properties.messageId), ['dead-first']);
  // Purge the rest: the button asks for the entity's name, typed.
  await page.click('#purge-deadletter');
  await page.waitForSelector('#confirm[open]');
  assert.equal(await page.isDisabled('#confirm-ok'), true);
  await page.fill('#confirm-input', 'retr');
  assert.equal(await page.isDisabled('#confirm-ok'), true);
  await page.screenshot({ path: screenshotPath('purge-confirmation.png') });
  await page.fill('#confirm-input', 'retry');
  await page.click('#confirm-ok');
  await page.waitForSelector('#toast div:has-text("Purged 1 messages")');
  const dead = await pageApi(page, 'GET', 'messages?path=retry&queue=deadletter');
  assert.equal(dead.body.messages.length, 0);
});

test('edit a rule: a bad SQL filter is refused where it is', async () => {
  await page.goto(`${server.console}#/entity/${encodeURIComponent('events/Subscriptions/audit')}?tab=rules`);
  await page.waitForSelector('#rules tr[data-rule="$Default"]');
  await page.click('#rules tr[data-rule="$Default"] button:has-text("Edit")');
  await page.fill('#rule-sql', "region = 'eu' AND");
  await page.click('#rule-form button[type=submit]');
  await page.waitForSelector('#rule-sql-error:has-text("Line 1")');
  assert.match(await page.textContent('#rule-sql-error'), /syntax error/);
  assert.equal(await page.getAttribute('#rule-sql', 'aria-invalid'), 'true');
  await page.screenshot({ path: screenshotPath('rule-error.png') });
  await page.fill('#rule-sql', "region = 'eu'");
  await page.fill('#rule-action', 'SET seen = 1');
  await page.click('#rule-form button[type=submit]');
  await page.waitForSelector('#toast div:has-text("Saved rule $Default")');
  await page.waitForSelector('#rules tr[data-rule="$Default"]:has-text("region = \'eu\'")');
});

test('scheduled messages are cancelled; sessions show their state; partitions their counts', async () => {
  await page.goto(`${server.console}#/entity/queue-002?tab=send`);
  await page.fill('#send-body', 'later');
  await page.fill('#send-scheduled', '2030-01-01T00:00:00Z');
  await page.click('#send-form button[type=submit]');
  await page.waitForSelector('#toast div:has-text("Sent 1 message")');
  await page.click('#tab-scheduled');
  await page.waitForSelector('#scheduled tbody tr:has-text("2030-01-01T00:00:00")');
  await page.click('#scheduled button:has-text("Cancel")');
  await page.waitForSelector('#scheduled td:has-text("No scheduled messages.")');

  const created = await pageApi(page, 'POST', 'entities', { kind: 'queue', path: 'carts', requiresSession: true });
  assert.equal(created.status, 201);
  const sent = await pageApi(page, 'POST', 'messages?path=carts', { body: 'item', sessionId: 'cart-7' });
  assert.equal(sent.status, 201);
  await page.goto(`${server.console}#/entity/carts?tab=sessions`);
  await page.waitForSelector('#sessions tbody tr:has-text("cart-7")');
  await page.click('#sessions tr[data-session="cart-7"] button:has-text("Edit")');
  await page.fill('#session-state', 'checkout step 2');
  await page.click('#session-form button[type=submit]');
  await page.waitForSelector('#sessions tr[data-session="cart-7"]:has-text("checkout step 2")');

  const wide = await pageApi(page, 'POST', 'entities', { kind: 'queue', path: 'wide', enablePartitioning: true });
  assert.equal(wide.status, 201);
  await page.goto(`${server.console}#/entity/wide`);
  await page.waitForSelector('#partitions summary:has-text("16 of 16 available")');
  await page.click('#partitions summary');
  assert.equal(await page.locator('#partitions tbody tr').count(), 16);
});

test('a Listen-only sign-in cannot send or purge', async () => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  await serveAssetsFromSource(context);
  const reader = await context.newPage();
  await signIn(reader, server.console, 'reader', READER_KEY);
  assert.match(await reader.textContent('#who'), /reader \(Listen\)/);
  await reader.waitForSelector('#entities tbody tr[data-path]');
  await reader.goto(`${server.console}#/entity/queue-001`);
  await reader.waitForSelector('#messages-main tbody tr[data-seq]');
  assert.equal(await reader.locator('#purge-active').count(), 0);
  await reader.click('#tab-send');
  await reader.waitForSelector('#no-send');
  // The API refuses it as well, whatever the page shows.
  const sent = await pageApi(reader, 'POST', 'messages?path=queue-001', { body: 'x' });
  assert.equal(sent.status, 403);
  assert.equal(sent.body.needs, 'Send');
  const purged = await pageApi(reader, 'POST', 'purge?path=queue-001', { queue: 'active' });
  assert.equal(purged.status, 403);
  assert.equal(purged.body.needs, 'Manage');
  const peeked = await pageApi(reader, 'GET', 'messages?path=queue-001');
  assert.equal(peeked.body.messages.length, 1);
  await context.close();
});

test('the pages fit a phone', async () => {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
  await serveAssetsFromSource(context);
  const phone = await context.newPage();
  await signIn(phone, server.console, 'RootManageSharedAccessKey', ROOT_KEY);
  await phone.waitForSelector('#entities tbody tr[data-path]');
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the dashboard is ${overflow}px wider than the phone`);
  await phone.screenshot({ path: screenshotPath('phone-dashboard.png') });
  await phone.goto(`${server.console}#/entity/queue-001`);
  await phone.waitForSelector('#messages-main tbody tr[data-seq]');
  await phone.click('#messages-main tbody tr[data-seq] button');
  await phone.waitForSelector('#message-detail');
  const wide = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(wide <= 0, `the entity page is ${wide}px wider than the phone`);
  await phone.screenshot({ path: screenshotPath('phone-entity.png'), fullPage: true });
  await context.close();
});

test('the keyboard reaches the sign-out, the filter and the entity links', async () => {
  await page.goto(server.console);
  await page.waitForSelector('#entities tbody tr[data-path]');
  const seen = [];
  for (let i = 0; i < 8; i++) {
    await page.keyboard.press('Tab');
    seen.push(await page.evaluate(() => {
      const el = document.activeElement;
      return `${el.tagName.toLowerCase()}${el.id ? `#${el.id}` : ''}`;
    }));
  }
  assert.ok(seen.includes('button#sign-out'), seen.join(' '));
  assert.ok(seen.includes('input#filter'), seen.join(' '));
  assert.ok(seen.includes('a'), seen.join(' '));
});
