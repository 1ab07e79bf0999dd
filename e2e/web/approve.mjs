// Drives the consent web page (consent/web) in Debian's headless chromium
// with playwright-core: opens the page, says "ready" on stdout once its
// watch is open (the page is then an approver), waits for a pending
// request, decides it as told, waits for the outcome to show, takes a
// screenshot and says "done". Any failure exits 1 with the reason on
// stderr. Run by consent/web's TestBrowser* (go test), which makes the
// request after "ready" and checks the broker afterwards.
//
// Environment:
//   CORRAL_WEB_URL          the page with its token: http://127.0.0.1:PORT/ui/?token=...
//   CORRAL_WEB_ACTION       approve (default) or deny
//   CORRAL_WEB_SCOPE        once, session (default), ttl or always
//   CORRAL_WEB_TTL          the duration for ttl, e.g. 15m
//   CORRAL_WEB_READ_ONLY    1: narrow a read-write request to read-only
//   CORRAL_WEB_DENY_REASON  the reason of a deny
//   CORRAL_WEB_FOR_SESSION  1: deny for the session
//   CORRAL_WEB_EXPECT_REASON  the request's reason, which must show as this text
//   CORRAL_WEB_EXPECT_TARGET  the pending request's target, which must show as this text
//   CORRAL_WEB_EXPECT_SANDBOX the id of the sandbox that asks: the request must
//                           name it, and an approved grant must show in force
//                           in that sandbox's section of the page
//   CORRAL_WEB_SCREENSHOT   where to write the PNG of the outcome (default: none);
//                           the pending request's goes beside it as NAME-pending.png
//   CORRAL_CHROMIUM         the browser (default /usr/bin/chromium)
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const env = process.env;
const url = env.CORRAL_WEB_URL;
const action = env.CORRAL_WEB_ACTION || 'approve';
const scope = env.CORRAL_WEB_SCOPE || 'session';
const wait = { timeout: 30000 };

function fail(msg) {
  console.error('approve.mjs: ' + msg);
  process.exitCode = 1;
  throw new Error(msg);
}

if (!url) fail('CORRAL_WEB_URL is not set');

const profile = mkdtempSync(join(tmpdir(), 'corral-chromium-'));
let context;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: env.CORRAL_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    // This machine's network is closed: nothing but the page is reached.
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1280, height: 900 },
  });
  const page = context.pages()[0] || (await context.newPage());
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/favicon/.test(m.text())) problems.push('console error: ' + m.text());
  });

  await page.goto(url);
  if (new URL(page.url()).search !== '') fail('the token stayed in the URL: ' + page.url());
  await page.waitForSelector('body[data-watch="open"]', wait);
  console.log('ready');

  const card = page.locator('article.request[data-state="pending"]').first();
  await card.waitFor(wait);
  const id = await card.getAttribute('data-id');
  const target = (await card.locator('.target').textContent()) || '';
  console.error(`approve.mjs: pending request ${id} for ${target}`);

  if (env.CORRAL_WEB_EXPECT_REASON !== undefined) {
    const shown = await card.locator('.reason').textContent();
    if (shown !== env.CORRAL_WEB_EXPECT_REASON) fail(`reason shown as ${JSON.stringify(shown)}, want ${JSON.stringify(env.CORRAL_WEB_EXPECT_REASON)}`);
    if ((await card.locator('.reason *').count()) !== 0) fail('the reason became markup');
  }
  if (env.CORRAL_WEB_EXPECT_TARGET !== undefined && target !== env.CORRAL_WEB_EXPECT_TARGET) {
    fail(`target shown as ${JSON.stringify(target)}, want ${JSON.stringify(env.CORRAL_WEB_EXPECT_TARGET)}`);
  }
  const sandbox = env.CORRAL_WEB_EXPECT_SANDBOX;
  if (sandbox !== undefined) {
    const shown = await card.locator('.sandbox').textContent();
    if (shown !== sandbox) fail(`sandbox shown as ${JSON.stringify(shown)}, want ${JSON.stringify(sandbox)}`);
  }
  // Nothing the workload wrote may have run.
  const xss = await page.evaluate(() => window.__corral_xss);
  if (xss !== undefined) fail('script from a request ran: window.__corral_xss = ' + xss);

  if (env.CORRAL_WEB_SCREENSHOT) { // the request as the approver sees it
    const pending = env.CORRAL_WEB_SCREENSHOT.replace(/(\.png)?$/, '-pending.png');
    await page.screenshot({ path: pending, fullPage: true, caret: 'initial' });
    console.error('approve.mjs: screenshot ' + pending);
  }

  if (action === 'approve') {
    await card.locator('select[name="scope"]').selectOption(scope);
    if (scope === 'ttl') await card.locator('input[name="ttl"]').fill(env.CORRAL_WEB_TTL || '15m');
    if (env.CORRAL_WEB_READ_ONLY === '1') await card.locator('input[name="read_only"]').check();
    await card.locator('button[data-action="approve"]').click();
    // The grant of this request, shown in force (read back).
    const within = sandbox !== undefined ? `section.sandbox[data-sandbox="${sandbox}"] ` : '';
    const grant = page.locator(within + 'tr.grant[data-effective="true"]', { hasText: target });
    await grant.first().waitFor(wait);
    await page.locator(`tr.decided[data-id="${id}"][data-state="approved"]`).waitFor(wait);
  } else if (action === 'deny') {
    await card.locator('input[name="reason"]').fill(env.CORRAL_WEB_DENY_REASON || '');
    if (env.CORRAL_WEB_FOR_SESSION === '1') await card.locator('input[name="for_session"]').check();
    await card.locator('button[data-action="deny"]').click();
    const row = page.locator(`tr.decided[data-id="${id}"][data-state="denied"]`);
    await row.waitFor(wait);
    if (env.CORRAL_WEB_DENY_REASON) {
      const shown = await row.locator('.decision-reason').textContent();
      if (shown !== env.CORRAL_WEB_DENY_REASON) fail(`deny reason shown as ${JSON.stringify(shown)}`);
    }
  } else {
    fail('CORRAL_WEB_ACTION ' + action + ': want approve or deny');
  }
  if ((await page.locator(`article.request[data-id="${id}"]`).count()) !== 0) fail('the decided request is still shown as pending');
  // The live audit has the decision from the watch.
  await page.locator('#events li.event').first().waitFor(wait);
  if ((await page.locator('#events li *').count()) !== 0) fail('an event of the live audit became markup');
  const cardMarkup = await page.locator('#live .target *, #live .reason *, #live .requester code *').count();
  if (cardMarkup !== 0) fail('text from a request became markup in the page');
  if (await page.evaluate(() => window.__corral_xss) !== undefined) fail('script from a request ran after the refresh');

  // The page's own errors, CSP refusals included (before the
  // screenshot, whose caret-hiding style the page's CSP refuses too).
  if (problems.length) fail(problems.join('\n'));
  if (env.CORRAL_WEB_SCREENSHOT) {
    await page.screenshot({ path: env.CORRAL_WEB_SCREENSHOT, fullPage: true, caret: 'initial' });
    console.error('approve.mjs: screenshot ' + env.CORRAL_WEB_SCREENSHOT);
  }
  console.log('done');
} catch (e) {
  if (!process.exitCode) console.error('approve.mjs: ' + (e && e.stack ? e.stack : e));
  process.exitCode = 1;
} finally {
  if (context) await context.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
}
