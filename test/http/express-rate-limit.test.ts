// rateLimitStore (src/http/express-rate-limit-store.ts) inside the real express-rate-limit, 7 and 8,
// on Express 5 over loopback: the limiter decides, express-rate-limit answers and writes its headers.
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { fc, test as prop } from '@fast-check/vitest';
import express from 'express';
import { rateLimit as rateLimit8 } from 'express-rate-limit';
import { rateLimit as rateLimit7 } from 'express-rate-limit-7';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Composite, KeyedRateLimiter, ManualClock, Rule, SlidingWindowLog, TokenBucket } from '../../src/index';
import { rateLimitStore, type ExpressRateLimitStore } from '../../src/http';
import { RedisRateLimiter } from '../../src/redis';
import { SharedKeyedRateLimiter } from '../../src/shared';
import { ioredisClient, redisPort, uniquePrefix, useIoredis } from '../redis/helpers/clients';
import { startRedisServer } from '../redis/helpers/redis-server';

type Options = Parameters<typeof rateLimit8>[0];
const VERSIONS = [
  ['express-rate-limit 7', (options: Options) => rateLimit7(options as Parameters<typeof rateLimit7>[0])],
  ['express-rate-limit 8', rateLimit8],
] as const;

/** A frozen clock: a refused request's retry and a grant's reset are exact numbers. */
function limiterOf(rule: Rule, algorithm: (rule: Rule) => TokenBucket | SlidingWindowLog = (r) => new SlidingWindowLog(r)) {
  return new KeyedRateLimiter({ algorithm: () => algorithm(rule), clock: new ManualClock(0) });
}

let running: Server | undefined;
afterEach(async () => {
  await new Promise((resolve) => (running === undefined ? resolve(undefined) : running.close(resolve)));
  running = undefined;
});

/**
 * Express 5 with the middleware in front of GET /ok (200), GET /fail (500), GET /missing (404, no
 * route); errors answer 500 with their message. The key is one client's, so the tests need no proxy.
 */
