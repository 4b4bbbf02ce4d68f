// Drives the operator page (/ui) of a running `scopemem serve` in Debian's chromium, through
// playwright-core (never a downloaded browser). Started by tests/ui_browser.rs, which seeds the
// table and passes everything in the environment:
//   SCOPEMEM_UI_BASE      http://127.0.0.1:<port> of the service
//   SCOPEMEM_UI_TOKEN     its server.auth_token
//   SCOPEMEM_UI_OPEN_BASE a second service, with no token, in migration mode, holding one legacy
//                         row without a scope
//   SCOPEMEM_UI_PUBLIC_CONVERSATION an unmapped (public-scope) conversation
//   SCOPEMEM_UI_SEED      JSON {family_conversation, work_conversation, counts, family, work, public}
//   SCOPEMEM_UI_OUT       directory for the screenshot
//   SCOPEMEM_BROWSER_DEPS where scripts/setup-browser.sh installed playwright-core
//   SCOPEMEM_CHROMIUM     the browser (default /usr/bin/chromium)
// Exits non-zero with a message on the first failed check.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const BASE = env('SCOPEMEM_UI_BASE');
const TOKEN = env('SCOPEMEM_UI_TOKEN');
const OPEN_BASE = env('SCOPEMEM_UI_OPEN_BASE');
const PUBLIC_CONVERSATION = env('SCOPEMEM_UI_PUBLIC_CONVERSATION');
const SEED = JSON.parse(env('SCOPEMEM_UI_SEED'));
const OUT = env('SCOPEMEM_UI_OUT');
const require = createRequire(join(env('SCOPEMEM_BROWSER_DEPS'), 'package.json'));
const { chromium } = require('playwright-core');

const FLAGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

const step = (text) => console.log(`[ui.spec] ${text}`);
const sorted = (xs) => [...xs].sort();

/** The JSON API from Node (not the browser), with the token. */
async function api(path, body, headers = {}) {
  const r = await fetch(BASE + path, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: r.status, json: await r.json() };
}

async function recallContents(conversation) {
  const r = await api('/v1/recall', { conversation_id: conversation, query: 'what do we know', limit: 100 });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  return r.json.memories.map((m) => m.content);
}

/** Everything the main page must not do: console errors, page errors, failed or refused requests. */
function watch(page) {
  const problems = [];
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  page.on('response', (r) => { if (r.status() >= 400) problems.push(`HTTP ${r.status()}: ${r.url()}`); });
  return problems;
}

async function listed(page) {
  return page.locator('#memories li.memory .content').allTextContents();
}

async function show(page, conversation, query, expectInfo) {
  await page.fill('#conversation', conversation);
  await page.fill('#query', query);
  await page.click('#view-go');
  await page.waitForFunction((t) => document.querySelector('#view-info').textContent.endsWith(t), expectInfo);
  await page.waitForSelector('#memories li');
}

async function scopeCounts(page) {
  const rows = await page.locator('#scope-rows tbody tr').evaluateAll((trs) =>
    trs.map((tr) => [...tr.cells].map((c) => c.textContent)));
  return Object.fromEntries(rows.filter((r) => r.length === 2).map(([k, v]) => [k, Number(v)]));
}

