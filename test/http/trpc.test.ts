// src/http/trpc-adapter.ts on @trpc/server 11: its standalone (node:http) adapter on loopback, and
// its Fetch adapter handed real `Request`s. The limiter's clock is frozen, so every value is exact:
// a token bucket of 3 per minute refills one token every 20 s.
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { initTRPC, TRPCError } from '@trpc/server';
import { createHTTPServer, type CreateHTTPContextOptions } from '@trpc/server/adapters/standalone';
import { fetchRequestHandler } from '@trpc/server/adapters/fetch';
import { getHTTPStatusCodeFromError } from '@trpc/server/http';
import { TRPC_ERROR_CODES_BY_KEY } from '@trpc/server/rpc';
import { afterEach, describe, expect, expectTypeOf, it } from 'vitest';
import { rangeError, typeError } from '../../src/core/errors';
import { KeyedRateLimiter, ManualClock, Rule, TokenBucket, type AsyncRateLimiter, type Decision, type RateLimitedError } from '../../src/index';
import { trpcRateLimit, type RateLimitState, type TrpcRateLimitOptions } from '../../src/http';
import { redisPort } from '../redis/helpers/clients';
import { stoppableRedis } from './support/outage';
import { listening } from './support/servers';

const threePerMinute = () => new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(3, 60_000)), clock: new ManualClock(0) });

type Context = RateLimitState & { req?: IncomingMessage | Request | undefined; res?: ServerResponse | undefined; resHeaders?: Headers | undefined; user?: string | undefined };
const t = initTRPC.context<Context>().create();

function deferred(): { promise: Promise<void>; resolve(): void } {
  let resolve = () => {};
  const promise = new Promise<void>((done) => (resolve = done));
  return { promise, resolve };
}

/** `hang` resolves the first once it runs, and the second once its client has gone. */
let hanging = deferred();
let aborted = deferred();

/** What tRPC's onError heard, for the assertions on the errors themselves. */
let heard: TRPCError[] = [];
let server: Server | undefined;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve) ?? resolve(undefined));
  server = undefined;
  heard = [];
  hanging = deferred();
  aborted = deferred();
});

/**
 * Serves `hello` (answers the decision it was handed), `heavy` (the same, costing 3), `free`
 * (skipped), `fail` (throws a TRPCError with the code given as input) and `hang` (fails with
 * CLIENT_CLOSED_REQUEST once its client has gone) behind the middleware,
 * over the standalone adapter; `context` builds each call's context from Node's request and response.
 */
async function serve(options: TrpcRateLimitOptions<{ ctx: Context; path: string; type: 'query' | 'mutation' | 'subscription'; getRawInput: () => Promise<unknown> }>, context: (opts: CreateHTTPContextOptions) => Context = ({ req, res }) => ({ req, res })) {
  const limited = t.procedure.use(trpcRateLimit({ cost: ({ path }) => (path === 'heavy' ? 3 : 1), skip: ({ path }) => path === 'free', ...options }));
  const answer = ({ ctx }: { ctx: Context }) => ({ user: ctx.user ?? null, rateLimit: ctx.rateLimit ?? null });
  const router = t.router({
    hello: limited.query(answer),
    heavy: limited.query(answer),
    free: limited.query(answer),
    fail: limited.input((code: unknown) => code as keyof typeof TRPC_ERROR_CODES_BY_KEY | 'OK' | 'PLAIN').query(({ input }) => {
      if (input === 'OK') return 'ok';
      throw input === 'PLAIN' ? new Error('plain') : new TRPCError({ code: input });
    }),
    hang: limited.query(async ({ signal }) => {
      hanging.resolve();
      await new Promise((resolve) => signal?.addEventListener('abort', resolve));
      aborted.resolve();
      throw new TRPCError({ code: 'CLIENT_CLOSED_REQUEST' });
    }),
  });
  server = createHTTPServer({ router, createContext: context, onError: ({ error }) => void heard.push(error) });
  server.listen(0, '127.0.0.1');
  const { port } = await listening(server);
  return (paths: string, headers: Record<string, string> = {}, inputs?: unknown[], signal?: AbortSignal) => {
    const batch = paths.includes(',') || inputs !== undefined;
    const input = inputs === undefined ? '' : `&input=${encodeURIComponent(JSON.stringify(Object.fromEntries(inputs.map((value, i) => [i, value]))))}`;
    return fetch(`http://127.0.0.1:${port}/${paths}${batch ? `?batch=1${input}` : ''}`, { headers, ...(signal && { signal }) });
  };
}

