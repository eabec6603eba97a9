// acquire over Redis: the waiting machinery of the keyed limiter, with Redis deciding.
import { describe, expect, test } from 'vitest';
import { ManualScheduler, Rule } from '../../src/index';
import { RedisRateLimiter } from '../../src/redis';
import { ioredisClient, nodeRedisClient, useIoredis, redisPort, uniquePrefix } from './helpers/clients';

describe.skipIf(!redisPort)('acquire over Redis', () => {
  const redis = useIoredis();

  test('grants waiters first in first out, each at the exact time its permit exists (manual time)', async () => {
    const scheduler = new ManualScheduler(1_000_000);
    const limiter = new RedisRateLimiter({ client: redis, algorithm: 'token-bucket', rule: new Rule(2, 1000), onStoreError: 'deny', clock: scheduler, prefix: uniquePrefix('wait') });
    const grantedAt: [number, number][] = [];
    const waits = [0, 1, 2, 3, 4].map(async (i) => {
      const decision = await limiter.acquire('k');
      grantedAt.push([i, scheduler.now()]);
      return decision;
    });
    // Let Redis answer in real time while the manual clock stands still, then move to the next timer:
    // the queue has settled once its head is parked on a timer of the manual clock (or all are granted).
    // Polling for that state, not sleeping a fixed time, keeps the test exact on a loaded machine.
    const settle = async () => {
      while (scheduler.pending === 0 && grantedAt.length < 5) await new Promise((resolve) => setTimeout(resolve, 5));
    };
    for (let step = 0; step < 10 && grantedAt.length < 5; step++) {
      await settle();
      scheduler.advance(500);
    }
    expect(grantedAt).toEqual([
      [0, 1_000_000],
      [1, 1_000_000],
      [2, 1_000_500],
      [3, 1_001_000],
      [4, 1_001_500],
    ]);
    for (const decision of await Promise.all(waits)) expect(decision.allowed).toBe(true);
  });

  test('resolves at once with the refusal when the wait would exceed maxWaitMs, and an abort spends nothing', async () => {
    const limiter = new RedisRateLimiter({ client: redis, algorithm: 'sliding-window-log', rule: new Rule(1, 60_000), onStoreError: 'deny', prefix: uniquePrefix('wait') });
    expect(await limiter.acquire('k')).toMatchObject({ allowed: true });
    expect(await limiter.acquire('k', 1, { maxWaitMs: 1000 })).toMatchObject({ allowed: false, remaining: 0 });
    const controller = new AbortController();
    const aborted = limiter.acquire('other', 1).then(() => limiter.acquire('other', 1, { signal: controller.signal }));
    setTimeout(() => controller.abort(new Error('gave up')), 20);
    await expect(aborted).rejects.toThrow('gave up');
    expect(await limiter.tryAcquire('third')).toMatchObject({ allowed: true });
  });

  test('close() rejects every waiter with ERR_RATEKEEPER_CLOSED and clears its timer; tryAcquire keeps answering', async () => {
    const scheduler = new ManualScheduler(1_000_000);
    const limiter = new RedisRateLimiter({ client: redis, algorithm: 'fixed-window', rule: new Rule(1, 60_000), onStoreError: 'deny', clock: scheduler, prefix: uniquePrefix('close') });
    expect(await limiter.acquire('k')).toMatchObject({ allowed: true });
    const waiting = limiter.acquire('k');
    for (let i = 0; i < 50 && scheduler.pending === 0; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    expect(scheduler.pending).toBe(1);
    limiter.close();
    await expect(waiting).rejects.toMatchObject({ name: 'ClosedError', code: 'ERR_RATEKEEPER_CLOSED' });
    expect(scheduler.pending).toBe(0);
    await expect(limiter.acquire('other')).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_CLOSED' });
    expect(await limiter.tryAcquire('other')).toMatchObject({ allowed: true });
  });

  test.each(['ioredis', 'node-redis'] as const)(
    "a wait never outlives the store: with 'deny' and a %s client that has quit, waiters reject instead of retrying for ever",
    async (name) => {
      const client = name === 'ioredis' ? ioredisClient() : await nodeRedisClient();
      const errors: unknown[] = [];
      const limiter = new RedisRateLimiter({
        client,
        algorithm: 'token-bucket',
        rule: new Rule(1, 200),
        onStoreError: 'deny',
        onError: (error) => errors.push(error),
        prefix: uniquePrefix('quit'),
      });
      expect(await limiter.acquire('k')).toMatchObject({ allowed: true });
      const waiting = limiter.acquire('k').catch((error: unknown) => error); // waits about 200 ms for the next permit
      await client.quit();
      expect(await waiting).toMatchObject({ name: 'ClosedError', code: 'ERR_RATEKEEPER_CLOSED' });
      // A wait begun after the quit ends at its first try.
      await expect(limiter.acquire('later')).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_CLOSED' });
      const heard = errors.length;
      await new Promise((resolve) => setTimeout(resolve, 600));
      expect(errors.length).toBe(heard); // nothing is tried again behind the caller's back
    },
  );
});
