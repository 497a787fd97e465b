// Opens tach's pprof export (gzip'd profile.proto) in the real speedscope app (npm
// package `speedscope`, served over HTTP and loaded with #profileURL=) in headless
// Chromium, and checks that the app imports it with no error: no "Something went
// wrong", no alert dialog, no page error or console error, and the toolbar shows the
// file's name once the profile is drawn. It does not check the imported weights.
//
// usage: node pprof_check.mjs EXPORT.pb.gz NAME [SCREENSHOT.png]
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { serve, launch, fail } from './common.mjs';

const [exportPath, name, screenshot] = process.argv.slice(2);
if (!name) {
  console.error('usage: node pprof_check.mjs EXPORT.pb.gz NAME [SCREENSHOT.png]');
  process.exit(2);
}

const require = createRequire(import.meta.url);
const releaseDir = path.join(path.dirname(require.resolve('speedscope/package.json')), 'dist', 'release');
const bundleName = fs.readdirSync(releaseDir).find((f) => /^speedscope-.*\.js$/.test(f));
const exportDir = path.dirname(path.resolve(exportPath));
const file = path.basename(exportPath);
const { server, base } = await serve({ '/app/': releaseDir, '/profiles/': exportDir });
const { context, close } = await launch();
try {
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('dialog', async (d) => { problems.push(`dialog: ${d.message()}`); await d.dismiss(); });
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
  const started = Date.now();
  await page.goto(`${base}/app/index.html#profileURL=${encodeURIComponent('/profiles/' + file)}`);
  await page.waitForFunction(
    (f) => document.body.innerText.includes(f) || document.body.innerText.includes('Something went wrong'),
    file, { timeout: 180000 }).catch(() => problems.push(`toolbar never showed "${file}"`));
  const text = await page.evaluate(() => document.body.innerText);
  if (text.includes('Something went wrong')) problems.push('speedscope shows "Something went wrong"');
  if (screenshot) await page.screenshot({ path: screenshot });
  for (const p of problems) fail(`${name}: ${p}`);
  if (problems.length === 0) {
    console.log(`${name}: speedscope ${bundleName} imported ${file} in ${Date.now() - started} ms`);
  }
} finally {
  await close();
  server.close();
}
