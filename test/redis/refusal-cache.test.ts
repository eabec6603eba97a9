// src/redis/refusal-cache.ts, through RedisRateLimiter with refusalCache on.
import { describe, expect, test } from 'vitest';
import { ManualClock, Rule } from '../../src/index';
import { RedisRateLimiter, type RedisRateLimiterOptions } from '../../src/redis';
import { useIoredis, redisPort, uniquePrefix } from './helpers/clients';
import { countingClient } from './helpers/counting-client';

describe.skipIf(!redisPort)('the refusal cache answers a refused key locally until its refusal ends', () => {
  const redis = useIoredis();

  function setup(refusalCache: NonNullable<RedisRateLimiterOptions['refusalCache']>, algorithm: RedisRateLimiterOptions['algorithm'] = 'token-bucket') {
    const clock = new ManualClock(1_000_000);
    const client = countingClient(redis);
    const prefix = uniquePrefix('refusals');
    const options = { algorithm, rule: new Rule(2, 10_000), onStoreError: 'deny', clock, prefix } as const;
    const cached = new RedisRateLimiter({ ...options, client, refusalCache });
    const uncached = new RedisRateLimiter({ ...options, client: redis });
    return { clock, sent: client.sent, cached, uncached, prefix };
  }

  test('until T no round trip, with the same retryAfterMs Redis would give; at T Redis decides again', async () => {
    const { clock, sent, cached, uncached } = setup(true);
    await cached.tryAcquire('k', 2);
    expect(await cached.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 5_000 });
    const trips = sent.length;
    for (const step of [1, 1_000, 3_998]) {
      clock.advance(step);
      const local = await cached.tryAcquire('k');
      expect(local).toStrictEqual(await uncached.tryAcquire('k'));
      expect(sent).toHaveLength(trips);
    }
    clock.advance(1);
    expect(await cached.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 0 });
    expect(sent).toHaveLength(trips + 1);
  });

  test('a request for as many permits or more is refused locally (a lower bound when larger); a smaller one asks Redis', async () => {
    const { clock, sent, cached, uncached } = setup(true, 'sliding-window-log');
    await cached.tryAcquire('k');
    clock.advance(1_000);
    await cached.tryAcquire('k');
    expect(await cached.tryAcquire('k', 2)).toMatchObject({ allowed: false, retryAfterMs: 10_000 });
    const trips = sent.length;
    expect(await cached.tryAcquire('k', 1)).toMatchObject({ allowed: false, retryAfterMs: 9_000 });
    expect(sent).toHaveLength(trips + 1);
    expect(await cached.tryAcquire('k', 1)).toStrictEqual(await uncached.tryAcquire('k', 1));
    expect(await cached.tryAcquire('k', 2)).toMatchObject({ allowed: false, retryAfterMs: 9_000 });
    expect(sent).toHaveLength(trips + 1);
  });

  test('the table is bounded: past maxKeys the oldest refusal is forgotten, which costs a round trip', async () => {
    const { sent, cached } = setup({ maxKeys: 1 });
    for (const key of ['a', 'b']) {
      await cached.tryAcquire(key, 2);
      await cached.tryAcquire(key);
    }
    const trips = sent.length;
    await cached.tryAcquire('b');
    expect(sent).toHaveLength(trips);
    await cached.tryAcquire('a');
    expect(sent).toHaveLength(trips + 1);
  });

  test("on the server's clock the local refusal ends no later than Redis's", async () => {
    const client = countingClient(redis);
    const limiter = new RedisRateLimiter({ client, algorithm: 'token-bucket', rule: new Rule(1, 300), onStoreError: 'deny', prefix: uniquePrefix('server-time'), refusalCache: true });
    await limiter.tryAcquire('k');
    const refused = await limiter.tryAcquire('k');
    expect(refused.allowed).toBe(false);
    const local = await limiter.tryAcquire('k');
    expect(local.allowed).toBe(false);
    expect(local.retryAfterMs).toBeLessThanOrEqual(refused.retryAfterMs);
    expect(client.sent).toHaveLength(2);
    await new Promise((resolve) => setTimeout(resolve, local.retryAfterMs + 20));
    expect(await limiter.tryAcquire('k')).toMatchObject({ allowed: true });
  });

  test('when Redis loses the key (FLUSHALL, DEL, a restart without persistence) the local refusal still lasts until T, never longer', async () => {
    const { clock, sent, cached, uncached, prefix } = setup(true);
    await cached.tryAcquire('k', 2);
    expect(await cached.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 5_000 });
    const trips = sent.length;
    // The data is gone, as after a FLUSHALL: a DEL of the key, so that the test files sharing this server keep theirs.
    expect(await redis.del(`${prefix}token-bucket:2/10000:k`)).toBe(1);
    clock.advance(4_999);
    // Redis would start the key over; this server keeps the refusal it was given, to its end.
    expect(await uncached.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 1 });
    expect(await cached.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 1 });
    expect(sent).toHaveLength(trips);
    clock.advance(1);
    expect(await cached.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 0 });
  });
});
