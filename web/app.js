/*
 * app.js - retryd's dashboard: plain JavaScript, no framework, no build.
 *
 * Key decisions: every number comes from the REST API with the key the
 * user typed (kept in sessionStorage, so it dies with the tab); the admin
 * key lists tenants and acts as one with X-Tenant.  Views are chosen by the
 * URL's hash (#/topics, #/topic/NAME, #/jobs, #/job/ID, #/dead/TOPIC) and
 * each has a refresh() that the page calls every few seconds, redrawing
 * only what holds data, never a form being edited.  Nothing from the API is
 * ever parsed as HTML: text goes in through textContent and attributes
 * through setAttribute, so a job body or an error message cannot inject
 * markup.  Normal use makes no failing request (the schedule check answers
 * 200 for an invalid schedule), so the browser console stays clean.
 */
'use strict';

(function () {
	const params = new URLSearchParams(window.location.search);
	const POLL_MS = Math.max(500, Number(params.get('poll')) || 5000);
	const STATES = ['scheduled', 'ready', 'in_flight', 'retrying',
		'delivered', 'dead', 'cancelled'];
	const UNFINISHED = ['scheduled', 'ready', 'in_flight', 'retrying'];
	const SVGNS = 'http://www.w3.org/2000/svg';
	const store = window.sessionStorage;

	const S = {
		key: null,		/* the API key */
		admin: false,
		tenant: null,		/* the tenant acted as */
		tenants: [],		/* admin: every tenant's name */
		view: null,		/* { name, node, refresh } */
		busy: false
	};

	const $ = (id) => document.getElementById(id);

	/* ---- DOM helpers ------------------------------------------------ */

	/*
	 * el('a', {href: '#/x', class: 'c'}, 'text', child...): strings
	 * become text nodes, null and false are skipped.
	 */
	function el(tag, attrs, ...kids) {
		const n = document.createElement(tag);
		setAttrs(n, attrs);
		append(n, kids);
		return n;
	}

	function svg(tag, attrs, ...kids) {
		const n = document.createElementNS(SVGNS, tag);
		setAttrs(n, attrs);
		append(n, kids);
		return n;
	}

	function setAttrs(n, attrs) {
		for (const [k, v] of Object.entries(attrs || {})) {
			if (v === null || v === undefined || v === false)
				continue;
			if (k.startsWith('on') && typeof v === 'function')
				n.addEventListener(k.slice(2), v);
			else
				n.setAttribute(k, v === true ? '' : String(v));
		}
	}

	function append(n, kids) {
		for (const k of kids.flat()) {
			if (k === null || k === undefined || k === false)
				continue;
			n.appendChild(typeof k === 'object' ? k :
			    document.createTextNode(String(k)));
		}
	}

	function fill(n, ...kids) {
		n.replaceChildren();
		append(n, kids);
		return n;
	}

	function link(hash, ...kids) {
		return el('a', { href: hash }, ...kids);
	}

	function enc(s) {
		return encodeURIComponent(s);
	}

	/* ---- formatting -------------------------------------------------- */

	function fmtTime(ms) {
		if (ms === null || ms === undefined)
			return '-';
		const d = new Date(ms);
		const p = (x) => String(x).padStart(2, '0');
		return d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' +
		    p(d.getDate()) + ' ' + p(d.getHours()) + ':' +
		    p(d.getMinutes()) + ':' + p(d.getSeconds());
	}

	function fmtDur(ms) {
		if (ms === null || ms === undefined)
			return '-';
		if (ms < 1000)
			return ms + ' ms';
		if (ms < 60000)
			return (ms / 1000).toFixed(ms % 1000 ? 1 : 0) + ' s';
		const units = [['d', 86400000], ['h', 3600000], ['m', 60000],
			['s', 1000]];
		const out = [];
		let left = ms;
		for (const [u, n] of units) {
			if (left >= n) {
				out.push(Math.floor(left / n) + u);
				left %= n;
			}
			if (out.length === 2)
				break;
		}
		return out.join(' ');
	}

	function num(n) {
		return (n || 0).toLocaleString('en-US');
	}

	function badge(state) {
		return el('span', { class: 'badge ' + state },
		    state.replace('_', ' '));
	}

	/* ---- messages ---------------------------------------------------- */

	function say(text, info) {
		const m = $('msg');
		m.textContent = text;
		m.className = info ? 'msg info' : 'msg';
		m.hidden = !text;
	}

	function errText(e) {
		if (e instanceof ApiError)
			return e.message + (e.status ? ' (' + e.status + ' ' +
			    e.code + ')' : '');
		return String(e && e.message ? e.message : e);
	}

	/* Run an async handler; a failure shows as the page's message. */
	function act(fn) {
		return (ev) => {
			if (ev && ev.preventDefault)
				ev.preventDefault();
			Promise.resolve().then(() => fn(ev)).catch((e) => {
				if (!(e instanceof LoggedOut))
					say(errText(e));
			});
		};
	}

	/*
	 * A button that asks to be pressed twice (no modal dialogs: they
	 * block the page and the tests).
	 */
	function confirmButton(label, cls, fn) {
		let armed = null;
		const b = el('button', { type: 'button', class: cls }, label);
		b.addEventListener('click', act(async () => {
			if (!armed) {
				b.textContent = 'Click again: ' + label;
				b.classList.add('armed');
				armed = setTimeout(() => {
					armed = null;
					b.textContent = label;
					b.classList.remove('armed');
				}, 4000);
				return;
			}
			clearTimeout(armed);
			armed = null;
			b.textContent = label;
			b.classList.remove('armed');
			b.disabled = true;
			try {
				await fn();
			} finally {
				b.disabled = false;
			}
		}));
		return b;
	}

	/* ---- the API ----------------------------------------------------- */

	class ApiError extends Error {
		constructor(status, code, message) {
			super(message);
			this.status = status;
			this.code = code;
		}
	}

	class LoggedOut extends Error {}

	async function api(method, path, body) {
		const h = { Authorization: 'Bearer ' + S.key };
		if (S.admin && S.tenant)
			h['X-Tenant'] = S.tenant;
		const init = { method, headers: h, cache: 'no-store' };
		if (body !== undefined) {
			h['Content-Type'] = 'application/json';
			init.body = JSON.stringify(body);
		}
		let resp;
		try {
			resp = await fetch(path, init);
		} catch (e) {
			throw new ApiError(0, 'network',
			    'retryd does not answer: ' + e.message);
		}
		const text = await resp.text();
		let data = null;
		if (text) {
			try {
				data = JSON.parse(text);
			} catch (e) {
				data = null;
			}
		}
		if (resp.status === 401 && S.view) {
			logout('The key was refused: log in again.');
			throw new LoggedOut('logged out');
		}
		if (!resp.ok) {
			const err = (data && data.error) || {};
			throw new ApiError(resp.status, err.code ||
			    'http_' + resp.status, err.message ||
			    resp.statusText || 'request failed');
		}
		return data;
	}

	/* ---- session ----------------------------------------------------- */

	async function login(key) {
		S.key = key;
		S.admin = false;
		S.tenant = null;
		const who = await api('GET', '/v1/whoami');
		if (who.admin) {
			S.admin = true;
			const t = await api('GET', '/v1/tenants');
			S.tenants = (t.tenants || []).map((x) => x.name);
			const want = store.getItem('retryd.tenant');
			S.tenant = S.tenants.includes(want) ? want :
			    (S.tenants[0] || null);
		} else {
			S.tenant = who.tenant;
			S.tenants = [];
		}
		store.setItem('retryd.key', key);
		if (S.tenant)
			store.setItem('retryd.tenant', S.tenant);
		showSession();
	}

	function logout(why) {
		store.removeItem('retryd.key');
		store.removeItem('retryd.tenant');
		S.key = null;
		S.admin = false;
		S.tenant = null;
		S.tenants = [];
		S.view = null;
		fill($('content'));
		$('content').hidden = true;
		$('nav').hidden = true;
		$('who').hidden = true;
		$('refresh').hidden = true;
		$('updated').textContent = '';
		$('login').hidden = false;
		$('login-key').value = '';
		say(why || '', !why);
		$('login-key').focus();
	}

	function showSession() {
		$('login').hidden = true;
		$('nav').hidden = false;
		$('who').hidden = false;
		$('refresh').hidden = false;
		$('content').hidden = false;
		const sel = $('tenant-select');
		$('tenant-pick').hidden = !S.admin;
		if (S.admin) {
			fill(sel, S.tenants.map((t) => el('option',
			    { value: t, selected: t === S.tenant }, t)));
		}
		$('who-name').textContent = S.admin ? 'admin key' :
		    'tenant ' + S.tenant;
		say('');
	}

	/* ---- views ------------------------------------------------------- */

	function countsGrid(counts) {
		return el('div', { class: 'counts' }, STATES.map((s) =>
		    el('div', { class: 'count ' + s, 'data-state': s },
		    el('div', { class: 'n' }, num(counts ? counts[s] : 0)),
		    el('div', { class: 'l' }, s.replace('_', ' ')))));
	}

	function noTenant() {
		return el('div', { class: 'card' }, el('h1', null, 'No tenant'),
		    el('p', null, 'No tenant exists yet.  Create one with ' +
		    'POST /v1/tenants and the admin key.'));
	}

	function tenantLabel() {
		return S.tenant ? el('small', null, ' · ' + S.tenant) : null;
	}

	function topicsView() {
		const body = el('tbody');
		const note = el('p', { class: 'hint' });
		const node = el('div', null,
		    el('h1', null, 'Topics', tenantLabel()),
		    el('div', { class: 'card' }, el('div', { class: 'scroll' },
		    el('table', { id: 'topics-table' }, el('thead', null,
		    el('tr', null, el('th', null, 'Topic'),
		    el('th', null, 'Mode'),
		    STATES.map((s) => el('th', { class: 'num' },
		    s.replace('_', ' '))),
		    el('th', { class: 'num', title: 'attempts delivered, ' +
		    'last hour' }, 'ok / h'),
		    el('th', { class: 'num', title: 'attempts failed, ' +
		    'last hour' }, 'failed / h'),
		    el('th', { class: 'num', title: 'lateness p99, last ' +
		    'hour' }, 'p99 late'))), body)), note));
		async function refresh() {
			const d = await api('GET', '/v1/stats');
			fill(body, d.topics.length === 0 ?
			    el('tr', { class: 'empty' }, el('td',
			    { colspan: STATES.length + 5 }, 'No topics yet.')) :
			    d.topics.map((t) => el('tr',
			    { 'data-topic': t.name }, el('td', null,
			    link('#/topic/' + enc(t.name), t.name)),
			    el('td', null, t.mode),
			    STATES.map((s) => el('td', { class: 'num ' + s },
			    num(t.counts[s]))),
			    el('td', { class: 'num' },
			    num(t.last_hour.delivered)),
			    el('td', { class: 'num' }, num(t.last_hour.failed)),
			    el('td', { class: 'num' },
			    fmtDur(t.last_hour.lateness_p99_ms)))));
			note.textContent = d.truncated ?
			    'Only the first 500 topics are shown.' : '';
		}
		return { name: 'topics', node, refresh };
	}

	/*
	 * Bars of deliveries (green) and failures (red) per minute.  The SVG
	 * stretches to the box (preserveAspectRatio none), so the labels
	 * are HTML around it and stay readable at any width.
	 */
	function chart(minutes) {
		const W = 600, H = 100;
		const n = minutes.length || 1;
		let max = 0;
		for (const m of minutes)
			max = Math.max(max, m.delivered + m.failed);
		const top = max <= 5 ? 5 : Math.ceil(max * 1.1);
		const bw = W / n;
		const g = svg('svg', { viewBox: '0 0 ' + W + ' ' + H,
			preserveAspectRatio: 'none', class: 'chart',
			id: 'chart', role: 'img', 'aria-label':
			'deliveries and failures per minute, last hour' });
		g.appendChild(svg('line', { x1: 0, y1: H, x2: W, y2: H,
			class: 'axis', 'vector-effect': 'non-scaling-stroke' }));
		minutes.forEach((m, i) => {
			const x = i * bw + bw * 0.1, w = bw * 0.8;
			const hOk = m.delivered / top * H;
			const hBad = m.failed / top * H;
			const t = fmtTime(m.start_ms).slice(11, 16) + ': ' +
			    m.delivered + ' delivered, ' + m.failed +
			    ' failed' + (m.lateness_p99_ms !== null ?
			    ', p99 lateness ' + fmtDur(m.lateness_p99_ms) : '');
			const grp = svg('g', null, svg('title', null, t));
			if (hOk > 0)
				grp.appendChild(svg('rect', { x, width: w,
					y: H - hOk, height: hOk, class: 'ok' }));
			if (hBad > 0)
				grp.appendChild(svg('rect', { x, width: w,
					y: H - hOk - hBad, height: hBad,
					class: 'bad' }));
			/* An invisible full-height target for the tooltip. */
			grp.appendChild(svg('rect', { x: i * bw, width: bw,
				y: 0, height: H, 'fill-opacity': 0 }));
			g.appendChild(grp);
		});
		return el('div', { class: 'chartbox' },
		    el('div', { class: 'yaxis' }, el('span', null, num(top)),
		    el('span', null, '0')),
		    el('div', { class: 'plot' }, g, el('div',
		    { class: 'xaxis' }, el('span', null, '-' + n + ' min'),
		    el('span', null, 'now'))));
	}

	/* The schedule editor: checks through the API as the user types. */
	function scheduleField(initial, onState) {
		const input = el('input', { type: 'text', id: 'f-schedule',
			value: initial, spellcheck: 'false',
			autocomplete: 'off' });
		const help = el('div', { class: 'sched-help', id: 'sched-help',
			'aria-live': 'polite' });
		let seq = 0, timer = null;
		async function check() {
			const mine = ++seq;
			const text = input.value;
			const r = await api('POST', '/v1/schedules:validate',
			    { retry_schedule: text });
			if (mine !== seq)
				return;
			if (r.valid) {
				input.className = 'good';
				help.className = 'sched-help good';
				const at = r.attempt_offsets_ms.map(fmtDurShort);
				fill(help, '✓ ' + r.retry_schedule + ': ' +
				    r.attempts + ' attempt' +
				    (r.attempts === 1 ? '' : 's') +
				    ' (at due time + ' + at.join(', ') +
				    ' if each fails at once)');
				onState(true, r.retry_schedule);
			} else {
				const pos = r.error.position || 0;
				input.className = 'bad';
				help.className = 'sched-help bad';
				fill(help, r.error.reason + ' (at character ' +
				    (pos + 1) + ')', el('br'),
				    el('span', { class: 'caret' },
				    text + '\n' + ' '.repeat(pos) + '^'));
				onState(false, null);
			}
		}
		input.addEventListener('input', () => {
			clearTimeout(timer);
			onState(false, null);
			timer = setTimeout(act(check), 200);
		});
		return { input, help, check };
	}

	function fmtDurShort(ms) {
		return ms === 0 ? '0' : fmtDur(ms).replace(' ', '');
	}

	function topicView(name) {
		const counts = el('div');
		const chartBox = el('div');
		const stat = el('p', { class: 'stat' });
		const links = el('p', { class: 'actions' });
		const form = el('form', { id: 'topic-form', autocomplete: 'off' });
		const secretBox = el('div');
		const node = el('div', null,
		    el('h1', null, 'Topic ', el('span', { class: 'mono' }, name),
		    tenantLabel()), links, counts,
		    el('div', { class: 'card' }, el('h2', null, 'Last hour'),
		    chartBox, el('div', { class: 'legend' },
		    el('span', null, el('span', { class: 'sw ok' }),
		    'delivered'), el('span', null,
		    el('span', { class: 'sw bad' }), 'failed')), stat),
		    el('div', { class: 'card' }, el('h2', null, 'Settings'),
		    form),
		    el('div', { class: 'card' }, el('h2', null,
		    'Signing secret'), secretBox));
		let built = false, topic = null, showSecret = false;

		function buildForm(t) {
			let schedOk = true, schedText = t.retry_schedule;
			const save = el('button', { type: 'submit',
				id: 'topic-save' }, 'Save');
			const status = el('span', { class: 'hint' });
			const sched = scheduleField(t.retry_schedule,
			    (ok, canon) => {
				schedOk = ok;
				schedText = canon;
				save.disabled = !ok;
			});
			const f = {
				mode: el('select', { id: 'f-mode' },
				    ['push', 'pull'].map((m) => el('option',
				    { value: m, selected: m === t.mode }, m))),
				url: el('input', { type: 'url', id: 'f-url',
					value: t.callback_url || '',
					placeholder: 'https://...' }),
				timeout: el('input', { type: 'number',
					id: 'f-timeout', min: 1,
					value: t.timeout_ms }),
				inflight: el('input', { type: 'number',
					id: 'f-inflight', min: 1,
					value: t.max_in_flight }),
				ttr: el('input', { type: 'number', id: 'f-ttr',
					min: 1, value: t.ttr_ms }),
				headers: el('textarea', { id: 'f-headers',
					rows: 3 })
			};
			f.headers.value = JSON.stringify(t.headers || {},
			    null, 1);
			const field = (label, id, input, hint) => el('div',
			    { class: 'field' }, el('label', { for: id }, label),
			    input, hint ? el('span', { class: 'hint' }, hint) :
			    null);
			fill(form,
			    el('div', { class: 'grid2' },
			    field('Mode', 'f-mode', f.mode),
			    field('Callback URL', 'f-url', f.url)),
			    el('div', { class: 'field' },
			    el('label', { for: 'f-schedule' }, 'Retry schedule'),
			    sched.input, sched.help),
			    el('div', { class: 'grid2' },
			    field('Timeout (ms)', 'f-timeout', f.timeout),
			    field('Max in flight', 'f-inflight', f.inflight),
			    field('Time to run, pull (ms)', 'f-ttr', f.ttr)),
			    field('Headers (JSON object)', 'f-headers',
			    f.headers),
			    el('div', { class: 'actions' }, save, status));
			form.onsubmit = act(async () => {
				if (!schedOk)
					return;
				let headers;
				try {
					headers = JSON.parse(f.headers.value ||
					    '{}');
				} catch (e) {
					f.headers.className = 'bad';
					status.textContent = 'Headers: ' +
					    'not JSON';
					return;
				}
				f.headers.className = '';
				const body = {
					mode: f.mode.value,
					retry_schedule: schedText,
					timeout_ms: Number(f.timeout.value),
					max_in_flight: Number(f.inflight.value),
					ttr_ms: Number(f.ttr.value),
					headers
				};
				if (f.url.value)
					body.callback_url = f.url.value;
				const r = await api('PUT', '/v1/topics/' +
				    enc(name), body);
				topic = r;
				status.textContent = 'Saved at ' +
				    fmtTime(Date.now()).slice(11) + '.';
				drawSecret();
			});
			sched.check().catch((e) => say(errText(e)));
		}

		function drawSecret() {
			if (!topic)
				return;
			const s = topic.secret || '';
			fill(secretBox,
			    el('p', null, el('span', { class: 'mono',
			    id: 'secret' }, showSecret ? s :
			    s.slice(0, 10) + '•'.repeat(12))),
			    el('p', { class: 'actions' },
			    el('button', { type: 'button', class: 'secondary',
			    onclick: () => {
				showSecret = !showSecret;
				drawSecret();
			    } }, showSecret ? 'Hide' : 'Show'),
			    confirmButton('Rotate secret', 'danger', async () => {
				topic = await api('POST', '/v1/topics/' +
				    enc(name) + '/secret');
				showSecret = true;
				drawSecret();
				say('The secret was rotated: receivers must ' +
				    'use the new one now.', true);
			    })),
			    el('p', { class: 'hint' }, 'Callbacks are signed ' +
			    'with it (webhook-signature).  Rotating takes ' +
			    'effect at once.'));
		}

		async function refresh() {
			const [t, st] = await Promise.all([
				api('GET', '/v1/topics/' + enc(name)),
				api('GET', '/v1/topics/' + enc(name) +
				    '/stats?minutes=60')]);
			topic = t;
			fill(counts, countsGrid(t.counts));
			fill(links, link('#/dead/' + enc(name),
			    'Dead letters (' + num(t.counts.dead) + ')'),
			    ' · ', link('#/jobs?topic=' + enc(name),
			    'Find a job'), ' · ', el('span', { class: 'hint' },
			    t.mode === 'push' ? 'push to ' +
			    (t.callback_url || '-') : 'pull consumers'));
			fill(chartBox, chart(st.minutes));
			const tot = st.total;
			fill(stat, 'Delivered ', el('b', { id: 'hour-ok' },
			    num(tot.delivered)), ' · failed ',
			    el('b', { id: 'hour-failed' }, num(tot.failed)),
			    ' · lateness p50 ', el('b', null,
			    fmtDur(tot.lateness_p50_ms)), ', p99 ',
			    el('b', null, fmtDur(tot.lateness_p99_ms)));
			if (!built) {
				built = true;
				buildForm(t);
				drawSecret();
			}
		}
		return { name: 'topics', node, refresh };
	}

	async function topicOptions(select, chosen, any) {
		const d = await api('GET', '/v1/topics');
		fill(select, any ? el('option', { value: '' }, any) : null,
		    d.topics.map((t) => el('option', { value: t.name,
		    selected: t.name === chosen }, t.name)));
		return d.topics;
	}

	function jobsView(q) {
		const by = el('select', { id: 'search-by' },
		    el('option', { value: 'id', selected: q.get('by') !==
		    'bizkey' }, 'Job id'),
		    el('option', { value: 'bizkey', selected: q.get('by') ===
		    'bizkey' }, 'Bizkey'));
		const text = el('input', { type: 'text', id: 'search-q',
			value: q.get('q') || '', placeholder: 'id or bizkey',
			spellcheck: 'false' });
		const topicSel = el('select', { id: 'search-topic' });
		const results = el('div');
		const form = el('form', { id: 'search-form', class: 'row',
			autocomplete: 'off' },
		    el('div', { class: 'field' }, el('label',
		    { for: 'search-by' }, 'Search by'), by),
		    el('div', { class: 'field' }, el('label',
		    { for: 'search-q' }, 'Value'), text),
		    el('div', { class: 'field' }, el('label',
		    { for: 'search-topic' }, 'Topic'), topicSel),
		    el('div', { class: 'field' },
		    el('button', { type: 'submit' }, 'Search')));
		const node = el('div', null, el('h1', null, 'Jobs',
		    tenantLabel()), el('div', { class: 'card' }, form,
		    el('p', { class: 'hint' }, 'A job id opens the job.  A ' +
		    'bizkey lists the jobs that carry it (newest first); ' +
		    'that needs the journal.')), results);
		let loaded = false;

		async function searchBizkey(v, topic) {
			let d;
			try {
				d = await api('GET', '/v1/jobs?bizkey=' + enc(v) +
				    (topic ? '&topic=' + enc(topic) : '') +
				    '&limit=50');
			} catch (e) {
				if (e.status === 501) {
					fill(results, el('div', { class:
					    'card msg info', id: 'no-journal' },
					    'Searching by bizkey needs the ' +
					    'journal, and it is off on this ' +
					    'server (journal.mode = off).  ' +
					    'Search by job id instead.'));
					return;
				}
				throw e;
			}
			fill(results, el('div', { class: 'card' },
			    el('div', { class: 'scroll' }, el('table',
			    { id: 'search-results' }, el('thead', null,
			    el('tr', null, ['Job', 'Topic', 'State',
			    'Created', 'Attempts'].map((h) => el('th',
			    { class: h === 'Attempts' ? 'num' : null }, h)))),
			    el('tbody', null, d.jobs.length === 0 ?
			    el('tr', { class: 'empty' }, el('td', { colspan: 5 },
			    'No job has that bizkey.')) : d.jobs.map((j) =>
			    el('tr', null, el('td', { class: 'mono' },
			    link('#/job/' + enc(j.id), j.id)),
			    el('td', null, j.topic), el('td', null,
			    badge(j.state)), el('td', null,
			    fmtTime(j.created_ms)), el('td', { class: 'num' },
			    num(j.attempt_count)))))))));
		}

		form.onsubmit = act(async () => {
			const v = text.value.trim();
			if (!v)
				return;
			if (by.value === 'id') {
				location.hash = '#/job/' + enc(v);
				return;
			}
			history.replaceState(null, '', '#/jobs?by=bizkey&q=' +
			    enc(v) + (topicSel.value ? '&topic=' +
			    enc(topicSel.value) : ''));
			await searchBizkey(v, topicSel.value);
		});

		async function refresh() {
			if (loaded)
				return;
			loaded = true;
			await topicOptions(topicSel, q.get('topic'), 'any topic');
			if (q.get('by') === 'bizkey' && q.get('q'))
				await searchBizkey(q.get('q'), q.get('topic'));
		}
		return { name: 'jobs', node, refresh };
	}

	function jobView(id) {
		const head = el('h1', null, 'Job ', el('span', { class: 'mono' },
		    id), tenantLabel());
		const state = el('p');
		const details = el('div', { class: 'card' });
		const actions = el('div', { class: 'card', id: 'job-actions' });
		const attempts = el('div', { class: 'card' });
		const bodyBox = el('div', { class: 'card' });
		const node = el('div', null, head, state, details, actions,
		    attempts, bodyBox);
		let lastState = null;

		function drawActions(j) {
			if (j.state === lastState)
				return;
			lastState = j.state;
			const delay = el('input', { type: 'number',
				id: 'resched-delay', min: 0, value: 60 });
			const parts = [el('h2', null, 'Actions')];
			if (['scheduled', 'retrying'].includes(j.state))
				parts.push(el('form', { class: 'row',
				    id: 'resched-form', onsubmit: act(async () => {
					await api('PATCH', '/v1/jobs/' + enc(id),
					    { delay_ms: Math.round(
					    Number(delay.value) * 1000) });
					say('Rescheduled.', true);
					await refresh();
				    }) }, el('div', { class: 'field' },
				    el('label', { for: 'resched-delay' },
				    'Run in (seconds)'), delay),
				    el('div', { class: 'field' },
				    el('button', { type: 'submit' },
				    'Reschedule'))));
			const btns = el('p', { class: 'actions' });
			if (UNFINISHED.includes(j.state))
				btns.appendChild(confirmButton('Cancel job',
				    'danger', async () => {
					await api('DELETE', '/v1/jobs/' + enc(id));
					say('Cancelled.', true);
					await refresh();
				    }));
			if (j.state === 'dead')
				btns.appendChild(el('button', { type: 'button',
				    id: 'job-retry', onclick: act(async () => {
					await api('POST', '/v1/jobs/' + enc(id) +
					    '/retry');
					say('The job runs its schedule again.',
					    true);
					await refresh();
				    }) }, 'Retry'));
			if (btns.childNodes.length === 0)
				btns.appendChild(el('span', { class: 'hint' },
				    'A ' + j.state + ' job has no actions.'));
			parts.push(btns);
			fill(actions, parts);
		}

		async function refresh() {
			let j;
			try {
				j = await api('GET', '/v1/jobs/' + enc(id));
			} catch (e) {
				if (e.status === 404) {
					fill(state, el('span', { class: 'msg',
					    id: 'job-missing' }, 'No job with ' +
					    'this id (or not this tenant\'s).'));
					details.hidden = actions.hidden = true;
					attempts.hidden = bodyBox.hidden = true;
					return;
				}
				throw e;
			}
			details.hidden = actions.hidden = false;
			attempts.hidden = bodyBox.hidden = false;
			fill(state, el('span', { id: 'job-state' }, badge(j.state)));
			const row = (k, v) => el('tr', null, el('th', null, k),
			    el('td', { class: 'wrap' }, v));
			fill(details, el('h2', null, 'Details'),
			    el('div', { class: 'scroll' }, el('table',
			    { class: 'kv' }, el('tbody', null,
			    row('Topic', link('#/topic/' + enc(j.topic), j.topic)),
			    row('Bizkey', j.bizkey || '-'),
			    row('Priority', String(j.priority)),
			    row('Created', fmtTime(j.created_ms)),
			    row('Next attempt', fmtTime(j.next_attempt_ms)),
			    row('Attempts made', String(j.attempt_count)),
			    row('Own schedule', j.retry_schedule ||
			    '(the topic\'s)')))));
			drawActions(j);
			const list = j.attempts || [];
			fill(attempts, el('h2', null, 'Attempts'),
			    el('div', { class: 'scroll' }, el('table',
			    { id: 'attempts' }, el('thead', null, el('tr', null,
			    ['#', 'Time', 'Status', 'Latency', 'Error',
			    'Response'].map((h) => el('th', { class:
			    ['#', 'Status', 'Latency'].includes(h) ? 'num' :
			    null }, h)))),
			    el('tbody', null, list.length === 0 ?
			    el('tr', { class: 'empty' }, el('td', { colspan: 6 },
			    'No attempt yet.')) : list.map((a, i) => el('tr',
			    null, el('td', { class: 'num' }, String(i + 1)),
			    el('td', null, fmtTime(a.at_ms)),
			    el('td', { class: 'num' }, a.status ?
			    String(a.status) : '-'),
			    el('td', { class: 'num' }, fmtDur(a.latency_ms)),
			    el('td', { class: 'wrap' }, a.error || ''),
			    el('td', { class: 'wrap mono' },
			    a.response === null || a.response === undefined ?
			    '' : String(a.response).slice(0, 300))))))),
			    list.length >= 20 ? el('p', { class: 'hint' },
			    'Redis keeps the last 20 attempts; the journal ' +
			    'keeps all.') : null);
			const body = typeof j.body === 'string' ? j.body :
			    JSON.stringify(j.body, null, 2);
			fill(bodyBox, el('h2', null, 'Body'), el('pre',
			    { id: 'job-body' }, body),
			    Object.keys(j.headers || {}).length ? [el('h2',
			    null, 'Headers'), el('pre', null,
			    JSON.stringify(j.headers, null, 2))] : null);
		}
		return { name: 'jobs', node, refresh };
	}

	function deadView(topic) {
		const sel = el('select', { id: 'dead-topic' });
		const box = el('div');
		const node = el('div', null, el('h1', null, 'Dead letters',
		    tenantLabel()), el('div', { class: 'card row' },
		    el('div', { class: 'field' }, el('label',
		    { for: 'dead-topic' }, 'Topic'), sel)), box);
		let loaded = false;
		sel.addEventListener('change', () => {
			location.hash = sel.value ? '#/dead/' + enc(sel.value) :
			    '#/dead';
		});

		async function overview() {
			const d = await api('GET', '/v1/stats');
			const rows = d.topics.filter((t) => t.counts.dead > 0);
			fill(box, el('div', { class: 'card' }, el('div',
			    { class: 'scroll' }, el('table', { id: 'dead-topics' },
			    el('thead', null, el('tr', null, el('th', null,
			    'Topic'), el('th', { class: 'num' }, 'Dead'))),
			    el('tbody', null, rows.length === 0 ?
			    el('tr', { class: 'empty' }, el('td', { colspan: 2 },
			    'No dead jobs in any topic.')) : rows.map((t) =>
			    el('tr', null, el('td', null, link('#/dead/' +
			    enc(t.name), t.name)), el('td', { class: 'num' },
			    num(t.counts.dead)))))))));
		}

		/* Made once per page, so a refresh never disarms it. */
		let redrive = null;
		const tableBox = el('div', { class: 'scroll' });
		const more = el('p', { class: 'hint' });

		async function list() {
			const d = await api('GET', '/v1/topics/' + enc(topic) +
			    '/dead?limit=100');
			if (!redrive) {
				redrive = confirmButton('Redrive all', 'danger',
				    async () => {
					const r = await api('POST',
					    '/v1/topics/' + enc(topic) +
					    '/dead:redrive');
					say(num(r.redriven) + ' job' +
					    (r.redriven === 1 ? '' : 's') +
					    ' will run again' + (r.skipped ?
					    '; ' + num(r.skipped) + ' left ' +
					    'dead: another unfinished job ' +
					    'holds its bizkey.' : '.'), true);
					/* Not awaited: the button is enabled
					 * again first, then the list decides. */
					refresh().catch((e) => say(errText(e)));
				    });
				redrive.id = 'redrive-all';
				fill(box, el('div', { class: 'card' },
				    el('p', { class: 'actions' }, redrive,
				    el('span', { class: 'hint' }, 'Each dead ' +
				    'job runs its schedule again from now.')),
				    tableBox, more));
			}
			if (!redrive.classList.contains('armed'))
				redrive.disabled = d.jobs.length === 0;
			fill(tableBox, el('table',
			    { id: 'dead-jobs' }, el('thead', null, el('tr', null,
			    ['Job', 'Bizkey', 'Attempts', 'Created', ''].map(
			    (h) => el('th', { class: h === 'Attempts' ? 'num' :
			    null }, h)))), el('tbody', null,
			    d.jobs.length === 0 ? el('tr', { class: 'empty' },
			    el('td', { colspan: 5 }, 'No dead jobs in ' +
			    topic + '.')) : d.jobs.map((j) => el('tr',
			    { 'data-job': j.id }, el('td', { class: 'mono' },
			    link('#/job/' + enc(j.id), j.id)),
			    el('td', null, j.bizkey || '-'),
			    el('td', { class: 'num' }, num(j.attempt_count)),
			    el('td', null, fmtTime(j.created_ms)),
			    el('td', null, el('button', { type: 'button',
			    class: 'secondary retry-one', onclick:
			    act(async () => {
				await api('POST', '/v1/jobs/' + enc(j.id) +
				    '/retry');
				say('Job ' + j.id + ' will run again.', true);
				await refresh();
			    }) }, 'Retry')))))));
			more.textContent = d.next_cursor ?
			    'Showing the newest 100.' : '';
		}

		async function refresh() {
			if (!loaded) {
				loaded = true;
				await topicOptions(sel, topic, 'choose a topic');
			}
			if (topic)
				await list();
			else
				await overview();
		}
		return { name: 'dead', node, refresh };
	}

	/* ---- routing and polling ----------------------------------------- */

	function parseHash() {
		let h = window.location.hash.replace(/^#\/?/, '');
		let query = '';
		const qi = h.indexOf('?');
		if (qi >= 0) {
			query = h.slice(qi + 1);
			h = h.slice(0, qi);
		}
		let parts;
		try {
			parts = h.split('/').map(decodeURIComponent);
		} catch (e) {
			parts = ['topics'];
		}
		return { parts, q: new URLSearchParams(query) };
	}

	function makeView() {
		const { parts, q } = parseHash();
		if (!S.tenant)
			return { name: 'topics', node: noTenant(),
				refresh: async () => {} };
		switch (parts[0]) {
		case 'topic':
			if (parts[1])
				return topicView(parts[1]);
			break;
		case 'jobs':
			return jobsView(q);
		case 'job':
			if (parts[1])
				return jobView(parts[1]);
			break;
		case 'dead':
			return deadView(parts[1] || '');
		}
		return topicsView();
	}

	async function refreshNow() {
		const v = S.view;
		if (!v || S.busy || S.switching)
			return;
		S.busy = true;
		S.passes = (S.passes || 0) + 1;
		try {
			await v.refresh();
			if (v === S.view)
				$('updated').textContent = 'Updated ' +
				    fmtTime(Date.now()).slice(11) +
				    ' · refreshes every ' + POLL_MS / 1000 + ' s';
		} finally {
			S.busy = false;
			S.passes--;
		}
	}

	function route() {
		if (!S.key)
			return;
		const v = makeView();
		S.view = v;
		for (const a of $('nav').querySelectorAll('a'))
			a.classList.toggle('active', a.dataset.view === v.name);
		fill($('content'), v.node);
		say('');
		S.busy = false;
		act(refreshNow)();
	}

	function poll() {
		if (document.hidden || !S.view)
			return;
		act(refreshNow)();
	}

	/* ---- start ------------------------------------------------------- */

	function start() {
		$('login-form').addEventListener('submit', act(async () => {
			const key = $('login-key').value.trim();
			if (!key)
				return;
			try {
				await login(key);
			} catch (e) {
				S.key = null;
				say(e instanceof ApiError && e.status === 401 ?
				    'That key is not valid.' : errText(e));
				return;
			}
			if (!window.location.hash)
				history.replaceState(null, '', '#/topics');
			route();
		}));
		$('logout').addEventListener('click', () => logout(''));
		$('refresh').addEventListener('click', act(refreshNow));
		$('tenant-select').addEventListener('change', act(async () => {
			/*
			 * A refresh in flight reads S.tenant for each of its
			 * requests: let it finish before the tenant changes,
			 * and start none meanwhile, or it would ask for the old
			 * tenant's topics as the new one (404s).
			 */
			S.switching = true;
			try {
				while (S.passes > 0)
					await new Promise((r) => setTimeout(r, 10));
				S.tenant = $('tenant-select').value;
				store.setItem('retryd.tenant', S.tenant);
			} finally {
				S.switching = false;
			}
			if (window.location.hash === '#/topics')
				route();
			else
				window.location.hash = '#/topics';
		}));
		window.addEventListener('hashchange', route);
		setInterval(poll, POLL_MS);

		const key = store.getItem('retryd.key');
		if (!key) {
			logout('');
			return;
		}
		login(key).then(route).catch((e) => {
			logout(e instanceof ApiError && e.status === 401 ?
			    'The saved key is no longer valid.' : errText(e));
		});
	}

	start();
})();
