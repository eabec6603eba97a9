// The law of rule lookups (src/store/store-rate-limiter.ts): however long each call's lookup takes
// (answered at once, or after some turns of the event loop), the decisions on a key are made in the
// order asked, as the in-memory twin makes them one by one. (Over Redis a key operation, a peek say,
// is sent alone at once and may pass an unanswered decision whatever the lookups do: docs/redis.md.)
import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { type Decision, KeyedRateLimiter, ManualClock, Rule } from '../../src/index';
import { RedisRateLimiter } from '../../src/redis';
import { algorithmNames, twins } from './helpers/algorithms';
import { redisPort, uniquePrefix, useIoredis } from './helpers/clients';

const ruleOf = (key: string) => (key === 'a' ? new Rule(3, 60_000) : new Rule(2, 3_600_000));

/** A lookup answered at once (-1) or after `turns` turns of the event loop. */
function answer(key: string, turns: number): Rule | Promise<Rule> {
  if (turns < 0) return ruleOf(key);
  return new Promise((resolve) => {
    const hop = (left: number) => (left === 0 ? resolve(ruleOf(key)) : setImmediate(() => hop(left - 1)));
    hop(turns);
  });
}

const calls = fc.array(fc.record({ key: fc.constantFrom('a', 'b'), permits: fc.integer({ min: 1, max: 2 }), turns: fc.integer({ min: -1, max: 3 }) }), { minLength: 1, maxLength: 12 });

describe.skipIf(!redisPort)('rule lookups keep each key’s order', () => {
  const client = useIoredis();

  for (const algorithm of algorithmNames) {
    test.prop([calls], { numRuns: 15 })(`${algorithm}: calls made at once, whatever their lookups take, decide as the twin decides them in order`, async (made) => {
      const clock = new ManualClock(1_000_000);
      let next = 0;
      const limiter = new RedisRateLimiter({ client, algorithm, rule: (key: string) => answer(key, made[next++]!.turns), onStoreError: 'deny', clock, timeoutMs: 10_000, prefix: uniquePrefix('order-law') });
      const twin = new KeyedRateLimiter({ algorithm: (key) => new twins[algorithm](ruleOf(key)), clock });
      const decided = await Promise.all(made.map(({ key, permits }) => limiter.tryAcquire(key, permits)));
      const expected: Decision[] = made.map(({ key, permits }) => twin.tryAcquire(key, permits));
      expect(decided).toEqual(expected);
    });
  }
});
