// Child process of http.ts: a node:http server on a random loopback port answering 'ok' to every
// request, limited per `x-user` header by one contender over the Redis at the given port: none,
// ratekeeper's nodeRateLimit middleware over RedisRateLimiter (token bucket), or
// rate-limiter-flexible's RateLimiterRedis called as its README's Express middleware does; and, to
// tell the middleware's cost from the Redis hop's, nodeRateLimit over an in-memory KeyedRateLimiter. Sends
// its port to the parent, answers each message with its CPU time so far (µs), and serves until the
// parent disconnects.
import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { Redis } from 'ioredis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { KeyedRateLimiter, TokenBucket } from '../src/index';
import { nodeRateLimit } from '../src/http';
import { RedisRateLimiter } from '../src/redis';
import { MANY_RULE } from './algorithms';

export const HTTP_CONTENDERS = [
  'no limiter',
  'ratekeeper nodeRateLimit + RedisRateLimiter token-bucket',
  'rate-limiter-flexible RateLimiterRedis',
  'ratekeeper nodeRateLimit + KeyedRateLimiter token-bucket (in memory, one server\'s limit)',
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

async function main(): Promise<void> {
  const [contender, port] = process.argv.slice(2) as [HttpContender, string];
  if (!HTTP_CONTENDERS.includes(contender)) throw new Error(`http-server.ts: unknown contender ${contender}`);
  const client = new Redis({ port: Number(port), host: '127.0.0.1', enableAutoPipelining: false });
  const limit = limiterFor(contender, client);
  const server = createServer((req, res) => limit(req, res, () => res.end('ok')));
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
