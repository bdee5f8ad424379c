// ironbus console: a hand-written single-page app over the console's JSON API
// (/$console/api/). No framework, no build step. Every value from the server is put in the
// page as text (textContent, attributes), never parsed as HTML.
'use strict';

const API = '/$console/api/';
const PAGE_SIZE = 50;
const REFRESH_MS = 5000;

const state = {
  session: null, // { policy, rights, csrf, namespace }
  timer: null,
  entities: [],
  previous: null, // { at, totals: Map(path -> [incoming, outgoing]) } for message rates
  rates: new Map(),
  filter: '',
  kind: '',
  page: 0,
};

// ---- small helpers ----

/** Builds an element: h('a', { href: '#/' }, 'text', child). */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const $ = (id) => document.getElementById(id);
const can = (right) => !!state.session && state.session.rights.includes(right);
const fmt = (n) => (n === undefined || n === null ? '–' : Number(n).toLocaleString('en-US'));
function bytes(n) {
  if (n === undefined || n === null) return '–';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}
function seconds(s) {
  if (s === null) return 'never';
  return `${s} s`;
}

function toast(text, isError) {
  const el = h('div', { class: isError ? 'error' : '' }, text);
  $('toast').append(el);
  setTimeout(() => el.remove(), isError ? 8000 : 4000);
}

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

async function api(method, path, body) {
  const headers = {};
  if (method !== 'GET') {
    headers['Content-Type'] = 'application/json';
    if (state.session) headers['X-Ironbus-Csrf'] = state.session.csrf;
  }
  const response = await fetch(API + path, {
    method,
    headers,
    credentials: 'same-origin',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  try { data = await response.json(); } catch (_) { data = null; }
  if (!response.ok) {
    if (response.status === 401 && path !== 'session') {
      state.session = null;
      render();
    }
    throw new ApiError(response.status, data);
  }
  return data;
}

const q = (params) => Object.entries(params)
  .filter(([, v]) => v !== undefined && v !== null && v !== '')
  .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&');

function entityHref(path) { return `#/entity/${encodeURIComponent(path)}`; }

/** Asks the person to type `word` before `action` runs. */
function confirmTyped(text, word) {
  return new Promise((resolve) => {
    const dialog = $('confirm');
    const input = $('confirm-input');
    const ok = $('confirm-ok');
    $('confirm-text').textContent = text;
    $('confirm-word').textContent = word;
    input.value = '';
    ok.disabled = true;
    input.oninput = () => { ok.disabled = input.value !== word; };
    $('confirm-cancel').onclick = () => dialog.close('cancel');
    $('confirm-form').onsubmit = (e) => {
      e.preventDefault();
      if (input.value === word) dialog.close('ok');
    };
    dialog.onclose = () => resolve(dialog.returnValue === 'ok');
    dialog.returnValue = '';
    dialog.showModal();
    input.focus();
  });
}

// ---- routing ----

window.addEventListener('hashchange', () => render());
document.addEventListener('DOMContentLoaded', start);

async function start() {
  $('sign-out').addEventListener('click', signOut);
  try {
    state.session = await api('GET', 'session');
  } catch (_) {
    state.session = null;
  }
  render();
}

function stopTimer() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
}

function render() {
  stopTimer();
  const main = $('main');
  main.replaceChildren();
  $('who').textContent = state.session ? `${state.session.policy} (${state.session.rights.join(', ')})` : '';
  $('sign-out').hidden = !state.session;
  $('namespace').textContent = state.session ? state.session.namespace : '';
  if (!state.session) {
    $('health').hidden = true;
    renderSignIn(main);
    return;
  }
  const [hash, query] = (location.hash || '#/').split('?');
  if (hash.startsWith('#/entity/')) {
    renderEntity(main, decodeURIComponent(hash.slice('#/entity/'.length)), new URLSearchParams(query || '').get('tab'));
  } else {
    renderDashboard(main);
  }
}

// ---- sign-in ----

function renderSignIn(main) {
  const policy = h('input', { id: 'policy', name: 'policy', autocomplete: 'username', required: true, value: 'RootManageSharedAccessKey' });
  const key = h('input', { id: 'key', name: 'key', type: 'password', autocomplete: 'current-password', required: true });
  const error = h('p', { class: 'field-error', role: 'alert' });
  const form = h('form', { class: 'panel signin', 'aria-labelledby': 'signin-title' },
    h('h1', { id: 'signin-title' }, 'Sign in'),
    h('p', { class: 'muted' }, 'Use a shared access policy of this namespace: its name and key. What you can do follows its rights (Listen, Send, Manage).'),
    h('label', { for: 'policy' }, 'Policy name'), policy,
    h('label', { for: 'key' }, 'Key'), key,
    error,
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Sign in')));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.textContent = '';
    try {
      state.session = await api('POST', 'session', { policy: policy.value, key: key.value });
      render();
    } catch (err) {
      error.textContent = err.message;
      key.focus();
    }
  });
  main.append(form);
  (policy.value ? key : policy).focus();
}

async function signOut() {
  try { await api('DELETE', 'session'); } catch (_) { /* signed out either way */ }
  state.session = null;
  location.hash = '#/';
  render();
}

// ---- dashboard ----

