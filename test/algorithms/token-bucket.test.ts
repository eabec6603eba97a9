import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { LeakyBucket, Rule, TokenBucket } from '../../src/index';
import { replay, scenarioArb } from '../support/algorithms';
import { expectTimeline } from '../support/timeline';

describe('TokenBucket', () => {
  it('a bucket of four refilling one per second: four at once, then exact waits, and a refused pair spends nothing', () => {
    expectTimeline(new TokenBucket(new Rule(4, 4000)), [
      { at: 0, allowed: true, remaining: 3 },
      { at: 0, allowed: true, remaining: 2 },
      { at: 0, allowed: true, remaining: 1 },
      { at: 0, allowed: true, remaining: 0, resetAfterMs: 4000 },
      { at: 0, allowed: false, remaining: 0, retryAfterMs: 1000 },
      { at: 500, allowed: false, remaining: 0, retryAfterMs: 500 },
      { at: 1500, permits: 2, allowed: false, remaining: 1, retryAfterMs: 500 },
      { at: 2000, permits: 2, allowed: true, remaining: 0 },
    ]);
  });

  it('keeps fractional refill: three requests 333 ms apart at 3 per second do not lose the 1/3 ms', () => {
    expectTimeline(new TokenBucket(Rule.perSecond(3)), [
      { at: 0, permits: 3, allowed: true, remaining: 0 },
      { at: 333, allowed: false, retryAfterMs: 1 },
      { at: 334, allowed: true, remaining: 0 },
      { at: 667, allowed: true, remaining: 0 },
      { at: 1000, allowed: true, remaining: 0, resetAfterMs: 1000 },
    ]);
  });

  it('is exact at epoch-sized times and huge limits, where naive floating point drifts', () => {
    const bucket = new TokenBucket(new Rule(1_000_000_007, 86_400_000));
    const t0 = 1_764_000_000_000;
    expect(bucket.tryAcquire(t0, 1_000_000_007).allowed).toBe(true);
    const { retryAfterMs } = bucket.tryAcquire(t0, 500_000_000);
    expect(bucket.tryAcquire(t0 + retryAfterMs - 1, 500_000_000).allowed).toBe(false);
    expect(bucket.tryAcquire(t0 + retryAfterMs, 500_000_000).allowed).toBe(true);
  });
});

test.prop([scenarioArb])('LeakyBucket decides exactly as TokenBucket: its level is the tokens spent', (scenario) => {
  expect(replay((rule) => new LeakyBucket(rule), scenario).decisions).toEqual(
    replay((rule) => new TokenBucket(rule), scenario).decisions,
  );
});

test.prop([fc.integer({ min: 1, max: 50 })])('a fresh LeakyBucket starts empty: a whole-limit burst fits at once', (limit) => {
  expect(new LeakyBucket(Rule.perSecond(limit)).tryAcquire(0, limit)).toMatchObject({ allowed: true, remaining: 0 });
});
