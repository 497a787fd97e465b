// Opens tach's flamegraph SVG in headless Chromium and checks that it renders and works:
//   - the SVG loads with no script error and draws frames (rects with a width > 0);
//   - its title is the input's file name;
//   - the root frame's tooltip says "all (T samples, 100%)" with T the total of CPython's
//     own `replay --collapsed` answer (NAME.collapsed.txt), and in --per-thread mode every
//     drawn thread root "[thread ID] (N samples, P%)" has N and P from that answer's
//     `tid:ID` lines;
//   - inferno's script runs: hovering a frame writes its tooltip into the details line,
//     and clicking it zooms (the root frame then shows as a faded parent).
// An optional screenshot is written after the hover.
//
// usage: node flamegraph_check.mjs EXPORT.svg GOLDEN_DIR NAME merged|per-thread [SHOT.png]
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { serve, launch, fail } from './common.mjs';

const [svgPath, goldenDir, name, mode, screenshot] = process.argv.slice(2);
if (!mode || !['merged', 'per-thread'].includes(mode)) {
  console.error('usage: node flamegraph_check.mjs EXPORT.svg GOLDEN_DIR NAME merged|per-thread [SHOT.png]');
  process.exit(2);
}

function readMaybeGz(base) {
  if (fs.existsSync(base)) return fs.readFileSync(base, 'utf8');
  if (fs.existsSync(base + '.gz')) return zlib.gunzipSync(fs.readFileSync(base + '.gz')).toString('utf8');
  throw new Error(`missing ${base}`);
}

// CPython's collapsed answer: "tid:ID;frames... COUNT".
let total = 0n;
const perTid = new Map();
for (const line of readMaybeGz(path.join(goldenDir, `${name}.collapsed.txt`)).split('\n')) {
  const m = /^tid:(\d+);.* (\d+)$/.exec(line);
  if (!m) continue;
  const n = BigInt(m[2]);
  total += n;
  perTid.set(m[1], (perTid.get(m[1]) || 0n) + n);
}

const { server, base } = await serve({ '/svg/': path.dirname(path.resolve(svgPath)) });
const { context, close } = await launch();
try {
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
  await page.goto(`${base}/svg/${encodeURIComponent(path.basename(svgPath))}`, { waitUntil: 'load' });
  // Show the whole graph (up to a limit) so the screenshot has the title and the root.
  const size = await page.evaluate(() => {
    const r = document.documentElement.getBoundingClientRect();
    return { width: Math.ceil(r.width), height: Math.ceil(r.height) };
  });
  await page.setViewportSize({ width: Math.min(Math.max(size.width, 400), 2000), height: Math.min(Math.max(size.height, 300), 3000) });

  const info = await page.evaluate(() => {
    const frames = [...document.querySelectorAll('#frames > g')];
    const drawn = frames.filter((g) => {
      const r = g.querySelector('rect');
      return r && r.getBoundingClientRect().width > 0;
    }).length;
    return {
      title: document.getElementById('title')?.textContent,
      frames: frames.length,
      drawn,
      tooltips: frames.map((g) => g.querySelector('title')?.textContent || ''),
    };
  });
  if (info.title !== name + '.bin') fail(`${name}: title "${info.title}", expected "${name}.bin"`);
  if (info.drawn === 0) fail(`${name}: no frame drawn`);

  // inferno prints counts with thousands separators.
  const fmt = (n) => n.toLocaleString('en-US');
  const rootTip = `all (${fmt(total)} samples, 100%)`;
  const rootIdx = info.tooltips.indexOf(rootTip);
  if (rootIdx < 0) fail(`${name}: no root frame "${rootTip}"`);

  let threadRoots = 0;
  if (mode === 'per-thread') {
    for (const tip of info.tooltips) {
      const m = /^\[thread (\d+)(?:, interpreter \d+)?\] \(([\d,]+) samples, ([\d.]+)%\)$/.exec(tip);
      if (!m) continue;
      m[2] = m[2].replaceAll(',', '');
      threadRoots++;
      const want = perTid.get(m[1]);
      // Percentages as inferno prints them: two decimals.
      const pct = (Number(BigInt(m[2]) * 1000000n / total) / 10000).toFixed(2);
      if (want === undefined) fail(`${name}: thread ${m[1]} is not in CPython's answer`);
      // Several interpreters may share a thread id; their roots together hold its count.
      else if (BigInt(m[2]) > want) fail(`${name}: thread ${m[1]} has ${m[2]} samples, CPython ${want}`);
      if (Math.abs(Number(m[3]) - Number(pct)) > 0.011) fail(`${name}: thread ${m[1]} shows ${m[3]}%, expected ${pct}%`);
    }
    // inferno drops frames narrower than 0.01 % of the total, so tiny threads may be missing; the
    // biggest one cannot be.
    const biggest = [...perTid.entries()].sort((a, b) => (a[1] < b[1] ? 1 : -1))[0];
    if (biggest && !info.tooltips.some((t) => t.startsWith(`[thread ${biggest[0]}] (${fmt(biggest[1])} samples`) ||
        t.startsWith(`[thread ${biggest[0]}, interpreter`))) {
      fail(`${name}: no root frame for the biggest thread ${biggest[0]} (${biggest[1]} samples)`);
    }
    if (threadRoots === 0) fail(`${name}: --per-thread graph has no thread root frames`);
  }

  // Interactivity: hover the widest non-root frame, then click it to zoom.
  const target = await page.evaluate(() => {
    const frames = [...document.querySelectorAll('#frames > g')];
    let best = -1, bestW = 0;
    frames.forEach((g, i) => {
      const t = g.querySelector('title')?.textContent || '';
      const w = g.querySelector('rect')?.getBoundingClientRect().width || 0;
      if (!t.startsWith('all (') && w > bestW) { best = i; bestW = w; }
    });
    return best;
  });
  if (target >= 0) {
    const g = page.locator('#frames > g').nth(target);
    await g.hover();
    const details = await page.evaluate(() => document.getElementById('details')?.textContent || '');
    const tip = info.tooltips[target];
    if (!details.includes(tip)) fail(`${name}: hover shows "${details}", expected "Function: ${tip}"`);
    if (screenshot) await page.screenshot({ path: screenshot });
    await g.click();
    const zoomed = await page.evaluate(() => ({
      unzoom: !document.getElementById('unzoom')?.classList.contains('hide'),
      parents: document.querySelectorAll('#frames > g.parent').length,
    }));
    if (!zoomed.unzoom || zoomed.parents === 0) fail(`${name}: clicking a frame did not zoom`);
  } else {
    fail(`${name}: nothing to hover`);
  }
  for (const p of problems) fail(`${name}: ${p}`);
  console.log(`${name} (${mode}): ${info.frames} frames (${info.drawn} drawn), root "${rootTip}"` +
    (mode === 'per-thread' ? `, ${threadRoots} thread roots drawn for ${perTid.size} thread ids` : '') +
    ', hover and zoom work');
} finally {
  await close();
  server.close();
}
