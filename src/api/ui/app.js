// scopemem operator page. Plain JS, no dependencies. Every memory text and every value from the
// server goes into the DOM as textContent, never as markup.
'use strict';

const TOKEN_KEY = 'scopemem.token';
const PAGE = 20;
/** How often a connected page refreshes the status, the map and the shown memories. */
const LIVE_MS = 5000;
const $ = (id) => document.getElementById(id);

const view = { conversation: '', persona: '', query: '', offset: 0, total: 0 };

/** An element with text content and optional class; children appended as given. */
function el(tag, text, cls, children) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  for (const c of children || []) e.appendChild(c);
  return e;
}

function say(text, isError) {
  const m = $('message');
  m.textContent = text || '';
  m.className = isError ? 'error' : '';
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** Call the JSON API with the token; resolves to {status, body}. */
async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  const t = token();
  if (t) headers.Authorization = 'Bearer ' + t;
  const init = { method, headers, credentials: 'omit', cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  let json = null;
  try { json = await r.json(); } catch (_) { json = null; }
  if (!r.ok) {
    const err = (json && json.error) || {};
    const e = new Error((err.code || r.status) + ': ' + (err.message || r.statusText));
    e.status = r.status;
    throw e;
  }
  return json;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows.map((cells) =>
    el('tr', null, null, cells.map((c) => el('td', c.text, c.cls)))));
}

function emptyRow(tbody, cols, text) {
  const td = el('td', text, 'muted');
  td.colSpan = cols;
  tbody.replaceChildren(el('tr', null, null, [td]));
}

function dl(target, pairs) {
  const items = [];
  for (const [k, v] of pairs) items.push(el('dt', k), el('dd', v));
  target.replaceChildren(...items);
}

function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + ' ' + units[i];
}

function renderStatus(s) {
  dl($('overview'), [
    ['rows', s.rows], ['legacy rows (no scope)', s.null_scope_rows],
    ['fragments', s.fragments], ['table versions', s.table_versions],
    ['stored in', s.location],
    ['on disk', s.location.includes('://') ? 'in the bucket' : bytes(s.disk_bytes)],
    ['embedding model', s.embedding_model],
    ['scope filter', s.scope_filter], ['vector index in use', s.vector_index ? 'yes' : 'no'],
    ['maintenance', s.maintenance.this_process ? 'this process'
      : (s.maintenance.holder ? 'pid ' + s.maintenance.holder.pid
        + (s.maintenance.holder.host ? ' on ' + s.maintenance.holder.host : '') : 'nobody')],
    ['scope map hash', s.scope_map.content_hash.slice(0, 16)],
  ]);
  const scopes = Object.entries(s.rows_by_scope).sort((a, b) => b[1] - a[1]);
  if (s.null_scope_rows) scopes.push(['(no scope: legacy)', s.null_scope_rows]);
  const tbody = $('scope-rows').tBodies[0];
  if (scopes.length) {
    fill(tbody, scopes.map(([k, v]) => [{ text: k, cls: 'scope' }, { text: v, cls: 'num' }]));
  } else emptyRow(tbody, 2, 'no memories yet');
  renderMigration(s.migration);
  dl($('feedback'), [['queue depth', s.feedback_queue_depth],
    ['dead letters (last day)', s.feedback_dead_letters.length]]);
  const dead = $('dead-letters').tBodies[0];
  if (s.feedback_dead_letters.length) {
    fill(dead, s.feedback_dead_letters.map((d) => [
      { text: d.job_id, cls: 'mono' }, { text: d.error || '' }, { text: d.attempts, cls: 'num' }]));
  } else emptyRow(dead, 3, 'none');
  const idx = $('indexes').tBodies[0];
  if (s.indexes.length) {
    fill(idx, s.indexes.map((i) => [{ text: i.name, cls: 'mono' }, { text: i.columns.join(', '), cls: 'mono' },
      { text: i.index_type }, { text: i.indexed_rows ?? '?', cls: 'num' },
      { text: i.unindexed_rows ?? '?', cls: 'num' }]));
  } else emptyRow(idx, 5, 'no indexes');
}

