import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import {
  Composite,
  FixedWindow,
  KeyedRateLimiter,
  ManualClock,
  Rule,
  SlidingWindowLog,
  TokenBucket,
  type Decision,
  type PeekableAlgorithm,
} from '../../src/index';
import { algorithms } from '../support/algorithms';
import { expectTimeline } from '../support/timeline';
import { rangeError, typeError } from '../../src/core/errors';

// Composites of parts with different rules and algorithms. (Composites whose parts share a rule
// also run the whole conformance suite.)

interface PartSpec {
  readonly kind: number;
  readonly rule: Rule;
}

const partArb: fc.Arbitrary<PartSpec> = fc.record({
  kind: fc.integer({ min: 0, max: algorithms.length - 1 }),
  rule: fc
    .record({ limit: fc.integer({ min: 1, max: 12 }), windowMs: fc.oneof(fc.constantFrom(1000, 60_000, 7), fc.integer({ min: 1, max: 5000 })) })
    .map(({ limit, windowMs }) => new Rule(limit, windowMs)),
});

const build = (specs: readonly PartSpec[]) => specs.map(({ kind, rule }) => (algorithms[kind] as (typeof algorithms)[number]).make(rule));

/** Several parts, and traffic whose requests never exceed the smallest part's limit. */
const runArb = fc.array(partArb, { minLength: 1, maxLength: 3 }).chain((specs) => {
  const smallest = Math.min(...specs.map((s) => s.rule.limit));
  const longest = Math.max(...specs.map((s) => s.rule.windowMs));
  return fc.record({
    specs: fc.constant(specs),
    start: fc.oneof(fc.constant(0), fc.constant(1_764_000_000_123)),
    steps: fc.array(
      fc.record({
        dt: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 50 }), fc.integer({ min: 0, max: 2 * longest })),
        permits: fc.integer({ min: 1, max: smallest }),
      }),
      { maxLength: 40, size: 'max' }, // fast-check would keep arrays to ~10 elements otherwise
    ),
  });
});