function renderDashboard(main) {
  const search = h('input', { type: 'search', id: 'filter', placeholder: 'Filter by name', value: state.filter, 'aria-label': 'Filter entities by name' });
  const kind = h('select', { id: 'kind', 'aria-label': 'Kind' },
    ['', 'queue', 'topic', 'subscription'].map((k) => h('option', { value: k, selected: state.kind === k }, k ? `${k}s` : 'All kinds')));
  const auto = h('input', { type: 'checkbox', id: 'auto', checked: true });
  const count = h('span', { class: 'muted', id: 'count' });
  const table = h('div', { class: 'table-wrap' });
  const pager = h('div', { class: 'pager' });
  main.append(
    h('h1', {}, 'Entities'),
    h('div', { class: 'toolbar' }, search, kind,
      h('label', { class: 'inline', for: 'auto' }, auto, 'Live'),
      h('button', { type: 'button', onclick: () => load() }, 'Refresh'), count),
    table, pager);
  if (can('Manage')) main.append(createForm(() => load()));
  if (!can('Listen')) {
    table.replaceWith(noListen());
    return;
  }
  const draw = () => drawTable(table, pager, count);
  search.addEventListener('input', () => { state.filter = search.value; state.page = 0; draw(); });
  kind.addEventListener('change', () => { state.kind = kind.value; state.page = 0; draw(); });
  async function load() {
    try {
      const started = performance.now();
      const data = await api('GET', 'entities');
      sample(data.entities);
      state.entities = data.entities;
      showHealth(data.health, data.limitedEntities);
      draw();
      main.dataset.loadedMs = String(Math.round(performance.now() - started));
    } catch (err) {
      if (err.status !== 401) table.replaceChildren(h('p', { class: 'error', role: 'alert' }, err.message));
    }
  }
  auto.addEventListener('change', () => { stopTimer(); if (auto.checked) state.timer = setInterval(load, REFRESH_MS); });
  state.timer = setInterval(load, REFRESH_MS);
  load();
}

function noListen() {
  const path = h('input', { id: 'open-path', placeholder: 'queue or topic name' });
  const form = h('form', { class: 'panel' },
    h('p', { class: 'notice' }, `Policy ${state.session.policy} has no Listen right, so it cannot list entities or read counts. Open an entity by name to send to it.`),
    h('label', { for: 'open-path' }, 'Entity'), path,
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Open')));
  form.addEventListener('submit', (e) => { e.preventDefault(); if (path.value) location.hash = entityHref(path.value.trim()); });
  return form;
}

/**
 * Messages in and out per second of each entity since the last load, from the broker's totals
 * (messages accepted, messages handed to receivers). A total that went down means the entity's
 * partitions restarted: no rate until the next load.
 */
function sample(entities) {
  const now = performance.now();
  const totals = new Map(entities.filter((e) => e.counts).map((e) => [e.path, [e.counts.incoming, e.counts.outgoing]]));
  if (state.previous && now > state.previous.at) {
    const dt = (now - state.previous.at) / 1000;
    for (const [path, [incoming, outgoing]] of totals) {
      const before = state.previous.totals.get(path);
      if (before && incoming >= before[0] && outgoing >= before[1]) {
        state.rates.set(path, [(incoming - before[0]) / dt, (outgoing - before[1]) / dt]);
      } else {
        state.rates.delete(path);
      }
    }
  }
  state.previous = { at: now, totals };
}

function showHealth(health, limited) {
  const badge = $('health');
  badge.hidden = false;
  badge.textContent = health === 'Available' ? 'Healthy' : `Limited: ${limited} entities`;
  badge.className = `badge ${health === 'Available' ? 'ok' : 'bad'}`;
}

function rateText(path) {
  const r = state.rates.get(path);
  if (r === undefined) return '–';
  const one = (x) => (x < 0.05 ? '0' : x < 100 ? x.toFixed(1) : fmt(Math.round(x)));
  return `${one(r[0])} / ${one(r[1])}`;
}

function drawTable(wrap, pager, count) {
  const needle = state.filter.trim().toLowerCase();
  const rows = state.entities.filter((e) => (!state.kind || e.kind === state.kind) && (!needle || e.path.toLowerCase().includes(needle)));
  const pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
  state.page = Math.min(state.page, pages - 1);
  const shown = rows.slice(state.page * PAGE_SIZE, (state.page + 1) * PAGE_SIZE);
  count.textContent = `${rows.length} of ${state.entities.length}`;
  const body = h('tbody', {}, shown.map((e) => {
    const c = e.counts || {};
    const limited = e.availability !== 'Available';
    return h('tr', { 'data-path': e.path },
      h('td', { class: 'name', title: e.path }, h('a', { href: entityHref(e.path) }, e.path)),
      h('td', { class: 'hide-narrow' }, e.kind),
      h('td', { class: 'hide-narrow' }, h('span', { class: `badge ${e.status === 'Active' ? '' : 'warn'}` }, e.status)),
      h('td', { class: 'num' }, fmt(c.active)),
      h('td', { class: 'num' }, fmt(c.deadLetter)),
      h('td', { class: 'num hide-narrow' }, fmt(c.scheduled)),
      h('td', { class: 'num hide-narrow' }, fmt(c.transfer)),
      h('td', { class: 'num hide-narrow' }, bytes(e.sizeBytes)),
      h('td', { class: 'num hide-narrow', title: 'Messages in / out per second since the last refresh' }, rateText(e.path)),
      h('td', { class: 'num hide-narrow', title: limited ? `Unavailable partitions: ${(e.unavailablePartitions || []).join(', ')}` : 'Every partition answers' },
        h('span', { class: `badge ${limited ? 'bad' : 'ok'}` }, e.partitions ? `${e.partitions - (e.unavailablePartitions || []).length}/${e.partitions}` : (limited ? 'down' : 'up'))));
  }));
  const table = h('table', { id: 'entities' },
    h('colgroup', {}, h('col', { class: 'c-name' }), h('col', { class: 'c-kind hide-narrow' }), h('col', { class: 'c-status hide-narrow' }),
      h('col', { class: 'c-n' }), h('col', { class: 'c-n' }), h('col', { class: 'c-n hide-narrow' }), h('col', { class: 'c-n hide-narrow' }),
      h('col', { class: 'c-n hide-narrow' }), h('col', { class: 'c-n hide-narrow' }), h('col', { class: 'c-part hide-narrow' })),
    h('thead', {}, h('tr', {},
      h('th', { scope: 'col' }, 'Name'), h('th', { scope: 'col', class: 'hide-narrow' }, 'Kind'), h('th', { scope: 'col', class: 'hide-narrow' }, 'Status'),
      h('th', { scope: 'col', class: 'num' }, 'Active'), h('th', { scope: 'col', class: 'num' }, 'Dead'),
      h('th', { scope: 'col', class: 'num hide-narrow' }, 'Sched.'), h('th', { scope: 'col', class: 'num hide-narrow' }, 'Transfer'),
      h('th', { scope: 'col', class: 'num hide-narrow' }, 'Size'), h('th', { scope: 'col', class: 'num hide-narrow', title: 'Messages in / out per second' }, 'In / out per s'),
      h('th', { scope: 'col', class: 'num hide-narrow' }, 'Partitions'))),
    body);
  if (!shown.length) body.append(h('tr', {}, h('td', { colspan: 10, class: 'muted' }, state.entities.length ? 'No entity matches the filter.' : 'No entities yet.')));
  wrap.replaceChildren(table);
  const prev = h('button', { type: 'button', disabled: state.page === 0, onclick: () => { state.page--; drawTable(wrap, pager, count); } }, 'Previous');
  const next = h('button', { type: 'button', disabled: state.page >= pages - 1, onclick: () => { state.page++; drawTable(wrap, pager, count); } }, 'Next');
  pager.replaceChildren(prev, h('span', { class: 'muted', id: 'page' }, `Page ${state.page + 1} of ${pages}`), next);
}

function createForm(done) {
  const kind = h('select', { id: 'new-kind' }, ['queue', 'topic', 'subscription'].map((k) => h('option', { value: k }, k)));
  const path = h('input', { id: 'new-path', required: true, placeholder: 'orders, or topic/Subscriptions/name' });
  const session = h('input', { type: 'checkbox', id: 'new-session' });
  const dup = h('input', { type: 'checkbox', id: 'new-dup' });
  const error = h('p', { class: 'field-error', role: 'alert' });
  const form = h('form', { class: 'panel' }, h('h2', {}, 'Create an entity'),
    h('div', { class: 'form-grid' },
      h('div', {}, h('label', { for: 'new-kind' }, 'Kind'), kind),
      h('div', {}, h('label', { for: 'new-path' }, 'Path'), path)),
    h('label', { class: 'inline', for: 'new-session' }, session, 'Requires session'),
    h('label', { class: 'inline', for: 'new-dup' }, dup, 'Duplicate detection'),
    error,
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Create')));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.textContent = '';
    try {
      await api('POST', 'entities', { kind: kind.value, path: path.value, requiresSession: session.checked, requiresDuplicateDetection: dup.checked });
      toast(`Created ${path.value}`);
      path.value = '';
      done();
    } catch (err) { error.textContent = err.message; }
  });
  return form;
}

