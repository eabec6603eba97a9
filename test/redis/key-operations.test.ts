// src/redis/key-operations.ts, AsyncKeyReservation (src/limiter/reservation.ts) and the scripts' OPERATIONS: the laws of
// API.md "Managing keys and settling costs" over a real Redis, on both clients, checked on the keys
// themselves (EXISTS, PTTL) and against twins (a second key driven the same way without the
// operation). That every operation decides as the in-memory twin is the store conformance suite's
// "accounting operations" section (test/stores/conformance.ts).
import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { type Decision, KeyedRateLimiter, ManualClock, ManualScheduler, Rule, TokenBucket } from '../../src/index';
import { type RedisAlgorithm, type RedisClientLike, RedisRateLimiter } from '../../src/redis';
import { algorithmNames, twins } from './helpers/algorithms';
import { ioredisClient, redisPort, uniquePrefix, useBothClients, useIoredis } from './helpers/clients';

const rules = fc.record({ limit: fc.integer({ min: 1, max: 20 }), windowMs: fc.integer({ min: 20_000, max: 200_000 }) }).map(({ limit, windowMs }) => new Rule(limit, windowMs));

interface Step {
  readonly moveMs: number;
  readonly kind: 'acquire' | 'charge' | 'block' | 'reserve';
  readonly share: number;
}

const steps = fc.array(
  fc.record({
    moveMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 5_000 }), fc.integer({ min: 0, max: 300_000 })),
    kind: fc.constantFrom('acquire' as const, 'acquire' as const, 'charge' as const, 'block' as const, 'reserve' as const),
    share: fc.double({ min: 0, max: 1, noNaN: true }),
  }),
  { maxLength: 20, size: 'max' },
);

const permitsOf = (rule: Rule, share: number) => 1 + Math.floor(share * (rule.limit - 1));

/** Drives `keys` of `limiter` alike through `history` (blocks last 10 s to 10 min; reservations stay unsettled). */
async function drive(limiter: RedisRateLimiter, clock: ManualClock, rule: Rule, history: readonly Step[], keys: readonly string[]): Promise<void> {
  for (const { moveMs, kind, share } of history) {
    clock.advance(moveMs);
    for (const key of keys) {
      if (kind === 'acquire') await limiter.tryAcquire(key, permitsOf(rule, share));
      else if (kind === 'charge') await limiter.charge(key, 1 + Math.floor(share * 3 * rule.limit));
      else if (kind === 'block') await limiter.block(key, 10_000 + Math.floor(share * 590_000));
      else await limiter.reserve(key, permitsOf(rule, share));
    }
  }
}