function renderMigration(m) {
  const done = m.filled + m.skipped;
  const total = done + m.remaining;
  const bar = $('backfill-progress');
  bar.max = 1;
  bar.value = m.state === 'done' || m.state === 'none' ? 1 : (total ? done / total : 0);
  dl($('migration'), [
    ['state', m.state === 'none' ? 'none (no legacy rows)' : m.state], ['migration_mode', m.migration_mode],
    ['legacy rows visible to recall', m.active ? 'yes' : 'no'],
    ['scanned / filled / skipped', m.scanned + ' / ' + m.filled + ' / ' + m.skipped],
    ['remaining', m.remaining], ['rows/s', Math.round(m.rows_per_sec)],
    ['migration start', m.migration_start || '-'],
  ]);
}

function renderMap(map) {
  $('map-summary').textContent = '(' + map.summary.entries + ' applied, ' + map.summary.ignored +
    ' ignored; unmapped: ' + map.unmapped_scope + '; incognito: ' +
    (map.incognito.length ? map.incognito.join(', ') : 'none') + '; loaded ' + map.summary.loaded_at + ')';
  const entries = $('map-entries').tBodies[0];
  if (map.entries.length) {
    fill(entries, map.entries.map((e) => [{ text: e.key, cls: 'mono' }, { text: e.scope, cls: 'scope' }]));
  } else emptyRow(entries, 2, 'no entries: every conversation is unmapped');
  const ignored = $('map-ignored').tBodies[0];
  if (map.ignored.length) {
    fill(ignored, map.ignored.map((e) => [{ text: e.key, cls: 'mono' }, { text: e.reason },
      { text: e.fails_closed_to || '-', cls: 'scope' }]));
  } else emptyRow(ignored, 3, 'none');
  $('known-conversations').replaceChildren(...map.entries
    .filter((e) => !e.key.startsWith('persona:'))
    .map((e) => { const o = el('option'); o.value = e.key; o.label = e.scope; return o; }));
}