// ---- entity page ----

const TABS = [
  ['messages', 'Messages', (e) => e.kind !== 'topic'],
  ['deadletter', 'Dead letters', (e) => e.kind !== 'topic'],
  ['send', 'Send', (e) => e.kind !== 'subscription'],
  ['scheduled', 'Scheduled', (e) => e.kind !== 'subscription'],
  ['sessions', 'Sessions', (e) => e.requiresSession],
  ['rules', 'Rules', (e) => e.kind === 'subscription'],
  ['subscriptions', 'Subscriptions', (e) => e.kind === 'topic'],
  ['properties', 'Properties', () => true],
];

async function renderEntity(main, path, current) {
  const head = h('div', {});
  const tabs = h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Entity views' });
  const panel = h('section', { class: 'panel', id: 'tab-panel', role: 'tabpanel' });
  main.append(h('p', {}, h('a', { href: '#/' }, '← Entities')), head, tabs, panel);
  let entity = { path, kind: path.includes('/Subscriptions/') ? 'subscription' : 'queue' };
  async function refresh() {
    if (!can('Listen')) {
      head.replaceChildren(h('h1', {}, path), h('p', { class: 'notice' }, 'No Listen right: counts and messages are hidden.'));
      return;
    }
    try {
      entity = await api('GET', `entity?${q({ path })}`);
      drawHead(head, entity);
    } catch (err) {
      if (err.status !== 401) head.replaceChildren(h('h1', {}, path), h('p', { class: 'error', role: 'alert' }, err.message));
    }
  }
  await refresh();
  const visible = TABS.filter(([, , show]) => show(entity));
  let selected = visible.find(([id]) => id === current) ? current : (can('Listen') ? visible[0][0] : 'send');
  function select(id) {
    selected = id;
    for (const b of tabs.children) b.setAttribute('aria-selected', String(b.dataset.tab === id));
    panel.replaceChildren();
    panel.setAttribute('aria-labelledby', `tab-${id}`);
    const view = VIEWS[id];
    view(panel, entity, refresh);
  }
  tabs.replaceChildren(...visible.map(([id, label]) => h('button', {
    type: 'button', role: 'tab', id: `tab-${id}`, 'data-tab': id, 'aria-controls': 'tab-panel',
    onclick: () => select(id),
    onkeydown: (e) => {
      const i = visible.findIndex(([v]) => v === id);
      const to = e.key === 'ArrowRight' ? visible[(i + 1) % visible.length] : e.key === 'ArrowLeft' ? visible[(i + visible.length - 1) % visible.length] : null;
      if (to) { select(to[0]); $(`tab-${to[0]}`).focus(); }
    },
  }, label)));
  select(selected);
  state.timer = setInterval(refresh, REFRESH_MS);
}

