// The outage policy with an async fallback, and a caller's clock that misbehaves. No server needed:
// the client is an adapter that fails, which is what an outage looks like from here.
import { describe, expect, test } from 'vitest';
import { KeyedRateLimiter, ManualClock, Rule, TokenBucket, type AsyncRateLimiter } from '../../src/index';
import { RedisRateLimiter } from '../../src/redis';
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

  test('a failure of its own fails that call, and is never an unhandled rejection', async () => {
    const failing: AsyncRateLimiter = { tryAcquire: () => Promise.reject(new Error('fallback down too')) };
    const limiter = new RedisRateLimiter({ client: down, algorithm: 'fixed-window', rule: Rule.perSecond(5), onStoreError: failing });
    await expect(limiter.tryAcquire('k')).rejects.toThrow('fallback down too');
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
