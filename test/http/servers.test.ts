// The middleware on real servers over loopback: src/http/node-adapter.ts (Express), fastify-adapter.ts,
// hono-adapter.ts and fetch-adapter.ts, all through the shared logic of src/http/request-limit.ts.
import { afterEach, describe, expect, it } from 'vitest';
import { rangeError, typeError } from '../../src/core/errors';
import { KeyedRateLimiter, ManualClock, Rule, TokenBucket, type AsyncRateLimiter } from '../../src/index';
import type { ForwardedHeader } from '../../src/http';
import { RedisRateLimiter } from '../../src/redis';
import { redisPort, uniquePrefix, useIoredis } from '../redis/helpers/clients';
import { ADAPTERS, CORS_HEADERS, getWithLines, limitFields, NODE_HTTP, start, type Adapter, type Running, type Setup } from './support/servers';

// Every adapter, behind its real framework on loopback, must answer the same requests the same way.
// The limiter's clock is frozen, so every field value is exact: a token bucket of 3 per minute
// refills one token every 20 s.

const PROBLEM = {
  type: 'https://iana.org/assignments/http-problem-types#quota-exceeded',
  title: 'Request cannot be satisfied as assigned quota has been exceeded',
  status: 429,
  'violated-policies': ['api'],
};

function threePerMinute() {
  return new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(3, 60_000)), clock: new ManualClock(0) });
}

const policy = { name: 'api', windowMs: 60_000 } as const;

