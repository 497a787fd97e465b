// Opens tach's heatmap page in headless Chromium and checks that it renders what it
// embeds and that it works:
//   - no page error and no console error;
//   - the file list shows every embedded file, ranked, with its total;
//   - for each file (up to 40), the margin of every sampled line shows the embedded
//     self and total counts (tests/suite/heatmap.rs shows those equal `tach query`'s
//     and CPython's heatmap's), and the source text where the source was read, or the
//     "source missing" note where it was not;
//   - the opcode breakdown of a line opens with the embedded counts;
//   - a caller link goes to the caller's file and line;
//   - the search box filters files and lists matching functions.
// An optional screenshot shows FILE_SUFFIX (a file whose path ends with it).
//
// usage: node heatmap_check.mjs PAGE.html [SHOT.png FILE_SUFFIX]
import fs from 'node:fs';
import path from 'node:path';
import { serve, launch, fail } from './common.mjs';

const [pagePath, screenshot, shotFile] = process.argv.slice(2);
if (!pagePath) {
  console.error('usage: node heatmap_check.mjs PAGE.html [SHOT.png FILE_SUFFIX]');
  process.exit(2);
}
const name = path.basename(pagePath);
const html = fs.readFileSync(pagePath, 'utf8');
const m = /<script id="heatmap-data" type="application\/json">([\s\S]*?)<\/script>/.exec(html);
if (!m) { fail(`${name}: no embedded data`); process.exit(1); }
const D = JSON.parse(m[1]);
const fmt = (n) => n.toLocaleString('en-US');

