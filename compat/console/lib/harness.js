// Starts a real ironbus server (memory store, free ports) and headless Chromium for the
// console's browser tests and benchmark.
//
// The server binary: $IRONBUS_SERVER, else the workspace's debug build
// ($CARGO_TARGET_DIR or target/, then debug/ironbus). Chromium: $CHROMIUM, else /usr/bin/chromium.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, openSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, '..', '..', '..');
export const screenshots = path.resolve(here, '..', 'screenshots');

export const ROOT_KEY = 'console-test-root-key';
export const READER_KEY = 'console-test-reader-key';

function serverBinary() {
  if (process.env.IRONBUS_SERVER) return process.env.IRONBUS_SERVER;
  const target = process.env.CARGO_TARGET_DIR
    ? path.resolve(root, process.env.CARGO_TARGET_DIR)
    : path.join(root, 'target');
  const binary = path.join(target, 'debug', 'ironbus');
  if (!existsSync(binary)) {
    throw new Error(`no server at ${binary}: build it (cargo build -p ironbus) or set IRONBUS_SERVER`);
  }
  return binary;
}

async function freePort() {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  server.close();
  await once(server, 'close');
  return port;
}

/** Starts ironbus; returns { url, stop() }. `extra`: more flags. */
export async function startServer(extra = []) {
  const [amqp, http] = [await freePort(), await freePort()];
  const logPath = path.join(tmpdir(), `ironbus-console-${process.pid}-${http}.log`);
  const log = openSync(logPath, 'w');
  const args = [
    '--store', 'memory',
    '--amqp-addr', `127.0.0.1:${amqp}`,
    '--amqps-addr', 'off',
    '--http-addr', `127.0.0.1:${http}`,
    '--https-addr', 'off',
    '--sas-key', ROOT_KEY,
    '--policy', `reader:${READER_KEY}:Listen`,
    ...(extra.includes('--max-entities') ? [] : ['--max-entities', '2000']),
    ...extra,
  ];
  const child = spawn(serverBinary(), args, { stdio: ['ignore', log, log] });
  let exited = null;
  child.on('exit', (code, signal) => { exited = { code, signal }; });
  const url = `http://127.0.0.1:${http}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (exited) throw new Error(`ironbus exited early (${JSON.stringify(exited)}); log: ${logPath}`);
    try {
      const response = await fetch(`${url}/health`);
      if (response.ok) break;
    } catch (_) { /* not listening yet */ }
    if (Date.now() > deadline) throw new Error(`ironbus did not answer in 30 s; log: ${logPath}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    console: `${url}/$console/`,
    logPath,
    async stop() {
      if (exited) return;
      child.kill('SIGTERM');
      await once(child, 'exit');
    },
  };
}

export async function launchBrowser() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox'],
  });
}

/** Signs in on the console's page. */
export async function signIn(page, consoleUrl, policy, key) {
  await page.goto(consoleUrl);
  await page.fill('#policy', policy);
  await page.fill('#key', key);
  await page.click('button[type=submit]');
  await page.waitForSelector('#sign-out:not([hidden])');
}

/** Calls the console API from inside the page (the session's cookie and CSRF token). */
export async function pageApi(page, method, apiPath, body) {
  return page.evaluate(async ({ method, apiPath, body }) => {
    const session = await (await fetch('/$console/api/session')).json();
    const response = await fetch(`/$console/api/${apiPath}`, {
      method,
      headers: { 'Content-Type': 'application/json', 'X-Ironbus-Csrf': session.csrf },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, body: await response.json() };
  }, { method, apiPath, body });
}

export function screenshotPath(name) {
  mkdirSync(screenshots, { recursive: true });
  return path.join(screenshots, name);
}

/**
 * Waits until `fn` (run in the page) returns something truthy. The console's CSP forbids
 * eval, which Playwright's waitForFunction needs; evaluate does not.
 */
export async function until(page, fn, arg, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await page.evaluate(fn, arg);
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${fn.toString().slice(0, 200)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * While developing the page: with CONSOLE_ASSETS_FROM_SOURCE=1 the context is served the
 * page's files from transport-http/console/ (with the server's headers), so that a change
 * needs no rebuild of the server. Off in the tests' own runs.
 */
export async function serveAssetsFromSource(context) {
  if (!process.env.CONSOLE_ASSETS_FROM_SOURCE) return;
  const { readFile } = await import('node:fs/promises');
  const dir = path.join(root, 'transport-http', 'console');
  const files = { '/$console/': 'index.html', '/$console/app.js': 'app.js', '/$console/style.css': 'style.css' };
  await context.route((url) => Object.hasOwn(files, url.pathname), async (route) => {
    const response = await route.fetch();
    const body = await readFile(path.join(dir, files[new URL(route.request().url()).pathname]));
    await route.fulfill({ response, body });
  });
}