async function serve(middleware: express.RequestHandler) {
  const app = express();
  app.use(middleware);
  app.get('/ok', (_req, res) => void res.send('ok'));
  app.get('/fail', (_req, res) => void res.status(500).send('failed'));
  app.use((error: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => void res.status(500).send(error.message));
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  running = server;
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return (path = '/ok') => fetch(base + path).then(async (response) => ({ status: response.status, headers: response.headers, body: await response.text() }));
}

/** Waits for every `decrement` express-rate-limit has started to finish: it calls them after the response, unawaited. */
function counting(store: ExpressRateLimitStore) {
  let started = 0;
  let finished = 0;
  const decrement = store.decrement.bind(store);
  store.decrement = async (key) => {
    started++;
    try {
      await decrement(key);
    } finally {
      finished++;
    }
  };
  return {
    store,
    async settled() {
      for (let turns = 0; finished < started || turns < 3; turns++) await new Promise((resolve) => setImmediate(resolve));
    },
  };
}

const common = { keyGenerator: () => 'client', standardHeaders: 'draft-7', legacyHeaders: false } as const;

describe.each(VERSIONS)('%s', (_, rateLimit) => {
  it('allows the limit, then refuses with the exact retry in its own headers', async () => {
    const get = await serve(rateLimit({ ...common, windowMs: 60_000, limit: 3, store: rateLimitStore(limiterOf(new Rule(3, 60_000), (r) => new TokenBucket(r))) }));
    for (const remaining of [2, 1, 0]) {
      const response = await get();
      expect(response.status).toBe(200);
      expect(response.headers.get('ratelimit')).toMatch(new RegExp(`^limit=3, remaining=${remaining}, reset=(20|40|60)$`));
    }
    const refused = await get();
    expect(refused.status).toBe(429);
    // A token bucket of 3 a minute gives the next token 20 s later, where the window would say 60.
    expect(refused.headers.get('retry-after')).toBe('20');
    expect(refused.headers.get('ratelimit')).toBe('limit=3, remaining=0, reset=20');
  });

  it('a refused request spends nothing: a sliding log lets exactly the limit through, however many were refused', async () => {
    const limiter = limiterOf(new Rule(2, 60_000));
    const get = await serve(rateLimit({ ...common, windowMs: 60_000, limit: 2, store: rateLimitStore(limiter) }));
    const statuses = [];
    for (let i = 0; i < 6; i++) statuses.push((await get()).status);
    expect(statuses).toEqual([200, 200, 429, 429, 429, 429]);
    expect(limiter.peek('client', 0).remaining).toBe(0);
  });

  it('a numeric limit other than the rule limit is an error at init; no request then passes unlimited', async () => {
    const limiter = new SharedKeyedRateLimiter({ algorithm: 'fixed-window', rule: new Rule(5, 60_000), maxKeys: 16 });
    const message = "ratekeeper: express-rate-limit's `limit` must be the limiter's rule limit, 5, got 10";
    const logged: unknown[] = [];
    let middleware: express.RequestHandler;
    try {
      middleware = rateLimit({ ...common, windowMs: 60_000, limit: 10, store: rateLimitStore(limiter), logger: { error: (error: unknown) => logged.push(error), warn: () => {}, info: () => {}, debug: () => {} } } as Options);
    } catch (error) {
      // express-rate-limit 7 lets init's error out of rateLimit() itself.
      expect(error).toMatchObject({ name: 'RangeError', message, code: 'ERR_RATEKEEPER_OUT_OF_RANGE' });
      return;
    }
    // express-rate-limit 8 only logs it: each request then fails with it.
    expect(logged).toEqual([expect.objectContaining({ message })]);
    const get = await serve(middleware);
    expect(await get()).toMatchObject({ status: 500, body: message });
  });

  it('the store is fresh per call, so two middlewares never share one', () => {
    const limiter = limiterOf(Rule.perMinute(5));
    expect(rateLimitStore(limiter)).not.toBe(rateLimitStore(limiter));
  });

  it('a Composite under a numeric limit: refused exactly when ratekeeper refuses, remaining the binding part', async () => {
    const limiter = new KeyedRateLimiter({
      algorithm: () => new Composite([new TokenBucket(new Rule(2, 1000)), new SlidingWindowLog(new Rule(3, 60_000))]),
      clock: new ManualClock(0),
    });
    const get = await serve(rateLimit({ ...common, windowMs: 1000, limit: 2, store: rateLimitStore(limiter) }));
    expect((await get()).headers.get('ratelimit')).toMatch(/^limit=2, remaining=1,/);
    expect((await get()).status).toBe(200);
    expect((await get()).status).toBe(429);
  });

  it("a route's own limit beside a global one: each middleware its own store, no double-count warning", async () => {
    const printed = vi.spyOn(console, 'error').mockImplementation(() => {});
    try {
      const app = express();
      app.use(rateLimit({ ...common, windowMs: 60_000, limit: 5, store: rateLimitStore(limiterOf(new Rule(5, 60_000))) }));
      app.use('/login', rateLimit({ ...common, windowMs: 60_000, limit: 1, store: rateLimitStore(limiterOf(new Rule(1, 60_000))) }));
      app.get(['/ok', '/login'], (_req, res) => void res.send('ok'));
      const get = await serve(app);
      expect((await get('/login')).status).toBe(200);
      expect((await get('/login')).status).toBe(429);
      expect((await get('/ok')).status).toBe(200);
      // The refused /login spent the global limit's permit, as express-rate-limit counts it first.
      expect((await get('/ok')).headers.get('ratelimit')).toMatch(/^limit=5, remaining=1,/);
      expect(printed.mock.calls.flat().map(String).filter((text) => text.includes('ERR_ERL_DOUBLE_COUNT'))).toEqual([]);
    } finally {
      printed.mockRestore();
    }
  });

  it('resetKey and getKey go to the limiter', async () => {
    const limiter = limiterOf(new Rule(2, 60_000));
    const middleware = rateLimit({ ...common, windowMs: 60_000, limit: 2, store: rateLimitStore(limiter) });
    const get = await serve(middleware);
    await get();
    await get();
    expect(await middleware.getKey('client')).toEqual({ totalHits: 2, resetTime: expect.any(Date) });
    expect(await middleware.getKey('someone-else')).toBeUndefined();
    await middleware.resetKey('client');
    expect((await get()).status).toBe(200);
  });

  describe('skipFailedRequests', () => {
    it('gives a failed request back, never a refused one', async () => {
      const limiter = limiterOf(new Rule(2, 60_000));
      const { store, settled } = counting(rateLimitStore(limiter));
      const get = await serve(rateLimit({ ...common, windowMs: 60_000, limit: 2, skipFailedRequests: true, store }));
      for (let i = 0; i < 3; i++) expect((await get('/fail')).status).toBe(500);
      await settled();
      expect(limiter.peek('client', 0).remaining).toBe(2);
      expect((await get()).status).toBe(200);
      expect((await get()).status).toBe(200);
      for (let i = 0; i < 5; i++) expect((await get()).status).toBe(429);
      await settled();
      expect(limiter.peek('client', 0).remaining).toBe(0);
    });

    // The attacker's loop: once the limit is reached, failures and refusals (each of which makes
    // express-rate-limit call decrement) must never earn another success in the window.
    prop.prop([fc.array(fc.array(fc.constantFrom('/ok', '/fail', '/missing'), { minLength: 1, maxLength: 4 }), { maxLength: 12 })], { numRuns: 12 })(
      'after the limit is reached, no sequence of requests gets another success in the window',
      async (rounds) => {
      await new Promise((resolve) => (running === undefined ? resolve(undefined) : running.close(resolve)));
      const limiter = limiterOf(new Rule(3, 60_000));
      const { store, settled } = counting(rateLimitStore(limiter));
      const get = await serve(rateLimit({ ...common, windowMs: 60_000, limit: 3, skipFailedRequests: true, store }));
      for (let i = 0; i < 3; i++) expect((await get()).status).toBe(200);
      for (const round of rounds) {
        // Requests of a round go together, so refusals' and failures' decrements interleave.
        const statuses = await Promise.all(round.map(async (path) => (await get(path)).status));
        expect(statuses.filter((status) => status === 200)).toEqual([]);
        await settled();
      }
      await settled();
      expect(limiter.peek('client', 0).remaining).toBe(0);
      },
    );

    it('needs a limiter with reserve: the shared limiter is an error at init', () => {
      const limiter = new SharedKeyedRateLimiter({ algorithm: 'token-bucket', rule: Rule.perMinute(5), maxKeys: 16 });
      const store = rateLimitStore(limiter);
      expect(() => store.init({ limit: 5, skipFailedRequests: true })).toThrow(
        'ratekeeper: `skipFailedRequests` and `skipSuccessfulRequests` need a limiter with a reserve(key, permits) method, such as a KeyedRateLimiter',
      );
    });
  });

  it('the shared limiter decides; resetKey is a TypeError, as it has no reset', async () => {
    const limiter = new SharedKeyedRateLimiter({ algorithm: 'fixed-window', rule: new Rule(1, 60_000), maxKeys: 16 });
    const middleware = rateLimit({ ...common, windowMs: 60_000, limit: 1, store: rateLimitStore(limiter) });
    const get = await serve(middleware);
    expect((await get()).status).toBe(200);
    expect((await get()).status).toBe(429);
    await expect(middleware.resetKey('client')).rejects.toThrow(TypeError);
  });

  it('passOnStoreError sees only what ratekeeper throws (a lone surrogate key): with it the request passes, without it Express answers 500', async () => {
    const limiter = limiterOf(new Rule(1, 60_000));
    for (const [passOnStoreError, status] of [[true, 200], [false, 500]] as const) {
      const get = await serve(rateLimit({ ...common, keyGenerator: () => '\uD800', windowMs: 60_000, limit: 1, passOnStoreError, store: rateLimitStore(limiter) }));
      expect((await get()).status).toBe(status);
      await new Promise((resolve) => running!.close(resolve));
      running = undefined;
    }
  });
});

describe('rateLimitStore init', () => {
  it.each([0, 2.5, Infinity, Number.NaN, 2 ** 53])('refuses express-rate-limit limit %s, which no rule has (0 means "refuse all" there)', (limit) => {
    const store = rateLimitStore(limiterOf(Rule.perMinute(5)));
    expect(() => store.init({ limit })).toThrow(`ratekeeper: express-rate-limit's \`limit\` must be a safe integer of at least 1, as a rule's limit is, got ${limit}`);
  });

  it('a later init that is right clears an earlier one that was wrong', async () => {
    const store = rateLimitStore(limiterOf(Rule.perMinute(5)));
    expect(() => store.init({ limit: 0 })).toThrow(RangeError);
    store.init({ limit: 5 });
    expect((await store.increment('k')).totalHits).toBe(1);
  });

  it("a decrement still cancelling over a store does not drop a grant made meanwhile", async () => {
    // A store-like limiter whose cancels wait until released, so the next increment runs in between.
    const inner = limiterOf(new Rule(2, 60_000));
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    const limiter = {
      tryAcquire: async (key: string) => inner.tryAcquire(key),
      reserve: async (key: string) => {
        const reservation = inner.reserve(key);
        return { decision: reservation.decision, settle: async (n: number) => reservation.settle(n), cancel: async () => held.then(() => reservation.cancel()) };
      },
    };
    const store = rateLimitStore(limiter);
    store.init({ limit: 2, skipFailedRequests: true });
    await store.increment('k');
    const first = store.decrement('k'); // the first request failed: its cancel is on its way
    await store.increment('k');
    release();
    await first;
    await store.decrement('k'); // the second failed too
    expect(inner.peek('k', 0).remaining).toBe(2);
  });

  it('the limiter must have tryAcquire', () => {
    expect(() => rateLimitStore({} as never)).toThrow('ratekeeper: `limiter` must be an object with a tryAcquire(key, permits) method, got an object');
  });
});

describe.runIf(redisPort !== 0)('skipFailedRequests over a RedisRateLimiter (reservations settled in Redis)', () => {
  const client = useIoredis();
  it.each(VERSIONS)('%s: a failure comes back, a refusal never does', async (_, rateLimit) => {
    const limiter = new RedisRateLimiter({ client, algorithm: 'sliding-window-log', rule: new Rule(2, 60_000), onStoreError: 'deny', clock: new ManualClock(0), prefix: uniquePrefix('erl-skip') });
    const { store, settled } = counting(rateLimitStore(limiter));
    const get = await serve(rateLimit({ ...common, windowMs: 60_000, limit: 2, skipFailedRequests: true, store }));
    // The next request comes before the last failure's refund has landed in Redis.
    for (let i = 0; i < 3; i++) expect((await get('/fail')).status).toBe(500);
    await settled();
    expect((await limiter.peek('client', 0)).remaining).toBe(2);
    expect((await get()).status).toBe(200);
    expect((await get()).status).toBe(200);
    const statuses = await Promise.all(['/ok', '/fail', '/ok', '/missing', '/ok'].map(async (path) => (await get(path)).status));
    expect(statuses).toEqual([429, 429, 429, 429, 429]);
    await settled();
    expect((await limiter.peek('client', 0)).remaining).toBe(0);
    expect((await get()).status).toBe(429);
  });
});

// Its own redis-server, to stop; none in `npm run test:fast`, which starts no server (redisPort 0).
describe.skipIf(!redisPort)('a Redis outage (redis-server stopped)', () => {
  it.each(VERSIONS)('%s: onStoreError decides, whatever passOnStoreError says', async (_, rateLimit) => {
    const server = await startRedisServer();
    const client = ioredisClient(server.port, { enableOfflineQueue: false });
    try {
      await new Promise((resolve) => client.once('ready', resolve));
      const limiterWith = (onStoreError: 'allow' | 'deny') =>
        new RedisRateLimiter({ client, algorithm: 'sliding-window-log', rule: new Rule(1, 60_000), onStoreError, timeoutMs: 200, prefix: uniquePrefix('erl') });
      const deny = limiterWith('deny');
      const allow = limiterWith('allow');
      const app = express();
      app.use('/deny', rateLimit({ ...common, windowMs: 60_000, limit: 1, passOnStoreError: true, store: rateLimitStore(deny) }));
      app.use('/allow', rateLimit({ ...common, windowMs: 60_000, limit: 1, store: rateLimitStore(allow) }));
      app.get(['/deny', '/allow'], (_req, res) => void res.send('ok'));
      running = app.listen(0, '127.0.0.1');
      await new Promise((resolve) => running!.once('listening', resolve));
      const base = `http://127.0.0.1:${(running.address() as AddressInfo).port}`;
      expect((await fetch(`${base}/deny`)).status).toBe(200);
      expect((await fetch(`${base}/deny`)).status).toBe(429);
      await server.stop();
      // Denied by the outage policy though passOnStoreError is set: the limiter never threw.
      expect((await fetch(`${base}/deny`)).status).toBe(429);
      expect((await fetch(`${base}/allow`)).status).toBe(200);
      expect((await fetch(`${base}/allow`)).status).toBe(200);
    } finally {
      client.disconnect();
      await server.stop();
    }
  });
});
