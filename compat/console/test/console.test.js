// The web console in headless Chromium against a real ironbus server: sign in, browse 100
// entities, send, peek with message detail, resubmit a dead letter, purge behind the typed
// confirmation, edit a rule (a bad SQL filter refused where it is), and a Listen-only sign-in
// that cannot send or purge. Screenshots go to screenshots/.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import {
  launchBrowser, pageApi, READER_KEY, ROOT_KEY, screenshotPath, signIn, startServer,
} from '../lib/harness.js';

let server;
let browser;
let page;

before(async () => {
  server = await startServer();
  browser = await launchBrowser();
  const context = await browser.newContext({ viewport: { width: 1366, height: 860 } });
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
  await page.waitForFunction(() => document.querySelectorAll('#entities tbody tr').length === 10);
  await page.fill('#filter', '');
  await page.waitForSelector('#entities tbody tr:nth-child(50)');
  await page.screenshot({ path: screenshotPath('dashboard.png'), fullPage: false });
});
