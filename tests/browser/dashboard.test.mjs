// dashboard.test.mjs - the dashboard in headless Chromium, driven by
// playwright-core against Debian's chromium (no browser download).
//
// Run by tests/bb/test_dashboard_browser.py, which starts Redis and retryd,
// makes the data (tenants, topics, two dead jobs, a scheduled job) and
// passes it here in the environment.  Each step prints "ok NAME" or
// "not ok NAME" followed by "# " lines; the driver turns them into TAP.
//
// Key decision: the page is used only as a person would (typing, clicking,
// reading text), and every console error and uncaught page error is
// collected: the steps of normal use must leave none.  Failed responses
// are kept with the key their request carried, so a late poll of one
// login is never blamed on the next; only the other tenant's key, which
// opens the first tenant's topic and job on purpose, may see 404s.

import { chromium } from 'playwright-core';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const env = process.env;
const BASE = env.BASE;
const TOPIC = env.TOPIC;
const DEAD = env.DEAD_IDS.split(',');
const BIZKEY = env.DEAD_BIZKEY;
const WAITING = env.WAITING_ID;
const SHOTS = env.SCREENSHOT_DIR || '';
const CHROMIUM = env.CHROMIUM || '/usr/bin/chromium';

const consoleLog = [];
let phase = 'main';
let failed = 0;

function diag(text) {
	for (const line of String(text).split('\n'))
		console.log('# ' + line);
}

async function step(name, fn) {
	try {
		await fn();
		console.log('ok ' + name);
	} catch (e) {
		failed++;
		console.log('not ok ' + name);
		diag(e && e.stack ? e.stack : e);
	}
}

function assert(cond, msg) {
	if (!cond)
		throw new Error('assertion failed: ' + msg);
}

async function shot(page, name, full) {
	if (!SHOTS)
		return;
	await page.screenshot({ path: path.join(SHOTS, name + '.png'),
		fullPage: !!full });
}

const userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'retryd-chromium-'));
const ctx = await chromium.launchPersistentContext(userDir, {
	executablePath: CHROMIUM,
	headless: true,
	viewport: { width: 1100, height: 760 },
	args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic',
		'--no-first-run', '--disable-background-networking',
		'--disable-component-update', '--disable-sync']
});
const page = ctx.pages()[0] || await ctx.newPage();
page.setDefaultTimeout(15000);
/*
 * Chromium logs each failed response to the console without its URL or
 * the key that asked, and the log event can arrive after the test has
 * moved to its next step, so those lines are left out here: the failed
 * responses are kept instead, each with the key its request carried
 * (a poll of the previous login that ends late is not the next login's).
 */
const netLog = [];
page.on('console', (m) => {
	if ((m.type() === 'error' || m.type() === 'warning') &&
	    !/^Failed to load resource/.test(m.text()))
		consoleLog.push({ phase, type: m.type(), text: m.text() });
});
page.on('response', (r) => {
	if (r.status() < 400)
		return;
	const auth = r.request().headers()['authorization'] || '';
	netLog.push({ key: auth.replace(/^Bearer /, ''), status: r.status(),
		url: r.url().replace(BASE, '') });
});

function failedWith(key) {
	return netLog.filter((n) => n.key === key);
}
page.on('pageerror', (e) => consoleLog.push({ phase, type: 'pageerror',
	text: e.message }));

async function text(sel) {
	return (await page.locator(sel).first().textContent()).trim();
}

async function login(key) {
	await page.goto(BASE + '/?poll=700#/topics');
	await page.locator('#login-key').fill(key);
	await page.locator('#login-form button[type=submit]').click();
	await page.locator('#content').waitFor();
	await page.locator('#topics-table tbody tr').first().waitFor();
}

async function logout() {
	await page.locator('#logout').click();
	await page.locator('#login-key').waitFor();
}

async function go(hash) {
	await page.evaluate((h) => { window.location.hash = h; }, hash);
}

async function waitText(sel, want, timeout) {
	await page.waitForFunction(([s, w]) => {
		const n = document.querySelector(s);
		return n && n.textContent.includes(w);
	}, [sel, want], { timeout: timeout || 15000 });
}

