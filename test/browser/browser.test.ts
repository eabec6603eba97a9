// The built ESM core in a real browser (Debian Chromium, headless): in the page and in a module
// worker, a burst of fetches paced by `KeyedRateLimiter.acquire` reaches a loopback server no faster
// than the rule allows, and no slower than it needs to. On a `ManualScheduler` the server witnesses
// exactly when (in the scheduler's time) each request was granted; on the browser's own timers, that
// every request waited and went through. Nothing is judged by wall-clock gaps between arrivals:
// those shrink and grow with the machine's load (they once failed with requests 12.8 ms apart).
import { existsSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { extname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM, openPage } from './chromium';

const root = fileURLToPath(new URL('../..', import.meta.url));
const dist = resolve(root, 'dist');
const fixtures = resolve(root, 'test/browser/fixtures');

/** The rule every burst runs under: a bucket of 2, refilled one permit every 100 ms. */
const LIMIT = 2;
const WINDOW_MS = 200;
const INTERVAL_MS = WINDOW_MS / LIMIT;
const COUNT = 10;

const haveChromium = existsSync(CHROMIUM);
if (!haveChromium) {
  if (process.env.CI === 'true') {
    it(`finds Debian Chromium at ${CHROMIUM} (.ci/run installs the chromium package)`, () => {
      throw new Error(`${CHROMIUM} is missing on CI: the browser tests cannot run`);
    });
  } else {
    console.warn(`\n  ⚠ SKIPPING the browser tests: ${CHROMIUM} not found (apt-get install chromium)\n`);
  }
}

describe.skipIf(!haveChromium)('in headless Chromium, the built ESM core paces a burst of fetches', () => {
  /** Per run, the `at` of each request in the order the server saw them. */
  const arrivals = new Map<string, string[]>();
  let server: Server;
  let origin: string;
  let browser: Browser;
  let page: Page;
  const pageErrors: string[] = [];

  beforeAll(async () => {
    if (!existsSync(resolve(dist, 'index.js'))) throw new Error('dist/index.js is missing: run `npx tsup` (npm test builds it first)');
    server = createServer((request, response) => {
      const url = new URL(request.url ?? '/', 'http://loopback');
      if (url.pathname === '/hit') {
        const run = url.searchParams.get('run') ?? '';
        arrivals.set(run, [...(arrivals.get(run) ?? []), url.searchParams.get('at') ?? '']);
        response.writeHead(204, { 'cache-control': 'no-store' }).end();
        return;
      }
      const file = fileFor(url.pathname);
      if (file === undefined) {
        response.writeHead(404).end();
        return;
      }
      const type = extname(file) === '.html' ? 'text/html; charset=utf-8' : 'text/javascript; charset=utf-8';
      response.writeHead(200, { 'content-type': type, 'cache-control': 'no-store' }).end(readFileSync(file));
    });
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

    ({ browser, page } = await openPage(`${origin}/`, pageErrors));
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    server?.closeAllConnections();
    await new Promise((done) => server?.close(done));
  });

  it.each(['page', 'worker'] as const)('in the %s: on a ManualScheduler, each request is granted exactly when the token bucket has its permit', async (where) => {
    const run = `${where}-manual`;
    const seen = await burstIn(where, run, 'manual');
    expect(seen).toMatchObject({ allowed: Array(COUNT).fill(true), statuses: Array(COUNT).fill(204), ...scopeOf[where] });
    // Two at once from the full bucket, then one per refill interval: never sooner, never later.
    const schedule = Array.from({ length: COUNT }, (_, i) => String(Math.max(0, i - LIMIT + 1) * INTERVAL_MS));
    expect(arrivals.get(run)).toEqual(schedule);
    expect(seen.answeredPerStep).toEqual(Array.from({ length: COUNT - LIMIT + 1 }, (_, step) => LIMIT + step));
    expect(pageErrors).toEqual([]);
  }, 10_000);

  it.each(['page', 'worker'] as const)("in the %s: on the browser's own timers, every request waits for its permit and goes through", async (where) => {
    const run = `${where}-system`;
    const seen = await burstIn(where, run, 'system');
    expect(seen).toMatchObject({ allowed: Array(COUNT).fill(true), statuses: Array(COUNT).fill(204), answeredPerStep: [], ...scopeOf[where] });
    expect(arrivals.get(run)).toHaveLength(COUNT);
    // A lower bound only, on the clock the limiter reads: a busy machine makes the burst slower,
    // never faster. (1 ms below the ideal: the limiter reads whole milliseconds.)
    expect(seen.spanMs).toBeGreaterThan((COUNT - LIMIT) * INTERVAL_MS - 1);
    expect(pageErrors).toEqual([]);
  }, 10_000);

  const burstIn = (where: 'page' | 'worker', run: string, clock: 'manual' | 'system') =>
    page.evaluate(
      ([where, ...args]) => (where === 'page' ? (window as unknown as BurstWindow).burstInPage(...args) : (window as unknown as BurstWindow).burstInWorker(...args)),
      [where, run, COUNT, LIMIT, WINDOW_MS, clock] as const,
    );
});

const scopeOf = {
  page: { scope: 'Window', hasDocument: true },
  worker: { scope: 'DedicatedWorkerGlobalScope', hasDocument: false },
} as const;

interface Seen {
  allowed: boolean[];
  statuses: number[];
  answeredPerStep: number[];
  spanMs: number;
  scope: string;
  hasDocument: boolean;
}

interface BurstWindow {
  burstInPage(run: string, count: number, limit: number, windowMs: number, clock: 'manual' | 'system'): Promise<Seen>;
  burstInWorker(run: string, count: number, limit: number, windowMs: number, clock: 'manual' | 'system'): Promise<Seen>;
}

/** Only the page, its two scripts and the built .js files are served; nothing else on disk is reachable. */
function fileFor(pathname: string): string | undefined {
  if (pathname === '/') return resolve(fixtures, 'page.html');
  if (pathname === '/burst.js' || pathname === '/worker.js') return resolve(fixtures, pathname.slice(1));
  const built = /^\/dist\/([\w.-]+\.js)$/.exec(pathname)?.[1];
  return built !== undefined && existsSync(resolve(dist, built)) ? resolve(dist, built) : undefined;
}