const { server, base } = await serve({ '/p/': path.dirname(path.resolve(pagePath)) });
const { context, close } = await launch();
try {
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (msg) => { if (msg.type() === 'error') problems.push(`console error: ${msg.text()}`); });
  // Offline: any request other than the page itself is a failure.
  page.on('request', (r) => { if (!r.url().startsWith(`${base}/p/`)) problems.push(`request: ${r.url()}`); });
  const url = `${base}/p/${encodeURIComponent(path.basename(pagePath))}`;
  const t0 = Date.now();
  await page.goto(url, { waitUntil: 'load' });
  await page.waitForSelector('#side a.file, #view .empty');
  console.error(`${name}: loaded and rendered in ${Date.now() - t0} ms (${html.length} bytes)`);

  const side = await page.$$eval('#side a.file', (as) => as.map((a) => ({
    file: +a.dataset.file, nums: a.querySelector('.nums').textContent })));
  if (side.length !== D.files.length) fail(`${name}: ${side.length} files listed, ${D.files.length} embedded`);
  side.forEach((s, k) => {
    if (s.file !== k) fail(`${name}: list position ${k} shows file ${s.file}`);
    else if (!s.nums.startsWith(fmt(D.files[k].total) + ' ')) fail(`${name}: file ${k} shows "${s.nums}", total ${D.files[k].total}`);
  });
  for (let k = 1; k < D.files.length; k++) {
    if (D.files[k].total > D.files[k - 1].total) fail(`${name}: files not ranked at ${k}`);
  }

  let linesChecked = 0;
  for (let i = 0; i < Math.min(D.files.length, 40); i++) {
    const f = D.files[i];
    await page.evaluate((h) => { location.hash = h; }, `#f${i}`);
    await page.waitForFunction((p) => document.querySelector('#view .fhead h2')?.textContent === p, f.path);
    const rows = await page.$$eval('table.code tr[data-line]', (trs) => trs.map((tr) => ({
      line: +tr.dataset.line, s: tr.querySelector('td.s').textContent, t: tr.querySelector('td.t').textContent,
      src: tr.querySelector('td.src').textContent })));
    const byLine = new Map(rows.map((r) => [r.line, r]));
    const shown = f.status === 'ok' ? f.lines.filter(([l]) => l >= 1 && l <= f.nlines) : f.lines;
    for (const [line, s, t] of shown) {
      const r = byLine.get(line);
      if (!r) { fail(`${name}: ${f.path}:${line} not shown`); continue; }
      if (r.s !== (s ? fmt(s) : '') || r.t !== fmt(t)) fail(`${name}: ${f.path}:${line} shows self "${r.s}" total "${r.t}", data ${s}/${t}`);
      linesChecked++;
    }
    if (f.status === 'ok') {
      for (const [start, text] of f.src) {
        text.forEach((t, k) => { if (byLine.get(start + k)?.src !== t) fail(`${name}: ${f.path}:${start + k} source text differs`); });
      }
    } else {
      const note = await page.$eval('.note', (n) => n.textContent).catch(() => '');
      if (!note.includes(f.local)) fail(`${name}: ${f.path} (${f.status}) has no note naming ${f.local}`);
    }
  }
  if (linesChecked === 0 && D.total > 0) fail(`${name}: no line checked`);

  // Opcode breakdown.
  const withOps = D.files.findIndex((f) => f.ops.length > 0);
  if (D.opcodes && withOps < 0) fail(`${name}: opcodes recorded but none embedded`);
  if (withOps >= 0) {
    const f = D.files[withOps];
    const line = f.ops[0][0];
    const want = f.ops.filter((o) => o[0] === line).map(([, op, n]) => [D.opnames[op], fmt(n)]);
    await page.evaluate((h) => { location.hash = h; }, `#f${withOps}:${line}`);
    await page.waitForSelector(`#L${line}`);
    await page.click(`#L${line} td.op`);
    const got = await page.$$eval(`#L${line} + tr.ops .opt tr`, (trs) => trs.map((tr) =>
      [tr.children[0].textContent, tr.children[1].textContent]));
    if (JSON.stringify(got) !== JSON.stringify(want)) fail(`${name}: opcodes of ${f.path}:${line}: ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
  }

  // A caller link: from the hottest function that has a caller.
  const callee = D.funcs.find((fn) => fn.callers.length > 0);
  if (callee) {
    const caller = D.funcs[callee.callers[0][0]];
    await page.evaluate((h) => { location.hash = h; }, `#f${callee.file}`);
    await page.waitForSelector('table.funcs');
    const cid = D.funcs.indexOf(callee);
    await page.click(`table.funcs tr[data-func="${cid}"] td:nth-child(4) a`);
    await page.waitForFunction((p) => document.querySelector('#view .fhead h2')?.textContent === p, D.files[caller.file].path);
    const target = await page.$eval('tr.target', (tr) => +tr.dataset.line).catch(() => null);
    if (target !== caller.line) fail(`${name}: caller link of ${callee.name} went to line ${target}, want ${caller.line}`);
  }

  // Search: a function of a low-ranked file.
  if (D.funcs.length > 0) {
    const fn = D.funcs[D.funcs.length - 1];
    const q = fn.name.toLowerCase();
    const want = D.files.filter((f) => f.path.toLowerCase().includes(q) ||
      f.funcs.some((id) => D.funcs[id].name.toLowerCase().includes(q))).length;
    await page.fill('#search', fn.name);
    const got = await page.$$eval('#side a.file', (as) => as.length);
    const funcs = await page.$$eval('#side a.func .name', (ns) => ns.map((n) => n.textContent));
    if (got !== want) fail(`${name}: search "${fn.name}" lists ${got} files, want ${want}`);
    if (!funcs.includes(fn.name)) fail(`${name}: search "${fn.name}" does not list the function`);
    if (want >= D.files.length && D.files.length > 3) fail(`${name}: search "${fn.name}" filtered nothing`);
    await page.fill('#search', '');
  }

  if (screenshot) {
    // The file from its top, with the opcode breakdown of its hottest line open.
    const i = Math.max(D.files.findIndex((f) => f.path.endsWith(shotFile || '')), 0);
    const f = D.files[i];
    await page.setViewportSize({ width: 1400, height: 1200 });
    await page.evaluate((h) => { location.hash = h; }, `#f${i}`);
    await page.waitForFunction((p) => document.querySelector('#view .fhead h2')?.textContent === p, f.path);
    const hot = f.lines.reduce((a, b) => (b[2] > a[2] ? b : a), [0, 0, 0])[0];
    if (f.ops.some((o) => o[0] === hot)) await page.click(`#L${hot} td.op`);
    // From the top (functions and callers), scrolled down just enough to show that line.
    await page.evaluate((l) => {
      const view = document.getElementById('view');
      view.scrollTop = 0;
      const tr = document.getElementById(`L${l}`);
      if (!tr) return;
      const ops = tr.nextElementSibling;
      const bottom = (ops && ops.classList.contains('ops') ? ops : tr).getBoundingClientRect().bottom;
      if (bottom > view.clientHeight - 40) view.scrollTop = bottom - view.clientHeight + 120;
    }, hot);
    await page.screenshot({ path: screenshot });
  }
  for (const p of problems) fail(`${name}: ${p}`);
  console.error(`${name}: ${linesChecked} lines checked in ${Math.min(D.files.length, 40)} files`);
} finally {
  await close();
  server.close();
}
