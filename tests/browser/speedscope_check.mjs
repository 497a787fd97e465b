// Opens tach's speedscope export in the real speedscope app (npm package `speedscope`,
// served over HTTP and loaded with #profileURL=) in headless Chromium, and checks:
//   - the app imports it with no error (no "Something went wrong", no alert dialog, no
//     page error), and its toolbar shows the first profile as "1/N";
//   - there is one profile per thread: the profile names equal the threads of CPython's
//     own answer for the same .bin;
//   - each profile's total weight, as speedscope computed it while importing, equals the
//     thread's time from CPython's answer: the sum of gaps between that thread's samples
//     plus the sampling interval for its last (for synthetic files from
//     NAME.expected.json, the samples fed to CPython's writer; for recorded files from
//     NAME.gecko.json's sample times and NAME.jsonl's sample_interval_usec).
//
// The totals are read by wrapping speedscope's own sampled-profile importer: the served
// bundle has `return X.build()}switch(` rewritten to pass the built Profile to a probe
// first. The probe fails loudly if that code is not found (a different speedscope).
//
// usage: node speedscope_check.mjs EXPORT.speedscope.json GOLDEN_DIR NAME [SCREENSHOT.png]
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { createRequire } from 'node:module';
import { serve, launch, fail } from './common.mjs';

const [exportPath, goldenDir, name, screenshot] = process.argv.slice(2);
if (!name) {
  console.error('usage: node speedscope_check.mjs EXPORT.json GOLDEN_DIR NAME [SCREENSHOT.png]');
  process.exit(2);
}

function readMaybeGz(base) {
  if (fs.existsSync(base)) return fs.readFileSync(base, 'utf8');
  if (fs.existsSync(base + '.gz')) return zlib.gunzipSync(fs.readFileSync(base + '.gz')).toString('utf8');
  return null;
}

// JSON.parse loses 64-bit thread ids: quote them first.
const quoteIds = (text, key) => text.replace(new RegExp(`"${key}":\\s*(\\d+)`, 'g'), `"${key}":"$1"`);

function threadTime(timestamps, interval) {
  let total = 0n;
  for (let i = 0; i + 1 < timestamps.length; i++) {
    const gap = timestamps[i + 1] - timestamps[i];
    if (gap > 0n) total += gap;
  }
  return total + BigInt(interval);
}

// Expected { profileName: total µs } from CPython's side of the golden files.
function expectedTotals() {
  const base = path.join(goldenDir, name);
  const synthetic = readMaybeGz(`${base}.expected.json`);
  const perThread = new Map();
  const add = (key, ts) => {
    if (!perThread.has(key)) perThread.set(key, []);
    perThread.get(key).push(ts);
  };
  let interval;
  if (synthetic !== null) {
    const d = JSON.parse(quoteIds(quoteIds(synthetic, 'thread_id'), 'timestamp_us'));
    interval = d.interval;
    for (const s of d.samples) {
      for (const interp of s.interpreters) {
        for (const t of interp.threads) {
          const key = interp.interpreter_id === 0
            ? `Thread ${t.thread_id}`
            : `Thread ${t.thread_id} (interpreter ${interp.interpreter_id})`;
          add(key, BigInt(s.timestamp_us));
        }
      }
    }
  } else {
    const gecko = readMaybeGz(`${base}.gecko.json`);
    const jsonl = readMaybeGz(`${base}.jsonl`);
    if (gecko === null || jsonl === null) throw new Error(`no CPython reference for ${name} in ${goldenDir}`);
    interval = JSON.parse(jsonl.split('\n')[0]).sample_interval_usec;
    const d = JSON.parse(quoteIds(gecko, 'tid'));
    for (const t of d.threads) {
      // Gecko times are milliseconds since the start, printed to the microsecond.
      for (const ms of t.samples.time) add(`Thread ${t.tid}`, BigInt(Math.round(ms * 1000)));
    }
  }
  const out = new Map();
  for (const [key, ts] of perThread) {
    ts.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    out.set(key, threadTime(ts, interval));
  }
  return out;
}

const require = createRequire(import.meta.url);
const releaseDir = path.join(path.dirname(require.resolve('speedscope/package.json')), 'dist', 'release');
const bundleName = fs.readdirSync(releaseDir).find((f) => /^speedscope-.*\.js$/.test(f));
const bundle = fs.readFileSync(path.join(releaseDir, bundleName), 'utf8');
const hook = /return (\w+)\.build\(\)\}switch\(/;
if (!hook.test(bundle)) {
  console.error(`FAIL: speedscope's sampled importer not found in ${bundleName}: update the probe`);
  process.exit(1);
}
const probed = bundle.replace(hook, 'return window.__tachProbe($1.build())}switch(');
const probe = `window.__tachProfiles = [];
window.__tachProbe = (p) => {
  window.__tachProfiles.push({ name: p.getName(), total: p.getTotalWeight(),
    weights: Array.isArray(p.weights) ? p.weights.reduce((a, b) => a + b, 0) : null });
  return p;
};`;

const expected = expectedTotals();
const exportDir = path.dirname(path.resolve(exportPath));
const { server, base } = await serve({ '/app/': releaseDir, '/profiles/': exportDir });
const { context, close } = await launch();
try {
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('dialog', async (d) => { problems.push(`dialog: ${d.message()}`); await d.dismiss(); });
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
  await page.route(`**/app/${bundleName}`, (route) =>
    route.fulfill({ contentType: 'text/javascript', body: probed }));
  await page.addInitScript(probe);
  const started = Date.now();
  await page.goto(`${base}/app/index.html#profileURL=${encodeURIComponent('/profiles/' + path.basename(exportPath))}`);
  // Speedscope imports every profile in one go (the probe sees them all), then draws
  // the first with its name, and "(1/N)" when there are several, in the toolbar.
  const n = expected.size;
  await page.waitForFunction(
    () => window.__tachProfiles.length > 0 || document.body.innerText.includes('Something went wrong'),
    null, { timeout: 180000 });
  const text = await page.evaluate(() => document.body.innerText);
  if (text.includes('Something went wrong')) problems.push('speedscope shows "Something went wrong"');
  else {
    const got = await page.evaluate(() => window.__tachProfiles.map((p) => p.name));
    const want = got.length > 1 ? `${got[0]} (1/${got.length})` : got[0];
    await page.waitForFunction((w) => document.body.innerText.includes(w), want, { timeout: 60000 })
      .catch(() => problems.push(`toolbar never showed "${want}"`));
  }
  if (screenshot) await page.screenshot({ path: screenshot });
  const loaded = await page.evaluate(() => window.__tachProfiles);
  for (const p of problems) fail(`${name}: ${p}`);

  const seen = new Map(loaded.map((p) => [p.name, p]));
  if (loaded.length !== n) fail(`${name}: speedscope imported ${loaded.length} profiles, CPython has ${n} threads`);
  let matched = 0;
  for (const [key, total] of expected) {
    const p = seen.get(key);
    if (!p) { fail(`${name}: no profile "${key}"`); continue; }
    if (BigInt(p.total) !== total || p.weights === null || BigInt(p.weights) !== total) {
      fail(`${name}: "${key}" total weight ${p.total} (sum of weights ${p.weights}) µs, expected ${total}`);
    } else matched++;
  }
  for (const p of loaded) if (!expected.has(p.name)) fail(`${name}: unexpected profile "${p.name}"`);
  console.log(`${name}: speedscope ${bundleName} imported ${loaded.length} profiles in ${Date.now() - started} ms; ` +
    `${matched}/${n} thread totals match CPython's sample times`);
} finally {
  await close();
  server.close();
}