describe.each(ADAPTERS)('%s', (adapter) => {
  let server: Running | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });
  const serve = async (setup: Setup) => {
    server = await start(adapter, setup);
    return (path = '/', headers: Record<string, string> = {}, method = 'GET') => fetch(`${server?.url}${path}`, { headers, method });
  };

  it('allows the limit, then answers 429 with the exact fields and a problem body', async () => {
    const get = await serve({ limiter: threePerMinute(), ...policy });
    for (const [r, t] of [[2, 20], [1, 40], [0, 60]]) {
      const response = await get();
      expect(response.status).toBe(200);
      expect(await response.text()).toBe('ok');
      expect(limitFields(response)).toEqual({ 'ratelimit-policy': '"api";q=3;w=60', ratelimit: `"api";r=${r};t=${t}` });
    }
    const refused = await get();
    expect(refused.status).toBe(429);
    expect(limitFields(refused)).toEqual({ 'ratelimit-policy': '"api";q=3;w=60', ratelimit: '"api";r=0;t=20', 'retry-after': '20' });
    expect(refused.headers.get('content-type')).toBe('application/problem+json');
    expect(await refused.json()).toEqual(PROBLEM);
  });

  it('limits clients apart: a trusted proxy names them, IPv6 counted per /64', async () => {
    const get = await serve({ limiter: threePerMinute(), ...policy, trustProxies: 1 });
    const from = (address: string) => get('/', { 'x-forwarded-for': `198.51.100.99, ${address}` });
    for (let i = 0; i < 3; i++) expect((await from('203.0.113.1')).status).toBe(200);
    expect((await from('203.0.113.1')).status).toBe(429);
    expect((await from('203.0.113.2')).status).toBe(200);
    await from('2001:db8:0:1::a');
    await from('2001:db8:0:1::b');
    expect(limitFields(await from('2001:db8:0:1:ffff:ffff:ffff:ffff')).ratelimit).toBe('"api";r=0;t=60');
    expect(limitFields(await from('2001:db8:0:2::a')).ratelimit).toBe('"api";r=2;t=20');
  });

  // The loopback peer plays the proxy: after whatever the client sent, it appends `, for=<the address
  // it received from>` (here 203.0.113.7), so with trustProxies: 1 that address is the client's key.
  it.each<[string, (i: number) => string]>([
    ['a quote left open', (i) => `for="x${i}`],
    ["a quote opened after a victim's address", () => 'for=198.51.100.1;x="'],
    ['a quoted IPv6 address of a new /64 each time', (i) => `for="[2001:db8:${i}::1]";x="`],
  ])('Forwarded behind one proxy, %s: the key is still the address the proxy saw', async (_, forged) => {
    const get = await serve({ limiter: threePerMinute(), ...policy, trustProxies: 1, forwardedHeader: 'forwarded' });
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) statuses.push((await get('/', { forwarded: `${forged(i)}, for=203.0.113.7` })).status);
    expect(statuses).toEqual([200, 200, 200, 429]);
    expect(limitFields(await get('/', { forwarded: 'for=198.51.100.1' })).ratelimit).toBe('"api";r=2;t=20');
  });

  it.each<[ForwardedHeader, string]>([
    ['forwarded', 'for="x'],
    ['x-forwarded-for', '198.51.100.'],
  ])('%s on two header lines, the proxy adding its own: the key is still the address the proxy saw', async (forwardedHeader, forged) => {
    const get = await serve({ limiter: threePerMinute(), ...policy, trustProxies: 1, forwardedHeader });
    const seen = forwardedHeader === 'forwarded' ? 'for=203.0.113.7' : '203.0.113.7';
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) statuses.push(await getWithLines(`${server?.url}/`, { [forwardedHeader]: [`${forged}${i}`, seen] }));
    expect(statuses).toEqual([200, 200, 200, 429]);
    expect((await get('/', { [forwardedHeader]: seen.replace('7', '8') })).status).toBe(200);
  });

  it('ignores X-Forwarded-For unless proxies are trusted, since any client can send it', async () => {
    const get = await serve({ limiter: threePerMinute(), ...policy });
    for (const address of ['203.0.113.1', '203.0.113.2', '203.0.113.3']) {
      expect((await get('/', { 'x-forwarded-for': address })).status).toBe(200);
    }
    expect((await get('/', { 'x-forwarded-for': '203.0.113.4' })).status).toBe(429);
  });

  it('limits by the key function, one key unaffected by another', async () => {
    const get = await serve({ limiter: threePerMinute(), ...policy, key: (header) => header('x-api-key') ?? 'anonymous' });
    for (let i = 0; i < 3; i++) await get('/', { 'x-api-key': 'alice' });
    expect((await get('/', { 'x-api-key': 'alice' })).status).toBe(429);
    const bob = await get('/', { 'x-api-key': 'bob' });
    expect(bob.status).toBe(200);
    expect(limitFields(bob).ratelimit).toBe('"api";r=2;t=20');
  });

  it('spends the cost of each request', async () => {
    const get = await serve({ limiter: threePerMinute(), ...policy, cost: (header) => Number(header('x-cost') ?? 1) });
    expect(limitFields(await get('/', { 'x-cost': '2' })).ratelimit).toBe('"api";r=1;t=40');
    const refused = await get('/', { 'x-cost': '2' });
    expect(refused.status).toBe(429);
    expect(limitFields(refused)).toMatchObject({ ratelimit: '"api";r=1;t=20', 'retry-after': '20' });
    expect((await get('/')).status).toBe(200);
  });

  it('neither counts nor marks a skipped request', async () => {
    const get = await serve({ limiter: threePerMinute(), ...policy, skip: (path) => path === '/health' });
    for (let i = 0; i < 3; i++) await get();
    expect((await get()).status).toBe(429);
    const health = await get('/health');
    expect(health.status).toBe(200);
    expect(await health.text()).toBe('up');
    expect(limitFields(health)).toEqual({});
  });

  const PREFLIGHT = { origin: 'https://app.test', 'access-control-request-method': 'POST' };
  const corsFields = (response: Response) => ({
    'access-control-allow-origin': response.headers.get('access-control-allow-origin'),
    'access-control-allow-methods': response.headers.get('access-control-allow-methods'),
  });

  it('lets a CORS preflight through untouched and uncounted, also once the limit is spent', async () => {
    const request = await serve({ limiter: threePerMinute(), ...policy });
    for (let i = 0; i < 3; i++) {
      const preflight = await request('/', PREFLIGHT, 'OPTIONS');
      expect([preflight.status, corsFields(preflight), limitFields(preflight)]).toEqual([204, CORS_HEADERS, {}]);
    }
    for (let i = 0; i < 3; i++) expect((await request()).status).toBe(200);
    expect((await request()).status).toBe(429);
    const preflight = await request('/', PREFLIGHT, 'OPTIONS');
    expect([preflight.status, corsFields(preflight), limitFields(preflight)]).toEqual([204, CORS_HEADERS, {}]);
    // Without Access-Control-Request-Method, OPTIONS is an ordinary request, counted.
    expect((await request('/', { origin: 'https://app.test' }, 'OPTIONS')).status).toBe(429);
  });

  it('with countPreflight: true, counts a preflight like any request', async () => {
    const request = await serve({ limiter: threePerMinute(), ...policy, countPreflight: true });
    for (const r of [2, 1, 0]) {
      const preflight = await request('/', PREFLIGHT, 'OPTIONS');
      expect(preflight.status).toBe(204);
      expect(limitFields(preflight).ratelimit).toMatch(`"api";r=${r};`);
    }
    expect((await request('/', PREFLIGHT, 'OPTIONS')).status).toBe(429);
    expect((await request()).status).toBe(429);
  });

  it('lets a custom refusal answer, keeping the fields', async () => {
    const get = await serve({ limiter: threePerMinute(), ...policy, customRefusal: true });
    for (let i = 0; i < 3; i++) await get();
    const refused = await get();
    expect(refused.status).toBe(503);
    expect(await refused.text()).toBe('retry in 20000 ms');
    expect(limitFields(refused)).toEqual({ 'ratelimit-policy': '"api";q=3;w=60', ratelimit: '"api";r=0;t=20', 'retry-after': '20' });
  });

  it('works the same over an asynchronous limiter', async () => {
    const inner = threePerMinute();
    const limiter: AsyncRateLimiter = { tryAcquire: async (key, permits) => inner.tryAcquire(key, permits) };
    const get = await serve({ limiter, ...policy });
    for (let i = 0; i < 3; i++) expect((await get()).status).toBe(200);
    const refused = await get();
    expect(refused.status).toBe(429);
    expect(limitFields(refused)).toEqual({ 'ratelimit-policy': '"api";q=3;w=60', ratelimit: '"api";r=0;t=20', 'retry-after': '20' });
  });

  it.each([
    ['throws', { tryAcquire: () => { throw new Error('store down'); } }],
    ['rejects', { tryAcquire: () => Promise.reject(new Error('store down')) }],
  ])('hands a limiter that %s to the framework', async (_, limiter) => {
    const get = await serve({ limiter, ...policy });
    const response = await get();
    expect(response.status).toBe(500);
    expect(await response.text()).toBe('store down');
  });

  it('writes the chosen format', async () => {
    const get = await serve({ limiter: threePerMinute(), ...policy, headers: 'draft-7' });
    expect(limitFields(await get())).toEqual({ 'ratelimit-policy': '3;w=60', ratelimit: 'limit=3, remaining=2, reset=20' });
  });

  it('with headers: false, sends only Retry-After, on refusals', async () => {
    const get = await serve({ limiter: threePerMinute(), ...policy, headers: false });
    for (let i = 0; i < 3; i++) expect(limitFields(await get())).toEqual({});
    expect(limitFields(await get())).toEqual({ 'retry-after': '20' });
  });

  describe('settling after the response', () => {
    const key = () => 'k';
    /** Waits (real time, generously bounded) until the key has `remaining` permits: settling runs after the response. */
    const remainingOf = async (limiter: KeyedRateLimiter, remaining: number) => {
      for (let i = 0; i < 200 && limiter.peek('k', 0).remaining !== remaining; i++) await new Promise((resolve) => setTimeout(resolve, 5));
      expect(limiter.peek('k', 0).remaining).toBe(remaining);
    };

    it('hands the handler its decision', async () => {
      const get = await serve({ limiter: threePerMinute(), ...policy, key });
      expect(await (await get('/decision')).json()).toEqual({ allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetAfterMs: 20_000 });
    });

    it('skipFailedRequests gives a failed request its permits back', async () => {
      const limiter = threePerMinute();
      const get = await serve({ limiter, ...policy, key, skipFailedRequests: true });
      for (let i = 0; i < 5; i++) {
        expect((await get('/fail')).status).toBe(401);
        await remainingOf(limiter, 3);
      }
      for (let i = 0; i < 3; i++) expect((await get()).status).toBe(200);
      expect((await get()).status).toBe(429);
    });

    it('skipSuccessfulRequests counts only failures', async () => {
      const limiter = threePerMinute();
      const get = await serve({ limiter, ...policy, key, skipSuccessfulRequests: true });
      for (let i = 0; i < 5; i++) {
        expect((await get()).status).toBe(200);
        await remainingOf(limiter, 3);
      }
      for (let i = 0; i < 3; i++) expect((await get('/fail')).status).toBe(401);
      await remainingOf(limiter, 0);
      expect((await get('/fail')).status).toBe(429);
    });

    it('settle charges the real cost and gives back what was not used', async () => {
      const limiter = threePerMinute();
      const errors: unknown[] = [];
      const get = await serve({ limiter, ...policy, key, settle: (_status, header) => Number(header('x-used')), onSettleError: (error) => errors.push(error) });
      await get('/', { 'x-used': '0' });
      await remainingOf(limiter, 3);
      await get('/', { 'x-used': '5' }); // 2 over the limit: in debt
      await remainingOf(limiter, 0);
      expect((await get()).status).toBe(429);
      limiter.reset('k');
      await get('/', { 'x-used': 'many' });
      for (let i = 0; i < 200 && errors.length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 5));
      expect(errors).toEqual([rangeError('ratekeeper: `settle` must be a safe integer of at least 0, got NaN')]);
    });

    // Node servers see the client leave; Hono and Fetch settle when the handler returns (docs/http.md).
    if (adapter === 'express' || adapter === 'fastify') {
      it(
        'a client that leaves before the status counts in full; once the status is sent, the status decides',
        async () => {
          const limiter = threePerMinute();
          const get = await serve({ limiter, ...policy, key, skipSuccessfulRequests: true });
          const leave = async (path: string) => {
            const controller = new AbortController();
            const response = fetch(`${server?.url}${path}`, { signal: controller.signal });
            if (path === '/stream') await response; // the status line and headers arrived
            else await new Promise((resolve) => setTimeout(resolve, 50));
            controller.abort();
            await response.catch(() => undefined);
          };
          const closed = () => new Promise((resolve) => setTimeout(resolve, 200)); // for the server to see the client go
          await leave('/hang');
          await closed();
          expect(limiter.peek('k', 0).remaining).toBe(2);
          await leave('/stream');
          await closed();
          expect(limiter.peek('k', 0).remaining).toBe(2); // given back: the server had answered 200
          expect((await get()).status).toBe(200);
        },
      );
    }

    // The same over Redis: RedisRateLimiter.reserve resolves with a reservation whose settle and
    // cancel are Promises, each one script call on the key.
    describe.skipIf(!redisPort)('with a RedisRateLimiter', () => {
      const redis = useIoredis();
      const overRedis = () =>
        new RedisRateLimiter({ client: redis, algorithm: 'token-bucket', rule: new Rule(3, 60_000), onStoreError: 'deny', clock: new ManualClock(0), prefix: uniquePrefix('http') });
      const remainingIn = async (limiter: RedisRateLimiter, remaining: number) => {
        for (let i = 0; i < 200 && (await limiter.peek('k', 0)).remaining !== remaining; i++) await new Promise((resolve) => setTimeout(resolve, 5));
        expect((await limiter.peek('k', 0)).remaining).toBe(remaining);
      };

      it('skipFailedRequests gives a failed request its permits back', async () => {
        const limiter = overRedis();
        const get = await serve({ limiter, ...policy, key, skipFailedRequests: true });
        for (let i = 0; i < 5; i++) {
          expect((await get('/fail')).status).toBe(401);
          await remainingIn(limiter, 3);
        }
        for (let i = 0; i < 3; i++) expect((await get()).status).toBe(200);
        expect((await get()).status).toBe(429);
      });

      it('skipSuccessfulRequests counts only failures, and the handler reads the decision', async () => {
        const limiter = overRedis();
        const get = await serve({ limiter, ...policy, key, skipSuccessfulRequests: true });
        expect(await (await get('/decision')).json()).toEqual({ allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetAfterMs: 20_000 });
        for (let i = 0; i < 5; i++) {
          expect((await get()).status).toBe(200);
          await remainingIn(limiter, 3);
        }
        for (let i = 0; i < 3; i++) expect((await get('/fail')).status).toBe(401);
        await remainingIn(limiter, 0);
        expect((await get('/fail')).status).toBe(429);
      });

      it('settle charges the real cost and gives back what was not used', async () => {
        const limiter = overRedis();
        const get = await serve({ limiter, ...policy, key, settle: (_status, header) => Number(header('x-used')) });
        await get('/', { 'x-used': '0' });
        await remainingIn(limiter, 3);
        await get('/', { 'x-used': '2' });
        await remainingIn(limiter, 1);
        await get('/', { 'x-used': '5' }); // 4 more than the 1 left: in debt
        await remainingIn(limiter, 0);
        const refused = await get();
        expect(refused.status).toBe(429);
        expect(refused.headers.get('retry-after')).toBe('80'); // 4 permits short, one each 20 s
        await limiter.reset('k');
        expect((await get()).status).toBe(200);
      });
    });

    it('refuses a limiter without reserve, at once', async () => {
      const limiter: AsyncRateLimiter = { tryAcquire: async () => threePerMinute().tryAcquire('k') };
      await expect(start(adapter, { limiter, skipFailedRequests: true })).rejects.toThrow(
        typeError(
          'ratekeeper: `skipFailedRequests`, `skipSuccessfulRequests` and `settle` need a limiter with a reserve(key, permits) method, such as a KeyedRateLimiter',
        ),
      );
    });
  });
});