function drawHead(head, e) {
  const c = e.counts || {};
  const limited = e.availability !== 'Available';
  head.replaceChildren(...[
    h('h1', { id: 'entity-name' }, e.path),
    h('p', { class: 'muted' }, `${e.kind} · `, h('span', { class: 'badge' }, e.status),
      e.requiresSession ? ' · sessions' : '', e.partitions > 1 ? ` · ${e.partitions} partitions` : '',
      ' · ', h('span', { class: `badge ${limited ? 'bad' : 'ok'}` }, limited ? `limited: partitions ${(e.unavailablePartitions || []).join(', ')} unavailable` : 'available')),
    h('div', { class: 'cards' },
      card('Active', c.active, 'count-active'), card('Dead letters', c.deadLetter, 'count-deadletter'),
      card('Scheduled', c.scheduled, 'count-scheduled'), card('Deferred', c.deferred, 'count-deferred'),
      card('Transfer', c.transfer, 'count-transfer'), card('Size', null, 'count-size', bytes(e.sizeBytes))),
    e.partitionRuntimes ? partitionTable(e.partitionRuntimes) : null].filter(Boolean));
}

function partitionTable(rows) {
  return h('details', { class: 'panel', id: 'partitions' }, h('summary', {}, `Partitions (${rows.filter((p) => p.available).length} of ${rows.length} available)`),
    h('div', { class: 'table-wrap' }, h('table', {},
      h('thead', {}, h('tr', {}, h('th', { class: 'num' }, 'Partition'), h('th', {}, 'Status'), h('th', { class: 'num' }, 'Active'),
        h('th', { class: 'num' }, 'Dead'), h('th', { class: 'num hide-narrow' }, 'Sched.'), h('th', { class: 'num hide-narrow' }, 'Size'),
        h('th', { class: 'num hide-narrow', title: 'Messages accepted / handed to receivers since the partition started' }, 'In / out'))),
      h('tbody', {}, rows.map((p) => h('tr', { 'data-partition': p.partition },
        h('td', { class: 'num' }, p.partition),
        h('td', {}, h('span', { class: `badge ${p.available ? 'ok' : 'bad'}` }, p.available ? 'available' : 'unavailable')),
        h('td', { class: 'num' }, fmt(p.active)), h('td', { class: 'num' }, fmt(p.deadLetter)),
        h('td', { class: 'num hide-narrow' }, fmt(p.scheduled)), h('td', { class: 'num hide-narrow' }, bytes(p.sizeBytes)),
        h('td', { class: 'num hide-narrow' }, p.available ? `${fmt(p.incoming)} / ${fmt(p.outgoing)}` : ''),
      ))))));
}

function card(label, n, id, text) {
  return h('div', { class: 'card' }, h('div', { class: 'n', id }, text !== undefined ? text : fmt(n)), h('div', { class: 'k' }, label));
}

const VIEWS = {
  messages: (panel, e, refresh) => messageList(panel, e, 'main', refresh),
  deadletter: (panel, e, refresh) => messageList(panel, e, 'deadletter', refresh),
  send: sendForm,
  scheduled: scheduledView,
  sessions: sessionsView,
  rules: rulesView,
  subscriptions: subscriptionsView,
  properties: propertiesView,
};

function messageList(panel, e, queue, refresh) {
  const dead = queue === 'deadletter';
  const list = h('div', { class: 'table-wrap' });
  const detail = h('div', { id: 'detail' });
  const more = h('button', { type: 'button' }, 'Load more');
  const session = h('input', { id: 'peek-session', placeholder: 'session id (optional)' });
  const selectedSeqs = new Set();
  let next = 0;
  let messages = [];
  const toolbar = h('div', { class: 'toolbar' },
    h('button', { type: 'button', onclick: () => { next = 0; messages = []; load(); } }, 'Peek'),
    e.requiresSession && !dead ? [h('label', { class: 'inline', for: 'peek-session' }, 'Session'), session] : null);
  panel.append(h('h2', {}, dead ? 'Dead-letter queue' : 'Messages (peek, nothing is locked)'), toolbar);
  if (dead && can('Manage')) panel.append(resubmitBar(e, selectedSeqs, async () => { next = 0; messages = []; await load(); refresh(); }));
  panel.append(h('div', { class: 'split' }, h('div', {}, list, h('div', { class: 'pager' }, more)), detail));
  if (can('Manage')) {
    const what = dead ? 'deadletter' : 'active';
    panel.append(h('div', { class: 'actions' }, h('button', {
      type: 'button', class: 'danger', id: `purge-${what}`,
      onclick: async () => {
        const ok = await confirmTyped(`Delete every ${dead ? 'dead-lettered' : 'active'} message of ${e.path}? Locked messages stay. This cannot be undone.`, e.path);
        if (!ok) return;
        try {
          const r = await api('POST', `purge?${q({ path: e.path })}`, { queue: what });
          toast(`Purged ${r.deleted} messages`);
          next = 0; messages = []; load(); refresh();
        } catch (err) { toast(err.message, true); }
      },
    }, dead ? 'Purge dead letters…' : 'Purge active messages…')));
  }
  more.addEventListener('click', load);
  async function load() {
    try {
      const data = await api('GET', `messages?${q({ path: e.path, queue, from: next, max: 50, session: session.value })}`);
      messages = messages.concat(data.messages);
      if (data.next !== null) next = data.next;
      more.disabled = data.messages.length < 50;
      draw();
    } catch (err) { list.replaceChildren(h('p', { class: 'error', role: 'alert' }, err.message)); }
  }
  function draw() {
    const rows = messages.map((m) => h('tr', { 'data-seq': m.sequenceNumber },
      dead && can('Manage') ? h('td', {}, h('input', {
        type: 'checkbox', 'aria-label': `Select message ${m.sequenceNumber}`, checked: selectedSeqs.has(m.sequenceNumber),
        onchange: (ev) => { if (ev.target.checked) selectedSeqs.add(m.sequenceNumber); else selectedSeqs.delete(m.sequenceNumber); },
      })) : null,
      h('td', { class: 'num' }, h('button', { type: 'button', class: 'link', onclick: (ev) => { showDetail(detail, m); markSelected(ev.target); } }, String(m.sequenceNumber))),
      h('td', { class: 'ellipsis', title: m.properties.messageId || '' }, m.properties.messageId || '–'),
      h('td', { class: 'ellipsis hide-narrow' }, dead ? (m.deadLetterReason || '–') : (m.properties.subject || '–')),
      h('td', { class: 'num hide-narrow' }, bytes(m.bodySize))));
    const table = h('table', { id: `messages-${queue}` },
      h('colgroup', {}, dead && can('Manage') ? h('col', { class: 'c-check' }) : null, h('col', { class: 'c-seq' }), h('col', {}), h('col', { class: 'hide-narrow' }), h('col', { class: 'c-n hide-narrow' })),
      h('thead', {}, h('tr', {}, dead && can('Manage') ? h('th', { scope: 'col' }, h('span', { class: 'sr-only' }, 'Select')) : null,
        h('th', { scope: 'col', class: 'num' }, 'Seq'), h('th', { scope: 'col' }, 'Message id'),
        h('th', { scope: 'col', class: 'hide-narrow' }, dead ? 'Reason' : 'Subject'), h('th', { scope: 'col', class: 'num hide-narrow' }, 'Size'))),
      h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'No messages.'))));
    list.replaceChildren(table);
  }
  function markSelected(target) {
    for (const tr of list.querySelectorAll('tr.selected')) tr.classList.remove('selected');
    target.closest('tr').classList.add('selected');
  }
  load();
}

