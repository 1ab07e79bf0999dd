'use strict';
// The consent page's script. Everything it shows from a request comes
// from the workload: it only ever sets textContent, never HTML. The
// server renders the page (html/template); on every consent event the
// script fetches the page again and swaps its #live section (an inert
// DOMParser document: no script of it runs).
(function () {
  const csrf = document.querySelector('meta[name="corral-csrf"]').content;
  const status = document.getElementById('watch');
  const events = document.getElementById('events');
  const maxEvents = 200;

  function say(el, text, bad) {
    if (!el) return;
    el.textContent = text;
    el.classList.toggle('bad', !!bad);
  }

  async function post(path, body) {
    const res = await fetch(path, {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'Content-Type': 'application/json', 'X-Corral-CSRF': csrf },
      body: JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) {
      // The API's errors are {"error", "hint"}; the page's own are text.
      let msg = text.trim();
      try {
        const e = JSON.parse(text);
        if (e && e.error) msg = e.error + (e.hint ? ' (' + e.hint + ')' : '');
      } catch (err) { /* text */ }
      throw new Error(msg || res.status + ' ' + res.statusText);
    }
    return text;
  }

  function field(card, name) {
    return card.querySelector('[name="' + name + '"]');
  }

  document.addEventListener('change', (e) => {
    if (e.target.name !== 'scope') return;
    const card = e.target.closest('[data-id]');
    const ttl = card && card.querySelector('.ttl');
    if (ttl) ttl.hidden = e.target.value !== 'ttl';
  });

  document.addEventListener('click', async (e) => {
    const b = e.target.closest('button[data-action]');
    if (!b) return;
    const card = b.closest('[data-id]');
    const id = encodeURIComponent(card.dataset.id);
    const msg = card.querySelector('.msg');
    let path;
    let body;
    switch (b.dataset.action) {
      case 'approve': {
        const scope = field(card, 'scope').value;
        body = { scope: scope, digest: card.dataset.digest };
        if (scope === 'ttl') body.ttl = field(card, 'ttl').value.trim();
        const ro = field(card, 'read_only');
        if (ro) body.read_only = ro.checked;
        path = 'v1/approvals/' + id + '/approve';
        break;
      }
      case 'deny':
        body = { reason: field(card, 'reason').value, for_session: field(card, 'for_session').checked, digest: card.dataset.digest };
        path = 'v1/approvals/' + id + '/deny';
        break;
      case 'revoke':
        body = { kill: field(card, 'kill').checked };
        path = 'v1/grants/' + id + '/revoke';
        break;
      default:
        return;
    }
    b.disabled = true;
    say(msg, 'sending…');
    try {
      await post(path, body);
      say(msg, 'done');
    } catch (err) {
      say(msg, err.message, true);
      b.disabled = false;
      return; // keep the card as it is, with the reason
    }
    refresh();
  });

  // keepInputs carries what the person was typing or choosing into the
  // fresh copy of the section.
  function keepInputs(cur, next) {
    for (const el of cur.querySelectorAll('[data-id] input, [data-id] select')) {
      const card = el.closest('[data-id]');
      const twin = next.querySelector('[data-id="' + CSS.escape(card.dataset.id) + '"] [name="' + el.name + '"]');
      if (!twin) continue;
      if (el.type === 'checkbox') twin.checked = el.checked;
      else twin.value = el.value;
      if (el.name === 'scope') {
        const ttl = twin.closest('[data-id]').querySelector('.ttl');
        if (ttl) ttl.hidden = el.value !== 'ttl';
      }
    }
  }

  let busy = false;
  let again = false;
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const res = await fetch('./?part=live', { credentials: 'same-origin', cache: 'no-store' });
      if (!res.ok) throw new Error(res.status + ' ' + (await res.text()).trim());
      const doc = new DOMParser().parseFromString(await res.text(), 'text/html');
      const next = doc.getElementById('live');
      const cur = document.getElementById('live');
      if (next && cur) {
        keepInputs(cur, next);
        cur.replaceWith(document.adoptNode(next));
        tick();
      }
    } catch (err) {
      say(status, 'refreshing failed: ' + err.message, true);
    }
    busy = false;
    if (again) { again = false; refresh(); }
  }

  function left(secs) {
    if (secs <= 0) return 'expired';
    const m = Math.floor(secs / 60);
    const s = secs % 60;
    return (m > 0 ? m + 'm ' : '') + s + 's left';
  }

  function tick() {
    const now = Date.now();
    for (const el of document.querySelectorAll('[data-expires]')) {
      const t = Date.parse(el.dataset.expires);
      if (!isNaN(t)) el.textContent = left(Math.round((t - now) / 1000));
    }
  }
  tick();
  setInterval(tick, 1000);

  function addEvent(ev) {
    const r = ev.request || {};
    const g = ev.grant || {};
    const parts = [
      new Date(ev.time || Date.now()).toLocaleTimeString(),
      ev.activity,
      r.kind || g.kind || '',
      r.target || g.target || '',
      (g.id ? g.access : r.access) || '',
      r.state ? 'state ' + r.state : '',
      g.id ? (g.effective ? 'in force' : 'not in force') : '',
      r.sandbox || g.sandbox ? 'sandbox ' + (r.sandbox || g.sandbox) : '',
      ev.by ? 'by ' + ev.by : '',
      r.detail || g.detail || '',
    ];
    const li = document.createElement('li');
    li.className = 'event activity-' + String(ev.activity).replace(/[^a-z_]/g, '');
    li.textContent = parts.filter((p) => p !== '').join(' · ');
    events.prepend(li);
    while (events.children.length > maxEvents) events.lastElementChild.remove();
  }

  // The watch: while it is open this page is an approver (requests are
  // pending instead of denied for want of one).
  const watch = new EventSource('v1/approvals/watch');
  watch.onopen = () => {
    document.body.dataset.watch = 'open';
    say(status, 'watching: this page counts as an approver while it is open');
    refresh();
  };
  watch.onerror = () => {
    document.body.dataset.watch = 'closed';
    say(status, 'not connected (retrying): while no approver is connected, requests are denied', true);
  };
  watch.addEventListener('consent', (m) => {
    let ev;
    try { ev = JSON.parse(m.data); } catch (err) { return; }
    addEvent(ev);
    refresh();
  });
})();