describe('Composite', () => {
  test.prop([runArb])('never allows more than any part allows alone, and allows whenever every part would', ({ specs, start, steps }) => {
    const composite = new Composite(build(specs));
    // Twins of the parts that see only what the composite granted: what each rule alone would say.
    const twins = build(specs);
    let now = start;
    for (const { dt, permits } of steps) {
      now += dt;
      const expected = twins.every((twin) => twin.peek(now, permits).allowed);
      expect(composite.tryAcquire(now, permits).allowed).toBe(expected);
      if (expected) for (const twin of twins) expect(twin.tryAcquire(now, permits).allowed).toBe(true);
    }
  });

  test.prop([runArb])('a refusal by one part spends nothing in the others', ({ specs, start, steps }) => {
    const composite = new Composite(build(specs));
    let now = start;
    for (const { dt, permits } of steps) {
      now += dt;
      const before = structuredClone(composite.parts);
      if (!composite.tryAcquire(now, permits).allowed) expect(composite.parts).toEqual(before);
    }
  });

  test.prop([runArb, fc.nat()])('retryAfterMs is exact: every part allows together at it, and not one ms before', ({ specs, start, steps }, size) => {
    const composite = new Composite(build(specs));
    let now = start;
    for (const { dt, permits } of steps) composite.tryAcquire((now += dt), permits);
    const permits = 1 + (size % Math.min(...specs.map((s) => s.rule.limit)));
    const decision = composite.peek(now, permits);
    if (decision.allowed) return;
    expect(decision.retryAfterMs).toBeGreaterThanOrEqual(1);
    expect(composite.peek(now + decision.retryAfterMs - 1, permits).allowed).toBe(false);
    expect(composite.peek(now + decision.retryAfterMs, permits).allowed).toBe(true);
  });

  test.prop([runArb])('remaining is the smallest of the parts, is truthful, and comes with the binding part’s limit', ({ specs, start, steps }) => {
    const composite = new Composite(build(specs));
    let now = start;
    for (const { dt, permits } of steps) {
      now += dt;
      const decision = composite.tryAcquire(now, permits);
      const left = composite.parts.map((part) => availableNow(part, now));
      const fewest = Math.min(...left);
      // Allowed, it has spent and reports what is left; refused, nothing changed: either way, what the parts have now.
      expect(decision.remaining).toBe(fewest);
      expect(decision.limit).toBe(composite.parts[left.indexOf(fewest)]?.peek(now, 1).limit);
      if (fewest >= 1) expect(composite.peek(now, fewest).allowed).toBe(true);
      if (fewest < Math.min(...specs.map((s) => s.rule.limit))) expect(composite.peek(now, fewest + 1).allowed).toBe(false);
    }
  });

  it('holds a key to 3 per second and 5 per ten seconds at once, the tighter rule reporting', () => {
    expectTimeline(new Composite([new TokenBucket(Rule.perSecond(3)), new FixedWindow(new Rule(5, 10_000))]), [
      { at: 0, permits: 3, allowed: true, remaining: 0 },
      { at: 0, allowed: false, remaining: 0, retryAfterMs: 334 },
      { at: 1000, permits: 3, allowed: false, remaining: 2, retryAfterMs: 9000, resetAfterMs: 9000 },
      { at: 1000, permits: 2, allowed: true, remaining: 0, resetAfterMs: 9000 },
      { at: 5000, allowed: false, remaining: 0, retryAfterMs: 5000 },
      { at: 10_000, permits: 3, allowed: true, remaining: 0 },
    ]);
  });

  it('waits for the moment every part allows together, even when a part that allows now refuses then', () => {
    // Open 500 ms of every second: a custom part whose refusal does not ease steadily with time.
    const openHours: PeekableAlgorithm = {
      tryAcquire: (nowMs) => openHours.peek(nowMs),
      peek: (nowMs): Decision => {
        const into = nowMs % 1000;
        if (into < 500) return { allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 0 };
        return { allowed: false, limit: 1, remaining: 0, retryAfterMs: 1000 - into, resetAfterMs: 0 };
      },
      isIdle: () => true,
    };
    const composite = new Composite([openHours, new TokenBucket(new Rule(1, 700))]);
    expect(composite.tryAcquire(100).allowed).toBe(true);
    // The bucket allows at 800, but the shop is closed then; both agree at 1000.
    expect(composite.peek(300)).toMatchObject({ allowed: false, retryAfterMs: 700 });
    expect(composite.peek(999).allowed).toBe(false);
    expect(composite.peek(1000).allowed).toBe(true);
  });

  it('flattens nested composites, and serves as the keyed limiter’s factory result', () => {
    const inner = new Composite([new TokenBucket(Rule.perSecond(2)), new SlidingWindowLog(Rule.perMinute(3))]);
    const outer = new Composite([inner, new FixedWindow(Rule.perHour(10))]);
    expect(outer.parts).toHaveLength(3);
    const clock = new ManualClock();
    const limiter = new KeyedRateLimiter({
      algorithm: () => new Composite([new TokenBucket(Rule.perSecond(2)), new SlidingWindowLog(Rule.perMinute(3))]),
      clock,
    });
    expect(limiter.tryAcquire('a', 2)).toMatchObject({ allowed: true, limit: 2, remaining: 0 });
    clock.advance(1000);
    expect(limiter.tryAcquire('a', 2)).toMatchObject({ allowed: false, limit: 3, remaining: 1, retryAfterMs: 59_000 });
    expect(limiter.tryAcquire('b', 2)).toMatchObject({ allowed: true });
  });

  it('refuses bad parts and bad permits with errors naming them, spending nothing', () => {
    expect(() => new Composite([])).toThrow(typeError('ratekeeper: `parts` must be a non-empty array of algorithms, got an array'));
    expect(() => new Composite('x' as never)).toThrow(TypeError);
    expect(() => new Composite([new TokenBucket(Rule.perSecond(1)), {} as never])).toThrow(
      typeError('ratekeeper: `parts[1]` must be an algorithm with tryAcquire, peek and isIdle, got an object'),
    );
    const bucket = new TokenBucket(Rule.perSecond(3));
    expect(() => new Composite([bucket, bucket])).toThrow(/the same algorithm twice/);
    const composite = new Composite([new TokenBucket(Rule.perSecond(5)), new FixedWindow(Rule.perSecond(3))]);
    const before = structuredClone(composite.parts);
    expect(() => composite.tryAcquire(0, 4)).toThrow(rangeError('ratekeeper: `permits` must be an integer from 1 to 3, got 4'));
    expect(() => composite.tryAcquire(Number.NaN)).toThrow(rangeError('ratekeeper: `nowMs` must be a finite number, got NaN'));
    expect(composite.parts).toEqual(before);
  });
});

/** Whole permits a part has available now, read without spending. */
function availableNow(part: PeekableAlgorithm, now: number): number {
  const probe = part.peek(now, 1);
  return probe.allowed ? probe.remaining + 1 : probe.remaining;
}
