import { describe, expect, it } from 'vitest';
import { KeyedRateLimiter, ManualClock, Rule, TokenBucket } from '../../src/index';
import { withRateLimit } from '../../src/http';
import { rangeError } from '../../src/core/errors';

// The attacks SECURITY.md lists, played end to end through the Fetch middleware: a client that
// rotates its IPv6 address within its /64, one that forges X-Forwarded-For behind a trusted proxy,
// and one that asks for more permits than the limit.

function app(options: { trustProxies?: number; clientAddress?: () => string; cost?: () => number } = {}) {
  const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(3)), clock: new ManualClock(0), maxKeys: 1_000 });
  const handler = withRateLimit({ limiter, ...options }, () => new Response('ok'));
  return { limiter, send: (headers: Record<string, string> = {}) => handler(new Request('http://api.test/', { headers })) };
}

const statuses = async (responses: Promise<Response>[]) => (await Promise.all(responses)).map((r) => r.status);

describe('attacks on the client key', () => {
  it('IPv6 rotation: a client cycling through addresses of its /64 is one key; another /64 is another', async () => {
    let n = 0;
    const { limiter, send } = app({ clientAddress: () => `2001:db8:aa:bb:${(n++).toString(16)}:${Math.floor(Math.random() * 0xffff).toString(16)}::1` });
    expect(await statuses(Array.from({ length: 10 }, () => send()))).toEqual([200, 200, 200, 429, 429, 429, 429, 429, 429, 429]);
    expect(limiter.size).toBe(1);
    expect(limiter.tryAcquire('2001:db8:aa:bc::/64').allowed).toBe(true);
  });

  it('forged X-Forwarded-For behind one trusted proxy: what the client writes to the left is never its key', async () => {
    let n = 0;
    // The peer is our proxy; it appends the address it saw (203.0.113.9) after whatever the client sent.
    const { limiter, send } = app({ trustProxies: 1, clientAddress: () => '10.0.0.1' });
    const forged = () => send({ 'x-forwarded-for': `198.51.100.${n++ % 250}, 192.0.2.${n % 250}, 203.0.113.9` });
    expect(await statuses(Array.from({ length: 6 }, forged))).toEqual([200, 200, 200, 429, 429, 429]);
    expect(limiter.size).toBe(1);
  });

  it('with no proxy trusted, X-Forwarded-For is ignored: rotating it changes nothing', async () => {
    let n = 0;
    const { limiter, send } = app({ clientAddress: () => '203.0.113.9' });
    expect(await statuses(Array.from({ length: 5 }, () => send({ 'x-forwarded-for': `198.51.100.${n++}` })))).toEqual([200, 200, 200, 429, 429]);
    expect(limiter.size).toBe(1);
  });

  it('permits abuse: a cost above the limit is an error, never a grant, and spends nothing', async () => {
    const { limiter, send } = app({ clientAddress: () => '203.0.113.9', cost: () => 4 });
    await expect(send()).rejects.toThrow(rangeError('ratekeeper: `permits` must be an integer from 1 to 3, got 4'));
    expect(limiter.size).toBe(0);
  });
});
