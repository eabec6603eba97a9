import { describe, expect, it } from 'vitest';
import { KeyedRateLimiter, ManualClock, Rule, TokenBucket } from '../../src/index';
import { fastifyRateLimit, honoRateLimit, koaRateLimit, nodeRateLimit, withRateLimit } from '../../src/http';
import { rangeError, typeError } from '../../src/core/errors';

// Bad options fail when the middleware is built, not on the first request, with a message that names
// the option and echoes the value. Every adapter checks the shared options the same way.

const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(3, 1000)), clock: new ManualClock(0) });

const ADAPTERS: [string, (options: never) => unknown][] = [
  ['nodeRateLimit', (options) => nodeRateLimit(options)],
  ['fastifyRateLimit', (options) => fastifyRateLimit(options)],
  ['honoRateLimit', (options) => honoRateLimit(options)],
  ['withRateLimit', (options) => withRateLimit(options, () => new Response())],
  ['koaRateLimit', (options) => koaRateLimit(options)],
];

const HEADERS = "'draft-10', 'draft-7', 'draft-6', 'x-ratelimit' or false";

describe.each(ADAPTERS)('%s', (adapter, build) => {
  it.each<[string, unknown, Error]>([
    ['options that are no object', undefined, typeError(`ratekeeper: ${adapter} options must be an object, got undefined`)],
    ['a missing limiter', {}, typeError('ratekeeper: `limiter` must be an object with a tryAcquire(key, permits) method, got undefined')],
    ['a limiter without tryAcquire', { limiter: {} }, typeError('ratekeeper: `limiter` must be an object with a tryAcquire(key, permits) method, got an object')],
    ['a key that is no function', { limiter, key: 'user' }, typeError('ratekeeper: `key` must be a function, got "user"')],
    ['a cost that is no function', { limiter, cost: 2 }, typeError('ratekeeper: `cost` must be a function, got 2')],
    ['a skip that is no function', { limiter, skip: true }, typeError('ratekeeper: `skip` must be a function, got true')],
    ['an unknown header format', { limiter, headers: 'draft-8' }, rangeError(`ratekeeper: \`headers\` must be ${HEADERS}, got "draft-8"`)],
    ['headers: true', { limiter, headers: true }, typeError(`ratekeeper: \`headers\` must be ${HEADERS}, got true`)],
    ['an empty name', { limiter, name: '' }, rangeError('ratekeeper: `name` must be non-empty printable ASCII (a structured-field string), got ""')],
    ['a negative window', { limiter, windowMs: -1 }, rangeError('ratekeeper: `windowMs` must be a positive finite number, got -1')],
    ['a negative trustProxies', { limiter, trustProxies: -1 }, rangeError('ratekeeper: `trustProxies` must be an integer from 0 to 16, got -1')],
    ['a fractional trustProxies', { limiter, trustProxies: 1.5 }, rangeError('ratekeeper: `trustProxies` must be an integer from 0 to 16, got 1.5')],
    ['trustProxies: true', { limiter, trustProxies: true }, typeError('ratekeeper: `trustProxies` must be a number, got true')],
    ['an unknown forwarded header', { limiter, forwardedHeader: 'x-real-ip' }, rangeError("ratekeeper: `forwardedHeader` must be 'x-forwarded-for' or 'forwarded', got \"x-real-ip\"")],
    ['countPreflight: "yes"', { limiter, countPreflight: 'yes' }, typeError('ratekeeper: `countPreflight` must be true or false, got "yes"')],
    ['an onRejected that is no function', { limiter, onRejected: 429 }, typeError('ratekeeper: `onRejected` must be a function, got 429')],
  ])('refuses %s', (_, options, error) => {
    expect(() => build(options as never)).toThrow(error);
  });
});

describe.each(ADAPTERS.slice(2, 4))('%s', (_, build) => {
  it('refuses a clientAddress that is no function', () => {
    expect(() => build({ limiter, clientAddress: '127.0.0.1' } as never)).toThrow(
      typeError('ratekeeper: `clientAddress` must be a function, got "127.0.0.1"'),
    );
  });
});

describe('per-request callbacks', () => {
  const run = (options: object) => withRateLimit({ limiter, ...options }, () => new Response())(new Request('http://api.test/'));

  it.each<[string, object, Error]>([
    ['a key that is no string', { key: () => 42 }, typeError('ratekeeper: `key` must return a string, got 42')],
    ['a cost of 0', { key: () => 'k', cost: () => 0 }, rangeError('ratekeeper: `cost` must be a safe integer of at least 1, got 0')],
    ['a cost above the limit', { key: () => 'k', cost: () => 4 }, rangeError('ratekeeper: `permits` must be an integer from 1 to 3, got 4')],
    ['a promised key that is no string', { key: async () => 42 }, typeError('ratekeeper: `key` must return a string, got 42')],
    ['a promised cost of 0', { key: () => 'k', cost: async () => 0 }, rangeError('ratekeeper: `cost` must be a safe integer of at least 1, got 0')],
    ['a limiter answering no decision', { key: () => 'k', limiter: { tryAcquire: () => undefined } }, typeError('ratekeeper: `decision` must be an object, got undefined')],
    ['a limiter answering null', { key: () => 'k', limiter: { tryAcquire: () => null } }, typeError('ratekeeper: `decision` must be an object, got null')],
  ])('reject %s', async (_, options, error) => {
    await expect(run(options)).rejects.toThrow(error);
  });

  it('waits for a key, a cost and a decision given as promises or other thenables, and takes plain ones as they are', async () => {
    const asked: [string, number][] = [];
    const decide = (key: string, permits: number) => {
      asked.push([key, permits]);
      return { allowed: true as const, limit: 3, remaining: 3 - permits, retryAfterMs: 0 as const, resetAfterMs: 1000 };
    };
    const thenable = { tryAcquire: (key: string, permits = 1) => ({ then: (resolve: (value: unknown) => void) => resolve(decide(key, permits)) }) };
    const plain = { tryAcquire: (key: string, permits = 1) => decide(key, permits) };
    for (const [limiter, key, cost] of [
      [thenable, async () => 'a', async () => 2],
      [plain, () => 'b', () => 1],
      [plain, () => Promise.resolve('c'), () => 3],
    ] as const) {
      const response = await withRateLimit({ limiter: limiter as never, key, cost, name: 'api' }, () => new Response('ok'))(new Request('http://api.test/'));
      expect(response.headers.get('RateLimit')).toBe(`"api";r=${3 - asked.at(-1)![1]};t=1`);
    }
    expect(asked).toEqual([['a', 2], ['b', 1], ['c', 3]]);
  });

  it('refuses a handler that is no function', () => {
    expect(() => withRateLimit({ limiter }, 'ok' as never)).toThrow(typeError('ratekeeper: `handler` must be a function returning a Response'));
  });
});
