// The outage policy with an async fallback, and a caller's clock that misbehaves. No server needed:
// the client is an adapter that fails, which is what an outage looks like from here.
import { describe, expect, test } from 'vitest';
import { type AsyncRateLimiter, type Decision, KeyedRateLimiter, ManualClock, Rule, TokenBucket } from '../../src/index';
import { RedisRateLimiter, RedisTimeoutError } from '../../src/redis';
import { rangeError } from '../../src/core/errors';

const down = { evalsha: () => Promise.reject(new Error('down')), eval: () => Promise.reject(new Error('down')) };

describe('an async limiter as the outage fallback', () => {
  const local = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(1)), clock: new ManualClock() });
  const asyncFallback: AsyncRateLimiter = { tryAcquire: async (key, permits) => local.tryAcquire(key, permits) };

  test('answers with its decision, marked degraded', async () => {
    const limiter = new RedisRateLimiter({ client: down, algorithm: 'token-bucket', rule: Rule.perSecond(5), onStoreError: asyncFallback });
    expect(await limiter.tryAcquire('k')).toEqual({ allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 1000, degraded: 'store-error' });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 1000, degraded: 'store-error' });
  });

  test('a failure of its own (a rejection) answers as deny would, marked degraded, and onError hears both causes', async () => {
    const failing: AsyncRateLimiter = { tryAcquire: () => Promise.reject(new Error('fallback down too')) };
    const errors: string[] = [];
    const limiter = new RedisRateLimiter({ client: down, algorithm: 'fixed-window', rule: Rule.perSecond(5), onStoreError: failing, onError: (error) => errors.push(String(error)) });
    expect(await limiter.tryAcquire('k', 2)).toStrictEqual({ allowed: false, limit: 5, remaining: 0, retryAfterMs: 400, resetAfterMs: 1000, degraded: 'store-error' });
    expect(errors).toEqual(['Error: down', 'Error: fallback down too']);
  });

  test('a fallback that never settles is bounded by timeoutMs, then answers as deny would', async () => {
    const errors: unknown[] = [];
    const limiter = new RedisRateLimiter({
      client: down,
      algorithm: 'token-bucket',
      rule: Rule.perSecond(5),
      onStoreError: { tryAcquire: () => new Promise<never>(() => {}) },
      timeoutMs: 50,
      onError: (error) => errors.push(error),
    });
    const started = performance.now();
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 200, degraded: 'store-error' });
    expect(performance.now() - started).toBeGreaterThanOrEqual(49);
    expect(errors[1]).toBeInstanceOf(RedisTimeoutError);
    expect(String(errors[1])).toBe('RedisTimeoutError: ratekeeper: the fallback limiter did not answer within 50 ms');
  });

  test('a thenable that is not a native Promise is awaited like one', async () => {
    const thenable: AsyncRateLimiter = {
      tryAcquire: (key, permits) => ({ then: (resolve: (d: Decision) => void) => resolve(local.tryAcquire(key, permits)) }) as unknown as Promise<Decision>,
    };
    const limiter = new RedisRateLimiter({ client: down, algorithm: 'token-bucket', rule: Rule.perSecond(5), onStoreError: thenable });
    expect(await limiter.tryAcquire('thenable')).toStrictEqual({ allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 1000, degraded: 'store-error' });
  });

  test('an answer that is not a decision answers as deny would', async () => {
    const errors: string[] = [];
    const limiter = new RedisRateLimiter({
      client: down,
      algorithm: 'token-bucket',
      rule: Rule.perSecond(5),
      onStoreError: { tryAcquire: async () => ({ ok: true }) as unknown as Decision },
      onError: (error) => errors.push(String(error)),
    });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false, degraded: 'store-error' });
    expect(errors[1]).toBe('TypeError: ratekeeper: the fallback limiter answered an object, not a Decision');
  });
});

test('a caller clock that returns NaN or Infinity is refused by name, and nothing is sent', async () => {
  let sent = 0;
  const counting = { evalsha: () => (sent++, Promise.reject(new Error('unused'))), eval: () => (sent++, Promise.reject(new Error('unused'))) };
  for (const reading of [Number.NaN, Infinity]) {
    const limiter = new RedisRateLimiter({ client: counting, algorithm: 'token-bucket', rule: Rule.perSecond(5), onStoreError: 'deny', clock: { now: () => reading } });
    await expect(limiter.tryAcquire('k')).rejects.toThrow(rangeError(`ratekeeper: \`clock\` returned ${reading}, not a finite number`));
  }
  expect(sent).toBe(0);
});
