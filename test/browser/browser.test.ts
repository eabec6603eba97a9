// The built ESM core in a real browser (Debian Chromium, headless): in the page and in a module
// worker, a burst of fetches paced by `KeyedRateLimiter.acquire` reaches a loopback server no faster
// than the rule allows, and no slower than it needs to. The server, not the browser, is the witness.
import { existsSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { extname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM, openPage } from './chromium';

const root = fileURLToPath(new URL('../..', import.meta.url));
const dist = resolve(root, 'dist');
const fixtures = resolve(root, 'test/browser/fixtures');

/** The rule both bursts run under: a bucket of 2, refilled one permit every 100 ms. */
const LIMIT = 2;
const WINDOW_MS = 200;
const INTERVAL_MS = WINDOW_MS / LIMIT;
const COUNT = 10;
/**
 * Loopback delivery jitter allowed between the browser granting a permit and the server seeing the
 * request. A request that opens a new connection on a loaded machine arrives up to ~70 ms late
 * (seen at load average 10), which shortens every gap measured from it. Still far below one
 * interval: unpaced, requests two apart arrive within a few ms, against 25 ms allowed.
 */
const JITTER_MS = 75;

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
  const arrivals = new Map<string, number[]>();
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
        arrivals.set(run, [...(arrivals.get(run) ?? []), performance.now()]);
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
  }, 15_000);

  afterAll(async () => {
    await browser?.close();
    server?.closeAllConnections();
    await new Promise((done) => server?.close(done));
  });

  it('in the page: every request waits for its permit, and arrivals respect the token bucket law', async () => {
    const seen = await page.evaluate(
      (args) => (window as unknown as BurstWindow).burstInPage(...args),
      ['page', COUNT, LIMIT, WINDOW_MS] as const,
    );
    expect(seen).toEqual({ allowed: Array(COUNT).fill(true), statuses: Array(COUNT).fill(204), scope: 'Window', hasDocument: true });
    expectPaced(arrivals.get('page'));
    expect(pageErrors).toEqual([]);
  }, 10_000);

  it('in a module worker: the same, with no DOM at all', async () => {
    const seen = await page.evaluate(
      (args) => (window as unknown as BurstWindow).burstInWorker(...args),
      ['worker', COUNT, LIMIT, WINDOW_MS] as const,
    );
    expect(seen).toEqual({
      allowed: Array(COUNT).fill(true),
      statuses: Array(COUNT).fill(204),
      scope: 'DedicatedWorkerGlobalScope',
      hasDocument: false,
    });
    expectPaced(arrivals.get('worker'));
    expect(pageErrors).toEqual([]);
  }, 10_000);
});

interface Seen {
  allowed: boolean[];
  statuses: number[];
  scope: string;
  hasDocument: boolean;
}

interface BurstWindow {
  burstInPage(run: string, count: number, limit: number, windowMs: number): Promise<Seen>;
  burstInWorker(run: string, count: number, limit: number, windowMs: number): Promise<Seen>;
}

/**
 * A bucket of `LIMIT` refilled every `INTERVAL_MS` lets at most `LIMIT + span / INTERVAL_MS`
 * requests through in any span, so requests i..j (sorted) can arrive no closer than
 * `(j - i + 1 - LIMIT) * INTERVAL_MS`, less delivery jitter. Unpaced, all ten land within a few ms.
 */
function expectPaced(times: number[] | undefined): void {
  expect(times).toHaveLength(COUNT);
  const sorted = [...(times ?? [])].sort((a, b) => a - b);
  const tooClose: string[] = [];
  for (let i = 0; i < sorted.length; i++) {
    for (let j = i + LIMIT; j < sorted.length; j++) {
      const gap = (sorted[j] as number) - (sorted[i] as number);
      const least = (j - i + 1 - LIMIT) * INTERVAL_MS - JITTER_MS;
      if (gap < least) tooClose.push(`requests ${i}..${j} arrived ${gap.toFixed(1)} ms apart, least allowed ${least} ms`);
    }
  }
  expect(tooClose).toEqual([]);
  // Paced, not stalled: the last request is not held far past the moment its permit exists.
  const span = (sorted.at(-1) as number) - (sorted[0] as number);
  expect(span).toBeLessThan((COUNT - LIMIT) * INTERVAL_MS + 500);
}

/** Only the page, its two scripts and the built .js files are served; nothing else on disk is reachable. */
function fileFor(pathname: string): string | undefined {
  if (pathname === '/') return resolve(fixtures, 'page.html');
  if (pathname === '/burst.js' || pathname === '/worker.js') return resolve(fixtures, pathname.slice(1));
  const built = /^\/dist\/([\w.-]+\.js)$/.exec(pathname)?.[1];
  return built !== undefined && existsSync(resolve(dist, built)) ? resolve(dist, built) : undefined;
}
