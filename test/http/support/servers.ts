import type { AddressInfo } from 'node:net';
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { serve } from '@hono/node-server';
import express from 'express';
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';
import { Hono } from 'hono';
import Koa from 'koa';
import Koa2 from 'koa-2';
import type { AsyncRateLimiter, Decision, RateLimiter } from '../../../src/index';
import {
  fastifyRateLimit,
  honoRateLimit,
  koaRateLimit,
  nodeRateLimit,
  rateLimitOf,
  withRateLimit,
  type RateLimitOptions,
  type RateLimitState,
  type RateLimitVariables,
} from '../../../src/http';

/** The adapters under test, each behind a real server on loopback. */
export const ADAPTERS = ['express', 'fastify', 'hono', 'fetch', 'koa', 'koa-2'] as const;
/** `nodeRateLimit` on a bare `node:http` server: GET / and GET /fail only, for the tests that name it. */
export const NODE_HTTP = 'node:http';
export type Adapter = (typeof ADAPTERS)[number] | typeof NODE_HTTP;

type Header = (name: string) => string | undefined;

/**
 * What a test configures, free of any framework: callbacks see a header reader and the path, and
 * each launcher translates them to its adapter's own request type.
 */
export interface Setup extends Omit<RateLimitOptions<never>, 'limiter' | 'key' | 'cost' | 'skip' | 'settle' | 'onSettleError'> {
  limiter: RateLimiter | AsyncRateLimiter;
  key?: (header: Header) => string;
  cost?: (header: Header) => number;
  skip?: (path: string) => boolean;
  settle?: (status: number, header: Header) => number;
  onSettleError?: (error: unknown) => void;
  /** Answer refusals with 503 and `retry in <ms> ms` instead of the default. */
  customRefusal?: boolean;
}

export interface Running {
  readonly url: string;
  close(): Promise<void>;
}

const refusalText = (decision: Decision) => `retry in ${decision.retryAfterMs} ms`;

/** Routes whose handler throws: an `Error` at /throw, and at /throw/<kind> something that is no `Error`. */
export const THROWING = {
  '/throw': () => new Error('boom'),
  '/throw/string': () => 'boom',
  '/throw/object': () => ({ reason: 'boom' }),
  '/throw/response': () => new Response('no', { status: 418 }),
} as const;
export type ThrowingPath = keyof typeof THROWING;
const throwingPaths = Object.keys(THROWING) as ThrowingPath[];

/** What the app's CORS handler answers to OPTIONS /: 204 with these headers. */
export const CORS_HEADERS = { 'access-control-allow-origin': '*', 'access-control-allow-methods': 'GET, POST' } as const;

/**
 * Starts `adapter` with GET / ("ok"), GET /health ("up"), GET /fail (401 "no"), GET /decision (the
 * decision the handler was handed, as JSON), the `THROWING` routes, and OPTIONS / (204 with
 * `CORS_HEADERS`, standing for a CORS handler after the limiter); errors answer 500 with their message. Node-based servers
 * (express, fastify, koa) also have GET /hang (never answers) and GET /stream (sends its status and a
 * first chunk, then never ends), for clients that leave mid-response.
 */
export async function start(adapter: Adapter, setup: Setup): Promise<Running> {
  return LAUNCHERS[adapter](setup);
}

