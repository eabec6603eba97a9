// src/redis/coalescer.ts and batch-sender.ts, through RedisRateLimiter: the calls of one tick share
// one script call, and each still gets its own answer, its own policy decision, its own bound.
import { describe, expect, test } from 'vitest';
import { KeyedRateLimiter, Rule, TokenBucket } from '../../src/index';
import { RedisRateLimiter, RedisTimeoutError } from '../../src/redis';
import { useIoredis, redisPort, uniquePrefix } from './helpers/clients';
import { countingClient } from './helpers/counting-client';
import { rangeError } from '../../src/core/errors';

const rule = new Rule(4, 1e12);

describe.skipIf(!redisPort)('batching', () => {
  const redis = useIoredis();

  test('the calls of one tick go in one EVALSHA, at most 32 to a call; with batch: false, one each', async () => {
    const batched = countingClient(redis);
    const unbatched = countingClient(redis);
    const prefix = uniquePrefix('tick');
    const limiter = new RedisRateLimiter({ client: batched, algorithm: 'fixed-window', rule, onStoreError: 'deny', prefix });
    const single = new RedisRateLimiter({ client: unbatched, algorithm: 'fixed-window', rule, onStoreError: 'deny', prefix, batch: false });
    await limiter.tryAcquire('warm');
    await single.tryAcquire('warm');
    batched.sent.length = 0;
    unbatched.sent.length = 0;
    await Promise.all(Array.from({ length: 10 }, (_, i) => limiter.tryAcquire(`user-${i}`)));
    expect(batched.sent).toEqual(['EVALSHA']);
    await Promise.all(Array.from({ length: 100 }, (_, i) => limiter.tryAcquire(`user-${i}`)));
    expect(batched.sent).toHaveLength(1 + 4);
    await Promise.all(Array.from({ length: 10 }, (_, i) => single.tryAcquire(`other-${i}`)));
    expect(unbatched.sent).toHaveLength(10);
  });

  test('calls on one key in one batch decide in the order made, as one by one would', async () => {
    const limiter = new RedisRateLimiter({ client: redis, algorithm: 'sliding-window-log', rule, onStoreError: 'deny', prefix: uniquePrefix('order') });
    const decisions = await Promise.all([1, 2, 1, 1, 3].map((permits) => limiter.tryAcquire('k', permits)));
    expect(decisions.map(({ allowed, remaining }) => [allowed, remaining])).toEqual([
      [true, 3],
      [true, 1],
      [true, 0],
      [false, 0],
      [false, 0],
    ]);
  });

  test('a failed batch answers each of its calls by the policy, for its own key and permits, and reports each', async () => {
    const prefix = uniquePrefix('failed');
    // A key holding a list makes the script fail with WRONGTYPE, and with it the whole batch.
    await redis.rpush(`${prefix}token-bucket:4/1000:broken`, 'not a bucket');
    const errors: [unknown, string][] = [];
    const limiter = new RedisRateLimiter({
      client: redis,
      algorithm: 'token-bucket',
      rule: Rule.perSecond(4),
      onStoreError: 'allow',
      prefix,
      onError: (error, key) => errors.push([error, key]),
    });
    const decisions = await Promise.all([limiter.tryAcquire('healthy', 1), limiter.tryAcquire('broken', 3)]);
    expect(decisions).toStrictEqual([
      { allowed: true, limit: 4, remaining: 3, retryAfterMs: 0, resetAfterMs: 250, degraded: 'store-error' },
      { allowed: true, limit: 4, remaining: 1, retryAfterMs: 0, resetAfterMs: 750, degraded: 'store-error' },
    ]);
    const wrongType = expect.objectContaining({ message: expect.stringContaining('WRONGTYPE') });
    expect(errors).toEqual([
      [wrongType, 'healthy'],
      [wrongType, 'broken'],
    ]);
  });

  test('a batch that gets no answer times out as a whole: every call gets store-timeout within its bound', async () => {
    const errors: unknown[] = [];
    const limiter = new RedisRateLimiter({
      client: { evalsha: () => new Promise(() => {}), eval: () => new Promise(() => {}) },
      algorithm: 'token-bucket',
      rule,
      onStoreError: 'deny',
      timeoutMs: 50,
      onError: (error) => errors.push(error),
    });
    const started = performance.now();
    const decisions = await Promise.all(['a', 'b', 'a'].map((key) => limiter.tryAcquire(key)));
    expect(performance.now() - started).toBeGreaterThanOrEqual(49);
    expect(decisions.map((decision) => decision.degraded)).toEqual(['store-timeout', 'store-timeout', 'store-timeout']);
    expect(errors).toEqual([expect.any(RedisTimeoutError), expect.any(RedisTimeoutError), expect.any(RedisTimeoutError)]);
  });

  test('an adapter that throws instead of rejecting fails the batch, not the caller', async () => {
    const limiter = new RedisRateLimiter({
      client: {
        evalsha: () => {
          throw new Error('adapter bug');
        },
        eval: () => Promise.resolve(null),
      },
      algorithm: 'fixed-window',
      rule,
      onStoreError: 'deny',
    });
    const decisions = await Promise.all([limiter.tryAcquire('a'), limiter.tryAcquire('b')]);
    expect(decisions.map((decision) => decision.degraded)).toEqual(['store-error', 'store-error']);
  });

  test('a fallback limiter that throws fails its own call only', async () => {
    const fallback = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(2)) });
    const limiter = new RedisRateLimiter({
      client: { evalsha: () => Promise.reject(new Error('down')), eval: () => Promise.reject(new Error('down')) },
      algorithm: 'token-bucket',
      rule,
      onStoreError: fallback,
    });
    const [small, large] = await Promise.allSettled([limiter.tryAcquire('a', 1), limiter.tryAcquire('b', 3)]);
    expect(small).toMatchObject({ status: 'fulfilled', value: { allowed: true, degraded: 'store-error' } });
    expect(large).toMatchObject({ status: 'rejected', reason: rangeError('ratekeeper: `permits` must be an integer from 1 to 2, got 3') });
  });
});
