// throttlerStorage (src/http/nest-throttler-storage.ts) inside a real NestJS 12 application with
// @nestjs/throttler 6's guard as APP_GUARD, over loopback. The fixture needs decorator metadata,
// so it is compiled here by tsc into a temporary directory, not by vitest's transformer.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { KeyedRateLimiter, ManualClock, Rule, SlidingWindowLog, TokenBucket } from '../../src/index';
import { throttlerStorage, type ThrottlerStorageLike } from '../../src/http';
import { RedisRateLimiter } from '../../src/redis';
import { ioredisClient, redisPort, uniquePrefix } from '../redis/helpers/clients';
import { startRedisServer } from '../redis/helpers/redis-server';

interface Throttler {
  name?: string;
  ttl: number;
  limit: number;
}
type StartApp = (storage: ThrottlerStorageLike, throttlers: Throttler[]) => Promise<{ url: string; app: { close(): Promise<void> } }>;

const root = fileURLToPath(new URL('../..', import.meta.url));
const out = mkdtempSync(join(tmpdir(), 'ratekeeper-nest-'));
let startApp: StartApp;

beforeAll(() => {
  const tsc = join(root, 'node_modules/typescript/bin/tsc');
  const flags = ['--module', 'nodenext', '--target', 'es2022', '--experimentalDecorators', '--emitDecoratorMetadata', '--skipLibCheck', '--strict'];
  execFileSync(process.execPath, [tsc, ...flags, '--outDir', out, join(root, 'test/http/nest-fixture/app.cts')]);
  // The compiled app requires Nest from the project's node_modules.
  symlinkSync(join(root, 'node_modules'), join(out, 'node_modules'), 'dir');
  ({ startApp } = createRequire(import.meta.url)(join(out, 'app.cjs')) as { startApp: StartApp });
}, 120_000);
afterAll(() => rmSync(out, { recursive: true, force: true }));

let closeApp: (() => Promise<void>) | undefined;
afterEach(async () => {
  await closeApp?.();
  closeApp = undefined;
});

async function serve(storage: ThrottlerStorageLike, throttlers: Throttler[]) {
  const { url, app } = await startApp(storage, throttlers);
  closeApp = () => app.close();
  return async (path = '/ok') => {
    const response = await fetch(url + path);
    const headers: Record<string, string> = {};
    response.headers.forEach((value, name) => {
      if (name.startsWith('x-ratelimit') || name.startsWith('retry-after')) headers[name] = value;
    });
    return { status: response.status, headers };
  };
}

/** Limiters on one frozen clock, one per throttler name and rule, kept so a test can look inside. */
function frozen(algorithm: (rule: Rule) => TokenBucket | SlidingWindowLog = (rule) => new TokenBucket(rule)) {
  const clock = new ManualClock(0);
  const built = new Map<string, KeyedRateLimiter>();
  const storage = throttlerStorage({
    limiter: (rule, name) => {
      const limiter = new KeyedRateLimiter({ algorithm: () => algorithm(rule), clock });
      built.set(`${name} ${rule.limit}/${rule.windowMs}`, limiter);
      return limiter;
    },
  });
  return { clock, built, storage };
}

describe('@nestjs/throttler 6 with throttlerStorage', () => {
  it('allows the limit, then 429 with the exact Retry-After; Nest writes its own headers from the record', async () => {
    const { storage } = frozen();
    const get = await serve(storage, [{ ttl: 60_000, limit: 3 }]);
    for (const [remaining, reset] of [[2, 20], [1, 40], [0, 60]]) {
      expect(await get()).toEqual({
        status: 200,
        headers: { 'x-ratelimit-limit': '3', 'x-ratelimit-remaining': String(remaining), 'x-ratelimit-reset': String(reset) },
      });
    }
    // A token bucket of 3 a minute has its next token in 20 s, where Nest's storage says 60.
    expect(await get()).toEqual({ status: 429, headers: { 'retry-after': '20' } });
  });

  it('a refused request spends nothing and blockDuration is not applied: the retry is exact', async () => {
    const { clock, storage } = frozen((rule) => new SlidingWindowLog(rule));
    const get = await serve(storage, [{ ttl: 10_000, limit: 2 }]);
    expect((await get()).status).toBe(200);
    clock.set(4000);
    expect((await get()).status).toBe(200);
    for (let i = 0; i < 5; i++) expect(await get()).toEqual({ status: 429, headers: { 'retry-after': '6' } });
    clock.set(9999);
    expect((await get()).headers['retry-after']).toBe('1');
    // Nest's own storage would block the key for blockDuration (ttl) from the first refusal.
    clock.set(10_000);
    expect((await get()).status).toBe(200);
  });

  it("a route's @Throttle limit is its own rule and key; @SkipThrottle is never counted", async () => {
    const { built, storage } = frozen();
    const get = await serve(storage, [{ ttl: 60_000, limit: 3 }]);
    expect(await get('/strict')).toEqual({ status: 200, headers: { 'x-ratelimit-limit': '1', 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '60' } });
    expect(await get('/strict')).toEqual({ status: 429, headers: { 'retry-after': '60' } });
    expect((await get('/ok')).headers['x-ratelimit-remaining']).toBe('2');
    for (let i = 0; i < 5; i++) expect((await get('/free')).status).toBe(200);
    expect([...built.keys()].sort()).toEqual(['default 1/60000', 'default 3/60000']);
  });

  it('named throttlers are incremented one by one: the earlier ones are spent when a later one refuses', async () => {
    const { clock, built, storage } = frozen((rule) => new SlidingWindowLog(rule));
    const get = await serve(storage, [
      { name: 'short', ttl: 1000, limit: 1 },
      { name: 'long', ttl: 60_000, limit: 2 },
    ]);
    expect((await get()).status).toBe(200);
    clock.set(1000);
    expect((await get()).status).toBe(200);
    clock.set(2000);
    const refused = await get();
    expect(refused).toMatchObject({ status: 429, headers: { 'retry-after-long': '58' } });
    // Nest's guard asked 'short' first (shorter ttl), which granted and spent; 'long' then refused.
    // So half a second later 'short' refuses, for the request that was never served.
    clock.set(2500);
    expect(await get()).toMatchObject({ status: 429, headers: { 'retry-after-short': '1' } });
    expect(built.get('long 2/60000')!.size).toBe(1);
  });
});

