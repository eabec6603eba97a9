// src/redis/outage-policy.ts and timeout.ts, through RedisRateLimiter: what answers while Redis fails, freezes or restarts.
import type { Redis } from 'ioredis';
import { describe, expect, test, vi } from 'vitest';
import { type Decision, KeyedRateLimiter, Rule, TokenBucket } from '../../src/index';
import { type RedisClientLike, RedisRateLimiter, type RedisRateLimiterOptions, RedisTimeoutError } from '../../src/redis';
import { ioredisClient, useIoredis, nodeRedisClient, redisPort, uniquePrefix } from './helpers/clients';
import { freePort, startRedisServer } from './helpers/redis-server';

const rule = Rule.perSecond(4);

/** A limiter whose one key, 'k', is broken on the shared server: it holds a list, so the script fails with WRONGTYPE. */
async function brokenKey(client: Redis, options: Partial<RedisRateLimiterOptions>) {
  const prefix = uniquePrefix('outage');
  await client.rpush(`${prefix}token-bucket:4/1000:k`, 'not a bucket');
  const errors: unknown[] = [];
  const limiter = new RedisRateLimiter({
    client,
    algorithm: 'token-bucket',
    rule,
    onStoreError: 'deny',
    prefix,
    onError: (error, key) => errors.push([error, key]),
    ...options,
  });
  return { limiter, errors };
}

/** Calls until Redis answers normally again, for at most `ms`. */
async function recovered(limiter: RedisRateLimiter, ms: number): Promise<Decision> {
  const deadline = Date.now() + ms;
  for (;;) {
    const decision = await limiter.tryAcquire('k');
    if (decision.degraded === undefined || Date.now() > deadline) return decision;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe.skipIf(!redisPort)('when Redis fails, the outage policy answers, marked degraded', () => {
  const client = useIoredis();

  test("'allow' answers as a key never used would, marked store-error, and onError hears the cause", async () => {
    const { limiter, errors } = await brokenKey(client, { onStoreError: 'allow' });
    expect(await limiter.tryAcquire('k', 2)).toStrictEqual({ allowed: true, limit: 4, remaining: 2, retryAfterMs: 0, resetAfterMs: 500, degraded: 'store-error' });
    expect(errors).toHaveLength(1);
    expect(errors[0]).toEqual([expect.objectContaining({ message: expect.stringContaining('WRONGTYPE') }), 'k']);
  });

  test("'deny' answers as an exhausted token bucket would: retry when the rule has earned the permits", async () => {
    const { limiter } = await brokenKey(client, { onStoreError: 'deny' });
    expect(await limiter.tryAcquire('k', 3)).toStrictEqual({ allowed: false, limit: 4, remaining: 0, retryAfterMs: 750, resetAfterMs: 1000, degraded: 'store-error' });
  });

  test('a fallback RateLimiter decides, and its decision is marked', async () => {
    const fallback = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(1)) });
    const { limiter } = await brokenKey(client, { onStoreError: fallback });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, limit: 1, remaining: 0, degraded: 'store-error' });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false, limit: 1, degraded: 'store-error' });
  });

  test('an onError that throws changes nothing', async () => {
    const { limiter } = await brokenKey(client, { onStoreError: 'allow', onError: () => { throw new Error('hook bug'); } });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, degraded: 'store-error' });
  });

  test('onError always hears an Error: a client failing with anything else has it wrapped as the cause', async () => {
    const errors: Error[] = [];
    const limiter = new RedisRateLimiter({
      client: { evalsha: () => Promise.reject('ECONNREFUSED'), eval: () => Promise.reject('ECONNREFUSED') },
      algorithm: 'fixed-window',
      rule,
      onStoreError: 'allow',
      onError: (error) => errors.push(error),
    });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, degraded: 'store-error' });
    expect(errors[0]?.message).toBe('ratekeeper: the Redis client failed with ECONNREFUSED');
    expect(errors[0]?.cause).toBe('ECONNREFUSED');
  });

  test('a reply that is not a decision is a store error', async () => {
    const errors: unknown[] = [];
    const limiter = new RedisRateLimiter({
      // A real adapter, wired wrongly: it runs GET instead of the script.
      client: { evalsha: (_sha1, keys) => client.get(keys[0]!), eval: (_script, keys) => client.get(keys[0]!) },
      algorithm: 'fixed-window',
      rule,
      onStoreError: 'deny',
      onError: (error) => errors.push(error),
    });
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: false, degraded: 'store-error' });
    expect(String(errors[0])).toBe('Error: ratekeeper: unexpected reply from Redis: null');
  });
});

