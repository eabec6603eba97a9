// Two handles on one buffer, each reading its own clock, readings going backwards and each behind
// the other's at times (two workers on systemClock differ by a fraction of a millisecond; a test
// clock by anything). A reading behind what the buffer already holds counts as no time passed.
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { ManualClock, Rule } from '../../src/index';
import { rateLimitHeaders } from '../../src/http';
import { SharedKeyedRateLimiter, type SharedAlgorithm } from '../../src/shared';

const ALGORITHMS: SharedAlgorithm[] = ['token-bucket', 'leaky-bucket', 'fixed-window', 'sliding-window-log', 'sliding-window-counter'];

const runArb = fc.record({
  limit: fc.integer({ min: 1, max: 20 }),
  windowMs: fc.integer({ min: 1, max: 10_000 }),
  steps: fc.array(fc.record({ second: fc.boolean(), at: fc.double({ min: 0, max: 10, noNaN: true }), permits: fc.integer({ min: 1, max: 20 }) }), { minLength: 1, maxLength: 60 }),
});

/** Two handles on one buffer, each with its own clock. */
function twoHandles(algorithm: SharedAlgorithm, rule: Rule) {
  const clocks = [new ManualClock(0), new ManualClock(0)] as const;
  const first = new SharedKeyedRateLimiter({ algorithm, rule, maxKeys: 4, clock: clocks[0] });
  return { clocks, handles: [first, SharedKeyedRateLimiter.attach(first.buffer, { clock: clocks[1] })] as const };
}

describe.each(ALGORITHMS)('shared %s, two handles on backward clocks', (algorithm) => {
  test.prop([runArb], { numRuns: 200 })(
    'remaining is never negative, nor above the limit, and the headers can always be written',
    ({ limit, windowMs, steps }) => {
      const { clocks, handles } = twoHandles(algorithm, new Rule(limit, windowMs));
      for (const { second, at, permits } of steps) {
        const i = second ? 1 : 0;
        clocks[i].set(Math.floor(at * windowMs));
        const decision = handles[i].tryAcquire('k', 1 + ((permits - 1) % limit));
        expect(decision.remaining, JSON.stringify(decision)).toBeGreaterThanOrEqual(0);
        expect(decision.remaining).toBeLessThanOrEqual(limit);
        expect(decision.retryAfterMs).toBeGreaterThanOrEqual(0);
        expect(() => rateLimitHeaders(decision)).not.toThrow();
      }
    },
  );
});

describe.each<SharedAlgorithm>(['token-bucket', 'leaky-bucket'])('shared %s, two handles on backward clocks', (algorithm) => {
  test.prop([runArb], { numRuns: 200 })(
    'a reading behind the stored time counts as no time passed: never more granted than the limit plus what the latest reading refilled',
    ({ limit, windowMs, steps }) => {
      const { clocks, handles } = twoHandles(algorithm, new Rule(limit, windowMs));
      let granted = 0;
      let latest = 0;
      for (const { second, at, permits } of steps) {
        const i = second ? 1 : 0;
        const reading = Math.floor(at * windowMs);
        latest = Math.max(latest, reading);
        clocks[i].set(reading);
        const asked = 1 + ((permits - 1) % limit);
        if (handles[i].tryAcquire('k', asked).allowed) granted += asked;
        // A full bucket at 0, refilled at limit per windowMs up to the latest reading any handle made.
        expect(granted).toBeLessThanOrEqual(limit + Math.floor((latest * limit) / windowMs));
      }
    },
  );
});

describe.each<SharedAlgorithm>(['token-bucket', 'leaky-bucket'])('shared %s counted in BigInt (a capacity of 2^52 units or more)', (algorithm) => {
  it('a reading behind the spender’s sees the bucket empty, never less than empty', () => {
    const rule = new Rule(1025, 2 ** 42); // 1025 × 2^42 scaled units: past 2^52, the wide path
    const { clocks, handles } = twoHandles(algorithm, rule);
    clocks[0].set(2 ** 43);
    expect(handles[0].tryAcquire('k', 1025).remaining).toBe(0);
    expect(handles[1].tryAcquire('k')).toEqual({ allowed: false, limit: 1025, remaining: 0, retryAfterMs: Math.ceil(2 ** 42 / 1025), resetAfterMs: 2 ** 42 });
    expect(handles[1].peek('k', 1025).remaining).toBe(0);
  });
});