// Issue 23, item 20: a proxy that copies the client's Host into its element (HAProxy `option forwarded
// host`, nginx `;host=$host`) lets the client choose the element's length. Dropped as too long, the
// element used to hand the spent client the peer's key (the proxy's own): two more requests, and then
// the proxy's own requests were refused.
describe.each<Adapter>([...ADAPTERS, NODE_HTTP])('%s behind a proxy that writes the client\'s host', (adapter) => {
  let server: Running | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  it('a spent client cannot leave its key by sending a long Host', async () => {
    server = await start(adapter, { limiter: threePerMinute(), ...policy, trustProxies: 1, forwardedHeader: 'forwarded' });
    const viaProxy = (host: string) => fetch(`${server?.url}/`, { headers: { forwarded: `for=203.0.113.7;host="${host}";proto=https` } });
    for (let i = 0; i < 3; i++) expect((await viaProxy('api.example')).status).toBe(200);
    const statuses: number[] = [];
    for (const length of [1100, 4000, 12_000]) statuses.push((await viaProxy(`${'a'.repeat(length)}.example`)).status);
    expect(statuses).toEqual([429, 429, 429]);
    const proxyItself = await fetch(`${server.url}/`);
    expect(proxyItself.status).toBe(200);
    expect(limitFields(proxyItself).ratelimit).toBe('"api";r=2;t=20');
  });
});
