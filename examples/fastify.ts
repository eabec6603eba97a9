// Fastify: a limit per API key (per client address without one), and searches that cost more.
// Run it with `npx tsx examples/fastify.ts`, then `curl -i -H 'x-api-key: k1' 'http://127.0.0.1:3000/search?q=a'`.
import { pathToFileURL } from 'node:url';
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';
import { FixedWindow, KeyedRateLimiter, Rule } from '../src/index';
import { addressKey, fastifyRateLimit } from '../src/http';

const rule = Rule.perMinute(10);
const limiter = new KeyedRateLimiter({ algorithm: () => new FixedWindow(rule), maxKeys: 100_000 });

export const app = Fastify();
app.addHook(
  'onRequest',
  fastifyRateLimit<FastifyRequest, FastifyReply>({
    limiter,
    name: 'per-key',
    windowMs: rule.windowMs,
    key: (request) => {
      const apiKey = request.headers['x-api-key'];
      return typeof apiKey === 'string' ? `key:${apiKey}` : `ip:${addressKey(request.ip)}`;
    },
    cost: (request) => (request.url.startsWith('/search') ? 5 : 1),
    headers: 'draft-7',
  }),
);
app.get('/', async () => ({ hello: 'world' }));
app.get('/search', async () => ({ results: [] }));

// Listen only when run directly, so a test can import `app` without opening a port.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await app.listen({ port: 3000, host: '127.0.0.1' });
  console.log('listening on http://127.0.0.1:3000');
}