describe.skipIf(!redisPort)('a server that freezes, dies or restarts', () => {
  const clientsFor = async (port: number, offlineQueue: boolean): Promise<[string, RedisClientLike, () => Promise<unknown>][]> => {
    const io = ioredisClient(port, { enableOfflineQueue: offlineQueue });
    const nodeRedis = await nodeRedisClient(port, { disableOfflineQueue: !offlineQueue });
    return [
      ['ioredis', io, async () => io.disconnect()],
      ['node-redis', nodeRedis, async () => nodeRedis.destroy()],
    ];
  };

  test('a client that queues commands while offline, retrying forever, cannot hang a caller: each call is bounded from its own start', async () => {
    const offline = ioredisClient(await freePort(), { maxRetriesPerRequest: null });
    // Timers and performance.now() under the test's hand: each answer's moment is exact, whatever the
    // machine's load (a wall-clock bound here once failed under load).
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    try {
      const limiter = new RedisRateLimiter({ client: offline, algorithm: 'token-bucket', rule, onStoreError: 'allow', timeoutMs: 100 });
      const calls: Promise<{ decision: Decision; startedAt: number; answeredAt: number }>[] = [];
      const origin = performance.now();
      // Calls starting at different moments share one timer; each still gets its own 100 ms.
      for (const at of [0, 0, 30, 60, 90, 150]) {
        await vi.advanceTimersByTimeAsync(origin + at - performance.now());
        const startedAt = performance.now();
        calls.push(limiter.tryAcquire('k').then((decision) => ({ decision, startedAt, answeredAt: performance.now() })));
      }
      await vi.advanceTimersByTimeAsync(200);
      for (const { decision, startedAt, answeredAt } of await Promise.all(calls)) {
        expect(decision).toMatchObject({ allowed: true, degraded: 'store-timeout' });
        expect(answeredAt - startedAt).toBe(100);
      }
    } finally {
      vi.useRealTimers();
      // Rejects the queued commands long after their callers were answered; that must stay unnoticed.
      offline.disconnect();
    }
  });

  test('frozen (SIGSTOP): the policy answers within timeoutMs, marked store-timeout; service resumes after SIGCONT', { timeout: 20_000 }, async () => {
    const server = await startRedisServer();
    const clients = await clientsFor(server.port, true);
    try {
      for (const [name, client] of clients) {
        const errors: unknown[] = [];
        const limiter = new RedisRateLimiter({ client, algorithm: 'sliding-window-log', rule, onStoreError: 'deny', timeoutMs: 200, onError: (error) => errors.push(error), prefix: uniquePrefix(name) });
        expect((await limiter.tryAcquire('k')).degraded).toBeUndefined();
        server.process.kill('SIGSTOP');
        // The server answers nothing now, so only the timeout can: on fake timers, exactly at 200 ms.
        vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
        let decision: Decision | undefined;
        const startedAt = performance.now();
        const answeredAfter = limiter.tryAcquire('k').then((answer) => {
          decision = answer;
          return performance.now() - startedAt;
        });
        await vi.advanceTimersByTimeAsync(199);
        expect(decision).toBeUndefined();
        await vi.advanceTimersByTimeAsync(1);
        expect(await answeredAfter).toBe(200);
        vi.useRealTimers();
        expect(decision).toMatchObject({ allowed: false, degraded: 'store-timeout' });
        expect(errors).toEqual([expect.any(RedisTimeoutError)]);
        expect((errors[0] as RedisTimeoutError).timeoutMs).toBe(200);
        server.process.kill('SIGCONT');
        // The call that timed out had already been sent, and Redis ran it on waking: a late run can
        // only spend a permit, never grant one, so the limit still holds.
        expect(await recovered(limiter, 5_000)).toMatchObject({ allowed: true, remaining: 1 });
      }
    } finally {
      vi.useRealTimers();
      server.process.kill('SIGCONT');
      await Promise.all(clients.map(([, , close]) => close()));
      await server.stop();
    }
  });

  test('killed, then restarted on the same port: degraded meanwhile, exact again after (the script is sent anew)', { timeout: 30_000 }, async () => {
    let server = await startRedisServer();
    const { port } = server;
    // Without an offline queue, as docs/redis.md advises, no call made during the outage runs later.
    const clients = await clientsFor(port, false);
    try {
      const limiters = clients.map(([name, client]) => new RedisRateLimiter({ client, algorithm: 'fixed-window', rule: new Rule(3, 1e12), onStoreError: 'allow', timeoutMs: 300, prefix: uniquePrefix(name) }));
      for (const limiter of limiters) expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 2 });
      await server.stop();
      for (const limiter of limiters) {
        // Answered (by the client's error, or by the 300 ms timeout if the client had not yet seen
        // the socket close), not left hanging. The bound is many times timeoutMs on purpose: it
        // catches a hang, never a slow machine; fake timers would also freeze the clients' reconnects.
        const started = performance.now();
        const decision = await limiter.tryAcquire('k');
        expect(performance.now() - started).toBeLessThan(5_000);
        expect(decision).toMatchObject({ allowed: true, remaining: 2 });
        expect(['store-error', 'store-timeout']).toContain(decision.degraded);
      }
      server = await startRedisServer({ port });
      // The data died with the server (no persistence), so the count starts over.
      for (const limiter of limiters) expect(await recovered(limiter, 10_000)).toStrictEqual({ allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetAfterMs: expect.any(Number) });
    } finally {
      await Promise.all(clients.map(([, , close]) => close()));
      await server.stop();
    }
  });
});