const LAUNCHERS: Record<Adapter, (setup: Setup) => Promise<Running>> = {
  async express(setup) {
    const { key, cost, skip, settle, onSettleError, customRefusal, ...common } = setup;
    const header = (req: express.Request): Header => (name) => req.get(name);
    const app = express();
    app.use(
      nodeRateLimit<express.Request, express.Response>({
        ...common,
        ...(key && { key: (req) => key(header(req)) }),
        ...(cost && { cost: (req) => cost(header(req)) }),
        ...(skip && { skip: (req) => skip(req.path) }),
        ...(settle && { settle: (status, req) => settle(status, header(req)) }),
        ...(onSettleError && { onSettleError }),
        ...(customRefusal && { onRejected: (_req, res, decision) => void res.status(503).send(refusalText(decision)) }),
      }),
    );
    app.get('/', (_req, res) => void res.send('ok'));
    app.get('/health', (_req, res) => void res.send('up'));
    app.options('/', (_req, res) => void res.status(204).set(CORS_HEADERS).end());
    app.get('/fail', (_req, res) => void res.status(401).send('no'));
    app.get('/decision', (req, res) => void res.json(req.rateLimit));
    for (const path of throwingPaths) {
      app.get(path, () => {
        throw THROWING[path]();
      });
    }
    app.get('/hang', () => {});
    app.get('/stream', (_req, res) => void res.write('first'));
    app.use((error: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
      res.status(500).send(error.message);
    });
    return listenNode(app.listen(0, '127.0.0.1'));
  },

  async 'node:http'(setup) {
    const { key, cost, skip, settle, onSettleError, customRefusal, ...common } = setup;
    const header = (req: IncomingMessage): Header => (name) => {
      const value = req.headers[name];
      return Array.isArray(value) ? value.join(', ') : value;
    };
    const limit = nodeRateLimit<IncomingMessage, ServerResponse>({
      ...common,
      ...(key && { key: (req) => key(header(req)) }),
      ...(cost && { cost: (req) => cost(header(req)) }),
      ...(skip && { skip: (req) => skip(req.url ?? '/') }),
      ...(settle && { settle: (status, req) => settle(status, header(req)) }),
      ...(onSettleError && { onSettleError }),
      ...(customRefusal && { onRejected: (_req, res, decision) => void res.writeHead(503).end(refusalText(decision)) }),
    });
    const server = createServer((req, res) =>
      limit(req, res, (error) => {
        if (error !== undefined) res.writeHead(500).end((error as Error).message);
        else if (req.url === '/fail') res.writeHead(401).end('no');
        else res.end('ok');
      }),
    );
    return listenNode(server.listen(0, '127.0.0.1'));
  },

  async fastify(setup) {
    const { key, cost, skip, settle, onSettleError, customRefusal, ...common } = setup;
    const app = Fastify({ forceCloseConnections: true });
    const header = (req: FastifyRequest): Header => (name) => {
      const value = req.headers[name];
      return Array.isArray(value) ? value.join(', ') : value;
    };
    app.addHook(
      'onRequest',
      fastifyRateLimit<FastifyRequest, FastifyReply>({
        ...common,
        ...(key && { key: (req) => key(header(req)) }),
        ...(cost && { cost: (req) => cost(header(req)) }),
        ...(skip && { skip: (req) => skip(req.url) }),
        ...(settle && { settle: (status, req) => settle(status, header(req)) }),
        ...(onSettleError && { onSettleError }),
        ...(customRefusal && {
          onRejected: (_req, reply, decision) => void reply.code(503).send(refusalText(decision)),
        }),
      }),
    );
    app.get('/', async () => 'ok');
    app.get('/health', async () => 'up');
    app.options('/', async (_req, reply) => reply.code(204).headers(CORS_HEADERS).send());
    app.get('/fail', async (_req, reply) => reply.code(401).send('no'));
    app.get('/decision', async (req) => (req as FastifyRequest & { rateLimit?: Decision }).rateLimit);
    for (const path of throwingPaths) {
      app.get(path, async () => {
        throw THROWING[path]();
      });
    }
    app.get('/hang', (_req, reply) => reply.hijack());
    app.get('/stream', (_req, reply) => {
      reply.hijack();
      reply.raw.writeHead(200);
      reply.raw.write('first');
    });
    app.setErrorHandler((error: Error, _req, reply) => void reply.code(500).send(error.message));
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as AddressInfo;
    return { url: `http://127.0.0.1:${port}`, close: () => app.close() };
  },

  async hono(setup) {
    const { key, cost, skip, settle, onSettleError, customRefusal, ...common } = setup;
    const app = new Hono<{ Variables: RateLimitVariables }>();
    app.use(
      honoRateLimit({
        ...common,
        ...(key && { key: (c) => key((name) => c.req.header(name)) }),
        ...(cost && { cost: (c) => cost((name) => c.req.header(name)) }),
        ...(skip && { skip: (c) => skip(c.req.path) }),
        ...(settle && { settle: (status, c) => settle(status, (name) => c.req.header(name)) }),
        ...(onSettleError && { onSettleError }),
        ...(customRefusal && { onRejected: (_c, decision) => new Response(refusalText(decision), { status: 503 }) }),
      }),
    );
    app.get('/', (c) => c.text('ok'));
    app.get('/health', (c) => c.text('up'));
    app.options('/', (c) => c.body(null, 204, CORS_HEADERS));
    app.get('/fail', (c) => c.text('no', 401));
    app.get('/decision', (c) => c.json(c.get('rateLimit')));
    for (const path of throwingPaths) {
      app.get(path, () => {
        throw THROWING[path]();
      });
    }
    app.onError((error, c) => c.text(error.message, 500));
    return listenNode(serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }) as Server);
  },

  async fetch(setup) {
    const { key, cost, skip, settle, onSettleError, customRefusal, ...common } = setup;
    const headerOf = (request: Request): Header => (name) => request.headers.get(name) ?? undefined;
    const handler = withRateLimit(
      {
        ...common,
        ...(key && { key: (request) => key(headerOf(request)) }),
        ...(cost && { cost: (request) => cost(headerOf(request)) }),
        ...(skip && { skip: (request) => skip(new URL(request.url).pathname) }),
        ...(settle && { settle: (status, request) => settle(status, headerOf(request)) }),
        ...(onSettleError && { onSettleError }),
        ...(customRefusal && { onRejected: (_request, decision) => new Response(refusalText(decision), { status: 503 }) }),
      },
      (request) => {
        if (request.method === 'OPTIONS') return new Response(null, { status: 204, headers: CORS_HEADERS });
        const path = new URL(request.url).pathname;
        if (path === '/fail') return new Response('no', { status: 401 });
        if (path === '/decision') return Response.json(rateLimitOf(request));
        if (path in THROWING) throw THROWING[path as ThrowingPath]();
        return new Response(path === '/health' ? 'up' : 'ok');
      },
    );
    // @hono/node-server passes `{ incoming, outgoing }` after the request, where the peer address is.
    const fetch = async (request: Request, env: unknown) => {
      try {
        return await (handler as (request: Request, env: unknown) => Promise<Response>)(request, env);
      } catch (error) {
        return new Response(String((error as Partial<Error> | undefined)?.message), { status: 500 });
      }
    };
    return listenNode(serve({ fetch, port: 0, hostname: '127.0.0.1' }) as Server);
  },

  koa: (setup) => startKoa(Koa, setup),
  'koa-2': (setup) => startKoa(Koa2, setup),
};