function resubmitBar(e, selectedSeqs, done) {
  const target = h('input', { id: 'resubmit-target', placeholder: e.kind === 'subscription' ? 'default: the topic' : 'default: this queue' });
  const remove = h('input', { type: 'checkbox', id: 'resubmit-remove', checked: true });
  const bar = h('div', { class: 'toolbar' },
    h('label', { class: 'inline', for: 'resubmit-target' }, 'Resubmit to'), target,
    h('label', { class: 'inline', for: 'resubmit-remove' }, remove, 'Remove originals'),
    h('button', {
      type: 'button', class: 'primary', id: 'resubmit',
      onclick: async () => {
        if (!selectedSeqs.size) { toast('Select dead letters first', true); return; }
        try {
          const r = await api('POST', `resubmit?${q({ path: e.path })}`, { sequenceNumbers: [...selectedSeqs], target: target.value || null, remove: remove.checked });
          toast(`Resubmitted ${r.resubmitted} to ${r.target}${r.removed ? `, removed ${r.removed}` : ''}${r.missing.length ? `; not found: ${r.missing.join(', ')}` : ''}`);
          selectedSeqs.clear();
          done();
        } catch (err) { toast(err.message, true); }
      },
    }, 'Resubmit selected'));
  return bar;
}

function decodeBody(b64) {
  const raw = atob(b64);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return bytes;
}

function hexDump(bytes) {
  const lines = [];
  for (let i = 0; i < bytes.length && i < 64 * 1024; i += 16) {
    const row = bytes.slice(i, i + 16);
    const hex = [...row].map((b) => b.toString(16).padStart(2, '0')).join(' ');
    const text = [...row].map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : '.')).join('');
    lines.push(`${i.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  ${text}`);
  }
  if (bytes.length > 64 * 1024) lines.push('… (first 64 KB shown)');
  return lines.join('\n');
}

function showDetail(detail, m) {
  const bytes = decodeBody(m.body);
  const text = new TextDecoder('utf-8', { fatal: false }).decode(bytes);
  let json = null;
  try { json = JSON.stringify(JSON.parse(text), null, 2); } catch (_) { json = null; }
  const body = h('pre', { id: 'body-view', tabindex: 0 });
  const views = { Text: () => text, JSON: () => (json === null ? '(the body is not JSON)' : json), Hex: () => hexDump(bytes) };
  let mode = json !== null ? 'JSON' : 'Text';
  const buttons = h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Body as' });
  function show(name) {
    mode = name;
    body.textContent = views[name]();
    for (const b of buttons.children) b.setAttribute('aria-selected', String(b.textContent === name));
  }
  buttons.append(...Object.keys(views).map((name) => h('button', { type: 'button', role: 'tab', id: `body-${name.toLowerCase()}`, onclick: () => show(name) }, name)));
  const system = [
    ['Sequence number', m.sequenceNumber], ['Enqueued', m.enqueuedTime], ['State', m.state], ['Partition', m.partition],
    ['Delivery count', m.deliveryCount], ['Expires', m.expiresAt || 'never'],
    ['Dead-letter reason', m.deadLetterReason], ['Dead-letter description', m.deadLetterErrorDescription], ['Dead-letter source', m.deadLetterSource],
    ...Object.entries(m.properties).map(([k, v]) => [k, v]),
  ].filter(([, v]) => v !== null && v !== undefined);
  const app = Object.entries(m.applicationProperties);
  detail.replaceChildren(h('div', { class: 'panel', id: 'message-detail', 'aria-live': 'polite' },
    h('h2', {}, `Message ${m.sequenceNumber}`),
    h('h3', {}, 'System properties'),
    h('dl', { class: 'props' }, system.map(([k, v]) => [h('dt', {}, k), h('dd', { class: 'mono' }, String(v))])),
    h('h3', {}, 'Application properties'),
    app.length ? h('dl', { class: 'props', id: 'app-props' }, app.map(([k, v]) => [h('dt', {}, k), h('dd', { class: 'mono' }, `${v.value === null ? 'null' : v.value} (${v.type})`)]))
      : h('p', { class: 'muted' }, 'None.'),
    h('h3', {}, `Body (${m.bodySize} bytes)`), buttons, body));
  show(mode);
}