const refusal = (path: string) => ({
  error: {
    message: 'Rate limit exceeded: retry in 20000 ms',
    code: TRPC_ERROR_CODES_BY_KEY.TOO_MANY_REQUESTS,
    data: { code: 'TOO_MANY_REQUESTS', httpStatus: 429, path, stack: expect.any(String) },
  },
});

describe('trpcRateLimit over the standalone adapter', () => {
  it('allows the limit, then answers 429 TOO_MANY_REQUESTS with Retry-After; the procedure reads the decision', async () => {
    const call = await serve({ limiter: threePerMinute() });
    for (const remaining of [2, 1, 0]) {
      const response = await call('hello');
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual({ result: { data: { user: null, rateLimit: { allowed: true, limit: 3, remaining, retryAfterMs: 0, resetAfterMs: (3 - remaining) * 20_000 } } } });
      expect(response.headers.get('retry-after')).toBeNull();
    }
    const refused = await call('hello');
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('20');
    expect(await refused.json()).toEqual(refusal('hello'));
  });

  it("throws an error tRPC takes for its own without being one: its code, and the refusal as the cause", async () => {
    const call = await serve({ limiter: threePerMinute(), key: () => 'user-1' });
    for (let i = 0; i < 4; i++) await call('hello');
    const [error] = heard;
    expect(error).not.toBeInstanceOf(TRPCError);
    expect(getHTTPStatusCodeFromError(error!)).toBe(429);
    expect([error?.name, error?.code, error?.message]).toEqual(['TRPCError', 'TOO_MANY_REQUESTS', 'Rate limit exceeded: retry in 20000 ms']);
    expect(error?.cause).toMatchObject({
      name: 'RateLimitedError',
      code: 'ERR_RATEKEEPER_RATE_LIMITED',
      decision: { allowed: false, limit: 3, remaining: 0, retryAfterMs: 20_000, resetAfterMs: 60_000 },
    });
    expect(error?.cause?.message).toBe('ratekeeper: rate limited on "user-1", retry in 20000 ms');
  });

  it('counts each call of a batch once: the call over the limit fails alone (207)', async () => {
    const call = await serve({ limiter: threePerMinute() });
    const response = await call('hello,hello,hello,hello');
    expect(response.status).toBe(207);
    const results = (await response.json()) as { result?: { data: { rateLimit: Decision } } }[];
    expect(results.slice(0, 3).map((result) => result.result?.data.rateLimit.remaining)).toEqual([2, 1, 0]);
    expect(results[3]).toEqual(refusal('hello'));
    expect(response.headers.get('retry-after')).toBe('20');
  });

  it('gives a batch the longest Retry-After of its refused calls', async () => {
    const call = await serve({ limiter: threePerMinute() });
    expect((await call('heavy')).status).toBe(200);
    const response = await call('heavy,hello,free');
    expect(response.status).toBe(207);
    expect(response.headers.get('retry-after')).toBe('60'); // heavy needs 3 tokens: 60 s; hello 20 s
    const results = (await response.json()) as { error?: { message: string }; result?: { data: unknown } }[];
    expect(results.map((result) => result.error?.message)).toEqual(['Rate limit exceeded: retry in 60000 ms', 'Rate limit exceeded: retry in 20000 ms', undefined]);
    expect(results[2]?.result?.data).toEqual({ user: null, rateLimit: null }); // skipped: not counted, no decision
  });

  it('keys by the client address of ctx.req, through trusted proxies, IPv6 per /64', async () => {
    const call = await serve({ limiter: threePerMinute(), trustProxies: 1 });
    const from = (address: string) => call('hello', { 'x-forwarded-for': `198.51.100.9, ${address}` });
    for (let i = 0; i < 3; i++) expect((await from('203.0.113.1')).status).toBe(200);
    expect((await from('203.0.113.1')).status).toBe(429);
    expect((await from('203.0.113.2')).status).toBe(200);
    await from('2001:db8:0:1::a');
    await from('2001:db8:0:1::b');
    expect((await from('2001:db8:0:1::c')).status).toBe(200);
    expect((await from('2001:db8:0:1::d')).status).toBe(429);
  });

  it('keys by the key function, which reads the context', async () => {
    const call = await serve({ limiter: threePerMinute(), key: ({ ctx }) => ctx.user ?? 'anonymous' }, ({ req }) => ({ user: req.headers['x-user'] as string }));
    for (let i = 0; i < 3; i++) await call('hello', { 'x-user': 'alice' });
    const refused = await call('hello', { 'x-user': 'alice' });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBeNull(); // the context holds no response to set it on
    const bob = (await (await call('hello', { 'x-user': 'bob' })).json()) as { result: { data: { user: string; rateLimit: Decision } } };
    expect(bob.result.data).toMatchObject({ user: 'bob', rateLimit: { remaining: 2 } });
  });

  it('without a key and without ctx.req, fails the call with ERR_RATEKEEPER_NO_CLIENT_ADDRESS', async () => {
    const call = await serve({ limiter: threePerMinute() }, () => ({}));
    const response = await call('hello');
    expect(response.status).toBe(500);
    expect(heard[0]?.cause).toMatchObject({
      code: 'ERR_RATEKEEPER_NO_CLIENT_ADDRESS',
      message:
        'ratekeeper: trpcRateLimit cannot tell which client made this call, as its context has no `req`; pass `key` (a user id from the context, say), or return the request from createContext',
    });
  });

  it('fails the call as INTERNAL_SERVER_ERROR when the limiter fails', async () => {
    const call = await serve({ limiter: { tryAcquire: () => Promise.reject(new Error('store down')) } });
    expect((await call('hello')).status).toBe(500);
    expect(heard[0]).toMatchObject({ code: 'INTERNAL_SERVER_ERROR', cause: { message: 'store down' } });
  });

  describe('settling when the procedure returns', () => {
    it('settle hears the HTTP status tRPC gives each code, exactly as its own mapping', async () => {
      const statuses: Record<string, number> = {};
      const codes = [...Object.keys(TRPC_ERROR_CODES_BY_KEY), 'OK', 'PLAIN'];
      const call = await serve({
        limiter: new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(100, 60_000)), clock: new ManualClock(0) }),
        key: () => 'k',
        // The middleware runs before the input is parsed: the raw input names the call.
        settle: async (status, { getRawInput }) => {
          statuses[(await getRawInput()) as string] = status;
          return 1;
        },
      });
      await call(codes.map(() => 'fail').join(','), {}, codes);
      for (let i = 0; i < 200 && Object.keys(statuses).length < codes.length; i++) await new Promise((resolve) => setTimeout(resolve, 5));
      const expected = Object.fromEntries(
        codes.map((code) => [code, code === 'OK' ? 200 : code === 'PLAIN' ? 500 : getHTTPStatusCodeFromError(new TRPCError({ code: code as keyof typeof TRPC_ERROR_CODES_BY_KEY }))]),
      );
      expect(statuses).toEqual(expected);
    });

    it('skipFailedRequests gives a failed call its permits back; a refused call spends nothing', async () => {
      const limiter = threePerMinute();
      const call = await serve({ limiter, key: () => 'k', skipFailedRequests: true });
      for (let i = 0; i < 5; i++) {
        expect((await call('fail', {}, ['UNAUTHORIZED'])).status).toBe(401);
        expect(limiter.peek('k', 0).remaining).toBe(3);
      }
      const response = await call('hello,hello,hello,hello,fail', {}, [null, null, null, null, 'BAD_REQUEST']);
      const results = (await response.json()) as { error?: { data: { code: string } } }[];
      expect(results.map((result) => result.error?.data.code)).toEqual([undefined, undefined, undefined, 'TOO_MANY_REQUESTS', 'TOO_MANY_REQUESTS']);
      expect(limiter.peek('k', 0).remaining).toBe(0);
    });

    it('a call whose client left before its result counts in full, though the procedure then failed', async () => {
      const limiter = threePerMinute();
      const settled: number[] = [];
      const call = await serve({ limiter, key: () => 'k', skipFailedRequests: true, onSettleError: () => settled.push(-1) });
      const controller = new AbortController();
      const leaving = call('hang', {}, undefined, controller.signal).catch(() => undefined);
      await hanging.promise;
      controller.abort();
      await leaving;
      await aborted.promise;
      await new Promise((resolve) => setTimeout(resolve, 50)); // a settle, were there one, follows the failure within microtasks
      expect(limiter.peek('k', 0).remaining).toBe(2);
      expect((await call('fail', {}, ['UNAUTHORIZED'])).status).toBe(401); // a client that stays still gets its failure back
      expect(limiter.peek('k', 0).remaining).toBe(2);
      expect(settled).toEqual([]);
    });

    it('skipSuccessfulRequests counts only failures', async () => {
      const limiter = threePerMinute();
      const call = await serve({ limiter, key: () => 'k', skipSuccessfulRequests: true });
      for (let i = 0; i < 5; i++) expect((await call('hello')).status).toBe(200);
      expect(limiter.peek('k', 0).remaining).toBe(3);
      for (let i = 0; i < 3; i++) expect((await call('fail', {}, ['FORBIDDEN'])).status).toBe(403);
      expect(limiter.peek('k', 0).remaining).toBe(0);
      expect((await call('fail', {}, ['FORBIDDEN'])).status).toBe(429);
    });

    it('refuses a limiter without reserve, at once', () => {
      const limiter: AsyncRateLimiter = { tryAcquire: async () => threePerMinute().tryAcquire('k') };
      expect(() => trpcRateLimit({ limiter, settle: () => 1 })).toThrow(
        typeError(
          'ratekeeper: `skipFailedRequests`, `skipSuccessfulRequests` and `settle` need a limiter with a reserve(key, permits) method, such as a KeyedRateLimiter',
        ),
      );
    });
  });

  // A store that goes away mid-run: its outage policy answers, and the refusal it makes is a 429 like any.
  describe.skipIf(!redisPort)('over a RedisRateLimiter whose server stops', () => {
    it("'deny' refuses with TOO_MANY_REQUESTS, marked degraded; 'allow' lets calls through", async () => {
      const redis = await stoppableRedis('trpc');
      try {
        const call = await serve({ limiter: redis.limiter, key: ({ ctx }) => ctx.user ?? '' }, ({ req }) => ({ user: req.headers['x-user'] as string }));
        const remaining = async (user: string) => ((await (await call('hello', { 'x-user': user })).json()) as { result?: { data: { rateLimit: Decision } } }).result?.data.rateLimit;
        expect(await remaining('deny')).toEqual({ allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetAfterMs: 20_000 });
        await redis.stop();
        const refused = await call('hello', { 'x-user': 'deny' });
        expect(refused.status).toBe(429);
        expect(heard.at(-1)?.cause).toMatchObject({ decision: { allowed: false, degraded: expect.stringMatching(/^store-(error|timeout)$/) } });
        expect(await remaining('allow')).toMatchObject({ allowed: true, degraded: expect.stringMatching(/^store-(error|timeout)$/) });
      } finally {
        await redis.close();
      }
    });
  });
});

