(() => {
  'use strict';
  const data = JSON.parse(document.getElementById('efmesh-data').textContent);
  const byName = new Map(data.nodes.map((n) => [n.name, n]));
  const svg = document.getElementById('dag');
  const canvas = document.getElementById('canvas');
  const panel = document.getElementById('panel');
  const body = document.getElementById('panel-body');
  const search = document.getElementById('search');
  const count = document.getElementById('search-count');
  const nodeEls = new Map();
  svg.querySelectorAll('g.node').forEach((g) => nodeEls.set(g.dataset.name, g));
  const edgeEls = Array.from(svg.querySelectorAll('path.edge'));
  const W = Number(svg.dataset.width);
  const H = Number(svg.dataset.height);
  let selected = null;

  // ---- small DOM helpers (text always goes through textContent: nothing is parsed as HTML)
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined) continue;
      if (k === 'text') e.textContent = v;
      else if (k === 'class') e.className = v;
      else e.setAttribute(k, v);
    }
    for (const kid of kids) if (kid !== null && kid !== undefined) e.append(kid);
    return e;
  }
  const short = (fp) => (fp ? '@' + fp.slice(0, 12) : '');

  // ---- SQL highlighting: comments, strings, quoted names, numbers, bounds, keywords
  const KEYWORDS = new Set(('select from where join left right inner outer full cross on using group by order having limit offset as and or not in is ' +
    'null case when then else end with recursive union all distinct over partition qualify window between like ilike exists cast interval true ' +
    'false asc desc lateral natural filter except intersect rows range preceding following unbounded current row nulls first last any some try_cast').split(' '));
  const TOKEN = /(--[^\n]*|\/\*[\s\S]*?\*\/)|('(?:[^']|'')*')|("(?:[^"]|"")*")|(\$start|\$end|@start|@end)|(\b\d+(?:\.\d+)?\b)|([A-Za-z_][A-Za-z0-9_]*)/g;
  function highlight(sql, code) {
    let last = 0;
    const span = (cls, text) => code.append(el('span', { class: cls, text }));
    for (const m of sql.matchAll(TOKEN)) {
      let cls = null;
      if (m[1]) cls = 'c';
      else if (m[2]) cls = 's';
      else if (m[4]) cls = 'b';
      else if (m[5]) cls = 'n';
      else if (m[6] && KEYWORDS.has(m[6].toLowerCase())) cls = 'k';
      if (!cls) continue;
      if (m.index > last) code.append(document.createTextNode(sql.slice(last, m.index)));
      span(cls, m[0]);
      last = m.index + m[0].length;
    }
    if (last < sql.length) code.append(document.createTextNode(sql.slice(last)));
  }

  // ---- the graph around a node
  function closure(name, dir) {
    const seen = new Set();
    const stack = [name];
    while (stack.length) {
      const n = byName.get(stack.pop());
      if (!n) continue;
      for (const m of n[dir]) if (!seen.has(m)) { seen.add(m); stack.push(m); }
    }
    return seen;
  }
  function light(names) {
    svg.classList.toggle('dim', names !== null);
    for (const [n, g] of nodeEls) g.classList.toggle('on', names !== null && names.has(n));
    for (const e of edgeEls) e.classList.toggle('on', names !== null && names.has(e.dataset.from) && names.has(e.dataset.to));
  }
  function focusSet(name) {
    return new Set([name, ...closure(name, 'parents'), ...closure(name, 'children')]);
  }
  function restore() {
    light(selected ? focusSet(selected) : null);
  }

  // ---- the side panel
  function link(name) {
    if (!byName.has(name)) return el('span', { text: name, title: 'not shown (outside the selection)' });
    const a = el('a', { href: '#select=' + encodeURIComponent(name), text: name });
    a.addEventListener('click', (ev) => { ev.preventDefault(); clickNode(name); });
    return a;
  }
  function links(names) {
    return names.length ? el('div', { class: 'links' }, ...names.map(link)) : el('div', { class: 'none', text: 'none' });
  }
  function versionText(n) {
    if (!data.env) return null;
    const env = '`' + data.env + '`';
    if (n.state === 'added') return 'not served by ' + env + ' yet; the project defines ' + short(n.fingerprint);
    if (n.served && n.served === n.fingerprint) return short(n.served) + ' (what ' + env + ' serves is the project\u2019s version)';
    return env + ' serves ' + short(n.served) + '; the project defines ' + short(n.fingerprint);
  }
  function show(n) {
    body.replaceChildren();
    const chips = el('div', { class: 'chips' },
      el('span', { class: 'chip' }, el('span', { class: 'swatch', style: 'background:' + n.colour }), n.kindLabel));
    if (n.state) chips.append(el('span', { class: 'chip st-' + n.state, text: n.category + (n.state === 'indirect' ? ' (a parent changed)' : '') }));
    body.append(el('h2', { id: 'panel-name', text: n.name }), chips);
    if (n.description) body.append(el('p', { class: 'desc', text: n.description }));
    const facts = el('dl', { class: 'facts' },
      el('dt', { text: 'kind' }), el('dd', { id: 'panel-kind', text: n.kind }),
      el('dt', { text: 'defined at' }), el('dd', { id: 'panel-location', text: n.line ? n.file + ':' + n.line : n.file }),
      el('dt', { text: 'layer' }), el('dd', { text: String(n.layer) }));
    if (n.grain.length) facts.append(el('dt', { text: 'grain' }), el('dd', { text: n.grain.join(', ') }));
    if (n.owner) facts.append(el('dt', { text: 'owner' }), el('dd', { id: 'panel-owner', text: n.owner }));
    if (n.tags && n.tags.length) facts.append(el('dt', { text: 'tags' }), el('dd', { id: 'panel-tags', text: n.tags.join(', ') }));
    const v = versionText(n);
    if (v) facts.append(el('dt', { text: 'version' }), el('dd', { id: 'panel-version', text: v }));
    if (n.reason) facts.append(el('dt', { text: 'why' }), el('dd', { text: n.reason, style: 'font-family:var(--sans)' }));
    body.append(facts);
    // Columns: the declared schema, and where each column takes its values from (lineage).
    body.append(el('h3', { text: 'Columns' }));
    if (n.lineageNote) body.append(el('div', { class: 'none', text: n.lineageNote }));
    if (n.columns.length) {
      const lineage = new Map((n.lineage || []).map((c) => [c.column, c]));
      const t = el('table', { id: 'panel-columns' },
        el('tr', {}, el('th', { text: 'column' }), el('th', { text: 'type' }), el('th', { text: 'reads' })));
      for (const col of n.columns) {
        const src = el('td', { class: 'src' });
        const c = lineage.get(col.name);
        if (c) {
          c.sources.forEach((s, i) => {
            if (i) src.append(', ');
            const a = link(s.model);
            a.textContent = s.model + '.' + s.column;
            src.append(a);
          });
          if (c.note) src.append(el('span', { class: 'none', text: (c.sources.length ? ' ' : '') + c.note }));
        }
        const name = el('td', { text: col.name });
        if (col.description) name.append(el('div', { class: 'coldesc', text: col.description }));
        t.append(el('tr', {}, name, el('td', { class: 'type', text: col.type }), src));
      }
      body.append(t);
    } else body.append(el('div', { class: 'none', text: 'no declared columns' }));
    body.append(el('h3', { text: 'SQL' }));
    const code = el('code');
    highlight(n.sql || '', code);
    body.append(el('pre', { class: 'sql', id: 'panel-sql' }, code));
    body.append(el('h3', { text: 'Parents' }), links(n.parents), el('h3', { text: 'Children' }), links(n.children));
    panel.hidden = false;
  }

  // ---- selection: one handler for clicks, keyboard and the #select= fragment
  function select(name) {
    const n = byName.get(name);
    if (!n) return;
    if (selected) nodeEls.get(selected)?.classList.remove('selected');
    selected = name;
    nodeEls.get(name)?.classList.add('selected');
    light(focusSet(name));
    show(n);
    try { history.replaceState(null, '', '#select=' + encodeURIComponent(name)); } catch (_) { /* file: URLs may refuse */ }
  }
  function clear() {
    if (selected) nodeEls.get(selected)?.classList.remove('selected');
    selected = null;
    panel.hidden = true;
    light(null);
    applySearch();
    try { history.replaceState(null, '', location.pathname + location.search); } catch (_) { /* idem */ }
  }
  function clickNode(name, smooth = true) {
    const g = nodeEls.get(name);
    if (!g) return;
    g.dispatchEvent(new MouseEvent('click', { bubbles: true, cancelable: true, view: window }));
    reveal(name, smooth);
  }
  function reveal(name, smooth) {
    const n = byName.get(name);
    const r = canvas.getBoundingClientRect();
    const px = (n.x + data.cardWidth / 2) * scale + svg.getBoundingClientRect().left - r.left + canvas.scrollLeft;
    const py = (n.y + 26) * scale + svg.getBoundingClientRect().top - r.top + canvas.scrollTop;
    canvas.scrollTo({ left: px - r.width / 2, top: py - r.height / 2, behavior: smooth ? 'smooth' : 'auto' });
  }
  let dragged = false;
  svg.addEventListener('click', (ev) => {
    if (dragged) return;
    const g = ev.target.closest('g.node');
    if (g) select(g.dataset.name);
    else clear();
  });
  svg.addEventListener('keydown', (ev) => {
    const g = ev.target.closest && ev.target.closest('g.node');
    if (g && (ev.key === 'Enter' || ev.key === ' ')) { ev.preventDefault(); g.dispatchEvent(new MouseEvent('click', { bubbles: true })); }
  });
  document.getElementById('panel-close').addEventListener('click', clear);

  // ---- hover: a node, its edges and neighbours
  svg.addEventListener('mouseover', (ev) => {
    const g = ev.target.closest('g.node');
    if (!g) return;
    const n = byName.get(g.dataset.name);
    light(new Set([n.name, ...n.parents, ...n.children]));
  });
  svg.addEventListener('mouseout', (ev) => {
    const g = ev.target.closest('g.node');
    if (g && !g.contains(ev.relatedTarget)) { restore(); applySearch(); }
  });

  // ---- search: highlight matches, dim the rest; Enter opens the first
  function matches() {
    const q = search.value.trim().toLowerCase();
    if (!q) return null;
    return data.nodes.filter((n) => n.name.toLowerCase().includes(q) || n.kind.includes(q)).map((n) => n.name);
  }
  function applySearch() {
    const m = matches();
    for (const [, g] of nodeEls) g.classList.remove('match');
    if (m === null) { count.textContent = ''; if (!selected) light(null); return; }
    count.textContent = m.length + ' / ' + data.nodes.length;
    for (const name of m) nodeEls.get(name).classList.add('match');
    if (!selected) light(new Set(m));
  }
  search.addEventListener('input', applySearch);
  search.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter') { const m = matches(); if (m && m.length) clickNode(m[0]); }
    if (ev.key === 'Escape') { search.value = ''; applySearch(); search.blur(); }
  });
  document.addEventListener('keydown', (ev) => {
    if (ev.key === '/' && document.activeElement !== search) { ev.preventDefault(); search.focus(); }
    if (ev.key === 'Escape' && document.activeElement !== search && selected) clear();
  });

  // ---- zoom and pan
  let scale = 1;
  function zoom(s) {
    scale = Math.min(2.5, Math.max(0.15, s));
    svg.setAttribute('width', String(Math.round(W * scale)));
    svg.setAttribute('height', String(Math.round(H * scale)));
  }
  function fit() {
    const r = canvas.getBoundingClientRect();
    zoom(Math.min(1, (r.width - 8) / W, (r.height - 8) / H));
  }
  document.getElementById('zoom-in').addEventListener('click', () => zoom(scale * 1.25));
  document.getElementById('zoom-out').addEventListener('click', () => zoom(scale / 1.25));
  document.getElementById('zoom-fit').addEventListener('click', fit);
  canvas.addEventListener('wheel', (ev) => {
    if (!(ev.ctrlKey || ev.metaKey)) return;
    ev.preventDefault();
    zoom(scale * (ev.deltaY < 0 ? 1.1 : 1 / 1.1));
  }, { passive: false });
  let drag = null;
  canvas.addEventListener('pointerdown', (ev) => {
    if (ev.button !== 0) return;
    drag = { x: ev.clientX, y: ev.clientY, left: canvas.scrollLeft, top: canvas.scrollTop };
    dragged = false;
  });
  window.addEventListener('pointermove', (ev) => {
    if (!drag) return;
    const dx = ev.clientX - drag.x;
    const dy = ev.clientY - drag.y;
    if (!dragged && Math.abs(dx) + Math.abs(dy) < 4) return;
    dragged = true;
    canvas.classList.add('dragging');
    canvas.scrollLeft = drag.left - dx;
    canvas.scrollTop = drag.top - dy;
  });
  window.addEventListener('pointerup', () => {
    drag = null;
    canvas.classList.remove('dragging');
    setTimeout(() => { dragged = false; }, 0);
  });

  // ---- start: honour #select=<model> (the panel takes its room), then fit a large graph
  function fromHash(smooth) {
    const m = /(?:^#|&)select=([^&]*)/.exec(location.hash);
    if (!m) return;
    let name;
    try { name = decodeURIComponent(m[1]); } catch (e) { return; } // a malformed fragment selects nothing
    clickNode(name, smooth);
  }
  window.addEventListener('hashchange', () => fromHash(true));
  fromHash(false);
  if (W > canvas.clientWidth || H > canvas.clientHeight) {
    fit();
    if (selected) reveal(selected, false);
  }
})();
