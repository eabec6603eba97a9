// Express: one limit per client address, the draft-10 fields on every response.
// Run it with `npx tsx examples/express.ts`, then `curl -i http://127.0.0.1:3000/`.
import { pathToFileURL } from 'node:url';
import express from 'express';
import { KeyedRateLimiter, Rule, TokenBucket } from '../src/index';
import { nodeRateLimit } from '../src/http';

const rule = Rule.perMinute(5);
const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(rule) });

export const app = express();
app.get('/health', (_req, res) => void res.send('up')); // registered first, so never limited
app.use(
  nodeRateLimit({
    limiter,
    name: 'per-client',
    windowMs: rule.windowMs,
    // Behind one reverse proxy (a load balancer), set `trustProxies: 1` so the client is read from
    // X-Forwarded-For; without a proxy, leave it out, or any client could pick its own address.
  }),
);
app.get('/', (_req, res) => void res.json({ hello: 'world' }));

// Listen only when run directly, so a test can import `app` without opening a port.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  app.listen(3000, '127.0.0.1', () => console.log('listening on http://127.0.0.1:3000'));
}
