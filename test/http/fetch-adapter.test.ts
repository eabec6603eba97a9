// src/http/fetch-adapter.ts and hono-adapter.ts without a server, and src/http/runtime-peer.ts: how
// the client address is found under Bun, Deno, @hono/node-server and a Next-style proxy.
import { describe, expect, it } from 'vitest';
import { coded } from '../../src/core/errors';
import { KeyedRateLimiter, ManualClock, Rule, TokenBucket, type RateLimiter } from '../../src/index';
import { honoRateLimit, withRateLimit, type HonoContextLike } from '../../src/http';

// The Fetch-API wrapper called the way each runtime calls a handler, without a server: what matters
// here is which key each request is limited under and what reaches the response.

function recording(limit = 3) {
  const keys: string[] = [];
  const inner = new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(limit, 60_000)), clock: new ManualClock(0) });
  const limiter: RateLimiter = {
    tryAcquire: (key, permits) => {
      keys.push(key);
      return inner.tryAcquire(key, permits);
    },
  };
  return { keys, limiter };
}

const request = (headers: Record<string, string> = {}) => new Request('http://api.test/', { headers });
const ok = () => new Response('ok');

describe('withRateLimit finds the client', () => {
  it.each<[string, unknown, string]>([
    ['on Bun, from server.requestIP(request)', { requestIP: (r: Request) => (r instanceof Request ? { address: '::ffff:198.51.100.7', port: 1 } : null) }, '198.51.100.7'],
    ['on Deno, from info.remoteAddr', { remoteAddr: { hostname: '2001:db8:0:7::1', port: 1, transport: 'tcp' } }, '2001:db8:0:7::/64'],
    ['on @hono/node-server, from env.incoming', { incoming: { socket: { remoteAddress: '203.0.113.5' } } }, '203.0.113.5'],
    ['under a nested server property', { server: { incoming: { socket: { remoteAddress: '203.0.113.6' } } } }, '203.0.113.6'],
  ])('%s', async (_, context, key) => {
    const { keys, limiter } = recording();
    const handler = withRateLimit({ limiter }, (_request: Request, _context: unknown) => ok());
    expect((await handler(request(), context)).status).toBe(200);
    expect(keys).toEqual([key]);
  });

  it('behind a proxy that gives no peer (Next.js, Workers), from the trusted header', async () => {
    const { keys, limiter } = recording();
    const handler = withRateLimit({ limiter, trustProxies: 1 }, ok);
    await handler(request({ 'x-forwarded-for': '198.51.100.1, 203.0.113.9' }));
    const forwarded = withRateLimit({ limiter, trustProxies: 1, forwardedHeader: 'forwarded' }, ok);
    await forwarded(request({ forwarded: 'for=198.51.100.1, for="[2001:db8::9]:443"', 'x-forwarded-for': '192.0.2.1' }));
    expect(keys).toEqual(['203.0.113.9', '2001:db8::/64']);
  });

  it('from clientAddress when given', async () => {
    const { keys, limiter } = recording();
    const handler = withRateLimit({ limiter, clientAddress: (r) => r.headers.get('cf-connecting-ip') ?? undefined }, ok);
    await handler(request({ 'cf-connecting-ip': '192.0.2.77' }));
    expect(keys).toEqual(['192.0.2.77']);
  });

  it('fails the request, naming the fix, when nothing identifies the client', async () => {
    const handler = withRateLimit({ limiter: recording().limiter }, ok);
    await expect(handler(request())).rejects.toThrow(
      coded(
        new Error(
          'ratekeeper: cannot tell which client sent this request, as the server gave no peer address; ' +
            'pass `key` or `clientAddress`, or set `trustProxies` behind a proxy',
        ),
        'ERR_RATEKEEPER_NO_CLIENT_ADDRESS',
      ),
    );
  });
});

describe('withRateLimit responses', () => {
  const keyed = { key: () => 'k', name: 'api', windowMs: 60_000 };

  it('adds the fields to a response whose headers are immutable, keeping its status', async () => {
    const handler = withRateLimit({ limiter: recording().limiter, ...keyed }, () => Response.redirect('http://api.test/next', 302));
    const response = await handler(request());
    expect(response.status).toBe(302);
    expect(response.headers.get('location')).toBe('http://api.test/next');
    expect(response.headers.get('ratelimit')).toBe('"api";r=2;t=20');
  });

  it('sends a response whose headers can be neither changed nor copied as it is', async () => {
    const handler = withRateLimit({ limiter: recording().limiter, ...keyed }, () => Response.error());
    const response = await handler(request());
    expect([response.type, response.headers.get('ratelimit')]).toEqual(['error', null]);
  });

  it('keeps a field the handler set itself', async () => {
    const handler = withRateLimit({ limiter: recording().limiter, ...keyed }, () => new Response('ok', { headers: { RateLimit: '"own";r=1' } }));
    const response = await handler(request());
    expect(response.headers.get('ratelimit')).toBe('"own";r=1');
    expect(response.headers.get('ratelimit-policy')).toBe('"api";q=3;w=60');
  });

  it('completes a custom refusal with the fields it leaves out', async () => {
    const handler = withRateLimit(
      {
        limiter: recording(1).limiter,
        ...keyed,
        onRejected: (_request, decision) => new Response('later', { status: 429, headers: { 'Retry-After': String(decision.retryAfterMs) } }),
      },
      ok,
    );
    await handler(request());
    const refused = await handler(request());
    expect([refused.status, await refused.text()]).toEqual([429, 'later']);
    expect(refused.headers.get('retry-after')).toBe('60000');
    expect(refused.headers.get('ratelimit')).toBe('"api";r=0;t=60');
  });

  it('passes the handler its extra arguments', async () => {
    const handler = withRateLimit({ limiter: recording().limiter, key: () => 'k' }, (_r: Request, ctx: { params: { id: string } }) => new Response(ctx.params.id));
    expect(await (await handler(request(), { params: { id: '42' } })).text()).toBe('42');
  });
});

describe('honoRateLimit', () => {
  it('reads the peer from c.env by default', async () => {
    const { keys, limiter } = recording();
    const headers = new Headers();
    const raw = request();
    const c: HonoContextLike = {
      req: { raw, method: raw.method, path: '/', header: (name) => raw.headers.get(name) ?? undefined },
      env: { incoming: { socket: { remoteAddress: '::ffff:192.0.2.8' } } },
      res: new Response('ok', { headers }),
      header: (name, value) => headers.set(name, value),
      set: () => {},
    };
    await honoRateLimit({ limiter })(c, async () => {});
    expect(keys).toEqual(['192.0.2.8']);
    expect(headers.get('ratelimit')).toBe('"default";r=2;t=20');
  });
});