function sendForm(panel, e) {
  if (!can('Send')) {
    panel.append(h('p', { class: 'notice', id: 'no-send' }, `Policy ${state.session.policy} has no Send right: it cannot send messages.`));
    return;
  }
  const field = (id, label, attrs) => h('div', {}, h('label', { for: id }, label), h('input', { id, ...(attrs || {}) }));
  const body = h('textarea', { id: 'send-body', spellcheck: 'false' }, '{"hello": "world"}');
  const props = h('textarea', { id: 'send-props', spellcheck: 'false', placeholder: 'one per line: name=value (numbers and true/false are typed)' });
  const error = h('p', { class: 'field-error', role: 'alert' });
  const form = h('form', { id: 'send-form' }, h('h2', {}, 'Send a message'),
    h('label', { for: 'send-body' }, 'Body'), body,
    h('div', { class: 'form-grid' },
      field('send-content-type', 'Content type', { value: 'application/json' }),
      field('send-subject', 'Subject'), field('send-message-id', 'Message id'),
      field('send-correlation-id', 'Correlation id'),
      field('send-session-id', 'Session id', e.requiresSession ? { required: true } : {}),
      field('send-partition-key', 'Partition key'),
      field('send-ttl', 'Time to live (s)', { type: 'number', min: 1 }),
      field('send-scheduled', 'Scheduled enqueue (UTC, ISO 8601)', { placeholder: '2030-01-01T00:00:00Z' }),
      field('send-count', 'Copies', { type: 'number', min: 1, max: 1000, value: 1 })),
    h('label', { for: 'send-props' }, 'Application properties'), props,
    error,
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Send')));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.textContent = '';
    const v = (id) => $(id).value.trim() || null;
    const properties = {};
    for (const line of props.value.split('\n')) {
      if (!line.trim()) continue;
      const at = line.indexOf('=');
      if (at < 1) { error.textContent = `Property line "${line}" is not name=value`; return; }
      const name = line.slice(0, at).trim();
      const raw = line.slice(at + 1).trim();
      properties[name] = raw === 'true' ? true : raw === 'false' ? false : (raw !== '' && !Number.isNaN(Number(raw)) ? Number(raw) : raw);
    }
    try {
      const r = await api('POST', `messages?${q({ path: e.path })}`, {
        body: body.value, contentType: v('send-content-type'), subject: v('send-subject'), messageId: v('send-message-id'),
        correlationId: v('send-correlation-id'), sessionId: v('send-session-id'), partitionKey: v('send-partition-key'),
        timeToLive: v('send-ttl') ? Number(v('send-ttl')) : null, scheduledEnqueueTime: v('send-scheduled'),
        count: Number(v('send-count') || 1), properties,
      });
      toast(`Sent ${r.sent} message(s)${r.duplicates ? `, ${r.duplicates} dropped as duplicates` : ''}`);
    } catch (err) { error.textContent = err.message; }
  });
  panel.append(form);
}

function scheduledView(panel, e, refresh) {
  const list = h('div', { class: 'table-wrap' });
  panel.append(h('h2', {}, 'Scheduled messages'), list);
  if (can('Manage')) {
    panel.append(h('div', { class: 'actions' }, h('button', {
      type: 'button', class: 'danger', id: 'purge-scheduled',
      onclick: async () => {
        if (!await confirmTyped(`Cancel every scheduled message of ${e.path}?`, e.path)) return;
        try { const r = await api('POST', `purge?${q({ path: e.path })}`, { queue: 'scheduled' }); toast(`Cancelled ${r.deleted}`); load(); refresh(); } catch (err) { toast(err.message, true); }
      },
    }, 'Cancel all scheduled…')));
  }
  async function load() {
    try {
      const data = await api('GET', `scheduled?${q({ path: e.path })}`);
      list.replaceChildren(h('table', { id: 'scheduled' },
        h('thead', {}, h('tr', {}, h('th', { class: 'num' }, 'Seq'), h('th', {}, 'Enqueues at'), h('th', { class: 'hide-narrow' }, 'Message id'), h('th', {}, h('span', { class: 'sr-only' }, 'Actions')))),
        h('tbody', {}, data.messages.length ? data.messages.map((m) => h('tr', {},
          h('td', { class: 'num' }, m.sequenceNumber), h('td', {}, m.properties.scheduledEnqueueTime),
          h('td', { class: 'ellipsis hide-narrow' }, m.properties.messageId || '–'),
          h('td', {}, can('Send') ? h('button', {
            type: 'button', 'aria-label': `Cancel scheduled message ${m.sequenceNumber}`,
            onclick: async () => {
              try { await api('DELETE', `scheduled?${q({ path: e.path })}`, { sequenceNumbers: [m.sequenceNumber] }); toast('Cancelled'); load(); refresh(); } catch (err) { toast(err.message, true); }
            },
          }, 'Cancel') : null))) : h('tr', {}, h('td', { colspan: 4, class: 'muted' }, 'No scheduled messages.')))));
    } catch (err) { list.replaceChildren(h('p', { class: 'error', role: 'alert' }, err.message)); }
  }
  load();
}