/** Koa 3 or Koa 2 (the same API for what the middleware and these routes use). */
async function startKoa(Application: typeof Koa, setup: Setup): Promise<Running> {
  const { key, cost, skip, settle, onSettleError, customRefusal, ...common } = setup;
  type Context = Koa.ParameterizedContext<RateLimitState>;
  const header = (ctx: Context): Header => (name) => ctx.get(name) || undefined;
  const app = new Application<RateLimitState>();
  app.use(async (ctx, next) => {
    try {
      await next();
    } catch (error) {
      ctx.status = 500;
      ctx.body = String((error as Partial<Error> | undefined)?.message);
    }
  });
  app.use(
    koaRateLimit<Context>({
      ...common,
      ...(key && { key: (ctx) => key(header(ctx)) }),
      ...(cost && { cost: (ctx) => cost(header(ctx)) }),
      ...(skip && { skip: (ctx) => skip(ctx.path) }),
      ...(settle && { settle: (status, ctx) => settle(status, header(ctx)) }),
      ...(onSettleError && { onSettleError }),
      ...(customRefusal && {
        onRejected: (ctx, decision) => {
          ctx.status = 503;
          ctx.body = refusalText(decision);
        },
      }),
    }),
  );
  app.use((ctx) => {
    if (ctx.method === 'OPTIONS') {
      ctx.status = 204;
      ctx.set(CORS_HEADERS);
    } else if (ctx.path === '/fail') {
      ctx.status = 401;
      ctx.body = 'no';
    } else if (ctx.path === '/decision') {
      ctx.body = ctx.state.rateLimit;
    } else if (ctx.path in THROWING) {
      throw THROWING[ctx.path as ThrowingPath]();
    } else if (ctx.path === '/hang') {
      ctx.respond = false;
    } else if (ctx.path === '/stream') {
      ctx.respond = false;
      ctx.res.writeHead(200);
      ctx.res.write('first');
    } else {
      ctx.body = ctx.path === '/health' ? 'up' : 'ok';
    }
  });
  return listenNode(app.listen(0, '127.0.0.1'));
}

/** Resolves with the address once `server` listens. */
export async function listening(server: Server): Promise<AddressInfo> {
  if (!server.listening) await new Promise((resolve) => server.once('listening', resolve));
  return server.address() as AddressInfo;
}

async function listenNode(server: Server): Promise<Running> {
  const { port } = await listening(server);
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => (error ? reject(error) : resolve()));
      }),
  };
}

/**
 * Sends GET `url` through `node:http`, which writes a header given as an array as one line per
 * value (as a proxy that adds its own line does, where `fetch` would join them); resolves with the status.
 */
export function getWithLines(url: string, headers: Record<string, string | string[]>): Promise<number> {
  return new Promise((resolve, reject) => {
    const sent = request(url, { headers }, (response) => {
      response.resume();
      resolve(response.statusCode ?? 0);
    });
    sent.on('error', reject);
    sent.end();
  });
}

/** The rate-limit fields of a response (names lowercased), for exact comparison. */
export function limitFields(response: Response): Record<string, string> {
  const fields: Record<string, string> = {};
  response.headers.forEach((value, name) => {
    if (/^(x-)?ratelimit|^retry-after$/.test(name)) fields[name] = value;
  });
  return fields;
}
