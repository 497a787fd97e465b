// Measures how long HTML pages take to open in headless Chromium: for each page, the
// median over RUNS fresh loads of the navigation's loadEventEnd (parse, scripts and the
// first render done), served from 127.0.0.1. Used for the heatmap figures in
// docs/exporters.md.
//
// usage: node open_time.mjs RUNS PAGE.html...
import path from 'node:path';
import { serve, launch } from './common.mjs';

const [runs, ...pages] = process.argv.slice(2);
if (!pages.length) { console.error('usage: node open_time.mjs RUNS PAGE.html...'); process.exit(2); }
const { context, close } = await launch();
try {
  for (const p of pages) {
    const { server, base } = await serve({ '/p/': path.dirname(path.resolve(p)) });
    const times = [];
    for (let k = 0; k < +runs; k++) {
      const page = await context.newPage();
      await page.goto(`${base}/p/${encodeURIComponent(path.basename(p))}`, { waitUntil: 'load' });
      times.push(await page.evaluate(() => performance.getEntriesByType('navigation')[0].loadEventEnd));
      await page.close();
    }
    times.sort((a, b) => a - b);
    console.log(`${p}: median ${times[times.length >> 1].toFixed(0)} ms (min ${times[0].toFixed(0)}, max ${times[times.length - 1].toFixed(0)}) over ${runs} loads`);
    server.close();
  }
} finally {
  await close();
}
