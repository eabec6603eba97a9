// Several limits on one route (issue 25), on every adapter behind its real framework on loopback:
// one middleware given a list of limits admits them as one (src/http/request-limit.ts over
// src/limiter/admit.ts), and two stacked middlewares, a global one and a route's, cooperate the
// same way: a request the route refuses spends nothing on the global limit. RateLimit-Policy lists
// every policy and RateLimit the binding one. The clocks are frozen, so every field is exact.
import type { Server } from 'node:http';
import { createServer } from 'node:http';
import { serve } from '@hono/node-server';
import { initTRPC } from '@trpc/server';
import express from 'express';
import Fastify, { type FastifyRequest } from 'fastify';
import { type Context, Hono } from 'hono';
import Koa from 'koa';
import { afterEach, describe, expect, it } from 'vitest';
import { Concurrency, FixedWindow, KeyedRateLimiter, ManualClock, Rule, TokenBucket } from '../../src/index';
import {
  fastifyRateLimit,
  honoRateLimit,
  koaRateLimit,
  nodeRateLimit,
  rateLimitOf,
  trpcRateLimit,
  withRateLimit,
  type RateLimitOptions,
  type RateLimitState,
  type RateLimitVariables,
  type RequestDecision,
} from '../../src/http';
import { RedisRateLimiter } from '../../src/redis';
import { redisPort, uniquePrefix, useIoredis } from '../redis/helpers/clients';
import { limitFields, listening } from './support/servers';

/** The options of each middleware, free of any framework: the key is the `x-user` header. */
type Options = Omit<RateLimitOptions<[]>, 'key'>;

interface Running {
  readonly url: string;
  close(): Promise<void>;
}

/** A server whose GET / answers the names and `remaining` of the policies its handler was handed, behind each middleware in turn. */
type Launcher = (middlewares: readonly Options[]) => Promise<Running>;

const userOf = (header: (name: string) => string | undefined | null) => header('x-user') ?? 'anonymous';
const describeParts = (decision: RequestDecision | undefined) => decision?.parts.map((p) => `${p.name}:${p.decision.remaining}`).join(',') ?? 'none';

async function node(server: Server): Promise<Running> {
  const { port } = await listening(server);
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const LAUNCHERS: Record<string, Launcher> = {
  async express(middlewares) {
    const app = express();
    for (const options of middlewares) app.use(nodeRateLimit<express.Request, express.Response>({ ...options, key: (req) => userOf((n) => req.get(n)) }));
    app.get('/', (req, res) => void res.send(describeParts(req.rateLimit)));
    return node(app.listen(0, '127.0.0.1'));
  },
  async 'node:http'(middlewares) {
    const limits = middlewares.map((options) => nodeRateLimit({ ...options, key: (req) => userOf((n) => req.headers[n] as string | undefined) }));
    const server = createServer((req, res) => {
      const run = (i: number): void => {
        if (i === limits.length) return void res.end(describeParts((req as { rateLimit?: RequestDecision }).rateLimit));
        limits[i]!(req, res, (error) => (error === undefined ? run(i + 1) : res.writeHead(500).end(String(error))));
      };
      run(0);
    });
    return node(server.listen(0, '127.0.0.1'));
  },
  async fastify(middlewares) {
    const app = Fastify({ forceCloseConnections: true });
    const [global, ...route] = middlewares.map((options) => fastifyRateLimit<FastifyRequest>({ ...options, key: (request) => userOf((n) => request.headers[n] as string | undefined) }));
    app.addHook('onRequest', global!);
    app.get('/', { onRequest: route }, async (request) => describeParts((request as FastifyRequest & { rateLimit?: RequestDecision }).rateLimit));
    await app.listen({ port: 0, host: '127.0.0.1' });
    return node(app.server);
  },
  async hono(middlewares) {
    const app = new Hono<{ Variables: RateLimitVariables }>();
    const [global, ...route] = middlewares.map((options) => honoRateLimit({ ...options, key: (c) => userOf((n) => c.req.header(n)) }));
    app.use(global!);
    const answer = (c: Context<{ Variables: RateLimitVariables }>) => c.text(describeParts(c.get('rateLimit')));
    if (route[0] === undefined) app.get('/', answer);
    else app.get('/', route[0], answer);
    return node(serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }) as Server);
  },
  async fetch(middlewares) {
    let handler = (request: Request) => Promise.resolve(new Response(describeParts(rateLimitOf(request))));
    for (const options of [...middlewares].reverse()) handler = withRateLimit({ ...options, key: (request) => userOf((n) => request.headers.get(n)) }, handler);
    return node(serve({ fetch: handler, port: 0, hostname: '127.0.0.1' }) as Server);
  },
  async koa(middlewares) {
    const app = new Koa<RateLimitState>();
    for (const options of middlewares) app.use(koaRateLimit<Koa.ParameterizedContext<RateLimitState>>({ ...options, key: (ctx) => userOf((n) => ctx.get(n) || undefined) }));
    app.use((ctx) => {
      ctx.body = describeParts(ctx.state.rateLimit);
    });
    return node(app.listen(0, '127.0.0.1'));
  },
};