async function sessionsView(panel, e) {
  const list = h('div', { class: 'table-wrap' });
  const editor = h('div', {});
  panel.append(h('h2', {}, 'Sessions'), list, editor);
  const edit = (s) => {
    const text = h('textarea', { id: 'session-state', spellcheck: 'false' }, s.stateText || '');
    const error = h('p', { class: 'field-error', role: 'alert' });
    const save = async (state) => {
      try {
        await api('PUT', `sessions?${q({ path: e.path, session: s.id })}`, { state });
        toast(state === null ? `Cleared the state of ${s.id}` : `Saved the state of ${s.id}`);
        editor.replaceChildren();
        load();
      } catch (err) { error.textContent = err.message; }
    };
    const form = h('form', { id: 'session-form' }, h('h3', {}, `State of session ${s.id}`),
      h('label', { for: 'session-state' }, 'State (text)'), text, error,
      h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Save state'),
        h('button', { type: 'button', onclick: () => save(null) }, 'Clear state'),
        h('button', { type: 'button', onclick: () => editor.replaceChildren() }, 'Cancel')));
    form.addEventListener('submit', (ev) => { ev.preventDefault(); save(text.value); });
    editor.replaceChildren(form);
    text.focus();
  };
  async function load() {
    try {
      const data = await api('GET', `sessions?${q({ path: e.path })}`);
      list.replaceChildren(h('table', { id: 'sessions' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Session id'), h('th', {}, 'State'), h('th', { class: 'c-n' }, h('span', { class: 'sr-only' }, 'Actions')))),
        h('tbody', {}, data.sessions.length ? data.sessions.map((s) => h('tr', { 'data-session': s.id },
          h('td', { class: 'ellipsis', title: s.id }, s.id),
          h('td', { class: 'mono ellipsis' }, s.stateSize === null ? '(none)' : (s.stateText !== null ? s.stateText : `${s.stateSize} bytes (binary)`)),
          h('td', {}, can('Manage') && (s.stateSize === null || s.stateText !== null)
            ? h('button', { type: 'button', class: 'link', 'aria-label': `Edit the state of session ${s.id}`, onclick: () => edit(s) }, 'Edit') : null)))
          : h('tr', {}, h('td', { colspan: 3, class: 'muted' }, 'No sessions with messages or state.')))));
    } catch (err) { list.replaceChildren(h('p', { class: 'error', role: 'alert' }, err.message)); }
  }
  load();
}

async function subscriptionsView(panel, e) {
  const subs = e.subscriptions || [];
  panel.append(h('h2', {}, 'Subscriptions'), h('div', { class: 'table-wrap' }, h('table', {},
    h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', { class: 'num' }, 'Active'), h('th', { class: 'num' }, 'Dead'))),
    h('tbody', {}, subs.length ? subs.map((s) => h('tr', {},
      h('td', { class: 'name' }, h('a', { href: entityHref(s.path) }, s.path.split('/').pop())),
      h('td', { class: 'num' }, fmt(s.counts && s.counts.active)), h('td', { class: 'num' }, fmt(s.counts && s.counts.deadLetter))))
      : h('tr', {}, h('td', { colspan: 3, class: 'muted' }, 'No subscriptions.'))))));
}

function rulesView(panel, e) {
  const list = h('div', {});
  panel.append(h('h2', {}, 'Rules'), list);
  const name = h('input', { id: 'rule-name', required: true });
  const type = h('select', { id: 'rule-type' }, ['sql', 'true', 'false'].map((t) => h('option', { value: t }, t === 'sql' ? 'SQL filter' : `${t} filter`)));
  const sql = h('textarea', { id: 'rule-sql', spellcheck: 'false', 'aria-describedby': 'rule-sql-error' });
  const sqlError = h('p', { class: 'field-error', id: 'rule-sql-error', role: 'alert' });
  const action = h('textarea', { id: 'rule-action', spellcheck: 'false', placeholder: 'optional, e.g. SET priority = 1', 'aria-describedby': 'rule-action-error' });
  const actionError = h('p', { class: 'field-error', id: 'rule-action-error', role: 'alert' });
  const error = h('p', { class: 'field-error', role: 'alert' });
  const form = h('form', { id: 'rule-form' }, h('h2', {}, 'Create or edit a rule'),
    h('div', { class: 'form-grid' }, h('div', {}, h('label', { for: 'rule-name' }, 'Name'), name), h('div', {}, h('label', { for: 'rule-type' }, 'Filter'), type)),
    h('label', { for: 'rule-sql' }, 'SQL filter expression'), sql, sqlError,
    h('label', { for: 'rule-action' }, 'SQL action'), action, actionError, error,
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Save rule')));
  // Writing an expression makes the filter a SQL filter.
  sql.addEventListener('input', () => { type.value = 'sql'; sql.removeAttribute('aria-invalid'); });
  const edit = (r) => {
    name.value = r.name;
    type.value = r.filter.type === 'correlation' ? 'sql' : r.filter.type;
    sql.value = r.filter.expression || '';
    action.value = r.action || '';
    sql.focus();
  };
  async function load() {
    try {
      const data = await api('GET', `rules?${q({ path: e.path })}`);
      list.replaceChildren(h('div', { class: 'table-wrap' }, h('table', { id: 'rules' },
        h('colgroup', {}, h('col', { style: null }), h('col', {}), h('col', { class: 'hide-narrow' }), h('col', { class: 'c-time' })),
        h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Filter'), h('th', { class: 'hide-narrow' }, 'Action'), h('th', {}, h('span', { class: 'sr-only' }, 'Actions')))),
        h('tbody', {}, data.rules.map((r) => h('tr', { 'data-rule': r.name },
          h('td', { class: 'ellipsis', title: r.name }, r.name),
          h('td', { class: 'mono ellipsis', title: ruleText(r.filter) }, ruleText(r.filter)),
          h('td', { class: 'mono ellipsis hide-narrow' }, r.action || '–'),
          h('td', {}, can('Manage') ? [
            h('button', { type: 'button', class: 'link', onclick: () => edit(r), 'aria-label': `Edit rule ${r.name}` }, 'Edit'),
            h('button', {
              type: 'button', class: 'link', 'aria-label': `Delete rule ${r.name}`,
              onclick: async () => {
                if (!await confirmTyped(`Delete rule ${r.name} of ${e.path}?`, r.name)) return;
                try { await api('DELETE', `rules?${q({ path: e.path, name: r.name })}`); toast(`Deleted rule ${r.name}`); load(); } catch (err) { toast(err.message, true); }
              },
            }, 'Delete')] : null)))))));
    } catch (err) { list.replaceChildren(h('p', { class: 'error', role: 'alert' }, err.message)); }
  }
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    for (const p of [sqlError, actionError, error]) p.textContent = '';
    try {
      await api('PUT', `rules?${q({ path: e.path })}`, { name: name.value, filterType: type.value, sqlExpression: sql.value, action: action.value || null });
      toast(`Saved rule ${name.value}`);
      load();
    } catch (err) {
      const b = err.body;
      if (b.field === 'sqlExpression' || b.field === 'action') {
        const area = b.field === 'action' ? action : sql;
        const where = b.field === 'action' ? actionError : sqlError;
        where.textContent = `Line ${b.line}, column ${b.column}${b.token ? ` at “${b.token}”` : ''}: ${b.details}`;
        area.setAttribute('aria-invalid', 'true');
        selectAt(area, b.line, b.column, b.token);
      } else {
        error.textContent = err.message;
      }
    }
  });
  if (can('Manage')) panel.append(form);
  load();
}

