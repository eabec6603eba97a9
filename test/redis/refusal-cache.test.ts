// src/redis/refusal-cache.ts, through RedisRateLimiter with refusalCache on.
import type { Redis } from 'ioredis';
import { describe, expect, test } from 'vitest';
import { ManualClock, Rule } from '../../src/index';
import { RedisRateLimiter, type RedisRateLimiterOptions } from '../../src/redis';
import { useBothClients, useIoredis, redisPort, uniquePrefix } from './helpers/clients';
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
    const { clock, sent, cached, uncached } = setup({ maxMs: 10_000 });
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
    const { clock, sent, cached, uncached, prefix } = setup({ maxMs: 10_000 });
    await cached.tryAcquire('k', 2);
    expect(await cached.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 5_000 });
    const trips = sent.length;
    // The data is gone, as after a FLUSHALL: a DEL of the key, so that the test files sharing this server keep theirs.
    expect(await redis.del(`${prefix}token-bucket:k`)).toBe(1);
    clock.advance(4_999);
    // Redis would start the key over; this server keeps the refusal it was given, to its end.
    expect(await uncached.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 1 });
    expect(await cached.tryAcquire('k')).toMatchObject({ allowed: false, retryAfterMs: 1 });
    expect(sent).toHaveLength(trips);
    clock.advance(1);
    expect(await cached.tryAcquire('k')).toMatchObject({ allowed: true, remaining: 0 });
  });
});

// Issue 23, item 18: server B blocks alice for a day, A caches the refusal, B resets alice: B allows,
// and A refused for the whole day. A cached refusal now outlives a change made elsewhere by at most
// `maxMs` (1000 by default), counted on the limiter's clock from when the refused call left.
describe.skipIf(!redisPort)('a change made on another server ends a cached refusal within maxMs', () => {
  const clients = useBothClients();
  const DAY = 86_400_000;

  /** Server A (ioredis, refusal cache on, its round trips counted) and server B (node-redis), sharing keys. */
  function servers(refusalCache: NonNullable<RedisRateLimiterOptions['refusalCache']>) {
    const clock = new ManualClock(1_000_000);
    const options = { algorithm: 'token-bucket', rule: new Rule(2, 10_000), onStoreError: 'deny', clock, prefix: uniquePrefix('elsewhere') } as const;
    const client = countingClient(clients.ioredis as Redis);
    const a = new RedisRateLimiter({ ...options, client, refusalCache });
    const b = new RedisRateLimiter({ ...options, client: clients['node-redis'] });
    return { clock, sent: client.sent, a, b };
  }

  test('a block lifted by a reset elsewhere: A allows once 1000 ms have passed, not after a day', async () => {
    const { clock, sent, a, b } = servers(true);
    await b.block('alice', DAY);
    expect(await a.tryAcquire('alice')).toMatchObject({ allowed: false, retryAfterMs: DAY });
    await b.reset('alice');
    expect(await b.peek('alice', 0)).toMatchObject({ allowed: true, remaining: 2 });
    clock.advance(999);
    const trips = sent.length;
    expect(await a.tryAcquire('alice')).toMatchObject({ allowed: false, retryAfterMs: DAY - 999 });
    expect(sent).toHaveLength(trips);
    clock.advance(1);
    expect(await a.tryAcquire('alice')).toMatchObject({ allowed: true, remaining: 1 });
  });

  test('a refund elsewhere: A allows once maxMs has passed', async () => {
    const { clock, a, b } = servers({ maxMs: 250 });
    const reservation = await b.reserve('bob', 2);
    expect(reservation.decision.allowed).toBe(true);
    expect(await a.tryAcquire('bob')).toMatchObject({ allowed: false, retryAfterMs: 5_000 });
    await reservation.cancel();
    clock.advance(249);
    expect(await a.tryAcquire('bob')).toMatchObject({ allowed: false, retryAfterMs: 4_751 });
    clock.advance(1);
    expect(await a.tryAcquire('bob')).toMatchObject({ allowed: true, remaining: 1 });
  });

  test('a clock read behind the refused call asks Redis again', async () => {
    const { clock, sent, a, b } = servers(true);
    await b.block('carol', DAY);
    await a.tryAcquire('carol');
    await b.reset('carol');
    clock.set(1_000_000 - 1);
    const trips = sent.length;
    expect(await a.tryAcquire('carol')).toMatchObject({ allowed: true });
    expect(sent).toHaveLength(trips + 1);
  });
});
