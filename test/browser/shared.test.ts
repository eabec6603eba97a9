// ratekeeper/shared in real Chromium Web Workers: a page served over loopback with COOP/COEP
// (so it is cross-origin isolated and has SharedArrayBuffer) creates a SharedKeyedRateLimiter
// from the built module, hands its buffer to module workers, and they race for one key with the
// clock frozen. Exactly the limit must be granted, as in the worker_threads races.
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
const haveChromium = existsSync(CHROMIUM);
const LIMIT = 20_000;

interface Raced {
  granted: number[];
  scopes: string[];
  left: number;
  isolated: boolean;
}

describe.skipIf(!haveChromium && process.env.CI !== 'true')('in headless Chromium, Web Workers share one limit through ratekeeper/shared', () => {
  let server: Server;
  let browser: Browser;
  let page: Page;
  const pageErrors: string[] = [];

  beforeAll(async () => {
    if (!existsSync(resolve(dist, 'shared.js'))) throw new Error('dist/shared.js is missing: run `npx tsup` (npm test builds it first)');
    server = createServer((request, response) => {
      const path = new URL(request.url ?? '/', 'http://loopback').pathname;
      const file =
        path === '/' ? resolve(fixtures, 'shared-page.html')
        : path === '/shared-worker.js' ? resolve(fixtures, 'shared-worker.js')
        : /^\/dist\/[\w.-]+\.js$/.test(path) && existsSync(resolve(root, path.slice(1))) ? resolve(root, path.slice(1))
        : undefined;
      if (file === undefined) {
        response.writeHead(404).end();
        return;
      }
      response
        .writeHead(200, {
          'content-type': extname(file) === '.html' ? 'text/html; charset=utf-8' : 'text/javascript; charset=utf-8',
          'cache-control': 'no-store',
          // Cross-origin isolation: without both, the page has no SharedArrayBuffer.
          'cross-origin-opener-policy': 'same-origin',
          'cross-origin-embedder-policy': 'require-corp',
        })
        .end(readFileSync(file));
    });
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    ({ browser, page } = await openPage(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, pageErrors));
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    server?.closeAllConnections();
    await new Promise((done) => server?.close(done));
  });

  it.each([
    { workers: 2, mixed: false },
    { workers: 2, mixed: true },
    { workers: 4, mixed: false },
    { workers: 4, mixed: true },
  ])('$workers module workers, mixed permits: $mixed — exactly the limit granted (3 runs)', async ({ workers, mixed }) => {
    for (let run = 0; run < 3; run++) {
      const seen = await page.evaluate(
        ([w, limit, m]) => (window as unknown as { race(w: number, limit: number, m: boolean): Promise<Raced> }).race(w, limit, m),
        [workers, LIMIT, mixed] as const,
      );
      const granted = seen.granted.reduce((a, b) => a + b, 0);
      expect(seen.isolated).toBe(true);
      expect(seen.scopes).toEqual(['DedicatedWorkerGlobalScope']);
      expect(granted + seen.left, `run ${run}: ${seen.granted.join(' + ')} granted, ${seen.left} left`).toBe(LIMIT);
      if (!mixed) expect(seen.left).toBe(0);
      if (run === 0) console.log(`${workers} Web Workers${mixed ? ', mixed permits' : ''}: granted ${seen.granted.join(' + ')} = ${granted}, ${seen.left} left`);
    }
    expect(pageErrors).toEqual([]);
  }, 30_000);
});
