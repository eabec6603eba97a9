import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { Rule, SlidingWindowLog } from '../../src/index';
import { algorithms, composites } from '../support/algorithms';

// Clock readings need not be whole milliseconds (performance.now() is not): whatever the readings,
// a refusal says to wait at least 1 ms, so no caller is told to retry at once and refused again.

const rules = fc.record({ limit: fc.integer({ min: 1, max: 20 }), windowMs: fc.integer({ min: 1, max: 5_000 }) }).map(({ limit, windowMs }) => new Rule(limit, windowMs));
const readings = fc.record({
  start: fc.oneof(fc.double({ min: -1e6, max: 1e6, noNaN: true }), fc.double({ min: 1.7e12, max: 1.9e12, noNaN: true })),
  steps: fc.array(
    fc.record({
      // Tiny and fractional moves, whole windows give or take a hair, and plain integers.
      dt: fc.oneof(fc.double({ min: 0, max: 1e-6, noNaN: true }), fc.double({ min: 0, max: 3_000, noNaN: true }), fc.integer({ min: 0, max: 5_000 }), fc.constantFrom(999.9999999999998, 1000.0000000000001)),
      share: fc.double({ min: 0, max: 1, noNaN: true }),
      // Sometimes the reading lands on the last grant's time + windowMs as computed, or a few ulps
      // before it: the edge where rounding decides whether that grant is still in the window.
      edge: fc.option(fc.integer({ min: 0, max: 4 })),
    }),
    { minLength: 1, maxLength: 40, size: 'max' },
  ),
});

/** The double `n` steps below `x` (for x > 0). */
function ulpsBelow(x: number, n: number): number {
  const bits = new Float64Array([x]);
  const raw = new BigInt64Array(bits.buffer);
  raw[0] = raw[0]! - BigInt(x > 0 ? n : -n);
  return bits[0]!;
}

describe.each([...algorithms, ...composites])('$name with a fractional clock', ({ make }) => {
  test.prop([rules, readings])('a refusal always says to wait at least 1 ms', (rule, { start, steps }) => {
    const state = make(rule);
    let now = start;
    let lastGrant = start;
    for (const { dt, share, edge } of steps) {
      now = edge === null ? now + dt : Math.max(now, ulpsBelow(lastGrant + rule.windowMs, edge));
      const decision = state.tryAcquire(now, 1 + Math.floor(share * (rule.limit - 1)));
      if (decision.allowed) lastGrant = now;
      else {
        expect(decision.retryAfterMs).toBeGreaterThanOrEqual(1);
      }
    }
  });
});

it('SlidingWindowLog: the readings of issue 17 (a hit a hair inside the window) refuse with retryAfterMs 1', () => {
  const log = new SlidingWindowLog(new Rule(1, 1000));
  expect(log.tryAcquire(2003.2166).allowed).toBe(true);
  expect(log.tryAcquire(3003.2165999999997)).toMatchObject({ allowed: false, retryAfterMs: 1, resetAfterMs: 1 });
});
