// src/http/koa-adapter.ts on Koa 3 and Koa 2 over loopback: what is Koa's own (errors thrown
// downstream, `app.proxy`) and a store outage. What every adapter shares (limits, fields, proxies,
// skip, settling) runs for Koa in servers.test.ts.
import type { Server } from 'node:http';
import Koa from 'koa';
import Koa2 from 'koa-2';
import { afterEach, describe, expect, expectTypeOf, it, vi } from 'vitest';
import { KeyedRateLimiter, ManualClock, Rule, TokenBucket, type Decision } from '../../src/index';
import { koaRateLimit, type KoaRateLimitOptions, type RateLimitState, type RequestDecision } from '../../src/http';
import { redisPort } from '../redis/helpers/clients';
import { stoppableRedis } from './support/outage';
import { limitFields, listening } from './support/servers';

const threePerMinute = () => new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(3, 60_000)), clock: new ManualClock(0) });
type Context = Koa.ParameterizedContext<RateLimitState>;

describe.each([
  ['Koa 3', Koa],
  ['Koa 2', Koa2],
])('%s', (_, Application) => {
  let server: Server | undefined;
  afterEach(async () => {
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve) ?? resolve(undefined));
    server = undefined;
  });

  /**
   * Koa with its own error handling (no error middleware of the test's): `before` runs ahead of
   * the limiter, `handler` after it.
   */
  async function serve(options: KoaRateLimitOptions<Context>, handler: Koa.Middleware<RateLimitState>, before?: Koa.Middleware<RateLimitState>, proxy = false) {
    const app = new Application<RateLimitState>();
    app.silent = true;
    app.proxy = proxy;
    if (before !== undefined) app.use(before);
    app.use(koaRateLimit<Context>(options));
    app.use(handler);
    server = app.listen(0, '127.0.0.1');
    const { port } = await listening(server);
    return (headers: Record<string, string> = {}, signal?: AbortSignal) => fetch(`http://127.0.0.1:${port}/`, { headers, ...(signal && { signal }) });
  }

  /** Waits (real time, generously bounded) until `check` holds: settling runs as the response closes. */
  const eventually = async (check: () => boolean) => {
    for (let i = 0; i < 200 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 5));
    expect(check()).toBe(true);
  };

  describe('a handler that throws', () => {
    it('is settled as the failure Koa answers, once, and the error goes on to Koa', async () => {
      const limiter = threePerMinute();
      const statuses: number[] = [];
      const get = await serve({ limiter, key: () => 'k', settle: (status) => (statuses.push(status), 0) }, (ctx) => {
        if (ctx.get('x-throw') === '401') ctx.throw(401, 'who are you');
        throw new Error('boom');
      });
      const plain = await get();
      expect([plain.status, await plain.text()]).toEqual([500, 'Internal Server Error']);
      const unauthorized = await get({ 'x-throw': '401' });
      expect([unauthorized.status, await unauthorized.text()]).toEqual([401, 'who are you']);
      await eventually(() => statuses.length === 2);
      await new Promise((resolve) => setTimeout(resolve, 50)); // a second settle, were there one, would come as the response closes
      expect(statuses).toEqual([500, 401]);
      expect(limiter.peek('k', 0).remaining).toBe(3);
    });

    it('counts as a failure even when a handler above renders it as a success', async () => {
      const limiter = threePerMinute();
      const caught: unknown[] = [];
      const get = await serve(
        { limiter, key: () => 'k', skipFailedRequests: true },
        () => {
          throw new Error('boom');
        },
        async (ctx, next) => {
          try {
            await next();
          } catch (error) {
            caught.push(error);
            ctx.status = 200;
            ctx.body = { error: 'try again' };
          }
        },
      );
      for (let i = 0; i < 5; i++) expect((await get()).status).toBe(200);
      expect(caught).toHaveLength(5);
      expect(limiter.peek('k', 0).remaining).toBe(3);
    });

    it('after its client left, counts in full: leaving cannot earn a refund', async () => {
      const limiter = threePerMinute();
      let threw = () => {};
      const thrown = new Promise<void>((resolve) => (threw = resolve));
      let ran = () => {};
      const running = new Promise<void>((resolve) => (ran = resolve));
      const get = await serve({ limiter, key: () => 'k', skipFailedRequests: true }, async (ctx) => {
        ran();
        await new Promise((resolve) => ctx.res.once('close', resolve));
        threw();
        throw new Error('the client left');
      });
      const controller = new AbortController();
      const leaving = get({}, controller.signal).catch(() => undefined);
      await running;
      controller.abort();
      await leaving;
      await thrown;
      await new Promise((resolve) => setTimeout(resolve, 50)); // a settle, were there one, follows within microtasks
      expect(limiter.peek('k', 0).remaining).toBe(2);
    });

    it('under skipSuccessfulRequests, counts: thrown errors cannot be a way round the limit', async () => {
      const limiter = threePerMinute();
      const get = await serve({ limiter, key: () => 'k', skipSuccessfulRequests: true }, () => {
        throw new Error('boom');
      });
      for (let i = 0; i < 3; i++) expect((await get()).status).toBe(500);
      await eventually(() => limiter.peek('k', 0).remaining === 0);
      expect((await get()).status).toBe(429);
    });
  });

  it('is typed: the callbacks see the context given, the handlers ctx.state.rateLimit through RateLimitState', () => {
    const app = new Application<RateLimitState>();
    app.use(koaRateLimit<Koa.Context>({ limiter: threePerMinute(), key: (ctx) => ctx.get('x-api-key') }));
    app.use((ctx) => expectTypeOf(ctx.state.rateLimit).toEqualTypeOf<RequestDecision | undefined>());
    // @ts-expect-error onRejected answers through ctx; it returns no Response
    koaRateLimit({ limiter: threePerMinute(), onRejected: () => new Response() });
  });

  describe("Koa's app.proxy", () => {
    it('is not trusted: the key stays the peer, and a warning says to set trustProxies, once', async () => {
      const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
      try {
        const get = await serve({ limiter: threePerMinute() }, (ctx) => void (ctx.body = ctx.ip), undefined, true);
        const statuses: number[] = [];
        for (let i = 0; i < 4; i++) statuses.push((await get({ 'x-forwarded-for': `203.0.113.${i}` })).status);
        expect(statuses).toEqual([200, 200, 200, 429]);
        expect(warn.mock.calls).toEqual([
          [
            "ratekeeper: koaRateLimit does not read Koa's `app.proxy`: every client behind your proxy shares the proxy's limit. " +
              'Set `trustProxies` to the number of proxies in front of the server (or pass `key`).',
          ],
        ]);
      } finally {
        warn.mockRestore();
      }
    });

    it('with trustProxies set, is no reason to warn', async () => {
      const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
      try {
        const get = await serve({ limiter: threePerMinute(), trustProxies: 1 }, (ctx) => void (ctx.body = 'ok'), undefined, true);
        for (let i = 0; i < 4; i++) expect((await get({ 'x-forwarded-for': `203.0.113.${i}` })).status).toBe(200);
        expect(warn).not.toHaveBeenCalled();
      } finally {
        warn.mockRestore();
      }
    });
  });

  // A store that goes away mid-run: its outage policy answers, and its refusal is an ordinary 429.
  describe.skipIf(!redisPort)('over a RedisRateLimiter whose server stops', () => {
    it("'deny' refuses with the policy's retry, marked degraded; 'allow' lets requests through", async () => {
      const redis = await stoppableRedis('koa');
      try {
        const get = await serve({ limiter: redis.limiter, key: (ctx) => ctx.get('x-policy'), name: 'api', windowMs: 60_000 }, (ctx) => void (ctx.body = ctx.state.rateLimit));
        const before = await get({ 'x-policy': 'deny' });
        expect(await before.json()).toEqual({ allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetAfterMs: 20_000 });
        await redis.stop();
        const refused = await get({ 'x-policy': 'deny' });
        expect(refused.status).toBe(429);
        expect(limitFields(refused)).toEqual({ 'ratelimit-policy': '"api";q=3;w=60', ratelimit: '"api";r=0;t=20', 'retry-after': '20' });
        const allowed = await get({ 'x-policy': 'allow' });
        expect(allowed.status).toBe(200);
        expect(await allowed.json()).toMatchObject({ allowed: true, remaining: 2, degraded: expect.stringMatching(/^store-(error|timeout)$/) });
      } finally {
        await redis.close();
      }
    });
  });
});
