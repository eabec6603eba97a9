// API.md, "Admission across keys", over a store: parts whose reserve returns a Promise are reserved
// in order, and when one refuses the granted ones are cancelled (the atomic one-script admission
// over one Redis client is not this path: the two Redis parts here are on two clients; see
// admit-joint.test.ts). Against the in-memory twins decided one by one with
// refunds, on the same ManualClock: store decisions equal the twin's given the same readings. A
// granted admission is settled at once: main's Redis buckets refund reservations that overlap
// across calls safely rather than exactly (issue 24's store work), which is no part of admit.
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { admit, KeyedRateLimiter, ManualClock, Rule, type AdmittingRateLimiter } from '../../src/index';
import { RedisRateLimiter } from '../../src/redis';
import { oneByOne } from '../support/one-by-one';
import { algorithmNames, twins } from './helpers/algorithms';
import { ioredisClient, redisPort, uniquePrefix, useIoredis } from './helpers/clients';
import { startRedisServer } from './helpers/redis-server';

const KEYS = ['a', 'b'] as const;

const opArb = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('admit' as const),
      parts: fc.array(fc.record({ limiter: fc.nat(2), key: fc.nat(1), share: fc.double({ min: 0, max: 1, noNaN: true }), kept: fc.double({ min: 0, max: 2, noNaN: true }) }), { minLength: 1, maxLength: 4 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('wait' as const), dt: fc.integer({ min: 0, max: 30_000 }) }) },
);
// Windows of seconds: a key's expiry runs on Redis's own clock, which must not end it while the test's clock stands still.
const setupArb = fc.record({
  limiters: fc.array(fc.record({ algorithm: fc.constantFrom(...algorithmNames), limit: fc.integer({ min: 1, max: 6 }), windowMs: fc.integer({ min: 20_000, max: 60_000 }) }), { minLength: 3, maxLength: 3 }),
  ops: fc.array(opArb, { maxLength: 20 }),
});

describe.skipIf(redisPort === 0)('admit over Redis', () => {
  const client = useIoredis();
  const other = useIoredis();

  test.prop([setupArb], { numRuns: 30 })(
    'never grants a part unless all are, and decides as the parts one by one with refunds (two Redis parts and one in memory)',
    async ({ limiters, ops }) => {
      const clock = new ManualClock(1_700_000_000_000);
      const prefix = uniquePrefix('admit');
      // The third limiter stays in memory: an admission may mix them.
      const real = limiters.map(({ algorithm, limit, windowMs }, i) =>
        i < 2
          ? new RedisRateLimiter({ client: i === 0 ? client : other, algorithm, rule: new Rule(limit, windowMs), onStoreError: 'deny', clock, prefix, name: `l${i}`, timeoutMs: Infinity })
          : new KeyedRateLimiter({ algorithm: () => new twins[algorithm](new Rule(limit, windowMs)), clock }),
      );
      const byHand = limiters.map(({ algorithm, limit, windowMs }) => new KeyedRateLimiter({ algorithm: () => new twins[algorithm](new Rule(limit, windowMs)), clock }));
      const states = async (set: readonly (RedisRateLimiter | KeyedRateLimiter)[]) => Promise.all(set.flatMap((limiter) => KEYS.map((key) => limiter.peek(key, 0))));

      for (const op of ops) {
        if (op.kind === 'admit') {
          const permitsOf = (part: (typeof op.parts)[number]) => Math.max(1, Math.ceil(part.share * limiters[part.limiter]!.limit));
          const before = await states(real);
          // Synchronous when every part chosen is the one in memory.
          const admission = await admit(op.parts.map((part) => ({ limiter: real[part.limiter]!, key: KEYS[part.key]!, permits: permitsOf(part) })));

          const { decisions, held, refused } = oneByOne(op.parts.map((part) => ({ limiter: byHand[part.limiter]!, key: KEYS[part.key]!, permits: permitsOf(part) })));

          expect(admission.parts).toEqual(decisions);
          expect(admission.decision.allowed).toBe(!refused);
          if (refused) {
            expect(await states(real)).toEqual(before);
          } else {
            const actual = op.parts.map((part) => Math.floor(part.kept * permitsOf(part)));
            expect(await admission.settle(actual)).toEqual(held.map((reservation, i) => reservation.settle(actual[i]!)));
            await expect((async () => admission.cancel())()).rejects.toMatchObject({ code: 'ERR_RATEKEEPER_ALREADY_SETTLED' });
          }
        } else {
          clock.advance(op.dt);
        }
        expect(await states(real)).toEqual(await states(byHand));
      }
    },
  );
});

describe.skipIf(redisPort === 0)('admit over a Redis that fails', () => {
  it('a part the outage policy answered counts as it answered; a cancel that fails goes to onError and the admission stays refused', async () => {
    const redis = await startRedisServer();
    // Without an offline queue, as docs/redis.md advises: a call made while disconnected fails at once.
    const client = ioredisClient(redis.port, { enableOfflineQueue: false });
    await new Promise((resolve) => client.once('ready', resolve));
    try {
      const store = (onStoreError: 'allow' | 'deny') =>
        new RedisRateLimiter({ client, algorithm: 'token-bucket', rule: new Rule(3, 60_000), onStoreError, clock: new ManualClock(0), prefix: uniquePrefix('admit-outage'), timeoutMs: 300 });
      const allow = store('allow');
      const memory = new KeyedRateLimiter({ algorithm: () => new twins['fixed-window'](new Rule(1, 60_000)), clock: new ManualClock(0) });

      // The store answers, then fails before the refused admission gives its part back.
      const heard: [unknown, number][] = [];
      const stopping: AdmittingRateLimiter = {
        reserve: async () => {
          await redis.stop();
          const reservation = memory.reserve('full', 1);
          return { decision: reservation.decision, settle: async (actual: number) => reservation.settle(actual), cancel: async () => reservation.cancel() };
        },
        peek: (key, permits) => memory.peek(key, permits),
      };
      memory.tryAcquire('full');
      const refused = await admit([{ limiter: allow, key: 'k', permits: 2 }, { limiter: stopping, key: 'full' }], { onError: (error, part) => void heard.push([error, part]) });
      expect(refused.parts.map((d) => [d.allowed, d.degraded])).toEqual([[true, undefined], [false, undefined]]);
      expect(refused.decision.allowed).toBe(false);
      expect(heard).toHaveLength(1);
      expect(heard[0]![1]).toBe(0);

      // Redis is down: 'allow' grants (degraded, nothing to give back), 'deny' refuses.
      const granted = await admit([{ limiter: allow, key: 'k' }, { limiter: memory, key: 'other' }]);
      expect(granted.decision.allowed).toBe(true);
      expect(granted.parts[0]!.degraded).toBe('store-error');
      await expect(granted.settle([1, 1])).resolves.toHaveLength(2);
      const denied = await admit([{ limiter: memory, key: 'third' }, { limiter: store('deny'), key: 'k' }]);
      expect(denied.decision).toMatchObject({ allowed: false, degraded: 'store-error' });
      expect(memory.peek('third', 0).remaining).toBe(1);
    } finally {
      client.disconnect();
      await redis.stop();
    }
  });
});