describe('throttlerStorage options', () => {
  it('need a limiter factory; what it builds must decide', async () => {
    expect(() => throttlerStorage(undefined as never)).toThrow('ratekeeper: throttlerStorage options must be an object, got undefined');
    expect(() => throttlerStorage({} as never)).toThrow('ratekeeper: `limiter` must be a function of (rule, throttlerName), got undefined');
    const storage = throttlerStorage({ limiter: () => ({}) as never });
    await expect(storage.increment('k', 1000, 1, 1000, 'default')).rejects.toThrow('ratekeeper: `limiter` must return an object with a tryAcquire(key, permits) method, got an object');
  });

  it("Nest's numbers become the rule: a ttl no rule has is the Rule's RangeError", async () => {
    const storage = throttlerStorage({ limiter: (rule) => new KeyedRateLimiter({ algorithm: () => new TokenBucket(rule) }) });
    await expect(storage.increment('k', 1.5, 1, 0, 'default')).rejects.toThrow(RangeError);
    await expect(storage.increment('k', 1000, 0, 0, 'default')).rejects.toThrow(RangeError);
  });

  it('times are whole seconds rounded up; a refusal reports limit + 1 and is blocked until the exact retry', async () => {
    const clock = new ManualClock(0);
    const storage = throttlerStorage({ limiter: (rule) => new KeyedRateLimiter({ algorithm: () => new TokenBucket(rule), clock }) });
    expect(await storage.increment('k', 1500, 2, 1500, 'default')).toEqual({ totalHits: 1, timeToExpire: 1, isBlocked: false, timeToBlockExpire: 0 });
    expect(await storage.increment('k', 1500, 2, 1500, 'default')).toEqual({ totalHits: 2, timeToExpire: 2, isBlocked: false, timeToBlockExpire: 0 });
    expect(await storage.increment('k', 1500, 2, 1500, 'default')).toEqual({ totalHits: 3, timeToExpire: 2, isBlocked: true, timeToBlockExpire: 1 });
    clock.set(749);
    expect((await storage.increment('k', 1500, 2, 1500, 'default')).isBlocked).toBe(true);
    clock.set(750);
    expect((await storage.increment('k', 1500, 2, 1500, 'default')).isBlocked).toBe(false);
  });
});

// Its own redis-server, to stop; none in `npm run test:fast`, which starts no server (redisPort 0).
describe.skipIf(!redisPort)('@nestjs/throttler over a Redis limiter when redis-server is stopped', () => {
  it("the limiter's onStoreError decides: 'deny' answers 429, 'allow' lets the request through", async () => {
    const server = await startRedisServer();
    const client = ioredisClient(server.port, { enableOfflineQueue: false });
    try {
      await new Promise((resolve) => client.once('ready', resolve));
      for (const [onStoreError, status] of [['deny', 429], ['allow', 200]] as const) {
        const storage = throttlerStorage({
          limiter: (rule, name) =>
            new RedisRateLimiter({ client, algorithm: 'sliding-window-log', rule, name: `${name}:${rule.limit}:${rule.windowMs}`, onStoreError, timeoutMs: 200, prefix: uniquePrefix('nest') }),
        });
        const get = await serve(storage, [{ ttl: 60_000, limit: 1 }]);
        if (onStoreError === 'deny') {
          expect((await get()).status).toBe(200);
          expect((await get()).status).toBe(429);
          await server.stop();
        }
        expect((await get()).status).toBe(status);
        expect((await get()).status).toBe(status);
        await closeApp?.();
        closeApp = undefined;
      }
    } finally {
      client.disconnect();
      await server.stop();
    }
  });
});