/** A page on another origin (localhost vs 127.0.0.1: another site) that posts a form at the API. */
function attackerSite(target) {
  const html = `<!doctype html><form id="f" method="POST" enctype="text/plain" action="${target}">
<input name='{"conversation_id":"${SEED.family_conversation}","persona":"' value='"}'></form>
<script>document.getElementById('f').submit()</script>`;
  const server = createServer((_, res) => { res.setHeader('content-type', 'text/html'); res.end(html); });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

async function crossSite(context) {
  const server = await attackerSite(`${BASE}/v1/forget`);
  const page = await context.newPage();
  const refused = page.waitForResponse((r) => r.url() === `${BASE}/v1/forget`);
  await page.goto(`http://localhost:${server.address().port}/`);
  const r = await refused;
  assert.equal(r.status(), 403, 'a cross-site form post must be refused');
  assert.equal(JSON.parse(await r.text()).error.code, 'cross_site_request');
  await page.close();
  server.close();
  // Knowing the token does not help a request that says it comes from another origin.
  const forged = await api('/v1/forget', { conversation_id: SEED.family_conversation },
    { Origin: 'http://evil.example' });
  assert.equal(forged.status, 403, JSON.stringify(forged.json));
}

async function main() {
  const profile = mkdtempSync(join(tmpdir(), 'scopemem-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.SCOPEMEM_CHROMIUM || '/usr/bin/chromium',
    headless: true, args: FLAGS, viewport: { width: 1280, height: 900 },
  });
  context.setDefaultTimeout(20000);
  try {
    const page = context.pages()[0] || await context.newPage();
    const problems = watch(page);

    step('page loads and asks for the token');
    await page.goto(`${BASE}/ui`);
    await page.waitForFunction(() => document.querySelector('#message').textContent.includes('token'));
    assert.equal(await page.title(), 'scopemem operator');

    step('the token opens the status, with the right rows per scope');
    await page.fill('#token', TOKEN);
    await page.click('#token-save');
    await page.waitForSelector('body.connected');
    assert.deepEqual(await scopeCounts(page), SEED.counts);
    const entries = await page.locator('#map-entries tbody tr').evaluateAll((trs) =>
      trs.map((tr) => [...tr.cells].map((c) => c.textContent)));
    assert.deepEqual(sorted(entries.map((e) => e.join('→'))),
      sorted([`${SEED.family_conversation}→家人`, `${SEED.work_conversation}→工作`]));
    assert.equal(await page.evaluate(() => sessionStorage.getItem('scopemem.token')), TOKEN);

    const visible = sorted([...SEED.family, ...SEED.public]);
    step('browsing as the family group shows family + public, never work');
    await show(page, SEED.family_conversation, '', 'newest first');
    assert.deepEqual(sorted(await listed(page)), visible);
    assert.equal(await page.locator('#memories img').count(), 0, 'memory text must never become markup');

    step('searching as the family group likewise');
    await show(page, SEED.family_conversation, 'what does grandma like', 'search');
    const found = await listed(page);
    assert.ok(found.length > 0);
    for (const c of found) assert.ok(visible.includes(c), `search showed ${c}`);
    for (const c of SEED.work) assert.ok(!found.includes(c), `search leaked work memory ${c}`);

    await show(page, SEED.family_conversation, '', 'newest first');
    await page.screenshot({ path: join(OUT, 'operator-page.png'), fullPage: true });

    step('deleting a memory removes it from the list and from recall');
    const victim = SEED.family[0];
    const item = page.locator('#memories li.memory', { hasText: victim });
    const id = await item.getAttribute('data-id');
    await item.locator('button').click();
    await item.locator('button.armed').click();
    await page.locator(`#memories li[data-id="${id}"]`).waitFor({ state: 'detached' });
    await page.waitForFunction(() => document.querySelector('#message').textContent.startsWith('Deleted'));
    assert.ok(!(await listed(page)).includes(victim));
    assert.ok(!(await recallContents(SEED.family_conversation)).includes(victim));
    await page.waitForFunction((n) => [...document.querySelectorAll('#scope-rows tbody tr')]
      .some((tr) => tr.cells[0].textContent === '家人' && Number(tr.cells[1].textContent) === n),
    SEED.counts['家人'] - 1);
    // Public memories carry no delete button for a family conversation (forget's own rule).
    const publicItem = page.locator('#memories li.memory', { hasText: SEED.public[0] });
    assert.equal(await publicItem.locator('button').count(), 0);

    step('the page refreshes itself: a memory remembered elsewhere shows up without a click');
    const fresh = 'Grandpa repaints the fence every May';
    const added = await api('/v1/remember', { conversation_id: SEED.family_conversation, content: fresh });
    assert.equal(added.status, 200, JSON.stringify(added.json));
    await page.waitForFunction((text) => [...document.querySelectorAll('#memories li.memory .content')]
      .some((p) => p.textContent === text), fresh, { timeout: 15000 });
    assert.ok((await page.textContent('#updated')).startsWith('updated '));
    assert.ok((await page.textContent('#view-info')).endsWith('newest first'), 'the view stays as it was');

    step('a reload keeps the token for this tab');
    await page.reload();
    await page.waitForSelector('body.connected');

    step('a memory made of a member\'s message says who said it and which message');
    const said = '奶奶每周三下午去社区医院量血压';
    const message = await api('/v1/events/message', { conversation_id: SEED.family_conversation,
      sender_id: 'u-zhang', sender_name: '张三', text: said, message_id: 'ui-said-by' });
    assert.equal(message.status, 202, JSON.stringify(message.json));
    // The bot's prompts recall it twice once it is stored (the threshold rule).
    const deadline = Date.now() + 180000;
    let made = null;
    while (!made && Date.now() < deadline) {
      await api('/v1/events/llm_request', { conversation_id: SEED.family_conversation, query: '奶奶什么时候去量血压？' });
      const browsed = await api('/v1/memories/browse', { conversation_id: SEED.family_conversation, limit: 100 });
      made = browsed.json.memories.find((m) => m.content === said && m.memory_type !== 'message') || null;
      if (!made) await new Promise((r) => setTimeout(r, 500));
    }
    assert.ok(made, 'the message never became a long-term memory');
    await show(page, SEED.family_conversation, '', 'newest first');
    const meta = await page.locator(`#memories li[data-id="${made.id}"] .meta`).textContent();
    assert.ok(meta.includes('said by 张三 (u-zhang)'), meta);
    assert.ok(meta.includes(`from messages ${message.json.id}`), meta);

    step('a cross-site POST is refused and changes nothing');
    const before = sorted(await recallContents(SEED.family_conversation));
    await crossSite(context);
    assert.deepEqual(sorted(await recallContents(SEED.family_conversation)), before);

    assert.deepEqual(problems, [], 'the page logged errors or had failed requests');

    step('a service without a token is connected at once, with no refused request');
    const open = await context.newPage();
    const openProblems = watch(open);
    await open.goto(`${OPEN_BASE}/ui`);
    await open.waitForSelector('body.connected');
    assert.ok((await open.textContent('#message')).startsWith('Connected'));

    step('a legacy row without a scope has a Delete button for a public conversation, and it erases');
    await show(open, SEED.family_conversation, '', 'newest first');
    const legacy = open.locator('#memories li.memory', { hasText: 'A legacy note nobody dated' });
    assert.equal(await legacy.locator('button').count(), 0, 'a family conversation may not delete it');
    await show(open, PUBLIC_CONVERSATION, '', 'newest first');
    await legacy.locator('button').click();
    await legacy.locator('button.armed').click();
    await open.waitForFunction(() => document.querySelector('#message').textContent.startsWith('Deleted'));
    await legacy.waitFor({ state: 'detached' });
    assert.deepEqual(openProblems, [], 'the tokenless page logged errors or had refused requests');
    await open.close();
    step('all checks passed');
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(`[ui.spec] FAILED: ${e.stack || e}`);
  process.exit(1);
});
