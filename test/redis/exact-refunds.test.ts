// DESIGN-24 D4 over Redis: a bucket's refunds are exact with overlapping reservations. Once every
// reservation is settled, the key is as its twin that reserved only what each kept, whatever the
// settlement order, with plain traffic and charges in between. The twin is the in-memory bucket,
// spending at each grant's reading what that reservation will keep (a charge, which fits wherever
// the reservation's grant did: the twin never holds less).
import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { LeakyBucket, ManualClock, Rule, TokenBucket } from '../../src/index';
import { type RedisAlgorithm, RedisRateLimiter } from '../../src/redis';
import type { AsyncReservation } from '../../src/limiter/reservation';
import { redisPort, uniquePrefix, useIoredis } from './helpers/clients';

const buckets = [
  ['token-bucket', TokenBucket],
  ['leaky-bucket', LeakyBucket],
] as const;

describe.skipIf(!redisPort)('exact bucket refunds over Redis', () => {
  const redis = useIoredis();

  test.each(['token-bucket', 'leaky-bucket', 'fixed-window', 'sliding-window-counter', 'sliding-window-log'] as const)(
    '%s: a key keeps receipts for its 64 newest outstanding reservations; the 65th voids the oldest, whose refund gives nothing',
    async (algorithm) => {
      const clock = new ManualClock(1_700_000_000_000);
      const limiter = new RedisRateLimiter({ client: redis, algorithm, rule: Rule.perMinute(1_000), onStoreError: 'deny', clock, prefix: uniquePrefix('bound') });
      const reservations: AsyncReservation[] = [];
      for (let i = 0; i < 65; i++) reservations.push(await limiter.reserve('k', 2));
      expect(await limiter.peek('k', 0)).toMatchObject({ remaining: 870 });
      expect(await reservations[0]!.settle(0)).toMatchObject({ remaining: 870 });
      expect(await reservations[1]!.settle(0)).toMatchObject({ remaining: 872 });
      expect(await reservations[64]!.settle(1)).toMatchObject({ remaining: 873 });
    },
  );

  const rules = fc.oneof(
    fc.record({ limit: fc.integer({ min: 1, max: 50 }), windowMs: fc.integer({ min: 1_000, max: 100_000 }) }),
    // Wide buckets: a capacity past 2^52 units.
    fc.record({ limit: fc.integer({ min: 2 ** 40, max: 2 ** 50 }), windowMs: fc.integer({ min: 86_400_001, max: 86_500_000 }) }),
  ).map(({ limit, windowMs }) => new Rule(limit, windowMs));

  const event = fc.record({
    moveMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 3_000 }), fc.integer({ min: 0, max: 100_000 })),
    kind: fc.constantFrom('reserve', 'reserve', 'settle', 'settle', 'acquire', 'charge'),
    share: fc.double({ min: 0, max: 1, noNaN: true }),
    kept: fc.double({ min: 0, max: 1, noNaN: true }),
    pick: fc.nat(),
  });

  for (const [algorithm, Twin] of buckets) {
    test.prop([rules, fc.array(event, { minLength: 1, maxLength: 40 })], { numRuns: 60 })(
      `${algorithm}: overlapping reservations settled in any order, with traffic and charges between, leave the key as the twin that reserved only what each kept`,
      async (rule, events) => {
        const clock = new ManualClock(1_700_000_000_000);
        const limiter = new RedisRateLimiter({ client: redis, algorithm: algorithm as RedisAlgorithm, rule, onStoreError: 'deny', clock, prefix: uniquePrefix('refunds'), timeoutMs: 5_000 });
        const twin = new Twin(rule);
        const outstanding: { reservation: AsyncReservation; kept: number }[] = [];
        // Charges stay within one limit in all, so that neither key reaches the debt bound (where
        // the key forgives, and voids its receipts).
        let charged = 0;
        const permitsOf = (share: number) => 1 + Math.floor(share * (Math.min(rule.limit, 1000) - 1));
        const settleOne = async (pick: number) => {
          const { reservation, kept } = outstanding.splice(pick % outstanding.length, 1)[0]!;
          await reservation.settle(kept);
        };
        for (const { moveMs, kind, share, kept, pick } of events) {
          clock.advance(moveMs);
          if (kind === 'reserve' && outstanding.length < 16) {
            const permits = permitsOf(share);
            const reservation = await limiter.reserve('k', permits);
            if (!reservation.decision.allowed) continue;
            const keeps = Math.floor(kept * permits);
            outstanding.push({ reservation, kept: keeps });
            if (keeps > 0) twin.charge(clock.now(), keeps);
          } else if (kind === 'settle' && outstanding.length > 0) {
            await settleOne(pick);
          } else if (kind === 'acquire') {
            const permits = permitsOf(share);
            if ((await limiter.tryAcquire('k', permits)).allowed) twin.charge(clock.now(), permits);
          } else if (kind === 'charge' && charged + permitsOf(share) <= rule.limit) {
            charged += permitsOf(share);
            await limiter.charge('k', permitsOf(share));
            twin.charge(clock.now(), permitsOf(share));
          }
        }
        while (outstanding.length > 0) await settleOne(0);
        for (const permits of [0, 1, permitsOf(0.5), Math.min(rule.limit, 1000)]) {
          const { degraded, ...decision } = await limiter.peek('k', permits);
          expect(degraded).toBeUndefined();
          expect(decision).toStrictEqual({ ...twin.peek(clock.now(), permits) });
        }
      },
    );
  }
});