try {
	await step('the login page asks for a key', async () => {
		await page.goto(BASE + '/');
		await page.locator('#login-key').waitFor();
		assert(await page.locator('#content').isHidden(),
		    'content hidden before login');
		await shot(page, 'login');
	});

	await step('a tenant logs in and sees its topics with counts',
	    async () => {
		await login(env.KEY_A);
		const row = page.locator('#topics-table tr[data-topic="' +
		    TOPIC + '"]');
		await row.waitFor();
		await waitText('#topics-table tr[data-topic="' + TOPIC +
		    '"] td.dead', String(DEAD.length));
		assert((await text('#who-name')).includes(env.TENANT_A),
		    'the tenant is named');
		const key = await page.evaluate(() =>
		    window.sessionStorage.getItem('retryd.key'));
		assert(key === env.KEY_A, 'the key is in sessionStorage');
		await shot(page, 'topics');
	});

	await step('a topic: counts, the chart, lateness, the schedule ' +
	    'editor validating as one types', async () => {
		await page.locator('#topics-table a', { hasText: TOPIC })
		    .first().click();
		await waitText('.count.dead .n', String(DEAD.length));
		await page.locator('#chart rect.bad').first().waitFor();
		assert(Number(await text('#hour-failed')) >= DEAD.length,
		    'failures of the last hour');
		const input = page.locator('#f-schedule');
		await waitText('#sched-help', '✓');
		const orig = await input.inputValue();
		await input.fill('<0,2x>');
		await waitText('#sched-help', 'character');
		assert(await page.locator('#f-schedule.bad').count() === 1,
		    'marked invalid');
		assert(await page.locator('#topic-save').isDisabled(),
		    'cannot save an invalid schedule');
		await input.fill('<0, 90s,1h>');
		await waitText('#sched-help', '✓ <0,90s,1h>');
		assert(await page.locator('#topic-save').isEnabled(),
		    'can save again');
		await input.fill(orig);
		await waitText('#sched-help', '✓ ' + orig);
		await shot(page, 'topic', true);
	});

	await step('the signing secret rotates', async () => {
		await page.locator('#secret').waitFor();
		await page.getByRole('button', { name: 'Show' }).click();
		const before = await text('#secret');
		assert(before.startsWith('whsec_'), 'shows the secret');
		const rotate = page.getByRole('button', {
			name: 'Rotate secret' });
		await rotate.click();
		await page.getByRole('button', {
			name: 'Click again: Rotate secret' }).click();
		await page.waitForFunction((b) => {
			const n = document.querySelector('#secret');
			return n && n.textContent.startsWith('whsec_') &&
			    n.textContent !== b;
		}, before);
	});

	await step('a dead job found by id shows its attempt history',
	    async () => {
		await page.locator('#nav a[data-view=jobs]').click();
		await page.locator('#search-by').selectOption('id');
		await page.locator('#search-q').fill(DEAD[0]);
		await page.locator('#search-form button').click();
		await waitText('#job-state', 'dead');
		const rows = page.locator('#attempts tbody tr');
		await rows.first().waitFor();
		assert(await rows.count() === 2, 'two attempts');
		assert((await rows.first().textContent()).includes('500'),
		    'status 500 shown');
		assert((await text('#job-body')).includes('order'), 'body');
		await shot(page, 'job', true);
	});

	await step('a job found by bizkey (the journal is on)', async () => {
		await page.locator('#nav a[data-view=jobs]').click();
		await page.locator('#search-by').selectOption('bizkey');
		await page.locator('#search-q').fill(BIZKEY);
		await page.locator('#search-form button').click();
		await waitText('#search-results', DEAD[0]);
	});

	await step('dead letters: retry one, redrive the rest, both are ' +
	    'delivered', async () => {
		await go('#/dead/' + encodeURIComponent(TOPIC));
		for (const id of DEAD)
			await page.locator('#dead-jobs tr[data-job="' + id +
			    '"]').waitFor();
		await shot(page, 'dead');
		await page.locator('#dead-jobs tr[data-job="' + DEAD[0] +
		    '"] button.retry-one').click();
		await page.locator('#dead-jobs tr[data-job="' + DEAD[0] +
		    '"]').waitFor({ state: 'detached' });
		await page.locator('#redrive-all').click();
		await page.locator('#redrive-all.armed').waitFor();
		await page.locator('#redrive-all').click();
		await waitText('#dead-jobs', 'No dead jobs');
		for (const id of DEAD) {
			await go('#/job/' + encodeURIComponent(id));
			await waitText('#job-state', 'delivered', 20000);
		}
		await go('#/topics');
		await waitText('#topics-table tr[data-topic="' + TOPIC +
		    '"] td.delivered', String(DEAD.length));
		assert(await text('#topics-table tr[data-topic="' + TOPIC +
		    '"] td.dead') === '0', 'none dead any more');
	});

	await step('a waiting job is rescheduled, then cancelled', async () => {
		await go('#/job/' + encodeURIComponent(WAITING));
		await waitText('#job-state', 'scheduled');
		await page.locator('#resched-delay').fill('7200');
		await page.locator('#resched-form button').click();
		await waitText('#msg', 'Rescheduled');
		await page.getByRole('button', { name: 'Cancel job' }).click();
		await page.getByRole('button', {
			name: 'Click again: Cancel job' }).click();
		await waitText('#job-state', 'cancelled');
	});

	await step('readable at phone width', async () => {
		await page.setViewportSize({ width: 375, height: 740 });
		for (const h of ['#/topics', '#/topic/' +
		    encodeURIComponent(TOPIC), '#/job/' +
		    encodeURIComponent(DEAD[0]), '#/dead/' +
		    encodeURIComponent(TOPIC)]) {
			await go(h);
			await page.locator('#content h1').waitFor();
			await page.waitForTimeout(300);
			const w = await page.evaluate(() =>
			    document.documentElement.scrollWidth);
			assert(w <= 375, h + ' is ' + w + ' px wide');
		}
		await go('#/topic/' + encodeURIComponent(TOPIC));
		await page.locator('.count.delivered').waitFor();
		await shot(page, 'topic-phone');
		await page.setViewportSize({ width: 1100, height: 760 });
	});

	await step('no errors in the browser console', async () => {
		const bad = consoleLog.filter((m) => m.type !== 'warning');
		for (const m of consoleLog)
			diag(m.phase + ' ' + m.type + ': ' + m.text);
		assert(bad.length === 0, bad.length + ' console errors');
		for (const n of netLog)
			diag('failed: ' + n.status + ' ' + n.url);
		assert(netLog.length === 0, 'no failed requests: ' +
		    JSON.stringify(netLog));
	});

	await step('another tenant sees none of the first tenant\'s data',
	    async () => {
		phase = 'isolation';
		await logout();
		assert(await page.evaluate(() =>
		    window.sessionStorage.getItem('retryd.key')) === null,
		    'logout forgets the key');
		await login(env.KEY_B);
		await waitText('#topics-table', 'No topics yet');
		assert(!(await text('#content')).includes(TOPIC),
		    'no topic of A listed');
		await go('#/dead');
		await waitText('#dead-topics', 'No dead jobs');
		await go('#/job/' + encodeURIComponent(DEAD[0]));
		await page.locator('#job-missing').waitFor();
		await go('#/topic/' + encodeURIComponent(TOPIC));
		await waitText('#msg', 'no topic named');
		const body = await text('body');
		assert(!body.includes('whsec_'), 'no secret of A');
		assert(!body.includes(BIZKEY), 'no bizkey of A');
		for (const n of failedWith(env.KEY_B))
			diag('expected here: ' + n.status + ' ' + n.url);
		const stray = consoleLog.filter((m) => m.phase === phase &&
		    m.type !== 'warning');
		assert(stray.length === 0, 'no console errors: ' +
		    JSON.stringify(stray));
		const net = failedWith(env.KEY_B).filter((n) =>
		    n.status !== 404);
		assert(failedWith(env.KEY_B).length > 0 && net.length === 0,
		    'the other tenant\'s objects answer 404: ' +
		    JSON.stringify(failedWith(env.KEY_B)));
	});

	await step('the admin key lists tenants and switches between them',
	    async () => {
		phase = 'admin';
		await logout();
		await login(env.ADMIN_KEY);
		assert((await text('#who-name')).includes('admin'), 'admin');
		const opts = await page.locator('#tenant-select option')
		    .allTextContents();
		assert(opts.includes(env.TENANT_A) &&
		    opts.includes(env.TENANT_B), 'both tenants: ' + opts);
		await page.locator('#tenant-select').selectOption(env.TENANT_A);
		await page.locator('#topics-table tr[data-topic="' + TOPIC +
		    '"]').waitFor();
		await page.locator('#tenant-select').selectOption(env.TENANT_B);
		await waitText('#topics-table', 'No topics yet');
		const bad = consoleLog.filter((m) => m.phase === phase &&
		    m.type !== 'warning');
		assert(bad.length === 0, JSON.stringify(bad));
		assert(failedWith(env.ADMIN_KEY).length === 0,
		    'no failed request of the admin key: ' +
		    JSON.stringify(failedWith(env.ADMIN_KEY)));
	});
} finally {
	await ctx.close();
	fs.rmSync(userDir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
