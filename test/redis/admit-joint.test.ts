// API.md, "Admission across keys": over one Redis client with every key in one hash slot, an
// admission of RedisRateLimiter parts is one script call, atomic. Against the in-memory twins
// decided one by one with refunds, on the same ManualClock: all granted or none, each part as its
// reserve would answer (after the first refusal, as its peek), and granted parts settle as any
// reservation does.
import { fc, test } from '@fast-check/vitest';
import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { admit, KeyedRateLimiter, ManualClock, Rule } from '../../src/index';
import { RedisRateLimiter, type RedisAlgorithm, type RedisScriptClient } from '../../src/redis';
import { oneByOne } from '../support/one-by-one';
import { algorithmNames, twins } from './helpers/algorithms';
import { redisPort, uniquePrefix, useIoredis } from './helpers/clients';

const KEYS = ['a', 'b'] as const;

/** The real client, counting the EVALSHA calls it sends (an EVAL after a NOSCRIPT reply is the same call's reload). */
function counting(redis: Redis): RedisScriptClient & { calls: number } {
  const client = {
    calls: 0,
    evalsha: (sha1: string, keys: string[], args: string[]) => {
      client.calls++;
      return redis.evalsha(sha1, keys.length, ...keys, ...args);
    },
    eval: (script: string, keys: string[], args: string[]) => {
      return redis.eval(script, keys.length, ...keys, ...args);
    },
    ordered: true,
  };
  return client;
}

const partArb = fc.record({ limiter: fc.nat(3), key: fc.nat(1), share: fc.double({ min: 0, max: 1, noNaN: true }), kept: fc.double({ min: 0, max: 2, noNaN: true }) });
const opArb = fc.oneof(
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('admit' as const), parts: fc.array(partArb, { minLength: 2, maxLength: 5 }), settle: fc.boolean() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('wait' as const), dt: fc.integer({ min: 0, max: 30_000 }) }) },
);
// Windows of seconds: a key's expiry runs on Redis's own clock, which must not end it while the test's clock stands still.
const limiterArb = fc.record({ algorithm: fc.constantFrom(...algorithmNames), limit: fc.integer({ min: 1, max: 6 }), windowMs: fc.integer({ min: 20_000, max: 60_000 }) });
const setupArb = fc.record({ limiters: fc.array(limiterArb, { minLength: 4, maxLength: 4 }), ops: fc.array(opArb, { maxLength: 20 }) });

describe.skipIf(redisPort === 0)('admit over one Redis client: one atomic script', () => {
  const redis = useIoredis();

  test.prop([setupArb], { numRuns: 40 })(
    'never grants a part unless all are, and decides as the parts one by one with refunds (all five algorithms, one part in memory)',
    async ({ limiters, ops }) => {
      const clock = new ManualClock(1_700_000_000_000);
      const prefix = uniquePrefix('admit-joint');
      const client = counting(redis);
      const twin = ({ algorithm, limit, windowMs }: { algorithm: RedisAlgorithm; limit: number; windowMs: number }) =>
        new KeyedRateLimiter({ algorithm: () => new twins[algorithm](new Rule(limit, windowMs)), clock });
      // Limiter 1 chooses its rule by a function (a promise): resolved before the script goes. Limiter 3 stays in memory.
      const real = limiters.map((limiter, i) => {
        const rule = new Rule(limiter.limit, limiter.windowMs);
        if (i === 3) return twin(limiter);
        const common = { client, algorithm: limiter.algorithm, onStoreError: 'deny' as const, clock, prefix, name: `l${i}`, timeoutMs: Infinity };
        return i === 1 ? new RedisRateLimiter({ ...common, rule: async () => rule }) : new RedisRateLimiter({ ...common, rule });
      });
      const byHand = limiters.map(twin);
      const states = async (set: readonly (RedisRateLimiter<Rule> | RedisRateLimiter<() => Promise<Rule>> | KeyedRateLimiter)[]) =>
        Promise.all(set.flatMap((limiter) => KEYS.map((key) => limiter.peek(key, 0))));

      for (const op of ops) {
        if (op.kind === 'admit') {
          const permitsOf = (part: (typeof op.parts)[number]) => Math.max(1, Math.ceil(part.share * limiters[part.limiter]!.limit));
          const before = await states(real);
          const calls = client.calls;
          const admission = await admit(op.parts.map((part) => ({ limiter: real[part.limiter]!, key: KEYS[part.key]!, permits: permitsOf(part) })));
          const sent = client.calls - calls;
          const stored = op.parts.filter((part) => part.limiter !== 3).length;
          // The memory part is decided first: when it refuses, nothing is reserved in Redis (each store part is answered by its peek).
          const memoryRefused = admission.parts.some((decision, i) => op.parts[i]!.limiter === 3 && !decision.allowed);
          // Two store parts or more: one script call.
          if (stored >= 2 && !memoryRefused) expect(sent).toBe(1);

          const { decisions, held, refused } = oneByOne(op.parts.map((part) => ({ limiter: byHand[part.limiter]!, key: KEYS[part.key]!, permits: permitsOf(part) })));
          expect(admission.decision.allowed).toBe(!refused);
          // Where the memory part refused, in order a store part before it may have refused first.
          if (stored < 2 || !memoryRefused) expect(admission.parts).toEqual(decisions);
          if (refused) {
            expect(await states(real)).toEqual(before);
          } else if (op.settle) {
            const actual = op.parts.map((part) => Math.floor(part.kept * permitsOf(part)));
            expect(await admission.settle(actual)).toEqual(held.map((reservation, i) => reservation.settle(actual[i]!)));
          } else {
            await admission.cancel();
            for (const reservation of held) reservation.cancel();
          }
        } else {
          clock.advance(op.dt);
        }
        expect(await states(real)).toEqual(await states(byHand));
      }
    },
  );
});