function ruleText(f) {
  if (f.type === 'sql') return f.expression;
  if (f.type === 'correlation') {
    return Object.entries(f).filter(([k, v]) => k !== 'type' && v !== null && !(typeof v === 'object' && !Object.keys(v).length))
      .map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`).join(', ') || 'correlation (matches all)';
  }
  return f.type === 'true' ? '1=1' : '1=0';
}

/** Selects the token in error in a textarea (line 1-based, column 0-based). */
function selectAt(area, line, column, token) {
  const lines = area.value.split('\n');
  let at = 0;
  for (let i = 0; i < line - 1 && i < lines.length; i++) at += lines[i].length + 1;
  at += column;
  area.focus();
  area.setSelectionRange(at, at + Math.max(1, (token || '').length));
}

function propertiesView(panel, e) {
  const props = e.properties || {};
  const editable = {
    queue: ['lockDuration', 'maxDeliveryCount', 'defaultMessageTimeToLive', 'deadLetteringOnMessageExpiration', 'duplicateDetectionHistoryTimeWindow', 'maxSizeInMegabytes', 'forwardTo', 'forwardDeadLetteredMessagesTo', 'status', 'userMetadata', 'autoDeleteOnIdle'],
    topic: ['defaultMessageTimeToLive', 'duplicateDetectionHistoryTimeWindow', 'maxSizeInMegabytes', 'status', 'userMetadata', 'autoDeleteOnIdle'],
    subscription: ['lockDuration', 'maxDeliveryCount', 'defaultMessageTimeToLive', 'deadLetteringOnMessageExpiration', 'deadLetteringOnFilterEvaluationExceptions', 'forwardTo', 'forwardDeadLetteredMessagesTo', 'status', 'userMetadata', 'autoDeleteOnIdle'],
  }[e.kind] || [];
  const durations = new Set(['lockDuration', 'defaultMessageTimeToLive', 'duplicateDetectionHistoryTimeWindow', 'autoDeleteOnIdle']);
  const manage = can('Manage');
  const inputs = {};
  const fields = Object.entries(props).map(([k, v]) => {
    const id = `prop-${k}`;
    const label = durations.has(k) ? `${k} (s, empty: never)` : k;
    let input;
    if (typeof v === 'boolean') input = h('select', { id }, h('option', { value: 'true', selected: v }, 'true'), h('option', { value: 'false', selected: !v }, 'false'));
    else if (k === 'status') input = h('select', { id }, ['Active', 'Disabled', 'SendDisabled', 'ReceiveDisabled'].map((s) => h('option', { value: s, selected: v === s }, s)));
    else input = h('input', { id, value: v === null ? '' : v, type: typeof v === 'number' || durations.has(k) ? 'number' : 'text', step: 'any' });
    if (!manage || !editable.includes(k)) input.disabled = true;
    inputs[k] = { input, original: v };
    return h('div', {}, h('label', { for: id }, label), input);
  });
  const error = h('p', { class: 'field-error', role: 'alert' });
  const form = h('form', { id: 'properties-form' }, h('h2', {}, 'Properties'),
    manage ? null : h('p', { class: 'notice' }, 'Read only: editing needs the Manage right.'),
    h('div', { class: 'form-grid' }, fields), error,
    manage ? h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Save properties'),
      h('button', {
        type: 'button', class: 'danger', id: 'delete-entity',
        onclick: async () => {
          if (!await confirmTyped(`Delete ${e.path} and every message in it?`, e.path)) return;
          try { await api('DELETE', `entity?${q({ path: e.path })}`); toast(`Deleted ${e.path}`); location.hash = '#/'; } catch (err) { toast(err.message, true); }
        },
      }, 'Delete entity…')) : null);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.textContent = '';
    const changes = {};
    for (const [k, { input, original }] of Object.entries(inputs)) {
      if (input.disabled) continue;
      let value = input.value;
      if (typeof original === 'boolean') value = value === 'true';
      else if (durations.has(k)) value = value === '' ? null : Number(value);
      else if (typeof original === 'number') value = Number(value);
      else if (value === '') value = null;
      if (value !== original) changes[k] = value;
    }
    if (!Object.keys(changes).length) { toast('Nothing changed'); return; }
    try { await api('PUT', `entity?${q({ path: e.path })}`, changes); toast('Saved'); } catch (err) { error.textContent = err.message; }
  });
  panel.append(form, h('p', { class: 'muted' }, `Created ${e.createdAt || '–'}, updated ${e.updatedAt || '–'}.`));
}