describe('trpcRateLimit options', () => {
  const limiter = threePerMinute();
  it.each<[string, unknown, Error]>([
    ['options that are no object', null, typeError('ratekeeper: trpcRateLimit options must be an object, got null')],
    ['a missing limiter', {}, typeError('ratekeeper: `limiter` must be an object with a tryAcquire(key, permits) method, got undefined')],
    ['a key that is no function', { limiter, key: 'user' }, typeError('ratekeeper: `key` must be a function, got "user"')],
    ['a cost that is no function', { limiter, cost: 2 }, typeError('ratekeeper: `cost` must be a function, got 2')],
    ['a skip that is no function', { limiter, skip: true }, typeError('ratekeeper: `skip` must be a function, got true')],
    ['a fractional trustProxies', { limiter, trustProxies: 1.5 }, rangeError('ratekeeper: `trustProxies` must be an integer from 0 to 16, got 1.5')],
    ['an unknown forwarded header', { limiter, forwardedHeader: 'x-real-ip' }, rangeError("ratekeeper: `forwardedHeader` must be 'x-forwarded-for' or 'forwarded', got \"x-real-ip\"")],
    ['skipFailedRequests: 1', { limiter, skipFailedRequests: 1 }, typeError('ratekeeper: `skipFailedRequests` must be false or true, got 1')],
    ['a settle that is no function', { limiter, settle: 1 }, typeError('ratekeeper: `settle` must be a function, got 1')],
  ])('refuses %s when built', (_, options, error) => {
    expect(() => trpcRateLimit(options as never)).toThrow(error);
  });

  it('is typed by the chain it is put in: the callbacks see the router context, and the fields options are none of its', () => {
    const typed = initTRPC.context<{ userId: string }>().create();
    typed.procedure.use(
      trpcRateLimit({
        limiter,
        key: ({ ctx, path, type }) => {
          expectTypeOf(ctx).toEqualTypeOf<{ userId: string }>();
          expectTypeOf(type).toEqualTypeOf<'query' | 'mutation' | 'subscription'>();
          return `${ctx.userId}:${path}`;
        },
      }),
    );
    // @ts-expect-error a batch's one response has no one policy for RateLimit fields to describe
    trpcRateLimit({ limiter, headers: 'draft-7' });
  });

  it('ignores the options of the RateLimit fields and of preflights, which it has no use for', () => {
    expect(() => trpcRateLimit({ limiter, headers: 'draft-8', name: '', windowMs: -1, countPreflight: 'yes' } as never)).not.toThrow();
  });
});