const minute = (limit: number, clock = new ManualClock(0)) => new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(limit, 60_000)), clock });

describe.each(Object.keys(LAUNCHERS))('%s', (adapter) => {
  let server: Running | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });
  const start = async (middlewares: readonly Options[]) => {
    server = await LAUNCHERS[adapter]!(middlewares);
    return (user = 'alice') => fetch(`${server?.url}/`, { headers: { 'x-user': user } });
  };

  it('several limits in one middleware: a request one refuses spends nothing in the others; every policy listed', async () => {
    const perUser = minute(3);
    const perRoute = new KeyedRateLimiter({ algorithm: () => new FixedWindow(new Rule(2, 60_000)), clock: new ManualClock(0) });
    const get = await start([
      {
        limiter: [
          { limiter: perUser, name: 'user', windowMs: 60_000 },
          { limiter: perRoute, name: 'route', windowMs: 60_000, key: () => 'search' },
        ],
      },
    ]);
    const first = await get('alice');
    expect(first.status).toBe(200);
    expect(await first.text()).toBe('user:2,route:1');
    expect(limitFields(first)).toEqual({ 'ratelimit-policy': '"user";q=3;w=60, "route";q=2;w=60', ratelimit: '"route";r=1;t=60' });
    expect((await get('bob')).status).toBe(200);
    const refused = await get('alice');
    expect(refused.status).toBe(429);
    expect(limitFields(refused)).toEqual({ 'ratelimit-policy': '"user";q=3;w=60, "route";q=2;w=60', ratelimit: '"route";r=0;t=60', 'retry-after': '60' });
    expect(await refused.json()).toMatchObject({ 'violated-policies': ['route'] });
    // The refused request spent nothing of alice's own limit.
    expect(perUser.peek('alice', 0).remaining).toBe(2);
  });

  it('stacked middlewares, a global limit then a route limit: the route refusing gives the global reservation back', async () => {
    const global = minute(5);
    const route = minute(1);
    const get = await start([
      { limiter: global, name: 'global', windowMs: 60_000 },
      { limiter: route, name: 'route', windowMs: 60_000 },
    ]);
    const first = await get();
    expect(first.status).toBe(200);
    expect(await first.text()).toBe('global:4,route:0');
    expect(limitFields(first)).toEqual({ 'ratelimit-policy': '"global";q=5;w=60, "route";q=1;w=60', ratelimit: '"route";r=0;t=60' });
    for (let i = 0; i < 3; i++) {
      const refused = await get();
      expect(refused.status).toBe(429);
      expect(limitFields(refused)).toEqual({ 'ratelimit-policy': '"global";q=5;w=60, "route";q=1;w=60', ratelimit: '"route";r=0;t=60', 'retry-after': '60' });
    }
    expect(global.peek('alice', 0).remaining).toBe(4);
  });

  it('stacked middlewares that share a policy name are listed apart', async () => {
    const get = await start([{ limiter: minute(5) }, { limiter: minute(2) }]);
    const response = await get();
    expect(limitFields(response)).toEqual({ 'ratelimit-policy': '"default";q=5, "default-2";q=2', ratelimit: '"default-2";r=1;t=30' });
  });
});

describe.skipIf(redisPort === 0)('nodeRateLimit with a Redis limit beside one in memory', () => {
  const client = useIoredis();
  let server: Running | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  it('one admission: the Redis limit refusing gives the memory one back, and the memory one refusing the Redis one', async () => {
    const perOrg = new RedisRateLimiter({ client, algorithm: 'token-bucket', rule: new Rule(2, 60_000), onStoreError: 'deny', clock: new ManualClock(0), prefix: uniquePrefix('several') });
    const perUser = minute(2);
    server = await LAUNCHERS.express!([
      {
        limiter: [
          { limiter: perUser, name: 'user', windowMs: 60_000 },
          { limiter: perOrg, name: 'org', windowMs: 60_000, key: () => 'org-1' },
        ],
      },
    ]);
    const get = (user: string) => fetch(`${server?.url}/`, { headers: { 'x-user': user } });
    expect((await get('alice')).status).toBe(200);
    expect((await get('bob')).status).toBe(200);
    const refused = await get('carol');
    expect(refused.status).toBe(429);
    expect(limitFields(refused).ratelimit).toBe('"org";r=0;t=30');
    expect(perUser.peek('carol', 0).remaining).toBe(2);
    perUser.block('dave', 60_000);
    await perOrg.reset('org-1');
    expect((await get('dave')).status).toBe(429);
    expect((await perOrg.peek('org-1', 0)).remaining).toBe(2);
  });
});

