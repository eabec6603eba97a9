// Hono on Node: only /api/* is limited, with a custom refusal. The same middleware runs on Bun and
// Deno, where the client address is found too. Run it with `npx tsx examples/hono.ts`.
import { pathToFileURL } from 'node:url';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { KeyedRateLimiter, Rule, SlidingWindowCounter } from '../src/index';
import { honoRateLimit } from '../src/http';

const rule = Rule.perSecond(2);
const limiter = new KeyedRateLimiter({ algorithm: () => new SlidingWindowCounter(rule) });

export const app = new Hono();
app.use(
  '/api/*',
  honoRateLimit({
    limiter,
    name: 'api',
    windowMs: rule.windowMs,
    onRejected: (_c, decision) => Response.json({ error: 'slow down', retryAfterMs: decision.retryAfterMs }, { status: 429 }),
  }),
);
app.get('/', (c) => c.text('not limited'));
app.get('/api/time', (c) => c.json({ now: new Date().toISOString() }));

// Listen only when run directly, so a test can import `app` without opening a port.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  serve({ fetch: app.fetch, port: 3000, hostname: '127.0.0.1' }, ({ port }) => console.log(`listening on http://127.0.0.1:${port}`));
}
