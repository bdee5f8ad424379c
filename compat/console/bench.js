// A benchmark, not a test: the console's dashboard with 1,000 entities (queues, a tenth of them
// with long names and a message each). Loads the page 10 times in headless Chromium and
// reports, per load, the time from navigation to the table drawn and the API call's share of
// it, and the API call alone from node; median and worst. Env ENTITIES (default 1000), LOADS (10).
import { launchBrowser, pageApi, ROOT_KEY, signIn, startServer, until } from './lib/harness.js';

const ENTITIES = Number(process.env.ENTITIES || 1000);
const LOADS = Number(process.env.LOADS || 10);

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const worst = (xs) => Math.max(...xs);

const server = await startServer(['--max-entities', String(ENTITIES + 10)]);
const browser = await launchBrowser();
try {
  const context = await browser.newContext({ viewport: { width: 1366, height: 860 } });
  const page = await context.newPage();
  await signIn(page, server.console, 'RootManageSharedAccessKey', ROOT_KEY);
  const created = Date.now();
  await page.evaluate(async (n) => {
    const session = await (await fetch('/$console/api/session')).json();
    const headers = { 'Content-Type': 'application/json', 'X-Ironbus-Csrf': session.csrf };
    const post = (url, body) => fetch(url, { method: 'POST', headers, body: JSON.stringify(body) });
    for (let i = 0; i < n; i += 25) {
      await Promise.all(Array.from({ length: Math.min(25, n - i) }, async (_, j) => {
        const k = i + j;
        const path = k % 10 === 0 ? `tenant-${k}/orders/a-long-entity-name-that-will-be-cut-short-${k}` : `queue-${String(k).padStart(4, '0')}`;
        const r = await post('/$console/api/entities', { kind: 'queue', path });
        if (r.status !== 201) throw new Error(`creating ${path}: ${r.status}`);
        if (k % 10 === 0) await post(`/$console/api/messages?path=${encodeURIComponent(path)}`, { body: 'x' });
      }));
    }
  }, ENTITIES);
  console.error(`created ${ENTITIES} entities in ${((Date.now() - created) / 1000).toFixed(1)} s`);
  const cookie = (await context.cookies()).map((c) => `${c.name}=${c.value}`).join('; ');

  const pageMs = [];
  const apiInPageMs = [];
  const apiMs = [];
  for (let i = 0; i < LOADS; i++) {
    const started = Date.now();
    const response = await fetch(`${server.url}/$console/api/entities`, { headers: { cookie } });
    const body = await response.json();
    apiMs.push(Date.now() - started);
    if (body.entities.length !== ENTITIES) throw new Error(`the API listed ${body.entities.length} entities`);

    await page.goto('about:blank');
    await page.goto(server.console);
    await until(page, () => document.querySelectorAll('#entities tbody tr[data-path]').length > 0
      && document.querySelector('main').dataset.loadedMs !== undefined, null, 30_000);
    // From the navigation's start to the table in the page, and the API call within it.
    const timing = await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => resolve({
      drawn: performance.now(),
      api: Number(document.querySelector('main').dataset.loadedMs),
      count: document.querySelector('#count').textContent,
    }))));
    if (!timing.count.startsWith(`${ENTITIES} of`)) throw new Error(`the page shows ${timing.count}`);
    pageMs.push(Math.round(timing.drawn));
    apiInPageMs.push(timing.api);
  }
  const result = {
    entities: ENTITIES,
    loads: LOADS,
    page_load_to_table_ms: { median: median(pageMs), worst: worst(pageMs), all: pageMs },
    api_call_in_page_ms: { median: median(apiInPageMs), worst: worst(apiInPageMs) },
    api_call_from_node_ms: { median: median(apiMs), worst: worst(apiMs) },
    server: process.env.IRONBUS_SERVER || '(debug build)',
  };
  console.log(JSON.stringify(result, null, 2));
} finally {
  await browser.close();
  await server.stop();
}