describe('trpcRateLimit with several limits', () => {
  it('refuses a call one limit refuses, spending nothing in the others', async () => {
    const t = initTRPC.context<RateLimitState>().create();
    const perUser = minute(5);
    const perProcedure = minute(1);
    const limited = t.procedure.use(
      trpcRateLimit({
        limiter: [
          { limiter: perUser, name: 'user' },
          { limiter: perProcedure, name: 'procedure', key: ({ path }) => path },
        ],
        key: () => 'alice',
      }),
    );
    const router = t.router({ hello: limited.query(({ ctx }) => ctx.rateLimit?.parts.map((p) => p.decision.remaining)) });
    const caller = t.createCallerFactory(router)({});
    expect(await caller.hello()).toEqual([4, 0]);
    await expect(caller.hello()).rejects.toMatchObject({ code: 'TOO_MANY_REQUESTS' });
    expect(perUser.peek('alice', 0).remaining).toBe(4);
  });
});

describe('options of several limits', () => {
  const limiter = minute(3);
  it.each<[string, unknown, Error]>([
    ['an empty list', [], new RangeError('ratekeeper: `limiter` must hold at least one limit, got an empty array')],
    ['an entry that is no object', [1], new TypeError('ratekeeper: `limiter[0]` must be an object, got 1')],
    ['an entry without a limiter', [{ name: 'a' }], new TypeError('ratekeeper: `limiter[0].limiter` must be an object with a tryAcquire(key, permits) method, got undefined')],
    ['two entries of one name', [{ limiter, name: 'a' }, { limiter, name: 'a' }], new RangeError('ratekeeper: `limiter[1].name` repeats "a"; each limit of a route needs its own name')],
    ['two entries named by default', [{ limiter }, { limiter }], new RangeError('ratekeeper: `limiter[1].name` repeats "default"; each limit of a route needs its own name')],
    ['a bad window', [{ limiter, windowMs: -1 }], new RangeError('ratekeeper: `limiter[0].windowMs` must be a positive finite number, got -1')],
    ['a bad key', [{ limiter, key: 'k' }], new TypeError('ratekeeper: `limiter[0].key` must be a function, got "k"')],
    [
      'a limiter without reserve beside another',
      [{ limiter: { tryAcquire: () => undefined }, name: 'a' }, { limiter, name: 'b' }],
      new TypeError('ratekeeper: `limiter[0].limiter` must have reserve(key, permits) and peek(key, permits) methods to be admitted with other limits, as a KeyedRateLimiter has'),
    ],
  ])('refuses %s', (_, list, error) => {
    expect(() => nodeRateLimit({ limiter: list as never })).toThrow(expect.objectContaining({ name: error.name, message: error.message }));
  });
});

describe('nodeRateLimit with an in-flight limit beside a rate', () => {
  let server: Running | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  it('holds the in-flight permit until the response closes or the client goes; a refusal is at once, qu="concurrent-requests", Retry-After 1', async () => {
    const clock = new ManualClock(0);
    const rate = minute(10, clock);
    const inFlight = new KeyedRateLimiter({ algorithm: () => new Concurrency(1), clock });
    let release = () => {};
    let arrived = () => {};
    const app = express();
    app.use(
      nodeRateLimit({
        key: () => 'alice',
        limiter: [
          { limiter: rate, name: 'rate', windowMs: 60_000 },
          { limiter: inFlight, name: 'in-flight', quotaUnit: 'concurrent-requests' },
        ],
      }),
    );
    // After the limit's own: by the time it runs, the limit has let go of what the request held.
    let closedOne = () => {};
    app.use((req, res, next) => {
      if (req.path !== '/') res.once('close', () => closedOne());
      next();
    });
    app.get('/slow', (_req, res) => {
      arrived();
      release = () => void res.send('done');
    });
    app.get('/hang', () => arrived());
    app.get('/', (_req, res) => void res.send('ok'));
    server = await node(app.listen(0, '127.0.0.1'));
    const url = server.url;
    const waitFor = () => new Promise<void>((resolve) => (arrived = resolve));
    const closing = () => new Promise<void>((resolve) => (closedOne = resolve));

    let came = waitFor();
    const slow = fetch(`${url}/slow`);
    await came;
    const refused = await fetch(`${url}/`);
    expect(refused.status).toBe(429);
    expect(limitFields(refused)).toEqual({
      'ratelimit-policy': '"rate";q=10;w=60, "in-flight";q=1;qu="concurrent-requests"',
      ratelimit: '"in-flight";r=0;t=1',
      'retry-after': '1',
    });
    expect(rate.peek('alice', 0).remaining).toBe(9); // the refusal spent nothing on the rate
    let closed = closing();
    release();
    expect((await slow).status).toBe(200);
    await closed;
    const next = await fetch(`${url}/`);
    expect(next.status).toBe(200);
    expect(limitFields(next).ratelimit).toBe('"in-flight";r=0;t=60');

    // A client that goes before any status: the rate keeps the request, the in-flight permit comes back.
    came = waitFor();
    const abort = new AbortController();
    const hanging = fetch(`${url}/hang`, { signal: abort.signal }).catch(() => undefined);
    await came;
    expect((await fetch(`${url}/`)).status).toBe(429);
    closed = closing();
    abort.abort();
    await hanging;
    await closed;
    expect((await fetch(`${url}/`)).status).toBe(200);
    expect(rate.peek('alice', 0).remaining).toBe(6);
  });
});