describe.skipIf(!redisPort)('key operations over Redis', () => {
  const clients = useBothClients();
  const redis = useIoredis();
  const limiterOn = (client: RedisClientLike, algorithm: RedisAlgorithm, rule: Rule, clock: ManualClock) =>
    new RedisRateLimiter({ client, algorithm, rule, onStoreError: 'deny', clock, prefix: uniquePrefix('ops'), timeoutMs: 5_000 });
  const redisKey = (limiter: RedisRateLimiter, key: string) => {
    const { prefix, algorithm } = limiter.toJSON();
    return `${prefix}${algorithm}:${key}`;
  };

  for (const clientName of ['ioredis', 'node-redis'] as const) {
    describe(clientName, () => {
      for (const algorithm of algorithmNames) {
        test.prop([rules, steps, fc.integer({ min: 0, max: 20 })], { numRuns: 25 })(`${algorithm}: peek creates nothing and changes nothing`, async (rule, history, asked) => {
          const clock = new ManualClock(1_700_000_000_000);
          const limiter = limiterOn(clients[clientName], algorithm, rule, clock);
          const permits = asked % (rule.limit + 1);
          await limiter.peek('never-seen', permits);
          expect(await redis.exists(redisKey(limiter, 'never-seen'))).toBe(0);
          await drive(limiter, clock, rule, history, ['k']);
          const key = redisKey(limiter, 'k');
          const before = [await redis.dump(key), await redis.pttl(key)];
          await limiter.peek('k', permits);
          const after = [await redis.dump(key), await redis.pttl(key)];
          expect(after[0]).toEqual(before[0]);
          expect(after[1]).toBeLessThanOrEqual(before[1] as number);
        });

        test.prop([rules, steps], { numRuns: 25 })(`${algorithm}: every key written carries an expiry that covers its debt and its block`, async (rule, history) => {
          const clock = new ManualClock(1_700_000_000_000);
          const limiter = limiterOn(clients[clientName], algorithm, rule, clock);
          for (const step of history) {
            await drive(limiter, clock, rule, [step], ['k']);
            const ttl = await redis.pttl(redisKey(limiter, 'k'));
            const { resetAfterMs } = await limiter.peek('k', 0);
            if (ttl === -2) {
              // Only a key that is as new may be gone.
              expect(resetAfterMs).toBe(0);
              continue;
            }
            // resetAfterMs includes the debt and the block; real time moves a little meanwhile.
            expect(ttl).toBeGreaterThanOrEqual(resetAfterMs - 1_000);
          }
        });

        test.prop([rules, steps, fc.integer({ min: 1, max: 20 }), steps], { numRuns: 25 })(
          `${algorithm}: a reservation cancelled at the reading of its grant leaves every later decision as if never reserved`,
          async (rule, history, asked, probes) => {
            const clock = new ManualClock(1_700_000_000_000);
            const limiter = limiterOn(clients[clientName], algorithm, rule, clock);
            await drive(limiter, clock, rule, history, ['reserved', 'twin']);
            const reservation = await limiter.reserve('reserved', 1 + (asked % rule.limit));
            await reservation.cancel();
            for (const probe of probes) {
              clock.advance(probe.moveMs);
              const permits = permitsOf(rule, probe.share);
              expect(await limiter.tryAcquire('reserved', permits)).toStrictEqual(await limiter.tryAcquire('twin', permits));
            }
          },
        );

        test.prop([rules, steps, fc.integer({ min: 1, max: 20 }), steps, fc.integer({ min: 1, max: 60 }), fc.integer({ min: 0, max: 40 }), fc.array(fc.integer({ min: 0, max: 100_000 }), { maxLength: 4 })], {
          numRuns: 25,
        })(
          `${algorithm}: settled later, with time and other grants between, a reservation never leaves the key better off than a twin given the same grants`,
          async (rule, history, asked, meanwhile, extra, actual, pauses) => {
            const clock = new ManualClock(1_700_000_000_000);
            const limiter = limiterOn(clients[clientName], algorithm, rule, clock);
            await drive(limiter, clock, rule, history, ['reserved', 'twin']);
            const permits = 1 + (asked % rule.limit);
            const reservation = await limiter.reserve('reserved', permits);
            // Other activity: the twin is charged exactly what the reserved key granted, then both one
            // charge of at most the limit (so that neither reaches the debt bound, where forgiving differs).
            for (const { moveMs, share } of meanwhile) {
              clock.advance(moveMs);
              const q = permitsOf(rule, share);
              if ((await limiter.tryAcquire('reserved', q)).allowed) await limiter.charge('twin', q);
            }
            await limiter.charge('reserved', 1 + (extra % rule.limit));
            await limiter.charge('twin', 1 + (extra % rule.limit));
            await reservation.settle(actual % permits);
            for (const pause of [0, ...pauses]) {
              clock.advance(pause);
              for (let n = 1; n <= Math.min(rule.limit, 8); n++) {
                const [reserved, twin] = [await limiter.peek('reserved', n), await limiter.peek('twin', n)];
                if (twin.allowed) {
                  if (reserved.allowed) expect(reserved.remaining).toBeLessThanOrEqual(twin.remaining);
                } else {
                  expect(reserved.allowed).toBe(false);
                  expect(reserved.retryAfterMs).toBeGreaterThanOrEqual(twin.retryAfterMs);
                }
              }
            }
          },
        );
      }
    });
  }

  test.each(algorithmNames)('%s: a refund after a reset gives nothing back, and a reservation settles once', async (algorithm) => {
    const clock = new ManualClock(1_700_000_000_000);
    const limiter = limiterOn(redis, algorithm, new Rule(10, 60_000), clock);
    const reservation = await limiter.reserve('k', 6);
    await limiter.reset('k');
    expect(await limiter.tryAcquire('k', 10)).toMatchObject({ allowed: true, remaining: 0 });
    expect(await reservation.settle(0)).toMatchObject({ allowed: true, remaining: 0 });
    await expect(reservation.settle(0)).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_ALREADY_SETTLED' });
    await expect(reservation.cancel()).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_ALREADY_SETTLED' });
    expect(await limiter.peek('k', 0)).toMatchObject({ remaining: 0 });
  });

  test.each(algorithmNames)('%s: bad arguments reject as in memory, and send nothing', async (algorithm) => {
    const limiter = new RedisRateLimiter({ client: redis, algorithm, rule: new Rule(10, 60_000), onStoreError: 'deny', prefix: uniquePrefix('bad') });
    const memory = new KeyedRateLimiter({ algorithm: () => new twins[algorithm](new Rule(10, 60_000)) });
    const same = async (inRedis: () => Promise<unknown>, inMemory: () => unknown) => {
      let thrown: unknown;
      try {
        inMemory();
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(Error);
      await expect(inRedis()).rejects.toStrictEqual(thrown);
    };
    await same(() => limiter.block('k', Infinity), () => memory.block('k', Infinity));
    await same(() => limiter.block('k', 2 ** 42 + 1), () => memory.block('k', 2 ** 42 + 1));
    await same(() => limiter.block('k', -1), () => memory.block('k', -1));
    await same(() => limiter.charge('k', 0), () => memory.charge('k', 0));
    await same(() => limiter.charge('k', 2 ** 53), () => memory.charge('k', 2 ** 53));
    await same(() => limiter.peek('k', 11), () => memory.peek('k', 11));
    await same(() => limiter.peek('k', -1), () => memory.peek('k', -1));
    await same(() => limiter.reserve('k', 0), () => memory.reserve('k', 0));
    await same(() => limiter.reset(7 as unknown as string), () => memory.reset(7 as unknown as string));
    const reservation = await limiter.reserve('k', 2);
    await same(() => reservation.settle(-1), () => memory.reserve('k', 2).settle(-1));
    await same(() => reservation.settle(0.5), () => memory.reserve('k', 2).settle(0.5));
    expect(await redis.exists(`${limiter.toJSON().prefix}${algorithm}:k`)).toBe(1);
  });

  test('a limit of 2^53 - 1, a charge of 2^53 - 1, a block of 2^42 ms and fractional readings decide as in memory', async () => {
    for (const algorithm of algorithmNames) {
      const rule = new Rule(Number.MAX_SAFE_INTEGER, 1000);
      const clock = new ManualClock(1_700_000_000_000.25);
      const memory = new KeyedRateLimiter({ algorithm: () => new twins[algorithm](rule), clock });
      const limiter = limiterOn(redis, algorithm, rule, clock);
      // The same answer, or the same error (a bucket this wide keeps no debt, in memory as over Redis).
      const both = async (inRedis: () => Promise<unknown>, inMemory: () => unknown) => {
        let expected: unknown;
        try {
          expected = inMemory();
        } catch (error) {
          await expect(inRedis()).rejects.toStrictEqual(error);
          return;
        }
        expect(await inRedis()).toStrictEqual(expected);
      };
      await both(() => limiter.tryAcquire('k', 2 ** 52 + 1), () => memory.tryAcquire('k', 2 ** 52 + 1));
      clock.advance(0.5);
      await both(() => limiter.charge('k', Number.MAX_SAFE_INTEGER), () => memory.charge('k', Number.MAX_SAFE_INTEGER));
      await both(() => limiter.peek('k', 0), () => memory.peek('k', 0));
      clock.advance(333.125);
      await both(() => limiter.peek('k', 3), () => memory.peek('k', 3));
      await both(() => limiter.block('k', 2 ** 42), () => memory.block('k', 2 ** 42));
      await both(() => limiter.tryAcquire('k'), () => memory.tryAcquire('k'));
      await both(() => limiter.peek('k', 0), () => memory.peek('k', 0));
      const ttl = await redis.pttl(redisKey(limiter, 'k'));
      expect(ttl).toBeGreaterThan(2 ** 42 - 60_000);
    }
  });

  describe('a key holding a foreign value fails that key alone, with a clear error, never a wrong decision', () => {
    const doubles = (...values: number[]) => {
      const bytes = Buffer.alloc(8 * values.length);
      values.forEach((value, i) => bytes.writeDoubleLE(value, 8 * i));
      return bytes;
    };
    const stringAlgorithms = algorithmNames.filter((name) => name !== 'sliding-window-log');
    // A state under rule limit/60000 with nothing counted, then the given tail, of the algorithm the key names.
    const stateOf = (key: string, limit: number, tail: number[]) => {
      const body = key.includes('-bucket:') ? [limit * 12_000, 0, 0] : key.includes('fixed-window:') ? [0, 0] : [0, 0, 0, 0];
      return doubles(limit, limit === 0 ? 0 : 60_000, 0, ...body, ...tail);
    };
    const foreign: [string, (key: string) => Promise<unknown>, RedisAlgorithm[]?][] = [
      ['a list', (key) => redis.rpush(key, 'x')],
      ['a hash', (key) => redis.hset(key, 'f', 'v')],
      ['a short string', (key) => redis.set(key, 'hello')],
      // The sizes of the states, holding what no state of ours holds.
      ['40 bytes of text', (key) => redis.set(key, 'x'.repeat(40))],
      ['48 bytes of NaN', (key) => redis.set(key, Buffer.alloc(48, 0xff))],
      ['24 bytes of text', (key) => redis.set(key, 'y'.repeat(24))],
      ['16 bytes', (key) => redis.set(key, Buffer.alloc(16)), algorithmNames.filter((name) => name !== 'sliding-window-log')],
      // States of the right sizes (rule 5/60000, an expiry time, the counts) holding what no state holds.
      ['a bucket counted at an infinite time', (key) => redis.set(key, doubles(5, 60_000, 0, 60_000, 0, Infinity)), ['token-bucket', 'leaky-bucket']],
      ['a bucket fuller than its rule allows', (key) => redis.set(key, doubles(5, 60_000, 0, 60_001, 0, 0)), ['token-bucket', 'leaky-bucket']],
      ['a window at infinity', (key) => redis.set(key, doubles(5, 60_000, 0, Infinity, 1)), ['fixed-window']],
      ['a counter at infinity', (key) => redis.set(key, doubles(5, 60_000, 0, Infinity, 0, 1, 0)), ['sliding-window-counter']],
      ['a state under a rule no Rule has (window 0)', (key) => redis.set(key, stateOf(key, 0, [])), stringAlgorithms],
      ['a block that is NaN', (key) => redis.set(key, stateOf(key, 5, [NaN])), stringAlgorithms],
      ['a receipt whose id is not whole', (key) => redis.set(key, stateOf(key, 5, [-Infinity, 1.5, 0, 0])), stringAlgorithms],
      ['a tail of four doubles', (key) => redis.set(key, stateOf(key, 5, [-Infinity, 1, 0, 0, 0])), stringAlgorithms],
      ['a sorted set of foreign members', (key) => redis.zadd(key, 1, 'member')],
      ['a log whose rule member names no rule', (key) => redis.zadd(key, '-inf', 'r5/0'), ['sliding-window-log']],
    ];
    for (const [name, write, algorithms = algorithmNames] of foreign) {
      test.each(algorithms)(`%s: ${name}`, async (algorithm) => {
        const errors: unknown[] = [];
        const limiter = new RedisRateLimiter({ client: redis, algorithm, rule: new Rule(5, 60_000), onStoreError: 'deny', prefix: uniquePrefix('foreign'), onError: (error) => errors.push(error) });
        await write(redisKey(limiter, 'bad'));
        // A batch with the foreign key in it: the others decide normally.
        const batch = await Promise.all([limiter.tryAcquire('good'), limiter.tryAcquire('bad'), limiter.tryAcquire('good')]);
        expect(batch[0]).toMatchObject({ allowed: true, remaining: 4 });
        expect(batch[2]).toMatchObject({ allowed: true, remaining: 3 });
        expect(batch[1]).toMatchObject({ allowed: false, degraded: 'store-error' });
        expect(await limiter.peek('bad')).toMatchObject({ allowed: false, degraded: 'store-error' });
        const reservation = await limiter.reserve('bad');
        expect(reservation.decision).toMatchObject({ allowed: false, degraded: 'store-error' });
        for (const failing of [limiter.charge('bad', 1), limiter.block('bad', 1000)]) {
          await expect(failing).rejects.toThrow(/ratekeeper: (Redis failed on this key|unexpected reply from Redis)/);
        }
        expect(errors.length).toBeGreaterThanOrEqual(3);
        for (const error of errors) expect(String(error)).toMatch(/WRONGTYPE|not a state of this algorithm|not a sliding-window-log key/);
      });
    }
  });

  describe('waiting honours blocks and wakes on a reset or a refund', () => {
    const settled = async (scheduler: ManualScheduler, done: () => boolean) => {
      for (let i = 0; i < 200 && scheduler.pending === 0 && !done(); i++) await new Promise((resolve) => setTimeout(resolve, 5));
    };

    test.each(algorithmNames)('%s: acquire waits out a block, to the millisecond', async (algorithm) => {
      const scheduler = new ManualScheduler(1_700_000_000_000);
      const limiter = new RedisRateLimiter({ client: redis, algorithm, rule: new Rule(5, 60_000), onStoreError: 'deny', clock: scheduler, prefix: uniquePrefix('wait-block') });
      await limiter.block('k', 30_000);
      let granted: number | undefined;
      const waiting = limiter.acquire('k').then((decision) => ((granted = scheduler.now()), decision));
      await settled(scheduler, () => granted !== undefined);
      scheduler.advance(29_999);
      await settled(scheduler, () => granted !== undefined);
      expect(granted).toBeUndefined();
      scheduler.advance(1);
      expect(await waiting).toMatchObject({ allowed: true });
      expect(granted).toBe(1_700_000_030_000);
    });

    test.each(algorithmNames)('%s: a reset, and a refund, through this limiter wake the waiters on that key at once', async (algorithm) => {
      const scheduler = new ManualScheduler(1_700_000_000_000);
      const limiter = new RedisRateLimiter({ client: redis, algorithm, rule: new Rule(2, 60_000), onStoreError: 'deny', clock: scheduler, prefix: uniquePrefix('wake') });
      await limiter.block('blocked', 3_600_000);
      let woken = false;
      const afterReset = limiter.acquire('blocked').then((decision) => ((woken = true), decision));
      await settled(scheduler, () => woken);
      await limiter.reset('blocked');
      expect(await afterReset).toMatchObject({ allowed: true, remaining: 1 });
      const reservation = await limiter.reserve('spent', 2);
      let refunded = false;
      const afterRefund = limiter.acquire('spent').then((decision) => ((refunded = true), decision));
      await settled(scheduler, () => refunded);
      expect(refunded).toBe(false);
      await reservation.settle(1);
      expect(await afterRefund).toMatchObject({ allowed: true, remaining: 0 });
      expect(scheduler.now()).toBe(1_700_000_000_000);
    });
  });

  describe('while Redis is out of reach', () => {
    test('peek and reserve are answered by the outage policy (a fallback limiter is asked its own peek); the others reject', async () => {
      const client = ioredisClient(1, { enableOfflineQueue: false });
      const fallback = new KeyedRateLimiter({ algorithm: () => new TokenBucket(new Rule(3, 60_000)) });
      try {
        const limiter = new RedisRateLimiter({ client, algorithm: 'token-bucket', rule: new Rule(5, 60_000), onStoreError: fallback, prefix: uniquePrefix('down'), timeoutMs: 200 });
        expect(await limiter.peek('k', 0)).toStrictEqual({ allowed: true, limit: 3, remaining: 3, retryAfterMs: 0, resetAfterMs: 0, degraded: 'store-error' });
        const reservation = await limiter.reserve('k', 2);
        expect(reservation.decision).toMatchObject({ allowed: true, limit: 3, remaining: 1, degraded: 'store-error' });
        expect(await reservation.settle(0)).toBe(reservation.decision); // nothing to give back in Redis
        expect(fallback.peek('k', 0).remaining).toBe(1); // the fallback's grant stands
        await expect(limiter.charge('k', 1)).rejects.toThrow();
        await expect(limiter.reset('k')).rejects.toThrow();
        await expect(limiter.block('k', 1000)).rejects.toThrow();
        const deny = new RedisRateLimiter({ client, algorithm: 'fixed-window', rule: new Rule(5, 60_000), onStoreError: 'deny', prefix: uniquePrefix('down'), timeoutMs: 200 });
        // The state now fails closed as none left, never refused (no block is known), as in PostgreSQL.
        expect(await deny.peek('k', 0)).toMatchObject({ allowed: true, remaining: 0, degraded: 'store-error' });
        const refused: Decision = await deny.peek('k');
        expect(refused).toMatchObject({ allowed: false, degraded: 'store-error' });
        expect(refused.retryAfterMs).toBeGreaterThanOrEqual(1);
      } finally {
        client.disconnect();
      }
    });
  });
});