describe("docs/trpc.md's recipes, for a context without the response", () => {
  it('errorFormatter hands the client retryAfterMs; responseMeta sets the longest Retry-After', async () => {
    const trpc = initTRPC.create({
      errorFormatter: ({ shape, error }) => {
        const cause = error.cause as Partial<RateLimitedError> | undefined;
        if (cause?.code !== 'ERR_RATEKEEPER_RATE_LIMITED') return shape;
        return { ...shape, data: { ...shape.data, retryAfterMs: cause.decision?.retryAfterMs } };
      },
    });
    const limited = trpc.procedure.use(trpcRateLimit({ limiter: threePerMinute(), key: () => 'k', cost: ({ path }) => (path === 'heavy' ? 3 : 1) }));
    const router = trpc.router({ hello: limited.query(() => 'hi'), heavy: limited.query(() => 'hi') });
    server = createHTTPServer({
      router,
      responseMeta: ({ errors }) => {
        const waits = errors.map((error) => (error.code === 'TOO_MANY_REQUESTS' ? ((error.cause as Partial<RateLimitedError> | undefined)?.decision?.retryAfterMs ?? 0) : 0));
        const longest = Math.max(0, ...waits);
        return longest === 0 ? {} : { headers: new Headers({ 'Retry-After': String(Math.ceil(longest / 1000)) }) };
      },
    });
    server.listen(0, '127.0.0.1');
    const { port } = await listening(server);
    const response = await fetch(`http://127.0.0.1:${port}/hello,hello,hello,hello,heavy?batch=1`);
    expect([response.status, response.headers.get('retry-after')]).toEqual([207, '60']);
    const results = (await response.json()) as { error?: { data: { retryAfterMs?: number } } }[];
    expect(results.map((result) => result.error?.data.retryAfterMs)).toEqual([undefined, undefined, undefined, 20_000, 60_000]);
  });
});

describe('trpcRateLimit over the Fetch adapter', () => {
  const limiter = threePerMinute();
  const router = t.router({ hello: t.procedure.use(trpcRateLimit({ limiter, trustProxies: 1 })).query(() => 'hi') });
  const call = (address: string) =>
    fetchRequestHandler({
      endpoint: '/trpc',
      req: new Request('http://localhost/trpc/hello', { headers: { 'x-forwarded-for': address } }),
      router,
      createContext: ({ req, resHeaders }) => ({ req, resHeaders }),
    });

  it('keys by the trusted forwarded address of the Fetch Request, and sets Retry-After on resHeaders', async () => {
    for (let i = 0; i < 3; i++) expect((await call('203.0.113.1')).status).toBe(200);
    const refused = await call('203.0.113.1');
    expect([refused.status, refused.headers.get('retry-after')]).toEqual([429, '20']);
    expect((await call('203.0.113.2')).status).toBe(200);
  });
});