/** Status and map; `quiet` (the live refresh) leaves the message line alone unless it fails. */
async function refresh(quiet) {
  try {
    const [status, map] = await Promise.all([api('GET', '/v1/status'), api('GET', '/v1/scope_map')]);
    renderStatus(status);
    renderMap(map);
    $('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    if (!quiet) say('Connected. Status at ' + new Date().toLocaleTimeString() + '.');
    document.body.classList.add('connected');
  } catch (e) {
    document.body.classList.remove('connected');
    say(e.status === 401 ? 'The token was refused: enter the service token.' : String(e.message), true);
  }
}

/** Whether forget would erase `m` for this view: its own scope, or (forget's rule for legacy
 *  rows) a NULL-scope row from a public conversation while migration mode is on. */
function deletable(m, ownScope, migrating) {
  if (m.memory_scope === ownScope) return true;
  return (m.memory_scope === null || m.memory_scope === undefined) && ownScope === 'public' && migrating;
}

function memoryItem(m, ownScope, migrating) {
  const meta = [m.memory_scope || '(legacy, no scope)', m.memory_type, m.created_at || ''];
  // Who said it (the name at write time; the id is the key) and the chat messages a
  // consolidated memory came from.
  if (m.speaker_id) meta.push('said by ' + (m.speaker_name || m.speaker_id) + ' (' + m.speaker_id + ')');
  if (m.source_ids && m.source_ids.length) meta.push('from messages ' + m.source_ids.join(', '));
  if (typeof m.score === 'number') meta.push('score ' + m.score.toFixed(3));
  const li = el('li', null, 'memory', [
    el('p', m.content, 'content'),
    el('p', meta.join(' · '), 'meta'),
  ]);
  li.dataset.id = m.id;
  li.dataset.scope = m.memory_scope || '';
  if (deletable(m, ownScope, migrating)) {
    const b = el('button', 'Delete', 'danger');
    b.type = 'button';
    b.addEventListener('click', () => confirmDelete(b, m.id));
    li.appendChild(b);
  }
  return li;
}

/** Two clicks, no modal: the first arms the button, the second deletes. */
function confirmDelete(button, id) {
  if (!button.classList.contains('armed')) {
    button.classList.add('armed');
    button.textContent = 'Really delete?';
    return;
  }
  button.disabled = true;
  remove(id);
}

async function remove(id) {
  const body = { conversation_id: view.conversation, memory_ids: [id] };
  if (view.persona) body.persona = view.persona;
  let outcome;
  try {
    const r = await api('POST', '/v1/forget', body);
    outcome = r.deleted ? ['Deleted 1 memory (erased from every table version).', false]
      : ['Not deleted: this conversation\'s scope does not hold it.', true];
  } catch (e) { outcome = [String(e.message), true]; }
  await show();
  await refresh();
  say(...outcome);
}

async function show() {
  if (!view.conversation) return;
  const base = { conversation_id: view.conversation };
  if (view.persona) base.persona = view.persona;
  try {
    let r;
    if (view.query) {
      r = await api('POST', '/v1/recall', { ...base, query: view.query, limit: 100 });
      view.total = r.memories.length;
      $('page-info').textContent = r.memories.length + ' best matches';
    } else {
      r = await api('POST', '/v1/memories/browse', { ...base, offset: view.offset, limit: PAGE });
      view.total = r.total;
      const last = Math.min(view.offset + r.memories.length, r.total);
      $('page-info').textContent = (r.total ? view.offset + 1 : 0) + '–' + last + ' of ' + r.total;
    }
    $('view-info').textContent = 'Scope ' + r.memory_scope + (r.migration_mode
      ? ' (+ legacy rows while migrating)' : '') + (view.query ? ': search' : ': newest first');
    $('prev').disabled = !!view.query || view.offset === 0;
    $('next').disabled = !!view.query || view.offset + PAGE >= view.total;
    const list = $('memories');
    if (r.memories.length) list.replaceChildren(...r.memories.map((m) => memoryItem(m, r.memory_scope, r.migration_mode)));
    else list.replaceChildren(el('li', 'nothing visible to this conversation', 'muted'));
  } catch (e) { say(String(e.message), true); }
}

/** Connect at once when the service needs no token (its /healthz says so), else ask for it. */
async function connectIfOpen() {
  try {
    const r = await fetch('/healthz', { credentials: 'omit', cache: 'no-store' });
    if (r.ok && (await r.json()).auth === 'none') {
      sessionStorage.setItem(TOKEN_KEY, '');
      await refresh();
      return;
    }
  } catch (_) { /* the prompt below */ }
  say('Enter the token (leave it empty if the service has none) and press Connect.');
}

/** Keep a connected, visible page current without losing the browse position (the same
 *  offset is asked again) or a Delete that is waiting for its second click. */
async function liveTick() {
  if (!document.body.classList.contains('connected') || document.hidden) return;
  if (document.querySelector('#memories button.armed')) return;
  await refresh(true);
  if (view.conversation && !view.query) await show();
}

function init() {
  $('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $('token').value.trim());
    $('token').value = '';
    refresh().then(show);
  });
  $('token-clear').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    document.body.classList.remove('connected');
    say('Token forgotten for this tab.');
  });
  $('refresh').addEventListener('click', () => refresh().then(show));
  $('view-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    view.conversation = $('conversation').value.trim();
    view.persona = $('persona').value.trim();
    view.query = $('query').value.trim();
    view.offset = 0;
    show();
  });
  $('prev').addEventListener('click', () => { view.offset = Math.max(0, view.offset - PAGE); show(); });
  $('next').addEventListener('click', () => { view.offset += PAGE; show(); });
  $('prev').disabled = true;
  $('next').disabled = true;
  // A request without a token would be refused (and logged by the browser) when one is set,
  // so nothing but /healthz is fetched until the operator connects once in this tab.
  if (token() === null) connectIfOpen();
  else refresh();
  setInterval(liveTick, LIVE_MS);
}

document.addEventListener('DOMContentLoaded', init);
