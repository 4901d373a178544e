// sylvite web console (issue 19): a pure client of the salt-api rest_cherrypy REST API
// (POST /login, POST / lowstate, GET /minions /jobs /keys, GET /events as Server-Sent
// Events). Works against sylvite's built-in API (served under /console/) and against real
// salt-api. Vanilla JS, no framework, no build step.
// Safety rule: every string that comes from the API (minion ids, returns, event data,
// error texts) reaches the DOM only through textContent / text nodes / setAttribute:
// this file never assigns innerHTML.
'use strict';
(function () {
  // ---- state ------------------------------------------------------------------------------
  const STORE = 'sylvite.console.session';
  const SEEN = 'sylvite.console.lastseen';
  const S = { token: null, user: '', eauth: '', expire: 0 };
  let cleanup = null;  // the current page's teardown (closes the event stream)

  // The API root: the console lives at <root>/console/..., the API at <root>/.
  const BASE = (function () {
    const p = location.pathname;
    const i = p.indexOf('/console');
    return i >= 0 ? p.slice(0, i) : '';
  })();

  const TARGET_TYPES = [
    ['glob', 'glob (web*)'], ['pcre', 'pcre (regex)'], ['list', 'list (a,b,c)'],
    ['grain', 'grain (os:Debian)'], ['grain_pcre', 'grain_pcre'], ['pillar', 'pillar (role:web)'],
    ['pillar_pcre', 'pillar_pcre'], ['nodegroup', 'nodegroup'], ['range', 'range'],
    ['compound', 'compound (G@os:Debian and web*)'], ['ipcidr', 'ipcidr (10.0.0.0/8)'],
  ];

  // ---- DOM helpers (text only) ------------------------------------------------------------
  function el(tag, attrs) {
    const e = document.createElement(tag);
    if (attrs) {
      for (const k of Object.keys(attrs)) {
        const v = attrs[k];
        if (v === null || v === undefined || v === false) continue;
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = String(v);
        else if (k.startsWith('on') && typeof v === 'function') e.addEventListener(k.slice(2), v);
        else e.setAttribute(k, v === true ? '' : String(v));
      }
    }
    for (let i = 2; i < arguments.length; i++) add(e, arguments[i]);
    return e;
  }
  function add(parent, c) {
    if (c === null || c === undefined || c === false || c === '') return;
    if (Array.isArray(c)) { c.forEach((x) => add(parent, x)); return; }
    parent.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
  const main = () => document.getElementById('main');

  function notice(kind, msg) {
    let n = document.getElementById('notice');
    if (!n) return;
    clear(n);
    n.className = 'notice ' + kind;
    n.hidden = !msg;
    if (msg) n.append(document.createTextNode(msg));
  }

  function pretty(v) {
    if (typeof v === 'string') return v;
    try { return JSON.stringify(v, null, 2); } catch (e) { return String(v); }
  }

  function badge(text, kind) { return el('span', { class: 'badge ' + (kind || '') , text: text }); }

  // A table that becomes a list of cards on a phone (CSS uses data-label).
  function table(headers, rows, attrs) {
    const thead = el('thead', null, el('tr', null, headers.map((h) => el('th', { scope: 'col', text: h }))));
    const tbody = el('tbody');
    for (const r of rows) {
      const tr = el('tr', r.attrs || null);
      r.cells.forEach((c, i) => tr.append(el('td', { 'data-label': headers[i] }, c)));
      tbody.append(tr);
    }
    return el('div', { class: 'table-wrap' }, el('table', Object.assign({ class: 'rtable' }, attrs || {}), thead, tbody));
  }

  function jidTime(jid) {
    const m = /^(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})/.exec(String(jid));
    return m ? `${m[1]}-${m[2]}-${m[3]} ${m[4]}:${m[5]}:${m[6]}` : '';
  }
  function ago(ms) {
    const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
    if (s < 60) return s + ' s ago';
    if (s < 3600) return Math.floor(s / 60) + ' min ago';
    if (s < 86400) return Math.floor(s / 3600) + ' h ago';
    return Math.floor(s / 86400) + ' d ago';
  }

  // ---- API --------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, msg) { super(msg); this.status = status; }
  }

  function errorText(text) {
    try {
      const j = JSON.parse(text);
      if (j && j.return) return String(j.return);
      if (j && j.message) return String(j.message);
    } catch (e) { /* not JSON: cherrypy's HTML error page */ }
    const t = /<p>([^<]*)<\/p>/.exec(text) || /<title>([^<]*)<\/title>/.exec(text);
    return (t ? t[1] : text).replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ').trim().slice(0, 300);
  }

  async function api(method, path, body) {
    const headers = { Accept: 'application/json' };
    if (S.token) headers['X-Auth-Token'] = S.token;
    const opt = { method: method, headers: headers, credentials: 'same-origin' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      opt.body = JSON.stringify(body);
    }
    let r;
    try {
      r = await fetch(BASE + path, opt);
    } catch (e) {
      throw new ApiError(0, 'cannot reach the API: ' + e.message);
    }
    const text = await r.text();
    if (r.status === 401 && path !== '/login') {
      // salt-api answers 401 both for a dead session and for a call the user's eauth ACL
      // refuses: only the first ends the session.
      if (await sessionAlive()) throw new ApiError(401, 'refused: not allowed for this user (eauth ACL)');
      dropSession('Your session expired; log in again.');
      throw new ApiError(401, 'not authenticated');
    }
    if (r.status === 403) throw new ApiError(403, 'refused: not allowed for this user (eauth ACL)');
    if (!r.ok) throw new ApiError(r.status, `${r.status} ${errorText(text) || r.statusText}`);
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new ApiError(r.status, 'the API did not answer JSON');
    }
  }

  // Is the session still alive? GET /events needs nothing but a valid token (no ACL):
  // open it, read the status, abort the stream.
  async function sessionAlive() {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), 5000);
    try {
      const r = await fetch(BASE + '/events', { headers: { Accept: 'text/event-stream', 'X-Auth-Token': S.token || '' },
        credentials: 'same-origin', signal: ctl.signal });
      return r.status !== 401;
    } catch (e) {
      return true;  // unreachable or slow: keep the session, the next call will tell
    } finally {
      clearTimeout(timer);
      ctl.abort();
    }
  }

  // One lowstate chunk through POST /; the `return` list of the reply.
  async function lowstate(chunk) {
    const r = await api('POST', '/', [chunk]);
    return (r && Array.isArray(r.return)) ? r.return : [];
  }
  async function runner(fun, kw) {
    const r = await lowstate(Object.assign({ client: 'runner', fun: fun }, kw || {}));
    return r[0];
  }
  // A wheel call: {success, return} from the reply's data.
  async function wheel(fun, kw) {
    const r = await lowstate(Object.assign({ client: 'wheel', fun: fun }, kw || {}));
    const d = (r[0] && r[0].data) || {};
    return { success: d.success !== false, ret: d.return };
  }
  // Salt answers an unknown runner with a string like "'x.y' is not available."
  function notAvailable(ret) {
    return typeof ret === 'string' && / is not available\.?$/.test(ret);
  }

  // ---- session ----------------------------------------------------------------------------
  function loadSession() {
    try {
      const s = JSON.parse(sessionStorage.getItem(STORE) || 'null');
      if (s && s.token && (!s.expire || s.expire * 1000 > Date.now())) Object.assign(S, s);
    } catch (e) { /* ignore */ }
  }
  function saveSession() { sessionStorage.setItem(STORE, JSON.stringify(S)); }
  function dropSession(msg) {
    S.token = null;
    sessionStorage.removeItem(STORE);
    showChrome();
    if (location.hash !== '#/login') location.hash = '#/login';
    setTimeout(() => notice('error', msg || ''), 0);
  }
  function showChrome() {
    const on = !!S.token;
    document.getElementById('nav').hidden = !on;
    document.getElementById('who').hidden = !on;
    document.getElementById('who-name').textContent = on ? `${S.user} (${S.eauth})` : '';
  }

  function lastSeen() {
    try { return JSON.parse(localStorage.getItem(SEEN) || '{}') || {}; } catch (e) { return {}; }
  }
  function markSeen(ids) {
    const m = lastSeen();
    const now = Date.now();
    ids.forEach((id) => { m[id] = now; });
    try { localStorage.setItem(SEEN, JSON.stringify(m)); } catch (e) { /* full */ }
  }

  // ---- router -----------------------------------------------------------------------------
  const PAGES = Object.create(null);
  function route() {
    if (cleanup) { try { cleanup(); } catch (e) { /* ignore */ } cleanup = null; }
    const h = location.hash.replace(/^#\/?/, '');
    const parts = h.split('/').map((p) => { try { return decodeURIComponent(p); } catch (e) { return p; } });
    let page = parts[0] || 'minions';
    if (!S.token) page = 'login';
    else if (page === 'login') page = 'minions';
    if (!PAGES[page]) page = 'minions';
    document.querySelectorAll('#nav a').forEach((a) => {
      a.classList.toggle('active', a.dataset.page === page || (page === 'job' && a.dataset.page === 'jobs') ||
        (page === 'minion' && a.dataset.page === 'minions'));
    });
    const m = clear(main());
    m.dataset.page = page;
    m.append(el('div', { id: 'notice', class: 'notice', hidden: true }));
    const c = el('section', { class: 'page', id: 'page-' + page });
    m.append(c);
    document.title = 'sylvite: ' + page;
    const r = PAGES[page](c, parts.slice(1));
    if (typeof r === 'function') cleanup = r;
  }

  function pageHead(c, title, onRefresh, extra) {
    const h = el('div', { class: 'page-head' }, el('h1', { text: title }));
    if (extra) add(h, extra);
    if (onRefresh) h.append(el('button', { type: 'button', class: 'refresh', onclick: onRefresh, text: 'Refresh' }));
    c.append(h);
  }

  function failBox(where, e) {
    return el('p', { class: 'error' }, `${where}: ${e && e.message ? e.message : e}`);
  }

  // ---- login ------------------------------------------------------------------------------
  PAGES.login = function (c) {
    const last = localStorage.getItem('sylvite.console.eauth') || 'pam';
    const eauth = el('input', { id: 'login-eauth', name: 'eauth', list: 'eauth-list', value: last, required: true,
      autocomplete: 'off', autocapitalize: 'none' });
    const user = el('input', { id: 'login-user', name: 'username', required: true, autocomplete: 'username',
      autocapitalize: 'none' });
    const pass = el('input', { id: 'login-pass', name: 'password', type: 'password', autocomplete: 'current-password' });
    const btn = el('button', { id: 'login-submit', type: 'submit', class: 'primary', text: 'Log in' });
    const form = el('form', { class: 'card login' },
      el('h1', { text: 'Log in' }),
      el('label', null, 'External auth', eauth),
      el('datalist', { id: 'eauth-list' }, ['pam', 'file', 'ldap', 'auto'].map((v) => el('option', { value: v }))),
      el('label', null, 'User', user),
      el('label', null, 'Password', pass),
      btn);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      btn.disabled = true;
      notice('', '');
      try {
        const r = await api('POST', '/login', { eauth: eauth.value.trim(), username: user.value, password: pass.value });
        const t = r && r.return && r.return[0];
        if (!t || !t.token) throw new ApiError(0, 'the API gave no token');
        Object.assign(S, { token: t.token, user: t.user || user.value, eauth: t.eauth || eauth.value, expire: t.expire || 0 });
        saveSession();
        localStorage.setItem('sylvite.console.eauth', eauth.value.trim());
        showChrome();
        location.hash = '#/minions';
        route();
      } catch (e) {
        notice('error', e.status === 401 ? 'Login refused: wrong user, password or eauth backend.' : 'Login failed: ' + e.message);
        btn.disabled = false;
      }
    });
    c.append(form);
    (user.value ? pass : user).focus();
  };

  // ---- minions ----------------------------------------------------------------------------
  PAGES.minions = function (c) {
    const body = el('div', { id: 'minions-body' }, el('p', { class: 'muted', text: 'Loading keys…' }));
    const status = el('p', { class: 'muted small', id: 'minions-status' });
    pageHead(c, 'Minions', () => route());
    c.append(status, body);
    const st = { keys: null, up: null, down: null, present: null, presence: null, grains: null, master: '', errors: [] };
    let alive = true;

    function render() {
      if (!alive) return;
      clear(body);
      if (st.errors.length) body.append(el('div', { class: 'errors' }, st.errors.map((e) => failBox(e[0], e[1]))));
      if (!st.keys) return;
      const seen = lastSeen();
      const ids = new Map();
      const kinds = [['minions', 'accepted', 'ok'], ['minions_pre', 'pending', 'warn'],
        ['minions_rejected', 'rejected', 'bad'], ['minions_denied', 'denied', 'bad']];
      for (const [k, label, kind] of kinds) for (const id of (st.keys[k] || [])) if (!ids.has(id)) ids.set(id, [label, kind]);
      if (!ids.size) { body.append(el('p', { class: 'muted', text: 'No minion keys yet.' })); return; }
      const rows = [];
      for (const [id, [label, kind]] of [...ids.entries()].sort((a, b) => a[0].localeCompare(b[0]))) {
        let state = badge('…', '');
        if (label !== 'accepted') state = badge('—', '');
        else if (st.up && st.up.includes(id)) state = badge('up', 'ok');
        else if (st.down && st.down.includes(id)) state = badge('down', 'bad');
        // Connected master and last seen: from sylvite.minions (the master's record, cluster
        // wide), else manage.present and what this browser saw (real salt-api).
        let conn = '', seenCell = '';
        const p = st.presence && Object.prototype.hasOwnProperty.call(st.presence, id) ? st.presence[id] : null;
        if (st.presence) {
          if (p && p.connected && p.master) {
            const others = Array.isArray(p.masters) ? p.masters.filter((m) => m !== p.master) : [];
            conn = el('span', { class: 'conn-master', 'data-master': String(p.master),
              text: String(p.master) + (others.length ? ' (+' + others.join(', ') + ')' : '') });
          } else if (label === 'accepted') conn = el('span', { class: 'muted', text: 'not connected' });
          const t = p && p.last_seen ? Date.parse(p.last_seen) : NaN;
          if (!Number.isNaN(t)) seenCell = el('time', { class: 'last-seen', datetime: String(p.last_seen), title: String(p.last_seen), text: ago(t) });
          else if (label === 'accepted') seenCell = el('span', { class: 'muted last-seen', text: 'never' });
        } else {
          if (st.present && Object.prototype.hasOwnProperty.call(st.present, id)) {
            conn = (st.master || 'this master') + (st.present[id] ? ' (' + st.present[id] + ')' : '');
          } else if (st.present) conn = label === 'accepted' ? 'not connected' : '';
          if (seen[id]) seenCell = el('span', { title: new Date(seen[id]).toISOString(), text: ago(seen[id]) });
        }
        const g = st.grains && st.grains[id] && typeof st.grains[id] === 'object' ? st.grains[id] : null;
        const ipv4 = g && Array.isArray(g.ipv4) ? g.ipv4.filter((a) => a !== '127.0.0.1').join(', ') || g.ipv4.join(', ') : '';
        rows.push({
          attrs: { 'data-minion': id },
          cells: [el('a', { class: 'mid', href: '#/minion/' + encodeURIComponent(id), text: id }), badge(label, kind), state, conn,
            seenCell, g ? String(g.os || '') : '', g ? String(g.osrelease || '') : '', ipv4],
        });
      }
      body.append(table(['Minion', 'Key', 'Status', 'Connected master', 'Last seen', 'OS', 'Release', 'IPv4'], rows,
        { id: 'minions-table', 'data-source': st.presence ? 'sylvite.minions' : 'manage.present' }));
      body.append(el('p', { class: 'muted small', id: 'minions-legend', text: st.presence
        ? 'Connected master: the master holding the minion\'s publish connection (cluster wide). ' +
          'Last seen: the last time a master heard from the minion (connection, authentication, return, pillar, mine, event). ' +
          'From the sylvite.minions runner.'
        : 'Last seen: the last time this browser saw the minion answer (status ping or job return). ' +
          'Connected master: manage.present (the minions connected to the master this console talks to).' }));
    }

    status.textContent = 'Asking the minions (manage.status)…';
    api('GET', '/keys').then((r) => { st.keys = (r && r.return) || {}; render(); })
      .catch((e) => { st.errors.push(['keys', e]); render(); });
    runner('manage.status').then((r) => {
      if (r && typeof r === 'object') {
        st.up = r.up || []; st.down = r.down || [];
        markSeen(st.up);
        status.textContent = `${st.up.length} up, ${st.down.length} down`;
      } else status.textContent = 'manage.status: ' + pretty(r);
      render();
    }).catch((e) => { status.textContent = ''; st.errors.push(['manage.status', e]); render(); });
    runner('manage.present', { show_ip: true }).then((r) => {
      if (r && typeof r === 'object' && !Array.isArray(r)) st.present = r;
      else if (Array.isArray(r)) { st.present = {}; r.forEach((id) => { st.present[id] = ''; }); }
      render();
    }).catch((e) => { st.errors.push(['manage.present', e]); render(); });
    runner('cluster.peers').then((r) => {
      if (r && typeof r === 'object' && r.id) { st.master = String(r.id); render(); }
    }).catch(() => { /* not a sylvite cluster: "this master" */ });
    runner('sylvite.minions').then((r) => {
      // sylvite's presence record; real salt-api answers "... is not available."
      if (r && typeof r === 'object' && !Array.isArray(r)) { st.presence = r; render(); }
    }).catch(() => { /* an older sylvite or salt-api: the fallbacks above */ });
    api('GET', '/minions').then((r) => {
      const g = {};
      for (const part of (r && r.return) || []) if (part && typeof part === 'object') Object.assign(g, part);
      st.grains = g;
      render();
    }).catch((e) => { st.errors.push(['grains (/minions)', e]); render(); });
    return () => { alive = false; };
  };

  // ---- one minion: key fingerprint and all grains ------------------------------------------
  PAGES.minion = function (c, args) {
    const id = args[0] || '';
    const body = el('div', { id: 'minion-body' }, el('p', { class: 'muted', text: 'Loading…' }));
    pageHead(c, 'Minion ' + id, () => route(), el('a', { href: '#/minions', class: 'back', text: '← all minions' }));
    c.append(body);
    const key = el('div', { class: 'card' }, el('h2', { text: 'Key' }), el('p', { class: 'muted', text: 'Loading…' }));
    const grains = el('div', { class: 'card' }, el('h2', { text: 'Grains' }), el('p', { class: 'muted', text: 'Loading…' }));
    clear(body).append(key, grains);
    api('GET', '/keys/' + encodeURIComponent(id)).then((r) => {
      const k = (r && r.return) || {};
      const dl = el('dl', { class: 'kv' });
      for (const state of Object.keys(k)) {
        if (!k[state] || typeof k[state] !== 'object') continue;
        for (const mid of Object.keys(k[state])) dl.append(el('dt', { text: state }), el('dd', { class: 'mid', text: `${mid}: ${k[state][mid]}` }));
      }
      key.replaceChildren(el('h2', { text: 'Key' }), dl.childNodes.length ? dl : el('p', { class: 'muted', text: 'no key' }));
    }).catch((e) => key.replaceChildren(el('h2', { text: 'Key' }), failBox('key', e)));
    api('GET', '/minions/' + encodeURIComponent(id)).then((r) => {
      let g = null;
      for (const part of (r && r.return) || []) if (part && typeof part === 'object' && id in part) g = part[id];
      grains.replaceChildren(el('h2', { text: 'Grains' }), g ? el('pre', { class: 'ret', text: pretty(g) })
        : el('p', { class: 'muted', text: 'The minion did not answer.' }));
    }).catch((e) => grains.replaceChildren(el('h2', { text: 'Grains' }), failBox('grains', e)));
  };

  // ---- jobs -------------------------------------------------------------------------------
  PAGES.jobs = function (c) {
    const filter = el('input', { id: 'jobs-filter', type: 'search', placeholder: 'filter: function, target, user, jid' });
    const all = el('input', { id: 'jobs-all', type: 'checkbox' });
    const body = el('div', { id: 'jobs-body' }, el('p', { class: 'muted', text: 'Loading jobs…' }));
    pageHead(c, 'Jobs', () => route());
    c.append(el('div', { class: 'toolbar' }, filter, el('label', { class: 'inline' }, all, 'runner & internal jobs')), body);
    let jobs = null;
    function render() {
      clear(body);
      if (!jobs) return;
      const q = filter.value.trim().toLowerCase();
      let list = Object.keys(jobs).map((jid) => [jid, jobs[jid] || {}]);
      if (!all.checked) {
        list = list.filter(([, j]) => {
          const f = String(j.Function || '');
          return !f.startsWith('runner.') && !f.startsWith('wheel.') && f !== 'saltutil.find_job';
        });
      }
      if (q) list = list.filter(([jid, j]) => [jid, j.Function, j.Target, j.User].some((v) => String(v || '').toLowerCase().includes(q)));
      list.sort((a, b) => (a[0] < b[0] ? 1 : -1));
      const shown = list.slice(0, 300);
      if (!shown.length) { body.append(el('p', { class: 'muted', text: 'No jobs.' })); return; }
      body.append(table(['JID', 'Function', 'Arguments', 'Target', 'User', 'Started'], shown.map(([jid, j]) => ({
        attrs: { 'data-jid': jid },
        cells: [el('a', { href: '#/job/' + encodeURIComponent(jid), class: 'jid', text: jid }), String(j.Function || ''),
          el('span', { class: 'args', text: Array.isArray(j.Arguments) ? j.Arguments.map((a) => typeof a === 'string' ? a : JSON.stringify(a)).join(' ') : '' }),
          `${typeof j.Target === 'string' ? j.Target : JSON.stringify(j.Target)} (${j['Target-type'] || 'glob'})`,
          String(j.User || ''), String(j.StartTime || jidTime(jid))],
      })), { id: 'jobs-table' }));
      if (list.length > shown.length) body.append(el('p', { class: 'muted small', text: `${list.length - shown.length} older jobs not shown; filter to find them.` }));
    }
    filter.addEventListener('input', render);
    all.addEventListener('change', render);
    api('GET', '/jobs').then((r) => { jobs = (r && r.return && r.return[0]) || {}; if (typeof jobs !== 'object') jobs = {}; render(); })
      .catch((e) => clear(body).append(failBox('jobs', e)));
  };

  // ---- returns and highstate --------------------------------------------------------------
  function isHighstate(v) {
    if (!v || typeof v !== 'object' || Array.isArray(v)) return false;
    const keys = Object.keys(v);
    return keys.length > 0 && keys.every((k) => k.includes('_|-') && v[k] && typeof v[k] === 'object' && 'result' in v[k]);
  }

  function highstateView(v) {
    const entries = Object.keys(v).map((k) => [k, v[k]]);
    entries.sort((a, b) => (a[1].__run_num__ || 0) - (b[1].__run_num__ || 0));
    let ok = 0, failed = 0, changed = 0, dur = 0;
    const rows = entries.map(([k, s]) => {
      const p = k.split('_|-');
      const hasChanges = s.changes && typeof s.changes === 'object' && Object.keys(s.changes).length > 0;
      if (s.result === false) failed++; else ok++;
      if (hasChanges) changed++;
      if (typeof s.duration === 'number') dur += s.duration;
      const res = s.result === true ? badge('True', 'ok') : s.result === false ? badge('False', 'bad') : badge('None', 'warn');
      return {
        attrs: { class: s.result === false ? 'row-bad' : hasChanges ? 'row-changed' : '' },
        cells: [String(s.__id__ || p[1] || k), `${p[0] || ''}.${p[3] || ''}`, String(s.name !== undefined ? s.name : p[2] || ''), res,
          el('span', { class: 'comment', text: Array.isArray(s.comment) ? s.comment.join('\n') : String(s.comment === undefined ? '' : s.comment) }),
          hasChanges ? el('pre', { class: 'changes', text: pretty(s.changes) }) : '',
          typeof s.duration === 'number' ? s.duration.toFixed(1) + ' ms' : String(s.duration || '')],
      };
    });
    const summary = el('p', { class: 'hs-summary' }, badge(`${ok} succeeded`, 'ok'), ' ', badge(`${changed} changed`, changed ? 'warn' : ''), ' ',
      badge(`${failed} failed`, failed ? 'bad' : ''), ` ${entries.length} states, ${dur.toFixed(1)} ms`);
    return el('div', { class: 'highstate' }, summary,
      table(['State', 'Function', 'Name', 'Result', 'Comment', 'Changes', 'Duration'], rows, { class: 'rtable hs' }));
  }

  function returnView(v) {
    if (isHighstate(v)) return highstateView(v);
    if (v === true || v === false) return badge(v ? 'True' : 'False', v ? 'ok' : 'bad');
    return el('pre', { class: 'ret', text: pretty(v) });
  }

  // Per-minion returns as cards; `expected` lists minions that have not answered yet.
  function returnsView(rets, expected, extra) {
    const ids = new Set(Object.keys(rets || {}));
    (expected || []).forEach((m) => ids.add(m));
    const wrap = el('div', { class: 'returns' });
    for (const id of [...ids].sort()) {
      const has = rets && Object.prototype.hasOwnProperty.call(rets, id);
      const x = extra && extra[id];
      const head = el('div', { class: 'ret-head' }, el('span', { class: 'mid', text: id }), ' ',
        has ? null : badge('no return', 'warn'),
        x && x.retcode !== undefined && x.retcode !== null ? badge('retcode ' + x.retcode, x.retcode ? 'bad' : 'ok') : null);
      wrap.append(el('div', { class: 'card ret-card', 'data-minion': id }, head, has ? returnView(rets[id]) : null));
    }
    if (!ids.size) wrap.append(el('p', { class: 'muted', text: 'No minion answered.' }));
    return wrap;
  }

  // ---- job detail -------------------------------------------------------------------------
  PAGES.job = function (c, args) {
    const jid = args[0] || '';
    const body = el('div', { id: 'job-body' }, el('p', { class: 'muted', text: 'Loading job…' }));
    pageHead(c, 'Job ' + jid, () => load(), el('a', { href: '#/jobs', class: 'back', text: '← all jobs' }));
    c.append(body);
    let timer = null, tries = 0, alive = true;
    async function load() {
      try {
        const r = await api('GET', '/jobs/' + encodeURIComponent(jid));
        if (!alive) return;
        const info = (r.info && r.info[0]) || {};
        const rets = (r.return && r.return[0]) || {};
        const expected = Array.isArray(info.Minions) ? info.Minions : [];
        if (Object.keys(rets).length) markSeen(Object.keys(rets));
        clear(body);
        if (info.Error) body.append(el('p', { class: 'error', text: String(info.Error) }));
        const dl = el('dl', { class: 'kv' });
        const row = (k, v) => dl.append(el('dt', { text: k }), el('dd', { text: v }));
        row('Function', String(info.Function || ''));
        row('Arguments', Array.isArray(info.Arguments) ? info.Arguments.map((a) => typeof a === 'string' ? a : JSON.stringify(a)).join(' ') : '');
        row('Target', `${typeof info.Target === 'string' ? info.Target : JSON.stringify(info.Target || '')} (${info['Target-type'] || 'glob'})`);
        row('User', String(info.User || ''));
        row('Started', String(info.StartTime || jidTime(jid)));
        row('Returned', `${Object.keys(rets).length} of ${expected.length || Object.keys(rets).length}`);
        body.append(el('div', { class: 'card' }, dl), returnsView(rets, expected, info.Result));
        const missing = expected.filter((m) => !(m in rets));
        if (missing.length && tries++ < 20) timer = setTimeout(load, 3000);
      } catch (e) {
        if (alive) clear(body).append(failBox('job ' + jid, e));
      }
    }
    load();
    return () => { alive = false; clearTimeout(timer); };
  };

  // ---- run --------------------------------------------------------------------------------
  // Shell-like split ("a b" 'c d' e\ f); key=value tokens become kwargs.
  function splitArgs(s) {
    const out = [];
    let cur = '', q = null, any = false;
    for (let i = 0; i < s.length; i++) {
      const ch = s[i];
      if (q) {
        if (ch === q) q = null;
        else if (ch === '\\' && q === '"' && i + 1 < s.length) cur += s[++i];
        else cur += ch;
      } else if (ch === '"' || ch === "'") { q = ch; any = true; }
      else if (ch === '\\' && i + 1 < s.length) { cur += s[++i]; any = true; }
      else if (/\s/.test(ch)) { if (cur || any) out.push(cur); cur = ''; any = false; }
      else cur += ch;
    }
    if (q) throw new Error('unbalanced quote in the arguments');
    if (cur || any) out.push(cur);
    return out;
  }
  function scalar(v) {
    if (/^(true|True)$/.test(v)) return true;
    if (/^(false|False)$/.test(v)) return false;
    if (/^-?\d+(\.\d+)?$/.test(v)) return Number(v);
    if (/^[[{]/.test(v)) { try { return JSON.parse(v); } catch (e) { /* a string */ } }
    return v;
  }

  PAGES.run = function (c) {
    pageHead(c, 'Run');
    const tgt = el('input', { id: 'run-tgt', value: '*', required: true, autocapitalize: 'none', autocomplete: 'off' });
    const type = el('select', { id: 'run-tgt-type' }, TARGET_TYPES.map(([v, l]) => el('option', { value: v, text: l })));
    const fun = el('input', { id: 'run-fun', value: 'test.ping', required: true, list: 'fun-list', autocapitalize: 'none', autocomplete: 'off' });
    const funs = el('datalist', { id: 'fun-list' }, ['test.ping', 'test.version', 'grains.items', 'grains.item', 'state.apply',
      'state.highstate', 'state.test', 'cmd.run', 'pkg.list_upgrades', 'service.status', 'saltutil.sync_all', 'sys.doc']
      .map((f) => el('option', { value: f })));
    const args = el('input', { id: 'run-args', placeholder: 'e.g.  uptime   or   os osrelease   or   test=True', autocapitalize: 'none', autocomplete: 'off' });
    const batch = el('input', { id: 'run-batch', placeholder: 'e.g. 2 or 25%', autocomplete: 'off', size: 6 });
    const asyncBox = el('input', { id: 'run-async', type: 'checkbox' });
    const timeout = el('input', { id: 'run-timeout', type: 'number', min: 1, placeholder: 'default', size: 6 });
    const btn = el('button', { id: 'run-submit', type: 'submit', class: 'primary', text: 'Run' });
    const out = el('div', { id: 'run-result' });
    const form = el('form', { class: 'card run-form' },
      el('div', { class: 'grid2' }, el('label', null, 'Target', tgt), el('label', null, 'Target type', type)),
      el('label', null, 'Function', fun), funs,
      el('label', null, 'Arguments (space separated, key=value for keyword arguments)', args),
      el('div', { class: 'grid3' }, el('label', null, 'Batch size (optional)', batch),
        el('label', null, 'Timeout (s)', timeout),
        el('label', { class: 'inline check' }, asyncBox, 'Async (return the job id at once)')),
      btn);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      clear(out);
      let toks;
      try { toks = splitArgs(args.value); } catch (e) { notice('error', e.message); return; }
      const arg = [], kwarg = {};
      for (const t of toks) {
        const m = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/s.exec(t);
        if (m) kwarg[m[1]] = scalar(m[2]); else arg.push(t);
      }
      const chunk = { client: 'local', tgt: type.value === 'list' ? tgt.value.split(/[\s,]+/).filter(Boolean) : tgt.value.trim(),
        tgt_type: type.value, fun: fun.value.trim(), arg: arg };
      if (Object.keys(kwarg).length) chunk.kwarg = kwarg;
      if (timeout.value) chunk.timeout = Number(timeout.value);
      const b = batch.value.trim();
      if (b && asyncBox.checked) { notice('error', 'Batch runs are synchronous: clear either the batch size or async.'); return; }
      if (b) { chunk.client = 'local_batch'; chunk.batch = b; }
      else if (asyncBox.checked) chunk.client = 'local_async';
      notice('', '');
      btn.disabled = true;
      out.append(el('p', { class: 'muted', text: `Running ${chunk.fun} on ${tgt.value} (${chunk.client})…` }));
      try {
        const r = await lowstate(chunk);
        clear(out);
        if (chunk.client === 'local_async') {
          const j = r[0] || {};
          if (!j.jid) { out.append(el('p', { class: 'error', text: 'No minion matched the target (no job id).' })); return; }
          out.append(el('div', { class: 'card', id: 'run-async-result' },
            el('p', null, 'Job ', el('a', { href: '#/job/' + encodeURIComponent(j.jid), class: 'jid', text: String(j.jid) }), ' started on ',
              String((j.minions || []).length), ' minion(s): ', (j.minions || []).join(', '))));
          return;
        }
        const rets = {};
        for (const part of r) if (part && typeof part === 'object' && !Array.isArray(part)) Object.assign(rets, part);
        markSeen(Object.keys(rets));
        out.append(el('p', { class: 'muted small', text: `${Object.keys(rets).length} minion(s) answered. ` },
          el('a', { href: '#/jobs', text: 'Jobs' })), returnsView(rets, []));
        out.scrollIntoView({ block: 'start' });
      } catch (e) {
        clear(out).append(failBox('run', e));
      } finally {
        btn.disabled = false;
      }
    });
    c.append(form, out);
  };

  // ---- keys -------------------------------------------------------------------------------
  function confirmDialog(text, okLabel, danger) {
    const d = document.getElementById('confirm');
    document.getElementById('confirm-text').textContent = text;
    const ok = document.getElementById('confirm-ok');
    ok.textContent = okLabel || 'OK';
    ok.className = danger ? 'danger' : 'primary';
    return new Promise((resolve) => {
      const done = () => { d.removeEventListener('close', done); resolve(d.returnValue === 'ok'); };
      d.addEventListener('close', done);
      d.returnValue = '';
      if (typeof d.showModal === 'function') d.showModal();
      else resolve(window.confirm(text));
    });
  }

  PAGES.keys = function (c) {
    const body = el('div', { id: 'keys-body' }, el('p', { class: 'muted', text: 'Loading keys…' }));
    pageHead(c, 'Keys', () => load());
    c.append(body);
    const SECTIONS = [
      ['minions_pre', 'Pending', 'warn', [['accept', 'Accept', {}], ['reject', 'Reject', {}], ['delete', 'Delete', {}]]],
      ['minions', 'Accepted', 'ok', [['reject', 'Reject', { include_accepted: true }], ['delete', 'Delete', {}]]],
      ['minions_rejected', 'Rejected', 'bad', [['accept', 'Accept', { include_rejected: true }], ['delete', 'Delete', {}]]],
      ['minions_denied', 'Denied', 'bad', [['delete', 'Delete', {}]]],
    ];
    async function act(action, id, kw) {
      const ok = await confirmDialog(`${action[0].toUpperCase() + action.slice(1)} the key of minion “${id}”?`,
        action[0].toUpperCase() + action.slice(1), action !== 'accept');
      if (!ok) return;
      try {
        const r = await wheel('key.' + action, Object.assign({ match: id }, kw));
        if (!r.success) throw new Error(pretty(r.ret));
        notice('ok', `key.${action} ${id}: done`);
      } catch (e) {
        notice('error', `key.${action} ${id} failed: ${e.message}`);
      }
      load();
    }
    async function load() {
      try {
        const r = await api('GET', '/keys');
        const k = (r && r.return) || {};
        clear(body);
        for (const [field, title, kind, actions] of SECTIONS) {
          const ids = Array.isArray(k[field]) ? k[field].slice().sort() : [];
          const sec = el('div', { class: 'card keys-section', id: 'keys-' + title.toLowerCase() },
            el('h2', null, title, ' ', badge(String(ids.length), ids.length ? kind : '')));
          if (!ids.length) sec.append(el('p', { class: 'muted small', text: 'none' }));
          else {
            const ul = el('ul', { class: 'keylist' });
            for (const id of ids) {
              ul.append(el('li', { 'data-minion': id }, el('span', { class: 'mid', text: id }),
                el('span', { class: 'actions' }, actions.map(([a, label, kw]) => el('button', {
                  type: 'button', class: 'act ' + (a === 'delete' ? 'danger' : a === 'accept' ? 'primary' : ''),
                  'data-action': a, onclick: () => act(a, id, kw), text: label,
                })))));
            }
            sec.append(ul);
          }
          body.append(sec);
        }
      } catch (e) {
        clear(body).append(failBox('keys', e));
      }
    }
    load();
  };

  // ---- events -----------------------------------------------------------------------------
  function globToRe(g) {
    return new RegExp('^' + g.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.') + '$');
  }

  PAGES.events = function (c) {
    const filter = el('input', { id: 'events-filter', type: 'search', placeholder: 'tag filter: salt/job/*/ret/*  or a substring',
      autocapitalize: 'none', autocomplete: 'off' });
    const pause = el('button', { type: 'button', id: 'events-pause', text: 'Pause' });
    const clr = el('button', { type: 'button', id: 'events-clear', text: 'Clear' });
    const state = el('span', { id: 'events-state', class: 'badge', text: 'connecting' });
    const list = el('ol', { id: 'events-list', class: 'events' });
    pageHead(c, 'Live events', null, state);
    c.append(el('div', { class: 'toolbar' }, filter, pause, clr), list);
    const MAX = 500;
    const kept = [];
    let paused = false, es = null, opened = false, triedToken = false, closed = false;

    function matches(tag) {
      const f = filter.value.trim();
      if (!f) return true;
      return f.includes('*') || f.includes('?') ? globToRe(f).test(tag) : tag.includes(f);
    }
    function item(ev) {
      const d = ev.data && typeof ev.data === 'object' ? ev.data : {};
      const bits = [];
      if (d.id) bits.push(String(d.id));
      if (d.fun) bits.push(String(d.fun));
      if ('return' in d && (typeof d.return !== 'object' || d.return === null)) bits.push('→ ' + String(d.return));
      return el('li', { class: 'event', 'data-tag': ev.tag },
        el('details', null, el('summary', null, el('time', { text: ev.at.toLocaleTimeString() }), ' ',
          el('span', { class: 'tag', text: ev.tag }), ' ', el('span', { class: 'muted', text: bits.join(' ') })),
        el('pre', { text: pretty(ev.data) })));
    }
    function rerender() {
      clear(list);
      kept.filter((e) => matches(e.tag)).slice(-MAX).reverse().forEach((e) => list.append(item(e)));
    }
    function onEvent(msg) {
      let ev;
      try { ev = JSON.parse(msg.data); } catch (e) { return; }
      if (!ev || typeof ev !== 'object') return;
      const rec = { tag: String(ev.tag || ''), data: ev.data, at: new Date() };
      if (rec.data && typeof rec.data === 'object' && rec.data.id && /\/ret\/|^minion_start$|^salt\/minion\//.test(rec.tag)) markSeen([String(rec.data.id)]);
      kept.push(rec);
      if (kept.length > MAX * 2) kept.splice(0, kept.length - MAX);
      if (paused || !matches(rec.tag)) return;
      list.insertBefore(item(rec), list.firstChild);
      while (list.childNodes.length > MAX) list.removeChild(list.lastChild);
    }
    function setState(t, kind) { state.textContent = t; state.className = 'badge ' + (kind || ''); }
    function connect(withToken) {
      // First the session cookie /login set (salt-api 3008 refuses a token in the URL),
      // then ?token= (sylvite and older salt-api) if the stream closed before it opened.
      const url = BASE + '/events' + (withToken ? '?token=' + encodeURIComponent(S.token) : '');
      es = new EventSource(url, { withCredentials: true });
      es.onopen = () => { opened = true; state.dataset.via = withToken ? 'token' : 'cookie'; setState('connected', 'ok'); };
      es.onmessage = onEvent;
      es.onerror = () => {
        if (closed) return;
        if (es.readyState === EventSource.CLOSED) {
          if (!opened && !triedToken) { triedToken = true; es.close(); connect(true); return; }
          setState('disconnected', 'bad');
        } else setState('reconnecting', 'warn');
      };
    }
    pause.addEventListener('click', () => {
      paused = !paused;
      pause.textContent = paused ? 'Resume' : 'Pause';
      if (!paused) rerender();
    });
    clr.addEventListener('click', () => { kept.length = 0; clear(list); });
    filter.addEventListener('input', rerender);
    connect(false);
    return () => { closed = true; if (es) es.close(); };
  };

  // ---- cluster ----------------------------------------------------------------------------
  PAGES.cluster = function (c) {
    const body = el('div', { id: 'cluster-body' }, el('p', { class: 'muted', text: 'Loading cluster.peers…' }));
    pageHead(c, 'Cluster', () => route());
    c.append(body);
    runner('cluster.peers').then((r) => {
      clear(body);
      if (notAvailable(r) || r === undefined || r === null) {
        body.append(el('div', { class: 'card', id: 'cluster-na' }, el('h2', { text: 'Not available' }),
          el('p', { text: 'This master does not answer the cluster.peers runner (not a sylvite master, or an older one).' })));
        return;
      }
      if (typeof r !== 'object') {
        body.append(el('div', { class: 'card', id: 'cluster-na' }, el('h2', { text: 'No cluster' }), el('p', { text: String(r) })));
        return;
      }
      const dl = el('dl', { class: 'kv' });
      dl.append(el('dt', { text: 'This master' }), el('dd', { id: 'cluster-master', text: String(r.id || '') }));
      dl.append(el('dt', { text: 'Cluster id' }), el('dd', { text: String(r.cluster_id || '') }));
      const kv = (list, label, id, value, title) => list.append(el('dt', { text: label }),
        el('dd', { id: id, title: title || null }, value === null || value === undefined || value === '' ? '—' : value));
      const when = (iso) => {
        const t = iso ? Date.parse(iso) : NaN;
        return Number.isNaN(t) ? null : el('time', { datetime: String(iso), title: String(iso), text: `${ago(t)} (${String(iso)})` });
      };
      const h = r.health && typeof r.health === 'object' ? r.health : null;
      if (h) {
        kv(dl, 'Health', 'cluster-health-status', badge(String(h.status || '?'), h.status === 'ok' ? 'ok' : 'warn'));
        const up = Number(h.uptime_s);
        kv(dl, 'Uptime', 'cluster-uptime', Number.isFinite(up) ? `${Math.floor(up / 3600)} h ${Math.floor(up / 60) % 60} min ${up % 60} s` : null,
          h.started ? 'started ' + String(h.started) : null);
        kv(dl, 'Minions connected here', 'cluster-minions-connected', String(h.minions_connected ?? ''));
        if (h.counters && typeof h.counters === 'object')
          kv(dl, 'Requests', 'cluster-requests', Object.keys(h.counters).map((k) => `${k} ${h.counters[k]}`).join(', '));
      }
      body.append(el('div', { class: 'card' }, el('h2', { text: 'Master' }), dl));
      if (r.aes_epoch && typeof r.aes_epoch === 'object') {
        const a = r.aes_epoch, ae = el('dl', { class: 'kv', id: 'cluster-aes' });
        kv(ae, 'Key id', 'cluster-aes-key-id', a.key_id ? el('code', { text: String(a.key_id) }) : null,
          'a hash of the AES key this master serves: the same on every master in step');
        kv(ae, 'Generation', 'cluster-aes-generation', a.generation !== undefined ? String(a.generation) : null,
          'keys this master has served since it started');
        kv(ae, 'In use since', 'cluster-aes-since', when(a.since));
        body.append(el('div', { class: 'card' }, el('h2', { text: 'AES key epoch' }), ae));
      }
      if (r.join && typeof r.join === 'object') {
        const j = r.join, je = el('dl', { class: 'kv', id: 'cluster-join' });
        kv(je, 'State', 'cluster-join-state', badge(String(j.state || '?'), j.state === 'standalone' ? 'warn' : 'ok'));
        kv(je, 'Joined through', 'cluster-join-via', j.via ? String(j.via) : null);
        kv(je, 'Since', 'cluster-join-since', when(j.since));
        body.append(el('div', { class: 'card' }, el('h2', { text: 'Join' }), je));
      }
      // Anything else the runner reports, shown as is.
      const other = el('dl', { class: 'kv' });
      for (const k of Object.keys(r)) {
        if (['id', 'cluster_id', 'peers', 'events', 'aes_epoch', 'join', 'health'].includes(k)) continue;
        other.append(el('dt', { text: k }), el('dd', null, el('pre', { class: 'ret', text: pretty(r[k]) })));
      }
      if (other.childNodes.length) body.append(el('div', { class: 'card' }, el('h2', { text: 'More' }), other));
      const peers = Array.isArray(r.peers) ? r.peers : [];
      const links = new Map();
      if (h && Array.isArray(h.links)) for (const l of h.links) if (l && l.id) links.set(String(l.id), l);
      const up = peers.filter((p) => p && p.state === 'up').length;
      body.append(el('div', { class: 'card' }, el('h2', null, 'Peer links ', badge(`${up}/${peers.length} up`, up === peers.length ? 'ok' : 'warn')),
        peers.length ? table(['Peer', 'Address', 'State', 'Last heard', 'AES key', 'Queued', 'Sent', 'Dropped', 'Last error'], peers.map((p) => {
          const l = links.get(String(p.id || '')) || {};
          const aes = l.aes_in_step === true ? badge('in step', 'ok') : l.aes_in_step === false ? badge('differs', 'bad') : '';
          return {
            attrs: { 'data-peer': String(p.id || '') },
            cells: [String(p.id || '?'), String(p.address || ''), badge(String(p.state || ''), p.state === 'up' ? 'ok' : 'warn'),
              l.last_heard ? el('time', { class: 'last-heard', datetime: String(l.last_heard), title: String(l.last_heard), text: ago(Date.parse(l.last_heard)) }) : '',
              aes, String(p.queued ?? ''), String(p.sent ?? ''), String(p.dropped ?? ''), String(p.last_error || '')],
          };
        }), { id: 'peers-table' }) : el('p', { class: 'muted', text: 'No peer links.' })));
      if (r.events && typeof r.events === 'object') {
        const ev = el('dl', { class: 'kv' });
        for (const k of Object.keys(r.events)) ev.append(el('dt', { text: k }), el('dd', { text: String(r.events[k]) }));
        body.append(el('div', { class: 'card' }, el('h2', { text: 'Cluster events' }), ev));
      }
    }).catch((e) => {
      clear(body).append(el('div', { class: 'card', id: 'cluster-na' }, el('h2', { text: 'Not available' }),
        el('p', { text: 'cluster.peers failed: ' + e.message })));
    });
  };

  // ---- boot -------------------------------------------------------------------------------
  document.getElementById('logout').addEventListener('click', async () => {
    try { await api('POST', '/logout'); } catch (e) { /* the session is dropped anyway */ }
    dropSession('');
  });
  loadSession();
  showChrome();
  window.addEventListener('hashchange', route);
  route();
})();
