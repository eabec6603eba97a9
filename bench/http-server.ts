// Child process of http.ts: a node:http server on a random loopback port answering 'ok' to every
// request, limited per `x-user` header by one contender over the Redis at the given port: none,
// ratekeeper's nodeRateLimit middleware over RedisRateLimiter (token bucket), or
// rate-limiter-flexible's RateLimiterRedis called as its README's Express middleware does; and, to
// tell the middleware's cost from the Redis hop's, nodeRateLimit over an in-memory KeyedRateLimiter.
// Then the integrations, each beside the framework's own store: express-rate-limit (Express 5) with its
// MemoryStore or rateLimitStore, and @nestjs/throttler (Nest on Express) with its default storage or
// throttlerStorage, both over an in-memory sliding log. Sends its port to the parent, answers each
// message with its CPU time so far (µs), and serves until the parent disconnects.
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { createServer, type IncomingMessage, type RequestListener, type ServerResponse } from 'node:http';
import { Redis } from 'ioredis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { KeyedRateLimiter, SlidingWindowLog, TokenBucket, type Rule } from '../src/index';
import { nodeRateLimit, rateLimitStore, throttlerStorage, type ThrottlerStorageLike } from '../src/http';
import { RedisRateLimiter } from '../src/redis';
import { MANY_RULE } from './algorithms';

export const HTTP_CONTENDERS = [
  'no limiter',
  'ratekeeper nodeRateLimit + RedisRateLimiter token-bucket',
  'rate-limiter-flexible RateLimiterRedis',
  'ratekeeper nodeRateLimit + KeyedRateLimiter token-bucket (in memory, one server\'s limit)',
  'express-rate-limit + its MemoryStore',
  'express-rate-limit + rateLimitStore(KeyedRateLimiter sliding-window-log)',
  '@nestjs/throttler + its default storage',
  '@nestjs/throttler + throttlerStorage(KeyedRateLimiter sliding-window-log)',
] as const;
export type HttpContender = (typeof HTTP_CONTENDERS)[number];

type Handler = (req: IncomingMessage, res: ServerResponse, next: () => void) => void;

const userOf = (req: IncomingMessage): string => String(req.headers['x-user']);

function limiterFor(contender: HttpContender, client: Redis): Handler {
  const rule = MANY_RULE;
  if (contender === 'no limiter') return (_req, _res, next) => next();
  if (contender === 'rate-limiter-flexible RateLimiterRedis') {
    const limiter = new RateLimiterRedis({ storeClient: client, points: rule.limit, duration: rule.windowMs / 1000, keyPrefix: 'http-rlf' });
    return (req, res, next) => {
      limiter.consume(userOf(req)).then(
        () => next(),
        () => {
          res.statusCode = 429;
          res.end('Too Many Requests');
        },
      );
    };
  }
  const limiter =
    contender === HTTP_CONTENDERS[3]
      ? new KeyedRateLimiter({ algorithm: () => new TokenBucket(rule) })
      : new RedisRateLimiter({ client, algorithm: 'token-bucket', rule, onStoreError: 'allow', prefix: 'http-rk:' });
  const middleware = nodeRateLimit({ limiter, key: userOf, name: 'api', windowMs: rule.windowMs });
  return (req, res, next) => middleware(req, res, (error) => (error === undefined ? next() : res.destroy()));
}

const slidingLog = (rule: Rule) => new KeyedRateLimiter({ algorithm: () => new SlidingWindowLog(rule) });

/** Express 5 answering 'ok' behind express-rate-limit, with its own store or ratekeeper's. */
async function expressRateLimit(store: 'memory' | 'ratekeeper'): Promise<RequestListener> {
  const { default: express } = await import('express');
  const { rateLimit } = await import('express-rate-limit');
  const rule = MANY_RULE;
  const app = express();
  app.use(
    rateLimit({
      windowMs: rule.windowMs,
      limit: rule.limit,
      keyGenerator: (req) => userOf(req),
      standardHeaders: 'draft-8',
      legacyHeaders: false,
      ...(store === 'ratekeeper' && { store: rateLimitStore(slidingLog(rule)) }),
    }),
  );
  app.get('/', (_req, res) => void res.send('ok'));
  return app;
}

/** A Nest app on Express answering 'ok' behind ThrottlerGuard, with Nest's storage or ratekeeper's. Decorators applied by hand: no metadata is needed here. */
async function nestThrottler(storage: ThrottlerStorageLike | undefined): Promise<RequestListener> {
  // Through require, as Nest's own modules load each other: an import() under tsx would load a second
  // @nestjs/core, whose Reflector the guard's injector does not know.
  const require = createRequire(import.meta.url);
  const { Controller, Get, Module } = require('@nestjs/common') as typeof import('@nestjs/common');
  const { APP_GUARD, NestFactory } = require('@nestjs/core') as typeof import('@nestjs/core');
  const { ThrottlerGuard, ThrottlerModule } = require('@nestjs/throttler') as typeof import('@nestjs/throttler');
  const rule = MANY_RULE;
  class AppController {
    ok(): string {
      return 'ok';
    }
  }
  Get('/')(AppController.prototype, 'ok', Object.getOwnPropertyDescriptor(AppController.prototype, 'ok')!);
  Controller()(AppController);
  class AppModule {}
  Module({
    imports: [
      ThrottlerModule.forRoot({
        throttlers: [{ ttl: rule.windowMs, limit: rule.limit }],
        getTracker: (req) => String(req['headers']['x-user']),
        ...(storage !== undefined && { storage }),
      }),
    ],
    controllers: [AppController],
    providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
  })(AppModule);
  const app = await NestFactory.create(AppModule, { logger: ['error'], abortOnError: false });
  await app.init();
  return app.getHttpAdapter().getInstance() as RequestListener;
}

async function listenerFor(contender: HttpContender, client: Redis): Promise<RequestListener> {
  switch (contender) {
    case 'express-rate-limit + its MemoryStore':
      return expressRateLimit('memory');
    case 'express-rate-limit + rateLimitStore(KeyedRateLimiter sliding-window-log)':
      return expressRateLimit('ratekeeper');
    case '@nestjs/throttler + its default storage':
      return nestThrottler(undefined);
    case '@nestjs/throttler + throttlerStorage(KeyedRateLimiter sliding-window-log)':
      return nestThrottler(throttlerStorage({ limiter: slidingLog }));
    default: {
      const limit = limiterFor(contender, client);
      return (req, res) => limit(req, res, () => res.end('ok'));
    }
  }
}

async function main(): Promise<void> {
  const [contender, port] = process.argv.slice(2) as [HttpContender, string];
  if (!HTTP_CONTENDERS.includes(contender)) throw new Error(`http-server.ts: unknown contender ${contender}`);
  const client = new Redis({ port: Number(port), host: '127.0.0.1', enableAutoPipelining: false });
  const server = createServer(await listenerFor(contender, client));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('http-server.ts: no port');
  process.send?.({ port: address.port });
  process.on('message', () => {
    const { user, system } = process.cpuUsage();
    process.send?.({ cpuUs: user + system });
  });
  process.on('disconnect', () => process.exit(0));
}

if (process.argv[1]?.endsWith('http-server.ts')) await main();
